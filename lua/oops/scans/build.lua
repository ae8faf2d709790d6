-- The build scan (DESIGN.md "The engine"; REFERENCE.md sections 3, 4, 9, 12):
-- INITIALIZED → claim RUNNING, then submit the build (claim, then act), or,
-- for a rollback, deploy at once;
-- RUNNING → ask the build's status; BUILD_SUCCEEDED with a deploy request →
-- deploy. Every step first takes the pipeline's lock (batched for the scan).
local oops = require("oops")
local log = require("oops.log")
local msg = require("oops.messages")
local P = require("oops.pipelines")
local hooks = require("oops.hooks")
local release = require("oops.release")

local M = { name = "build" }

local SCAN = "build"

local function t(p, from, to, message, extra) return P.transition(p, from, to, message, SCAN, extra) end

-- Claim DEPLOYING, apply the artifact, claim ROLLING_OUT. A lost claim means
-- the pipeline was stopped (or taken) meanwhile: announce nothing, do nothing.
-- Before the claim, what may hold a release (oops.release): approvals it
-- still waits for (issue 39), a closed deploy window or a freeze (not for a rollback, nor once overridden), then a
-- deploy slot, claimed with DEPLOYING in one transaction; a held pipeline
-- waits (its message says why) and is tried again next tick.
function M.deploy(p, from, gw, pol)
  local hold = release.approval_hold(pol, p) or release.window_hold(pol, p)
  if hold then return release.wait(p, from, hold, t) end
  local slots = release.slots(pol, p)
  local won, done, code = t(p, from, "DEPLOYING", msg.deploying, slots and { slot = slots })
  if won == false and done and done.no_slot then
    return release.wait(p, from, release.slot_hold(p, slots, done), t)
  end
  if won == nil and code == "exists" then
    -- A manual release beside an unfinished pipeline: refuse it once, visibly.
    oops.db.exec("UPDATE pipeline SET deploy_requested_at = NULL, message = ? " ..
      "WHERE id = ? AND status = 'BUILD_SUCCEEDED'", msg.deploy_refused, p.id)
    log.warn(msg.deploy_refused, { scan = SCAN, pipeline = p.id })
    return
  end
  if not won then return end
  release.released(p)
  local ok, derr, dcode = gw.deploy(p)
  -- After the deploy, the next claim is tried again past a database error.
  if not ok then
    local m = (dcode == "invalid" and msg.refused or msg.deploy_failed) .. tostring(derr)
    P.transition_after(p, "DEPLOYING", "ERROR", m, SCAN, release.failure_extra(pol, p, "DEPLOYING", m))
    return
  end
  P.transition_after(p, "DEPLOYING", "ROLLING_OUT", msg.rolling_out, SCAN)
end

local function initialized(p, gw, pol)
  if p.trigger == "rollback" or p.trigger == "promotion" then
    -- A rollback redeploys an artifact an earlier pipeline built and shipped
    -- (REFERENCE 9), a promotion one that went live in the environment before
    -- (issue 39): INITIALIZED → DEPLOYING → ROLLING_OUT, no build.
    M.deploy(p, "INITIALIZED", gw, pol)
    return
  end
  if not t(p, "INITIALIZED", "RUNNING", msg.build_started) then return end
  local ok, err, code = gw.build_submit(p)
  if not ok then
    -- REFERENCE 12.5: never leave it INITIALIZED/RUNNING without a job.
    -- "invalid": the gateway refused an argument (nothing was run).
    t(p, "RUNNING", "ERROR", (code == "invalid" and msg.refused or msg.build_not_submitted) .. tostring(err))
  end
end

local function running(p, gw, pol)
  local st, err, code = gw.build_status(p)
  if not st and code == "invalid" then
    -- Refused by the gateway (a job handle that would be taken for an
    -- option): asking again would refuse again.
    t(p, "RUNNING", "ERROR", msg.refused .. tostring(err))
    return
  elseif not st then
    -- A gateway error is transient: the next tick asks again (REFERENCE 12.6),
    -- bounded by the build timeout below.
    log.warn("build status unavailable: " .. tostring(err), { scan = SCAN, pipeline = p.id })
  elseif st == "succeeded" then
    if p.manual then
      t(p, "RUNNING", "BUILD_SUCCEEDED", msg.build_succeeded)
    else
      M.deploy(p, "RUNNING", gw, pol)
    end
    return
  elseif st == "failed" then
    t(p, "RUNNING", "ERROR", msg.build_failed)
    return
  elseif st == "missing" then
    -- The seed: a missing job fails the build at once; it never comes back.
    if hooks.call("on_build_lost", p) == "resubmit" then
      -- Submitting is not fenced by a transition: the database must agree
      -- the lock is ours right now, or the next tick (or driver) decides.
      if not P.verified(p) then
        log.warn("build job missing: not resubmitting, the lock is not verifiably ours",
          { scan = SCAN, pipeline = p.id })
        return
      end
      log.warn("build job missing: resubmitting (on_build_lost)", { scan = SCAN, pipeline = p.id })
      local ok, serr = gw.build_submit(p)
      if ok then return end
      t(p, "RUNNING", "ERROR", "Build could not be resubmitted: " .. tostring(serr))
      return
    end
    t(p, "RUNNING", "ERROR", msg.build_missing)
    return
  end
  -- running, pending (a job without a status yet), or a gateway error
  if p.status_age * 1000 >= pol.build.timeout_ms then
    -- The job must not outlive its pipeline: stop it once the timeout failed it.
    if t(p, "RUNNING", "ERROR", msg.build_timed_out) then
      local ok, serr = gw.build_stop(p)
      if not ok then
        log.warn("stopping a timed-out build failed: " .. tostring(serr), { scan = SCAN, pipeline = p.id })
      end
    end
  end
end

-- Candidates (pipelines.stream): INITIALIZED, RUNNING, and BUILD_SUCCEEDED
-- with a deploy request, held or free.
local STATUSES = { "INITIALIZED", "RUNNING", "BUILD_SUCCEEDED" }
-- (An automatic release in BUILD_SUCCEEDED is one that waits: a window, a
-- freeze or a slot holds it.)
local function wanted(p) return p.status ~= "BUILD_SUCCEEDED" or p.deploy_requested_at ~= nil or not p.manual end
local FREE = { statuses = STATUSES, deploy_requested = true }

-- engine.MORE when more free pipelines wait than this tick took.
function M.run(pol, gw)
  local ok, err = P.stream {
    scan = SCAN, pol = pol, statuses = STATUSES, wanted = wanted, free = FREE,
    handlers = {
      INITIALIZED = function(p) initialized(p, gw, pol) end,
      RUNNING = function(p) running(p, gw, pol) end,
      BUILD_SUCCEEDED = function(p) M.deploy(p, "BUILD_SUCCEEDED", gw, pol) end,
    },
  }
  if not ok then error("listing pipelines: " .. tostring(err)) end
  if err then return P.MORE end
end

return M
