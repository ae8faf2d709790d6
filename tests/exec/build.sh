#!/bin/sh
# build.sh PIPELINE ENVIRONMENT [ARG...]: a pretend image build.
# Writes its pid to $EXEC_STATE/PIPELINE.build.pid and its arguments to
# $EXEC_STATE/PIPELINE.build.args, prints some output on both streams, and
# succeeds after a moment. In an environment named hold* it never finishes
# on its own (it waits to be stopped or killed).
set -u
state=${EXEC_STATE:?EXEC_STATE must name a directory}
id=$1 env=$2
echo $$ >"$state/$id.build.pid"
EXEC_ARGS_FILE="$state/$id.build.args" "$(dirname "$0")/record-args.sh" "$@" >/dev/null
echo "building $id for $env"
echo "warning: using a pretend compiler" >&2
case $env in
  hold*) while :; do sleep 0.1; done ;;
esac
sleep 0.2
echo "image pushed"
