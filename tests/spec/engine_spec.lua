-- The engine's ordering rules, on the real test database (OOPS_TEST_DB) with
-- real pipelines, real named locks and the real scans: the sweep's snapshot
-- comes before the query, a stopped pipeline's build is stopped before its
-- lock is released, a scan does nothing with the lock session down, and a
-- lost claim does nothing further. The gateway is a recorder (it is not the
-- database); where a rule is about an instant (between the sweep's snapshot
-- and its query), a wrapper around the real call makes the other server's
-- move happen at that instant. (The behaviour with several real servers is
-- in tests/scenarios/.)
local oops = require("oops")
local P = require("oops.pipelines")

local policy = { scan = { interval_ms = 1000 }, deploy = { timeout_ms = 600000 },
  rollout = { timeout_ms = 300000 }, build = { timeout_ms = 7200000 },
  gateway = { kind = "simulated" }, applications = {} }

local connect = require("support.db").connect
local function need_db()
  connect()
  -- Whatever other specs left unfinished would be driven by the scans below.
  assert(oops.db.exec("UPDATE pipeline SET status = 'STOPPED' " ..
    "WHERE status IN ('INITIALIZED','RUNNING','BUILD_SUCCEEDED','DEPLOYING','ROLLING_OUT')"))
  oops.locks.release_all()
end

