#!/bin/sh
# A notify command route for tests: appends what it reads on stdin (one JSON
# message) to the file $1, as one line. $OOPS_EVENT_ID names the event.
# Exits 1 without reading when the file $1.fail exists, to fake a failing command.
[ -e "$1.fail" ] && { echo "failing on purpose" >&2; exit 1; }
msg=$(cat)
printf '%s\n' "$msg" >>"$1"
