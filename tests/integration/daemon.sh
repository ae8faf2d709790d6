# The oopsd runtime: --check, startup errors, /healthz /metrics /status,
# SIGHUP reload (broken then fixed), the lock session killed from the
# database side, and SIGTERM releasing every lock.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
trap stop_servers EXIT
oopsd="$OOPS_BUILD/oopsd"
fixtures="$OOPS_ROOT/tests/fixtures/policies"

# --check, without a database (like nginx -t)
out=$(env -u OOPS_DB "$oopsd" --check --policies "$OOPS_ROOT/policies"); is "$?" 0 "--check on the shipped policies exits 0"
is "$out" "ok" "... and prints ok"
out=$("$oopsd" --check --policies "$fixtures/broken"); is "$?" 1 "--check on a broken directory exits 1"
like "$out" 'broken/oopsd.lua:1: scan.interval: "fast": not a duration' "... printing file:line: what: why"
out=$("$oopsd" --check --policies /nonexistent 2>&1); is "$?" 1 "--check on a missing directory exits 1"

# Startup errors: one line naming what and where, a documented exit code.
pw=$(cat "$OOPS_DB_PASSWORD_FILE") # the URL has none (issue 34)
out=$("$oopsd" --db "mysql://oops:$pw@127.0.0.1:1/x" --name e1 --policies "$fixtures/fast" --listen off 2>&1); rc=$?
is "$rc" 2 "an unreachable database exits 2"
like "$out" "cannot connect to database at 127.0.0.1:1" "... naming the host"
unlike "$out" "$pw" "... never the password"
out=$("$oopsd" --db "${OOPS_TEST_DB/\/\/oops@/\/\/oops:nope@}" --name e1 --policies "$fixtures/fast" --listen off 2>&1)
is "$?" 2 "refused credentials exit 2"
out=$("$oopsd" --db "$OOPS_TEST_DB" --name e1 --policies "$fixtures/broken" --listen off 2>&1)
is "$?" 1 "a broken policy at start exits 1"
like "$out" 'scan.interval: "fast": not a duration' "... with the policy error"
out=$("$oopsd" --db "$OOPS_TEST_DB" --policies "$fixtures/fast" 2>&1); is "$?" 1 "--name is required"

# --drain: a whole number of milliseconds from 1 to 3600000, or the server
# does not start (the timeout only stops a server that wrongly started).
for d in -5 abc 0 "" 1.5 " 5" "5 " 5ms +5 0x10 3600001 99999999999999999999; do
  out=$(timeout 10 "$oopsd" --db "$OOPS_TEST_DB" --name drain1 --policies "$fixtures/fast" --listen off --drain "$d" 2>&1); rc=$?
  [[ $rc == 1 && $out == "oopsd: --drain \"$d\": "* ]] || is "$rc: $out" "1: oopsd: --drain ..." "--drain $(printf %q "$d") is refused"
done
is "$(sql "SELECT COUNT(*) FROM server WHERE name = 'drain1'")" 0 "every bad --drain of the class is refused (exit 1, naming it) before the server starts"
out=$("$oopsd" --check --policies "$fixtures/fast" --drain 3600000); is "$?" 0 "--drain 3600000 (an hour) is accepted"
out=$("$oopsd" --check --policies "$fixtures/fast" --drain=1); is "$?" 0 "... and --drain=1"
out=$("$oopsd" --check --policies "$fixtures/fast" --drain 5 --drain 6 2>&1); is "$?" 1 "a repeated --drain is refused"
like "$out" "--drain is given more than once" "... saying so"

# A live server.
policies="$OOPS_TEST_WORK/policies"; mkdir -p "$policies"; cp "$fixtures/fast/oopsd.lua" "$policies/"
# The password in --db on purpose: the masking is what is tested (tests pass URLs without one).
start_server s1 "$policies" --db "${OOPS_TEST_DB/\/\/oops@/\/\/oops:$pw@}"; check "the server starts" kill -0 "${SRV_PID[s1]}"
like "$(tr '\0' ' ' </proc/${SRV_PID[s1]}/cmdline)" "mysql://oops:x+@" "the password is masked in the process's argv"
unlike "$(tr '\0' ' ' </proc/${SRV_PID[s1]}/cmdline)" "$pw" "... so ps never shows it"
is "$(http_code "$(url s1 /healthz)")" 200 "/healthz is 200 with the lock session up and a policy loaded"
like "$(curl -s "$(url s1 /healthz)")" '"status":"ok"' "... and says ok"
status=$(curl -s "$(url s1 /status)")
like "$status" '"server":"s1"' "/status names the server"
like "$status" '"held_locks":\[[^]]*"oops:server:s1"' "/status lists the held locks"
conn=$(sql "SELECT lock_connection_id FROM server WHERE name = 's1'")
is "$(sql "SELECT IS_USED_LOCK('oops:server:s1')")" "$conn" "the server row maps its lock session to its name"
like "$(head -1 "${SRV_LOG[s1]}")" '^ts=[0-9T:.-]+Z level=info server=s1 msg="started: ' "log lines are key=value with ts, level, server, msg"
out=$("$oopsd" --db "$OOPS_TEST_DB" --name s1 --policies "$policies" --listen off 2>&1)
is "$?" 1 "a second server with the same name is refused (exit 1)"
like "$out" "another oopsd named s1 is running" "... saying why"

