# A fleet on one database (issue 24): 60 real oopsd processes on a MariaDB
# of the test's own at MariaDB's DEFAULT max_connections (151, also MySQL's),
# as a new operator's database has it. All 60 answer /healthz 200; oopsctl
# and the mariadb client still connect beside them; 600 pipelines written at
# once all finish SUCCEEDED, each built and deployed exactly once (sim_call),
# driven by most of the servers; and once idle again, every server holds at
# most 2 database connections (its lock session and one work connection),
# counted exactly from outside: the sockets in /proc/PID/fd that are
# ESTABLISHED rows of /proc/net/tcp{,6} whose remote port is the database's.
# Rates (statements a second) and times are bench/'s business
# (`bench/run --only fleet`), not this test's.
#
# OOPS_FLEET_MAX_CONNECTIONS=N raises the database's max_connections (a
# build whose servers hold more than 2 connections each cannot start 60 on
# 151: this runs its other checks anyway); OOPS_FLEET_SERVERS and
# OOPS_FLEET_PIPELINES change the sizes (the spread bound follows).
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
not_under_sanitizers "60 servers on 2 cores; the sanitizers watch the same code in every other test"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
source "$OOPS_ROOT/tests/lib/mariadb.sh" # replaces MDB_* in this process only

FLEET=${OOPS_FLEET_SERVERS:-60}
PIPELINES=${OOPS_FLEET_PIPELINES:-600}
IDLE_CONNECTIONS=2
work=$(mktemp -d "$OOPS_TEST_WORK/fleet.XXXXXX")
cleanup() {
  stop_servers
  mariadb_stop
}
trap cleanup EXIT

MDB_MAX_CONNECTIONS=${OOPS_FLEET_MAX_CONNECTIONS:-default}
mariadb_start "$work/mariadb" || { echo "not ok 1 - a MariaDB of its own starts"; exit 1; }
OOPS_TEST_DB=$(mariadb_new_db fleet)
export OOPS_TEST_DB
max_conn=$(sql "SELECT @@global.max_connections")
if [[ -z ${OOPS_FLEET_MAX_CONNECTIONS:-} ]]; then
  is "$max_conn" 151 "the database runs at MariaDB's default max_connections"
else
  echo "# max_connections raised to $max_conn (OOPS_FLEET_MAX_CONNECTIONS)"
fi
"$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" migrate >/dev/null

# Scans every second, instant simulated builds, deploys and rollouts; no
# application declared, so the simulated gateway takes any.
mkdir -p "$work/policies"
cat >"$work/policies/oopsd.lua" <<'EOF'
scan    { interval = "1s" }
gateway "simulated" { build = "0s", deploy = "0s", rollout = "0s" }
EOF

# All started at once (each in the background), then awaited together: a
# server that cannot get its connections must not cost the test 30 s each.
# Ports are picked before any server binds: each one different (60 picks of
# 12,000 collide one run in seven; a CI run's f25 found its port taken).
declare -A picked
for i in $(seq 1 "$FLEET"); do
  port=$(_free_port)
  while [[ -n ${picked[$port]:-} ]]; do port=$(_free_port); done
  picked[$port]=1
  name=f$i log="$work/f$i.log"
  "$OOPS_BUILD/oopsd" --db "$OOPS_TEST_DB" --name "$name" --policies "$work/policies" \
    --listen "127.0.0.1:$port" 2>>"$log" &
  SRV_PID[$name]=$! SRV_PORT[$name]=$port SRV_LOG[$name]=$log
done
started() { grep -l 'msg="started:' "$work"/f*.log 2>/dev/null | wc -l; }
wait_for 180 "all $FLEET servers log started" bash -c "(( \$(grep -l 'msg=\"started:' $work/f*.log | wc -l) == $FLEET ))"
echo "# $(started) of $FLEET started; $(grep -l 'database busy at start' "$work"/f*.log 2>/dev/null | wc -l)" \
  "waited for room first (their first ticks fill the database until the pools give back)"
healthy() {
  local n=0 name
  for name in "${!SRV_PID[@]}"; do
    [[ $(curl -s -o /dev/null -m 5 -w '%{http_code}' "$(url "$name" /healthz)") == 200 ]] && n=$((n + 1))
  done
  echo "$n"
}
ok_all=0 end=$((SECONDS + 30))
while :; do
  h=$(healthy)
  ((h == FLEET)) && { ok_all=1; break; }
  ((SECONDS < end)) || break
  sleep 1
done
is "$h" "$FLEET" "all $FLEET servers answer /healthz 200"
if ((ok_all == 0)); then
  for name in "${!SRV_PID[@]}"; do
    code=$(curl -s -o /dev/null -m 5 -w '%{http_code}' "$(url "$name" /healthz)")
    if [[ $code != 200 ]]; then
      echo "# $name: /healthz $code; its log ends:"; tail -n 3 "${SRV_LOG[$name]}" | sed 's/^/#   /'
      break
    fi
  done
fi

