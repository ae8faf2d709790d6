#!/bin/sh
# ci.sh: a pretend external build system (a CI server, a Kubernetes Job) for
# the exec gateway's external builds, keeping its jobs in $CI_DIR so every
# oopsd — and the test — sees the same ones:
#   ci.sh submit ID ARTIFACT [REPO REF]   start a job; prints "building ..."
#                                         then its handle "job-ID-N" last
#   ci.sh status JOB    exit 0 succeeded, 1 running, 2 missing, 3 failed
#   ci.sh cancel JOB    mark it cancelled (then status says failed)
# Every call is appended to $CI_DIR/calls ("submit ID", "cancel JOB", ...),
# which the tests count. A job takes $CI_BUILD_SECONDS (default 3) seconds;
# an artifact containing "fail" fails, one containing "slow" never ends by
# itself; for one containing "dash-handle", submit prints "--help" as its
# handle (a CI system whose output oopsd must not pass on as an option).
# Deleting $CI_DIR/jobs/JOB makes it missing.
set -eu
dir=${CI_DIR:?CI_DIR must name a directory}
mkdir -p "$dir/jobs"
now() { date +%s%N; }
cmd=$1; shift
case $cmd in
  submit)
    id=$1 artifact=$2
    echo "submit $*" >>"$dir/calls"
    n=$(ls "$dir/jobs" | grep -c "^job-$id-" || true)
    job="job-$id-$((n + 1))"
    mkdir "$dir/jobs/$job"
    printf '%s\n' "$artifact" >"$dir/jobs/$job/artifact"
    printf '%s\n' "$*" >"$dir/jobs/$job/args"
    echo $(( $(now) + ${CI_BUILD_SECONDS:-3} * 1000000000 )) >"$dir/jobs/$job/done_at"
    echo "building $artifact for $id"
    case $artifact in
      *dash-handle*) echo "--help" ;;
      *) echo "$job" ;;
    esac
    ;;
  status)
    job=$1
    echo "status $job" >>"$dir/calls.status"
    [ -d "$dir/jobs/$job" ] || { echo "no job $job" >&2; exit 2; }
    [ -e "$dir/jobs/$job/cancelled" ] && { echo "cancelled" >&2; exit 3; }
    case $(cat "$dir/jobs/$job/artifact") in
      *slow*) exit 1 ;;
    esac
    [ "$(now)" -ge "$(cat "$dir/jobs/$job/done_at")" ] || exit 1
    case $(cat "$dir/jobs/$job/artifact") in
      *fail*) echo "compile error" >&2; exit 3 ;;
    esac
    exit 0
    ;;
  cancel)
    job=$1
    echo "cancel $job" >>"$dir/calls"
    [ -d "$dir/jobs/$job" ] && : >"$dir/jobs/$job/cancelled"
    exit 0
    ;;
  *) echo "ci.sh: unknown command $cmd" >&2; exit 64 ;;
esac
