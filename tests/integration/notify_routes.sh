# Notifications as a queue per route (issue 37), on one real oopsd, a webhook
# receiver (tests/tools/http_sink.c) and webhooks to closed ports. Each part
# fails on the notifier before it (one outbox row, one retry, for all routes):
#   1. no spin: a route whose oldest rows wait behind a row whose retry is not
#      due (a seeded queue) and a route whose receiver is down (its first
#      failure: a 1-minute back-off), each with more rows than a round reads,
#      cost the database a few statements in 10 s, not round after round
#      (before: thousands of SELECTs); nothing is sent, nothing delivered;
#   2. a removed route strands nothing: a reload that drops those two routes
#      releases their queues (24,000 rows and more: more than one tick's 20
#      pages of 1,000), each row's delivery a point read of the queues (no
#      table scan), and every row that waited only for them is delivered
#      (before: one pass of 10,000 rows, the rest undelivered for good), their
#      notify_route rows gone, nothing resent;
#   3. a healthy route's retries are its own: beside a route that keeps
#      failing and retrying, a healthy route gets every new event promptly,
#      each once, its queue empty, while the failing route's rows count their
#      attempts (before: its reads waited behind rows other routes failed);
#   4. a route added by a reload starts from now: that healthy route was sent
#      exactly the events created after the reload, none of those another
#      route still held when it came (oopsd.policy(5));
# and a last reload that drops the failing routes leaves nothing undelivered.
# At least once across a leader kill: tests/scenarios/notify_leader_kill.lua.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }
ctl migrate >/dev/null || { echo "not ok 1 - migrate"; exit 1; }
work=$OOPS_TEST_WORK/notify_routes.$$
mkdir -p "$work/policies"
P=$work/policies/oopsd.lua
source "$OOPS_ROOT/tests/lib/sink.sh"
cleanup() { stop_servers; sink_stop_all; }
trap cleanup EXIT

# One receiver for every healthy route, told apart by path; records
# "POST PATH STATUS EVENT-ID BODY" lines.
sink_port=$(_free_port)
sink_start hook "$work/sink.out" "$sink_port" --record "$work/sink.rec" --header X-Oops-Event-Id ||
  { echo "not ok 1 - http_sink did not start"; exit 1; }
: >>"$work/sink.rec"
# Three ports nothing listens on: routes whose receiver is down.
closed1=$(_free_port)
closed2=$(_free_port)
while [[ $closed2 == "$closed1" ]]; do closed2=$(_free_port); done
closed3=$(_free_port)
while [[ $closed3 == "$closed1" || $closed3 == "$closed2" ]]; do closed3=$(_free_port); done
F=http://127.0.0.1:$closed1/down       # down, from the start (removed by the 1st reload)
HS=http://127.0.0.1:$sink_port/seeded  # healthy, its queue's head waiting for a retry (removed too)
F3=http://127.0.0.1:$closed3/early     # down, the early pipeline's events only (2nd reload)
H=http://127.0.0.1:$sink_port/healthy  # healthy (added by the 3rd reload)
F2=http://127.0.0.1:$closed2/down-too  # down (added by the 3rd reload too)
cat >"$work/keys.lua" <<EOF
local n = require("oops.scans.notify")
for _, u in ipairs { "$F", "$F2", "$F3", "$HS", "$H" } do print(n.route_key { kind = "webhook", url = u }) end
EOF
mapfile -t keys < <("$OOPS_BUILD/oopsd" lua "$work/keys.lua")
kF=${keys[0]:-} kF2=${keys[1]:-} kF3=${keys[2]:-} kHS=${keys[3]:-} kH=${keys[4]:-}
like "$kF $kF2 $kF3 $kHS $kH" '^(webhook:[0-9a-f]{8} ){4}webhook:[0-9a-f]{8}$' \
  "the routes' keys, as the notifier computes them"

