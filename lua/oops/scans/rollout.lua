-- The rollout scan (REFERENCE.md sections 5, 6, 12), with the sweep:
--   1. snapshot the pipeline locks this server holds,
--   2. then query the active pipelines (a page at a time, driving each page:
--      DEPLOYING past the deploy timeout → ERROR, so a server that died
--      mid-deploy never strands a pipeline, and ROLLING_OUT → health),
--   3. release the held locks whose pipeline was not among them (stopping
--      the build of a STOPPED one first).
-- In that order: a lock the build scan takes between 1 and 2 is not in the
-- snapshot, so it is never swept as "no longer active".
local oops = require("oops")
local log = require("oops.log")
local msg = require("oops.messages")
local P = require("oops.pipelines")
local safety = require("oops.release")
local canary = require("oops.canary")
local plan = require("oops.policy.canary").plan

local M = { name = "rollout" }
local SCAN = "rollout"

local ACTIVE = { "INITIALIZED", "RUNNING", "BUILD_SUCCEEDED", "DEPLOYING", "ROLLING_OUT" }

local function t(p, from, to, message) return P.transition(p, from, to, message, SCAN) end

-- A release failing at or after its deploy: to ERROR, with the automatic
-- rollback in the same transaction when its policy asks for one.
local function fail(p, pol, from, message)
  return P.transition(p, from, "ERROR", message, SCAN, safety.failure_extra(pol, p, from, message))
end

