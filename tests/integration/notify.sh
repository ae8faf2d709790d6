# Notifications end to end (DESIGN.md "Notifications", REFERENCE.md §12.9):
# two real servers, a webhook receiver (tests/tools/http_sink.c) that fails
# its first 5 requests, a command route and the log route. Every pipeline
# event reaches every route at least once, duplicates carry the same id, only
# the notify leader delivers, a failing route holds back no other, and a
# SIGKILLed leader's pending events are delivered by the server taking over.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }

work=$OOPS_TEST_WORK/notify.$$
mkdir -p "$work/policies"
port=$(_free_port)
source "$OOPS_ROOT/tests/lib/sink.sh"

# The webhook receiver: records "METHOD PATH STATUS X-Oops-Server BODY" lines.
start_sink() { # RECORD FAIL_FIRST
  sink_start hook "$work/sink.out" "$port" --fail-first "$2" --record "$1" --header X-Oops-Server
}
cleanup() { stop_servers; sink_stop_all; }
trap cleanup EXIT

cat >"$work/policies/oopsd.lua" <<EOF
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "500ms", rollout = "300ms" }
notify  { webhook = "http://127.0.0.1:$port/hook", retry = { initial = "200ms", max = "1s" } }
notify  { command = { "sh", "$OOPS_ROOT/tests/tools/append_stdin.sh", "$work/command.rec" }, log = true }
EOF
touch "$work/command.rec"

# The ids in a record file (webhook lines or command lines), one per line.
ids() { grep -o '"id":"[^"]*"' "$@" | cut -d'"' -f4; }
ok_lines() { awk '$3 == 200' "$1"; }
event_ids() { sql "SELECT CONCAT('pipeline-event-', id) FROM pipeline_event ${1:-} ORDER BY id"; }
notify_leader() {
  sql "SELECT name FROM server WHERE lock_connection_id = IS_USED_LOCK('oops:leader:notify')"
}
all_delivered() {
  [[ $(sql "SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL") == 0 &&
     $(sql "SELECT COUNT(*) FROM outbox WHERE kind = 'pipeline'") == $(sql "SELECT COUNT(*) FROM pipeline_event") ]]
}
all_delivered_alerts() {
  [[ $(sql "SELECT COUNT(*) FROM outbox WHERE kind = 'alert' AND delivered_at IS NULL") == 0 ]]
}
all_succeeded() {
  [[ $(sql "SELECT COUNT(*) FROM pipeline WHERE status <> 'SUCCEEDED'") == 0 ]]
}
# Within each pipeline, its events arrived in the order they happened.
in_order_per_pipeline() { # RECORD [PIPELINE...] (default: every pipeline)
  local rec=$1 p got; shift
  for p in ${@:-$(sql "SELECT id FROM pipeline")}; do
    got=$(ok_lines "$rec" | ids | awk '!seen[$0]++' | grep -Fxf <(event_ids "WHERE pipeline_id = '$p'"))
    [[ $got == "$(event_ids "WHERE pipeline_id = '$p'")" ]] || { echo "# $p: $got"; return 1; }
  done
}
metric() { # SERVER NAME{LABELS} → value, 0 when absent
  local v
  v=$(curl -s "$(url "$1" /metrics)" | grep -F "$2 " | awk '{print $2}')
  echo "${v:-0}"
}
export -f notify_leader all_delivered all_delivered_alerts all_succeeded

############################################################ delivery, retries

start_sink "$work/hook1.rec" 5 || exit 1
start_server s1 "$work/policies" || exit 1
wait_for 20 "s1 leads the notifier (oops:leader:notify)" bash -c '[[ $(notify_leader) == s1 ]]'
start_server s2 "$work/policies" || exit 1

for app in n1 n2 n3; do ctl create --app "shop/$app" --env prod >/dev/null; done
wait_for 60 "three pipelines reach SUCCEEDED" all_succeeded
wait_for 60 "every outbox row is delivered" all_delivered

n_events=$(sql "SELECT COUNT(*) FROM pipeline_event")
like "$n_events" '^(1[5-9]|[2-9][0-9])$' "the pipelines wrote their events (CREATED ... SUCCEEDED: $n_events)"
is "$(sql "SELECT COUNT(*) FROM outbox WHERE kind = 'pipeline'")" "$n_events" "one outbox row per pipeline event"
is "$(ok_lines "$work/hook1.rec" | ids | sort -u)" "$(event_ids | sort)" \
  "every pipeline event reached the webhook once it answered"
