-- Rollback (REFERENCE.md §9, `oopsctl rollback`): a new pipeline for the
-- artifact of an earlier SUCCEEDED release, INITIALIZED → DEPLOYING →
-- ROLLING_OUT → SUCCEEDED with no build, driven and fenced like any other;
-- a kill during its deploy ends in the deploy timeout, never a second
-- deploy. Then a rollout whose readiness flaps meets rollout.max.
local POLICY = [[
scan    { interval = "300ms" }
deploy  { timeout = "4s" }
rollout { timeout = "2s", max = "5s" }
gateway "simulated" { build = "300ms", deploy = "1500ms", rollout = "%s" }
]]
local fleet = servers { count = 2, policy = POLICY:format("300ms") }

local function statuses(p)
  local out = {}
  for _, e in ipairs(p:events()) do out[#out + 1] = e.to_status end
  return table.concat(out, " ")
end

local v1 = create { app = "shop/api", env = "prod", artifact = "v1" }
expect(v1:wait("SUCCEEDED", 30), "release v1 succeeded", v1:message())
local v2 = create { app = "shop/api", env = "prod", artifact = "v2" }
expect(v2:wait("SUCCEEDED", 30), "release v2 succeeded", v2:message())

-- 1. Back to the release before the current one.
local back, rc, err = rollback { app = "shop/api", env = "prod" }
expect(back ~= nil, "oopsctl rollback created a pipeline", tostring(rc) .. " " .. tostring(err))
expect(back:wait("SUCCEEDED", 30), "the rollback succeeded", back:message())
local row = back:row()
expect(row.artifact == "v1" and row.trigger_type == "rollback", "it shipped v1 as a rollback",
  tostring(row.artifact) .. " " .. tostring(row.trigger_type))
expect(statuses(back) == "INITIALIZED DEPLOYING ROLLING_OUT SUCCEEDED", "no build on the way",
  statuses(back))
expect(back:calls("build_submit") == 0 and back:calls("deploy") == 1, "no build submitted, one deploy",
  ("%d submits, %d deploys"):format(back:calls("build_submit"), back:calls("deploy")))

-- 2. A kill during the rollback's deploy: the deploy timeout frees it.
local again = assert(rollback { app = "shop/api", env = "prod", to = v2.id })
expect(again:wait("DEPLOYING", 20), "the second rollback deploys", again:status())
local driver = again:driver()
expect(driver ~= nil, "it has a driver", tostring(driver))
server(driver):kill("KILL")
expect(again:wait("ERROR", 30), "the pipeline its dead driver left DEPLOYING fails by the deploy timeout",
  again:status())
expect((again:message() or ""):find("Deploy timed out", 1, true) ~= nil, "... saying so", again:message())
expect(again:calls("deploy") == 1, "its deploy was never made twice", again:calls("deploy") .. " deploys")
server(driver):start()

-- 3. A rollout whose readiness keeps flapping: every second it is "not
-- ready since now" again, so the 2s timeout never counts down; rollout.max
-- (5s) ends it. Its rollout is never ready by itself (rollouts of an hour
-- from here on): made ready after 300 ms, a loaded machine once saw it
-- SUCCEEDED before the first flap.
for _, srv in ipairs(fleet) do
  expect(srv:reload(POLICY:format("1h")), srv.name .. " reloads: rollouts take an hour")
end
local flappy = create { app = "shop/web", env = "staging", artifact = "v1" }
expect(flappy:wait("ROLLING_OUT", 30), "the flapping one rolls out", flappy:status())
local st
for _ = 1, 30 do
  sql("UPDATE sim_job SET started_at = NOW(6), ready_at = NOW(6) + INTERVAL 1 HOUR " ..
    "WHERE pipeline_id = ? AND kind = 'rollout'", flappy.id)
  st = flappy:status()
  if st ~= "ROLLING_OUT" then break end
  sleep(0.5)
end
expect(st == "ERROR", "rollout.max ended the flapping rollout", st)
expect((flappy:message() or ""):find("rollout.max", 1, true) ~= nil, "... naming rollout.max",
  flappy:message())