-- gone: id → lock name of each held pipeline lock whose pipeline the query
-- did not list as active. They are read SWEEP_PAGE ids at a time (one
-- statement each), and the locks to let go are released together (one
-- statement per page): a fifth of a scan's page, as the whole rows are kept
-- until their locks go.
local SWEEP_PAGE = 100
local function sweep(gone, gw)
  local ids = {}
  for id in pairs(gone) do ids[#ids + 1] = id end
  table.sort(ids)
  for i = 1, #ids, SWEEP_PAGE do
    local chunk = table.move(ids, i, math.min(i + SWEEP_PAGE - 1, #ids), 1, {})
    local rows, lerr = oops.store.list { ids = chunk }
    if not rows then
      -- Cannot read them: keep the locks (a build may need stopping), try
      -- again next tick.
      log.warn("reading finished pipelines failed, their locks kept: " .. tostring(lerr), { scan = SCAN })
    else
      local by_id = {}
      for _, p in ipairs(rows) do by_id[p.id] = p end
      local release = {}
      for _, id in ipairs(chunk) do
        local p, keep = by_id[id], false
        if p and p.status == "STOPPED" then
          local ok, err = gw.build_stop(p)
          if not ok then
            -- Keep the lock: the next tick tries to stop the job again.
            log.warn("stopping the build of a stopped pipeline failed: " .. tostring(err),
              { scan = SCAN, pipeline = id })
            keep = true
          else
            log.info("stopped: build job stopped, lock released", { scan = SCAN, pipeline = id })
          end
        elseif p and gw.release then
          -- ERROR or SUCCEEDED: a deploy or health command still running for
          -- it (a timeout failed it) is stopped before the lock goes.
          gw.release(p)
        end
        -- (A pipeline no longer there at all has nothing left to stop.)
        if not keep then release[#release + 1] = gone[id] end
      end
      if #release > 0 then oops.locks.release_many(release) end
    end
  end
end

-- Builds still running for a finished pipeline whose driver died before it
-- stopped them (a STOPPED pipeline's driver SIGKILLed, a timed-out build's
-- driver cut off): take the pipeline's free lock, read the pipeline again
-- under it, stop its build, release. One server gets the lock; the gateway's
-- own claim makes the stop happen once.
local function stop_orphans(gw)
  if not gw.build_orphans then return end
  local ids, err = gw.build_orphans(100)
  if not ids then
    log.warn("listing builds of finished pipelines failed: " .. tostring(err), { scan = SCAN })
    return
  end
  local names = {}
  for _, id in ipairs(ids) do
    if not oops.locks.holds(P.lock_name(id)) then names[#names + 1] = P.lock_name(id) end
  end
  if #names == 0 then return end
  local got = oops.locks.acquire_many(names)
  if not got then return end
  for _, name in ipairs(names) do
    if got[name] then
      local id = P.lock_id(name)
      local p = oops.store.get(id)
      if p and (p.status == "STOPPED" or p.status == "ERROR") then
        local ok, serr = gw.build_stop(p)
        if ok then
          log.info("stopped the build its dead driver left running", { scan = SCAN, pipeline = id })
        else
          log.warn("stopping a finished pipeline's build failed (next tick): " .. tostring(serr),
            { scan = SCAN, pipeline = id })
        end
      end
      oops.locks.release(name)
    end
  end
end

local function deploying(p, pol)
  -- status_age is computed in SQL against NOW(6): no server clock, and no
  -- server restart, moves it.
  if p.status_age * 1000 >= pol.deploy.timeout_ms then
    fail(p, pol, "DEPLOYING", msg.deploy_timed_out)
  end
end

-- A release whose policy plans canary steps (oops.policy.canary.plan; never
-- a rollback: it returns to a release that was live) goes through them once
-- its rollout is ready (oops.canary); once they began, a failure sends its
-- traffic back to stable before it fails, and the rollout timeouts no
-- longer apply (a pause may wait for an operator).
local function steps_of(p, pol)
  if p.trigger == "rollback" then return nil end
  return plan(pol, p)
end

local function rolling_out(p, pol, gw)
  local steps = steps_of(p, pol)
  local begun = steps and (p.step or 0) > 0
  local function failed(message)
    if begun then
      canary.abort(p, steps, gw, message:gsub("%.$", ""), function(q, m) fail(q, pol, "ROLLING_OUT", m) end)
    else
      fail(p, pol, "ROLLING_OUT", message)
    end
  end
  local h, err, code = gw.rollout_health(p)
  if not h and code == "invalid" then
    failed(msg.refused .. tostring(err))
    return
  elseif not h then
    log.warn("rollout health unavailable: " .. tostring(err), { scan = SCAN, pipeline = p.id })
  elseif h.missing then
    failed(msg.workload_missing)
    return
  elseif h.failure then
    failed(msg.deploy_failed .. h.failure)
    return
  elseif h.complete and steps then
    canary.drive(p, pol, gw, steps, t, function(q, m) fail(q, pol, "ROLLING_OUT", m) end)
    return
  elseif h.complete then
    t(p, "ROLLING_OUT", "SUCCEEDED", msg.succeeded)
    return
  end
  if begun then
    -- Not ready mid-canary: only the time not ready counts (a gateway that
    -- cannot say leaves it to the operator's abort).
    if h and h.not_ready_for and h.not_ready_for * 1000 >= pol.rollout.timeout_ms then
      failed(msg.rollout_timed_out)
    end
    return
  end
  -- Not ready (or the gateway did not answer): bounded by the rollout
  -- timeout; exactly the timeout counts (REFERENCE 5). A gateway that says
  -- how long it has been not ready restarts that count when readiness flaps;
  -- rollout.max bounds the whole stay in ROLLING_OUT on the database's clock.
  local age = p.status_age
  if h and h.not_ready_for then age = h.not_ready_for end
  if age * 1000 >= pol.rollout.timeout_ms then
    fail(p, pol, "ROLLING_OUT", msg.rollout_timed_out)
  elseif p.status_age * 1000 >= (pol.rollout.max_ms or math.huge) then
    fail(p, pol, "ROLLING_OUT", msg.rollout_max)
  end
end

local function wanted(p) return p.status == "DEPLOYING" or p.status == "ROLLING_OUT" end
local FREE = { statuses = { "DEPLOYING", "ROLLING_OUT" } }

function M.run(pol, gw)
  -- The snapshot, before the query (see the header): the pipeline locks held,
  -- struck off as the query lists them active; what is left is swept.
  local gone, held = {}, {}
  for _, name in ipairs(oops.locks.held()) do
    local id = P.lock_id(name)
    if id then
      gone[id] = name
      held[#held + 1] = id
    end
  end
  local ok, err = P.stream {
    scan = SCAN, pol = pol, statuses = ACTIVE, wanted = wanted, free = FREE, held = held,
    seen = function(p) gone[p.id] = nil end,
    handlers = {
      DEPLOYING = function(p) deploying(p, pol) end,
      ROLLING_OUT = function(p) rolling_out(p, pol, gw) end,
    },
  }
  if not ok then error("listing pipelines: " .. tostring(err)) end
  local more = err -- P.stream's second answer: more free ones wait than this tick took
  if not oops.locks.is_up() then
    log.warn("lock session down: sweeping nothing", { scan = SCAN })
    if gw.prune then gw.prune() end
    return
  end
  sweep(gone, gw)
  if require("oops.watch").orphans_due() then stop_orphans(gw) end
  -- What the gateway remembers of pipelines no longer held (let go above,
  -- lost with the lock session, taken by another server) goes now.
  if gw.prune then gw.prune() end
  canary.prune()
  if more then return P.MORE end
end

return M
