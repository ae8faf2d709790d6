-- The campaign's plan (oopsctl chaos): what the nemesis does and what the
-- workload asks, when, drawn from the seed alone. One seed (with the same
-- duration, servers and applications) gives one plan on every machine; what
-- a machine cannot do (no network namespaces, no libfaketime) is skipped when
-- its moment comes, and said so, without moving anything else.
--
--   local plan = require("oops.chaos.plan").make {
--     seed = 7, duration_s = 120, servers = { "s1", "s2", "s3", "s4" },
--     targets = { { app = "chaos/a1", env = "prod", canary = true, alerts = true }, ... } }
--   (canary: its releases are canaries, a quarter of them bad: arg.bad;
--   alerts: it has limits, so the metric actions aim at it)
--   plan.faults  { { at = 12.5, kind = "kill", target = "s2", hold = 2.1, arg = ... }, ... }
--   plan.work    { { at = 3.2, kind = "create", target = { app =, env = }, arg = ... }, ... }
--   require("oops.chaos.plan").line(f)  → "fault +12.5s kill s2"
local rng = require("oops.chaos.rng")

local M = {}

-- The nemesis' kinds and how often each is drawn. hold: how long the fault
-- lasts before it is undone (seconds, drawn in [lo, hi]); the freeze and the
-- partition last past the lock session's timeout (3 s at the campaign's
-- cadence) so the database reaps the session.
M.FAULTS = {
  { "kill", 5, { 1, 4 } },          -- SIGKILL, started again after hold
  { "freeze", 4, { 4, 7 } },        -- SIGSTOP past the session timeout, then SIGCONT
  { "cut", 4 },                     -- KILL of its lock session from the database side
  { "db_restart", 2, { 1, 3 } },    -- the database stopped, started again after hold
  { "partition", 2, { 4, 7 } },     -- its network link cut (netns), healed after hold
  { "clock", 3, { 5, 15 } },        -- its wall clock jumps by arg seconds, back after hold
  { "hup_broken", 2, { 2, 5 } },    -- SIGHUP with a broken policy (refused), then the good one
  { "hup_changed", 3 },             -- SIGHUP with a changed policy (another scan cadence)
  { "slow_db", 2, { 2, 4 } },       -- mariadbd SIGSTOPped for hold seconds
}

-- The workload's kinds and weights.
M.WORK = {
  { "create", 60 },          -- an automatic pipeline
  { "create_manual", 8 },    -- a manual one (built, then waits for a release)
  { "release", 8 },          -- oopsctl deploy of a manual one that waits
  { "approve", 8 },          -- oopsctl approve by one of APPROVERS (issue 39), before the deploy
  { "stop", 8 },             -- oopsctl stop --expect (from the status read)
  { "rollback", 4 },         -- oopsctl rollback
  { "build_fail", 5 },       -- its simulated build fails
  { "build_missing", 4 },    -- its simulated build job vanishes
  { "deploy_fail", 4 },      -- deploys of a target fail for a few seconds
  { "rollout_fail", 4 },     -- its simulated rollout fails
  { "metric", 8 },           -- a pod's usage crosses the alert threshold (up or down)
  { "receiver_500", 3 },     -- the webhook receiver answers 500 for a while
  { "receiver_hang", 2 },    -- the webhook receiver hangs for a while
}

-- The persons who approve (none of them creates: the campaign creates as
-- the one who runs it).
M.APPROVERS = { "ann", "ben", "cai" }

M.FAULT_GAP = { 2, 8 }   -- seconds between two faults
-- Seconds between two workload actions: about four a second, two of them
-- creates (some refused beside an unfinished pipeline of their target).
M.WORK_GAP = { 0.1, 0.4 }
M.BAD_CANARY = 0.25      -- the share of canary releases whose artifact fails its analysis
M.QUIET_START = 3        -- no fault in the first seconds: the servers start

local function weights(list)
  local w = {}
  for _, k in ipairs(list) do w[#w + 1] = { k[1], k[2] } end
  return w
end

local function round1(x) return math.floor(x * 10 + 0.5) / 10 end

local HOLD = {}
for _, k in ipairs(M.FAULTS) do HOLD[k[1]] = k[3] end

local function fault_arg(r, kind)
  if kind == "clock" then
    local jump = r:pick { 30, 90, 300, 3600 }
    return r:chance(0.5) and jump or -jump
  elseif kind == "hup_changed" then
    return r:pick { "300ms", "500ms", "700ms", "1s" } -- the new scan interval
  end
end

local function faults(r, o)
  local list, at = {}, M.QUIET_START
  local w = weights(M.FAULTS)
  while true do
    at = at + r:range(M.FAULT_GAP[1], M.FAULT_GAP[2])
    if round1(at) >= o.duration_s then break end -- rounded: 119.97 would become 120.0
    local kind = r:weighted(w)
    local f = { at = round1(at), kind = kind }
    if kind ~= "db_restart" and kind ~= "slow_db" then f.target = r:pick(o.servers) end
    local h = HOLD[kind]
    if h then f.hold = round1(r:range(h[1], h[2])) end
    f.arg = fault_arg(r, kind)
    list[#list + 1] = f
  end
  return list
end

local function work_arg(r, kind, t)
  if (kind == "create" or kind == "create_manual") and t.canary then
    return { bad = r:chance(M.BAD_CANARY) } -- its artifact named "...-bad", 5 % errors
  elseif kind == "metric" then
    return { metric = r:pick { "cpu", "memory" }, pod = "pod-" .. r:int(1, 3), high = r:chance(0.55) }
  elseif kind == "receiver_500" or kind == "receiver_hang" or kind == "deploy_fail" then
    return { seconds = round1(r:range(2, 8)) }
  elseif kind == "approve" then
    return { nth = r:int(1, 2), person = r:pick(M.APPROVERS) }
  elseif kind == "stop" or kind == "release" or kind == "build_fail" or kind == "build_missing"
      or kind == "rollout_fail" then
    return { nth = r:int(1, 4) } -- the nth newest pipeline of its target that fits
  end
end

local function work(r, o)
  local list, at = {}, 0.5
  local w = weights(M.WORK)
  local limited = {} -- the metric actions' targets: those with limits, when any says so
  for _, t in ipairs(o.targets) do if t.alerts then limited[#limited + 1] = t end end
  if #limited == 0 then limited = o.targets end
  while true do
    at = at + r:range(M.WORK_GAP[1], M.WORK_GAP[2])
    if round1(at) >= o.duration_s then break end
    local kind = r:weighted(w)
    local t = r:pick(kind == "metric" and limited or o.targets)
    list[#list + 1] = { at = round1(at), kind = kind, target = t, arg = work_arg(r, kind, t) }
  end
  return list
end

-- o = { seed, duration_s, servers = { names }, targets = { {app, env}... } }
function M.make(o)
  assert(math.type(o.seed) == "integer", "plan: seed")
  assert(#o.servers >= 2, "plan: at least two servers")
  assert(#o.targets >= 1, "plan: at least one application and environment")
  local r = rng.new(o.seed)
  return { seed = o.seed, faults = faults(r:fork("nemesis"), o), work = work(r:fork("workload"), o) }
end

-- "fault +12.5s kill s2" (+ what it holds or sets).
function M.line(f)
  local extra = ""
  if f.kind == "clock" then extra = (" %+ds"):format(f.arg)
  elseif f.kind == "hup_changed" then extra = " scan " .. f.arg end
  if f.hold then extra = extra .. (" for %.1fs"):format(f.hold) end
  return ("fault +%.1fs %s%s%s"):format(f.at, f.kind, f.target and (" " .. f.target) or "", extra)
end

return M
