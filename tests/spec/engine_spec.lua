-- The engine's ordering rules, checked against the real module with the
-- database calls replaced by recorders: the sweep's snapshot comes before the
-- query, a scan does nothing with the lock session down, and a pipeline whose
-- lock was lost mid-step is not touched. (The behaviour end to end, with real
-- servers and MariaDB, is in tests/scenarios/.)
local oops = require("oops")

local saved = {}
local function patch(tbl, name, fn)
  saved[#saved + 1] = { tbl, name, tbl[name] }
  tbl[name] = fn
end
local function restore()
  for i = #saved, 1, -1 do
    local s = saved[i]
    s[1][s[2]] = s[3]
  end
  saved = {}
end

local policy = { scan = { interval_ms = 1000 }, deploy = { timeout_ms = 600000 },
  rollout = { timeout_ms = 300000 }, build = { timeout_ms = 7200000 } }

local function pipeline(id, status)
  return { id = id, status = status, namespace = "shop", application = id, environment = "prod",
    app = "shop/" .. id, status_age = 0 }
end

describe("the rollout scan's sweep", function()
  local held, calls, released
  before_each(function()
    held, calls, released = {}, {}, {}
    patch(oops.locks, "held", function()
      calls[#calls + 1] = "held"
      local t = {}
      for name in pairs(held) do t[#t + 1] = name end
      return t
    end)
    patch(oops.locks, "is_up", function() return true end)
    patch(oops.locks, "holds", function(name) return held[name] == true end)
    patch(oops.locks, "release", function(name) released[#released + 1] = name; held[name] = nil; return true end)
    patch(oops.locks, "acquire_many", function(names)
      local got = {}
      for _, n in ipairs(names) do got[n] = true; held[n] = true end
      return got
    end)
    patch(oops.store, "get", function(id) return pipeline(id, "SUCCEEDED") end)
  end)
  after_each(restore)

  it("snapshots the held locks before it queries the active pipelines", function()
    held["oops:pipeline:finished"] = true
    patch(oops.store, "list", function()
      calls[#calls + 1] = "list"
      -- While the query runs, the build scan takes the lock of a pipeline
      -- created after the query's snapshot: it is not in the result.
      held["oops:pipeline:brandnew"] = true
      return {}
    end)
    oops.wait(function() require("oops.scans.rollout").run(policy, {}) end)
    assert.are.same({ "held", "list" }, { calls[1], calls[2] })
    assert.are.same({ "oops:pipeline:finished" }, released)
    assert.is_true(held["oops:pipeline:brandnew"])
  end)

  it("stops the build of a STOPPED pipeline before releasing its lock", function()
    held["oops:pipeline:gone"] = true
    local order = {}
    patch(oops.store, "get", function(id) return pipeline(id, "STOPPED") end)
    patch(oops.store, "list", function() return {} end)
    patch(oops.locks, "release", function(name) order[#order + 1] = "release " .. name; return true end)
    local gw = { build_stop = function(p) order[#order + 1] = "build_stop " .. p.id; return true end }
    oops.wait(function() require("oops.scans.rollout").run(policy, gw) end)
    assert.are.same({ "build_stop gone", "release oops:pipeline:gone" }, order)
  end)

  it("keeps the lock when stopping the build failed, to try again next tick", function()
    held["oops:pipeline:gone"] = true
    patch(oops.store, "get", function(id) return pipeline(id, "STOPPED") end)
    patch(oops.store, "list", function() return {} end)
    local gw = { build_stop = function() return nil, "cluster down" end }
    oops.wait(function() require("oops.scans.rollout").run(policy, gw) end)
    assert.are.same({}, released)
  end)
end)

describe("fail closed", function()
  after_each(restore)

  it("a build scan with the lock session down drives nothing", function()
    local touched = false
    patch(oops.store, "list", function() return { pipeline("a", "INITIALIZED") } end)
    patch(oops.locks, "holds", function() return false end)
    patch(oops.locks, "acquire_many", function() return nil, "lock session down" end)
    patch(oops.db, "exec", function() return { { n = 1 } } end)
    patch(oops.store, "transition", function() touched = true; return true end)
    local gw = setmetatable({}, { __index = function() return function() touched = true end end })
    oops.wait(function() require("oops.scans.build").run(policy, gw) end)
    assert.is_false(touched)
  end)

  it("a pipeline whose lock was lost mid-step is not touched", function()
    local P = require("oops.pipelines")
    local sent = false
    patch(oops.locks, "holds", function() return false end)
    patch(oops.store, "transition", function() sent = true; return true end)
    assert.is_false(P.transition(pipeline("a", "RUNNING"), "RUNNING", "ERROR", "x", "build"))
    assert.is_false(sent)
  end)

  it("a lost claim announces nothing and does nothing further", function()
    local gw_called = false
    patch(oops.locks, "holds", function() return true end)
    patch(oops.store, "transition", function() return false end) -- stopped meanwhile
    local gw = { deploy = function() gw_called = true; return true end }
    oops.wait(function() require("oops.scans.build").deploy(pipeline("a", "RUNNING"), "RUNNING", gw) end)
    assert.is_false(gw_called)
  end)

  it("after the deploy, a lost DEPLOYING -> ROLLING_OUT claim is the last thing done", function()
    local transitions = {}
    patch(oops.locks, "holds", function() return true end)
    patch(oops.store, "transition", function(_, from, to)
      transitions[#transitions + 1] = from .. ">" .. to
      return to == "DEPLOYING" -- the ROLLING_OUT claim loses: stopped during the deploy
    end)
    local gw = { deploy = function() return true end }
    oops.wait(function() require("oops.scans.build").deploy(pipeline("a", "RUNNING"), "RUNNING", gw) end)
    assert.are.same({ "RUNNING>DEPLOYING", "DEPLOYING>ROLLING_OUT" }, transitions)
  end)
end)

describe("scan tick durations", function()
  local engine = require("oops.engine")
  local function within(scan, le)
    return oops.metrics.get("oops_scan_ticks_within_seconds_total", { scan = scan, le = le })
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
  local policy = { scan = { interval_ms = 500 } }
  local build = engine.scans[1]

  it("a build or rollout scan ticks every interval from start to start", function()
    assert.are.equal(require("oops.scans.build").name, "build")
    assert.are.equal(500, engine.pause(build, policy, 1000, 1000))  -- an instant tick
    assert.are.equal(380, engine.pause(build, policy, 1000, 1120))  -- a 120 ms tick
    assert.are.equal(50, engine.pause(build, policy, 1000, 1700))   -- a long one: a tenth
    assert.are.equal(500, engine.pause(engine.scans[2], policy, 1000, 1000))
  end)

  it("the scans aligned to the clock keep their own wait", function()
    local notify = engine.scans[5]
    assert.are.equal(1000, engine.pause(notify, policy, 1000, 1900))
  end)
end)
