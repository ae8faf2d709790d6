# Hardening, end to end with real oopsd processes: the database secret never
# reaches a command, a policy, a log or /healthz; policy code and policy files
# cannot hang or exhaust the daemon; an empty policy directory is an error;
# stray signals neither kill it nor leave its locks; the engine runs no
# command for an application or environment the policy does not declare.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
trap stop_servers EXIT
oopsd="$OOPS_BUILD/oopsd"
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }
fast="$OOPS_ROOT/tests/fixtures/policies/fast/oopsd.lua"
work="$OOPS_TEST_WORK/hardening"; mkdir -p "$work"
pw=$(cat "$OOPS_DB_PASSWORD_FILE") # the URL has none (issue 34)
status() { sql "SELECT status FROM pipeline WHERE id = '$1'"; }
bounded() { timeout 30 "$@"; } # a hang ends as exit 124 (the bound only stops a hung test)

# ---- 1. the secret never reaches a command ---------------------------------
# Every command prints its whole environment; the notifier writes it to a
# file. oopsd gets the database URL, the password alone, and an unrelated
# variable, all through its environment (not --db).
pol="$work/env-policy"; mkdir -p "$pol"
cat >"$pol/oopsd.lua" <<'EOF'
scan    { interval = "300ms" }
deploy  { timeout = "20s" }
rollout { timeout = "20s" }
locks   { validate_every = "1s" }
gateway "exec" {}
application "shop/env" {
  environments = { "prod" },
  build  = { "/usr/bin/env" },
  deploy = { "/usr/bin/env" },
  health = { "/usr/bin/env" },
  env    = { KUBECONFIG = "/etc/oopsd/kube" },
}
EOF
printf 'notify { command = { "sh", "-c", "env >> %s" } }\n' "$work/notify.env" >"$pol/notify.lua"
# The URL is given without the password: it comes from OOPS_DB_PASSWORD.
url_nopw=$OOPS_TEST_DB
port=$(_free_port)
# A clean environment: the test's own variables hold the password too.
env -i PATH="$PATH" HOME="${HOME:-/root}" ASAN_OPTIONS="${ASAN_OPTIONS:-}" UBSAN_OPTIONS="${UBSAN_OPTIONS:-}" \
  LSAN_OPTIONS="${LSAN_OPTIONS:-}" OOPS_LUA_DIR="${OOPS_LUA_DIR:-}" \
  OOPS_DB="$url_nopw" OOPS_DB_PASSWORD="$pw" OOPS_DB_EXTRA="also-$pw" UNRELATED_TOKEN=tok-$RANDOM \
  "$oopsd" --name env1 --policies "$pol" --listen "127.0.0.1:$port" 2>"$work/env1.log" &
SRV_PID[env1]=$! SRV_PORT[env1]=$port SRV_LOG[env1]="$work/env1.log"
wait_for 30 "a server started with the password in OOPS_DB_PASSWORD" grep -q 'msg="started:' "$work/env1.log"
id=$(ctl create --app shop/env --env prod --artifact reg/shop/env:1)
wait_for 30 "its exec pipeline succeeds (build, deploy and health each ran env)" bash -c "[[ \$(sql \"SELECT status FROM pipeline WHERE id = '$id'\") == SUCCEEDED ]]"
wait_for 20 "the command notifier ran env too" test -s "$work/notify.env"
logs=$(ctl logs "$id")
like "$logs" "OOPS_PIPELINE=$id" "a command gets the pipeline's own variables"
like "$logs" "KUBECONFIG=/etc/oopsd/kube" "... the application's env from the policy"
like "$logs" "PATH=" "... and the allow-listed PATH"
unlike "$logs" "OOPS_DB" "no OOPS_DB* variable reaches a command (pipeline_log)"
unlike "$logs" "$pw" "... nor the password, under any name"
unlike "$logs" "UNRELATED_TOKEN" "a variable outside the allow-list is not passed"
notify_env=$(cat "$work/notify.env")
like "$notify_env" "OOPS_EVENT_ID=" "the command notifier gets its event variables"
unlike "$notify_env" "OOPS_DB|$pw|UNRELATED_TOKEN" "... and neither the database settings nor other variables"
environ=$(tr '\0' '\n' <"/proc/${SRV_PID[env1]}/environ")
unlike "$environ" "$pw" "oopsd's own /proc/PID/environ no longer shows the password"
like "$environ" "UNRELATED_TOKEN=" "... while its other variables are untouched"
unlike "$(cat "$work/env1.log")" "$pw" "the password is in no log line"
kill -TERM "${SRV_PID[env1]}"; wait "${SRV_PID[env1]}" 2>/dev/null

