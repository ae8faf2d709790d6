-- ci: normal pass (scripts/test.sh runs each scenario in one pass; these even out the two)
-- Deploy slots (issue 26): deploy { concurrency = { prod = 2 } } lets at most
-- two prod pipelines be DEPLOYING or ROLLING_OUT at once across the fleet;
-- the others wait after their build, their message saying so, and go in
-- order: rollbacks first, then the oldest. A slot belongs to the pipeline
-- deploying in it, so a slot holder's driver SIGKILLed mid-deploy leaves its
-- pipeline in the slot until the deploy timeout fails it (its deploy may
-- still be applying), and one killed mid-rollout is finished in its slot by
-- the server that takes it over; the slot goes to the next one then. The end
-- check reads the event history: never more than two at a time.
release_rules { slots = { prod = 2 } }
servers { count = 3, policy = [[
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
deploy  { timeout = "5s", concurrency = { prod = 2 } }
rollout { timeout = "30s", max = "30m" }
gateway "simulated" { build = "300ms", deploy = "2s", rollout = "1500ms" }
]] }

local function in_flight()
  return tonumber(sql("SELECT COUNT(*) AS n FROM pipeline WHERE environment = 'prod' AND " ..
    "status IN ('DEPLOYING', 'ROLLING_OUT')")[1].n)
end

-- 1. Six releases at once: two at a time, the others told why they wait.
local wave = {}
for i = 1, 6 do wave[i] = create { app = "shop/a" .. i, env = "prod", artifact = "v1" } end
local said, most = nil, 0
wait_until("six releases at once all go live", function()
  most = math.max(most, in_flight())
  for _, r in ipairs(sql("SELECT message, hold FROM pipeline WHERE environment = 'prod' AND " ..
      "status = 'BUILD_SUCCEEDED'")) do
    if r.hold == "slot" then said = said or r.message end
  end
  for _, p in ipairs(wave) do if p:status() ~= "SUCCEEDED" then return false end end
  return true
end, 90)
expect(most == 2, "two deployed at a time at most, and two did", tostring(most))
expect(said and said:match("^Waiting for a prod deploy slot: %d of 2 in use"), "a waiting one said why",
  tostring(said))

-- 2. A slot holder's driver SIGKILLed mid-deploy: its pipeline keeps the slot
-- until the deploy timeout; the one killed mid-rollout is finished by its
-- heir; every waiting release goes live after them.
local second = {}
for i = 1, 4 do second[i] = create { app = "shop/a" .. i, env = "prod", artifact = "v2" } end
local deploying
wait_until("a release of the second wave deploys", function()
  for _, p in ipairs(second) do if p:status() == "DEPLOYING" then deploying = p; return true end end
end, 30)
local victim = deploying:driver()
server(victim):kill("KILL")
expect(deploying:wait("ERROR", 30), "the pipeline whose driver died mid-deploy fails at the deploy timeout",
  deploying:message())
expect(deploying:message():find("Deploy timed out", 1, true), "... saying so", deploying:message())
server(victim):start()
local rolling
wait_until("another release rolls out", function()
  for _, p in ipairs(second) do if p:status() == "ROLLING_OUT" then rolling = p; return true end end
end, 30)
local heir_of = rolling:driver()
server(heir_of):kill("KILL")
expect(rolling:wait("SUCCEEDED", 40), "the release whose driver died mid-rollout is finished by another",
  rolling:message())
server(heir_of):start()
-- (The second server killed may have been deploying another one too: that
-- one also ends at the deploy timeout.)
wait_until("the rest of the second wave finishes", function()
  for _, p in ipairs(second) do
    local st = p:status()
    if st ~= "SUCCEEDED" and st ~= "ERROR" then return false end
  end
  return true
end, 90)
for _, p in ipairs(second) do
  local st = p:status()
  expect(st == "SUCCEEDED" or p:message():find("Deploy timed out", 1, true),
    p.app .. " went live, or its driver died mid-deploy", st .. ": " .. p:message())
end

-- 3. Rollbacks go first: both slots held by rollouts kept not ready, an
-- older release and then a rollback wait; when a slot frees, the rollback,
-- created later, deploys first.
local holders = { create { app = "shop/a5", env = "prod", artifact = "v3" },
  create { app = "shop/a6", env = "prod", artifact = "v3" } }
for _, p in ipairs(holders) do
  expect(p:wait("ROLLING_OUT", 30), p.app .. " rolls out")
  sql("UPDATE sim_job SET ready_at = NOW(6) + INTERVAL 1 HOUR WHERE pipeline_id = ? AND kind = 'rollout'", p.id)
end
local function held(p) return p:row().hold == "slot" end
local older = create { app = "shop/a1", env = "prod", artifact = "v3" }
wait_until("an older release waits for a slot", function() return held(older) end, 30)
local back = assert(rollback { app = "shop/a2", env = "prod", to = wave[2].id })
wait_until("a rollback waits for a slot", function() return held(back) end, 30)
expect(back:status() == "INITIALIZED", "... in INITIALIZED", back:status())
-- One slot frees: the rollback takes it and the older release still waits.
-- (Both freed at once would let both go, in whichever order the ticks fall.)
sql("UPDATE sim_job SET ready_at = NOW(6) WHERE pipeline_id = ? AND kind = 'rollout'", holders[1].id)
expect(holders[1]:wait("SUCCEEDED", 30), holders[1].app .. " went live")
local function deploying_or_later(p)
  return #sql("SELECT id FROM pipeline_event WHERE pipeline_id = ? AND to_status = 'DEPLOYING'", p.id) > 0
end
wait_until("a waiting one takes the freed slot", function()
  return deploying_or_later(back) or deploying_or_later(older)
end, 30)
expect(deploying_or_later(back) and not deploying_or_later(older),
  "the rollback, created later, takes the freed slot first",
  ("rollback %s, release %s (%s)"):format(back:status(), older:status(), older:message()))
expect(held(older), "... and the older release still waits for a slot", older:message())
sql("UPDATE sim_job SET ready_at = NOW(6) WHERE pipeline_id = ? AND kind = 'rollout'", holders[2].id)
expect(holders[2]:wait("SUCCEEDED", 30), holders[2].app .. " went live")
wait_until("both waiting ones go live", function()
  return older:status() == "SUCCEEDED" and back:status() == "SUCCEEDED"
end, 60)
