#!/usr/bin/env bash
# README's test command: install what is missing, build, and run every suite
# twice — once normally, once under AddressSanitizer + UBSan — each against
# its own throwaway MariaDB, after the style checks (clang-format, luacheck);
# then the fuzz suite once (each libFuzzer harness
# of fuzz/ for 30 s, build-fuzz/). Ends with one line: "N passed, N failed".
#   scripts/test.sh              both passes and the fuzz suite
#   scripts/test.sh --quick      the normal pass only
set -uo pipefail
cd "$(dirname "$0")/.."
quick=0; [[ "${1:-}" == "--quick" ]] && { quick=1; shift; }
if ((quick)); then bash scripts/setup.sh || exit 1; else bash scripts/setup.sh --asan --fuzz || exit 1; fi

total_p=0 total_f=0
pass() { # label, build dir, suites... (none: tests/run.sh's default ones)
  echo "=== $1"
  local out rc
  out=$(mktemp)
  bash tests/run.sh "$2" "${@:3}" 2>&1 | tee "$out"
  local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -n 1)
  rm -f "$out"
  if [[ $line =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    total_p=$((total_p + BASH_REMATCH[1])); total_f=$((total_f + BASH_REMATCH[2]))
  else
    echo "($1: the run ended without a result line)"; total_f=$((total_f + 1))
  fi
}
pass "style: clang-format and luacheck" build style
pass "normal build" build
((quick)) || pass "AddressSanitizer + UBSan build" build-asan
((quick)) || pass "fuzz: each harness 30 s (ASan + UBSan)" build-fuzz fuzz
echo "$total_p passed, $total_f failed"
((total_f == 0))
