# The database stops answering (issue 15): MariaDB frozen with SIGSTOP for
# longer than the connection's read timeout, while a server drives pipelines.
# The server's loop never waits on the database, so /healthz keeps answering
# at once — 200 while the lock session is believed up, then 503 "lock session
# down" once the validation times out — and SIGTERM exits within --drain,
# abandoning the statements nobody answers. After the thaw a new server
# finishes every pipeline: nothing was lost. Its own MariaDB (it is frozen).
#
# The bounds are generous and only stop a hung test: each /healthz within 2 s
# (a server blocked on the database would not answer for the whole read
# timeout, 10 s here), exit within --drain + 4 s (before issue 15 it took
# several read timeouts).
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
source "$OOPS_ROOT/tests/lib/mariadb.sh" # replaces MDB_* in this process only
work=$(mktemp -d "$OOPS_TEST_WORK/freeze.XXXXXX")
cleanup() {
  [[ -n ${MDB_PID:-} ]] && kill -CONT "$MDB_PID" 2>/dev/null
  stop_servers
  mariadb_stop
}
trap cleanup EXIT
mariadb_start "$work/mariadb" || { echo "not ok 1 - a MariaDB of its own starts"; exit 1; }
read_timeout=10
export OOPS_TEST_DB="$(mariadb_new_db freeze)?read_timeout=$read_timeout&connect_timeout=2"
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }
check "oopsctl migrate" ctl migrate

policies="$work/policies"; mkdir -p "$policies"
cat >"$policies/oopsd.lua" <<'EOF'
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
deploy  { timeout = "30s" }
rollout { timeout = "30s" }
gateway "simulated" { build = "3s", deploy = "0s", rollout = "500ms" }
application "shop/a1" { environments = { "prod" } }
application "shop/a2" { environments = { "prod" } }
application "shop/a3" { environments = { "prod" } }
application "shop/a4" { environments = { "prod" } }
EOF
start_server frz1 "$policies" --drain 1500 || exit 1
ids=()
for a in a1 a2 a3 a4; do ids+=("$(ctl create --policies "$policies" --app "shop/$a" --env prod --artifact "r/$a:1")"); done
wait_for 20 "the server drives the pipelines (RUNNING)" \
  bash -c "[[ \$('$OOPS_BUILD/oopsctl' --db '$OOPS_TEST_DB' list --status RUNNING | grep -c RUNNING) -ge 4 ]]"
is "$(http_code "$(url frz1 /healthz)")" 200 "healthy before the freeze"

# --- freeze the database past the read timeout -------------------------------
kill -STOP "$MDB_PID"
frozen_at=$SECONDS
slow=0 answered=0 saw503=0 worst=0
while ((SECONDS - frozen_at < read_timeout + 4)); do
  t0=$(date +%s%N)
  code=$(curl -s -o /dev/null --max-time 2 -w '%{http_code}' "$(url frz1 /healthz)")
  ms=$((($(date +%s%N) - t0) / 1000000))
  ((ms > worst)) && worst=$ms
  if [[ $code == 200 || $code == 503 ]]; then answered=$((answered + 1)); else slow=$((slow + 1)); fi
  [[ $code == 503 ]] && saw503=1
  sleep 0.2
done
is "$slow" 0 "while the database is frozen, /healthz answers every probe within 2 s ($answered probes, slowest ${worst} ms)"
is "$saw503" 1 "... and says 503 once the lock session's validation timed out ($read_timeout s read timeout)"
like "$(curl -s --max-time 2 "$(url frz1 /healthz)")" 'lock session down' "... naming the lock session"
like "$(curl -s --max-time 2 "$(url frz1 /metrics)")" 'oops_tasks [0-9]' "/metrics answers too"

# --- SIGTERM while frozen -------------------------------------------------------
t0=$(date +%s%N)
kill -TERM "${SRV_PID[frz1]}"
wait "${SRV_PID[frz1]}"; rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
unset 'SRV_PID[frz1]'
is "$rc" 0 "SIGTERM while the database is frozen: exit 0"
((ms < 1500 + 4000)); _tap $? "... within --drain 1500 ms + 4 s (${ms} ms; the read timeout is ${read_timeout} s)"
like "$(cat "${SRV_LOG[frz1]}")" 'database call\(s\) unanswered after 1500 ms: abandoning them' \
  "... abandoning the unanswered statements, and saying so"

# --- thaw: nothing was lost --------------------------------------------------
kill -CONT "$MDB_PID"
start_server frz2 "$policies" || exit 1
for id in "${ids[@]}"; do
  wait_for 60 "pipeline $id finishes SUCCEEDED after the thaw" \
    bash -c "[[ \$('$OOPS_BUILD/oopsctl' --db '$OOPS_TEST_DB' --json show '$id') == *'\"status\":\"SUCCEEDED\"'* ]]"
done
is "$(mariadb "${MDB_ADMIN[@]}" -N -B freeze -e \
  "SELECT COUNT(*) FROM sim_call WHERE action = 'build_submit' GROUP BY pipeline_id HAVING COUNT(*) > 1" | wc -l)" 0 \
  "... each built once"
kill -TERM "${SRV_PID[frz2]}"; wait "${SRV_PID[frz2]}"; is "$?" 0 "the second server stops cleanly"
unset 'SRV_PID[frz2]'
done_testing
