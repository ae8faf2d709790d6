-- What every scenario proves at its end, whatever it did (issue 6): read from
-- the database the servers wrote (pipeline_event, sim_call, restart_run, the
-- outbox) and from the scenario's webhook receiver, never from what the
-- servers say about themselves.
--
--   * no pipeline left a status twice, and no side effect happened twice:
--     build submit, deploy (sim_call per pipeline), an external build's
--     submit and cancel (exec_job), restart (sim_call per
--     target against the occurrences fired), alert announcement (one FIRING
--     and one RESOLVED per episode), and the alert state agrees with them;
--   * every notification was delivered at least once (outbox, receiver);
--   * every pipeline finished, every restart claim has its outcome, and no
--     build runs on for a STOPPED or ERROR pipeline;
--   * after a fault on a server (kill, freeze, cut, partition), that server
--     made no transition on a pipeline another server had taken over since.
--     Transitions the conditional update refused are not in pipeline_event,
--     so they never count.
--
-- M.verify(ctx) → list of { desc, ok, diag } checks; M.report(ctx) → lines.
-- ctx = { sql = fn(query, ...) → rows, faults = { {kind, server, session, at}... },
--         receivers = { r... } (each must have got every event), began = epoch
--         seconds (database clock) }
local json = require("oops.json")

local M = {}

local function n(x) return tonumber(x) or 0 end

