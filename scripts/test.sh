#!/usr/bin/env bash
# README's test command: install what is missing, build, and run every suite
# twice — once normally, once under AddressSanitizer + UBSan — each against
# its own throwaway MariaDB, after the style checks (clang-format, luacheck);
# then the fuzz suite once (each libFuzzer harness of fuzz/ for 5 s — a smoke
# run plus its regressions — in build-fuzz/). Ends with one line:
# "N passed, N failed".
#   scripts/test.sh              both passes and the fuzz suite
#   scripts/test.sh --quick      the normal pass only
#   OOPS_SERIAL=1 scripts/test.sh   the two passes one after the other
# The two passes run side by side, each in two halves (unit, spec and
# integration; scenarios): three lanes at once — each pass's first half, and
# the scenarios of both one after the other — every run of tests/run.sh its
# own MariaDB, work directory, databases, ports and namespaces. Their suites
# mostly wait on servers and timers (a campaign of chaos uses a tenth of a
# core), so together they take little longer than the longest (the normal
# pass's integration, about 17 min). A fourth lane was tried: its load made
# timing tests flaky. Side by side, each scenario runs in one pass only
# (tests/run.sh: "-- ci: normal pass").
# Each run's output is printed whole when all have ended.
set -uo pipefail
cd "$(dirname "$0")/.."
quick=0; [[ "${1:-}" == "--quick" ]] && { quick=1; shift; }
if ((quick)); then bash scripts/setup.sh || exit 1; else bash scripts/setup.sh --asan --fuzz || exit 1; fi

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
total_p=0 total_f=0
count() { # label, output file: add its result line to the totals
  local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$2" | tail -n 1)
  if [[ $line =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    total_p=$((total_p + BASH_REMATCH[1])); total_f=$((total_f + BASH_REMATCH[2]))
  else
    echo "($1: the run ended without a result line)"; total_f=$((total_f + 1))
  fi
}
pass() { # label, build dir, suites... (none: tests/run.sh's default ones): in the foreground
  echo "=== $1"
  bash tests/run.sh "$2" "${@:3}" 2>&1 | tee "$logs/fg"
  count "$1" "$logs/fg"
}
started=() # labels of passes running in the background, in order
# Each lane is bounded too (each file of it is, by tests/run.sh): a lane still
# running after $OOPS_LANE_SECONDS (2400; the scenarios' lane half of it for
# each pass) is stopped, what it printed so far shown and counted as a
# failure, so that the run always ends with its line, well before a CI's own
# limit. (Far above a lane's usual time: a slow lane is a finding, not a kill.)
lane_limit=${OOPS_LANE_SECONDS:-2400}
lane() { local secs=$1; shift; timeout -k 30 "$secs" bash tests/run.sh "$@"; }
start() { # n, label, build dir, suites...: in the background, output to $logs/n
  local n=$1; shift
  started+=("$n:$1")
  lane "$lane_limit" "$2" "${@:3}" >"$logs/$n" 2>&1 &
}
finish() { # wait for every background pass, print each, count it
  wait
  local s
  for s in "${started[@]}"; do
    echo "=== ${s#*:}"
    cat "$logs/${s%%:*}"
    count "${s#*:}" "$logs/${s%%:*}"
  done
  started=()
}

pass "style: clang-format and luacheck" build style
if ((quick)); then
  pass "normal build" build
elif [[ -n ${OOPS_SERIAL:-} ]]; then
  pass "normal build" build
  pass "AddressSanitizer + UBSan build" build-asan
else
  echo "=== normal build and AddressSanitizer + UBSan build, side by side (printed when all end)"
  # tests/run.sh: then each scenario runs in one pass, the sanitizer pass
  # unless it is marked "-- ci: normal pass"
  export OOPS_BOTH_PASSES=1
  start 1 "normal build: unit, spec, integration" build unit spec integration
  start 2 "AddressSanitizer + UBSan build: unit, spec, integration" build-asan unit spec integration
  # the scenarios of both passes, one after the other (each runs in one pass)
  started+=("3:normal build: scenarios" "4:AddressSanitizer + UBSan build: scenarios")
  # (half the limit each)
  { lane $((lane_limit / 2)) build scenarios >"$logs/3" 2>&1
    lane $((lane_limit / 2)) build-asan scenarios >"$logs/4" 2>&1; } &
  finish
fi
((quick)) || pass "fuzz: each harness 5 s (ASan + UBSan)" build-fuzz fuzz
echo "$total_p passed, $total_f failed"
((total_f == 0))
