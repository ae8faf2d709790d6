# A database host by name, with a resolver that hangs (issue 22): looking the
# name up must never block the loop. The server runs in a private mount
# namespace with this test's /etc/hosts and /etc/resolv.conf; db.oops.test is
# first in the hosts file, then taken out of it, so that its lookups go to a
# name server that never answers (tests/tools/udp_sink on 127.77.X.Y:53, the
# resolver told to wait 20 s). Its lock session is killed meanwhile: the
# reconnect looks the name up, and /healthz (served on the loop) must answer
# while that lookup hangs. The bound on each answer (10 s) only stops a hung
# test: a loop blocked by the lookup would not answer for 20 s.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
work=$OOPS_TEST_WORK/dns.$$
mkdir -p "$work"
sink_pid=""
trap '[[ -n $sink_pid ]] && kill "$sink_pid" 2>/dev/null; stop_servers' EXIT
if ! unshare -m true 2>/dev/null; then
  echo "ok 1 # SKIP a private /etc/hosts and /etc/resolv.conf need unshare -m (root): not allowed here"
  echo "1..1"
  exit 0
fi
# An address of its own in 127.77.0.0/16: the normal and the ASan passes run
# this test at the same time, and port 53 of one address takes one sink.
ns=""
for _ in 1 2 3 4 5 6 7 8; do
  try=127.77.$((RANDOM % 254 + 1)).$((RANDOM % 254 + 1))
  "$OOPS_BUILD/udp_sink" "$try" 53 "$work/queries" >"$work/sink.out" 2>&1 &
  sink_pid=$!
  for _ in $(seq 50); do
    grep -q listening "$work/sink.out" && break
    kill -0 "$sink_pid" 2>/dev/null || break
    sleep 0.1
  done
  if grep -q listening "$work/sink.out"; then ns=$try; break; fi
  kill "$sink_pid" 2>/dev/null; wait "$sink_pid" 2>/dev/null; sink_pid=""
done
check "a name server that never answers listens on ${ns:-an address of 127.77.0.0/16}:53" test -n "$ns" ||
  { done_testing; exit 1; }
hosts_with() { printf '%s\n' "127.0.0.1 localhost" "$@" >"$work/hosts"; } # rewritten in place
hosts_with "127.0.0.1 db.oops.test"
printf 'nameserver %s\noptions timeout:20 attempts:1\n' "$ns" >"$work/resolv.conf"
in_ns() { # CMD... in a mount namespace with this test's /etc/hosts and /etc/resolv.conf
  exec unshare -m bash -c 'mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf &&
    shift 2 && exec "$@"' in_ns "$work/hosts" "$work/resolv.conf" "$@"
}
named=${OOPS_TEST_DB/@127.0.0.1:/@db.oops.test:}
"$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" migrate >/dev/null
pol=$work/policies
mkdir -p "$pol"
cp "$OOPS_ROOT/tests/fixtures/policies/fast/oopsd.lua" "$pol/"

check "oopsctl connects by name (its lookup may block: it has no loop)" \
  bash -c "$(declare -f in_ns); work='$work'; in_ns '$OOPS_BUILD/oopsctl' --db '$named' list"
# Kill NAME's lock session while db.oops.test resolves only through the name
# server that never answers; wait until the reconnect's lookup reaches it.
kill_lock_while_hanging() {
  hosts_with
  : >"$work/queries"
  local lock_id
  lock_id=$(curl -s "$(url "$1" /status)" | sed -n 's/.*"lock_connection_id":\([0-9]*\).*/\1/p')
  sql "KILL $lock_id"
  wait_for 60 "$1: its lock session killed, the reconnect looks db.oops.test up at the name server" \
    test -s "$work/queries"
}
stop_and_wait() { # NAME: SIGTERM; its exit code in $stopped (the wait is bounded: 90 s)
  local pid=${SRV_PID[$1]}
  kill -TERM "$pid"
  for _ in $(seq 900); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  wait "$pid"
  stopped=$?
  unset "SRV_PID[$1]"
}

SRV_WRAP=in_ns OOPS_TEST_DB=$named start_server dns1 "$pol"
is "$(http_code "$(url dns1 /healthz)")" 200 "a server connected to db.oops.test: /healthz 200"
kill_lock_while_hanging dns1
codes=()
for _ in 1 2 3 4 5; do
  codes+=("$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$(url dns1 /healthz)")")
  sleep 0.5
done
is "${codes[*]}" "503 503 503 503 503" \
  "while that lookup hangs, /healthz answers every time (503: the lock session is down)"
stop_and_wait dns1
is "$stopped" 0 "SIGTERM while it hangs: the connect is abandoned, the server exits 0"
like "$(cat "${SRV_LOG[dns1]}")" "waiting for 1 database connect" "... once the lookup has ended, as its log says"

# The name resolves again while a reconnect waits for it: the lock session comes back.
hosts_with "127.0.0.1 db.oops.test"
SRV_WRAP=in_ns OOPS_TEST_DB=$named start_server dns2 "$pol"
kill_lock_while_hanging dns2
hosts_with "127.0.0.1 db.oops.test"
wait_for 90 "once db.oops.test resolves again, the lock session is reopened (/healthz 200)" \
  bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 '$(url dns2 /healthz)') == 200 ]]"
like "$(cat "${SRV_LOG[dns2]}")" "lock session reconnected" "... as its log says"
id=$("$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" create --app shop/dns --env prod --artifact registry/shop/dns:1 2>/dev/null)
wait_for 60 "a pipeline is driven to SUCCEEDED (the pool's sessions opened by name, in fibers)" \
  bash -c "[[ \$('$OOPS_BUILD/oopsctl' --db '$OOPS_TEST_DB' --json show '$id') == *'\"status\":\"SUCCEEDED\"'* ]]"
stop_and_wait dns2
is "$stopped" 0 "SIGTERM: it stops and exits 0"
done_testing