local function list(rows, fmt, max)
  local out = {}
  for i, r in ipairs(rows) do
    if i > (max or 5) then out[#out + 1] = ("... and %d more"):format(#rows - (max or 5)); break end
    out[#out + 1] = fmt(r)
  end
  return table.concat(out, "; ")
end

-- Faults that can leave a live server believing in locks it lost.
local LOSES_LOCKS = { kill = true, freeze = true, cut = true, partition = true, db_restart = true }

-- After a fault on X at t: once another server transitioned a pipeline
-- (after t), X must not transition it again with the lock session it had
-- at the fault (a new session after reconnecting takes locks anew).
local function late_transitions(ctx)
  local sql = ctx.sql
  -- A database restart numbers sessions from 1 again: a session number seen
  -- after one is another session, so a fault's window ends at the next
  -- restart, and a restart is no such fault itself (all its sessions are
  -- gone; the transitions' fence keeps their servers out).
  local function next_restart(t)
    local first = math.huge
    for _, g in ipairs(ctx.faults or {}) do
      if g.kind == "db_restart" and g.at > t and g.at < first then first = g.at end
    end
    return first == math.huge and 4e9 or first
  end
  local late = {}
  for _, f in ipairs(ctx.faults or {}) do
    if LOSES_LOCKS[f.kind] and f.kind ~= "db_restart" and f.server then
      for _, r in ipairs(sql([[
          SELECT x.pipeline_id, x.from_status, x.to_status, x.created_at, y.server AS taker
          FROM pipeline_event x
          JOIN pipeline_event y ON y.pipeline_id = x.pipeline_id AND y.server <> x.server
            AND y.server NOT LIKE 'oopsctl@%' AND y.actor IS NULL AND y.id < x.id
            AND UNIX_TIMESTAMP(y.created_at) >= ?
          WHERE x.server = ? AND UNIX_TIMESTAMP(x.created_at) >= ? AND UNIX_TIMESTAMP(x.created_at) < ?
            AND (? = 0 OR x.lock_session = ?)
          GROUP BY x.id]], f.at, f.server, f.at, next_restart(f.at), f.session or 0, f.session or 0)) do
        late[#late + 1] = { what = ("%s made %s's %s -> %s at %s after %s had taken it over (fault: %s)"):format(
          f.server, r.pipeline_id, r.from_status, r.to_status, r.created_at, r.taker, f.kind) }
      end
    end
  end
  return late
end

-- Release safety (issue 26), into `check` (checks' reporter).
local function release_checks(ctx, check)
  local sql = ctx.sql
  -- Release safety (issue 26): an automatic rollback only after its release
  -- failed at or after its deploy, made once (its own event after that
  -- failure), to an artifact that went live.
  check("each automatic rollback follows one release that failed at or after its deploy", sql([[
      SELECT r.id, r.rollback_of, f.status, f.trigger_type,
        (SELECT COUNT(*) FROM pipeline x WHERE x.rollback_of = r.rollback_of) AS made,
        (SELECT COUNT(*) FROM pipeline_event e WHERE e.pipeline_id = f.id AND e.to_status = 'ERROR'
           AND e.from_status IN ('DEPLOYING', 'ROLLING_OUT')) AS failed_after_deploy,
        (SELECT COUNT(*) FROM pipeline l WHERE l.namespace = r.namespace AND l.application = r.application
           AND l.environment = r.environment AND l.status = 'SUCCEEDED' AND l.artifact <=> r.artifact
           AND l.created_at < f.created_at) AS live
      FROM pipeline r LEFT JOIN pipeline f ON f.id = r.rollback_of
      WHERE r.rollback_of IS NOT NULL HAVING f.status IS NULL OR f.status <> 'ERROR'
        OR f.trigger_type NOT IN ('release', 'promotion') OR made <> 1 OR failed_after_deploy <> 1 OR live = 0]]),
    function(bad) return list(bad, function(r)
      return ("%s rolls back %s (%s, %s; %d made, %d failures after deploy, %d live)"):format(r.id,
        tostring(r.rollback_of), tostring(r.status), tostring(r.trigger_type), n(r.made),
        n(r.failed_after_deploy), n(r.live)) end) end)

  local rel = ctx.release or {}
  if rel.slots then
    check("never more pipelines DEPLOYING or ROLLING_OUT in an environment than its deploy slots",
      M.slot_overlaps(sql, rel.slots), function(bad) return list(bad, function(r) return r.what end) end)
  end
  if rel.freezes then
    check("nothing deployed inside a freeze without an override", M.frozen_deploys(sql, rel.freezes),
      function(bad) return list(bad, function(r) return r.what end) end)
  end
end

local function checks(ctx)
  local sql, out = ctx.sql, {}
  local function check(desc, bad, diag)
    out[#out + 1] = { desc = desc, ok = #bad == 0, diag = #bad > 0 and diag(bad) or nil }
  end

  check("no pipeline left a status twice", sql([[
      SELECT pipeline_id, from_status, COUNT(*) AS times FROM pipeline_event
      WHERE from_status IS NOT NULL AND from_status <> to_status
      GROUP BY pipeline_id, from_status HAVING COUNT(*) > 1]]),
    function(bad) return list(bad, function(r)
      return ("%s left %s %d times"):format(r.pipeline_id, r.from_status, n(r.times)) end) end)

  check("no build was submitted twice and no deploy made twice", sql([[
      SELECT pipeline_id, action, COUNT(*) AS times FROM sim_call
      WHERE pipeline_id IS NOT NULL AND action IN ('build_submit', 'deploy')
      GROUP BY pipeline_id, action HAVING COUNT(*) > 1]]),
    function(bad) return list(bad, function(r)
      return ("%s: %s %d times"):format(r.pipeline_id, r.action, n(r.times)) end) end)

  -- External builds (exec gateway): exec_job counts every submit and every
  -- cancel claim of a pipeline's build. None of the scenarios resubmits a
  -- lost external build (on_build_lost), so more than one submit is a fault.
  check("no external build was submitted twice or cancelled twice", sql([[
      SELECT pipeline_id, submits, cancels FROM exec_job
      WHERE kind = 'build' AND mode = 'external' AND (submits > 1 OR cancels > 1)]]),
    function(bad) return list(bad, function(r)
      return ("%s: %d submits, %d cancels"):format(r.pipeline_id, n(r.submits), n(r.cancels)) end) end)

  -- Nothing keeps running for a finished pipeline: a STOPPED or ERROR
  -- pipeline's build was stopped (simulated: its job marked stopped;
  -- external: cancelled), whoever drove it and whatever died.
  check("no build left running for a stopped or failed pipeline", sql([[
      SELECT p.id, p.status, 'external job ' AS what, j.handle AS job FROM exec_job j
        JOIN pipeline p ON p.id = j.pipeline_id
      WHERE j.kind = 'build' AND j.mode = 'external' AND j.state = 'running' AND j.cancel_state IS NULL
        AND p.status IN ('STOPPED', 'ERROR')
      UNION ALL
      SELECT p.id, p.status, 'simulated job' AS what, j.pipeline_id AS job FROM sim_job j
        JOIN pipeline p ON p.id = j.pipeline_id
      WHERE j.kind = 'build' AND p.status IN ('STOPPED', 'ERROR')
        AND (j.outcome = 'pending' OR (j.outcome IS NULL AND NOW(6) < j.ready_at))]]),
    function(bad) return list(bad, function(r)
      return ("%s (%s): %s%s still running"):format(r.id, r.status, r.what, tostring(r.job)) end) end)

  -- Restarts: calls per target never exceed the occurrences fired (an
  -- "unknown" one may or may not have reached the gateway).
  check("no restart fired twice", sql([[
      SELECT c.target, c.calls, COALESCE(f.fired, 0) AS fired FROM
        (SELECT target, COUNT(*) AS calls FROM sim_call WHERE action = 'restart' GROUP BY target) c
      LEFT JOIN
        (SELECT CONCAT(namespace, '/', application, '/', environment) AS target, COUNT(*) AS fired
         FROM restart_run WHERE outcome IS NULL OR outcome <> 'missed' GROUP BY 1) f
      ON f.target = c.target WHERE c.calls > COALESCE(f.fired, 0)]]),
    function(bad) return list(bad, function(r)
      return ("%s: %d restart calls for %d occurrences fired"):format(r.target, n(r.calls), n(r.fired)) end) end)

  -- Alerts: per target and metric, FIRING and RESOLVED alternate, and one
  -- episode (its "since") is announced firing once and resolved once.
  local bad_alerts, seen, last = {}, {}, {}
  for _, r in ipairs(sql("SELECT id, payload FROM outbox WHERE kind = 'alert' ORDER BY id")) do
    local doc = json.decode(r.payload or "")
    if type(doc) == "table" then
      local key = ("%s/%s/%s %s"):format(doc.namespace, doc.application, doc.environment, doc.metric)
      local ep = key .. " since " .. tostring(doc.since)
      if doc.edge == "FIRING" or doc.edge == "RESOLVED" then
        local k = ep .. " " .. doc.edge
        if seen[k] then bad_alerts[#bad_alerts + 1] = { what = k .. " announced twice" } end
        seen[k] = true
        if last[key] == doc.edge then
          bad_alerts[#bad_alerts + 1] = { what = key .. ": " .. doc.edge .. " twice in a row" }
        end
        last[key] = doc.edge
      end
    end
  end
  check("no alert announced twice", bad_alerts,
    function(bad) return list(bad, function(r) return r.what end) end)

  -- The alert state agrees with what was announced: firing exactly when the
  -- last FIRING/RESOLVED edge of its target was FIRING (both are written in
  -- one transaction).
  local disagree = {}
  for _, r in ipairs(sql("SELECT namespace, application, environment, metric, firing FROM alert_state")) do
    local key = ("%s/%s/%s %s"):format(r.namespace, r.application, r.environment, r.metric)
    local announced = last[key] == "FIRING"
    if (n(r.firing) == 1) ~= announced then
      disagree[#disagree + 1] = { what = ("%s: alert_state firing=%d, last announced %s"):format(
        key, n(r.firing), tostring(last[key] or "nothing")) }
    end
  end
  check("the alert state matches the announcements", disagree,
    function(bad) return list(bad, function(r) return r.what end) end)

  check("every pipeline finished (nothing stuck)", sql([[
      SELECT id, status, deploy_mode FROM pipeline
      WHERE status IN ('INITIALIZED', 'RUNNING', 'DEPLOYING', 'ROLLING_OUT')
         OR (status = 'BUILD_SUCCEEDED' AND (deploy_mode = 'auto' OR deploy_requested_at IS NOT NULL))]]),
    function(bad) return list(bad, function(r) return r.id .. " still " .. r.status end) end)

  check("every restart claim has its outcome", sql([[
      SELECT CONCAT(namespace, '/', application, '/', environment) AS target, occurrence, fired_by
      FROM restart_run WHERE finished_at IS NULL]]),
    function(bad) return list(bad, function(r)
      return ("%s %s claimed by %s"):format(r.target, r.occurrence, r.fired_by) end) end)

  check("every notification was delivered", sql([[
      SELECT event_id, attempts, last_error FROM outbox WHERE delivered_at IS NULL]]),
    function(bad) return list(bad, function(r)
      return ("%s (%d attempts, last error: %s)"):format(r.event_id, n(r.attempts), tostring(r.last_error)) end) end)

  for i, receiver in ipairs(ctx.receivers or {}) do
    local got = receiver:ids()
    local missing = {}
    for _, r in ipairs(sql([[SELECT event_id FROM outbox WHERE last_error IS NULL
        OR last_error NOT LIKE 'undeliverable:%' ORDER BY id]])) do
      if not got[r.event_id] then missing[#missing + 1] = r end
    end
    check(("the webhook receiver%s got every event at least once"):format(i > 1 and (" " .. i) or ""), missing,
      function(bad) return list(bad, function(r) return r.event_id end) end)
  end

  check("after each fault, no transition by a server that had lost the pipeline", late_transitions(ctx),
    function(bad) return list(bad, function(r) return r.what end) end)

  release_checks(ctx, check)
  return out
end

local ACTIVE = { DEPLOYING = true, ROLLING_OUT = true }

-- The event history, in the database's order (event ids): each environment
-- with a bound, how many of its pipelines were DEPLOYING or ROLLING_OUT after
-- each event; the events that made it more than the bound.
function M.slot_overlaps(sql, slots)
  local bad, active, count = {}, {}, {}
  for _, e in ipairs(sql([[
      SELECT e.id, e.pipeline_id, e.from_status, e.to_status, p.environment FROM pipeline_event e
      JOIN pipeline p ON p.id = e.pipeline_id
      WHERE e.to_status IN ('DEPLOYING', 'ROLLING_OUT') OR e.from_status IN ('DEPLOYING', 'ROLLING_OUT')
      ORDER BY e.id]])) do
    local env, was, now = e.environment, ACTIVE[e.from_status or ""], ACTIVE[e.to_status]
    if slots[env] then
      active[env] = active[env] or {}
      if now and not was and not active[env][e.pipeline_id] then
        active[env][e.pipeline_id] = true
        count[env] = (count[env] or 0) + 1
        if count[env] > slots[env] then
          bad[#bad + 1] = { what = ("%s: %d in %s (bound %d) after event %s"):format(e.pipeline_id,
            count[env], env, slots[env], tostring(e.id)) }
        end
      elseif was and not now and active[env][e.pipeline_id] then
        active[env][e.pipeline_id] = nil
        count[env] = count[env] - 1
      end
    end
  end
  return bad
end

-- Releases that entered DEPLOYING inside a freeze ({from, to} epochs on the
-- database's clock, environments = {env = true} or nil for all) without an
-- override.
function M.frozen_deploys(sql, freezes)
  local bad = {}
  for _, e in ipairs(sql([[
      SELECT e.pipeline_id, p.environment, UNIX_TIMESTAMP(e.created_at) AS at, p.override_at
      FROM pipeline_event e JOIN pipeline p ON p.id = e.pipeline_id
      WHERE e.to_status = 'DEPLOYING' AND p.trigger_type <> 'rollback']])) do
    local at = tonumber(e.at)
    for _, f in ipairs(freezes) do
      if at and at >= f.from and at < f.to and (not f.environments or f.environments[e.environment])
        and not e.override_at then
        bad[#bad + 1] = { what = ("%s deployed in %s at %s, inside the freeze %s"):format(e.pipeline_id,
          e.environment, os.date("!%Y-%m-%d %H:%M:%S", math.floor(at)), tostring(f.name)) }
      end
    end
  end
  return bad
end

M.verify = checks

-- Takeovers: for each fault on server X at t, every pipeline X was driving
-- (its last transition before t was X's and it was unfinished then) and the
-- first transition by another server after t.
function M.takeovers(ctx)
  local out = {}
  for _, f in ipairs(ctx.faults or {}) do
    if LOSES_LOCKS[f.kind] and f.server then
      local rows = ctx.sql([[
        SELECT e.pipeline_id, MIN(UNIX_TIMESTAMP(a.created_at)) AS first_at, MIN(a.id) AS first_id
        FROM pipeline_event e
        JOIN pipeline_event a ON a.pipeline_id = e.pipeline_id AND a.server <> ?
          AND a.server NOT LIKE 'oopsctl@%' AND a.actor IS NULL AND UNIX_TIMESTAMP(a.created_at) >= ?
        WHERE e.server = ? AND e.id = (SELECT MAX(id) FROM pipeline_event l
            WHERE l.pipeline_id = e.pipeline_id AND UNIX_TIMESTAMP(l.created_at) < ?)
          AND e.to_status IN ('INITIALIZED', 'RUNNING', 'DEPLOYING', 'ROLLING_OUT')
        GROUP BY e.pipeline_id ORDER BY first_at]], f.server, f.at, f.server, f.at)
      for _, r in ipairs(rows) do
        local by = ctx.sql("SELECT server FROM pipeline_event WHERE id = ?", r.first_id)[1]
        out[#out + 1] = { fault = f.kind, from = f.server, to = by and by.server,
          pipeline = r.pipeline_id, latency = n(r.first_at) - f.at }
      end
    end
  end
  return out
end

local function quantile(xs, q)
  if #xs == 0 then return nil end
  table.sort(xs)
  return xs[math.max(1, math.ceil(q * #xs))]
end

-- The report's lines (printed as TAP comments by the runner).
function M.report(ctx, results)
  local lines = {}
  local function add(fmt, ...) lines[#lines + 1] = fmt:format(...) end
  add("report")
  add("  faults injected: %d", #(ctx.faults or {}))
  for _, f in ipairs(ctx.faults or {}) do
    add("    +%6.2fs  %-10s %s", f.at - (ctx.began or f.at), f.kind, f.server or "")
  end
  local by = {}
  local total = 0
  for _, r in ipairs(ctx.sql("SELECT status, COUNT(*) AS c FROM pipeline GROUP BY status ORDER BY status")) do
    by[#by + 1] = ("%s %d"):format(r.status, n(r.c))
    total = total + n(r.c)
  end
  add("  pipelines: %d%s", total, #by > 0 and (" (" .. table.concat(by, ", ") .. ")") or "")
  local t = M.takeovers(ctx)
  local lat = {}
  for _, x in ipairs(t) do lat[#lat + 1] = x.latency end
  if #t > 0 then
    add("  takeovers: %d, latency fault -> first transition by the new driver: median %.2fs, max %.2fs",
      #t, quantile(lat, 0.5), quantile(lat, 1))
    for i, x in ipairs(t) do
      if i > 10 then add("    ... and %d more", #t - 10) break end
      add("    %s %s -> %s after %s: %.2fs", x.pipeline, x.from, tostring(x.to), x.fault, x.latency)
    end
  else
    add("  takeovers: 0")
  end
  local v = 0
  for _, c in ipairs(results or {}) do if not c.ok then v = v + 1 end end
  add("  violations: %d", v)
  return lines, v
end

return M
