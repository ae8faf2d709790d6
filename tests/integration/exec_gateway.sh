# The exec gateway end to end: real oopsd processes run the scripts of
# tests/exec/ (argv only, never through a shell) with the fixture policy
# tests/exec/policies/, against the real database.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }

work=$OOPS_TEST_WORK/exec_gateway.$$
state=$work/state
mkdir -p "$state"
# The scripts keep their traces here (tests/exec/policies/apps.lua passes these
# two to the commands through `env`: commands get no other variable of ours).
export EXEC_STATE=$state EXEC_ARGS_FILE=$state/args
policies=$OOPS_ROOT/tests/exec/policies
pwned=/tmp/pwned-$$-$RANDOM
declare -A oopsd # server name -> pid

start_oopsd() { # NAME
  "$OOPS_BUILD/oopsd" --db "$OOPS_TEST_DB" --name "$1" --policies "$policies" \
    --listen 127.0.0.1:0 2>"$work/$1.log" &
  oopsd[$1]=$!
}
cleanup() {
  local n f
  for n in "${!oopsd[@]}"; do kill -KILL "${oopsd[$n]}" 2>/dev/null; wait "${oopsd[$n]}" 2>/dev/null; done
  # Builds left behind by a SIGKILLed oopsd: their whole process groups.
  for f in "$state"/*.build.pid; do
    [[ -s $f ]] && kill -KILL -- "-$(cat "$f")" 2>/dev/null
  done
  rm -f "$pwned"
}
trap cleanup EXIT

status() { sql "SELECT status FROM pipeline WHERE id = '$1'"; }
status_is() { [[ $(status "$1") == "$2" ]]; }
message() { sql "SELECT message FROM pipeline WHERE id = '$1'"; }
path_of() { sql "SELECT GROUP_CONCAT(to_status ORDER BY id SEPARATOR ' ') FROM pipeline_event WHERE pipeline_id = '$1'"; }
job_state() { sql "SELECT state FROM exec_job WHERE pipeline_id = '$1' AND kind = 'build'"; }
alive() { kill -0 "$1" 2>/dev/null && ! grep -q '^[^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
gone() { ! alive "$1"; }
# The build of pipeline $1 is running: its script wrote its pid.
building() { [[ -s $state/$1.build.pid ]] && status_is "$1" RUNNING; }

ctl migrate >/dev/null
start_oopsd e1
start_oopsd e2

ok=$(ctl create --app t/web --env prod --artifact registry/t/web:1.0)
pwn=$(ctl create --app t/args --env prod --artifact "\$(touch $pwned) %1 {id}")
broken=$(ctl create --app t/broken --env prod --artifact registry/t/broken:1)
dfail=$(ctl create --app t/web --env deployfail --artifact registry/t/web:1.1)
gone_id=$(ctl create --app t/web --env gone --artifact registry/t/web:1.2)
sick=$(ctl create --app t/web --env sick --artifact registry/t/web:1.3)
hold1=$(ctl create --app t/web --env hold1 --artifact registry/t/web:2.0)

# --- the happy path, through the real scripts ---------------------------------
wait_for 30 "a pipeline runs build, deploy and health to SUCCEEDED" status_is "$ok" SUCCEEDED
is "$(path_of "$ok")" "INITIALIZED RUNNING DEPLOYING ROLLING_OUT SUCCEEDED" "... through every status"
is "$(cat "$state/$ok.build.args")" "$ok
prod
t/web
TAG=registry/t/web:1.0" "the build received its arguments with the placeholders substituted"
is "$(cat "$state/$ok.deploy.args")" "$ok
registry/t/web:1.0
prod" "the deploy received its arguments"
is "$(cat "$state/$ok.health.n")" 2 "the health command said not ready, then ready"
is "$(sql "SELECT GROUP_CONCAT(CONCAT(step, ' ', result) ORDER BY id SEPARATOR ', ') FROM pipeline_log WHERE pipeline_id = '$ok'")" \
  "build exited 0, deploy exited 0, health exited 1, health exited 0" "one log row per command (health only when its verdict changes)"
is "$(job_state "$ok")" succeeded "exec_job records the build as succeeded"
out=$(ctl logs "$ok"); is "$?" 0 "oopsctl logs exits 0"
like "$out" "build +e[12] +exited 0" "... with each command's step, server and outcome"
like "$out" "argv \[\"\.\./build\.sh\",\"$ok\",\"prod\",\"t/web\",\"TAG=registry/t/web:1\.0\"\]" "... the argv as run"
like "$out" "    \| building $ok for prod" "... and the output, indented"
like "$out" "\| warning: using a pretend compiler" "... stderr included"
out=$(ctl logs "$ok" --step deploy)
like "$out" "deploy" "logs --step deploy shows the deploy"
unlike "$out" "build|health" "... and nothing else"

# --- a hostile artifact reaches the command as one literal argument ----------
wait_for 30 "the pipeline with a \$(...) artifact SUCCEEDED" status_is "$pwn" SUCCEEDED
is "$(cat "$state/args")" "\$(touch $pwned) %1 {id}
x${pwn}y
t/args@prod
100%
%1" "every argument arrived literally, one per line (no shell, no pattern, no rescan)"
check "the \$(touch ...) in the artifact was never run" test ! -e "$pwned"
is "$(sed -n 2p "$state/$pwn.deploy.args")" "\$(touch $pwned) %1 {id}" "the deploy got it as one argument too"

# --- failures ----------------------------------------------------------------
wait_for 30 "a failing build ends in ERROR" status_is "$broken" ERROR
is "$(message "$broken")" "Image build failed, see the pipeline log." "... with the build-failed message"
is "$(job_state "$broken")" failed "exec_job records the build as failed"
out=$(ctl logs "$broken")
like "$out" "build +e[12] +exited 2" "oopsctl logs shows the failed build's exit status"
like "$out" "\| main.c:3: error: expected ';' before '}'" "... and its output"
out=$(ctl --json logs "$broken")
like "$out" '^\[\{"id":[0-9]+,.*"step":"build",.*"exit_status":2,.*"argv":\["\.\./build-fail\.sh","registry/t/broken:1"\],.*"output":"compiling main.c\\n' \
  "logs --json gives the rows with argv as a JSON array"

wait_for 30 "a failing deploy ends in ERROR" status_is "$dfail" ERROR
is "$(message "$dfail")" "Deployment failed: deploy command exited 4: kubectl: connection refused" \
  "... with the command's error text"
wait_for 30 "health exit 2 (workload missing) ends in ERROR" status_is "$gone_id" ERROR
is "$(message "$gone_id")" "Deployment failed: the workload does not exist." "... as a missing workload"
wait_for 30 "health exit 3 ends in ERROR" status_is "$sick" ERROR
is "$(message "$sick")" "Deployment failed: pod web-0: CrashLoopBackOff" "... named by the last line of its output"

out=$(ctl logs nosuchid 2>&1); is "$?" 1 "logs of an unknown id exits 1"
like "$out" 'no pipeline with id "nosuchid"' "... naming the id"
out=$(ctl logs "$ok" --step bogus 2>&1); is "$?" 1 "logs --step with an unknown step exits 1"

# --- stop kills the build ----------------------------------------------------
wait_for 30 "a hold build is running" building "$hold1"
bpid=$(cat "$state/$hold1.build.pid")
check "... its process is alive" alive "$bpid"
# A reload (SIGHUP) hands the running build over to the new gateway: the
# stop below finds and kills it, and the pipeline is not failed as missing.
reloaded() { grep -q "policy reloaded" "$work/e1.log" && grep -q "policy reloaded" "$work/e2.log"; }
kill -HUP "${oopsd[e1]}" "${oopsd[e2]}"
wait_for 30 "both servers reload the policy while the build runs" reloaded
ctl stop "$hold1" >/dev/null
wait_for 30 "stopping the pipeline kills its build process" gone "$bpid"
is "$(status "$hold1")" STOPPED "the pipeline is STOPPED"
is "$(job_state "$hold1")" stopped "exec_job records the build as stopped"
wait_for 30 "the killed build is logged" test -n "$(sql "SELECT id FROM pipeline_log WHERE pipeline_id = '$hold1'")"
like "$(ctl logs "$hold1")" "killed by signal 15 \(the pipeline was stopped\)" "... as killed because the pipeline was stopped"

# --- the driving server dies mid-build: the next driver fails it at once ------
hold2=$(ctl create --app t/web --env hold2 --artifact registry/t/web:2.1)
wait_for 30 "another hold build is running" building "$hold2"
driver=$(sql "SELECT server FROM exec_job WHERE pipeline_id = '$hold2'")
other=$([[ $driver == e1 ]] && echo e2 || echo e1)
kill -KILL "${oopsd[$driver]}"
wait "${oopsd[$driver]}" 2>/dev/null
unset "oopsd[$driver]"
wait_for 30 "after SIGKILL of its driver, the pipeline ends in ERROR" status_is "$hold2" ERROR
is "$(message "$hold2")" "Build failed: build job missing (deleted, reaped, or its server died)." \
  "... as a missing build job"
is "$(sql "SELECT server FROM pipeline_event WHERE pipeline_id = '$hold2' AND to_status = 'ERROR'")" "$other" \
  "... failed by the surviving server"
kill -KILL -- "-$(cat "$state/$hold2.build.pid")" 2>/dev/null # the orphaned build

# --- SIGTERM: oopsd kills its builds on the way out --------------------------
hold3=$(ctl create --app t/web --env hold3 --artifact registry/t/web:2.2)
wait_for 30 "a build runs on the last server" building "$hold3"
bpid=$(cat "$state/$hold3.build.pid")
p=${oopsd[$other]}
kill -TERM "$p"
wait_for 30 "oopsd exits on SIGTERM" gone "$p"
wait "$p"; is "$?" 0 "... with status 0"
unset "oopsd[$other]"
check "... and its build process is gone" gone "$bpid"
like "$(ctl logs "$hold3")" "oopsd on $other shut down" "the build's log says why it was killed"
start_oopsd e3
wait_for 30 "a new server fails the orphaned pipeline (build job missing)" status_is "$hold3" ERROR
is "$(message "$hold3")" "Build failed: build job missing (deleted, reaped, or its server died)." "... with the missing-job message"

# --- restart and substitution, called directly (oopsd lua) ------------------
cat >"$work/direct.lua" <<'LUA'
local oops = require("oops")
local policy = require("oops.policy")
local exec = require("oops.gateways.exec")
local pol = assert(policy.load_dir((...), { cron_parse = oops.cron.parse }))
local gw = exec.new(pol.gateway, pol, nil)
local function show(a, b) print(tostring(a) .. " | " .. tostring(b)) end
print(table.concat(exec.substitute({ "{unknown}", "a{namespace}b{namespace}", "{artifact}%0", "{id}" },
  { namespace = "n%1", artifact = "{namespace}" }), "\n"))
show(oops.wait(gw.restart, "t/web", "prod"))
show(oops.wait(gw.restart, "t/args", "prod"))
show(oops.wait(gw.restart, "no/such", "prod"))
show(oops.wait(gw.build_submit, { id = "x", app = "no/such", namespace = "no", application = "such", environment = "prod" }))
LUA
out=$(EXEC_ARGS_FILE=$state/restart.args "$OOPS_BUILD/oopsd" lua "$work/direct.lua" "$policies" 2>"$work/direct.log")
is "$out" "{unknown}
an%1bn%1
{namespace}%0
{id}
true | nil
nil | application t/args has no restart_command
nil | application no/such is not in the policy
nil | application no/such is not in the policy" \
  "placeholders: plain text in, unknown ones kept; restart and unknown applications answer as documented"
is "$(cat "$state/restart.args")" "restart
t/web
prod" "the restart command got its placeholders substituted"

done_testing