local n = 0
-- A new pipeline in the database, in `status` (walked there through the
-- store's own transitions, as the engine would).
local function new_pipeline(status)
  n = n + 1
  local app = ("eng%d-%d"):format(os.time() % 100000, n)
  local id = assert(oops.store.create { namespace = "spec", application = app, environment = "prod",
                                         artifact = "spec/" .. app .. ":1" })
  local path = { RUNNING = { "RUNNING" }, DEPLOYING = { "RUNNING", "DEPLOYING" },
    BUILD_SUCCEEDED = { "RUNNING", "BUILD_SUCCEEDED" },
    SUCCEEDED = { "RUNNING", "DEPLOYING", "ROLLING_OUT", "SUCCEEDED" }, STOPPED = { "STOPPED" } }
  local from = "INITIALIZED"
  -- Our transitions are fenced by our lock session: hold the lock to walk it.
  assert.is_true(oops.locks.acquire(P.lock_name(id)))
  for _, to in ipairs(path[status] or {}) do
    assert(oops.store.transition(id, from, to, "spec"))
    from = to
  end
  oops.locks.release(P.lock_name(id))
  return assert(oops.store.get(id))
end

local function status_of(id) return assert(oops.store.get(id)).status end

-- A gateway that records every call and does nothing.
local function recorder(overrides)
  local calls = {}
  local gw = setmetatable({ calls = calls }, { __index = function(_, name)
    return function(p)
      calls[#calls + 1] = name .. " " .. (type(p) == "table" and p.id or tostring(p))
      if overrides and overrides[name] then return overrides[name](p) end
      return nil, "recorder"
    end
  end })
  return gw
end

local function wrap(tbl, name, around)
  local real = tbl[name]
  tbl[name] = function(...) return around(real, ...) end
  return function() tbl[name] = real end
end

describe("the rollout scan's sweep (needs OOPS_TEST_DB)", function()
  before_each(need_db)

  it("snapshots the held locks before it queries the active pipelines", function()
    local finished = new_pipeline("SUCCEEDED")
    assert.is_true(oops.locks.acquire(P.lock_name(finished.id)))
    local brandnew
    local unwrap = wrap(oops.store, "list", function(real, ...)
      local rows = real(...)
      -- Right after the query, the build scan takes a pipeline created after
      -- the query's snapshot: active, held, and not in the result.
      if not brandnew then
        brandnew = new_pipeline("INITIALIZED")
        assert.is_true(oops.locks.acquire(P.lock_name(brandnew.id)))
      end
      return rows
    end)
    local ok, err = pcall(function()
      oops.wait(function() require("oops.scans.rollout").run(policy, recorder()) end)
    end)
    unwrap()
    assert(ok, err)
    assert.is_false(oops.locks.holds(P.lock_name(finished.id)), "the finished pipeline's lock is released")
    assert.is_true(oops.locks.holds(P.lock_name(brandnew.id)), "the one taken after the snapshot is kept")
    -- And the database agrees: nobody holds the finished one, we hold the new one.
    local row = assert(oops.db.exec("SELECT IS_USED_LOCK(?) AS f, IS_USED_LOCK(?) AS b",
      P.lock_name(finished.id), P.lock_name(brandnew.id)))[1]
    assert.is_nil(row.f)
    assert.are.equal(oops.locks.connection_id(), tonumber(row.b))
  end)

  it("stops the build of a STOPPED pipeline before releasing its lock", function()
    local p = new_pipeline("STOPPED")
    local name = P.lock_name(p.id)
    assert.is_true(oops.locks.acquire(name))
    local held_at_stop
    local gw = recorder { build_stop = function()
      -- what the database says about the lock while the build is being stopped
      held_at_stop = assert(oops.db.exec("SELECT IS_USED_LOCK(?) AS h", name))[1].h
      return true
    end }
    oops.wait(function() require("oops.scans.rollout").run(policy, gw) end)
    -- then the scan asks for builds dead drivers left running (none here),
    -- and has the gateway forget what it keeps for pipelines no longer held
    assert.are.same({ "build_stop " .. p.id, "build_orphans 100", "prune nil" }, gw.calls)
    assert.are.equal(oops.locks.connection_id(), tonumber(held_at_stop), "still held while stopping")
    assert.is_nil(assert(oops.db.exec("SELECT IS_USED_LOCK(?) AS h", name))[1].h, "released after")
  end)

  it("keeps the lock when stopping the build failed, to try again next tick", function()
    local p = new_pipeline("STOPPED")
    assert.is_true(oops.locks.acquire(P.lock_name(p.id)))
    local gw = recorder { build_stop = function() return nil, "cluster down" end }
    oops.wait(function() require("oops.scans.rollout").run(policy, gw) end)
    assert.are.same({ "build_stop " .. p.id, "build_orphans 100", "prune nil" }, gw.calls)
    assert.is_true(oops.locks.holds(P.lock_name(p.id)))
  end)

  it("keeps the lock of a pipeline it cannot read, and stops nothing", function()
    local p = new_pipeline("STOPPED")
    local name = P.lock_name(p.id)
    assert.is_true(oops.locks.acquire(name))
    -- The sweep reads the finished ones by id (no status filter): that read fails.
    local unwrap = wrap(oops.store, "list", function(real, opts)
      if opts.ids and not opts.statuses then
        for _, id in ipairs(opts.ids) do
          if id == p.id then return nil, "database gone", "gone" end
        end
      end
      return real(opts)
    end)
    local gw = recorder { build_orphans = function() return {} end }
    oops.wait(function() require("oops.scans.rollout").run(policy, gw) end)
    unwrap()
    assert.are.same({ "build_orphans 100", "prune nil" }, gw.calls)
    assert.is_true(oops.locks.holds(name), "kept, for the next tick")
    oops.locks.release(name)
  end)

  it("stops what still runs for a failed pipeline before releasing its lock", function()
    local p = new_pipeline("DEPLOYING")
    local name = P.lock_name(p.id)
    assert.is_true(oops.locks.acquire(name))
    assert(oops.store.transition(p.id, "DEPLOYING", "ERROR", "spec: deploy timed out"))
    local held_at_release
    local gw = recorder {
      release = function()
        held_at_release = assert(oops.db.exec("SELECT IS_USED_LOCK(?) AS h", name))[1].h
        return true
      end,
      build_orphans = function() return {} end,
    }
    oops.wait(function() require("oops.scans.rollout").run(policy, gw) end)
    assert.are.same({ "release " .. p.id, "build_orphans 100", "prune nil" }, gw.calls)
    assert.are.equal(oops.locks.connection_id(), tonumber(held_at_release), "still held while stopping")
    assert.is_false(oops.locks.holds(name))
  end)
end)

describe("builds a dead driver left running (needs OOPS_TEST_DB)", function()
  before_each(need_db)

  it("are stopped under the pipeline's lock, which is released after", function()
    local p = new_pipeline("STOPPED")
    local name = P.lock_name(p.id)
    local held_at_stop
    local gw = recorder {
      build_orphans = function() return { p.id } end,
      build_stop = function()
        held_at_stop = assert(oops.db.exec("SELECT IS_USED_LOCK(?) AS h", name))[1].h
        return true
      end,
    }
    oops.wait(function() require("oops.scans.rollout").run(policy, gw) end)
    assert.are.same({ "build_orphans 100", "build_stop " .. p.id, "prune nil" }, gw.calls)
    assert.are.equal(oops.locks.connection_id(), tonumber(held_at_stop))
    assert.is_false(oops.locks.holds(name))
  end)

  it("are left alone while another session holds the pipeline's lock (its driver stops them)", function()
    local p = new_pipeline("STOPPED")
    local name = P.lock_name(p.id)
    -- The work connection is another session than the lock session.
    assert.are.equal(1, assert(oops.db.exec("SELECT GET_LOCK(?, 0) AS g", name))[1].g)
    local gw = recorder { build_orphans = function() return { p.id } end }
    oops.wait(function() require("oops.scans.rollout").run(policy, gw) end)
    oops.db.exec("SELECT RELEASE_LOCK(?)", name)
    assert.are.same({ "build_orphans 100", "prune nil" }, gw.calls)
  end)

  it("are not stopped when the pipeline turned out to be active again", function()
    local p = new_pipeline("RUNNING")
    local gw = recorder { build_orphans = function() return { p.id } end }
    oops.wait(function() require("oops.scans.rollout").run(policy, gw) end)
    assert.are.same({ "build_orphans 100", "prune nil" }, gw.calls)
  end)
end)

describe("fail closed (needs OOPS_TEST_DB)", function()
  before_each(need_db)

  it("a build scan with the lock session down drives nothing", function()
    -- In a child `oopsd lua` of its own: this kills its lock session for good
    -- (a script has no daemon tick to reconnect it).
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write([[
      local oops = require("oops")
      assert(oops.connect { db = os.getenv("OOPS_TEST_DB"), name = "spec-child" })
      local id = assert(oops.store.create { namespace = "spec", application = "killed-" .. os.time(),
        environment = "prod", artifact = "a:1" })
      -- The lock session killed from the database side, as a DBA or a network would.
      assert(oops.db.exec("KILL CONNECTION ?", oops.locks.connection_id()))
      local calls = 0
      local gw = setmetatable({}, { __index = function() return function() calls = calls + 1 end end })
      local policy = { scan = { interval_ms = 1000 }, build = { timeout_ms = 7200000 },
        gateway = { kind = "simulated" }, applications = {} }
      oops.wait(function() require("oops.scans.build").run(policy, gw) end)
      print(("RESULT calls=%d status=%s up=%s"):format(calls, oops.store.get(id).status, tostring(oops.locks.is_up())))
    ]])
    f:close()
    local r = assert(oops.wait(function()
      return oops.proc.run { argv = { "/proc/self/exe", "lua", path }, inherit_env = true, timeout_ms = 60000,
        env = require("support.db").child_env() }
    end))
    os.remove(path)
    assert.matches("RESULT calls=0 status=INITIALIZED up=false", r.stdout, 1, true)
  end)

  it("a pipeline whose lock was lost mid-step is not touched", function()
    local p = new_pipeline("RUNNING")
    assert.is_false(P.transition(p, "RUNNING", "ERROR", "x", "build"))
    assert.are.equal("RUNNING", status_of(p.id))
  end)

  it("a lost claim announces nothing and does nothing further", function()
    local p = new_pipeline("RUNNING")
    assert.is_true(oops.locks.acquire(P.lock_name(p.id)))
    assert(oops.store.transition(p.id, "RUNNING", "STOPPED", "stopped meanwhile")) -- as oopsctl stop
    local gw = recorder()
    oops.wait(function() require("oops.scans.build").deploy(p, "RUNNING", gw) end)
    assert.are.same({}, gw.calls)
    assert.are.equal("STOPPED", status_of(p.id))
  end)

  it("after the deploy, a lost DEPLOYING -> ROLLING_OUT claim is the last thing done", function()
    local p = new_pipeline("RUNNING")
    assert.is_true(oops.locks.acquire(P.lock_name(p.id)))
    local gw = recorder { deploy = function()
      -- stopped during the deploy, by an operator
      assert(oops.store.transition(p.id, "DEPLOYING", "STOPPED", "stopped during the deploy"))
      return true
    end }
    oops.wait(function() require("oops.scans.build").deploy(p, "RUNNING", gw) end)
    assert.are.same({ "deploy " .. p.id }, gw.calls)
    local path = {}
    for _, e in ipairs(assert(oops.store.events(p.id))) do path[#path + 1] = e.to end
    assert.are.same({ "INITIALIZED", "RUNNING", "DEPLOYING", "STOPPED" }, path)
  end)

  it("after the deploy, a connection lost just then does not strand the pipeline DEPLOYING", function()
    local p = new_pipeline("RUNNING")
    assert.is_true(oops.locks.acquire(P.lock_name(p.id)))
    -- The session the next claim will use, killed from another process during
    -- the deploy (as a database restart would): that claim fails "gone", and
    -- only trying it again moves the pipeline on.
    local me = assert(oops.db.exec("SELECT CONNECTION_ID() AS c"))[1].c
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write(([[
      local oops = require("oops")
      assert(oops.connect { db = os.getenv("OOPS_TEST_DB"), name = "spec-killer", locks = false })
      assert(oops.db.exec("KILL CONNECTION ?", %d))
    ]]):format(me))
    f:close()
    local gw = recorder { deploy = function()
      local r = oops.proc.run { argv = { "/proc/self/exe", "lua", script }, inherit_env = true, timeout_ms = 60000,
        env = require("support.db").child_env() }
      assert(r.status == 0, r.stderr)
      return true
    end }
    oops.wait(function() require("oops.scans.build").deploy(p, "RUNNING", gw) end)
    os.remove(script)
    assert.are.equal("ROLLING_OUT", status_of(p.id))
    oops.locks.release(P.lock_name(p.id))
  end)
end)

describe("release safety in the build scan (needs OOPS_TEST_DB)", function()
  before_each(need_db)
  local build = require("oops.scans.build")

  local function frozen_policy()
    local now = assert(oops.db.now())
    local pol = {}
    for k, v in pairs(policy) do pol[k] = v end
    pol.deploy = { timeout_ms = 600000, timezone = "UTC", concurrency = {} }
    pol.freezes = { { name = "spec", from = now - 60, to = now + 3600, from_text = "-", to_text = "-" } }
    return pol
  end

  it("a freeze holds a release after its build, once recorded, until an override", function()
    local p = new_pipeline("RUNNING")
    assert.is_true(oops.locks.acquire(P.lock_name(p.id)))
    local pol, gw = frozen_policy(), recorder { deploy = function() return true end }
    oops.wait(function() build.deploy(p, "RUNNING", gw, pol) end)
    assert.are.same({}, gw.calls)
    local row = assert(oops.store.get(p.id))
    assert.are.equal("BUILD_SUCCEEDED", row.status)
    assert.are.equal("freeze", row.hold)
    assert.truthy(row.message:find("^Waiting for the freeze spec to end: "), row.message)
    -- The next tick finds the same hold: nothing is written (the row's
    -- message edited behind its back stays).
    local seen = assert(oops.store.get(p.id))
    assert(oops.db.exec("UPDATE pipeline SET message = 'kept' WHERE id = ?", p.id))
    oops.wait(function() build.deploy(seen, "BUILD_SUCCEEDED", gw, pol) end)
    assert.are.equal("kept", assert(oops.store.get(p.id)).message)
    assert.are.same({}, gw.calls)
    -- Overridden (oopsctl deploy --override): it deploys, and the hold is over.
    assert(oops.db.exec("UPDATE pipeline SET override_at = NOW(6) WHERE id = ?", p.id))
    local now = assert(oops.store.get(p.id))
    oops.wait(function() build.deploy(now, "BUILD_SUCCEEDED", gw, pol) end)
    assert.are.same({ "deploy " .. p.id }, gw.calls)
    row = assert(oops.store.get(p.id))
    assert.are.equal("ROLLING_OUT", row.status)
    assert.is_nil(row.hold)
    oops.locks.release(P.lock_name(p.id))
  end)

  it("a rollback is not held by a freeze", function()
    local p = new_pipeline("INITIALIZED")
    assert(oops.db.exec("UPDATE pipeline SET trigger_type = 'rollback' WHERE id = ?", p.id))
    p = assert(oops.store.get(p.id))
    assert.is_true(oops.locks.acquire(P.lock_name(p.id)))
    local gw = recorder { deploy = function() return true end }
    oops.wait(function() build.deploy(p, "INITIALIZED", gw, frozen_policy()) end)
    assert.are.same({ "deploy " .. p.id }, gw.calls)
    oops.locks.release(P.lock_name(p.id))
  end)

  it("a held automatic release its policy refuses is stopped, not refused again every tick", function()
    local p = new_pipeline("BUILD_SUCCEEDED")
    local pol = frozen_policy()
    pol.applications = { ["spec/other"] = { environments = { "prod" } } }
    oops.wait(function() build.run(pol, recorder()) end)
    local row = assert(oops.store.get(p.id))
    assert.are.equal("STOPPED", row.status)
    assert.truthy(row.message:find("is not declared by the running policy", 1, true), row.message)
    oops.locks.release_all()
  end)
end)

describe("scan tick durations", function()
  local engine = require("oops.engine")
  local function within(scan, le)
    return oops.metrics.get("oops_scan_duration_seconds_bucket", { scan = scan, le = le })
  end

  it("count each tick in every bucket at or above its duration, and in +Inf", function()
    local scan = "spec-histogram-" .. math.random(1e9)
    engine.observe_duration(scan, 0.003)  -- between 0.0025 and 0.005
    engine.observe_duration(scan, 0.005)  -- on a bound: counted within it
    engine.observe_duration(scan, 0.7)
    engine.observe_duration(scan, 120)    -- beyond the last bound: +Inf only
    assert.are.equal(0, within(scan, "0.001"))
    assert.are.equal(0, within(scan, "0.0025"))
    assert.are.equal(2, within(scan, "0.005"))
    assert.are.equal(2, within(scan, "0.5"))
    assert.are.equal(3, within(scan, "1"))
    assert.are.equal(3, within(scan, "60"))
    assert.are.equal(4, within(scan, "+Inf"))
    -- The summary beside it counts every tick too.
    assert.are.equal(4, oops.metrics.get("oops_scan_duration_seconds", { scan = scan }))
  end)
end)

describe("scan cadence", function()
  local engine = require("oops.engine")
  local cadence = { scan = { interval_ms = 500 } }
  local build = engine.scans[1]

  it("a build or rollout scan ticks just after the multiples of its interval on the database clock", function()
    assert.are.equal(require("oops.scans.build").name, "build")
    -- db_ms: the database's time; the next multiple of 500 ms, plus 5 ms
    -- (the watcher's answer comes just before the multiple).
    assert.are.equal(505, engine.pause(build, cadence, 0, 0, 1000))   -- a tick that took no time
    assert.are.equal(385, engine.pause(build, cadence, 0, 0, 1120))   -- a 120 ms tick
    assert.are.equal(55, engine.pause(build, cadence, 0, 0, 1450))    -- 50 ms before the next multiple
    assert.are.equal(535, engine.pause(build, cadence, 0, 0, 1470))   -- closer than a tenth: the one after
    assert.are.equal(505, engine.pause(engine.scans[2], cadence, 0, 0, 2000))
  end)

  it("the scans aligned to the clock keep their own wait", function()
    local notify = engine.scans[5]
    assert.are.equal(1000, engine.pause(notify, cadence, 1000, 1900))
  end)
end)

-- The cases of a bounded tick, run twice: with blocking database calls, and
-- with calls that yield their task (oops.db.pool: the daemon's way), so
-- other tasks (steps, the other scan) interleave at every database call.
local function bounded_tick_cases()
  local function with_policy(max_new)
    local p = {}
    for k, v in pairs(policy) do p[k] = v end
    p.scan = { interval_ms = 1000, max_new = max_new }
    return p
  end
  local function count(calls, prefix)
    local k = 0
    for _, c in ipairs(calls) do if c:sub(1, #prefix) == prefix then k = k + 1 end end
    return k
  end
  local function contains(list, v)
    for _, x in ipairs(list) do if x == v then return true end end
    return false
  end
  local function acquire_counts()
    return oops.metrics.get("oops_lock_acquire_statements_total", { scan = "build" }) or 0,
      oops.metrics.get("oops_lock_acquire_batches_total", { scan = "build" }) or 0
  end

  it("a server takes at most scan.max_new new pipelines per tick, the oldest first, the rest next ticks", function()
    local ids = {}
    for i = 1, 5 do ids[i] = new_pipeline("INITIALIZED").id end
    local pol = with_policy(2)
    local gw = recorder { build_submit = function() return true end }
    local function tick() oops.wait(function() require("oops.scans.build").run(pol, gw) end) end
    tick()
    -- The two oldest, in either order: their steps run side by side (and, with
    -- calls that yield, their claims on two connections race).
    local first = { gw.calls[1], gw.calls[2] }
    table.sort(first)
    local want = { "build_submit " .. ids[1], "build_submit " .. ids[2] }
    table.sort(want)
    assert.are.same(want, first)
    assert.are.equal(2, #gw.calls)
    assert.is_true(P.held({ id = ids[1] }) and P.held({ id = ids[2] }))
    assert.are.equal("INITIALIZED", status_of(ids[3]))
    tick() -- the two it drives are asked about, and two more are taken
    assert.are.equal(2, count(gw.calls, "build_status "))
    assert.are.equal(4, count(gw.calls, "build_submit "))
    tick()
    assert.are.equal(5, count(gw.calls, "build_submit "))
    for _, id in ipairs(ids) do assert.are.equal("RUNNING", status_of(id)) end
  end)

  it("a tick reads only what it drives: the free ones it may take (live x max_new), the held ones by id", function()
    local ids = {}
    for i = 1, 9 do ids[i] = new_pipeline("INITIALIZED").id end
    local mine = new_pipeline("RUNNING").id
    assert.is_true(oops.locks.acquire(P.lock_name(mine)))
    local frees, listed = {}, {}
    local unfree = wrap(oops.store, "free", function(real, opts)
      local got = real(opts)
      frees[#frees + 1] = { limit = opts.limit, n = #got }
      return got
    end)
    local unlist = wrap(oops.store, "list", function(real, opts)
      local rows = real(opts)
      for _, p in ipairs(rows) do listed[#listed + 1] = p.id end
      return rows
    end)
    local gw = recorder { build_submit = function() return true end }
    local ok, err = pcall(function()
      oops.wait(function() require("oops.scans.build").run(with_policy(2), gw) end)
    end)
    unfree()
    unlist()
    assert(ok, err)
    -- One server alive (this one): at most 2 x 1 free ones asked for, and
    -- only those two are read in full, with the one it holds: never the
    -- other seven waiting.
    assert.are.same({ { limit = 2, n = 2 } }, frees)
    table.sort(listed)
    local want = { mine, ids[1], ids[2] }
    table.sort(want)
    assert.are.same(want, listed)
    assert.are.equal("RUNNING", status_of(ids[1]))
    assert.are.equal("RUNNING", status_of(ids[2]))
    assert.are.equal("INITIALIZED", status_of(ids[3]))
  end)

  it("drives more pipelines than a page in a tick, reading a page at a time, one GET_LOCK for the new ones", function()
    local page = P.PAGE
    local held, free = {}, {}
    for i = 1, 7 do
      held[i] = new_pipeline("RUNNING").id
      assert.is_true(oops.locks.acquire(P.lock_name(held[i])))
    end
    for i = 1, 5 do free[i] = new_pipeline("INITIALIZED").id end
    local lists, biggest = 0, 0
    local unwrap = wrap(oops.store, "list", function(real, opts)
      lists = lists + 1
      -- Held and new pipelines are read by id, a page of ids at a time.
      assert.is_true(#opts.ids >= 1 and #opts.ids <= 3, "ids per read: " .. #opts.ids)
      local rows = real(opts)
      biggest = math.max(biggest, #rows)
      return rows
    end)
    local statements, batches = acquire_counts()
    local gw = recorder { build_submit = function() return true end }
    P.PAGE = 3
    local ok, err = pcall(function()
      oops.wait(function() require("oops.scans.build").run(policy, gw) end)
    end)
    P.PAGE = page
    unwrap()
    assert(ok, err)
    assert.are.equal(5, lists, "7 held (3 reads of 3 ids at most), then the 5 taken (2 reads)")
    assert.are.equal(3, biggest)
    for _, id in ipairs(held) do assert.is_true(contains(gw.calls, "build_status " .. id), id) end
    for _, id in ipairs(free) do
      assert.is_true(contains(gw.calls, "build_submit " .. id), id)
      assert.are.equal("RUNNING", status_of(id))
    end
    local s2, b2 = acquire_counts()
    assert.are.equal(1, b2 - batches)
    assert.are.equal(1, s2 - statements, "one GET_LOCK statement for the five new ones")
  end)

  it("the sweep keeps the locks of active pipelines on later pages and releases the finished one", function()
    local page = P.PAGE
    local active = {}
    for i = 1, 5 do
      active[i] = new_pipeline("DEPLOYING").id
      assert.is_true(oops.locks.acquire(P.lock_name(active[i])))
    end
    local done = new_pipeline("SUCCEEDED").id
    assert.is_true(oops.locks.acquire(P.lock_name(done)))
    P.PAGE = 2
    local ok, err = pcall(function()
      oops.wait(function() require("oops.scans.rollout").run(policy, recorder()) end)
    end)
    P.PAGE = page
    assert(ok, err)
    for _, id in ipairs(active) do
      assert.is_true(oops.locks.holds(P.lock_name(id)), id)
      assert.are.equal("DEPLOYING", status_of(id))
    end
    assert.is_false(oops.locks.holds(P.lock_name(done)))
  end)

end

describe("a tick's working set is bounded (needs OOPS_TEST_DB)", function()
  before_each(need_db)
  bounded_tick_cases()
end)

describe("a tick's working set is bounded, database calls yielding (needs OOPS_TEST_DB)", function()
  before_each(need_db)
  setup(function()
    connect()
    assert(oops.db.pool(2))
  end)
  teardown(function() assert(oops.db.pool(0)) end)
  bounded_tick_cases()
end)

describe("tasks.all and tasks.pool", function()
  local tasks = require("oops.tasks")

  it("tasks.all runs every step, never more than its limit at once, and counts the failures", function()
    local running, most, ran = 0, 0, 0
    local fns = {}
    for i = 1, 40 do
      fns[i] = function()
        running = running + 1
        most = math.max(most, running)
        oops.sleep(1 + i % 3)
        running = running - 1
        ran = ran + 1
        if i % 10 == 0 then error("step " .. i .. " fails") end
      end
    end
    assert.are.equal(4, oops.wait(function() return tasks.all(fns, "spec", 5) end))
    assert.are.equal(40, ran)
    assert.are.equal(5, most)
    -- the default limit
    running, most, ran = 0, 0, 0
    local many = {}
    for i = 1, tasks.LIMIT * 3 do many[i] = fns[(i % 9) + 1] end
    assert.are.equal(0, oops.wait(function() return tasks.all(many, "spec") end))
    assert.are.equal(tasks.LIMIT * 3, ran)
    assert.are.equal(tasks.LIMIT, most)
  end)

  it("a step ending while the pool's owner waits for something else does not wake that wait", function()
    local slept
    oops.wait(function()
      local pool = tasks.pool("spec", 2)
      pool:run(function() end)
      local t0 = oops.now_ms()
      oops.sleep(30) -- the step ends meanwhile
      slept = oops.now_ms() - t0
      pool:run(function() oops.sleep(5) end)
      assert.are.equal(0, pool:wait())
    end)
    assert.is_true(slept >= 30, slept)
  end)
end)
