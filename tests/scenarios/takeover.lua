-- A driver SIGKILLed mid-build: its lock dies with its session, another
-- server takes the pipeline over and finishes it; the build is not submitted
-- again (the simulated cluster is shared, the job is still there).
servers { count = 3, policy = [[
scan    { interval = "300ms" }
gateway "simulated" { build = "3s", deploy = "0s", rollout = "300ms" }
]] }

local ps = {}
for i = 1, 6 do ps[i] = create { app = "shop/t" .. i, env = "prod" } end
for _, p in ipairs(ps) do expect(p:wait("RUNNING", 20), p.app .. " runs") end
local victim = ps[1]:driver()
expect(victim ~= nil, "the first pipeline has a driver", tostring(victim))
local killed_at = oops.time()
server(victim):kill("KILL")
expect(not server(victim):alive(), victim .. " is dead (SIGKILL)")
local heir
wait_until("another server takes the lock of the victim's pipeline", function()
  heir = ps[1]:driver()
  return heir ~= nil and heir ~= victim
end, 30)
note(("takeover: %s held the lock %.2fs after the SIGKILL (scan interval 0.3s)"):format(
  tostring(heir), oops.time() - killed_at))

for _, p in ipairs(ps) do expect(p:wait("SUCCEEDED", 30), p.app .. " still succeeds") end
local taken = ps[1]:drivers()
expect(#taken == 2 and taken[1] == victim and taken[2] ~= victim,
  "the victim's pipeline was finished by another server", table.concat(taken, ","))
expect(ps[1]:calls("build_submit") == 1, "... without submitting the build again")
local others = 0
for _, p in ipairs(ps) do
  local d = p:drivers()
  if d[1] ~= victim then others = others + (#d == 1 and 1 or 0) end
end
note(others .. " pipeline(s) driven by the survivors alone")