# A pipeline lock held before the reload must still be held after it.
id=$("$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" create --app shop/reload --env prod --manual)
wait_for 20 "the server drives a pipeline" bash -c "[[ \$(curl -s '$(url s1 /status)') == *'\"driving\":[\"$id\"]'* ]]"
wait_for 20 "... to BUILD_SUCCEEDED (its lock stays held while it waits)" \
  bash -c "[[ \$(sql \"SELECT status FROM pipeline WHERE id = '$id'\") == BUILD_SUCCEEDED ]]"

# SIGHUP with a broken file: the running policy stays, /healthz and /metrics say so.
printf 'application "shop/x" { biuld = {"make"} }\n' > "$policies/apps.lua"
kill -HUP "${SRV_PID[s1]}"
wait_for 10 "a broken reload makes /healthz 503" bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' '$(url s1 /healthz)') == 503 ]]"
like "$(curl -s "$(url s1 /healthz)")" '"reason":"policy stale since a failed reload"' "... with the reason"
like "$(curl -s "$(url s1 /healthz)")" 'apps.lua:1: application \\"shop/x\\": unknown key \\"biuld\\"' "... and the error"
like "$(curl -s "$(url s1 /metrics)")" 'oops_policy_reloads_total\{result="failed"\} 1' "/metrics counts the failed reload"
like "$(cat "${SRV_LOG[s1]}")" 'level=error server=s1 .*msg="policy reload failed: keeping the running policy"' "the failed reload is logged"
is "$(sql "SELECT IS_USED_LOCK('oops:pipeline:$id')")" "$conn" "the pipeline lock held before the reload is still held"
is "$(sql "SELECT IS_USED_LOCK('oops:server:s1')")" "$conn" "... and so is the server lock (same session)"

# Fix it: the new policy is swapped in.
# (Once a policy declares applications, the engine drives only those: shop/reload too.)
printf 'application "shop/x" { environments = { "prod" }, build = {"make"} }\napplication "shop/reload" { environments = { "prod" } }\n' > "$policies/apps.lua"
kill -HUP "${SRV_PID[s1]}"
wait_for 10 "a good reload makes /healthz 200 again" bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' '$(url s1 /healthz)') == 200 ]]"
like "$(curl -s "$(url s1 /metrics)")" 'oops_policy_reloads_total\{result="ok"\} 1' "/metrics counts the good reload"
like "$(curl -s "$(url s1 /metrics)")" 'oops_policy_version 2' "... and the policy version"
is "$(sql "SELECT IS_USED_LOCK('oops:pipeline:$id')")" "$conn" "locks are untouched by the reload"

# /metrics: the scans run and are counted.
m=$(curl -s "$(url s1 /metrics)")
like "$m" 'oops_scan_runs_total\{scan="build"\} [1-9]' "/metrics counts scan runs per scan"
like "$m" 'oops_scan_duration_seconds_count\{scan="rollout"\} [1-9]' "/metrics has scan durations"
like "$m" 'oops_lock_session_up 1' "/metrics says the lock session is up"
like "$m" 'oops_transitions_total\{to="BUILD_SUCCEEDED"\} 1' "/metrics counts transitions by target status"

# The lock session killed from the database side: 503, then 200 after the reconnect.
sql "KILL $conn"
wait_for 10 "/healthz is 503 once the lock session is gone" bash -c "[[ \$(curl -s '$(url s1 /healthz)') == *'lock session down'* || \$(curl -s '$(url s1 /metrics)') == *'oops_lock_reconnects_total 1'* ]]"
wait_for 15 "... and 200 again after the reconnect" bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' '$(url s1 /healthz)') == 200 ]]"
like "$(curl -s "$(url s1 /metrics)")" 'oops_lock_reconnects_total 1' "/metrics counts the reconnect"
like "$(cat "${SRV_LOG[s1]}")" 'lock session lost' "the loss is logged"
conn2=$(sql "SELECT lock_connection_id FROM server WHERE name = 's1'")
wait_for 10 "the server row records the new lock session" bash -c "[[ \$(sql \"SELECT IS_USED_LOCK('oops:server:s1')\") == \$(sql \"SELECT lock_connection_id FROM server WHERE name = 's1'\") ]]"
# The waiting manual pipeline is driven again once its deploy is requested.
"$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" deploy "$id" >/dev/null
wait_for 20 "after the reconnect the server takes the pipeline again and finishes it" \
  bash -c "[[ \$(sql \"SELECT status FROM pipeline WHERE id = '$id'\") == SUCCEEDED ]]"

# SIGTERM: every lock released, exit 0.
kill -TERM "${SRV_PID[s1]}"; wait "${SRV_PID[s1]}"; is "$?" 0 "SIGTERM exits 0"
is "$(sql "SELECT COALESCE(IS_USED_LOCK('oops:pipeline:$id'), 'free')")" free "SIGTERM released the pipeline lock"
is "$(sql "SELECT COALESCE(IS_USED_LOCK('oops:server:s1'), 'free')")" free "... and the server lock"
is "$(sql "SELECT COALESCE(lock_connection_id, 'none') FROM server WHERE name = 's1'")" none "the server row says it is gone"
like "$(tail -1 "${SRV_LOG[s1]}")" 'stopped: every lock released' "the stop is logged"
unset 'SRV_PID[s1]'

done_testing