# ---- 2. policies cannot read the secret --------------------------------------
pol2="$work/getenv"; mkdir -p "$pol2"; cp "$fast" "$pol2/"
echo 'scan { interval = os.getenv("OOPS_DB") }' >"$pol2/zz.lua"
out=$(OOPS_DB="$OOPS_TEST_DB" bounded "$oopsd" --check --policies "$pol2" 2>&1); rc=$?
is "$rc" 1 "--check refuses a policy that reads OOPS_DB"
like "$out" 'zz.lua:1: os.getenv: OOPS_DB: the database settings are not readable by policies' "... naming the file, line and why"
unlike "$out" "$pw" "... without the value"
out=$(OOPS_DB_PASSWORD="$pw" bounded "$oopsd" --check --policies "$pol2" 2>&1)
unlike "$out" "$pw" "... the same with OOPS_DB_PASSWORD"
echo 'build { timeout = os.getenv("HOME") .. "-not-a-duration" }' >"$pol2/zz.lua"
like "$(HOME=/home/oops bounded "$oopsd" --check --policies "$pol2" 2>&1)" '"/home/oops-not-a-duration": not a duration' \
  "other variables stay readable (and are quoted when short)"

# ---- 3. a bad URL never prints a piece of the password -----------------------
for u in 'mysql://oops:SECRET/TAIL@127.0.0.1:x3306/oops' 'mysql://oops:SE@CR/ET@127.0.0.1/oops?connect_timeout=abc' \
         'mysql://oops:SECRET@TAIL@[::1/oops' 'mysql://oops:SECRET%zzTAIL@127.0.0.1/oops'; do
  out=$(bounded "$oopsd" --db "$u" --name u1 --policies "$pol2" --listen off 2>&1); rc=$?
  is "$rc" 1 "a malformed URL is bad input (exit 1): ${u//[A-Z]/?}"
  unlike "$out" 'SECRET|TAIL|ECR|CR/ET' "... and its message quotes no part of the password"
done
like "$(bounded "$oopsd" --db 'mysql://oops:a%zz@127.0.0.1/oops' --name u1 --policies "$pol2" --listen off 2>&1)" \
  'percent-encode @ : / % in a user or password as %40 %3A %2F %25' "the message says how to encode a password"
out=$(bounded "$oopsd" --db 'mysql://oops@127.0.0.1:1/oops' --name u1 --policies "$pol2" --listen '[::1:80' 2>&1); rc=$?
is "$rc" 1 "a bad --listen is bad input (exit 1) even with the database unreachable"
like "$out" 'cannot listen on \[::1:80: invalid address' "... and says so before connecting"
if [[ -n "${MDB_IPV6:-}" ]]; then
  v6=${OOPS_TEST_DB/@127.0.0.1:/@[::1]:}
  ipv6_id=$(ctl create --app shop/v6 --env prod)
  is "$("$OOPS_BUILD/oopsctl" --db "$v6" show "$ipv6_id" --json >/dev/null 2>&1; echo $?)" 0 "a bracketed IPv6 URL reaches the database"
  ctl stop "$ipv6_id" >/dev/null
else
  echo "ok $((++TAP_N)) # SKIP no IPv6 loopback on this machine"
fi

# ---- 4. policy code is bounded: --check and SIGHUP -------------------------
pol3="$work/bounded"; mkdir -p "$pol3"; cp "$fast" "$pol3/"
declare -A hostile=(
  [backtrack]='string.find(string.rep("a", 40), "(.-)(.-)(.-)(.-)(.-)(.-)(.-)(.-)b")'
  [memory]='local s = string.rep("x", 2^31 - 1)'
  [loop]='while true do pcall(function() while true do end end) end'
)
for k in backtrack memory loop; do
  echo "${hostile[$k]}" >"$pol3/zz.lua"
  out=$(bounded "$oopsd" --check --policies "$pol3" 2>&1); rc=$?
  is "$rc" 1 "--check on a policy that would $k exits 1 (bounded)"
  like "$out" 'zz.lua' "... naming the file"