is "$(ids "$work/hook1.rec" | sort -u | wc -l)" "$n_events" \
  "distinct ids in every request (failed ones too) == the number of events"
is "$(cut -d' ' -f5- "$work/hook1.rec" | sort -u | wc -l)" "$n_events" \
  "a duplicate is the same message: one body per id"
is "$(awk '$3 == 500' "$work/hook1.rec" | wc -l)" 5 "the sink failed the first 5 requests"
failed_ids=$(awk '$3 == 500' "$work/hook1.rec" | ids | sort -u)
is "$(ok_lines "$work/hook1.rec" | ids | grep -Fxc -f <(echo "$failed_ids"))" \
  "$(echo "$failed_ids" | wc -l)" "... and each failed event was retried until it got through"
like "$(sql "SELECT last_error FROM notify_route WHERE route_key LIKE 'webhook:%'")" \
  "^s1: webhook http://127.0.0.1:$port/\*\*\*: HTTP 500" "the route records its last failure, by whom and why (the URL's path masked)"
like "$(grep -Ec 'attempt=[1-5] .*notification not delivered: HTTP 500|notification not delivered: HTTP 500.* attempt=[1-5]' \
  "${SRV_LOG[s1]}")" '^[1-9]' \
  "... and each failure is logged with its attempt"
check "each pipeline's events arrived in order" in_order_per_pipeline "$work/hook1.rec"

is "$(awk '{print $4}' "$work/hook1.rec" | sort -u)" "s1" "only the notify leader (s1) sent webhooks"
is "$(metric s1 'oops_notifications_delivered_total{route="webhook"}')" "$(ok_lines "$work/hook1.rec" | wc -l)" \
  "s1 counts its webhook deliveries"
is "$(metric s1 'oops_notification_failures_total{route="webhook"}')" 5 "... and its failures"
is "$(metric s2 'oops_notifications_delivered_total{route="webhook"}')" 0 "s2 delivered nothing"
is "$(metric s2 'oops_notifications_delivered_total{route="command"}')" 0 "... on any route"

body=$(ok_lines "$work/hook1.rec" | grep -F '"type":"SUCCEEDED"' | head -1 | cut -d' ' -f5-)
like "$body" '"kind":"pipeline"' "a webhook body is the message JSON: kind"
like "$body" '"level":"success"' "... level (SUCCEEDED is success)"
like "$body" '"title":"shop/n[1-3] prod: SUCCEEDED"' "... title"
like "$body" '"facts":\[\{"name":"application","value":"shop/n[1-3]"\}' "... facts"
like "$body" '"detail","value":"The application was released successfully."' "... the event's message as detail"
like "$body" '"advice":null' "... advice"
like "$body" '"time":"[0-9-]+T[0-9:.]+Z"' "... and an RFC 3339 time"

is "$(ids "$work/command.rec" | sort -u)" "$(event_ids | sort)" "the command route got every event on its stdin"
check "... each one line of valid JSON" jq -e -s 'all(.[]; .id and .kind == "pipeline" and .title)' "$work/command.rec"
is "$(jq -r 'select(.type == "CREATED") | .level' "$work/command.rec" | sort -u)" info "... CREATED is info"
is "$(grep -c 'msg="notification: shop/n1 prod: SUCCEEDED"' "${SRV_LOG[s1]}")" 1 \
  "the log route wrote one line per event on the leader"
is "$(grep -c 'msg="notification: ' "${SRV_LOG[s2]}")" 0 "... and none on s2"

############################################ a failing route; the leader crashes

# The webhook goes away; the command and log routes carry on.
sink_stop hook
id4=$(ctl create --app shop/n4 --env prod)
wait_for 60 "with the webhook down, the command route still gets the new events" \
  bash -c "grep -qF '\"title\":\"shop/n4 prod: SUCCEEDED\"' '$work/command.rec'"
