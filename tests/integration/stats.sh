# `oopsctl stats` (issue 39): the four delivery figures, against a history
# made for the purpose (rows as the engine writes them, times relative to the
# database's clock, in whole seconds) whose answers are known:
#   shop/api/prod  r1 live -6d, committed 5h before (lead 5h, from the source)
#                  r2 live -5d, created 1h before, no source (lead 1h)
#                  r3 failed from DEPLOYING at -4d (a failure; restored 2h later by r4)
#                  r4 live -4d+2h, created 1h before (lead 1h)
#                  r5 live -2d, committed 3h before at +01:00 (lead 3h),
#                     rolled back at -2d+1h by rb1, live -2d+1h30m (restore 30m)
#                  r6 failed from RUNNING at -1d-1h (a build: no deployment)
#                  r7 live -10d, created 6h before (only in the 30d window)
#   shop/web/staging
#                  w1 live -1d, created 4h before, a commit time after its
#                     live time (ignored: lead from creation, 4h)
#                  w2 failed from ROLLING_OUT at -12h, nothing live since (open)
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
trap stop_servers EXIT
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }
ctl migrate >/dev/null || { echo "not ok 1 - migrate"; exit 1; }

source "$OOPS_ROOT/tests/lib/stats_history.sh"

# one figure of a --json answer: jq path (ratios to 1e-4)
j() { jq -r "$1 | if type == \"number\" then (. * 10000 | round / 10000) else . end" <<<"$2"; }
figures() { # label, json, path prefix, expected "deployments leads(median p90 n source) deployed failures rate restore(median n open)"
  local got
  got="$(j "$3.deployments" "$2") $(j "$3.lead_time.median_s" "$2") $(j "$3.lead_time.p90_s" "$2")"
  got+=" $(j "$3.lead_time.releases" "$2") $(j "$3.lead_time.from_source" "$2")"
  got+=" $(j "$3.change_failure.deployments" "$2") $(j "$3.change_failure.failures" "$2") $(j "$3.change_failure.rate" "$2")"
  got+=" $(j "$3.restore.median_s" "$2") $(j "$3.restore.restored" "$2") $(j "$3.restore.open" "$2")"
  is "$got" "$4" "$1"
}

out=$(ctl --json stats --app shop/api --env prod --since 7d); is "$?" 0 "oopsctl stats --app --env --since 7d --json: exit 0"
figures "shop/api/prod over 7d: 4 live, lead median 2h p90 5h (2 from the source), 2 failures of 5 deployments, restore median 1h15m" \
  "$out" .fleet "4 7200 18000 4 2 5 2 0.4 4500 2 0"
is "$(j .fleet.per_day "$out")" "0.5714" "... 4/7 releases live per day"
is "$(j '.targets | length' "$out")" 1 "... one target"
is "$(j '.series | length' "$out"):$(j '[.series[].deployments] | add' "$out")" "7:4" "... a series of 7 days holding the 4 releases"
is "$(j '.series[3].deployments' "$out"):$(j '.series[3].lead_time.median_s' "$out")" "1:3600" "... r4 on the 4th day (4 days less 2h ago), its lead 1h"

out=$(ctl --json stats --since 7d)
figures "the fleet over 7d: 5 live, lead median 3h p90 5h, 3 failures of 7, one failure still open" \
  "$out" .fleet "5 10800 18000 5 2 7 3 0.4286 4500 2 1"
is "$(j '[.targets[].target] | join(",")' "$out")" "shop/api/prod,shop/web/staging" "... per target, in order"
figures "... shop/web/staging: the commit time after its live time is ignored (lead from creation)" \
  "$out" '.targets[1]' "1 14400 14400 1 0 2 1 0.5 null 0 1"

out=$(ctl --json stats)
figures "the fleet over 30d (the default): r7 counts too" "$out" .fleet "6 12600 21600 6 2 8 3 0.375 4500 2 1"
is "$(j .days "$out")" 30 "... a window of 30 days"

out=$(ctl --json stats --env staging --since 90d)
figures "--env selects targets of every application" "$out" .fleet "1 14400 14400 1 0 2 1 0.5 null 0 1"

out=$(ctl --json stats --app shop/api --env prod --since 1d)
figures "an empty window: nothing live, no rate, no median" "$out" .fleet "0 null null 0 0 0 0 null null 0 0"
out=$(ctl --json stats --app shop/none); is "$?" 0 "an application without history: exit 0"
is "$(j '.fleet.deployments' "$out"):$(j '.targets | length' "$out")" "0:0" "... nothing in it"

out=$(ctl stats --app shop/api --env prod --since 7d); is "$?" 0 "the text form: exit 0"
like "$out" "Delivery over the last 7d" "... says the window"
like "$out" "shop/api/prod +4 +0\.57 +2h +5h +40\.0% \(2 of 5\) +1h 15m +0" "... one line per target"
like "$out" "all of shop/api/prod +4 " "... and the line of all it selected"

