# oopsd --run-as USER (issue 22): every command the daemon starts (build,
# deploy, health, a notify command) runs as USER, who cannot read the
# daemon's credentials. oopsd runs here as an unprivileged user (daemon)
# holding only CAP_SETUID, CAP_SETGID and CAP_KILL as ambient capabilities,
# the way systemd's AmbientCapabilities= starts it, with a
# CREDENTIALS_DIRECTORY of its own (0500; db-password and http-token 0400)
# and --run-as nobody. Each command records what it could do: its uid and
# groups, its capabilities (CapInh/CapPrm/CapEff/CapAmb all zero), whether
# `cat` of the password, of the token and of the daemon's environ worked
# (it must not); the pipeline still deploys, and stopping one kills its
# build (a signal across users: CAP_KILL). Without the capabilities, for an
# unknown user, root or oopsd's own user, the start fails with one line.
# Needs root (CI runs as root) and setpriv (util-linux).
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
if ((EUID != 0)) || ! command -v setpriv >/dev/null || ! id daemon >/dev/null 2>&1; then
  echo "ok 1 # SKIP needs root, setpriv and the users daemon and nobody"
  echo "1..1"
  exit 0
fi
umask 022
# Paths under the work tree may not be traversable for another user: the
# daemon gets an installed copy, policies, state and credentials under $T.
T=$(mktemp -d /tmp/oops-runas.XXXXXX)
chmod 0755 "$T"
pid="" pid2=""
cleanup() {
  [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null
  [[ -n $pid2 ]] && kill -KILL "$pid2" 2>/dev/null
  wait 2>/dev/null
  # Sanitizer reports of the unprivileged daemon, where tests/run.sh looks.
  cp "$T"/san/sanitizer.* "$OOPS_TEST_WORK/" 2>/dev/null
  rm -rf "$T"
  return 0
}
trap cleanup EXIT
mkdir -p "$T/san" && chmod 1777 "$T/san"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:log_path=$T/san/sanitizer"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-}:log_path=$T/san/sanitizer"

DESTDIR="$T/stage" cmake --install "$OOPS_BUILD" --prefix /opt/oopsd >/dev/null 2>&1
mv "$T/stage/opt/oopsd" "$T/prefix" && rm -rf "$T/stage"
oopsd="$T/prefix/bin/oopsd"
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }
status_is() { test "$(sql "SELECT status FROM pipeline WHERE id = '$1'")" = "$2"; }
ctl migrate >/dev/null

# The credentials, as systemd hands them to User=daemon.
pw=$(cat "$OOPS_DB_PASSWORD_FILE") # the URL has none (issue 34)
url=$OOPS_TEST_DB
token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
mkdir "$T/creds"
printf '%s\n' "$pw" >"$T/creds/db-password"
printf '%s\n' "$token" >"$T/creds/http-token"
chmod 0400 "$T/creds/db-password" "$T/creds/http-token"
chown -R daemon:daemon "$T/creds"
chmod 0500 "$T/creds"
mkdir -m 0777 "$T/state"
state="$T/state"

mkdir "$T/policies"
cat >"$T/policies/probe.sh" <<'EOF'
#!/bin/sh
# probe.sh STEP ID ENVIRONMENT: what a command may do, in $STATE/ID.STEP.
set -u
out="$STATE/$2.$1"
{
  echo "uid=$(id -u) groups=$(id -G) home=${HOME:-} user=${USER:-}"
  grep -E '^Cap(Inh|Prm|Eff|Amb):' /proc/self/status | tr -d ' \t'
  for f in "$CRED/db-password" "$CRED/http-token" "/proc/$PPID/environ"; do
    if cat "$f" >/dev/null 2>&1; then echo "read $f"; else echo "refused $f"; fi
  done
} >"$out.tmp" && mv "$out.tmp" "$out"
if [ "$1" = build ] && [ "$3" = hold ]; then
  echo $$ >"$STATE/$2.pid"
  while :; do sleep 0.1; done
fi
cat >/dev/null # a notify command gets the message on stdin
exit 0
EOF
chmod 0755 "$T/policies/probe.sh"
cat >"$T/policies/oopsd.lua" <<'EOF'
scan    { interval = "300ms" }
deploy  { timeout = "20s" }
rollout { timeout = "20s" }
locks   { validate_every = "1s" }
gateway "exec" {}
notify  { command = { "env", "STATE=@STATE@", "CRED=@CRED@", "@POL@/probe.sh", "notify", "event", "-" } }
local env = { STATE = os.getenv("RUNAS_STATE"), CRED = os.getenv("RUNAS_CRED") }
application "t/cred" {
  environments = { "prod", "hold" },
  build        = { "./probe.sh", "build", "{id}", "{environment}" },
  deploy       = { "./probe.sh", "deploy", "{id}", "{environment}" },
  health       = { "./probe.sh", "health", "{id}", "{environment}" },
  timeouts     = { build = "1m", deploy = "20s", health = "10s" },
  env          = env,
}
EOF
sed -i -e "s|@STATE@|$state|" -e "s|@CRED@|$T/creds|" -e "s|@POL@|$T/policies|" "$T/policies/oopsd.lua"

