-- needs: own database
-- The watch ring through a database restart (issue 24): every session dies,
-- the waiting ones too. The servers reconnect (lock sessions with backoff,
-- their own connections at the next watch), re-take what they drove, and the
-- ring watches again: a server SIGKILLed after the restart is taken over
-- within WITHIN seconds though the scan ticks every 8 s. Nothing happens twice.
local SLOW = [[
scan    { interval = "8s" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "10m", deploy = "0s", rollout = "300ms" }
]]
local WITHIN = 4

local all = servers { count = 3, policy = SLOW }
local ps = {}
for i = 1, 9 do ps[i] = create { app = "ringdb/r" .. i, env = "prod" } end
for _, p in ipairs(ps) do expect(p:wait("RUNNING", 120), p.app .. " builds") end

restart_database { down = 2 }
wait_until("every pipeline is held again after the restart", function()
  for _, p in ipairs(ps) do if not p:driver() then return false end end
  return true
end, 60)

-- The busiest server: kill it; its pipelines must come back within WITHIN.
local victim, most = nil, -1
for _, s in ipairs(all) do
  local n = 0
  for _, p in ipairs(ps) do if p:driver() == s.name then n = n + 1 end end
  if n > most then victim, most = s, n end
end
local mine = {}
for _, p in ipairs(ps) do if p:driver() == victim.name then mine[#mine + 1] = p end end
expect(#mine > 0, victim.name .. " holds pipelines after the restart", tostring(#mine))
-- The watch statements must be waiting again: give every server one tick to re-arm.
sleep(9)
local t0 = oops.time()
victim:kill("KILL")
if wait_until(victim.name .. "'s pipelines are held by the others", function()
  for _, p in ipairs(mine) do
    local d = p:driver()
    if d == nil or d == victim.name then return false end
  end
  return true
end, WITHIN) then
  note(("after the restart, a SIGKILLed server's pipelines held again in %.2fs (scan tick 8s)"):format(
    oops.time() - t0))
end

for _, s in ipairs(all) do if s:alive() then s:reload(SLOW:gsub('"8s"', '"300ms"')) end end
sql("UPDATE sim_job SET ready_at = NOW(6) WHERE kind = 'build'")
for _, p in ipairs(ps) do expect(p:wait("SUCCEEDED", 60), p.app .. " succeeds") end
for _, p in ipairs(ps) do
  expect(p:calls("build_submit") == 1, p.app .. ": its build was submitted once", tostring(p:calls("build_submit")))
end
