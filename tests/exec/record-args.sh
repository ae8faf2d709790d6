#!/bin/sh
# record-args.sh ARG...: writes each argument it received on its own line to
# the file named by $EXEC_ARGS_FILE (written whole, then renamed, so a test
# never reads half of it). It never evaluates an argument: what a test reads
# back is exactly what the command received.
: "${EXEC_ARGS_FILE:?EXEC_ARGS_FILE must name the file to write}"
tmp="$EXEC_ARGS_FILE.tmp.$$"
: >"$tmp"
for arg in "$@"; do
  printf '%s\n' "$arg" >>"$tmp"
done
mv "$tmp" "$EXEC_ARGS_FILE"
echo "recorded $# arguments"
