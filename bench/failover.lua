-- needs: own database
-- needs: network namespaces
-- bench/run's failover measurement, run as `oopsctl scenario bench/failover.lua`
-- (a scenario, so the end checks still prove nothing happened twice; but
-- nothing here asserts a time: the times go to a JSON file).
--
--   BENCH_FAULT    kill | cut | freeze | partition
--   BENCH_SAMPLES  rounds per kind of lock session (default 3)
--   BENCH_BOUND    seconds to wait for a takeover before calling it "not
--                  within" (default 60); other waits are bounded by 30 s
--   BENCH_OUT      where the JSON goes
--
-- Two kinds of lock session side by side, in the same run, on the same
-- database: "short" servers (a1, a2, ...) run the bench policy, whose lock
-- session is reaped 3 s after its host goes silent (locks { validate_every =
-- "1s" }: wait_timeout = 3 × 1 s); "server" servers (d1, d2, ...) add
-- locks { session_timeout = "server" }, which leaves the database server's
-- own wait_timeout (28800 s unless configured). Two more servers (t1, t2)
-- only take over.
--
-- A round: create pipelines whose builds are held (the build status call
-- fails, a transient error) until each victim drives at least two of them;
-- then the fault on the victims, at once release the builds, and measure for
-- each victim's pipeline the time from the fault to the first transition by
-- another server (pipeline_event, the database's clock). Then undo the fault
-- (restart, thaw, heal; a stale session left by a partition of a "server"
-- victim is killed by the bench) and let every pipeline finish.
local json = require("oops.json")

local FAULT = os.getenv("BENCH_FAULT") or "kill"
local SAMPLES = tonumber(os.getenv("BENCH_SAMPLES") or "") or 3
local BOUND = tonumber(os.getenv("BENCH_BOUND") or "") or 60
local OUT = os.getenv("BENCH_OUT")
local INTERVAL_S, SESSION_TIMEOUT_S = 0.5, 3

local KNOWN = { kill = true, cut = true, freeze = true, partition = true }
assert(KNOWN[FAULT], "BENCH_FAULT: one of kill, cut, freeze, partition")

local function write_out(doc)
  if OUT then require("oops.scenario.files").write(OUT, json.encode(doc) .. "\n") end
end

local SHORT = [[
scan    { interval = "500ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "1s", deploy = "0s", rollout = "0s" }
]]
local SERVER_DEFAULT = [[
scan    { interval = "500ms" }
locks   { validate_every = "1s", session_timeout = "server" }
gateway "simulated" { build = "1s", deploy = "0s", rollout = "0s" }
]]

local netns
if FAULT == "partition" then
  local N = require("oops.scenario.netns")
  local available, why = N.available()
  if not available then
    write_out { fault = FAULT, skipped = "network namespaces unavailable: " .. tostring(why) }
    skip("network namespaces unavailable: " .. tostring(why))
    return
  end
  netns = true
end

local function names(prefix, k)
  local t = {}
  for i = 1, k do t[i] = prefix .. i end
  return t
end

servers { names = { "t1", "t2" }, policy = SHORT }
servers { names = names("a", SAMPLES), policy = SHORT, netns = netns }
local concurrent = FAULT == "freeze" or FAULT == "partition" -- "server" victims: one bounded wait for all
servers { names = names("d", SAMPLES), policy = SERVER_DEFAULT, netns = netns }

local function db_now() return tonumber(sql("SELECT UNIX_TIMESTAMP(NOW(6)) AS t")[1].t) end
local server_wait = tonumber(sql("SELECT @@global.wait_timeout AS w")[1].w)

local function live_count()
  return tonumber(sql([[SELECT COUNT(*) AS n FROM server
    WHERE IS_USED_LOCK(CONCAT(?, name)) IS NOT NULL]], oops.locks.names.server_prefix)[1].n)
end

local function session_of(name)
  local r = sql("SELECT lock_connection_id AS c FROM server WHERE name = ?", name)[1]
  return r and tonumber(r.c)
end

local function server_lock_on_new_session(name, old)
  local r = sql("SELECT IS_USED_LOCK(CONCAT(?, ?)) AS c", oops.locks.names.server_prefix, name)[1]
  local c = r and tonumber(r.c)
  return c ~= nil and c ~= old
end

local seq = 0
local rounds = {}

local function round(kind, victims, bound)
  local is_victim = {}
  for _, v in ipairs(victims) do is_victim[v] = true end
  -- Pipelines held RUNNING until each victim drives two of them.
  local ps, targets = {}, {}
  local mine
  for _ = 1, 6 do
    local batch = {}
    for _ = 1, live_count() do
      seq = seq + 1
      local app = ("bench/f%d"):format(seq)
      fault(app .. "/prod", "build_status", "held by the bench")
      targets[#targets + 1] = app .. "/prod"
      local p = create { app = app, env = "prod" }
      ps[#ps + 1], batch[#batch + 1] = p, p
    end
    wait_until(("round %d: the new pipelines run, each with a driver"):format(#rounds + 1), function()
      for _, p in ipairs(batch) do
        if p:status() ~= "RUNNING" or not p:driver() then return false end
      end
      return true
    end, 30)
    mine = {}
    for _, v in ipairs(victims) do mine[v] = {} end
    for _, p in ipairs(ps) do
      local d = p:driver()
      if d and is_victim[d] then table.insert(mine[d], p) end
    end
    local enough = true
    for _, v in ipairs(victims) do if #mine[v] < 2 then enough = false end end
    if enough then break end
  end

  local sessions = {}
  for _, v in ipairs(victims) do sessions[v] = session_of(v) end
  local at = db_now()
  for _, v in ipairs(victims) do
    local s = server(v)
    if FAULT == "kill" then s:kill("KILL")
    elseif FAULT == "cut" then s:cut()
    elseif FAULT == "freeze" then s:freeze()
    else s:partition() end
  end
  for _, t in ipairs(targets) do clear_fault(t, "build_status") end

  -- Each victim pipeline's first transition by another server after the fault.
  local lat, pending = {}, 0
  for _, v in ipairs(victims) do
    lat[v] = {}
    pending = pending + #mine[v]
  end
  local deadline = oops.now_ms() + bound * 1000
  while pending > 0 and oops.now_ms() < deadline do
    for _, v in ipairs(victims) do
      for i, p in ipairs(mine[v]) do
        if lat[v][i] == nil then
          local r = sql([[SELECT MIN(UNIX_TIMESTAMP(created_at)) AS t FROM pipeline_event
            WHERE pipeline_id = ? AND server <> ? AND server NOT LIKE 'oopsctl@%'
              AND UNIX_TIMESTAMP(created_at) >= ?]], p.id, v, at)[1]
          if r and r.t then
            lat[v][i] = tonumber(r.t) - at
            pending = pending - 1
          end
        end
      end
    end
    sleep(0.1)
  end
  local waited = db_now() - at

  -- Undo the fault and let everything finish.
  for _, v in ipairs(victims) do
    local s = server(v)
    if FAULT == "kill" then s:start()
    elseif FAULT == "freeze" then s:thaw()
    elseif FAULT == "partition" then
      s:heal()
      -- A session the database was never told about (its wait_timeout not
      -- reached): the bench ends it so the victim's pipelines can move on.
      local done, err, code = oops.db.exec("KILL CONNECTION ?", sessions[v])
      if not done and code ~= "not_found" then note("killing " .. v .. "'s stale session: " .. tostring(err)) end
    end
  end
  for _, v in ipairs(victims) do
    if FAULT ~= "freeze" then
      wait_until(v .. " holds its server lock on a new lock session", function()
        return server_lock_on_new_session(v, sessions[v])
      end, 60)
    end
  end
  for _, p in ipairs(ps) do
    if not p:wait("SUCCEEDED", 60) then expect(false, p.id .. " succeeds after the round", p:status()) end
  end

  for _, v in ipairs(victims) do
    local r = { kind = kind, victim = v, pipelines = #mine[v], latencies = {}, censored = 0, waited = waited }
    for i = 1, #mine[v] do
      if lat[v][i] then r.latencies[#r.latencies + 1] = lat[v][i] else r.censored = r.censored + 1 end
    end
    rounds[#rounds + 1] = r
    note(("%s %s (%s session): %d pipeline(s), taken after %s"):format(FAULT, v, kind, #mine[v],
      #r.latencies > 0 and table.concat((function()
        local t = {}
        for i, x in ipairs(r.latencies) do t[i] = ("%.2fs"):format(x) end
        return t
      end)(), ", ") or "-") .. (r.censored > 0 and (", %d not within %ds"):format(r.censored, bound) or ""))
  end
end

for i = 1, SAMPLES do round("short", { "a" .. i }, 30) end
if concurrent then
  round("server", names("d", SAMPLES), BOUND)
else
  for i = 1, SAMPLES do round("server", { "d" .. i }, 30) end
end

write_out {
  fault = FAULT, interval_s = INTERVAL_S, session_timeout_s = SESSION_TIMEOUT_S,
  server_wait_timeout_s = server_wait, bound_s = BOUND, rounds = rounds,
}
