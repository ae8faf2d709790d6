-- "The lock is not a fence": a driver frozen (SIGSTOP) past its lock
-- session's timeout loses its locks to the database; other servers take its
-- pipelines. Thawed, it still believes it holds them, and the builds it was
-- waiting for have just finished: it tries to move them on at once. Its
-- transitions are fenced by its dead session, so none counts: zero duplicate
-- side effects, and no transition by the server that lost the pipelines.
servers { count = 3, policy = [[
scan    { interval = "300ms" }
locks   { validate_every = "1s" }    -- the lock session's wait_timeout is then 3s
gateway "simulated" { build = "1s", deploy = "300ms", rollout = "300ms" }
]] }

local ps = {}
for i = 1, 9 do
  ps[i] = create { app = "shop/f" .. i, env = "prod" }
  -- Hold every build: status calls fail (transient, retried), so nobody moves on.
  fault("shop/f" .. i .. "/prod", "build_status", "held by the scenario")
end
for _, p in ipairs(ps) do expect(p:wait("RUNNING", 20), p.app .. " runs") end
wait_until("every pipeline has a driver", function()
  for _, p in ipairs(ps) do if not p:driver() then return false end end
  return true
end, 10)

local victim = ps[1]:driver()
local mine = {}
for _, p in ipairs(ps) do if p:driver() == victim then mine[#mine + 1] = p end end
note(("%s drives %d of the 9 pipelines"):format(victim, #mine))
local frozen_at = sql("SELECT UNIX_TIMESTAMP(NOW(6)) AS t")[1].t
server(victim):freeze()

wait_until("while " .. victim .. " is frozen, other servers take every one of its pipelines", function()
  for _, p in ipairs(mine) do
    local d = p:driver()
    if d == nil or d == victim then return false end
  end
  return true
end, 20)

-- The builds finish, and the frozen server wakes up in the same instant.
for i = 1, 9 do clear_fault("shop/f" .. i .. "/prod", "build_status") end
server(victim):thaw()

for _, p in ipairs(ps) do expect(p:wait("SUCCEEDED", 30), p.app .. " succeeds") end
for _, p in ipairs(mine) do
  expect(p:calls("build_submit") == 1 and p:calls("deploy") == 1,
    p.app .. ": built once, deployed once across the freeze",
    ("%d submits, %d deploys"):format(p:calls("build_submit"), p:calls("deploy")))
  local late = sql("SELECT COUNT(*) AS n FROM pipeline_event WHERE pipeline_id = ? AND server = ? " ..
    "AND UNIX_TIMESTAMP(created_at) > ?", p.id, victim, frozen_at)[1].n
  expect(late == 0, p.app .. ": the thawed server made no transition on it", late .. " transitions")
end
wait_until("the thawed server noticed its lock session was gone", function()
  return server(victim):log():find("lock session lost", 1, true) ~= nil
end, 10)
expect(server(victim):alive(), "... and kept running")
