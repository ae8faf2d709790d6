-- Stops racing the engine (REFERENCE.md 12.3, 12.4): operators stop
-- pipelines at every moment of their life, some exactly while they deploy,
-- some in the same instant a manual deploy is requested. A stop is a
-- conditional update: it either counts or says the state changed (exit 3);
-- a stopped pipeline is never deployed or announced as rolling out after it.
servers { count = 3, policy = [[
scan    { interval = "200ms" }
gateway "simulated" { build = "1s", deploy = "1s", rollout = "300ms" }
]] }

local seed = os.time()
math.randomseed(seed)
note("random stop times, seed " .. seed)

local codes = {}
local function stop(p)
  local code, _, err = p:stop()
  codes[#codes + 1] = { p = p, code = code, err = err }
end

-- 1. Stopped at a random moment of their life (0-3 s after create).
local random = {}
for i = 1, 12 do random[i] = { p = create { app = "shop/r" .. i, env = "prod" }, at = math.random() * 3 } end
table.sort(random, function(a, b) return a.at < b.at end)
local t0 = oops.time()
for _, r in ipairs(random) do
  local wait = r.at - (oops.time() - t0)
  if wait > 0 then sleep(wait) end
  stop(r.p)
end

-- 2. Stopped exactly while deploying (the deploy takes 1 s).
local deploying = {}
for i = 1, 4 do
  local p = create { app = "shop/d" .. i, env = "prod" }
  deploying[i] = p
  expect(p:wait("DEPLOYING", 20), p.app .. " deploys")
  stop(p)
end

-- 3. A manual deploy requested and stopped in the same instant.
local manual = {}
for i = 1, 4 do manual[i] = create { app = "shop/m" .. i, env = "prod", manual = true } end
for _, p in ipairs(manual) do expect(p:wait("BUILD_SUCCEEDED", 20), p.app .. " waits for its deploy") end
for _, p in ipairs(manual) do
  p:deploy()
  stop(p)
end

local all = {}
for _, r in ipairs(random) do all[#all + 1] = r.p end
for _, p in ipairs(deploying) do all[#all + 1] = p end
for _, p in ipairs(manual) do all[#all + 1] = p end
for _, p in ipairs(all) do
  expect(p:wait({ "STOPPED", "SUCCEEDED", "ERROR" }, 30), p.app .. " finishes")
end

local bad_codes = {}
for _, c in ipairs(codes) do
  if c.code ~= 0 and c.code ~= 3 and c.code ~= 1 then bad_codes[#bad_codes + 1] = c.p.app .. ": " .. c.code end
  if c.code == 1 and not (c.err:find("already finished", 1, true) or c.err:find("cannot be stopped", 1, true)) then
    bad_codes[#bad_codes + 1] = c.p.app .. ": " .. c.err
  end
end
expect(#bad_codes == 0, "every stop counted (0), found the state changed (3) or the pipeline past stopping (1)",
  table.concat(bad_codes, "; "))

local stopped, from = 0, {}
for _, p in ipairs(all) do
  local ev = p:events()
  local last = ev[#ev]
  if p:status() == "STOPPED" then
    stopped = stopped + 1
    local s = ev[#ev]
    from[s.from_status] = (from[s.from_status] or 0) + 1
    expect(last.to_status == "STOPPED", p.app .. ": nothing happened after its stop")
    -- Stopped before its deploy was claimed: never deployed. Stopped while
    -- DEPLOYING: the deploy the claim began, once (its call row is written
    -- through a batch, so its time may follow the stop's on a busy machine).
    local calls = tonumber(sql("SELECT COUNT(*) AS n FROM sim_call WHERE pipeline_id = ? AND action = 'deploy'",
      p.id)[1].n)
    local claimed = s.from_status == "DEPLOYING" or s.from_status == "ROLLING_OUT"
    expect(calls == 0 or (claimed and calls == 1), p.app .. ": no deploy after its stop",
      ("%d deploy calls, stopped from %s"):format(calls, tostring(s.from_status)))
    local rolled = sql("SELECT COUNT(*) AS n FROM pipeline_event WHERE pipeline_id = ? AND to_status = 'ROLLING_OUT'",
      p.id)[1].n
    expect(rolled == 0 or s.from_status == "ROLLING_OUT", p.app .. ": never announced as rolling out once stopped")
  end
end
for _, p in ipairs(deploying) do
  expect(p:status() == "STOPPED", p.app .. ": stopped while deploying, it stays stopped (12.3)", p:status())
end
local parts = {}
for k, v in pairs(from) do parts[#parts + 1] = k .. " " .. v end
table.sort(parts)
note(("%d of %d pipelines stopped, from: %s"):format(stopped, #all, table.concat(parts, ", ")))