policy() { # ROUTE-LINES...: the policy file, with a short tick and an instant gateway
  {
    echo 'scan    { interval = "300ms" }'
    echo 'locks   { validate_every = "1s" }'
    echo 'gateway "simulated" { build = "0s", deploy = "0s", rollout = "0s" }'
    printf '%s\n' "$@"
  } >"$P"
}
# The ids a path of the sink was sent (any answer), one per line, in order.
got() { awk -v p="/$1" '$2 == p { print $4 }' "$work/sink.rec"; }
event_ids() { # LIKE: the event ids of the pipelines of applications matching it
  sql "SELECT CONCAT('pipeline-event-', e.id) FROM pipeline_event e JOIN pipeline p ON p.id = e.pipeline_id
       WHERE p.application LIKE '$1' ORDER BY e.id"
}
log_lines() { grep -c 'msg="notification: ' "$SRV_LOG_S1"; }
succeeded() { [[ $(sql "SELECT COUNT(*) FROM pipeline WHERE status = 'SUCCEEDED'") == "$1" ]]; }
reloads() { grep -c 'msg="policy reloaded' "$SRV_LOG_S1"; }
com_select() { sql "SHOW GLOBAL STATUS LIKE 'Com_select'" | cut -f2; }
rows_scanned() { sql "SHOW GLOBAL STATUS LIKE 'Handler_read_rnd_next'" | cut -f2; }
round_trips() { # the server's own count of statements, every connection
  curl -s "$(url nr1 /metrics)" | awk '/^oops_db_round_trips_total/ { n += $2 } END { printf "%d\n", n }'
}
export -f log_lines succeeded reloads
export SRV_LOG_S1="" # the server's log, for the functions above in `bash -c` (set below)

# --- the outbox before the server starts ------------------------------------------------
# An alert payload the notifier can build a message from (notification.alert_message).
payload='{"edge":"FIRING","namespace":"shop","application":"hot","environment":"prod","metric":"cpu","percent":95,"threshold":1900,"limit":2000,"pods":["hot-0"],"since":"2026-08-01 12:00:00","time":"2026-08-01 12:10:00"}'
# 300 rows already routed, queued for the seeded route only, its head waiting
# for a retry 10 minutes away, the rest due: every round can only wait. (The
# notifier before schema 14 reads the same from the outbox columns: the
# other routes took them, the head's retry is not due.)
sql "INSERT INTO outbox (event_id, kind, payload, routed, delivered_routes, attempts, next_attempt_at)
  SELECT CONCAT('seeded-', seq), 'alert', '$payload', 1, '$kF,log', IF(seq = 1, 1, 0),
    IF(seq = 1, NOW(6) + INTERVAL 10 MINUTE, NOW(6)) FROM seq_1_to_300 ORDER BY seq"
sql "INSERT INTO notify_pending (route_key, outbox_id, attempts, next_attempt_at, last_error)
  SELECT '$kHS', id, IF(event_id = 'seeded-1', 1, 0),
    IF(event_id = 'seeded-1', NOW(6) + INTERVAL 10 MINUTE, NOW(6)),
    IF(event_id = 'seeded-1', 'test: failed once before', NULL) FROM outbox WHERE event_id LIKE 'seeded-%'"
# 12,000 new alert rows (more than the old notifier's one reconciling pass of
# 10,000), for every route of the policy: one lane.
N=12000
sql "INSERT INTO outbox (event_id, kind, payload)
  SELECT CONCAT('alert-shop/hot/prod/cpu-', seq), 'alert', '$payload' FROM seq_1_to_$N ORDER BY seq"

# --- 1. no spin ---------------------------------------------------------------------------
policy "notify  { webhook = \"$F\", log = true }" \
  "notify  { webhook = \"$HS\" }" \
  'notify  { retry = { initial = "1m", max = "1m" } }'
start_server nr1 "$work/policies" || exit 1
SRV_LOG_S1=${SRV_LOG[nr1]} # a name of its own: servers' logs in $OOPS_TEST_WORK are appended to across tests
wait_for 60 "every row is handed to the routes (routed)" \
  bash -c '[[ $(sql "SELECT COUNT(*) FROM outbox WHERE routed = 0") == 0 ]]'
wait_for 90 "the log route wrote each of the $N alerts" bash -c "[[ \$(log_lines) == $N ]]"
wait_for 20 "the down webhook failed its first row" \
  bash -c "grep 'notification not delivered' \"\$SRV_LOG_S1\" | grep -qF '127.0.0.1:$closed1/'"