done
echo 'scan { interval = "300ms" }' >"$pol3/zz.lua"; rm "$pol3/oopsd.lua"; cp "$fast" "$pol3/oopsd.lua"; rm "$pol3/zz.lua"
start_server b1 "$pol3"
for k in backtrack memory loop; do
  echo "${hostile[$k]}" >"$pol3/zz.lua"
  kill -HUP "${SRV_PID[b1]}"
  wait_for 20 "SIGHUP with a policy that would $k: the reload is refused" \
    bash -c "curl -s '$(url b1 /healthz)' | grep -q 'policy stale'"
  is "$(http_code "$(url b1 /healthz)")" 503 "... /healthz still answers (503, policy stale)"
  check "... and the server runs on" kill -0 "${SRV_PID[b1]}"
  rm "$pol3/zz.lua"; kill -HUP "${SRV_PID[b1]}"
  wait_for 20 "... a good reload afterwards is taken" bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' '$(url b1 /healthz)') == 200 ]]"
done
# A hook that would backtrack forever fails that call only.
cat >"$pol3/hooks.lua" <<'EOF'
function on_transition(p, from, to)
  string.find(string.rep("a", 40), "(.-)(.-)(.-)(.-)(.-)(.-)(.-)(.-)b")
end
EOF
kill -HUP "${SRV_PID[b1]}"
wait_for 20 "a policy with a backtracking hook loads" grep -q 'version 5' "${SRV_LOG[b1]}"
hid=$(ctl create --app shop/hooked --env prod)
wait_for 30 "a pipeline whose hook would backtrack still succeeds" bash -c "[[ \$(sql \"SELECT status FROM pipeline WHERE id = '$hid'\") == SUCCEEDED ]]"
like "$(cat "${SRV_LOG[b1]}")" 'hook on_transition failed: [^"]*this pattern could backtrack' "... the hook's failure logged"
rm "$pol3/hooks.lua"; kill -HUP "${SRV_PID[b1]}"

stop_servers; SRV_PID=() # the next servers must be alone with their pipelines

# ---- 5. which files are read --------------------------------------------
pol4="$work/files"; mkdir -p "$pol4"; cp "$fast" "$pol4/"
mkfifo "$pol4/zz.lua"
out=$(bounded "$oopsd" --check --policies "$pol4" 2>&1); rc=$?
is "$rc" 1 "--check with a FIFO named zz.lua exits 1 instead of hanging"
like "$out" "zz.lua: a FIFO, not a regular file" "... naming the file"
start_server f1 "$pol4" 2>/dev/null || true
rm -f "$pol4/zz.lua"
if [[ -n "${SRV_PID[f1]:-}" ]] && kill -0 "${SRV_PID[f1]}" 2>/dev/null; then
  echo "not ok $((++TAP_N)) - oopsd starts with a FIFO in its policy directory"; TAP_FAILED=$((TAP_FAILED + 1))
else
  echo "ok $((++TAP_N)) - oopsd refuses to start with a FIFO in its policy directory"
fi
ln -s /dev/zero "$pol4/zero.lua"
out=$(bounded "$oopsd" --check --policies "$pol4" 2>&1)
like "$out" "zero.lua: a character device, not a regular file" "a symlink to /dev/zero is refused, not read"
rm "$pol4/zero.lua"
head -c 2000000 /dev/zero | tr '\0' '-' >"$pol4/big.lua"
like "$(bounded "$oopsd" --check --policies "$pol4" 2>&1)" "big.lua: larger than 1048576 bytes" "a file over 1 MiB is refused"
rm "$pol4/big.lua"
empty="$work/empty"; mkdir -p "$empty"; touch "$empty/README"
out=$(bounded "$oopsd" --check --policies "$empty" 2>&1); rc=$?
is "$rc" 1 "--check on a directory without policy files exits 1"
like "$out" "$empty: no policy files \(\*\.lua\) in it" "... saying so"
out=$(bounded "$oopsd" --db "$OOPS_TEST_DB" --name e0 --policies "$empty" --listen off 2>&1); rc=$?
is "$rc" 1 "oopsd refuses to start on it (exit 1)"

