-- The canary driver (issue 38): once a release's rollout is ready, the
-- rollout scan hands a pipeline whose policy plans steps (oops.policy.canary
-- .plan: weights, pauses, analyses) to M.drive at each tick, until every
-- step is done (ROLLING_OUT -> SUCCEEDED) or the canary is aborted (traffic
-- back to stable, weight 0, then ERROR: its on_failure decides what follows).
--
-- Each step exactly once, whoever dies when. The state is on the pipeline
-- row: `step` (1-based, 0 before the first), `step_at` (the database's
-- clock), `weight` and `weight_step` (the weight last confirmed set, and at
-- which step), `paused` ("operator", "inconclusive") and `canary_request`
-- (an operator's promote, promote_full or abort, from oopsctl or the page).
-- Every change of them is one transaction whose UPDATE is conditional on the
-- step, pause and request read this tick and fenced like a transition (this
-- lock session holds the pipeline's lock and this server's name lock), with
-- its event (CANARY_STEP, CANARY_PAUSED) and outbox row. A measurement is a
-- row of canary_measurement, unique per (pipeline, step, n), written by an
-- INSERT ... SELECT under the same fence: an heir continues the count and
-- never measures again what was recorded.
--
-- A weight: the driver of a step sets it (gw.set_weight), then confirms it
-- and moves on in one statement (weight, weight_step, step). Killed between
-- the two, its heir finds the step's weight unconfirmed and asks the gateway
-- (gw.weight) what the split is: already the step's weight -> confirm only;
-- otherwise (or a gateway that cannot say: exec) it sets it — a weight
-- command must be idempotent. So the simulated gateway records each weight
-- once per step.
local oops = require("oops")
local log = require("oops.log")
local analysis = require("oops.analysis")
local P = require("oops.pipelines")
local watch = require("oops.watch")

local M = {}
local SCAN = "rollout"

-- What this server knows of the measurements of the analysis step it drives
-- (id -> { step, n, failed, last }): read once per step, kept up to date as
-- it measures; pruned of pipelines no longer held (M.prune).
local seen = {}

local FENCE = "IS_USED_LOCK(CONCAT(?, id)) <=> ? AND IS_USED_LOCK(?) <=> ?"
local function fence_args()
  return P.lock_name(""), oops.locks.connection_id(), oops.locks.names.server_prefix .. oops.server_name(),
    oops.locks.connection_id()
end

-- (step_at first: an assignment sees the columns assigned before it.)
local STEP_UPDATE = "UPDATE pipeline SET step_at = IF(? = step, step_at, NOW(6)), step = ?, paused = ?, " ..
  "canary_request = ?, weight = COALESCE(?, weight), weight_step = COALESCE(?, weight_step), message = ? " ..
  "WHERE id = ? AND status = 'ROLLING_OUT' AND step = ? AND paused <=> ? AND canary_request <=> ? AND " .. FENCE
local EVENT_INSERT = "INSERT INTO pipeline_event (pipeline_id, event_type, from_status, to_status, message, " ..
  "server, lock_session, created_at) VALUES (?, ?, 'ROLLING_OUT', 'ROLLING_OUT', ?, ?, ?, NOW(6))"
local OUTBOX_INSERT = "INSERT INTO outbox (event_id, kind, ref_id) VALUES (CONCAT('pipeline-event-', ?), " ..
  "'pipeline', ?)"

-- One change of the canary's state, from what was read this tick (p) to
-- c = { step, paused, request (what is left of it: nil when consumed),
-- weight and weight_step (a weight confirmed now, and the step it was set
-- for), event, message }. true when made; false
-- when the pipeline changed meanwhile (or the fence refused); nil, err.
local function change(p, c)
  if not P.held(p) then return false end
  local ok, err = oops.db.begin()
  if not ok then return nil, err end
  local r
  r, err = oops.db.exec(STEP_UPDATE, c.step, c.step, c.paused, c.request, c.weight, c.weight_step,
    c.message, p.id, p.step, p.paused, p.canary_request, fence_args())
  if not r then
    oops.db.rollback()
    return nil, err
  end
  if r.affected ~= 1 then
    oops.db.rollback()
    log.info("canary step change lost: the pipeline changed meanwhile", { scan = SCAN, pipeline = p.id })
    return false
  end
  local ev
  ev, err = oops.db.exec(EVENT_INSERT, p.id, c.event or "CANARY_STEP", c.message, oops.server_name(),
    oops.locks.connection_id())
  if ev then ev, err = oops.db.exec(OUTBOX_INSERT, ev.insert_id, ev.insert_id) end
  if ev then ev, err = oops.db.commit() end
  if not ev then
    oops.db.rollback()
    return nil, err
  end
  watch.hint("outbox")
  log.info("canary: " .. c.message, { scan = SCAN, pipeline = p.id })
  p.step, p.paused, p.canary_request = c.step, c.paused, c.request
  if c.weight then p.weight, p.weight_step = c.weight, c.weight_step end
  return true
end

-- The request left after this change: a request other than `used` stays.
local function left(p, used)
  if used and p.canary_request == used then return nil end
  return p.canary_request
end

-- Set weight w for p unless the gateway already splits so. true | nil, err.
local function apply_weight(p, gw, w)
  if p.weight == w and p.weight_step == p.step then return true end
  if gw.weight then
    local now, err = gw.weight(p)
    if now == nil then return nil, "asking the gateway for the weight: " .. tostring(err) end
    if now == w then return true end
  end
  if not gw.set_weight then return nil, "this gateway cannot set a canary weight" end
  return gw.set_weight(p, w)
end

local function where(p, steps) return ("step %d/%d"):format(math.min(p.step, #steps), #steps) end

-- Abort: traffic back to stable (weight 0, confirmed), then ERROR.
-- Also the rollout scan's, for a failure once the steps began.
local function abort(p, steps, gw, why, fail)
  if not (p.weight == 0 and p.weight_step == p.step) then
    local ok, err = apply_weight(p, gw, 0)
    if not ok then
      log.warn("canary abort: setting weight 0 failed (next tick): " .. tostring(err), { scan = SCAN, pipeline = p.id })
      return
    end
    if change(p, { step = p.step, paused = p.paused, request = p.canary_request, weight = 0, weight_step = p.step,
      message = ("%s: weight 0, traffic back to stable (aborting: %s)"):format(where(p, steps), why) }) ~= true then
      return
    end
  end
  seen[p.id] = nil
  fail(p, "Canary aborted: " .. why .. ".")
end

-- Every step done: all traffic on the release (weight 100), SUCCEEDED.
local function finish(p, steps, gw, t)
  if p.weight ~= 100 then
    local ok, err = apply_weight(p, gw, 100)
    if not ok then
      log.warn("canary: setting weight 100 failed (next tick): " .. tostring(err), { scan = SCAN, pipeline = p.id })
      return
    end
    if change(p, { step = p.step, request = nil, weight = 100, weight_step = p.step,
      message = ("promoted: weight 100, all traffic on %s"):format(p.artifact or "the release") }) ~= true then
      return
    end
  end
  seen[p.id] = nil
  t(p, "ROLLING_OUT", "SUCCEEDED", ("Canary promoted after %d steps: all traffic on the release."):format(#steps))
end

local function next_step(p, message, used, weight)
  return change(p, { step = p.step + 1, request = left(p, used), weight = weight, weight_step = weight and p.step,
    message = message })
end

-- The measurements of p's current step: { step, n, failed, last_n }.
local MEASURED = "SELECT n, verdict FROM canary_measurement WHERE pipeline_id = ? AND step = ? ORDER BY n"
local function measurements(p, a)
  local m = seen[p.id]
  if m and m.step == p.step then return m end
  local rows, err = oops.db.exec(MEASURED, p.id, p.step)
  if not rows then return nil, err end
  m = { step = p.step, n = 0, failed = 0, inconclusive = 0 }
  for _, r in ipairs(rows) do
    m.n = math.max(m.n, r.n)
    if r.verdict == "fail" or (r.verdict == "inconclusive" and a.inconclusive == "fail") then
      m.failed = m.failed + 1
    end
    if r.verdict == "inconclusive" then m.inconclusive = m.inconclusive + 1 end
  end
  seen[p.id] = m
  return m
end

local RECORD = "INSERT INTO canary_measurement (pipeline_id, step, n, analysis, value, verdict, detail, server) " ..
  "SELECT id, step, ?, ?, ?, ?, ?, ? FROM pipeline WHERE id = ? AND status = 'ROLLING_OUT' AND step = ? AND " .. FENCE

-- Measure once and record it: the measurement, or nil when it was not
-- recorded (lost the fence, a database error: measured again later).
local function measure(p, a, m)
  local r = analysis.measure(a, p)
  if not P.held(p) then return nil end
  local n = m.n + 1
  local ok, err, name = oops.db.exec(RECORD, n, a.name, r.value, r.verdict, r.detail, oops.server_name(),
    p.id, p.step, fence_args())
  if not ok then
    if name == "exists" then seen[p.id] = nil end -- recorded by someone: read again
    log.warn("recording a measurement failed: " .. tostring(err), { scan = SCAN, pipeline = p.id })
    return nil
  end
  if ok.affected ~= 1 then return nil end
  m.n = n
  if r.verdict == "fail" or (r.verdict == "inconclusive" and a.inconclusive == "fail") then m.failed = m.failed + 1 end
  log.info(("canary analysis %s %d/%d: %s (%s)"):format(a.name, n, a.count, r.verdict, r.detail),
    { scan = SCAN, pipeline = p.id })
  return r
end

local function analysis_step(p, steps, s, pol, gw, fail)
  local a = pol.analyses and pol.analyses[s.analysis]
  if not a then
    if p.paused ~= "inconclusive" then
      change(p, { step = p.step, paused = "inconclusive", request = p.canary_request, event = "CANARY_PAUSED",
        message = ("%s: analysis %s is not in the policy any more; paused until an operator promotes or aborts")
          :format(where(p, steps), s.analysis) })
    end
    return
  end
  local m, err = measurements(p, a)
  if not m then
    log.warn("reading measurements failed: " .. tostring(err), { scan = SCAN, pipeline = p.id })
    return
  end
  local verdict
  if m.failed > a.failure_limit then
    return abort(p, steps, gw, ("analysis %s failed: %d of %d measurements failed (limit %d)")
      :format(a.name, m.failed, m.n, a.failure_limit), fail)
  end
  if p.paused then return end -- inconclusive: an operator promotes or aborts
  if m.n < a.count and (p.step_age or 0) * 1000 >= (m.n + 1) * a.interval_ms then
    local r = measure(p, a, m)
    if not r then return end
    verdict = r.verdict
    if m.failed > a.failure_limit then
      return abort(p, steps, gw, ("analysis %s failed: %d of %d measurements failed (limit %d)")
        :format(a.name, m.failed, m.n, a.failure_limit), fail)
    end
    if verdict == "inconclusive" and a.inconclusive == "pause" then
      change(p, { step = p.step, paused = "inconclusive", request = p.canary_request, event = "CANARY_PAUSED",
        message = ("%s: analysis %s %d/%d inconclusive: %s; paused until an operator promotes or aborts")
          :format(where(p, steps), a.name, m.n, a.count, r.detail) })
      return
    end
  end
  if m.n >= a.count then
    next_step(p, ("%s: analysis %s: %d/%d passed"):format(where(p, steps), a.name, m.n - m.failed, a.count))
  end
end

local function pause_step(p, steps, s)
  if s.pause == true then
    if p.paused ~= "operator" then
      change(p, { step = p.step, paused = "operator", request = p.canary_request, event = "CANARY_PAUSED",
        message = where(p, steps) .. ": paused until an operator promotes" })
    end
  elseif (p.step_age or 0) * 1000 >= s.pause_ms then
    next_step(p, ("%s: pause of %s over"):format(where(p, steps), require("oops.duration").format(s.pause_ms)))
  end
end

-- Drive p (ROLLING_OUT, its rollout ready) one tick along `steps`.
-- t(p, from, to, message) and fail(p, message) are the rollout scan's.
function M.drive(p, pol, gw, steps, t, fail)
  local req = p.canary_request
  if req == "abort" then return abort(p, steps, gw, "by an operator", fail) end
  if p.step == 0 then return next_step(p, ("canary of %d steps begins"):format(#steps)) end
  if p.step > #steps then return finish(p, steps, gw, t) end
  if req == "promote_full" then
    return change(p, { step = #steps + 1, request = nil,
      message = where(p, steps) .. ": promoted fully by an operator" })
  end
  local s = steps[p.step]
  if s.weight then
    local ok, err = apply_weight(p, gw, s.weight)
    if not ok then
      log.warn(("canary: setting weight %d failed (next tick): %s"):format(s.weight, tostring(err)),
        { scan = SCAN, pipeline = p.id })
      return
    end
    return next_step(p, ("%s: weight %d"):format(where(p, steps), s.weight), nil, s.weight)
  end
  if req == "promote" then
    return next_step(p, where(p, steps) .. ": promoted by an operator", "promote")
  end
  if s.pause or s.pause_ms then return pause_step(p, steps, s) end
  if s.analysis then return analysis_step(p, steps, s, pol, gw, fail) end
end

M.abort = abort

-- Forget what is kept of pipelines this server no longer holds.
function M.prune()
  for id in pairs(seen) do
    if not oops.locks.holds(P.lock_name(id)) then seen[id] = nil end
  end
end

return M
