-- Rule 8: manual deploy — oopsctl deploy marks a BUILD_SUCCEEDED pipeline as
-- requested; a server then claims and deploys it.
servers { count = 2, policy = [[
scan    { interval = "300ms" }
gateway "simulated" { build = "500ms", deploy = "0s", rollout = "300ms" }
]] }

local m = create { app = "shop/api", env = "prod", manual = true }
expect(m:wait("BUILD_SUCCEEDED", 20), "a manual pipeline waits after its build")
local code = m:deploy()
expect(code == 0, "oopsctl deploy exits 0")
expect(m:wait("SUCCEEDED", 20), "a server claims and deploys it")
local types = {}
for _, e in ipairs(m:events()) do types[#types + 1] = e.event_type end
expect(table.concat(types, " ") == "CREATED BUILDING BUILD_SUCCEEDED DEPLOY_REQUESTED DEPLOYING ROLLING_OUT SUCCEEDED",
  "... through each status once, the operator's request an event of its own", table.concat(types, " "))
expect(m:calls("deploy") == 1, "... deploying once")

-- A stale request: the pipeline was stopped meanwhile.
local s = create { app = "shop/web", env = "prod", manual = true }
expect(s:wait("BUILD_SUCCEEDED", 20), "another manual pipeline waits")
s:stop()
local c2, _, err = s:deploy()
expect(c2 == 3, "deploying a pipeline stopped meanwhile exits 3", err)
expect(s:status() == "STOPPED" and s:calls("deploy") == 0, "... and nothing changes")

-- A release beside an unfinished pipeline of the same app/env is refused, visibly.
local a = create { app = "shop/svc", env = "prod", manual = true }
expect(a:wait("BUILD_SUCCEEDED", 20), "a third manual pipeline waits")
fault("shop/svc/prod", "build_status", "hold the second build")
local b = create { app = "shop/svc", env = "prod" }
expect(b:wait("RUNNING", 20), "a newer pipeline of the same app and env runs")
a:deploy()
wait_until("the older request is refused with a message", function()
  return a:row().message == "Deploy refused: another pipeline for this application and environment is unfinished."
end, 10)
expect(a:status() == "BUILD_SUCCEEDED" and a:row().deploy_requested_at == nil, "... and the request is cleared")
clear_fault("shop/svc/prod", "build_status")
expect(b:wait("SUCCEEDED", 20), "the newer one finishes")
