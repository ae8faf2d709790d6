-- Release safety (issue 26): what holds a release before its deploy — a deploy
-- window that is closed, a freeze, no free deploy slot — and the automatic
-- rollback of a release that failed at or after its deploy.
--
-- Holds are judged by the server that holds the pipeline, every build tick,
-- on the database's clock; the pipeline waits in BUILD_SUCCEEDED (an
-- automatic release is unfinished there, schema 12) or, a rollback waiting
-- for a slot, in INITIALIZED, its message saying why and its `hold` column
-- naming the kind. Slots and rollbacks are the database's: a slot is claimed
-- in the transaction that claims DEPLOYING, a rollback made in the one that
-- fails its release (pipeline_store.c, pipeline_store_transition_ex).
local oops = require("oops")
local log = require("oops.log")
local leader = require("oops.leader")

local M = {}

-- The database's clock, read at most every CLOCK_MS (between reads, the
-- monotonic clock carries it on).
M.CLOCK_MS = 10000
local clock -- { db = epoch, mono = oops.now_ms() }

function M.now()
  local mono = oops.now_ms()
  if not clock or mono - clock.mono >= M.CLOCK_MS then
    local now = leader.db_now()
    if not now then
      if not clock then return nil end
    else
      clock = { db = now, mono = mono }
    end
  end
  return clock.db + (mono - clock.mono) / 1000
end

local app_of = require("oops.policy.canary").app_of

-- What the policy does when this release fails at or after its deploy:
-- "rollback" or "fail".
function M.on_failure(pol, p)
  local a = app_of(pol, p)
  if a and a.rollout and a.rollout.on_failure then return a.rollout.on_failure end
  return pol and pol.rollout and pol.rollout.on_failure or "fail"
end

-- The `extra` of a transition to ERROR (oops.store.transition): the
-- automatic rollback, for a release failing at or after its deploy whose
-- policy asks for one; nil otherwise (a rollback never triggers another).
M.MAX_REASON = 300
function M.failure_extra(pol, p, from, message)
  if p.trigger == "rollback" or (from ~= "DEPLOYING" and from ~= "ROLLING_OUT") then return nil end
  if M.on_failure(pol, p) ~= "rollback" then return nil end
  local reason = tostring(message or "failed"):gsub("%.$", "")
  if #reason > M.MAX_REASON then reason = reason:sub(1, M.MAX_REASON) .. "…" end
  return { rollback = ("Automatic rollback after %s failed: %s."):format(p.id, reason) }
end

-- The deploy slots of the pipeline's environment ({environment, count}),
-- or nil when the policy does not bound it.
function M.slots(pol, p)
  local c = pol and pol.deploy and pol.deploy.concurrency
  local n = c and c[p.environment]
  if n then return { environment = p.environment, count = n } end
end

-- How many approvals a release of p needs before its deploy (issue 39: the
-- application's approvals = { ENV = N }); 0 when none.
function M.approvals_needed(pol, p)
  if p.trigger == "rollback" then return 0 end
  local a = app_of(pol, p)
  return a and a.approvals and a.approvals[p.environment] or 0
end

-- The approvals this release still waits for: { kind = "approval", message },
-- or nil. Approvals only grow (one conditional UPDATE each, src/operator.c),
-- so a count read before the DEPLOYING claim cannot be too high at the claim.
-- Neither a rollback (it restores a known release) nor an override skips it:
-- one person cannot stand for two.
function M.approval_hold(pol, p)
  local need = M.approvals_needed(pol, p)
  local have = p.approvals or 0
  if have >= need then return nil end
  local who = p.approved_by and (" (approved by " .. p.approved_by:gsub(",", ", ") .. ")") or ""
  return { kind = "approval", message = ("Waiting for approval: %d of %d%s; `oopsctl approve %s --reason TEXT`" ..
    " by another person than its creator."):format(have, need, who, p.id) }
end

-- A window or freeze that holds this release now: { kind, message }, or nil.
-- Rollbacks are never held (they restore a known release); nor is a
-- release an operator overrode.
function M.window_hold(pol, p)
  if p.trigger == "rollback" or p.override_at then return nil end
  local a = app_of(pol, p)
  local freezes = pol and pol.freezes or {}
  if #freezes == 0 and not (a and a.windows and a.windows[p.environment]) then return nil end
  local now = M.now()
  if not now then
    -- No clock: hold rather than deploy into a freeze we cannot see.
    return { kind = "window", message = "Waiting: the database's clock could not be read." }
  end
  return require("oops.windows").hold(pol, p, now)
end

-- The hold of a pipeline that found no free slot (done: the transition's
-- answer, oops.TransitionDone).
function M.slot_hold(p, slots, done)
  local m = ("Waiting for a %s deploy slot: %d of %d in use"):format(p.environment, done.slots_in_use or 0, slots.count)
  if (done.slots_ahead or 0) > 0 then
    m = m .. (", %d ahead in line"):format(done.slots_ahead)
  end
  return { kind = "slot", message = m .. "." }
end

-- Record that p waits (hold = { kind, message }): its message and hold
-- column, written only when they change (a tick that finds the same hold
-- writes nothing). from RUNNING (an automatic release whose build just
-- succeeded) it first moves to BUILD_SUCCEEDED, announced with that message.
function M.wait(p, from, hold, transition)
  if from == "RUNNING" then
    if not transition(p, "RUNNING", "BUILD_SUCCEEDED", hold.message) then return end
    from = "BUILD_SUCCEEDED"
  elseif p.message == hold.message and p.hold == hold.kind then
    return
  end
  local r, err = oops.db.exec("UPDATE pipeline SET message = ?, hold = ? WHERE id = ? AND status = ?",
    hold.message, hold.kind, p.id, from)
  if not r then
    log.warn("recording a hold failed: " .. tostring(err), { scan = "build", pipeline = p.id })
    return
  end
  if p.hold ~= hold.kind then
    log.info("held: " .. hold.message, { scan = "build", pipeline = p.id, hold = hold.kind })
  end
  p.message, p.hold = hold.message, hold.kind
end

-- After DEPLOYING was claimed: the hold it waited under is over.
function M.released(p)
  if p.hold then
    oops.db.exec("UPDATE pipeline SET hold = NULL WHERE id = ? AND hold IS NOT NULL", p.id)
    p.hold = nil
  end
end

return M
