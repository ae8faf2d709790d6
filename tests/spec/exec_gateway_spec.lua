-- The exec gateway's methods, each driven on its own (issue 23): a Gateway
-- made by exec.new from a small policy, real commands from tests/exec/
-- (deploy.sh, health.sh, and ci.sh as the external build system) and the
-- real test database, whose pipeline_log and exec_job rows say what each
-- call did. Deploys: success and failure, each logged with its exit status;
-- a refused argv runs nothing. Health: exit 0 complete, 1 not ready, 2
-- missing, anything else a failure; a verdict logged once while it lasts.
-- External builds: build.status exit 0 succeeded, 1 running, 2 missing, 3
-- failed, anything else an error; cancel once. A policy reload: the new
-- gateway takes over the builds of the one it replaces.
local oops = require("oops")
local exec = require("oops.gateways.exec")
local json = require("oops.json")

local ROOT = assert(os.getenv("OOPS_ROOT"), "OOPS_ROOT is not set: run the specs through tests/run.sh")
local EXEC = ROOT .. "/tests/exec/"
local CI = EXEC .. "ci.sh"
local TAG = ("gw%d"):format(os.time() % 100000)

local dir = os.tmpname() .. ".d" -- EXEC_STATE of deploy.sh and health.sh
local ci_dir = dir .. "/ci"      -- ci.sh's jobs and calls
local env = { EXEC_STATE = dir, CI_DIR = ci_dir, CI_BUILD_SECONDS = "0" }

local function external(status)
  return { external = true, submit = { CI, "submit", "{id}", "{artifact}" },
    status = status or { CI, "status", "{job}" }, cancel = { CI, "cancel", "{job}" } }
end

local policy = {
  gateway = { kind = "exec" },
  applications = {
    -- health.sh: not ready at its first call, then ready; in "gone" missing, in "sick" failing (exit 3).
    [TAG .. "/web"] = {
      build = { "sleep", "60" },
      deploy = { EXEC .. "deploy.sh", "{id}", "{artifact}", "{environment}" },
      health = { EXEC .. "health.sh", "{id}", "{environment}" },
      env = env, timeout_ms = { build = 60000, deploy = 10000, health = 10000 },
    },
    [TAG .. "/never"] = { health = { "false" }, env = env },                                 -- never ready
    [TAG .. "/hang"] = { health = { "sleep", "30" }, env = env, timeout_ms = { health = 200 } }, -- times out
    [TAG .. "/ext"] = { build = external(), env = env },
    [TAG .. "/odd"] = { build = external({ CI, "bogus", "{job}" }), env = env }, -- status exits 64
  },
}

local function sh(...) return oops.wait(function(...) return oops.proc.run { argv = { ... } } end, ...) end

-- A new pipeline of TAG/app in env, as the scans get it.
local function pipeline(app, environment, artifact)
  local id = assert(oops.store.create { namespace = TAG, application = app, environment = environment,
    artifact = artifact or "v1" })
  return assert(oops.store.get(id))
end

-- Call method `name` of gateway g from a task, as the scans do.
local function call(g, name, ...)
  return oops.wait(function(...) return g[name](g, ...) end, ...)
end

local function logs(id)
  return assert(oops.db.exec("SELECT step, argv, exit_status, result, output FROM pipeline_log " ..
    "WHERE pipeline_id = ? ORDER BY id", id))
end

local function job(id)
  return assert(oops.db.exec("SELECT mode, state, exit_status, handle, cancel_state FROM exec_job " ..
    "WHERE pipeline_id = ? AND kind = 'build'", id))[1]
end

-- Lines of ci.sh's log of status calls naming job `handle`.
local function status_calls(handle)
  local f = io.open(ci_dir .. "/calls.status")
  if not f then return 0 end
  local n = 0
  for line in f:lines() do
    if line == "status " .. handle then n = n + 1 end
  end
  f:close()
  return n
end

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

-- Stop every unfinished pipeline of TAG: the next test may create the same target.
local function finish_all()
  assert(oops.db.exec("UPDATE pipeline SET status = 'STOPPED' WHERE namespace = ? " ..
    "AND status IN ('INITIALIZED','RUNNING','BUILD_SUCCEEDED','DEPLOYING','ROLLING_OUT')", TAG))
