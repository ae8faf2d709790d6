# Running under systemd (issue 13), without systemd: the notify datagrams
# arrive on a socket of the test's own (NOTIFY_SOCKET; tests/tools/notify_sink.c
# writes one line per datagram, its newlines as tabs), so the sequence is
# checked as systemd would see it: READY=1 with STATUS= at start, RELOADING=1
# (MONOTONIC_USEC) then READY=1 around a good and a broken reload, WATCHDOG=1
# pings (WATCHDOG_USEC=1 s; counted, never timed), STOPPING=1 on SIGTERM.
# The database password from OOPS_DB_PASSWORD_FILE and from a systemd
# credential ($CREDENTIALS_DIRECTORY/db-password); files that cannot be used.
# contrib/systemd/oopsd.service passes `systemd-analyze verify --man=no` on a
# copy whose ExecStart names the built binary (the manuals and /usr/bin/oopsd
# are not installed here), and its flags parse.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
oopsd="$OOPS_BUILD/oopsd"
fixtures="$OOPS_ROOT/tests/fixtures/policies"
unit="$OOPS_ROOT/contrib/systemd/oopsd.service"
work=$OOPS_TEST_WORK/systemd.$$
umask 077 # password files others may read are refused (checked below)
mkdir -p "$work/policies" "$work/creds"
cp "$fixtures/fast/oopsd.lua" "$work/policies/"
sink_pid="" pid=""
cleanup() {
  [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null
  [[ -n $sink_pid ]] && kill -TERM "$sink_pid" 2>/dev/null
  wait 2>/dev/null
  return 0
}
trap cleanup EXIT

# The URL without its password, and the password alone.
pw=$(cat "$OOPS_DB_PASSWORD_FILE") # the URL has none (issue 34)
url=$OOPS_TEST_DB
printf '%s\n' "$pw" >"$work/db-password" # one trailing newline, stripped
chmod 600 "$work/db-password"

# The notify socket.
sock="$work/notify.sock" rec="$work/notify.rec"
"$OOPS_BUILD/notify_sink" "$sock" "$rec" >"$work/sink.out" 2>&1 &
sink_pid=$!
wait_for 10 "notify_sink listens on its socket" grep -q '^listening' "$work/sink.out"

# The datagrams but the watchdog pings, one kind a line: READY=1, RELOADING=1 ...
kinds() { grep -v '^WATCHDOG=1$' "$rec" | cut -f1 | paste -sd' '; }
nth() { grep -v '^WATCHDOG=1$' "$rec" | sed -n "${1}p"; } # the Nth such datagram
count() { grep -c "^$1" "$rec"; }
status_json() { curl -s "http://127.0.0.1:$port/status"; }
json_field() { sed -nE "s/.*\"$1\":\"([^\"]*)\".*/\1/p"; }

# oopsd as systemd starts it: NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID
# (its own pid: set by a shell that then execs oopsd), the password in a file.
port=$(_free_port)
log="$work/sd1.log"
env -u OOPS_DB_PASSWORD OOPS_DB="$url" OOPS_DB_PASSWORD_FILE="$work/db-password" \
  NOTIFY_SOCKET="$sock" WATCHDOG_USEC=1000000 \
  bash -c 'export WATCHDOG_PID=$$; exec "$@"' sh "$oopsd" --name sd1 --policies "$work/policies" \
  --listen "127.0.0.1:$port" 2>>"$log" &
pid=$!

wait_for 30 "READY=1 once the lock session is up and the policy loaded" grep -q '^READY=1' "$rec"
check "... the server started with OOPS_DB (no password) + OOPS_DB_PASSWORD_FILE" kill -0 "$pid"
ready1=$(nth 1)
like "$ready1" $'^READY=1\tSTATUS=running policy [0-9a-f]{16} \\(load 1\\) from '"$work/policies"'$' \
  "... with STATUS= naming the policy's version hash and where it came from"
hash1=$(sed -E 's/.*running policy ([0-9a-f]{16}).*/\1/' <<<"$ready1")
is "$(status_json | json_field policy_hash)" "$hash1" "/status reports the same policy_hash"
is "$(http_code "http://127.0.0.1:$port/healthz")" 200 "/healthz is 200"
like "$(cat "$log")" 'msg="systemd watchdog: a ping every 500 ms"' "WATCHDOG_USEC=1 s: a ping every 500 ms"
wait_for 20 "WATCHDOG=1 pings keep coming from the loop (3 or more)" \
  bash -c "(( \$(grep -c '^WATCHDOG=1\$' '$rec') >= 3 ))"

# A good reload: RELOADING=1 with MONOTONIC_USEC, then READY=1 naming the new policy.
printf 'application "shop/x" { environments = { "prod" }, build = {"make"} }\n' >"$work/policies/apps.lua"
kill -HUP "$pid"
wait_for 20 "SIGHUP (good policy): READY=1 again" bash -c "(( \$(grep -c '^READY=1' '$rec') >= 2 ))"
like "$(nth 2)" $'^RELOADING=1\tMONOTONIC_USEC=[1-9][0-9]*\tSTATUS=reloading the policies$' \
  "... after RELOADING=1 with MONOTONIC_USEC (CLOCK_MONOTONIC, µs)"
mono1=$(nth 2 | sed -E 's/.*MONOTONIC_USEC=([0-9]+).*/\1/')
up_us=$(awk '{ printf "%d", ($1 + 5) * 1000000 }' /proc/uptime)
check "... a CLOCK_MONOTONIC reading (not past the boot-time clock)" test "$mono1" -le "$up_us"
ready2=$(nth 3)
like "$ready2" $'^READY=1\tSTATUS=running policy [0-9a-f]{16} \\(load 2\\) from ' \
  "... READY=1 with STATUS= naming the new load"
hash2=$(sed -E 's/.*running policy ([0-9a-f]{16}).*/\1/' <<<"$ready2")
check "... whose version hash is the new policy's (not $hash1)" test "$hash2" != "$hash1"
is "$(status_json | json_field policy_hash)" "$hash2" "... as /status says"

# A broken reload: refused, the running policy kept, READY=1 again saying why.
printf 'application "shop/x" { biuld = {"make"} }\n' >"$work/policies/apps.lua"
kill -HUP "$pid"
wait_for 20 "SIGHUP (broken policy): READY=1 again" bash -c "(( \$(grep -c '^READY=1' '$rec') >= 3 ))"
like "$(nth 4)" $'^RELOADING=1\tMONOTONIC_USEC=[0-9]+' "... after RELOADING=1"
mono2=$(nth 4 | sed -E 's/.*MONOTONIC_USEC=([0-9]+).*/\1/')
check "... MONOTONIC_USEC moves forward between reloads" test "$mono2" -gt "$mono1"
refused=$(nth 5)
like "$refused" $'^READY=1\tSTATUS=reload refused, running policy '"$hash2"' \(load 2\) from .*: .*apps.lua:1: application "shop/x": unknown key "biuld"' \
  "... STATUS= says the reload was refused, why, and that the previous policy runs"
is "$(status_json | json_field policy_hash)" "$hash2" "... and /status still reports the previous policy"
is "$(http_code "http://127.0.0.1:$port/healthz")" 503 "... /healthz is 503 (stale policy)"

# The password reached neither the log, nor /status, nor a datagram.
all="$(cat "$log" "$rec"; status_json; curl -s "http://127.0.0.1:$port/healthz")"
unlike "$all" "$pw" "the password is in no log line, /status, /healthz or notify datagram"
like "$(tr '\0' '\n' <"/proc/$pid/environ")" $'\nOOPS_DB_PASSWORD_FILE=x+\n' \
  "... and even the password file's name is overwritten in /proc/PID/environ (OOPS_DB*)"

# SIGTERM: STOPPING=1, then a clean exit.
kill -TERM "$pid"
wait "$pid"; rc=$?; pid=""
is "$rc" 0 "SIGTERM: exit 0"
like "$(nth 6)" $'^STOPPING=1\tSTATUS=stopping \\(SIGTERM\\)' "... after STOPPING=1"
is "$(kinds)" "READY=1 RELOADING=1 READY=1 RELOADING=1 READY=1 STOPPING=1" \
  "the whole sequence: start, good reload, refused reload, stop"
unlike "$(cat "$rec")" "$pw" "no datagram carries the password"

# The credential: $CREDENTIALS_DIRECTORY/db-password (LoadCredential=db-password:...),
# no trailing newline; the watchdog only for the pid WATCHDOG_PID names; and
# without NOTIFY_SOCKET nothing is sent at all.
printf '%s' "$pw" >"$work/creds/db-password"
n0=$(wc -l <"$rec")
log2="$work/sd2.log"
env -u OOPS_DB_PASSWORD -u NOTIFY_SOCKET OOPS_DB="$url" CREDENTIALS_DIRECTORY="$work/creds" \
  WATCHDOG_USEC=1000000 WATCHDOG_PID=1 \
  "$oopsd" --name sd2 --policies "$fixtures/fast" --listen off 2>>"$log2" &
pid=$!
wait_for 30 "a server whose password is the systemd credential starts" grep -q 'msg="started:' "$log2"
kill -TERM "$pid"; wait "$pid"; rc=$?; pid=""
is "$rc" 0 "... and stops (exit 0)"
is "$(wc -l <"$rec")" "$n0" "without NOTIFY_SOCKET, not one datagram"
unlike "$(cat "$log2")" "systemd watchdog" "WATCHDOG_PID naming another process: no watchdog"
unlike "$(cat "$log2")" "$pw" "... the password is not in its log"

# Precedence: the credential before OOPS_DB_PASSWORD_FILE before OOPS_DB_PASSWORD.
printf 'wrong\n' >"$work/wrong-password"
out=$(env OOPS_DB="$url" CREDENTIALS_DIRECTORY="$work/creds" OOPS_DB_PASSWORD_FILE="$work/wrong-password" \
  OOPS_DB_PASSWORD=wrong "$OOPS_BUILD/oopsctl" list 2>&1)
is "$?" 0 "oopsctl takes the credential first (the file and the variable are wrong)"
out=$(env -u CREDENTIALS_DIRECTORY OOPS_DB="$url" OOPS_DB_PASSWORD_FILE="$work/db-password" \
  OOPS_DB_PASSWORD=wrong "$OOPS_BUILD/oopsctl" list 2>&1)
is "$?" 0 "... then OOPS_DB_PASSWORD_FILE"
out=$(env OOPS_DB="$url" CREDENTIALS_DIRECTORY="$work/policies" OOPS_DB_PASSWORD_FILE="$work/db-password" \
  "$OOPS_BUILD/oopsctl" list 2>&1)
is "$?" 0 "... a credentials directory without db-password is passed over"
out=$(env -u OOPS_DB_PASSWORD_FILE -u CREDENTIALS_DIRECTORY OOPS_DB="$url" OOPS_DB_PASSWORD="$pw" \
  "$OOPS_BUILD/oopsctl" list 2>&1)
is "$?" 0 "... OOPS_DB_PASSWORD still works"
out=$(env -u CREDENTIALS_DIRECTORY OOPS_DB="$url" OOPS_DB_PASSWORD_FILE="$work/wrong-password" \
  "$OOPS_BUILD/oopsctl" list 2>&1)
is "$?" 2 "a wrong password in the file: refused credentials exit 2"
unlike "$out" "wrong" "... without quoting the file's content"

# Files that cannot be used: exit 1 (bad input), one line naming the file, never its content.
mkfifo "$work/fifo"
head -c 4097 /dev/zero | tr '\0' a >"$work/big"
printf 'pass\0word\n' >"$work/nul"
for case in "missing:$work/missing:No such file or directory" "dir:$work/creds:not a regular file" \
  "fifo:$work/fifo:not a regular file" "big:$work/big:larger than 4096 bytes" \
  "nul:$work/nul:holds a NUL byte"; do
  IFS=: read -r what file why <<<"$case"
  out=$(env -u CREDENTIALS_DIRECTORY OOPS_DB="$url" OOPS_DB_PASSWORD_FILE="$file" \
    timeout 20 "$oopsd" --name sd3 --policies "$fixtures/fast" --listen off 2>&1)
  rc=$?
  is "$rc|$out" "1|oopsd: cannot read the database password file (OOPS_DB_PASSWORD_FILE) $file: $why" \
    "oopsd, password file $what: exit 1, one line naming the file"
done
# Readable by a group or by every user: refused, as ssh refuses such a key (the
# password may already be known), naming the file and its mode.
cp "$work/db-password" "$work/open-password"
for m in 0644 0640 0604; do
  chmod "$m" "$work/open-password"
  out=$(env -u CREDENTIALS_DIRECTORY OOPS_DB="$url" OOPS_DB_PASSWORD_FILE="$work/open-password" \
    timeout 20 "$oopsd" --name sd3 --policies "$fixtures/fast" --listen off 2>&1)
  like "$?|$out" "^1\|oopsd: refusing the database password file \(OOPS_DB_PASSWORD_FILE\) $work/open-password: it is readable by (every user|group [a-z0-9]+) \(mode $m\); make it readable by its owner alone \(chmod 600\)$" \
    "oopsd, a password file of mode $m: exit 1, one line naming the file and its mode"
  unlike "$out" "$pw" "... never its content"
done
mkdir -p "$work/creds-open"; cp "$work/db-password" "$work/creds-open/db-password"
chmod 0644 "$work/creds-open/db-password"
out=$(env OOPS_DB="$url" CREDENTIALS_DIRECTORY="$work/creds-open" "$OOPS_BUILD/oopsctl" list 2>&1)
is "$?|$out" "1|oopsctl: refusing the database password credential $work/creds-open/db-password: it is readable by every user (mode 0644); make it readable by its owner alone (chmod 600)" \
  "oopsctl, a credential of mode 0644: exit 1, the same line"
out=$(env -u CREDENTIALS_DIRECTORY OOPS_DB="$url" OOPS_DB_PASSWORD_FILE="$work/missing" \
  "$OOPS_BUILD/oopsctl" list 2>&1)
is "$?|$out" "1|oopsctl: cannot read the database password file (OOPS_DB_PASSWORD_FILE) $work/missing: No such file or directory" \
  "oopsctl, a missing password file: exit 1, the same line"
# A credential that is there but cannot be read (not merely absent) is an error too.
out=$(env OOPS_DB="$url" CREDENTIALS_DIRECTORY="$work/big" OOPS_DB_PASSWORD_FILE="$work/db-password" \
  "$OOPS_BUILD/oopsctl" list 2>&1)
is "$?|$out" "1|oopsctl: cannot read the database password credential $work/big/db-password: Not a directory" \
  "an unreadable credential exits 1, naming it (no fallback to the file)"

# The unit: `systemd-analyze verify` on a copy whose ExecStart names the built
# binary (verify wants an executable there); --man=no: the manuals named by
# Documentation= are not installed here.
if command -v systemd-analyze >/dev/null; then
  mkdir -p "$work/unit"
  sed "s|/usr/bin/oopsd|$oopsd|" "$unit" >"$work/unit/oopsd.service"
  out=$(systemd-analyze verify --man=no "$work/unit/oopsd.service" 2>&1)
  is "$?|$out" "0|" "systemd-analyze verify: contrib/systemd/oopsd.service, no complaint"
else
  echo "ok $((++TAP_N)) # SKIP no systemd-analyze (systemd)"
fi
like "$(grep -E '^ExecStart=' "$unit")" ' --run-as \$\{OOPS_RUN_AS\} ' "the unit runs commands as another user (--run-as)"
is "$(grep -E '^(Environment|AmbientCapabilities|CapabilityBoundingSet)=' "$unit" | paste -sd' ')" \
  "Environment=OOPS_NAME=%l OOPS_LISTEN=127.0.0.1:7070 OOPS_RUN_AS=oops-run AmbientCapabilities=CAP_SETUID CAP_SETGID CAP_KILL CapabilityBoundingSet=CAP_SETUID CAP_SETGID CAP_KILL" \
  "... oops-run by default, oopsd holding CAP_SETUID, CAP_SETGID and CAP_KILL alone"
units=$(grep -E '^(Type|ExecReload|EnvironmentFile|WatchdogSec|LoadCredential|NoNewPrivileges|ProtectSystem|User)=' "$unit" | paste -sd' ')
is "$units" "Type=notify User=oopsd EnvironmentFile=-/etc/default/oopsd ExecReload=/bin/kill -HUP \$MAINPID LoadCredential=db-password:/etc/oopsd/db-password WatchdogSec=30s NoNewPrivileges=yes ProtectSystem=strict" \
  "the unit: Type=notify, reload by SIGHUP, the environment file, the credential, the watchdog, hardening"
# Its ExecStart, with the defaults (Environment=) and the example OOPSD_OPTS, parses (--check).
exec_start=$(sed -nE 's/^ExecStart=//p' "$unit")
opts=$(sed -nE 's/^#?OOPSD_OPTS=//p' "$OOPS_ROOT/contrib/systemd/oopsd.default")
exec_start=${exec_start//'${OOPS_NAME}'/host1}
exec_start=${exec_start//'${OOPS_LISTEN}'/127.0.0.1:7070}
exec_start=${exec_start//'${OOPS_RUN_AS}'/nobody}
exec_start=${exec_start//'$OOPSD_OPTS'/$opts}
exec_start=${exec_start//\/etc\/oopsd\/policies/$fixtures/fast}
exec_start=${exec_start//\/usr\/bin\/oopsd/$oopsd}
read -ra argv <<<"$exec_start"
is "$("${argv[@]}" --check 2>&1)" "ok" "its ExecStart flags parse (oopsd ... --check)"
unlike "$(grep -v '^#' "$OOPS_ROOT/contrib/systemd/oopsd.default")" 'mysql://[^@/]*:[^@/]*@' \
  "the example /etc/default/oopsd carries no password"

done_testing
