# contrib/prometheus/: the alerting rules are valid (promtool check rules),
# each alert fires and stays quiet as its unit tests say (promtool test rules
# oopsd.rules.test.yml), every oops_* metric they use is one a running oopsd
# exports, and that server's /metrics passes `promtool check metrics` (the
# text format and its lint: help texts, counter names, histogram buckets).
# The gauges the rules read from the database (lua/oops/scans/stats.lua) are
# checked against rows made for the purpose: an old undelivered notification
# and a manual pipeline waiting for an hour.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
trap stop_servers EXIT
rules=$OOPS_ROOT/contrib/prometheus/oopsd.rules.yml
cd "$OOPS_ROOT/contrib/prometheus" || exit 1

if ! command -v promtool >/dev/null; then
  echo "not ok 1 - promtool is installed (apt-get install prometheus; scripts/setup.sh does)"
  echo "1..1"; exit 1
fi

out=$(promtool check rules oopsd.rules.yml 2>&1); rc=$?
is "$rc" 0 "promtool check rules accepts oopsd.rules.yml"
like "$out" "SUCCESS: [0-9]+ rules found" "... $(grep -o 'SUCCESS.*' <<<"$out")"
out=$(promtool test rules oopsd.rules.test.yml 2>&1); rc=$?
is "$rc" 0 "promtool test rules: every alert fires and stays quiet as tested"
[[ $rc == 0 ]] || sed 's/^/#   /' <<<"$out" | head -40
# Every alert has a unit test.
for a in $(sed -nE 's/^ *- alert: *([A-Za-z]+).*/\1/p' oopsd.rules.yml); do
  check "alert $a is unit-tested" grep -q "alertname: $a\$" oopsd.rules.test.yml
done

# A live server.
"$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" migrate >/dev/null
policies=$OOPS_TEST_WORK/prometheus.$$
mkdir -p "$policies"
cp "$OOPS_ROOT/tests/fixtures/policies/fast/oopsd.lua" "$policies/"
start_server p1 "$policies"
m() { curl -s -m 5 "$(url p1 /metrics)"; }
metric() { m | awk -v s="$1" '$1 == s { print $2 }'; }
wait_for 30 "/metrics shows the database gauges (the stats scan ticked)" \
  bash -c "curl -s -m 5 '$(url p1 /metrics)' | grep -q '^oops_notifications_pending '"

text=$(m)
out=$(promtool check metrics <<<"$text" 2>&1); rc=$?
is "$rc:$out" "0:" "promtool check metrics passes on /metrics (no error, no lint)"
# (names in the expressions: not in comments, summaries or descriptions)
for name in $(grep -vE '^ *#|summary:|description:' "$rules" | grep -oE 'oops_[a-z_]+' | sort -u); do
  check "the rules' $name is exported" grep -qE "^$name(\{| )" <<<"$text"
done
# (The stats scan may tick before the restart scan has taken its lock: the
# gauge follows at its next tick, every 15 s.)
wait_for 40 "oops_leader: the only server leads restart" \
  bash -c "curl -s -m 5 '$(url p1 /metrics)' | grep -q '^oops_leader{scan=\"restart\"} 1'"
is "$(metric 'oops_pipeline_timeout_seconds{status="RUNNING"}')" 7200 \
  "oops_pipeline_timeout_seconds: RUNNING is build.timeout (default 2h)"
is "$(metric 'oops_pipeline_timeout_seconds{status="DEPLOYING"}')" 6 "... DEPLOYING is deploy.timeout (6s here)"
like "$text" $'\n# TYPE oops_scan_duration_seconds histogram\n' "scan durations are a histogram"
like "$text" $'\noops_scan_duration_seconds_bucket\\{le="\\+Inf",scan="build"\\} [1-9]' "... with its buckets"

# An hour-old notification in the log route's queue (its retry not due for a
# day: the notifier leaves it), and a manual pipeline waiting an hour in BUILD_SUCCEEDED.
sql "INSERT INTO outbox (event_id, kind, payload, created_at, routed)
     VALUES ('prometheus-test', 'alert', '{}', NOW(6) - INTERVAL 1 HOUR, 1);
     INSERT INTO notify_pending (route_key, outbox_id, attempts, next_attempt_at)
     SELECT 'log', id, 1, NOW(6) + INTERVAL 1 DAY FROM outbox WHERE event_id = 'prometheus-test'"
id=$("$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" create --app shop/api --env prod --manual 2>/dev/null)
wait_for 30 "the manual pipeline reaches BUILD_SUCCEEDED" \
  bash -c "[[ \$(sql \"SELECT status FROM pipeline WHERE id = '$id'\") == BUILD_SUCCEEDED ]]"
sql "UPDATE pipeline SET status_changed_at = NOW(6) - INTERVAL 1 HOUR WHERE id = '$id'"
aged() { # metric name, minimum value
  local v; v=$(metric "$1"); [[ -n $v ]] && awk -v v="$v" -v min="$2" 'BEGIN { exit !(v >= min) }'
}
wait_for 30 "oops_notifications_oldest_pending_seconds sees the hour-old row" \
  aged oops_notifications_oldest_pending_seconds 3600
check "... and oops_notifications_pending counts it" aged oops_notifications_pending 1
wait_for 30 "oops_pipeline_oldest_seconds{status=\"BUILD_SUCCEEDED\"} sees the hour-old wait" \
  aged 'oops_pipeline_oldest_seconds{status="BUILD_SUCCEEDED"}' 3600
is "$(metric 'oops_pipelines{status="BUILD_SUCCEEDED"}')" 1 "... and oops_pipelines counts it"
is "$(metric 'oops_pipelines{status="RUNNING"}')" 0 "... and nothing RUNNING"
out=$(m | promtool check metrics 2>&1); rc=$?
is "$rc:$out" "0:" "/metrics still passes promtool check metrics"

done_testing
