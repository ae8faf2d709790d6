-- needs: own database
-- Canary steps exactly once whoever dies when (issue 38), three servers, a
-- real Prometheus:
--   1. the driver SIGKILLed after the weight command took effect, before it
--      recorded the step (the simulated gateway sleeps after applying it):
--      its heir asks the gateway, finds the weight set, sets none again;
--   2. the reverse, the step recorded but its weight never applied (the
--      weight command failing), the driver SIGKILLed: the heir sets it once;
--   3. the driver SIGKILLed mid-analysis: the heir continues the count,
--      never measuring again what was recorded;
--   4. the database restarted mid-analysis.
-- Each time sim_call shows each weight once per step, and the measurements
-- of a step are 1..count, each once.
local prom = prometheus()

local QUERY = [[sum(rate(http_requests_total{app="{application}",env="{environment}",track="canary",code="500"}[4s]))
  / sum(rate(http_requests_total{app="{application}",env="{environment}",track="canary"}[4s]))]]

servers { count = 3, policy = ([[
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
rollout { timeout = "60s" }
gateway "simulated" { build = "200ms", deploy = "0s", rollout = "300ms" }
analysis "errors" { prometheus = %q, query = %q, success = function(v) return v < 0.01 end,
  interval = "2s", count = 4, failure_limit = 1 }
application "shop/web" { environments = { "prod" }, rollout = { strategy = "canary", steps = {
  { weight = 10 }, { pause = "1s" }, { weight = 50 }, { analysis = "errors" }, { weight = 100 } } } }
]]):format(prom.url, QUERY) }

local function measured(p)
  return sql("SELECT step, n FROM canary_measurement WHERE pipeline_id = ? ORDER BY step, n", p.id)
end
local function counted_once(p, count)
  local m = measured(p)
  if #m ~= count then return false, #m .. " measurements" end
  for i, r in ipairs(m) do
    if r.n ~= i or r.step ~= 4 then return false, ("measurement %d is step %d n %d"):format(i, r.step, r.n) end
  end
  return true
end
local function expect_counted(p, label)
  local fine, why = counted_once(p, 4)
  expect(fine, label .. ": its analysis measured 1..4, each once", why)
end
local function revive(name)
  if not server(name):alive() then server(name):start() end
end

-- 1. Killed after the weight command, before the step update.
fault("shop/web/prod", "slow_set_weight", "4000")
local p1 = create { app = "shop/web", env = "prod", artifact = "k1" }
wait_until("1: the weight 10 is applied", function() return p1:weights() == "10" end, 60)
local d1 = p1:driver()
expect(d1 and p1:row().step == 1, "1: its step is not recorded yet", tostring(p1:row().step))
server(d1):kill("KILL")
clear_fault("shop/web/prod", "slow_set_weight")
expect(p1:wait("SUCCEEDED", 90), "1: the heir finishes the canary", p1:message())
expect(p1:weights() == "10,50,100", "1: each weight applied once", p1:weights())
expect(#p1:drivers() >= 2, "1: another server took it over", table.concat(p1:drivers(), ","))
expect_counted(p1, "1")
revive(d1)

-- 2. The step recorded, its weight never applied, then killed.
local p2 = create { app = "shop/web", env = "prod", artifact = "k2" }
wait_until("2: the canary is in its pause", function() return p2:row().step == 2 end, 60)
fault("shop/web/prod", "set_weight", "gateway busy")
wait_until("2: the weight 50 step begins, failing", function() return p2:row().step == 3 end, 30)
sleep(1)
local d2 = p2:driver()
server(d2):kill("KILL")
expect(p2:weights() == "10", "2: weight 50 never applied", p2:weights())
clear_fault("shop/web/prod", "set_weight")
expect(p2:wait("SUCCEEDED", 90), "2: the heir finishes the canary", p2:message())
expect(p2:weights() == "10,50,100", "2: weight 50 applied once, by the heir", p2:weights())
revive(d2)

-- 3. Killed mid-analysis: the count continues.
local p3 = create { app = "shop/web", env = "prod", artifact = "k3" }
wait_until("3: two measurements recorded", function() return #measured(p3) >= 2 end, 60)
local d3 = p3:driver()
server(d3):kill("KILL")
expect(p3:wait("SUCCEEDED", 90), "3: the heir finishes the canary", p3:message())
expect_counted(p3, "3")
expect(p3:weights() == "10,50,100", "3: each weight once", p3:weights())
revive(d3)

-- 4. The database restarted mid-analysis.
local p4 = create { app = "shop/web", env = "prod", artifact = "k4" }
wait_until("4: a measurement recorded", function() return #measured(p4) >= 1 end, 60)
restart_database { down = 3 }
expect(p4:wait("SUCCEEDED", 120), "4: the canary finishes after the restart", p4:message())
expect_counted(p4, "4")
expect(p4:weights() == "10,50,100", "4: each weight once", p4:weights())