sleep 0.5 # its failure recorded
s0=$(com_select) r0=$(round_trips)
sleep 10
s1=$(com_select) r1=$(round_trips)
selects=$((s1 - s0)) trips=$((r1 - r0))
echo "# 10 s with routes that can only wait: $selects SELECTs (Com_select), $trips round trips of the server's"
check "the database ran few SELECTs in those 10 s ($selects < 100: no round repeats without progress)" \
  test "$selects" -lt 100
check "... and the server counts few statements of its own ($trips < 150)" test "$trips" -lt 150
is "$(wc -l <"$work/sink.rec")" 0 "the seeded route sent nothing: its head waits for its retry"
is "$(sql "SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL")" $((300 + N)) \
  "every row stays undelivered (the seeded and the down routes hold them)"
is "$(sql "SELECT COUNT(*) FROM notify_pending WHERE route_key = '$kF'")" "$N" \
  "the down route's queue holds the $N alerts"
is "$(sql "SELECT attempts FROM notify_pending WHERE route_key = '$kF' ORDER BY outbox_id LIMIT 1")" 1 \
  "... its head counts its one attempt"
is "$(sql "SELECT failures > 0 AND retry_at > NOW(6) FROM notify_route WHERE route_key = '$kF'")" 1 \
  "... and the route backs off on its own clock (notify_route)"
is "$(sql "SELECT COUNT(*) FROM notify_pending WHERE route_key = 'log'")" 0 "the log route's queue is empty"

# --- 2. a removed route strands nothing ------------------------------------------------------
removed=$(sql "SELECT COUNT(*) FROM notify_pending WHERE route_key IN ('$kF', '$kHS')")
check "the queues of the routes to remove hold more than 20 pages of 1,000 ($removed)" test "$removed" -gt 20000
scans0=$(rows_scanned)
policy "notify  { log = true }" 'notify  { retry = { initial = "200ms", max = "1s" } }'
kill -HUP "${SRV_PID[nr1]}"
wait_for 20 "a reload drops the down webhook and the seeded one" bash -c '[[ $(reloads) == 1 ]]'
undelivered() { sql "SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL"; }
undelivered_is() { [[ $(undelivered) == "$1" ]]; }
export -f undelivered undelivered_is
wait_for 60 "every row is delivered: the removed routes' queues released" undelivered_is 0
is "$(undelivered)" 0 "... not one row left undelivered (of $((300 + N)))"
scanned=$(($(rows_scanned) - scans0))
echo "# rows read by table scans while releasing: $scanned (Handler_read_rnd_next)"
check "... each row's delivery a point read of the queues' index, never a scan of them ($scanned rows scanned < 1,000,000)" \
  test "$scanned" -lt 1000000
is "$(sql "SELECT COUNT(*) FROM notify_pending")" 0 "no queue holds a row"
wait_for 10 "the removed routes' notify_route rows are gone: the log route's is left" \
  bash -c "[[ \$(sql 'SELECT route_key FROM notify_route') == log ]]"
released=$(grep -o 'msg="notify: released [0-9]* rows of a removed route"' "$SRV_LOG_S1" |
  awk '{ n += $3 } END { print n + 0 }')
is "$released" "$removed" "the log counts every row released ($removed)"
like "$(grep -c 'msg="notify: released 1000 rows of a removed route"' "$SRV_LOG_S1")" '^(2[1-9]|[3-9][0-9])$' \
  "... in pages of 1,000, more than one tick's 20"
is "$(wc -l <"$work/sink.rec")" 0 "releasing sends nothing"
is "$(log_lines)" "$N" "... and the log route wrote nothing twice"

# --- 3. a healthy route's retries are its own; 4. a route added by a reload starts from now -----
# First a down route that takes the early pipeline's events alone: they wait
# in its queue when the healthy route comes.
policy "notify  { log = true }" \
  "notify  { webhook = \"$F3\", applications = { \"shop/early*\" } }" \
  'notify  { retry = { initial = "200ms", max = "1s" } }'
kill -HUP "${SRV_PID[nr1]}"
wait_for 20 "a reload adds a down webhook for the early pipeline" bash -c '[[ $(reloads) == 2 ]]'
ctl create --app shop/early1 --env prod >/dev/null 2>&1
wait_for 60 "the early pipeline SUCCEEDED" succeeded 1
early=$(event_ids 'early%')
n_early=$(wc -l <<<"$early")
wait_for 20 "the log route wrote its $n_early events" bash -c "[[ \$(log_lines) == $((N + n_early)) ]]"
wait_for 20 "... which the down route holds, retrying them" \
  bash -c "[[ \$(sql \"SELECT COUNT(*) FROM notify_pending WHERE route_key = '$kF3' AND attempts > 0\") -ge 1 ]]"
