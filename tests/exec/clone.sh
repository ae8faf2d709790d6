#!/bin/sh
# clone.sh clone [--upload-pack=CMD] REPO DIR: a pretend `git clone`. Like
# git's, an --upload-pack=CMD option runs CMD (through sh): what a source
# value shaped like an option would do to a real build. Every call is
# appended to $CLONE_LOG ("clone ARG..."); the clone itself is a directory
# DIR holding the file REPO names.
set -eu
: "${CLONE_LOG:?CLONE_LOG must name the file to append to}"
echo "clone $*" | sed 's/^clone clone /clone /' >>"$CLONE_LOG"
[ "${1:-}" = clone ] && shift
case ${1:-} in
  --upload-pack=*) sh -c "${1#--upload-pack=}"; shift ;;
esac
repo=${1:?clone.sh: no repository} dir=${2:?clone.sh: no directory}
mkdir -p "$dir"
printf '%s\n' "$repo" >"$dir/repo"
echo "cloned $repo into $dir"
