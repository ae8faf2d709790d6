#!/usr/bin/env bash
# bench/repeat.sh BUILD_DIR N TEST [HOGS]: run one test (tests/run.sh's
# integration/NAME or scenarios/NAME) N times in a row on BUILD_DIR, each on a
# MariaDB of its own, beside HOGS busy loops (default 0; one per core is "a
# CPU hog" as issue 36 asks: the test's servers and database share the cores
# with them). Prints one line per run and the count; a failed run's output is
# kept in bench/results/repeat-NAME-RUN.log. Exit 0 only when every run passed.
#   bench/repeat.sh build 30 scenarios/watch_ring 2
#   bench/repeat.sh build-asan 30 scenarios/watch_ring 2
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:?usage: bench/repeat.sh BUILD_DIR N TEST [HOGS]}
n=${2:?usage: bench/repeat.sh BUILD_DIR N TEST [HOGS]}
test=${3:?usage: bench/repeat.sh BUILD_DIR N TEST [HOGS]}
hogs=${4:-0}
[[ $n =~ ^[0-9]+$ && $hogs =~ ^[0-9]+$ ]] || { echo "bench/repeat.sh: N and HOGS are counts" >&2; exit 2; }
pids=()
stop_hogs() { ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; }
trap stop_hogs EXIT
for ((h = 0; h < hogs; h++)); do
  (while :; do :; done) &
  pids+=($!)
done
mkdir -p "$here/results"
name=${test##*/}
passed=0 failed=0
for ((i = 1; i <= n; i++)); do
  t0=$(date +%s)
  out=$(bash "$root/tests/run.sh" "$build" "$test" 2>&1)
  rc=$?
  last=$(tail -1 <<<"$out")
  if ((rc == 0)) && [[ $last == *" 0 failed" ]]; then
    passed=$((passed + 1))
    echo "run $i: ok ($last, $(($(date +%s) - t0)) s)"
  else
    failed=$((failed + 1))
    printf '%s\n' "$out" >"$here/results/repeat-$name-$i.log"
    echo "run $i: FAILED ($last): bench/results/repeat-$name-$i.log"
  fi
done
echo "$test on $build, $hogs hog(s): $passed of $n passed, $failed failed"
((failed == 0))
