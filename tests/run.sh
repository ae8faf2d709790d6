#!/usr/bin/env bash
# One pass of every suite against a throwaway MariaDB that this script starts
# in a temporary directory and always removes (also on failure or Ctrl-C).
#   tests/run.sh BUILD_DIR [SUITE...]     SUITE: unit spec integration scenarios
#                                         (and, not by default: style fuzz), or
#                                         one file: integration/NAME[.sh],
#                                         scenarios/NAME[.lua], spec/NAME[_spec]
# Prints each suite's results and ends with "N passed, N failed". A test that
# reports "ok N # SKIP why" is listed as skipped (with why), not counted as passed.
# Scenarios get a fresh database of that server each (OOPS_DB), except one whose
# first lines say `-- needs: own database` (or `-- needs: network namespaces`):
# it runs without --db and starts, restarts and removes a MariaDB of its own
# (lua/oops/scenario/mariadb.lua) in its work directory, under this run's directory.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$(cd "${1:?usage: tests/run.sh BUILD_DIR [SUITE...]}" && pwd); shift
suites=("$@"); ((${#suites[@]})) || suites=(unit spec integration scenarios)

source "$here/lib/mariadb.sh"
work=$(mktemp -d /tmp/oops-test.XXXXXX)
current= # the running test's timeout(1), the leader of its process group
cleanup() {
  [[ -n $current ]] && kill -KILL -- "-$current" 2>/dev/null
  # Any oopsd a test left behind dies with the run.
  pkill -KILL -f "$work/" 2>/dev/null
  mariadb_stop
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mariadb_start "$work/mariadb" || exit 1
# The URL has no password (tests pass it in argv): oopsctl and oopsd read it
# from the file mariadb_start exported as OOPS_DB_PASSWORD_FILE.
export OOPS_TEST_DB="$MDB_URL" OOPS_BUILD="$build" OOPS_ROOT="$root" OOPS_TEST_WORK="$work"
# Temporary files of every test (a scenario's servers' directories among them)
# under this run's directory: removed with it, and its servers found by
# cleanup's pkill even when the runner that started them was killed.
export TMPDIR=$work
# Sanitizer reports of every process — oopsd servers started by the tests
# included — land in $work/sanitizer.*; any such file fails the run.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}:log_path=$work/sanitizer"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}:log_path=$work/sanitizer"
export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0"

passed=0 failed=0
failures=() skipped=()

# Run one test program; count its TAP lines ("ok" / "not ok"). A program that
# exits non-zero without reporting a failure (a crash, a sanitizer report)
# counts as one failure. Each is bounded: after $OOPS_TEST_SECONDS (600, three
# times the slowest file's time under the sanitizers) it and every process of
# its group are stopped, a failure that names it (a hung test costs one
# failure, never the whole run).
limit=${OOPS_TEST_SECONDS:-600}
run_one() { # name, command...
  local name=$1; shift
  local log="$work/log.$(echo "$name" | tr '/ ' '__')"
  local t0=$SECONDS
  # In the background, waited for: a TERM or Ctrl-C to this script is acted
  # on at once, and cleanup stops the test's whole process group.
  timeout -k 10 "$limit" "$@" >"$log" 2>&1 </dev/null &
  current=$!
  wait "$current"
  local rc=$?
  current=
  if ((rc == 124 || rc == 137)) && ((SECONDS - t0 >= limit)); then
    echo "not ok - $name did not end within $limit s (OOPS_TEST_SECONDS): stopped" >>"$log"
  fi
  local ok nok sk
  ok=$(grep -cE '^ok ' "$log")
  nok=$(grep -cE '^not ok ' "$log")
  # A skip ("ok N # SKIP why") is shown as one, never counted as a pass.
  sk=$(grep -ciE '^ok [0-9]+ # skip' "$log")
  ok=$((ok - sk))
  if ((rc != 0 && nok == 0)); then nok=1; echo "not ok - $name exited $rc" >>"$log"; fi
  passed=$((passed + ok)); failed=$((failed + nok))
  printf '  %-44s %3d passed %3d failed  (%ds)\n' "$name" "$ok" "$nok" $((SECONDS - t0))
  if ((sk)); then
    skipped+=("$name")
    grep -iE '^ok [0-9]+ # skip' "$log" | sed -E 's/^ok [0-9]+ # [Ss][Kk][Ii][Pp] ?/    SKIPPED: /'
  fi
  if ((nok)); then
    failures+=("$name")
    echo "----- $name -----"
    # The failures and their diagnostics first (a log's error lines that
    # passing tests expect would hide them), then what else went wrong.
    { awk '/^not ok /{ show = 1; print; next } /^(ok|not ok) / { show = 0 } show && /^#/' "$log" | head -60
      grep -E 'runtime error|Sanitizer' "$log" | head -10
      grep -qE '^not ok ' "$log" || grep -E 'ERROR|Error|error|FAIL' "$log" | head -30; }
    echo "----- (full log: $log)"
    # A failed test's whole log kept past the run (which removes $work).
    [[ -n ${OOPS_FAILED_LOGS:-} ]] && mkdir -p "$OOPS_FAILED_LOGS" &&
      cp "$log" "$OOPS_FAILED_LOGS/$(basename "$log").$(date +%s)"
  fi
}

for suite in "${suites[@]}"; do
  echo "== $suite"
  only="" # one file of the suite, by name
  case $suite in
    integration/?* | scenarios/?* | spec/?*)
      only=${suite#*/} suite=${suite%%/*}
      only=${only%.sh} only=${only%.lua}
      ext=sh; [[ $suite == scenarios ]] && ext=lua
      [[ $suite == spec ]] && ext=lua only=${only%_spec}_spec
      if [[ ! -e $here/$suite/$only.$ext ]]; then
        echo "no test $suite/$only.$ext" >&2; failed=$((failed + 1)); failures+=("$suite/$only"); continue
      fi ;;
  esac
  case $suite in
    unit)
      for t in "$build"/test_*; do
        [[ -x $t ]] || continue
        # Each test program gets its own database.
        db=$(basename "$t")
        OOPS_TEST_DB=$(mariadb_new_db "$db") CMOCKA_MESSAGE_OUTPUT=TAP run_one "unit/$db" "$t"
      done ;;
    spec)
      shopt -s nullglob
      specs=("$here"/spec/${only:-*_spec}.lua)
      shopt -u nullglob
      if ((${#specs[@]})); then
        OOPS_TEST_DB=$(mariadb_new_db spec) run_one "spec" \
          "$build/oopsd" lua /usr/bin/busted --lpath="$root/lua/?.lua;$root/lua/?/init.lua;$root/tests/spec/?.lua" -o TAP "${specs[@]}"
      fi ;;
    integration)
      for t in "$here"/integration/*.sh; do
        [[ -e $t ]] || continue
        n=$(basename "$t" .sh)
        [[ -z $only || $n == "$only" ]] || continue
        OOPS_TEST_DB=$(mariadb_new_db "it_$n") run_one "integration/$n" bash "$t"
      done ;;
    scenarios)
      for t in "$here"/scenarios/*.lua; do
        [[ -e $t ]] || continue
        n=$(basename "$t" .lua)
        [[ -z $only || $n == "$only" ]] || continue
        # When scripts/test.sh runs both passes side by side, each scenario
        # runs in one of them: in the sanitizer pass, unless its first lines
        # say "-- ci: normal pass" (chosen to even out the two passes' time).
        if [[ -n ${OOPS_BOTH_PASSES:-} ]]; then
          normal_only=0 sanitized=0
          head -n 10 "$t" | grep -qE '^--[[:space:]]*ci:[[:space:]]*normal pass' && normal_only=1
          grep -qs '^OOPS_SANITIZE:BOOL=ON$' "$build/CMakeCache.txt" && sanitized=1
          if ((normal_only == sanitized)); then
            other=$( ((sanitized)) && echo normal || echo sanitizer)
            run_one "scenarios/$n" printf 'ok 1 # SKIP run in the %s pass (scripts/test.sh)\n1..1\n' "$other"
            continue
          fi
        fi
        if head -n 10 "$t" | grep -qE '^--[[:space:]]*needs:.*(own database|network namespaces)'; then
          run_one "scenarios/$n" env -u OOPS_DB "$build/oopsctl" scenario "$t"
        else
          db=$(mariadb_new_db "sc_$n")
          # The URL in the environment, not in argv (ps shows argv to every user).
          OOPS_TEST_DB=$db OOPS_DB=$db run_one "scenarios/$n" "$build/oopsctl" scenario "$t"
        fi
      done ;;
    style)
      # Not a default suite: `tests/run.sh BUILD style` (scripts/test.sh runs it
      # once): clang-format (check mode) over the C, luacheck over the Lua.
      run_one "style" bash "$here/style.sh" ;;
    fuzz)
      # Not a default suite: `tests/run.sh BUILD fuzz` (scripts/test.sh runs it
      # once). Each libFuzzer harness for $OOPS_FUZZ_SECONDS (5) seconds plus
      # its fuzz/regressions/, against build-fuzz/ (scripts/setup.sh --fuzz).
      if [[ -d $root/build-fuzz ]]; then
        FUZZ_BUILD=$root/build-fuzz run_one "fuzz" bash "$root/fuzz/run" "${OOPS_FUZZ_SECONDS:-5}"
      else
        run_one "fuzz" echo "ok 1 # SKIP no build-fuzz (bash scripts/setup.sh --fuzz builds it)"
      fi ;;
    *) echo "unknown suite $suite" >&2; failed=$((failed + 1)) ;;
  esac
done

shopt -s nullglob
reports=()
for r in "$work"/sanitizer.*; do
  # ASan says once per process that it "doesn't fully support
  # makecontext/swapcontext": the database fibers (src/db_fiber.c) switch
  # stacks with swapcontext and tell ASan so (__sanitizer_start_switch_fiber).
  # A file holding only that warning is no report.
  grep -qv "WARNING: ASan doesn't fully support makecontext/swapcontext" "$r" && reports+=("$r")
done
shopt -u nullglob
if ((${#reports[@]})); then
  echo "== sanitizer reports from processes the tests started"
  for r in "${reports[@]}"; do
    echo "not ok - sanitizer report $(basename "$r")"; head -30 "$r"
  done
  failed=$((failed + ${#reports[@]})); failures+=("sanitizer")
fi
((${#skipped[@]})) && echo "skipped: ${skipped[*]}"
((${#failures[@]})) && echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed"
((failed == 0))
