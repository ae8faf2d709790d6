#!/bin/sh
# health.sh PIPELINE ENVIRONMENT: a pretend rollout check, with the exec
# gateway's exit codes: 0 ready, 1 not ready yet, 2 workload missing, other
# failure. The first call reports not ready, the next ones ready (a call
# count is kept in $EXEC_STATE/PIPELINE.health.n). In the environment "gone"
# the workload is missing; in "sick" the rollout fails.
set -u
state=${EXEC_STATE:?EXEC_STATE must name a directory}
id=$1 env=$2
n=$(cat "$state/$id.health.n" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" >"$state/$id.health.n"
case $env in
  gone) echo "deployment web not found" >&2; exit 2 ;;
  sick) echo "waiting for pods"; echo "pod web-0: CrashLoopBackOff" >&2; exit 3 ;;
esac
if [ "$n" -lt 2 ]; then
  echo "1/2 replicas ready"
  exit 1
fi
echo "2/2 replicas ready"
