# Notifications at flood scale (issue 28): a real oopsd drives 500
# pipelines at once on an instant gateway (four events each) to webhook
# receivers (tests/tools/http_sink.c). Every event reaches the route that
# takes everything, under its stable id, and every outbox row is marked
# delivered once; a filtered route gets exactly what its filters select
# (events, environments, applications); a route that answers 500 then 200
# delivers each event once after its retries; a route that hangs holds back
# no other; a redirect is not followed; a huge answer is read to a bound and
# delivers. How fast is a bench figure (bench/run --only notify), not a test.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }
ctl migrate >/dev/null
work=$OOPS_TEST_WORK/notify_flood.$$
mkdir -p "$work/policies"
source "$OOPS_ROOT/tests/lib/sink.sh"
declare -A SINK_PORT
start_sink() { # NAME ARGS...
  local name=$1; shift
  SINK_PORT[$name]=$(_free_port)
  sink_start "$name" "$work/$name.out" "${SINK_PORT[$name]}" --record "$work/$name.rec" \
    --header X-Oops-Event-Id "$@"
}
hook() { echo "http://127.0.0.1:${SINK_PORT[$1]}/$1"; }
cleanup() { stop_servers; sink_stop_all; }
trap cleanup EXIT
# The ids a sink answered STATUS (default 200), one per line.
got() { awk -v s="${2:-200}" '$3 == s { print $4 }' "$work/$1.rec"; }
undelivered() { sql "SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL"; }

# --- the flood ----------------------------------------------------------------------
start_sink all || exit 1
start_sink some || exit 1
cat >"$work/policies/oopsd.lua" <<EOF
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "0s", deploy = "0s", rollout = "0s" }
notify  { webhook = "$(hook all)" }
notify  { webhook = "$(hook some)", events = { "SUCCEEDED", "DEPLOYING" }, environments = { "prod" },
          applications = { "flood/app1*", "flood/app7" } }
notify  { retry = { initial = "200ms", max = "1s" } }
EOF
start_server s1 "$work/policies" || exit 1
N=500
# Under the sanitizers the same paths with fewer rows (the pass runs beside the normal one).
grep -qs '^OOPS_SANITIZE:BOOL=ON$' "$OOPS_BUILD/CMakeCache.txt" && N=200
sql "INSERT INTO pipeline (id, namespace, application, environment, status)
  SELECT CONCAT('f', LPAD(seq, 11, '0')), 'flood', CONCAT('app', seq), IF(seq % 4 = 0, 'staging', 'prod'),
    'INITIALIZED' FROM seq_1_to_$N"
succeeded() { [[ $(sql "SELECT COUNT(*) FROM pipeline WHERE status = 'SUCCEEDED'") == "$1" ]]; }
delivered_all() { [[ $(sql "SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL") == 0 ]]; }
export -f succeeded delivered_all
wait_for 180 "$N pipelines all SUCCEEDED" succeeded "$N"
events=$(sql "SELECT COUNT(*) FROM outbox")
is "$events" "$((4 * N))" "four notifications per pipeline ($((4 * N)))"
wait_for 120 "every one delivered" delivered_all
is "$(got all | sort -u | wc -l)" "$events" "the route that takes everything received every id"
is "$(comm -3 <(got all | sort -u) <(sql "SELECT event_id FROM outbox" | sort -u) | wc -l)" 0 "... exactly the outbox's ids"
is "$(got all | wc -l)" "$events" "... each once (no resend in a quiet run)"
is "$(sql "SELECT COUNT(*) FROM notify_pending"):$(sql "SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL")" \
  "0:0" "no route's queue holds a row: each taken by both routes"
want=$(sql "SELECT CONCAT('pipeline-event-', e.id) FROM pipeline_event e JOIN pipeline p ON p.id = e.pipeline_id
  WHERE e.to_status IN ('SUCCEEDED', 'DEPLOYING') AND p.environment = 'prod'
    AND (p.application LIKE 'app1%' OR p.application = 'app7')" | sort)
check "the filtered route's selection is not empty ($(wc -l <<<"$want") events)" test -n "$want"
is "$(got some | sort | tr '\n' ' ')" "$(tr '\n' ' ' <<<"$want")" \
  "the filtered route received exactly its events, environments and applications, each once"
# Each pipeline's events arrived in order at the route that takes everything.
bad=0
while read -r p; do
  order=$(grep -n "" <(got all) | grep -Fwf <(sql "SELECT CONCAT('pipeline-event-', id) FROM pipeline_event WHERE pipeline_id = '$p' ORDER BY id") | cut -d: -f2)
  [[ $order == "$(sql "SELECT CONCAT('pipeline-event-', id) FROM pipeline_event WHERE pipeline_id = '$p' ORDER BY id")" ]] || bad=$((bad + 1))
done < <(sql "SELECT id FROM pipeline ORDER BY RAND() LIMIT 50")
is "$bad" 0 "the events of a pipeline arrive in order (50 pipelines checked)"

# --- the formats teams read: Slack, Teams, CloudEvents, with the page's link -------------------
stop_servers
sql "DELETE FROM outbox"; sql "DELETE FROM pipeline_event"; sql "DELETE FROM pipeline"
start_sink slack || exit 1
start_sink teams || exit 1
start_sink ce || exit 1
cat >"$work/policies/oopsd.lua" <<EOF
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "0s", deploy = "0s", rollout = "0s" }
notify  { slack = "$(hook slack)", events = { "CREATED", "SUCCEEDED" } }
notify  { teams = "$(hook teams)", events = { "SUCCEEDED" } }
notify  { webhook = "$(hook ce)", format = "cloudevents", page = "https://oops.example/fleet" }
EOF
start_server f1 "$work/policies" || exit 1
fid=$(SUDO_USER=alice ctl create --app shop/fmt --env prod --reason "ship <b>it</b>" 2>/dev/null)
wait_for 60 "the pipeline SUCCEEDED" succeeded 1
wait_for 60 "its notifications delivered in three formats" delivered_all
# The bodies a sink took (200), one per line, the record's escapes undone.
body() { awk '$3 == 200 { $1 = $2 = $3 = $4 = ""; print substr($0, 5) }' "$work/$1.rec" | sed 's/\\\\/\\/g'; }
is "$(body slack | wc -l)" 2 "slack received the two events its filter names"
is "$(body slack | jq -s 'all(.[]; (.text | length) > 0 and any(.blocks[]; .type == "header")
  and any(.blocks[]; .type == "actions"))')" true "slack: text and blocks (Block Kit), a header and the page's button"
