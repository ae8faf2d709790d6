# The HTTP listener of a real oopsd cannot be exhausted (issue 10): /healthz
# keeps answering during and after floods of idle connections and a
# slowloris (while the scans run), the server drops the slow connections
# by itself, and --listen takes a bracketed IPv6 literal.
# Only bash and curl: connections are bash /dev/tcp redirections held by
# background processes, counted on the server side from /proc/net/tcp.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
holders=()
cleanup() {
  local p
  for p in "${holders[@]}"; do kill -KILL "$p" 2>/dev/null; done
  stop_servers
}
trap cleanup EXIT
oopsd="$OOPS_BUILD/oopsd"
work="$OOPS_TEST_WORK/http_limits"; mkdir -p "$work/policies"
cp "$OOPS_ROOT/tests/fixtures/policies/fast/oopsd.lua" "$work/policies/"

# The connection cap, as http_server.h says.
cap=$(sed -n 's/^#define HTTP_MAX_CONNECTIONS \([0-9]*\)u$/\1/p' "$OOPS_ROOT/src/http_server.h")
skip() { TAP_N=$((TAP_N + 1)); echo "ok $TAP_N # SKIP $1"; }

start_server h1 "$work/policies"; check "the server starts" kill -0 "${SRV_PID[h1]}"
port=${SRV_PORT[h1]}
# curl's own bound (-m 5) only stops a hung request; 000 = no answer.
healthz() { curl -s -m 5 -o /dev/null -w '%{http_code}' "$(url h1 /healthz)"; }
wait_for 20 "/healthz is 200" bash -c "[[ \$(curl -s -m 5 -o /dev/null -w '%{http_code}' '$(url h1 /healthz)') == 200 ]]"

# Connections to the server's port that the server holds open (its side of
# them in /proc/net/tcp: local port = ours, state 01 = ESTABLISHED).
server_conns() {
  local hex; hex=$(printf '%04X' "$port")
  awk -v p=":$hex" '$2 ~ p"$" && $4 == "01" { n++ } END { print n + 0 }' /proc/net/tcp
}

# hold N PAYLOAD TRICKLE NAME: a background process opens N connections one
# after the other, sends PAYLOAD (printf %b) on each, writes how many it got
# to $work/NAME, then either sends one more header line on each every second
# (TRICKLE=1, a slowloris) or just sleeps. Killing it closes them all.
hold() {
  local n=$1 payload=$2 trickle=$3 name=$4
  rm -f "$work/$name"
  (
    trap '' PIPE # a write on a connection the server closed must not kill us
    fds=()
    for ((i = 0; i < n; i++)); do
      exec {fd}<>"/dev/tcp/127.0.0.1/$port" || break
      fds+=("$fd")
      [[ -n $payload ]] && printf '%b' "$payload" >&"$fd"
    done 2>/dev/null
    echo "${#fds[@]}" >"$work/$name"
    if ((trickle)); then
      while :; do
        for fd in "${fds[@]}"; do printf 'X-Slow: 1\r\n' >&"$fd"; done 2>/dev/null
        sleep 1
      done
    fi
    exec sleep 600
  ) &
  holders+=($!)
  HOLDER=$!
}
export -f server_conns; export port
release() { kill -KILL "$1" 2>/dev/null; wait "$1" 2>/dev/null; }
opened() { [[ $(cat "$work/$1" 2>/dev/null) == "$2" ]]; }
export -f opened; export work

# 1. More idle connections than the old limit (64), opened and closed
#    without a byte sent: the listener used to stop answering for good.
like "$cap" '^[0-9]+$' "the connection cap is read from src/http_server.h ($cap)"
hold 100 "" 0 idle100
wait_for 60 "100 idle connections are opened" opened idle100 100
release "$HOLDER"
is "$(healthz)" 200 "/healthz answers after 100 idle connections were opened and closed"

# 2. More idle connections than the cap (128), held open.
hold 300 "" 0 idle300
wait_for 60 "300 idle connections are opened" opened idle300 300
is "$(healthz)" 200 "/healthz answers while 300 idle connections are held open"
# Connections the server has not accepted yet (the kernel's backlog) and one
# just accepted before the oldest is closed count as established too: the
# count settles at the cap, it is not read at one instant.
capped() { (($(server_conns) <= cap)); }
wait_for 10 "the server holds at most $cap of them, its cap" capped
release "$HOLDER"
is "$(healthz)" 200 "... and after they are closed"

# 3. A slowloris: 200 connections sending a request line and then a header
#    line every second, never the blank line ending the headers.
hold 200 'GET /healthz HTTP/1.1\r\nHost: slow\r\n' 1 slow
wait_for 60 "200 slow connections are opened" opened slow 200
wait_for 10 "the server holds $cap of them, its cap (it closed the oldest to make room)" \
  bash -c "[[ \$(server_conns) == $cap ]]"
bad=0 codes=""
for _ in $(seq 15); do # past the 10 s header timeout
  c=$(healthz); codes+="$c "
  [[ $c == 200 ]] || bad=$((bad + 1))
  sleep 1
done
is "$bad" 0 "/healthz answered every second for 15 s during the slowloris (codes: $codes)"
wait_for 60 "the server drops every slow connection itself (header timeout)" \
  bash -c '[[ $(server_conns) == 0 ]]'
check "... while they still trickle" kill -0 "$HOLDER"
release "$HOLDER"
is "$(healthz)" 200 "/healthz answers after the slowloris"
like "$(curl -s -m 5 "$(url h1 /metrics)")" 'oops_scan_runs_total\{scan="build"\} [1-9]' "the scans ran meanwhile"
m=$(curl -s -m 5 "$(url h1 /metrics)")
like "$m" 'oops_http_connections_total\{result="evicted"\} [1-9]' "/metrics counts the connections closed at the cap to make room"
like "$m" 'oops_http_connections_total\{result="timed_out"\} [1-9]' "... and those closed by the header deadline"
like "$m" 'oops_http_connections_total\{result="accepted"\} [1-9][0-9]{2,}' "... and every accepted one"
check "the server is still running" kill -0 "${SRV_PID[h1]}"

# 4. --listen: a bad address is refused with one line naming it and the forms.
out=$("$oopsd" --db "$OOPS_TEST_DB" --name h2 --policies "$work/policies" --listen '::1:7070' 2>&1)
is "$?" 1 "--listen ::1:7070 (an unbracketed IPv6 literal) exits 1"
is "$out" "oopsd: cannot listen on ::1:7070: invalid address (want IPV4:PORT, [IPV6]:PORT or localhost:PORT)" \
  "... with one line naming the address and the accepted forms"

# 5. --listen '[::1]:PORT'
if grep -qE '^0{31}1 .* lo$' /proc/net/if_inet6 2>/dev/null; then
  p6=$(_free_port)
  log6="$OOPS_TEST_WORK/h6.log"
  "$oopsd" --db "$OOPS_TEST_DB" --name h6 --policies "$work/policies" --listen "[::1]:$p6" 2>>"$log6" &
  SRV_PID[h6]=$!
  wait_for 30 "an oopsd with --listen '[::1]:$p6' starts" grep -q 'msg="started:' "$log6"
  like "$(grep 'msg="started:' "$log6")" "listening on \[::1\]:$p6\"" "... and logs where it listens"
  is "$(curl -s -g -m 5 -o /dev/null -w '%{http_code}' "http://[::1]:$p6/healthz")" 200 "/healthz answers on [::1]:$p6"
else
  skip "--listen '[::1]:PORT': no IPv6 loopback (::1) on this machine"
fi

done_testing