pending=$(sql "SELECT COUNT(*) FROM outbox o JOIN pipeline_event e ON e.id = o.ref_id
               WHERE e.pipeline_id = '$id4' AND o.delivered_at IS NULL")
is "$pending" "$(sql "SELECT COUNT(*) FROM pipeline_event WHERE pipeline_id = '$id4'")" \
  "... while every event of the new pipeline waits for the webhook"
wait_for 20 "... and s1 keeps retrying it" bash -c \
  "[[ \$(sql \"SELECT COUNT(*) FROM notify_pending WHERE attempts >= 2\") -ge 1 ]]"

kill -KILL "${SRV_PID[s1]}"; wait "${SRV_PID[s1]}" 2>/dev/null; unset 'SRV_PID[s1]'
wait_for 20 "s2 takes over oops:leader:notify after s1 is SIGKILLed" bash -c '[[ $(notify_leader) == s2 ]]'
like "$(cat "${SRV_LOG[s2]}")" 'scan=notify msg="leading: took oops:leader:notify"' "... and says so"
start_sink "$work/hook2.rec" 0 || exit 1
wait_for 60 "the pending events are delivered by the new leader" all_delivered
is "$(ok_lines "$work/hook2.rec" | ids | sort -u | grep -Fxf <(event_ids "WHERE pipeline_id = '$id4'"))" \
  "$(event_ids "WHERE pipeline_id = '$id4'" | sort)" "every event of the pending pipeline reached the webhook"
is "$(awk '{print $4}' "$work/hook2.rec" | sort -u)" "s2" "... sent by s2"
is "$(cat "$work/hook1.rec" "$work/hook2.rec" | ok_lines /dev/stdin | ids | sort -u)" "$(event_ids | sort)" \
  "not one event lost across the crash"
check "... in order" in_order_per_pipeline "$work/hook2.rec" "$id4"

############################################################ alert edges

# Rows as the alert scan writes them; a malformed one first must not hold
# back the good one behind it.
sql "INSERT INTO outbox (event_id, kind, payload) VALUES ('alert-bad-1', 'alert', '{\"edge\":\"BOOM\"}')"
sql "INSERT INTO outbox (event_id, kind, payload) VALUES ('alert-shop/n1/prod/cpu-1', 'alert',
  '{\"edge\":\"FIRING\",\"namespace\":\"shop\",\"application\":\"n1\",\"environment\":\"prod\",
    \"metric\":\"cpu\",\"percent\":95,\"threshold\":1900,\"limit\":2000,\"pods\":[\"n1-0\"],
    \"since\":\"2026-08-01 12:00:00\",\"time\":\"2026-08-01 12:10:00\"}')"
wait_for 20 "alert rows are delivered too" all_delivered_alerts
like "$(sql "SELECT last_error FROM outbox WHERE event_id = 'alert-bad-1'")" \
  '^undeliverable: alert payload: edge: BOOM' "a malformed payload is marked undeliverable, saying why"
like "$(cat "${SRV_LOG[s2]}")" 'level=error server=s2 scan=notify event=alert-bad-1 msg="notification undeliverable' \
  "... loudly"
alert=$(ok_lines "$work/hook2.rec" | grep -F '"id":"alert-shop/n1/prod/cpu-1"' | head -1)
like "$alert" '"kind":"alert","type":"FIRING","level":"warning","title":"resource alert \| CPU exceeded threshold"' \
  "the alert edge behind it reached the webhook: kind, type, level, title"
like "$alert" '\{"name":"threshold","value":"95% \(1900m / 2000m\)"\}' "... the threshold in human units"
like "$alert" '"advice":"CPU over the limit is throttled' "... and the advice"

############################################### a reload removes the failing route

sink_stop hook
id5=$(ctl create --app shop/n5 --env prod)
wait_for 60 "with the webhook down again, the command route gets a new pipeline's events" \
  bash -c "grep -qF '\"title\":\"shop/n5 prod: SUCCEEDED\"' '$work/command.rec'"
check "... which wait for the webhook" bash -c '! all_delivered'
sed -i '/webhook/d' "$work/policies/oopsd.lua"
kill -HUP "${SRV_PID[s2]}"
wait_for 20 "a reload that removes the webhook completes them: delivered to every route left" all_delivered
is "$(ids "$work/command.rec" | grep '^pipeline-event-' | sort -u)" "$(event_ids | sort)" \
  "the command route got every pipeline event of the run"

done_testing
