-- Rules 2, 3 and 4: what the build scan does with each answer of the gateway.
servers { count = 2, policy = [[
scan    { interval = "300ms" }
gateway "simulated" { build = "1500ms", deploy = "0s", rollout = "300ms" }
]] }

-- The build job exists once the driver has submitted it (claim, then act).
local function building(app)
  local p = create { app = app, env = "prod" }
  expect(p:wait("RUNNING", 20), app .. ": the build starts")
  wait_until(app .. ": the build job exists", function()
    return sql("SELECT COUNT(*) AS n FROM sim_job WHERE pipeline_id = ? AND kind = 'build'", p.id)[1].n == 1
  end, 10)
  return p
end

local function events(p)
  local t = {}
  for _, e in ipairs(p:events()) do t[#t + 1] = e.event_type end
  return table.concat(t, " ")
end

-- Rule 2: a submit error fails the pipeline with the error's text (REFERENCE 12.5).
fault("shop/submit/prod", "build_submit", "registry unreachable: connection refused")
local submit = create { app = "shop/submit", env = "prod" }
expect(submit:wait("ERROR", 20), "a build that cannot be submitted fails the pipeline")
expect(submit:message():find("registry unreachable: connection refused", 1, true),
  "... carrying the error's text", submit:message())

-- Rule 3: manual mode stops at BUILD_SUCCEEDED; auto deploys and rolls out.
local manual = create { app = "shop/manual", env = "prod", manual = true }
expect(manual:wait("BUILD_SUCCEEDED", 20), "a manual pipeline waits at BUILD_SUCCEEDED")
expect(manual:message() == "Image built, waiting for a manual release.", "... saying so", manual:message())
sleep(1)
expect(manual:status() == "BUILD_SUCCEEDED" and manual:calls("deploy") == 0, "... and deploys nothing by itself")
local auto = create { app = "shop/auto", env = "prod" }
expect(auto:wait("SUCCEEDED", 20), "an automatic pipeline deploys and rolls out")
expect(events(auto) == "CREATED BUILDING DEPLOYING ROLLING_OUT SUCCEEDED", "... through each status once", events(auto))

-- Rule 4: a failed build → ERROR.
local failed = building("shop/failed")
fail_job(failed)
expect(failed:wait("ERROR", 20), "a failed build fails the pipeline")
expect(failed:message() == "Image build failed, see the pipeline log.", "... with the build-failed message",
  failed:message())

-- Rule 4: a missing build job → ERROR at once (the original waited forever).
local missing = building("shop/missing")
delete_job(missing)
expect(missing:wait("ERROR", 10), "a RUNNING pipeline whose job was deleted fails at once")
expect(missing:message():find("build job missing", 1, true), "... saying the build job is missing", missing:message())

-- Rule 4: a job that exists without a status is left for the next tick.
local pending = building("shop/pending")
sql("UPDATE sim_job SET outcome = 'pending' WHERE pipeline_id = ? AND kind = 'build'", pending.id)
sleep(3)
expect(pending:status() == "RUNNING", "a job without a status yet leaves the pipeline RUNNING over many ticks")
sql("UPDATE sim_job SET outcome = NULL WHERE pipeline_id = ? AND kind = 'build'", pending.id)
expect(pending:wait("SUCCEEDED", 20), "... and it carries on once the job has a status")

-- Rule 4: a gateway error is left for the next tick, not a failure (REFERENCE 12.6).
fault("shop/flaky/prod", "build_status", "cluster API timeout")
local flaky = building("shop/flaky")
sleep(3)
expect(flaky:status() == "RUNNING", "a gateway error leaves a RUNNING pipeline alone (tick after tick)")
clear_fault("shop/flaky/prod", "build_status")
expect(flaky:wait("SUCCEEDED", 20), "... and it carries on once the gateway answers")
