-- A lock session cut while its server validates it only once a minute: for
-- up to a minute the server believes it holds locks the database gave to
-- others. It must learn from the database instead (the scan reads each
-- lock's owner; its transitions are fenced by its session) and leave those
-- pipelines alone: no transition by a server that lost the pipeline.
local all = servers { count = 2, policy = [[
scan    { interval = "300ms" }
locks   { validate_every = "1m" }
gateway "simulated" { build = "1s", deploy = "300ms", rollout = "300ms" }
]] }

local ps = {}
for i = 1, 6 do
  ps[i] = create { app = "shop/u" .. i, env = "prod" }
  fault("shop/u" .. i .. "/prod", "build_status", "held by the scenario")
end
for _, p in ipairs(ps) do expect(p:wait("RUNNING", 20), p.app .. " runs") end
wait_until("every pipeline has a driver", function()
  for _, p in ipairs(ps) do if not p:driver() then return false end end
  return true
end, 10)
local victim = ps[1]:driver()
local other = victim == all[1].name and all[2].name or all[1].name
local mine = {}
for _, p in ipairs(ps) do if p:driver() == victim then mine[#mine + 1] = p end end
local cut_at = sql("SELECT UNIX_TIMESTAMP(NOW(6)) AS t")[1].t
server(victim):cut()
wait_until(other .. " takes every pipeline of " .. victim, function()
  for _, p in ipairs(mine) do if p:driver() ~= other then return false end end
  return true
end, 10)
for i = 1, 6 do clear_fault("shop/u" .. i .. "/prod", "build_status") end
for _, p in ipairs(ps) do expect(p:wait("SUCCEEDED", 20), p.app .. " succeeds") end

local late = sql("SELECT COUNT(*) AS n FROM pipeline_event WHERE server = ? AND UNIX_TIMESTAMP(created_at) > ?",
  victim, cut_at)[1].n
expect(late == 0, victim .. " made no transition after its session was cut", late .. " transitions")
for _, p in ipairs(mine) do
  expect(p:calls("build_submit") == 1 and p:calls("deploy") == 1, p.app .. ": built once, deployed once",
    ("%d submits, %d deploys"):format(p:calls("build_submit"), p:calls("deploy")))
end
-- It learns either way from the database: a scan reads the locks' owners
-- ("not ours any more"), or its next GET_LOCK fails on the dead session
-- ("lock session lost"), whichever comes first.
local log = server(victim):log()
expect(log:find("not ours any more", 1, true) or log:find("lock session lost", 1, true),
  victim .. " says why it leaves them alone")