# The platform's own clients still get in beside the fleet.
out=$("$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" list 2>&1)
is "$?" 0 "oopsctl list connects beside $FLEET servers"
[[ -n $out ]] && echo "# oopsctl: $(head -n 1 <<<"$out")"
is "$(sql "SELECT 1" 2>&1)" 1 "... and so does the mariadb client"

# The test's own statements (its instrument, not what it checks) are retried
# for up to 30 s: right after the drive the servers' pools may not have
# given their extra connections back yet, and the database may be full.
db() {
  local out end=$((SECONDS + 30))
  until out=$(sql "$1" 2>&1); do
    ((SECONDS < end)) || { echo "# sql failed: $out" >&2; return 1; }
    sleep 0.5
  done
  printf '%s\n' "$out"
}

# $PIPELINES pipelines at once, as oopsctl create writes them (one INSERT).
db "INSERT INTO pipeline (id, namespace, application, environment, status)
  SELECT CONCAT('fl', LPAD(seq, 10, '0')), 'fleet', CONCAT('app', seq), 'prod', 'INITIALIZED'
  FROM seq_1_to_$PIPELINES"
succeeded() { sql "SELECT COUNT(*) FROM pipeline WHERE id LIKE 'fl%' AND status = 'SUCCEEDED'" 2>/dev/null; }
export -f succeeded
wait_for 240 "all $PIPELINES pipelines SUCCEEDED" bash -c "[[ \$(succeeded) == $PIPELINES ]]"
echo "# $(succeeded) SUCCEEDED"
not_once() { # ACTION: pipelines with that sim_call other than exactly once
  db "SELECT COUNT(*) FROM pipeline p WHERE p.id LIKE 'fl%' AND
    (SELECT COUNT(*) FROM sim_call c WHERE c.pipeline_id = p.id AND c.action = '$1') <> 1"
}
is "$(not_once build_submit)" 0 "every build submitted exactly once"
is "$(not_once deploy)" 0 "every deploy made exactly once"

# Spread: a tick takes ceil(free / live) of the free pipelines (its fair
# share), at least one while any is free. After the first tick of each of the
# 60 servers, at least 600 x (59/60)^60 > 200 are still free, so every server
# that ticks while pipelines are free takes some; one that took none had to
# miss every tick for several seconds while the others emptied the queue (or
# lose each of its GET_LOCKs to a neighbour's tick on the same candidates).
# Two thirds leaves room for 20 such servers: it cannot flake on a slow
# machine, and it fails when a few servers take everything.
drivers=$(db "SELECT COUNT(DISTINCT server) FROM pipeline_event WHERE pipeline_id LIKE 'fl%'
  AND to_status = 'SUCCEEDED'")
min=$(((2 * FLEET + 2) / 3))
check "spread: $drivers of $FLEET servers drove pipelines (at least $min)" test "${drivers:-0}" -ge "$min"

# Idle again: every server holds at most 2 connections to the database. The
# pool gives back connections idle for 30 s, so this is polled for up to
# 90 s (a bound, not a wait).
peer_inodes() { # the inodes of the ESTABLISHED sockets whose remote port is the database's
  awk -v p="$(printf '%04X' "$MDB_PORT")" 'FNR > 1 { split($3, r, ":"); if (r[2] == p && $4 == "01") print $10 }' \
    /proc/net/tcp /proc/net/tcp6
}
connections() { # the most connections any server holds, then the sum: "MAX TOTAL"
  local peers max=0 total=0 pid n
  peers=$(peer_inodes | LC_ALL=C sort -u)
  for pid in "${SRV_PID[@]}"; do
    n=$(find "/proc/$pid/fd" -lname 'socket:*' -printf '%l\n' 2>/dev/null | sed 's/^socket:\[\(.*\)\]$/\1/' |
      LC_ALL=C sort -u | LC_ALL=C comm -12 - <(echo "$peers") | wc -l)
    ((n > max)) && max=$n
    total=$((total + n))
  done
  echo "$max $total"
}
end=$((SECONDS + 90))
while :; do
  read -r cmax ctotal < <(connections)
  ((cmax <= IDLE_CONNECTIONS || SECONDS >= end)) && break
  sleep 1
done
check "idle: every server holds at most $IDLE_CONNECTIONS database connections (the most: $cmax; $ctotal in all)" \
  test "$cmax" -le "$IDLE_CONNECTIONS"
echo "# MariaDB: $(db "SHOW GLOBAL STATUS LIKE 'Threads_connected'" | cut -f2) connected now," \
  "$(db "SHOW GLOBAL STATUS LIKE 'Max_used_connections'" | cut -f2) at most (max_connections $max_conn)"
out=$("$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" list --status succeeded --limit 10000 2>&1)
is "$?" 0 "oopsctl list still connects after the drive"
is "$(db "SELECT COUNT(*) FROM server WHERE IS_USED_LOCK(CONCAT('oops:server:', name)) IS NOT NULL")" "$FLEET" \
  "all $FLEET servers still hold their server lock"
done_testing
