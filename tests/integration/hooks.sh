# Operator hooks: an error inside a hook is caught, logged with a traceback
# naming the policy file and line, and the engine carries on (next step, next
# tick). on_build_lost may ask for a resubmit instead of failing at once.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
trap stop_servers EXIT
dir="$OOPS_TEST_WORK/hook-policies"; mkdir -p "$dir"
cp "$OOPS_ROOT/tests/fixtures/policies/fast/oopsd.lua" "$dir/"
cat >"$dir/hooks.lua" <<'HOOKS'
-- Broken on purpose: every transition to RUNNING raises.
function on_transition(pipeline, from, to)
  if to == "RUNNING" then error("hook broke on purpose") end
end

-- A lost build is resubmitted once per pipeline, then fails.
local resubmitted = {}
function on_build_lost(pipeline)
  if resubmitted[pipeline.id] then return "fail" end
  resubmitted[pipeline.id] = true
  return "resubmit"
end
HOOKS
check "the hooks policy loads" "$OOPS_BUILD/oopsd" --check --policies "$dir"
start_server h1 "$dir"
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }

id=$(ctl create --app shop/hook --env prod)
wait_for 20 "a pipeline whose hook raises still succeeds" bash -c "[[ \$(sql \"SELECT status FROM pipeline WHERE id = '$id'\") == SUCCEEDED ]]"
log=$(cat "${SRV_LOG[h1]}")
like "$log" 'level=error server=h1 .*msg="hook on_transition failed: [^"]*hooks.lua:3: hook broke on purpose"' \
  "the hook's error is logged naming the policy file and line"
like "$log" 'traceback="stack traceback:' "... with a traceback"
is "$(grep -c 'hook on_transition failed' "${SRV_LOG[h1]}")" 1 "... once (the hook raised once)"
check "the server is still running" kill -0 "${SRV_PID[h1]}"

# on_build_lost = "resubmit": the first loss resubmits, the second fails.
id2=$(ctl create --app shop/lost --env prod)
wait_for 20 "a second build is submitted" bash -c "[[ \$(sql \"SELECT COUNT(*) FROM sim_job WHERE pipeline_id = '$id2'\") == 1 ]]"
sql "UPDATE sim_job SET ready_at = NOW(6) + INTERVAL 1 HOUR WHERE pipeline_id = '$id2'"
sql "DELETE FROM sim_job WHERE pipeline_id = '$id2'"
wait_for 20 "on_build_lost = resubmit submits the build again" \
  bash -c "[[ \$(sql \"SELECT COUNT(*) FROM sim_call WHERE pipeline_id = '$id2' AND action = 'build_submit'\") == 2 ]]"
is "$(sql "SELECT status FROM pipeline WHERE id = '$id2'")" RUNNING "... and the pipeline stays RUNNING"
sql "UPDATE sim_job SET ready_at = NOW(6) + INTERVAL 1 HOUR WHERE pipeline_id = '$id2'"
sql "DELETE FROM sim_job WHERE pipeline_id = '$id2'"
wait_for 20 "the second loss fails it (the hook says fail)" bash -c "[[ \$(sql \"SELECT status FROM pipeline WHERE id = '$id2'\") == ERROR ]]"
like "$(sql "SELECT message FROM pipeline WHERE id = '$id2'")" "build job missing" "... with the build-job-missing message"

done_testing
