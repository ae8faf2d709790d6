-- Rule 7 (the sweep and stop handling) and rule 3's lost claim: a pipeline
-- stopped while it deploys is not announced as rolling out.
local names = require("oops").locks.names
servers { count = 2, policy = [[
scan    { interval = "300ms" }
gateway "simulated" { build = "2s", deploy = "2s", rollout = "300ms" }
]] }

-- Who held a pipeline's lock at the moment each simulated gateway call was
-- recorded: a trigger reads IS_USED_LOCK in the same statement as the call.
-- (A trigger's body takes no parameters: the prefix is written out, and
-- checked against the binding's.)
assert(names.pipeline_prefix == "oops:pipeline:", "the trigger below names the pipeline lock prefix")
sql("CREATE TABLE lock_at_call (pipeline_id VARCHAR(64), action VARCHAR(32), holder BIGINT NULL)")
sql([[CREATE TRIGGER lock_at_call AFTER INSERT ON sim_call FOR EACH ROW
  INSERT INTO lock_at_call VALUES (NEW.pipeline_id, NEW.action,
    IS_USED_LOCK(CONCAT('oops:pipeline:', NEW.pipeline_id)))]])

local function lock_owner(p)
  return sql("SELECT COALESCE(IS_USED_LOCK(CONCAT(?, ?)), 0) AS c", names.pipeline_prefix, p.id)[1].c
end

-- Stopping a RUNNING pipeline: its driver stops the build job, then releases the lock.
local run = create { app = "shop/run", env = "prod" }
expect(run:wait("RUNNING", 20), "a build starts")
wait_until("... and its job exists", function()
  return sql("SELECT COUNT(*) AS n FROM sim_job WHERE pipeline_id = ? AND kind = 'build'", run.id)[1].n == 1
end, 10)
local driver = run:driver()
expect(driver ~= nil, "one server holds its lock", tostring(driver))
local code = run:stop()
expect(code == 0 and run:status() == "STOPPED", "oopsctl stop stops it")
wait_until("the driver stops the build job", function() return run:calls("build_stop") == 1 end, 10)
local stopper = sql("SELECT server FROM sim_call WHERE pipeline_id = ? AND action = 'build_stop'", run.id)[1].server
expect(stopper == driver, "... it is the server that drove it", stopper .. " vs " .. tostring(driver))
wait_until("... then releases the lock", function() return lock_owner(run) == 0 end, 10)
local at_stop = sql("SELECT holder FROM lock_at_call WHERE pipeline_id = ? AND action = 'build_stop'", run.id)[1]
local session = sql("SELECT lock_connection_id AS c FROM server WHERE name = ?", driver)[1].c
expect(at_stop and at_stop.holder ~= nil and at_stop.holder == session,
  "the build was stopped before the lock was let go (its driver's session held it at the call)",
  ("holder %s, driver's session %s"):format(tostring(at_stop and at_stop.holder), tostring(session)))
expect(sql("SELECT outcome FROM sim_job WHERE pipeline_id = ? AND kind = 'build'", run.id)[1].outcome == "stopped",
  "the simulated job is stopped")
sleep(1)
expect(run:status() == "STOPPED" and #run:events() == 3, "nothing else happens to a stopped pipeline",
  #run:events() .. " events")

-- Stopped while deploying: the DEPLOYING -> ROLLING_OUT claim fails, and
-- nothing is announced (the original announced ROLLING_OUT anyway).
local dep = create { app = "shop/dep", env = "prod" }
expect(dep:wait("DEPLOYING", 20), "another pipeline reaches DEPLOYING (a 2s deploy)")
expect(dep:stop("DEPLOYING") == 0, "it is stopped mid-deploy")
sleep(3)
local types = {}
for _, e in ipairs(dep:events()) do types[#types + 1] = e.event_type end
expect(table.concat(types, " ") == "CREATED BUILDING DEPLOYING STOPPED",
  "the lost claim announced nothing: no ROLLING_OUT", table.concat(types, " "))
expect(dep:status() == "STOPPED", "... and it stays STOPPED")
wait_until("... and its lock is released", function() return lock_owner(dep) == 0 end, 10)

-- A finished pipeline's lock is swept.
local done = create { app = "shop/done", env = "prod" }
expect(done:wait("SUCCEEDED", 30), "a third pipeline succeeds")
wait_until("... and its lock is released by the sweep", function() return lock_owner(done) == 0 end, 10)

-- A stale stop changes nothing.
local late = create { app = "shop/late", env = "prod" }
expect(late:wait("RUNNING", 20), "a fourth pipeline runs")
expect(late:stop("INITIALIZED") == 3, "a stop from a stale read exits 3")
expect(late:status() ~= "STOPPED", "... and changes nothing")