# ---- 6. signals --------------------------------------------------------
start_server g1 "$pol4"
for sig in USR1 USR2 ALRM VTALRM PROF IO PWR XFSZ; do
  kill -"$sig" "${SRV_PID[g1]}"
done
wait_for 10 "SIGUSR1 is logged as ignored" grep -q 'signal SIGUSR1 (10) ignored' "${SRV_LOG[g1]}"
wait_for 10 "... and so is SIGXFSZ, the last one sent" grep -q 'signal SIGXFSZ' "${SRV_LOG[g1]}"
check "after USR1 USR2 ALRM VTALRM PROF IO PWR XFSZ the server still runs" kill -0 "${SRV_PID[g1]}"
is "$(http_code "$(url g1 /healthz)")" 200 "... and /healthz is 200"
kill -QUIT "${SRV_PID[g1]}"
wait "${SRV_PID[g1]}"; rc=$?
is "$rc" 0 "SIGQUIT stops it gracefully (exit 0)"
like "$(cat "${SRV_LOG[g1]}")" 'SIGQUIT: starting no new tick' "... draining like SIGTERM"
is "$(sql "SELECT IS_USED_LOCK('oops:server:g1') IS NULL")" 1 "... and its locks are released"

stop_servers; SRV_PID=()

# ---- 7. the engine runs nothing the policy does not declare -----------------
pol5="$work/declared"; mkdir -p "$pol5"
cat >"$pol5/oopsd.lua" <<'EOF'
scan    { interval = "300ms" }
deploy  { timeout = "20s" }
rollout { timeout = "20s" }
gateway "exec" {}
application "shop/api" {
  environments = { "prod" },
  build  = { "/bin/echo", "build", "{environment}", "{artifact}" },
  deploy = { "/bin/echo", "deploy", "{environment}", "{artifact}" },
  health = { "/bin/true" },
}
EOF
start_server d1 "$pol5"
# Rows any tool could write: oopsctl without --policies, or SQL.
ins() { # id env artifact app
  sql "INSERT INTO pipeline (id, namespace, application, environment, status, deploy_mode, artifact)
       VALUES ('$1', 'shop', '$4', '$2', 'INITIALIZED', 'auto', '$3')"
}
ins badenv00001 staging reg/a:1 api
ins badopt00001 --force-delete reg/a:1 api
ins badart00001 prod --delete-all api
ins badapp00001 prod reg/a:1 nope
for i in badenv00001 badopt00001 badart00001 badapp00001; do
  wait_for 20 "pipeline $i is failed by the engine" bash -c "[[ \$(sql \"SELECT status FROM pipeline WHERE id = '$i'\") == ERROR ]]"
done
like "$(sql "SELECT message FROM pipeline WHERE id = 'badenv00001'")" \
  'Refused, nothing was run: environment "staging" is not one of shop/api.s environments \(prod\)' "... an undeclared environment, said so"
like "$(sql "SELECT message FROM pipeline WHERE id = 'badopt00001'")" 'its environment "--force-delete" is not a lowercase DNS label' "... an option-like environment"
like "$(sql "SELECT message FROM pipeline WHERE id = 'badart00001'")" 'its artifact "--delete-all" starts with "-"' "... an option-like artifact"
like "$(sql "SELECT message FROM pipeline WHERE id = 'badapp00001'")" 'application shop/nope is not declared by the running policy' "... an undeclared application"
is "$(sql "SELECT COUNT(*) FROM pipeline_log WHERE pipeline_id LIKE 'bad%'")" 0 "no command ran for any of them"
ins goodpl00001 prod reg/a:1 api # (badart00001 held shop/api prod's unfinished slot until it failed)
wait_for 30 "the declared one succeeds beside them" bash -c "[[ \$(sql \"SELECT status FROM pipeline WHERE id = 'goodpl00001'\") == SUCCEEDED ]]"

done_testing