# Many releases ending at the same microsecond: read a page (1000) a statement,
# each page after the last row read by (time, id), none twice, none lost.
sql "INSERT INTO pipeline (id, namespace, application, environment, status, trigger_type, created_at, status_changed_at)
  SELECT CONCAT('bulk', LPAD(seq, 6, '0')), 'bulk', 'app', 'prod', 'SUCCEEDED', 'release',
    FROM_UNIXTIME($((base - 3 * D - H))), FROM_UNIXTIME($((base - 3 * D))) FROM seq_1_to_2500"
out=$(ctl --json stats --app bulk/app --env prod --since 7d)
figures "2500 releases live at the same time, read in three pages: each counted once" "$out" .fleet \
  "2500 3600 3600 2500 0 2500 0 0 null 0 0"
out=$(ctl --json stats --since 7d)
is "$(j .fleet.deployments "$out")" 2505 "... beside the others"
sql "DELETE FROM pipeline WHERE namespace = 'bulk'"

# The same figures from a server: GET /api/stats (the fleet page's panel) and
# the gauges of /metrics, computed in a task (202 until the first is made).
policies="$OOPS_TEST_WORK/stats-policies"; mkdir -p "$policies"
cp "$OOPS_ROOT/tests/fixtures/policies/fast/oopsd.lua" "$policies/"
start_server st1 "$policies"
wait_for 20 "GET /api/stats answers 200 once computed" bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' '$(url st1 /api/stats)') == 200 ]]"
page=$(curl -s "$(url st1 /api/stats)")
is "$(j '.order | join(",")' "$page")" "7d,30d,90d" "... the three windows"
figures "... its 7d fleet figures are oopsctl's" "$page" '.windows["7d"].fleet' "5 10800 18000 5 2 7 3 0.4286 4500 2 1"
figures "... and its 30d" "$page" '.windows["30d"].fleet' "6 12600 21600 6 2 8 3 0.375 4500 2 1"
is "$(j '.windows["90d"].series | length' "$page"):$(j '.windows["7d"].targets_n' "$page")" "90:2" \
  "... a day per point of the 90d series; the targets counted, not listed"
metrics=$(curl -s "$(url st1 /metrics)")
like "$metrics" $'oops_delivery_deployments_per_day\\{window="7d"\\} 0\\.714' "/metrics: deployments per day over 7d"
like "$metrics" $'oops_delivery_lead_time_seconds\\{stat="p90",window="30d"\\} 21600\n' "... lead time p90 over 30d"
like "$metrics" $'oops_delivery_change_failure_ratio\\{window="7d"\\} 0\\.428' "... change failure rate over 7d"
like "$metrics" $'oops_delivery_time_to_restore_seconds\\{window="90d"\\} 4500' "... time to restore over 90d"
out=$(promtool check metrics <<<"$metrics" 2>&1)
is "$?" 0 "... which promtool check metrics accepts ($out)"
# No release in a window: NaN, not a made-up 0.
sql "DELETE FROM pipeline; DELETE FROM pipeline_event"
start_server st2 "$policies"
wait_for 20 "an empty history: another server computes its figures" bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' '$(url st2 /api/stats)') == 200 ]]"
is "$(j '.windows["7d"].fleet.lead_time.median_s' "$(curl -s "$(url st2 /api/stats)")")" null "... no lead time (null)"
metrics=$(curl -s "$(url st2 /metrics)")
like "$metrics" $'\noops_delivery_lead_time_seconds\\{stat="median",window="7d"\\} NaN\n' "... the gauge says NaN, not a made-up 0"
like "$metrics" $'\noops_delivery_deployments_per_day\\{window="7d"\\} 0\n' "... and 0 releases a day"
out=$(promtool check metrics <<<"$metrics" 2>&1); is "$?" 0 "... which promtool accepts too ($out)"
unlike "$(cat "${SRV_LOG[st1]}")" "delivery figures: reading the history failed" "the server never failed a computation"

# Bad input: a clear message, exit 1, nothing read.
for bad in "--since 2h|--since \"2h\": a window is whole days from 1d to 90d" \
  "--since 91d|a window is whole days from 1d to 90d" "--since soon|not a duration" \
  "--app shop|--app \"shop\": expected NAMESPACE/APPLICATION" "--env Prod|--env \"Prod\": expected a lowercase DNS label" \
  "--app shop/api --app shop/web|--app is given more than once" "--what x|unknown option \"--what\""; do
  args=${bad%%|*} want=${bad#*|}
  # shellcheck disable=SC2086 # the flags are words
  out=$(ctl stats $args 2>&1); rc=$?
  is "$rc" 1 "stats $args: exit 1"
  like "$out" "$want" "... $want"
done
out=$("$OOPS_BUILD/oopsctl" --db "mysql://nobody@127.0.0.1:1/oops" stats 2>&1); rc=$?
is "$rc" 2 "an unreachable database: exit 2"
like "$out" "^oopsctl: stats: " "... one line naming the command ($out)"
done_testing