end

describe("the exec gateway's methods (needs OOPS_TEST_DB)", function()
  local g -- the Gateway under test, new for each test

  setup(function()
    require("support.db").connect()
    assert(sh("mkdir", "-p", ci_dir).ok)
  end)
  teardown(function()
    finish_all()
    sh("rm", "-rf", dir)
  end)
  before_each(function() g = exec.new(policy.gateway, policy).exec end)
  after_each(function()
    finish_all()
    -- Cancel the external builds left running: another spec's rollout scan
    -- (whose policy lacks these applications) is to find no orphan of ours.
    for _, id in ipairs(assert(call(g, "build_orphans", 1000))) do
      local p = assert(oops.store.get(id))
      if p.namespace == TAG then assert(call(g, "build_stop", p)) end
    end
  end)

  describe("deploy", function()
    it("runs the deploy command with the pipeline's fields and logs the run", function()
      local p = pipeline("web", "prod", "v7")
      assert.is_true(call(g, "deploy", p))
      local rows = logs(p.id)
      assert.are.equal(1, #rows)
      assert.are.equal("deploy", rows[1].step)
      assert.are.equal(0, rows[1].exit_status)
      assert.are.equal("exited 0", rows[1].result)
      assert.are.same({ EXEC .. "deploy.sh", p.id, "v7", "prod" }, json.decode(rows[1].argv))
      assert.are.equal("applying the new image to prod\napplied\n", rows[1].output)
    end)

    it("fails with the command's exit and last error line, logged with its exit status", function()
      local p = pipeline("web", "deployfail")
      local ok, err = call(g, "deploy", p)
      assert.is_nil(ok)
      assert.are.equal("deploy command exited 4: kubectl: connection refused", err)
      local rows = logs(p.id)
      assert.are.equal(1, #rows)
      assert.are.equal(4, rows[1].exit_status)
      assert.are.equal("exited 4", rows[1].result)
      assert.truthy(rows[1].output:find("kubectl: connection refused", 1, true))
    end)

    it("runs nothing and logs nothing for an argv it refuses", function()
      local p = pipeline("web", "prod")
      p.artifact = "--force"
      local ok, err, kind = call(g, "deploy", p)
      assert.is_nil(ok)
      assert.are.equal('deploy argument 3: {artifact}: its artifact "--force" would start the argument with "-" ' ..
        "(a command would take it for an option)", err)
      assert.are.equal("invalid", kind)
      assert.are.same({}, logs(p.id))
      assert.is_false(exists(dir .. "/" .. p.id .. ".deploy.args"), "deploy.sh did not run")
    end)
  end)

  describe("rollout_health", function()
    it("reads exit 0 as complete, 1 as not ready, 2 as missing, any other as a failure", function()
      local p = pipeline("web", "prod")
      assert.are.same({}, call(g, "rollout_health", p)) -- health.sh: not ready at first
      assert.are.same({ complete = true }, call(g, "rollout_health", p))
      local gone, sick = pipeline("web", "gone"), pipeline("web", "sick")
      assert.are.same({ missing = true }, call(g, "rollout_health", gone))
      assert.are.same({ failure = "pod web-0: CrashLoopBackOff" }, call(g, "rollout_health", sick))
      local function exits(id)
        local out = {}
        for i, r in ipairs(logs(id)) do out[i] = r.step .. " " .. r.exit_status end
        return out
      end
      assert.are.same({ "health 1", "health 0" }, exits(p.id))
      assert.are.same({ "health 2" }, exits(gone.id))
      assert.are.same({ "health 3" }, exits(sick.id))
    end)

    it("logs a verdict once while it stays the same, and every failure; forgets it at release", function()
      local p = pipeline("never", "prod")
      for _ = 1, 3 do assert.are.same({}, call(g, "rollout_health", p)) end
      assert.are.equal(1, #logs(p.id))
      assert.are.equal(1, g:memory().health)
      assert.is_true(g:release(p))
      assert.are.equal(0, g:memory().health)
      assert.are.same({}, call(g, "rollout_health", p)) -- forgotten: logged again
      assert.are.equal(2, #logs(p.id))

      local sick = pipeline("web", "sick")
      for _ = 1, 2 do assert.are.same({ failure = "pod web-0: CrashLoopBackOff" }, call(g, "rollout_health", sick)) end
      assert.are.equal(2, #logs(sick.id))
    end)

    it("reads a timeout as a failure, logged without an exit status", function()
      local p = pipeline("hang", "prod")
      assert.are.same({ failure = "health command timed out after 200ms" }, call(g, "rollout_health", p))
      local rows = logs(p.id)
      assert.are.equal(1, #rows)
      assert.is_nil(rows[1].exit_status)
      assert.are.equal("timed out after 200ms", rows[1].result)
    end)

    it("reads a signal or a command that did not start as a failure (health_verdict)", function()
      local kind, v = exec.health_verdict({ result = { status = 0, signal = 9, timed_out = false } })
      assert.are.equal("failure", kind)
      assert.are.same({ failure = "health command killed by signal 9" }, v)
      kind, v = exec.health_verdict({ err = "spawn ./x: no such file" })
      assert.are.equal("failure", kind)
      assert.are.same({ failure = "spawn ./x: no such file" }, v)
      kind, v = exec.health_verdict({ result = { status = 5, signal = 0, stdout = "", stderr = "" } })
      assert.are.same({ "failure", { failure = "health command exited 5" } }, { kind, v })
    end)
  end)

  describe("external builds", function()
    -- A pipeline of TAG/app whose build was submitted through ci.sh: p, its job handle.
    local function submitted(app, environment, artifact)
      local p = pipeline(app, environment, artifact)
      assert.is_true(call(g, "build_submit", p))
      local row = job(p.id)
      assert.are.same({ "external", "running", "job-" .. p.id .. "-1" }, { row.mode, row.state, row.handle })
      return p, row.handle
    end

    it("read build.status exit 0 as succeeded, 1 running, 2 missing, 3 failed, and record the end", function()
      local ok, handle = submitted("ext", "s0", "v1")
      assert.are.equal("succeeded", call(g, "build_status", ok))
      assert.are.same({ "succeeded", 0 }, { job(ok.id).state, job(ok.id).exit_status })
      assert.are.equal("succeeded", call(g, "build_status", ok)) -- from exec_job: status is not asked again
      assert.are.equal(1, status_calls(handle))

      local running = submitted("ext", "s1", "slow")
      assert.are.equal("running", call(g, "build_status", running))
      assert.are.equal("running", call(g, "build_status", running))
      assert.are.equal("running", job(running.id).state)
      assert.are.same({ "build", "build" }, { logs(running.id)[1].step, logs(running.id)[2].step })
      assert.are.equal(2, #logs(running.id), "submit, then the status verdict once")
      assert.are.equal(1, g:memory().status_seen)

      local missing, mhandle = submitted("ext", "s2", "v1")
      assert(sh("rm", "-rf", ci_dir .. "/jobs/" .. mhandle).ok)
      assert.are.equal("missing", call(g, "build_status", missing))
      assert.are.same({ "missing", 2 }, { job(missing.id).state, job(missing.id).exit_status })

      local failed = submitted("ext", "s3", "fail")
      assert.are.equal("failed", call(g, "build_status", failed))
      assert.are.same({ "failed", 3 }, { job(failed.id).state, job(failed.id).exit_status })
      assert.are.equal("compile error", logs(failed.id)[2].output:match("[^\n]+"))
      assert.are.equal(1, g:memory().status_seen, "every verdict but running is forgotten")
    end)

    it("read any other status exit as an error named by its output; the job stays running", function()
      local p = submitted("odd", "prod", "v1")
      local st, err = call(g, "build_status", p)
      assert.is_nil(st)
      assert.are.equal("build status command exited 64: ci.sh: unknown command bogus", err)
      assert.are.equal("running", job(p.id).state)
      assert.is_nil(exec.status_verdict({ status = 0, signal = 15, timed_out = false }))
      assert.is_nil(exec.status_verdict({ status = 1, signal = 0, timed_out = true }))
      assert.is_nil(exec.status_verdict(nil))
    end)

    it("cancel a finished pipeline's build once (build_orphans lists it until then)", function()
      local p, handle = submitted("ext", "s4", "slow")
      assert(oops.db.exec("UPDATE pipeline SET status = 'ERROR' WHERE id = ?", p.id))
      local ids = assert(call(g, "build_orphans", 1000))
      assert.truthy(table.concat(ids, " "):find(p.id, 1, true), "an orphan until it is cancelled")
      assert.is_true(call(g, "build_stop", p))
      assert.are.same({ "stopped", "cancelled" }, { job(p.id).state, job(p.id).cancel_state })
      assert.is_true(call(g, "build_stop", p)) -- nothing to cancel any more
      local f = assert(io.open(ci_dir .. "/calls"))
      local cancels = 0
      for line in f:lines() do
        if line == "cancel " .. handle then cancels = cancels + 1 end
      end
      f:close()
      assert.are.equal(1, cancels)
      assert.falsy(table.concat(assert(call(g, "build_orphans", 1000)), " "):find(p.id, 1, true))
      assert.are.equal("failed", call(g, "build_status", p))
    end)
  end)

  describe("a one-command build's end", function()
    it("is logged once when its exit callback and a status ask meet", function()
      -- A build that ended here: its exec_job row still 'running', its run
      -- in memory. The exit callback records it while the build scan asks
      -- its status (which records it too when an earlier write failed):
      -- both at once once wrote its log row twice (CI, 2026-12-05).
      local p = pipeline("web", "prod")
      assert(oops.db.exec("INSERT INTO exec_job (pipeline_id, kind, mode, server, state, submits, started_at) " ..
        "VALUES (?, 'build', 'local', ?, 'running', 1, NOW(6))", p.id, oops.server_name()))
      local ended = { run = { argv = { "true" }, timeout_ms = 1000, duration_ms = 3, output = "",
        result = { ok = true, status = 0, signal = 0, stdout = "", stderr = "" } } }
      g.builds[p.id] = ended
      local answers = {}
      -- As in oopsd: a statement yields its task while it is out on a pool
      -- connection. Both connections busy first: the callers' statements
      -- queue behind them, so each caller is inside when the next comes.
      local tasks = require("oops.tasks")
      assert(oops.db.pool(2))
      finally(function() assert(oops.db.pool(0)) end)
      oops.wait(function()
        local busy = function() assert(oops.db.exec("SELECT SLEEP(0.3) AS s")) end
        assert.are.equal(0, tasks.all({
          busy, busy,
          function() answers[1] = g:finish_build(p.id, ended) end,
          function() answers[2] = g:build_status(p) end,
          function() answers[3] = g:finish_build(p.id, ended) end,
        }, "spec"))
      end)
      local rows = logs(p.id)
      assert.are.equal(1, #rows, "log rows: " .. #rows)
      assert.are.equal("exited 0", rows[1].result)
      assert.are.equal("succeeded", job(p.id).state)
      assert.is_nil(g.builds[p.id])
      assert.are.equal("succeeded", call(g, "build_status", p))
      assert.is_true(answers[1])
    end)
  end)

  describe("a policy reload", function()
    it("hands the builds this server runs to the new gateway, which can stop them", function()
      local old = exec.new(policy.gateway, policy)
      local p = pipeline("web", "prod")
      assert.is_true(oops.wait(old.build_submit, p)) -- the engine's interface: gw.build_submit(p)
      local new = exec.new(policy.gateway, policy, old)
      assert.are.equal(1, new.memory().builds)
      assert.are.equal("running", oops.wait(new.build_status, p))
      assert.is_true(oops.wait(new.build_stop, p))
      assert.are.equal("stopped", job(p.id).state)
      oops.wait(function()
        for _ = 1, 300 do
          if new.memory().builds == 0 then return end
          oops.sleep(100)
        end
      end)
      assert.are.same({ builds = 0, procs = 0, submitting = 0, health = 0, status_seen = 0 }, new.memory())
      local rows = logs(p.id)
      assert.are.equal(1, #rows)
      assert.are.equal("killed by signal 15 (the pipeline was stopped)", rows[1].result)
      -- Another kind of gateway has nothing to hand over.
      assert.are_not.equal(old.exec.builds, exec.new(policy.gateway, policy, { kind = "simulated" }).exec.builds)
    end)
  end)
end)
