-- oops.chaos.plan and oops.chaos.rng: the campaign's plan is drawn from the
-- seed alone. One seed and options give one plan (and one printed line per
-- fault); another seed another; faults come after the quiet start, work and
-- faults in order and inside the duration; over a long plan every kind is
-- drawn; server faults aim at the given servers, database faults at none.
local plan = require("oops.chaos.plan")
local rng = require("oops.chaos.rng")

local SERVERS = { "s1", "s2", "s3", "s4" }
local TARGETS = { { app = "chaos/a1", env = "prod" }, { app = "chaos/a2", env = "prod" },
  { app = "chaos/a3", env = "staging" } }

local function options(seed, duration_s)
  return { seed = seed, duration_s = duration_s or 120, servers = SERVERS, targets = TARGETS }
end

local function lines(p)
  local t = {}
  for _, f in ipairs(p.faults) do t[#t + 1] = plan.line(f) end
  return t
end

local function set(list)
  local t = {}
  for _, v in ipairs(list) do t[v] = true end
  return t
end

local NO_TARGET = { db_restart = true, slow_db = true }

describe("chaos plan: determinism", function()
  it("the same seed and options give the same plan and the same lines", function()
    local a, b = plan.make(options(7)), plan.make(options(7))
    assert.are.same(a, b)
    assert.are.same(lines(a), lines(b))
    assert.are.equal(7, a.seed)
    assert.is_true(#a.faults > 0 and #a.work > 0)
  end)

  it("the options are not changed by making a plan", function()
    local o = options(7)
    plan.make(o)
    assert.are.same(options(7), o)
  end)

  it("different seeds give different plans", function()
    local a, b, c = plan.make(options(7)), plan.make(options(8)), plan.make(options(-7))
    assert.are_not.same(a.faults, b.faults)
    assert.are_not.same(a.work, b.work)
    assert.are_not.same(a.faults, c.faults)
    assert.are_not.same(lines(a), lines(b))
  end)

  it("the nemesis and the workload draw apart: a longer plan begins the same", function()
    local short, long = plan.make(options(11, 60)), plan.make(options(11, 600))
    for i, f in ipairs(short.faults) do assert.are.same(f, long.faults[i]) end
    for i, w in ipairs(short.work) do assert.are.same(w, long.work[i]) end
  end)

  it("refuses options it cannot draw from", function()
    assert.has_error(function() plan.make(options(1.5)) end, "plan: seed")
    assert.has_error(function() plan.make { seed = 1, duration_s = 10, servers = { "s1" }, targets = TARGETS } end,
      "plan: at least two servers")
    assert.has_error(function() plan.make { seed = 1, duration_s = 10, servers = SERVERS, targets = {} } end,
      "plan: at least one application and environment")
  end)
end)

describe("chaos plan: moments", function()
  -- Over many seeds: the last moment, rounded to 0.1 s, once reached the
  -- duration itself (119.97 -> 120.0); it must stay below it.
  it("every fault lies in [QUIET_START, duration), sorted, over many seeds", function()
    for seed = 1, 400 do
      local p = plan.make(options(seed, 60))
      local last = -math.huge
      for _, f in ipairs(p.faults) do
        assert(f.at >= plan.QUIET_START and f.at < 60, ("seed %d: fault at %s"):format(seed, f.at))
        assert(f.at >= last, ("seed %d: fault at %s after %s"):format(seed, f.at, last))
        last = f.at
      end
    end
  end)

  it("every work item lies in [0, duration), sorted, over many seeds", function()
    for seed = 1, 400 do
      local p = plan.make(options(seed, 60))
      local last = -math.huge
      for _, w in ipairs(p.work) do
        assert(w.at >= 0 and w.at < 60, ("seed %d: work at %s"):format(seed, w.at))
        assert(w.at >= last, ("seed %d: work at %s after %s"):format(seed, w.at, last))
        last = w.at
      end
    end
  end)

  it("moments are tenths of a second, gaps within FAULT_GAP and WORK_GAP (give or take the rounding)", function()
    local p = plan.make(options(3, 600))
    local function tenths(x) return math.abs(x * 10 - math.floor(x * 10 + 0.5)) < 1e-6 end
    for i, f in ipairs(p.faults) do
      assert.is_true(tenths(f.at))
      if i > 1 then
        local gap = f.at - p.faults[i - 1].at
        assert.is_true(gap >= plan.FAULT_GAP[1] - 0.1 and gap <= plan.FAULT_GAP[2] + 0.1)
      end
    end
    for i, w in ipairs(p.work) do
      assert.is_true(tenths(w.at))
      if i > 1 then
        local gap = w.at - p.work[i - 1].at
        assert.is_true(gap >= plan.WORK_GAP[1] - 0.1 and gap <= plan.WORK_GAP[2] + 0.1)
      end
    end
  end)
end)

describe("chaos plan: kinds and targets", function()
  local long = plan.make(options(42, 3600))

  it("every fault kind appears over an hour", function()
    local seen = {}
    for _, f in ipairs(long.faults) do seen[f.kind] = true end
    for _, k in ipairs(plan.FAULTS) do assert(seen[k[1]], "never drawn: " .. k[1]) end
    local known = {}
    for _, k in ipairs(plan.FAULTS) do known[k[1]] = true end
    for kind in pairs(seen) do assert(known[kind], "unknown fault kind " .. kind) end
  end)

  it("every workload kind appears over an hour", function()
    local seen = {}
    for _, w in ipairs(long.work) do seen[w.kind] = true end
    for _, k in ipairs(plan.WORK) do assert(seen[k[1]], "never drawn: " .. k[1]) end
    local known = {}
    for _, k in ipairs(plan.WORK) do known[k[1]] = true end
    for kind in pairs(seen) do assert(known[kind], "unknown work kind " .. kind) end
  end)

  it("server faults aim at one of the servers; db_restart and slow_db at none", function()
    local servers = set(SERVERS)
    for _, f in ipairs(long.faults) do
      if NO_TARGET[f.kind] then
        assert(f.target == nil, f.kind .. " with a target")
      else
        assert(servers[f.target], f.kind .. " aimed at " .. tostring(f.target))
      end
    end
  end)

  it("holds are drawn within their kind's range, and only for kinds that hold", function()
    local range = {}
    for _, k in ipairs(plan.FAULTS) do range[k[1]] = k[3] or false end
    for _, f in ipairs(long.faults) do
      local r = range[f.kind]
      if r then
        assert(f.hold and f.hold >= r[1] and f.hold <= r[2], ("%s held %s"):format(f.kind, tostring(f.hold)))
      else
        assert(f.hold == nil, f.kind .. " with a hold")
      end
    end
  end)

  it("a clock fault jumps by a known step, forward or back; hup_changed sets a scan interval", function()
    local jumps, scans = set { 30, 90, 300, 3600 }, set { "300ms", "500ms", "700ms", "1s" }
    for _, f in ipairs(long.faults) do
      if f.kind == "clock" then
        assert(math.type(f.arg) == "integer" and jumps[math.abs(f.arg)], "clock by " .. tostring(f.arg))
      elseif f.kind == "hup_changed" then
        assert(scans[f.arg], "scan " .. tostring(f.arg))
      else
        assert(f.arg == nil, f.kind .. " with an arg")
      end
    end
  end)

  it("work aims at one of the targets", function()
    for _, w in ipairs(long.work) do
      local found = false
      for _, t in ipairs(TARGETS) do found = found or t == w.target end
      assert(found, w.kind .. " aimed elsewhere")
    end
  end)
end)

describe("chaos plan: line", function()
  it("every fault of a plan prints as fault +S.Ss KIND ...", function()
    for _, l in ipairs(lines(plan.make(options(42, 3600)))) do
      assert(l:match("^fault %+%d+%.%ds %S+"), l)
    end
  end)

  it("writes the target, the clock's jump, the scan and the hold", function()
    assert.are.equal("fault +12.5s kill s2", plan.line { at = 12.5, kind = "kill", target = "s2" })
    assert.are.equal("fault +12.5s kill s2 for 2.1s", plan.line { at = 12.5, kind = "kill", target = "s2", hold = 2.1 })
    assert.are.equal("fault +3.0s cut s1", plan.line { at = 3, kind = "cut", target = "s1" })
    assert.are.equal("fault +40.2s db_restart for 1.5s", plan.line { at = 40.2, kind = "db_restart", hold = 1.5 })
    assert.are.equal("fault +7.0s clock s3 -300s for 6.0s",
      plan.line { at = 7, kind = "clock", target = "s3", arg = -300, hold = 6 })
    assert.are.equal("fault +7.0s clock s3 +90s for 6.0s",
      plan.line { at = 7, kind = "clock", target = "s3", arg = 90, hold = 6 })
    assert.are.equal("fault +8.1s hup_changed s4 scan 500ms",
      plan.line { at = 8.1, kind = "hup_changed", target = "s4", arg = "500ms" })
  end)
end)

describe("chaos rng", function()
  it("int(lo, hi) stays in [lo, hi] and reaches both ends", function()
    local r = rng.new(1)
    local seen = {}
    for _ = 1, 2000 do
      local x = r:int(-2, 3)
      assert(math.type(x) == "integer" and x >= -2 and x <= 3, tostring(x))
      seen[x] = true
    end
    for x = -2, 3 do assert.is_true(seen[x]) end
    assert.are.equal(5, r:int(5, 5))
    assert.has_error(function() r:int(2, 1) end, "rng:int: empty range")
  end)

  it("float() in [0, 1), range(lo, hi) in [lo, hi)", function()
    local r = rng.new(2)
    for _ = 1, 2000 do
      local f, x = r:float(), r:range(2, 8)
      assert(f >= 0 and f < 1, tostring(f))
      assert(x >= 2 and x < 8, tostring(x))
    end
  end)

  it("the same seed gives the same sequence; another seed another", function()
    local a, b, c = rng.new(42), rng.new(42), rng.new(43)
    local sa, sb, sc = {}, {}, {}
    for i = 1, 50 do sa[i], sb[i], sc[i] = a:next(), b:next(), c:next() end
    assert.are.same(sa, sb)
    assert.are_not.same(sa, sc)
  end)

  it("the sequence is fixed: splitmix64 of seed 0", function()
    -- the reference splitmix64's first outputs from state 0
    local r = rng.new(0)
    assert.are.equal(math.tointeger(0xe220a8397b1dcdaf), r:next())
    assert.are.equal(math.tointeger(0x6e789e6aa1b965f4), r:next())
  end)

  it("fork(tag) differs from its parent and from other tags, and is deterministic", function()
    local function first(r, n)
      local t = {}
      for i = 1, n do t[i] = r:next() end
      return t
    end
    local parent = rng.new(9)
    local f1, f2 = parent:fork("nemesis"), rng.new(9):fork("nemesis")
    assert.are.same(first(f1, 20), first(f2, 20))
    assert.are_not.same(first(rng.new(9), 20), first(rng.new(9):fork("nemesis"), 20))
    assert.are_not.same(first(rng.new(9):fork("workload"), 20), first(rng.new(9):fork("nemesis"), 20))
    assert.are_not.same(first(rng.new(10):fork("nemesis"), 20), first(rng.new(9):fork("nemesis"), 20))
  end)

  it("fork does not depend on how far the parent has drawn, nor move it", function()
    local a, b = rng.new(5), rng.new(5)
    for _ = 1, 10 do a:next() end
    assert.are.same(a:fork("x"):next(), b:fork("x"):next())
    local c, d = rng.new(5), rng.new(5)
    c:fork("x")
    assert.are.equal(c:next(), d:next())
  end)

  it("pick, chance and weighted draw from what they are given", function()
    local r = rng.new(3)
    local list, n, hits = { "a", "b", "c" }, 0, { a = 0, b = 0 }
    for _ = 1, 1000 do
      assert.truthy(set(list)[r:pick(list)])
      if r:chance(0.25) then n = n + 1 end
      local w = r:weighted { { "a", 3 }, { "b", 1 }, { "never", 0 } }
      hits[w] = hits[w] + 1
    end
    assert.is_true(n > 150 and n < 350)
    assert.is_true(hits.a > hits.b and hits.b > 0)
    assert.is_nil(hits.never)
  end)

  it("refuses a seed that is not an integer", function()
    assert.has_error(function() rng.new(1.5) end, "rng.new: an integer seed")
  end)
end)
