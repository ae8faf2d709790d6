-- The watch ring (issue 24): each server waits in GET_LOCK on the next live
-- server's name lock, so the database wakes an heir the moment a server's
-- lock session ends, and the heir takes its pipelines at once, whatever the
-- scan interval. The scan here ticks every 8 s; every takeover below must
-- happen well within one tick (WITHIN seconds: a bound far below the tick,
-- far above the milliseconds the mechanism takes), for each way a session
-- ends: SIGKILL, a cut lock session (KILL CONNECTION), a freeze past the
-- session timeout, a server stopped for good; and with a server joining the
-- ring meanwhile. Nothing is submitted twice; the end checks prove the rest
-- (no status left twice, no transition by a server that had lost it).
local SLOW = [[
scan    { interval = "8s" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "10m", deploy = "0s", rollout = "300ms" }
]]
local FAST = [[
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "10m", deploy = "0s", rollout = "300ms" }
]]
local WITHIN = 4

local all = servers { count = 4, policy = SLOW }
local ps = {}
for i = 1, 16 do ps[i] = create { app = "ring/r" .. i, env = "prod" } end
-- Bounds, not timings: under the sanitizers, beside the fleet test's 60
-- servers, the first build of an 8 s scan took 54 s once.
local BUILDS_WITHIN = 120
for _, p in ipairs(ps) do expect(p:wait("RUNNING", BUILDS_WITHIN), p.app .. " builds") end

-- The busiest server still up (it holds the most pipelines).
local function busiest(up)
  local best, most = nil, -1
  for _, s in ipairs(up) do
    local n = #held_by(ps, s.name)
    if n > most then best, most = s, n end
  end
  return best
end

local everyone = { table.unpack(all) } -- every server started, for a failure's report

-- Who holds what, and who took over when: what CI keeps of a failure.
local function report(victim, mine)
  for _, p in ipairs(mine) do
    local r = sql("SELECT IS_USED_LOCK(CONCAT(?, ?)) AS c", oops.locks.names.pipeline_prefix, p.id)[1]
    note(("  %s held by %s (lock session %s)"):format(p.id, tostring(p:driver()), tostring(r and r.c)))
  end
  for _, r in ipairs(sql("SELECT name, lock_connection_id AS row_session, IS_USED_LOCK(CONCAT(?, name)) AS " ..
      "name_session FROM server ORDER BY name", oops.locks.names.server_prefix)) do
    note(("  server %s: row names session %s, its name lock is held by %s"):format(r.name,
      tostring(r.row_session), tostring(r.name_session)))
  end
  for _, s in ipairs(everyone) do
    for line in (s:log() or ""):gmatch("[^\n]*taking over: " .. victim.name .. " is gone[^\n]*") do note(line) end
    for line in (s:log() or ""):gmatch("[^\n]*lock session [lr]e?[a-z]*[^\n]*") do note(line) end
    for line in (s:log() or ""):gmatch("[^\n]*stopp[^\n]*") do note(line) end
  end
end

-- After `fault` on victim: every pipeline it held is held by a live server
-- other than victim within WITHIN seconds.
local function taken_within(victim, fault, why)
  local mine = held_by(ps, victim.name)
  expect(#mine > 0, victim.name .. " holds pipelines before it is " .. why, tostring(#mine))
  local t0 = oops.time()
  fault()
  local ok = wait_until(victim.name .. "'s pipelines are held by others (" .. why .. ")", function()
    return held_elsewhere(mine, victim.name)
  end, math.max(0.1, WITHIN - (oops.time() - t0))) -- from the fault: stop() waits for the exit
  if ok then
    note(("%s: held again %.2fs after the fault (scan tick 8s)"):format(why, oops.time() - t0))
  else
    report(victim, mine)
  end
end

local up = { all[1], all[2], all[3], all[4] }
local function drop(s)
  for i, x in ipairs(up) do if x == s then table.remove(up, i) return end end
end

-- SIGKILL: the socket closes, the database frees the session's locks.
local v = busiest(up)
taken_within(v, function() v:kill("KILL") end, "SIGKILLed")
drop(v)
local gone = { v } -- servers gone for good: each taken over once, then left out of the ring

-- A server joins while the ring runs: it watches and is watched.
local joined = servers { names = { "s5" }, policy = SLOW }[1]
everyone[#everyone + 1] = joined
up[#up + 1] = joined
for i = 17, 20 do ps[i] = create { app = "ring/r" .. i, env = "prod" } end
for i = 17, 20 do expect(ps[i]:wait("RUNNING", BUILDS_WITHIN), ps[i].app .. " builds") end

-- A cut lock session: the server lives on, reconnects, and must not drive
-- what it lost (fenced: the end checks).
v = busiest(up)
taken_within(v, function() v:cut() end, "cut")

-- A freeze past the session timeout (3 validation intervals: 3 s): the
-- database reaps the session, the heir wakes.
v = busiest(up)
local frozen = v
local frozen_session = server_session(v.name)
local t_freeze = oops.time()
local mine = held_by(ps, v.name)
v:freeze()
local ok = wait_until(v.name .. "'s pipelines are held by others (frozen)", function()
  return held_elsewhere(mine, v.name)
end, 3 + WITHIN + 2)
if ok then
  note(("frozen: held again %.2fs after SIGSTOP (session timeout 3s)"):format(oops.time() - t_freeze))
else
  report(v, mine)
end
frozen:thaw()
-- One fault at a time: the thawed server may have been frozen inside a
-- transaction of its work connection, whose row locks hold up other servers'
-- steps (and so a stopping server's drain) until it runs again. The next
-- fault waits until it is back: its name lock held under a new session.
wait_until(frozen.name .. " is back after the thaw (its name lock under a new session)", function()
  local now = server_session(frozen.name)
  return now ~= nil and now ~= frozen_session
end, 10)

-- A server stopped for good (SIGTERM: it releases every lock as it goes).
v = busiest(up)
taken_within(v, function() v:stop() end, "stopped")
drop(v)
gone[#gone + 1] = v

-- The heir that won a gone server's name lock takes over once and watches
-- the next live server from then on: it must not win the same free name
-- lock again at every round (a takeover storm: every free pipeline taken
-- anew, a statement storm and pool connections, tens of times a second).
sleep(3)
for _, g in ipairs(gone) do
  local n = 0
  for _, s in ipairs(all) do
    for _ in (s:log() or ""):gmatch("taking over: " .. g.name .. " is gone") do n = n + 1 end
  end
  if joined then
    for _ in (joined:log() or ""):gmatch("taking over: " .. g.name .. " is gone") do n = n + 1 end
  end
  expect(n == 1, g.name .. " (gone for good) was taken over once", n .. " takeovers logged")
end

-- Then finish everything fast: every build completes, every pipeline succeeds.
for _, s in ipairs(up) do if s:alive() then s:reload(FAST) end end
sql("UPDATE sim_job SET ready_at = NOW(6) WHERE kind = 'build'")
for _, p in ipairs(ps) do expect(p:wait("SUCCEEDED", BUILDS_WITHIN), p.app .. " succeeds") end
for _, p in ipairs(ps) do
  expect(p:calls("build_submit") == 1, p.app .. ": its build was submitted once", tostring(p:calls("build_submit")))
end