like "$(body slack | head -1)" "https://oops.example/fleet/#pipeline=$fid" "... linking to the pipeline on the page"
like "$(body slack | head -1)" "alice@" "... naming the operator"
like "$(body slack | head -1)" "ship &lt;b&gt;it&lt;/b&gt;" "... with the reason escaped for Slack"
is "$(body teams | jq '.type == "message" and .attachments[0].contentType == "application/vnd.microsoft.card.adaptive"
  and .attachments[0].content.type == "AdaptiveCard"')" true "teams: a message with one Adaptive Card"
is "$(body teams | wc -l)" 1 "... for SUCCEEDED only"
is "$(body ce | jq -s --arg p "$fid" 'length == 5 and all(.[]; .specversion == "1.0"
  and (.id | startswith("pipeline-event-")) and (.type | startswith("dev.oopsd.pipeline."))
  and .subject == $p and .data.id == .id)')" true "cloudevents: structured mode, each of its five events with its id, type and subject"

# --- failing, hanging, redirecting and huge receivers ---------------------------------------
stop_servers
sql "DELETE FROM outbox"; sql "DELETE FROM pipeline_event"; sql "DELETE FROM pipeline"
start_sink flaky --fail-first 2 || exit 1
start_sink hang --hang 1 || exit 1
start_sink target || exit 1
start_sink moved --redirect "$(hook target)" || exit 1
start_sink huge --huge 20000000 || exit 1
cat >"$work/policies/oopsd.lua" <<EOF
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "0s", deploy = "0s", rollout = "0s" }
notify  { webhook = "$(hook flaky)" }
notify  { webhook = "$(hook hang)" }
notify  { webhook = "$(hook moved)" }
notify  { webhook = "$(hook huge)" }
notify  { retry = { initial = "200ms", max = "1s" } }
EOF
start_server s2 "$work/policies" || exit 1
for i in 1 2 3; do ctl create --app shop/a$i --env prod >/dev/null 2>&1; done
wait_for 60 "three pipelines SUCCEEDED" succeeded 3
wait_for 60 "the flaky route received every event, after its two failures" \
  bash -c "[[ \$(awk '\$3 == 200' '$work/flaky.rec' | wc -l) -ge \$(sql 'SELECT COUNT(*) FROM outbox') ]]"
n=$(sql "SELECT COUNT(*) FROM outbox")
is "$(got flaky 500 | wc -l)" 2 "... it answered 500 twice"
is "$(got flaky | sort | uniq -d | wc -l)|$(got flaky | wc -l)" "0|$n" "... and each event was delivered to it once"
like "$(got hang 0 | head -1)" '^pipeline-event-' "the hanging route was sent its first event and never answered"
is "$(got hang 0 | wc -l)" 1 "... it holds back only itself (one request open)"
wait_for 30 "the huge answer delivers (read to a bound)" \
  bash -c "[[ \$(awk '\$3 == 200' '$work/huge.rec' | wc -l) -ge $n ]]"
check "the redirecting route was sent events" test "$(got moved 302 | wc -l)" -ge 1
is "$(wc -l <"$work/target.rec")" 0 "... and the redirect was never followed"
check "... the outbox says why (HTTP 302)" \
  test "$(sql "SELECT COUNT(*) FROM notify_pending WHERE last_error LIKE '%: HTTP 302%'")" -ge 1
is "$(sql "SELECT COUNT(*) FROM outbox WHERE delivered_at IS NOT NULL")" 0 \
  "... so no row is delivered everywhere (the hanging and the redirecting routes take none)"
errors=$(sql "SELECT GROUP_CONCAT(last_error) FROM outbox"; sql "SELECT GROUP_CONCAT(last_error) FROM notify_pending"
  sql "SELECT GROUP_CONCAT(last_error) FROM notify_route")
unlike "$errors" "127.0.0.1:${SINK_PORT[moved]}/moved" \
  "... naming the route by scheme and host only"
page_shows_error() {
  curl -s -m 5 "$1" | jq -e --arg where "$2" \
    '.routes | any(.where == $where and .failing > 0 and (.last_error // "" | test("HTTP 302")))'
}
export -f page_shows_error
wait_for 30 "the fleet page shows the redirecting route failing, with its last error" \
  page_shows_error "$(url s2 /api/fleet)" "http://127.0.0.1:${SINK_PORT[moved]}/***"
done_testing
