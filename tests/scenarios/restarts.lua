-- Scheduled restarts, each occurrence exactly once across servers: a cron
-- with a seconds field (every 2 s) so the test need not wait minutes; the
-- leader SIGKILLed right after firing; the leader frozen (SIGSTOP) past its
-- session's timeout and then resumed.
local names = require("oops").locks.names
local POLICY = [[
scan    { interval = "500ms" }
locks   { validate_every = "1s" }    -- the lock session's wait_timeout is then 3s
restarts { timezone = "UTC", grace = "10s" }
gateway "simulated" {}
application "shop/api" {
  environments = { "prod", "staging" },
  restart = { prod = "*/2 * * * * *", staging = "*/2 * * * * *" },
}
]]
servers { count = 3, policy = POLICY }

local function leader()
  local r = sql([[SELECT s.name FROM server s WHERE s.lock_connection_id = IS_USED_LOCK(?)]], names.leaders.restart)
  return r[1] and r[1].name
end

local function fired() -- occurrences claimed to fire (not recorded missed), per target
  return sql("SELECT COUNT(*) AS n FROM restart_run WHERE outcome IS NULL OR outcome <> 'missed'")[1].n
end

-- Every claimed occurrence got its outcome (none pending forever), each made
-- one restart call -- except those closed "unknown" because their server died
-- during the call, which made at most one -- and none was fired twice.
local function once(desc)
  wait_until(desc .. ": every claimed occurrence has its outcome", function()
    return sql("SELECT COUNT(*) AS n FROM restart_run WHERE finished_at IS NULL")[1].n == 0
  end, 10)
  -- One snapshot (one statement): restarts go on firing every 2 s, and a
  -- claim made between two statements would be counted in one and not the
  -- other; a claim in flight (no outcome yet) may or may not have called.
  local now = sql([[SELECT (SELECT COUNT(*) FROM restart_run WHERE outcome IS NULL OR outcome <> 'missed') AS f,
    (SELECT COUNT(*) FROM restart_run WHERE outcome IS NULL OR outcome LIKE 'unknown:%') AS u,
    (SELECT COUNT(*) FROM sim_call WHERE action = 'restart') AS c]])[1]
  local f, u, c = tonumber(now.f), tonumber(now.u), tonumber(now.c)
  expect(c >= f - u and c <= f, desc .. ": one restart call per fired occurrence",
    ("%d occurrences (%d of them unknown or in flight), %d calls"):format(f, u, c))
  local per = sql([[SELECT environment, COUNT(*) AS n, COUNT(DISTINCT occurrence) AS d,
    UNIX_TIMESTAMP(MAX(occurrence)) - UNIX_TIMESTAMP(MIN(occurrence)) AS span
    FROM restart_run WHERE outcome <> 'missed' GROUP BY environment ORDER BY environment]])
  for _, r in ipairs(per) do
    -- No gap: from the first to the last, every 2 s occurrence is there.
    expect(r.n == r.d and r.span == (r.n - 1) * 2, desc .. ": " .. r.environment ..
      " fired every occurrence once, without a gap",
      ("%d rows, %d distinct, span %ss"):format(r.n, r.d, tostring(r.span)))
  end
end

