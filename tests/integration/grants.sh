# Least privilege and schema versions. The SQL of "Database grants"
# (doc/guide/database.md) is run as written (only the client host and the
# passwords replaced) on a MariaDB of this test's own with TLS (its accounts
# REQUIRE SSL): oopsctl migrate works as `oopsd_migrate`; real servers
# connected as `oopsd` (rows only) wait for that migration, then drive
# pipelines, restarts, alerts, notifications and a takeover (a scenario) and
# the exec gateway. Then the schema checks ("Rolling upgrade of a fleet",
# doc/guide/install.md): a newer schema is refused at start (oopsd, oopsctl),
# an older one is never driven.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
source "$OOPS_ROOT/tests/lib/mariadb.sh" # replaces MDB_* in this process only
work=$(mktemp -d "$OOPS_TEST_WORK/grants.XXXXXX")
declare -A own # servers started here without start_server: name -> pid
cleanup() {
  local n
  for n in "${!own[@]}"; do kill -KILL "${own[$n]}" 2>/dev/null; wait "${own[$n]}" 2>/dev/null; done
  for f in "$work"/exec/*.build.pid; do [[ -s $f ]] && kill -KILL -- "-$(cat "$f")" 2>/dev/null; done
  stop_servers
  mariadb_stop
}
trap cleanup EXIT
MDB_TLS=1 mariadb_start "$work/mariadb" || { echo "not ok 1 - a MariaDB with TLS starts"; exit 1; }
oopsd="$OOPS_BUILD/oopsd" ctl="$OOPS_BUILD/oopsctl"
root() { mariadb "${MDB_ADMIN[@]}" -N -B "$@"; } # the socket, as our OS user (unix_socket)
# This build's latest schema, from its list of migrations (src/schema.c);
# checked below against what `oopsctl migrate` says.
latest=$(sed -nE 's/^ *\{([0-9]+), ".*", v[0-9]+\},$/\1/p' "$OOPS_ROOT/src/schema.c" | tail -n 1)

# The guide's statements, as written.
grants=$(awk '/^## Database grants/ {on = 1; next} /^## / {on = 0} on' "$OOPS_ROOT/doc/guide/database.md" |
  awk '/^```sql/ {on = 1; next} /^```/ {on = 0} on')
is "$(grep -c '^GRANT ' <<<"$grants")" 2 "doc/guide/database.md \"Database grants\" holds two GRANT statements"
run_pw=$(mariadb_password) mig_pw=$(mariadb_password)
sql_text=$(sed -e "s/'10\.0\.0\.%'/'127.0.0.1'/g" -e "s/'a long random password'/'$run_pw'/" \
  -e "s/'another long random password'/'$mig_pw'/" <<<"$grants")
out=$(root <<<"$sql_text" 2>&1); is "$?:$out" "0:" "... and they run as written"
global=$(root -e "SHOW GRANTS FOR 'oopsd'@'127.0.0.1'" | grep ' ON \*\.\* ')
like "$global" '^GRANT USAGE ON \*\.\* TO `oopsd`@`127\.0\.0\.1`' "oopsd holds no global privilege (no SUPER, no PROCESS)"
tls="ssl-mode=VERIFY_IDENTITY&ssl-ca=$MDB_TLS_CA"
run_db="mysql://oopsd:$run_pw@127.0.0.1:$MDB_PORT/oops?$tls"
mig_db="mysql://oopsd_migrate:$mig_pw@127.0.0.1:$MDB_PORT/oops?$tls"
admin_db="$MDB_URL" # the test's own account (all privileges): the scenario runner, checks

# --- an empty database: the run-time account cannot migrate, so it waits -----
policies="$work/policies"; mkdir -p "$policies"
cp "$OOPS_ROOT/tests/fixtures/policies/fast/oopsd.lua" "$policies/"
OOPS_TEST_DB=$run_db start_server gw1 "$policies"
check "a server holding the run-time grants starts on an empty database" kill -0 "${SRV_PID[gw1]}"
is "$(http_code "$(url gw1 /healthz)")" 503 "... but it is not healthy"
like "$(curl -s "$(url gw1 /healthz)")" '"reason":"waiting for `oopsctl migrate`: the database schema is older than this oopsd"' \
  "... /healthz says it waits for oopsctl migrate"
like "$(cat "${SRV_LOG[gw1]}")" "msg=\"waiting for \`oopsctl migrate\`: database schema 0 is older than this oopsd \($latest\) and this account may not migrate it \(creating schema_version: .*CREATE command denied to user 'oopsd'" \
  "... and its log says why"
unlike "$(cat "${SRV_LOG[gw1]}")" "$run_pw" "... never the password"
out=$("$ctl" --db "$run_db" migrate 2>&1); rc=$?
is "$rc" 1 "oopsctl migrate with the run-time grants is refused (exit 1)"
like "$out" "CREATE command denied to user 'oopsd'" "... the database says why"
out=$("$ctl" --db "$run_db" list 2>&1); rc=$?
is "$rc:$out" "1:oopsctl: database schema 0 is older than this oopsctl ($latest) (run \`oopsctl migrate\` first)" \
  "oopsctl list on an empty database: exit 1, run oopsctl migrate first"
out=$("$ctl" --db "$mig_db" migrate 2>&1); rc=$?
is "$rc:$out" "0:applied $latest migrations; schema is at version $latest" "oopsctl migrate with the migrate grants applies every migration"
wait_for 20 "the waiting server sees the schema and drives (/healthz 200)" \
  bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' '$(url gw1 /healthz)') == 200 ]]"
like "$(cat "${SRV_LOG[gw1]}")" "msg=\"database schema $latest reached: driving\"" "... logging it"
is "$(root oops -e "SELECT COUNT(*) FROM server WHERE name = 'gw1'")" 1 "... registered in the server table"
kill -TERM "${SRV_PID[gw1]}"; wait "${SRV_PID[gw1]}"; is "$?" 0 "... and stops cleanly (SIGTERM, exit 0)"
unset 'SRV_PID[gw1]'

# --- a scenario: two servers with the run-time grants -----------------------
cat >"$work/least_privilege.lua" <<'EOF'
-- Servers connected with the run-time grants only ("Database grants"):
-- tests/lib/workload.lua (pipelines auto, manual and stopped through a
-- driver's SIGKILL, scheduled restarts, an alert episode, webhook
-- notifications). The runner itself uses the test's own account.
local run_db = assert(os.getenv("OOPS_GRANTS_RUN_DB"), "OOPS_GRANTS_RUN_DB")
local all = assert(loadfile(os.getenv("OOPS_ROOT") .. "/tests/lib/workload.lua", "t", _ENV))(run_db)
expect(sql("SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE USER = 'oopsd'")[1].n >= 4,
  "both servers' work and lock sessions are the run-time account's")
-- A scan that failed on a privilege would be logged and retried, not fatal: look.
for _, s in ipairs(all) do
  local line = s:log():match("[^\n]*denied[^\n]*")
  expect(line == nil, s.name .. " was never denied a statement", line)
end
EOF
out=$(OOPS_GRANTS_RUN_DB=$run_db "$ctl" --db "$admin_db" scenario "$work/least_privilege.lua" 2>&1); rc=$?
checks=$(grep -c '^ok ' <<<"$out")
is "$rc" 0 "the scenario passes with both servers on the run-time grants ($checks checks, end checks included)"
((rc == 0)) || printf '%s\n' "$out" | grep -E '^not ok|^#' | head -60 | sed 's/^/#   /'
unlike "$out" "$run_pw" "... no password in its output"

# --- retention (DELETE) as the run-time account ------------------------------
# The scenario's servers are gone: one tick of the real retention scan, run
# through `oopsd lua` connected as `oopsd`, on its history backdated by root.
root oops -e "UPDATE pipeline SET status_changed_at = NOW(6) - INTERVAL 400 DAY WHERE status = 'STOPPED';
  UPDATE outbox SET delivered_at = NOW(6) - INTERVAL 400 DAY WHERE delivered_at IS NOT NULL;
  UPDATE restart_run SET finished_at = NOW(6) - INTERVAL 400 DAY WHERE finished_at IS NOT NULL"
cat >"$work/retention.lua" <<'EOF'
local oops = require("oops")
assert(oops.connect { db = os.getenv("OOPS_GRANTS_RUN_DB"), name = "retention-check" })
local scan = require("oops.scans.retention")
oops.wait(scan.run, require("oops.policy").defaults())
local t = assert(scan.last_tick, "the retention scan did not lead")
print(("%d %d %d"):format(t.deleted.pipeline, t.deleted.outbox, t.deleted.restart_run))
EOF
out=$(OOPS_GRANTS_RUN_DB=$run_db "$oopsd" lua "$work/retention.lua" 2>&1); rc=$?
like "$rc:$out" '^0:.*[1-9][0-9]* [1-9][0-9]* [1-9][0-9]*$' \
  "the retention scan deletes expired pipelines, outbox rows and restart runs as oopsd (DELETE granted)"
unlike "$out" "denied" "... never denied a statement"

# --- the exec gateway and every oopsctl command, on the run-time grants -----
mkdir -p "$work/exec"
export EXEC_STATE=$work/exec EXEC_ARGS_FILE=$work/exec/args
OOPS_TEST_DB=$run_db start_server gx1 "$OOPS_ROOT/tests/exec/policies"
OOPS_TEST_DB=$run_db start_server gx2 "$OOPS_ROOT/tests/exec/policies"
rctl() { "$ctl" --db "$run_db" "$@"; }
id=$(rctl create --app t/web --env prod --artifact registry/t/web:1 2>/dev/null); is "$?" 0 "oopsctl create (run-time grants)"
wait_for 40 "the exec gateway drives it to SUCCEEDED (build, deploy, health)" \
  bash -c "[[ \$('$ctl' --db '$run_db' --json show '$id') == *'\"status\":\"SUCCEEDED\"'* ]]"
like "$(rctl logs "$id")" "build\.sh" "oopsctl logs shows the commands it ran"
is "$(root oops -e "SELECT state FROM exec_job WHERE pipeline_id = '$id' AND kind = 'build'")" "succeeded" \
  "... its exec_job row written by a server"
man=$(rctl create --app t/args --env prod --manual --artifact registry/t/args:1 2>/dev/null)
wait_for 30 "a manual pipeline reaches BUILD_SUCCEEDED" \
  bash -c "[[ \$('$ctl' --db '$run_db' --json show '$man') == *'\"status\":\"BUILD_SUCCEEDED\"'* ]]"
check "oopsctl deploy (run-time grants)" rctl deploy "$man"
wait_for 30 "... and it succeeds" \
  bash -c "[[ \$('$ctl' --db '$run_db' --json show '$man') == *'\"status\":\"SUCCEEDED\"'* ]]"
hold=$(rctl create --app t/web --env hold1 --artifact registry/t/web:2 2>/dev/null)
wait_for 30 "a pipeline whose build never ends runs" \
  bash -c "[[ \$('$ctl' --db '$run_db' --json show '$hold') == *'\"status\":\"RUNNING\"'* ]]"
check "oopsctl stop (run-time grants)" rctl stop "$hold"
check "oopsctl list, locks, show (run-time grants)" bash -c "'$ctl' --db '$run_db' list && '$ctl' --db '$run_db' locks && '$ctl' --db '$run_db' show '$id'"
for n in gx1 gx2; do
  unlike "$(cat "${SRV_LOG[$n]}")" "denied" "$n was never denied a statement (its log)"
  unlike "$(cat "${SRV_LOG[$n]}")" "five statements instead of one" "$n made each transition one CALL (EXECUTE granted)"
done
like "$(curl -s "$(url gx1 /metrics)")" 'oops_scan_runs_total\{scan="build"\} [1-9]' "... its scans ran"
out=$(rctl rollback --app t/web --env prod 2>&1); rc=$?
is "$rc" 1 "oopsctl rollback runs its queries (nothing earlier to roll back to: exit 1)"
like "$out" "has no earlier SUCCEEDED release to roll back to" "... saying so"

# --- schema versions ---------------------------------------------------------
newer=$((latest + 1))
root oops -e "INSERT INTO schema_version (version, description) VALUES ($newer, 'from a newer oopsd')"
# Bounded: a server that does start (a wrong $latest) fails the test, not hangs it.
out=$(timeout 30 "$oopsd" --db "$run_db" --name gn1 --policies "$policies" --listen off 2>&1); rc=$?
is "$rc:$out" "1:oopsd: database schema $newer is newer than this oopsd ($latest): upgrade oopsd" \
  "a server refuses to start against a newer schema (exit 1)"
out=$(timeout 30 "$oopsd" --db "$admin_db" --name gn1 --policies "$policies" --listen off 2>&1); rc=$?
is "$rc:$out" "1:oopsd: database schema $newer is newer than this oopsd ($latest): upgrade oopsd" \
  "... also with an account that could migrate"
out=$(rctl list 2>&1); rc=$?
is "$rc:$out" "1:oopsctl: database schema $newer is newer than this oopsctl ($latest): upgrade oopsctl" \
  "oopsctl refuses it too (exit 1)"
out=$("$ctl" --db "$mig_db" migrate 2>&1); is "$?" 1 "oopsctl migrate refuses it, changing nothing"
like "$out" "newer than this binary knows \($latest\): upgrade" "... saying so"
sleep 1
is "$(http_code "$(url gx1 /healthz)"):$(http_code "$(url gx2 /healthz)")" "200:200" \
  "servers already running carry on (the refusal is at start only)"
root oops -e "DELETE FROM schema_version WHERE version >= $latest"
# Schema latest-1 (its tables are all there: only the record says older).
OOPS_TEST_DB=$run_db start_server gw2 "$policies"
is "$(http_code "$(url gw2 /healthz)")" 503 "on an older schema a server with the run-time grants starts but drives nothing"
like "$(cat "${SRV_LOG[gw2]}")" "database schema $((latest - 1)) is older than this oopsd \($latest\)" "... saying which"
out=$(rctl list 2>&1); rc=$?
is "$rc:$out" "1:oopsctl: database schema $((latest - 1)) is older than this oopsctl ($latest) (run \`oopsctl migrate\` first)" \
  "oopsctl refuses an older schema (exit 1)"
root oops -e "INSERT INTO schema_version (version, description) VALUES ($latest, 'x'), ($newer, 'from a newer oopsd')"
wait_for 20 "a waiting server that finds a newer schema stops" bash -c "! kill -0 ${SRV_PID[gw2]} 2>/dev/null"
# Bounded: one that did not stop is killed (exit 137 fails the next check).
kill -KILL "${SRV_PID[gw2]}" 2>/dev/null
wait "${SRV_PID[gw2]}"; is "$?" 1 "... exit 1"
like "$(cat "${SRV_LOG[gw2]}")" "database schema $newer is newer than this oopsd \($latest\): upgrade oopsd" "... saying so"
unset 'SRV_PID[gw2]'
root oops -e "DELETE FROM schema_version WHERE version = $newer"
out=$("$ctl" --db "$mig_db" migrate 2>&1)
is "$out" "schema is up to date (version $latest)" "back at version $latest"
# --- an account with the grants of before schema 8 (no EXECUTE) --------------
# Its servers cannot CALL oops_transition: they say so once and make each
# transition with five statements instead; nothing else changes.
old_pw=$(mariadb_password)
root <<<"CREATE USER 'oopsd_old'@'127.0.0.1' IDENTIFIED BY '$old_pw' REQUIRE SSL;
  GRANT SELECT, INSERT, UPDATE, DELETE ON oops.* TO 'oopsd_old'@'127.0.0.1'"
old_db="mysql://oopsd_old:$old_pw@127.0.0.1:$MDB_PORT/oops?$tls"
kill -TERM "${SRV_PID[gx1]}" "${SRV_PID[gx2]}"; wait "${SRV_PID[gx1]}" "${SRV_PID[gx2]}"
unset 'SRV_PID[gx1]' 'SRV_PID[gx2]'
OOPS_TEST_DB=$old_db start_server go1 "$OOPS_ROOT/tests/exec/policies"
old_id=$(rctl create --app t/web --env prod --artifact registry/t/web:3 2>/dev/null)
wait_for 40 "a server without EXECUTE still drives a pipeline to SUCCEEDED" \
  bash -c "[[ \$('$ctl' --db '$run_db' --json show '$old_id') == *'\"status\":\"SUCCEEDED\"'* ]]"
like "$(cat "${SRV_LOG[go1]}")" "transitions take five statements instead of one: CALL oops_transition2 failed .*execute command denied.*GRANT EXECUTE" \
  "... saying once that it makes transitions the long way, and why"
is "$(grep -c 'five statements instead of one' "${SRV_LOG[go1]}")" 1 "... once"
is "$(root oops -e "SELECT COUNT(*) FROM pipeline_event e JOIN outbox o ON o.ref_id = e.id WHERE e.pipeline_id = '$old_id'")" \
  "$(root oops -e "SELECT COUNT(*) FROM pipeline_event WHERE pipeline_id = '$old_id'")" \
  "... every event with its notification, as with the CALL"
kill -TERM "${SRV_PID[go1]}"; wait "${SRV_PID[go1]}"; is "$?" 0 "... and stops cleanly"
unset 'SRV_PID[go1]'

done_testing