is "$(sql "SELECT COUNT(*) FROM notify_pending WHERE route_key = '$kF3'")" "$n_early" "... all $n_early of them"

policy "notify  { log = true }" \
  "notify  { webhook = \"$F3\", applications = { \"shop/early*\" } }" \
  "notify  { webhook = \"$H\" }" \
  "notify  { webhook = \"$F2\" }" \
  'notify  { retry = { initial = "200ms", max = "1s" } }'
kill -HUP "${SRV_PID[nr1]}"
wait_for 20 "a reload adds a healthy webhook and another down one" bash -c '[[ $(reloads) == 3 ]]'
for app in late1 late2 late3; do ctl create --app "shop/$app" --env prod >/dev/null 2>&1; done
wait_for 60 "three new pipelines SUCCEEDED" succeeded 4
late=$(event_ids 'late%')
n_late=$(wc -l <<<"$late")
got_all_late() { [[ $(got healthy | sort -u | comm -13 - <(sort <<<"$late") | wc -l) == 0 ]]; }
wait_for 20 "the healthy route received every new event ($n_late) promptly" got_all_late
wait_for 20 "... its queue is empty" \
  bash -c "[[ \$(sql \"SELECT COUNT(*) FROM notify_pending WHERE route_key = '$kH'\") == 0 ]]"
wait_for 30 "while the down route added beside it retries its rows (attempts >= 2)" \
  bash -c "[[ \$(sql \"SELECT COALESCE(MAX(attempts), 0) FROM notify_pending WHERE route_key = '$kF2'\") -ge 2 ]]"
is "$(got healthy | sort | uniq -d | wc -l)" 0 "the healthy route was sent each event once: never a retry"
is "$(awk '$2 == "/healthy" && $3 != 200' "$work/sink.rec" | wc -l)" 0 "... every request answered 200"
is "$(sql "SELECT COUNT(*) FROM notify_pending WHERE route_key = '$kF2'")" "$n_late" \
  "the down route's queue holds every new event"
in_late="'$(paste -sd, <<<"$late" | sed "s/,/','/g")'"
is "$(sql "SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL AND event_id IN ($in_late)")" \
  "$n_late" "... which are undelivered while it holds them"
is "$(sql "SELECT failures, last_error IS NULL FROM notify_route WHERE route_key = '$kH'")" "0	1" \
  "the healthy route's notify_route row: no failure, no error"
wait_for 20 "the log route wrote the new events too" \
  bash -c "[[ \$(log_lines) == $((N + n_early + n_late)) ]]"
# 4.
extra=$(got healthy | sort -u | comm -23 - <(sort <<<"$late") | wc -l)
is "$(got healthy | wc -l) sent, $extra not new" "$n_late sent, 0 not new" \
  "the route added by the reload was sent exactly the events created after it"
is "$(got healthy | grep -cFx -f <(echo "$early"))" 0 \
  "... none of the early events the other down route held when it came"
check "... which that route still retries (attempts >= 2)" \
  test "$(sql "SELECT COALESCE(MAX(attempts), 0) FROM notify_pending WHERE route_key = '$kF3'")" -ge 2

# --- the down routes dropped: nothing is left ------------------------------------------------
sent_before=$(wc -l <"$work/sink.rec")
policy "notify  { log = true }" "notify  { webhook = \"$H\" }"
kill -HUP "${SRV_PID[nr1]}"
wait_for 20 "a last reload drops the down routes" bash -c '[[ $(reloads) == 4 ]]'
wait_for 30 "every outbox row is delivered" undelivered_is 0
is "$(sql "SELECT COUNT(*) FROM notify_pending")" 0 "no queue holds a row"
wait_for 10 "the log and the healthy route are the routes left" \
  bash -c "[[ \$(sql \"SELECT route_key FROM notify_route ORDER BY route_key\" | tr '\n' ' ') == 'log $kH ' ]]"
is "$(wc -l <"$work/sink.rec")" "$sent_before" "nothing more was sent"

done_testing
