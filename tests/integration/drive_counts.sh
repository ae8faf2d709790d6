# The engine's speed as counts, not clocks (issue 36): a change that makes the
# engine wait fails here whatever the machine's speed. One server, an instant
# simulated gateway, a slow cadence (4 s) and a small share (scan.max_new 50):
# 600 new pipelines are twelve ticks' work.
#   - A tick that took its whole share while more were free is followed by the
#     next at once, not at the next multiple of the interval: the drive spans
#     at most 3 of the watcher's statements (one a scan interval), where one
#     tick an interval would need 12 (the wait issue 36 found: half the
#     10,000-pipeline drive was spent between ticks).
#   - Batches of calls do not queue on the server's own connection behind
#     each other: a busy server opens its pool (the drive of issue 36 ran on
#     one connection and never opened it).
# Counts of intervals and batches, not seconds; bench/ has the timings.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
trap stop_servers EXIT
"$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" migrate >/dev/null
pol=$OOPS_TEST_WORK/drive_counts.$$
mkdir -p "$pol"
cat >"$pol/oopsd.lua" <<'P'
scan    { interval = "4s", max_new = 50 }
gateway "simulated" { build = "0s", deploy = "0s", rollout = "0s" }
P
start_server d1 "$pol"
metric() { # NAME [LABELS]: its value on d1's /metrics (0 when absent)
  local n=$1; [[ -n ${2:-} ]] && n="$1{$2}"
  curl -s -m 10 "$(url d1 /metrics)" | awk -v n="$n" '$1 == n { v = $2 } END { print v + 0 }'
}
holds() { # ARITHMETIC DESC [DIAG]: one TAP line, ok when the arithmetic is true
  (($1)); _tap $? "$2" "${3:-}"
}
# Past the first ticks: the watcher answers once an interval.
wait_for 30 "the watcher answers" bash -c "(( \$(curl -s -m 5 '$(url d1 /metrics)' | awk '\$1 == \"oops_watch_statements_total\" { print \$2 + 0 }') >= 1 ))"
w0=$(metric oops_watch_statements_total)
sql "INSERT INTO pipeline (id, namespace, application, environment, status)
     SELECT CONCAT('drive', LPAD(seq, 7, '0')), 'drive', CONCAT('app', seq), 'prod', 'INITIALIZED' FROM seq_1_to_600"
wait_for 300 "600 pipelines on an instant gateway all SUCCEEDED" \
  bash -c "[[ \$(sql \"SELECT COUNT(*) FROM pipeline WHERE status = 'SUCCEEDED'\") == 600 ]]"
w1=$(metric oops_watch_statements_total)
spans=$((w1 - w0))
holds "spans <= 3" "twelve full shares were driven within 3 scan intervals, not one an interval ($spans watcher statements)"
holds "$(metric oops_scan_backlog_ticks_total 'scan="build"') >= 6" \
  "... the build scan ticked again at once after each full share (oops_scan_backlog_ticks_total)"
pool=$(metric oops_db_batches_total 'conn="pool"')
holds "pool > 0" "batches of calls went to the pool while the own connection was busy ($pool batches there, $(metric oops_db_batches_total 'conn="own"') on it)"
# Calls that arrive together go together: the transitions a tick's tasks ask
# for at once are made in one batch, not one alone per free connection.
made=$(metric oops_transitions_total 'to="SUCCEEDED"')
batched=$(metric oops_transition_batched_total)
alone=$(( $(curl -s -m 10 "$(url d1 /metrics)" | awk '$1 ~ /^oops_transitions_total/ { s += $2 } END { print s + 0 }') - batched ))
holds "alone * 10 <= batched" "most transitions were made in batches: $batched in batches, $alone alone ($made pipelines SUCCEEDED)"
done_testing
