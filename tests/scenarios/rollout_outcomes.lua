-- Rules 5 and 6: the rollout scan's verdicts and the deploy timeout.
servers { count = 2, policy = [[
scan    { interval = "300ms" }
rollout { timeout = "3s" }
deploy  { timeout = "8s" }
gateway "simulated" { build = "300ms", deploy = "0s", rollout = "1s" }
]] }

local function rolling(app)
  local p = create { app = app, env = "prod" }
  expect(p:wait("ROLLING_OUT", 20), app .. " reaches ROLLING_OUT")
  return p
end

-- Complete → SUCCEEDED.
local good = rolling("shop/good")
expect(good:wait("SUCCEEDED", 20), "a complete rollout succeeds")

-- Workload missing → ERROR.
local gone = rolling("shop/gone")
delete_job(gone, "rollout")
expect(gone:wait("ERROR", 20), "a rollout whose workload is missing fails")
expect(gone:message() == "Deployment failed: the workload does not exist.", "... saying so", gone:message())

-- A failure reason → ERROR carrying it.
local pull = rolling("shop/pull")
fail_rollout(pull, "ImagePullBackOff (pull-0)")
expect(pull:wait("ERROR", 20), "a failing rollout fails")
expect(pull:message() == "Deployment failed: ImagePullBackOff (pull-0)", "... with the reason", pull:message())

-- Not ready for longer than the rollout timeout → ERROR.
local slow = rolling("shop/slow")
sql("UPDATE sim_job SET ready_at = NOW(6) + INTERVAL 1 HOUR WHERE pipeline_id = ? AND kind = 'rollout'", slow.id)
expect(slow:wait("ERROR", 20), "a rollout not ready for longer than the rollout timeout fails")
expect(slow:message() == "Release timed out: the new version was not ready in time.", "... saying so", slow:message())

-- A gateway error during the rollout is left for the next tick.
fault("shop/blip/prod", "rollout_health", "cluster API timeout")
local blip = rolling("shop/blip")
sleep(1.5)
expect(blip:status() == "ROLLING_OUT", "a gateway error leaves a rollout alone")
clear_fault("shop/blip/prod", "rollout_health")
expect(blip:wait("SUCCEEDED", 20), "... until the gateway answers")

-- Rule 6: DEPLOYING longer than the deploy timeout → ERROR, measured on the
-- database's clock, so it holds when every server restarted in between: a
-- server that died mid-deploy never strands a pipeline.
local stuck = create { app = "shop/stuck", env = "prod" }
expect(stuck:wait("RUNNING", 20), "a pipeline starts building")
for _, name in ipairs({ "s1", "s2" }) do server(name):kill("KILL") end
-- As if its driver died mid-deploy: DEPLOYING, and nobody alive to finish it.
sql("UPDATE pipeline SET status = 'DEPLOYING', status_changed_at = NOW(6) WHERE id = ?", stuck.id)
local deploying_at = oops.time()
sleep(5)
local restarted_at = oops.time()
for _, name in ipairs({ "s1", "s2" }) do server(name):start() end
expect(stuck:wait("ERROR", 30), "a pipeline left DEPLOYING fails after the deploy timeout")
expect(stuck:message():find("Deploy timed out", 1, true), "... saying the deploy timed out", stuck:message())
local failed_at = oops.time()
-- Had the restart reset the clock, it could not fail before restart + 8s.
expect(failed_at < restarted_at + 8, "... measured from when it became DEPLOYING, not from the restart",
  ("deploying at 0s, restarted at %.1fs, failed at %.1fs"):format(restarted_at - deploying_at,
    failed_at - deploying_at))