# oopsd as systemd would start it: User=daemon, AmbientCapabilities=CAPS.
# It execs: call it in a subshell (&, $(...)), whose pid is then oopsd's.
as_daemon() { # CAPS (e.g. +setuid,+setgid,+kill or "") then the command
  local caps=$1; shift
  if [[ -n $caps ]]; then
    exec setpriv --reuid=daemon --regid=daemon --init-groups --inh-caps="$caps" --ambient-caps="$caps" -- "$@"
  else
    exec setpriv --reuid=daemon --regid=daemon --init-groups -- "$@"
  fi
}
CAPS=+setuid,+setgid,+kill
port=$(_free_port)
log="$T/oopsd.log"
as_daemon "$CAPS" env HOME=/tmp USER=daemon LOGNAME=daemon OOPS_DB="$url" CREDENTIALS_DIRECTORY="$T/creds" \
  RUNAS_STATE="$state" RUNAS_CRED="$T/creds" \
  "$oopsd" --name ra1 --policies "$T/policies" --listen "127.0.0.1:$port" \
  --http-token-file "$T/creds/http-token" --run-as nobody 2>>"$log" &
pid=$!
if ! wait_for 30 "oopsd as daemon with CAP_SETUID/SETGID/KILL, --run-as nobody, starts" grep -q 'msg="started:' "$log"; then
  sed 's/^/#   /' "$log"
fi
like "$(cat "$log")" 'msg="commands run as nobody \(uid 65534, gid [0-9]+\)"' "... and says whom commands run as"
is "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "http://127.0.0.1:$port/status")" 200 \
  "... having read its token (and its password: it is connected)"
own=$(grep -E '^Cap(Inh|Amb):' "/proc/$pid/status" | tr -d ' \t' | paste -sd' ')
is "$own" "CapInh:0000000000000000 CapAmb:0000000000000000" "the daemon cleared its inheritable and ambient sets at start"

id=$(ctl create --app t/cred --env prod --artifact reg/t:1 2>/dev/null)
wait_for 60 "the pipeline still deploys (SUCCEEDED)" status_is "$id" SUCCEEDED
wait_for 20 "the notify command ran too" test -s "$state/event.notify"
nobody_gid=$(id -g nobody) nobody_home=$(getent passwd nobody | cut -d: -f6)
for step in build deploy health notify; do
  f="$state/$id.$step"
  [[ $step == notify ]] && f="$state/event.notify"
  rec=$(cat "$f" 2>/dev/null)
  like "$rec" "^uid=65534 groups=$nobody_gid home=$nobody_home user=nobody"$'\n' \
    "$step: ran as nobody, its primary group alone, HOME and USER naming it"
  is "$(grep '^Cap' <<<"$rec" | paste -sd' ')" \
    "CapInh:0000000000000000 CapPrm:0000000000000000 CapEff:0000000000000000 CapAmb:0000000000000000" \
    "$step: no capability at all after exec"
  is "$(grep -E '^(read|refused) ' <<<"$rec" | cut -d' ' -f1 | paste -sd' ')" "refused refused refused" \
    "$step: cat of the password credential, the token and oopsd's environ failed"
done

# Stopping a pipeline kills its build: a signal to another user's process.
hold=$(ctl create --app t/cred --env hold --artifact reg/t:2 2>/dev/null)
wait_for 30 "a hold build is running" test -s "$state/$hold.pid"
bpid=$(cat "$state/$hold.pid")
is "$(ps -o user= -p "$bpid" | tr -d ' ')" nobody "... as nobody"
ctl stop "$hold" >/dev/null
wait_for 30 "stopping the pipeline kills it (the daemon signals across users)" bash -c "! kill -0 $bpid"
wait_for 20 "... and the pipeline is STOPPED" status_is "$hold" STOPPED
unlike "$(cat "$log")" "$pw" "the password is in no log line"
kill -TERM "$pid"; wait "$pid"; rc=$?; pid=""
is "$rc" 0 "SIGTERM: exit 0"

# Refusals at start: exit 1, one line.
refused() { # DESC CAPS WANT ARGS...
  local d=$1 caps=$2 want=$3; shift 3
  local out rc
  out=$(as_daemon "$caps" env OOPS_DB="$url" CREDENTIALS_DIRECTORY="$T/creds" \
    timeout 20 "$oopsd" --name ra2 --policies "$T/policies" --listen off "$@" 2>&1)
  rc=$?
  is "$rc|$out" "1|oopsd: $want" "$d: exit 1, one line"
}
need="needed to start commands as nobody and to stop them (systemd: AmbientCapabilities=CAP_SETUID CAP_SETGID CAP_KILL)"
refused "no capability" "" "--run-as nobody: this process lacks CAP_SETUID CAP_SETGID CAP_KILL, $need" --run-as nobody
refused "CAP_SETUID and CAP_SETGID without CAP_KILL" +setuid,+setgid \
  "--run-as nobody: this process lacks CAP_KILL, $need" --run-as nobody
refused "an unknown user" "$CAPS" "--run-as no-such-user-22: no such user" --run-as no-such-user-22
refused "root" "$CAPS" "--run-as root: must be an unprivileged user, not uid 0" --run-as root
refused "oopsd's own user" "$CAPS" \
  "--run-as daemon: that is the user oopsd runs as (uid $(id -u daemon)): its commands could read what oopsd reads" \
  --run-as daemon

# Without --run-as, a credentials directory: one warning at start.
log2="$T/oopsd2.log"
as_daemon "" env OOPS_DB="$url" CREDENTIALS_DIRECTORY="$T/creds" \
  "$oopsd" --name ra3 --policies "$T/policies" --listen off 2>>"$log2" &
pid2=$!
wait_for 30 "without --run-as, oopsd starts" grep -q 'msg="started:' "$log2"
is "$(grep -c "commands run as oopsd's own user, so they can read its credentials in $T/creds: give --run-as USER" "$log2")" 1 \
  "... warning once that commands can read its credentials"
kill -TERM "$pid2"; wait "$pid2"; pid2=""

done_testing
