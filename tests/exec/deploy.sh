#!/bin/sh
# deploy.sh PIPELINE ARTIFACT ENVIRONMENT: a pretend deploy. Records its
# arguments in $EXEC_STATE/PIPELINE.deploy.args; in the environment
# "deployfail" it fails with exit 4 and an error on stderr.
set -u
state=${EXEC_STATE:?EXEC_STATE must name a directory}
id=$1 env=$3
EXEC_ARGS_FILE="$state/$id.deploy.args" "$(dirname "$0")/record-args.sh" "$@" >/dev/null
echo "applying the new image to $env"
if [ "$env" = deployfail ]; then
  echo "kubectl: connection refused" >&2
  exit 4
fi
echo "applied"
