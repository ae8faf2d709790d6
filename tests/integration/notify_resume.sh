# A route whose queue ran empty while it was counting failures is not stuck
# (CI, chaos seed 11: every notification after a database restart stayed
# undelivered for good). Its round that read an empty queue slept until rows
# were routed to it, but rows routed to a route with failures > 0 did not
# wake it (a route backing off waits for its clock): nothing did. On one real
# oopsd and a webhook receiver (tests/tools/http_sink.c), both ways a route
# gets there:
#   1. a new leader reads the route's failures back (notify_route) while its
#      queue is empty: the last leader delivered the rows and was killed, or
#      lost the database, before it recorded so;
#   2. on the leader itself: a round fails (the receiver down: a back-off),
#      and before the retry the queue is emptied by another (a frozen leader
#      that thawed and finished its send).
# Each time, the events that follow are delivered, and the route's failures
# are back to 0 (notify_route, what oopsctl outbox shows).
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }
ctl migrate >/dev/null || { echo "not ok 1 - migrate"; exit 1; }
work=$OOPS_TEST_WORK/notify_resume.$$
mkdir -p "$work/policies"
source "$OOPS_ROOT/tests/lib/sink.sh"
cleanup() { stop_servers; sink_stop_all; }
trap cleanup EXIT

port=$(_free_port)
H=http://127.0.0.1:$port/hook
key=$(printf 'print(require("oops.scans.notify").route_key { kind = "webhook", url = "%s" })\n' "$H" |
  "$OOPS_BUILD/oopsd" lua /dev/stdin)
like "$key" '^webhook:[0-9a-f]{8}$' "the route's key, as the notifier computes it"
cat >"$work/policies/oopsd.lua" <<EOF
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
notify  { webhook = "$H", retry = { initial = "4s", max = "4s" } }
EOF
payload='{"edge":"FIRING","namespace":"shop","application":"hot","environment":"prod","metric":"cpu","percent":95,"threshold":1900,"limit":2000,"pods":["hot-0"],"since":"2026-08-01 12:00:00","time":"2026-08-01 12:10:00"}'
add_alerts() { # PREFIX N: N alert rows in the outbox, to be routed
  sql "INSERT INTO outbox (event_id, kind, payload) SELECT CONCAT('$1-', seq), 'alert', '$payload'
       FROM seq_1_to_$2 ORDER BY seq"
}
# The distinct ids with PREFIX the receiver answered 2xx.
got() { awk -v p="$1-" '$3 ~ /^2/ && index($4, p) == 1 { print $4 }' "$work/sink.rec" 2>/dev/null | sort -u | wc -l; }
undelivered() { sql "SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL"; }
export -f got undelivered
export work
leading() { [[ $(sql "SELECT IS_USED_LOCK('oops:leader:notify') IS NOT NULL") == 1 ]]; }
export -f leading

# --- 1. a new leader reads failures back, its queue empty ----------------------------------
sink_start hook "$work/sink.out" "$port" --record "$work/sink.rec" --header X-Oops-Event-Id ||
  { echo "not ok 2 - http_sink did not start"; exit 1; }
: >>"$work/sink.rec"
sql "INSERT INTO notify_route (route_key, name, failures, retry_at, last_error)
     VALUES ('$key', 'webhook http://127.0.0.1', 3, NOW(6) - INTERVAL 1 SECOND, 'test: a leader killed mid-record')"
start_server r1 "$work/policies" || exit 1
wait_for 20 "r1 leads the notifier" leading
sleep 1.5 # its route's first rounds: an empty queue
add_alerts one 5
wait_for 20 "the 5 events that follow are delivered" bash -c '[[ $(got one) == 5 && $(undelivered) == 0 ]]'
is "$(sql "SELECT failures, retry_at IS NULL FROM notify_route WHERE route_key = '$key'")" "0	1" \
  "the route's failures are back to 0 (notify_route)"

# --- 2. on the leader: a back-off, then the queue emptied by another ------------------------
sink_stop hook
add_alerts two 1
wait_for 20 "with the receiver down, the row fails (a 4 s back-off)" \
  bash -c '[[ $(sql "SELECT failures FROM notify_route WHERE route_key = '"'$key'"'") -ge 1 ]]'
# What a thawed leader does after its send went through: the row off the
# queue, the outbox row delivered.
sql "DELETE FROM notify_pending WHERE route_key = '$key'"
sql "UPDATE outbox SET delivered_at = NOW(6) WHERE delivered_at IS NULL"
sink_start hook "$work/sink2.out" "$port" --record "$work/sink.rec" --header X-Oops-Event-Id ||
  { echo "not ok - http_sink did not start again"; exit 1; }
sleep 5 # past the retry: the route's round reads its queue empty
add_alerts three 5
wait_for 20 "the 5 events that follow are delivered" bash -c '[[ $(got three) == 5 && $(undelivered) == 0 ]]'
is "$(sql "SELECT failures, retry_at IS NULL FROM notify_route WHERE route_key = '$key'")" "0	1" \
  "the route's failures are back to 0 again"
stop_servers
done_testing