wait_until("a server leads the restarts", function() return leader() ~= nil end, 10)
wait_until("restarts fire", function() return fired() >= 6 end, 20)
local first = leader()
local by = sql("SELECT DISTINCT fired_by FROM restart_run")
expect(#by == 1 and by[1].fired_by == first, "only the leader fires", #by .. " firing server(s)")
-- (fired() counts claims: an outcome is recorded when its call ends, later
-- on a loaded machine)
wait_until("outcomes are recorded (ok)", function()
  return sql("SELECT COUNT(*) AS n FROM restart_run WHERE outcome = 'ok'")[1].n >= 5
end, 20)
once("steady")

-- Two claims left by a server that is gone ("ghost") for an occurrence 2-4 s
-- ahead: one it never started (a leader taking over fires it late), one it
-- started (closed "unknown", not fired again: the call may have gone out).
local ghost_t = sql("SELECT (FLOOR(UNIX_TIMESTAMP(NOW()) / 2) + 2) * 2 AS t")[1].t
sql([[INSERT INTO restart_run (namespace, application, environment, occurrence, fired_by)
  VALUES ('shop', 'api', 'prod', FROM_UNIXTIME(?), 'ghost')]], ghost_t)
sql([[INSERT INTO restart_run (namespace, application, environment, occurrence, fired_by, started_at)
  VALUES ('shop', 'api', 'staging', FROM_UNIXTIME(?), 'ghost', NOW(6))]], ghost_t)
wait_until("the ghost's occurrence is due", function()
  return sql("SELECT UNIX_TIMESTAMP(NOW()) > ? + 0.5 AS due", ghost_t)[1].due == 1
end, 10)

-- The leader SIGKILLed right after it fired.
local before = fired()
wait_until("the leader fires again", function() return fired() > before end, 10)
server(first):kill("KILL")
wait_until("another server takes the lead", function() local l = leader(); return l and l ~= first end, 15)
local second = leader()
local after = fired()
wait_until("... and fires", function() return fired() >= after + 4 end, 20)
once("after SIGKILL of the leader")
local function at(env)
  return sql("SELECT fired_by, outcome FROM restart_run WHERE environment = ? AND occurrence = FROM_UNIXTIME(?)",
    env, ghost_t)[1] or {}
end
local gp, gs = at("prod"), at("staging")
expect(gp.fired_by ~= "ghost" and gp.outcome == "ok",
  "a claim left unstarted by a server that is gone is taken over and fired late",
  ("fired_by %s, outcome %s"):format(tostring(gp.fired_by), tostring(gp.outcome)))
expect(gs.fired_by == "ghost" and tostring(gs.outcome):find("^unknown: ghost stopped") ~= nil,
  "a claim left started by a server that is gone is closed unknown, not fired again",
  ("fired_by %s, outcome %s"):format(tostring(gs.fired_by), tostring(gs.outcome)))

-- The leader frozen past its session's timeout, then resumed: while it is
-- frozen another server leads; the resumed one must not fire anything again.
server(second):kill("STOP")
wait_until("while the leader is frozen, a third server leads", function()
  local l = leader(); return l and l ~= second
end, 20)
local third = leader()
local during = fired()
wait_until("... and fires", function() return fired() >= during + 4 end, 20)
server(second):kill("CONT")
sleep(4)
once("after SIGSTOP and SIGCONT of the leader")
expect(server(second):log():find("lock session lost", 1, true) ~= nil,
  "the resumed server noticed its lock session was gone")
expect(leader() == third, "the lead stays with the server that took it", tostring(leader()))

-- Restarts of one tick run side by side: a slow target delays no other.
sql("INSERT INTO sim_job (pipeline_id, kind, outcome) VALUES ('shop/api/staging', 'slow_restart', '3000')")
local slow_at
wait_until("a slow restart (staging, 3s) completes", function()
  local r = sql([[SELECT UNIX_TIMESTAMP(occurrence) AS t FROM restart_run WHERE environment = 'staging'
    AND finished_at >= fired_at + INTERVAL 2500000 MICROSECOND ORDER BY occurrence LIMIT 1]])[1]
  slow_at = r and r.t
  return slow_at ~= nil
end, 15)
sql("DELETE FROM sim_job WHERE kind = 'slow_restart'")
local prod = sql([[SELECT TIMESTAMPDIFF(MICROSECOND, fired_at, finished_at) / 1e6 AS took FROM restart_run
  WHERE environment = 'prod' AND UNIX_TIMESTAMP(occurrence) = ?]], slow_at or 0)[1]
expect(prod and prod.took < 1, "... while the other restart of the same second (prod) finished at once",
  prod and ("prod took %.2fs"):format(prod.took) or "no prod row")

-- A failing target: the error's text is the outcome.
sql("INSERT INTO sim_job (pipeline_id, kind, outcome) VALUES ('shop/api/prod', 'fail_restart', 'cluster unreachable')")
wait_until("a failed restart records the error's text", function()
  return sql("SELECT COUNT(*) AS n FROM restart_run WHERE outcome = 'cluster unreachable'")[1].n > 0
end, 10)
sql("DELETE FROM sim_job WHERE kind = 'fail_restart'")
