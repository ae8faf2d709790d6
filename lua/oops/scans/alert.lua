-- The alert scan (REFERENCE.md §8, §12.7, §12.8): resource alerts, led by one
-- server at a time (the sticky lock oops:leader:alert), only when the policy
-- enables alerts.
--
-- A tick: every target (application × environment × metric with a limit) is
-- probed side by side, so a slow probe delays no other; then the state is
-- read once, with the database's clock, and each target's decision (M.decide,
-- the table of §8) is applied in its own transaction: a conditional write of
-- alert_state on the version it read, and the outbox row announcing the edge.
-- Two leaders (a frozen one waking up) that read the same state race on the
-- version: one write counts, so each edge is announced once. Firing state of
-- a target no longer in the policy is resolved (§12.8). A probe error changes
-- nothing.
--
-- The outbox payload (kind 'alert') is the notifier's contract:
--   { "edge": "FIRING"|"REPEAT"|"RESOLVED", "namespace", "application",
--     "environment", "metric": "cpu"|"memory", "percent", "threshold", "limit",
--     "pods": [...], "since": "YYYY-MM-DD HH:MM:SS", "time": "...",
--     "duration_s": n (RESOLVED only) }
-- threshold and limit are millicores or bytes; null for a resolved target
-- whose limit is gone from the policy. event_id is
-- "alert-<ns>/<app>/<env>/<metric>-<version>": stable (every server computes
-- the same one for the same edge) and unique (each edge bumps the version).
local oops = require("oops")
local json = require("oops.json")
local notify = require("oops.notification")
local log = require("oops.log")
local leader = require("oops.leader")
local tasks = require("oops.tasks")
local probes = require("oops.probes")

local M = { name = "alert" }
local SCAN = "alert"
M.LOCK = leader.lock(SCAN)

M.METRICS = { "cpu", "memory" }
local LIMIT = { cpu = "cpu_millicores", memory = "memory_bytes" }

------------------------------------------------------------------ targets

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- What the policy says about one metric of one application, or nil when it
-- is not alertable (no limit, or no rule for the metric).
local function rule(pol, app, metric)
  local limit = app.limits and app.limits[LIMIT[metric]]
  local r = pol.alert and pol.alert[metric]
  if not (limit and r) then return nil end
  return { limit = limit, percent = r.percent, sustained_ms = r.sustained_ms,
    threshold = limit * r.percent // 100 }
end

-- Every target of the policy, sorted: { namespace, application, environment,
-- metric, limit, percent, threshold, sustained_ms }. Integers throughout.
function M.targets(pol)
  local list = {}
  for _, name in ipairs(sorted_keys(pol.applications or {})) do
    local app = pol.applications[name]
    for _, env in ipairs(app.environments or {}) do
      for _, metric in ipairs(M.METRICS) do
        local r = rule(pol, app, metric)
        if r then
          list[#list + 1] = { namespace = app.namespace, application = app.application,
            environment = env, metric = metric, limit = r.limit, percent = r.percent,
            threshold = r.threshold, sustained_ms = r.sustained_ms }
        end
      end
    end
  end
  return list
end

function M.key(t)
  return t.namespace .. "/" .. t.application .. "/" .. t.environment .. "/" .. t.metric
end

----------------------------------------------------------------- decision

-- The decision table of REFERENCE.md §8, pure.
--   prior: nil (no state yet) or { firing = bool, notified_age_ms = n }
--   pods:  the firing pods, or nil for a probe error
-- Returns "FIRING", "REPEAT", "RESOLVED", or nil (write nothing).
function M.decide(prior, pods, every_ms)
  if pods == nil then return nil end
  local firing = prior ~= nil and prior.firing == true
  if #pods > 0 then
    if not firing then return "FIRING" end
    local age = prior.notified_age_ms
    if age == nil or age >= every_ms then return "REPEAT" end
    return nil
  end
  if firing then return "RESOLVED" end
  return nil
end

------------------------------------------------------------------ payload

-- "YYYY-MM-DD HH:MM:SS" from a DATETIME(6) value (already UTC: every session
-- runs with time_zone +00:00).
local function seconds_text(dt) return dt and dt:sub(1, 19) or nil end

-- The outbox payload for an edge. t: the target (limit/threshold may be nil
-- for a target gone from the policy); since/now: DATETIME(6) strings. Built
-- and checked by the one implementation of the contract, notify.alert_payload.
function M.payload(edge, t, pods, since, now, duration_s)
  return notify.alert_payload {
    edge = edge, namespace = t.namespace, application = t.application,
    environment = t.environment, metric = t.metric,
    percent = t.percent, threshold = t.threshold, limit = t.limit, pods = pods,
    since = seconds_text(since), time = seconds_text(now),
    duration_s = edge == "RESOLVED" and (duration_s or 0) or nil,
  }
end

-- FNV-1a 64, for keys too long for the outbox's event_id column.
local function fnv(s)
  local h = 0xcbf29ce484222325
  for i = 1, #s do h = (h ~ s:byte(i)) * 0x100000001b3 end
  return string.format("%016x", h)
end

-- event_id VARCHAR(160): names are at most 63 characters each, so a key can
-- outgrow it; a long key is shortened the same way on every server.
function M.event_id(t, version)
  local key = M.key(t)
  if #key > 120 then key = key:sub(1, 100) .. "#" .. fnv(key) end
  return "alert-" .. key .. "-" .. version
end

-------------------------------------------------------------------- state

-- Every alert_state row by key, with the database's clock: now, and each
-- row's ages computed against it. One statement; returns states, now.
local function read_state()
  local rows, err = oops.db.exec(
    "SELECT n.now, s.namespace, s.application, s.environment, s.metric, s.firing, " ..
    "s.firing_since, s.last_notified_at, s.pods, s.version, " ..
    "TIMESTAMPDIFF(MICROSECOND, s.last_notified_at, n.now) AS notified_age_us, " ..
    "TIMESTAMPDIFF(SECOND, s.firing_since, n.now) AS firing_for_s " ..
    "FROM (SELECT NOW(6) AS now) n LEFT JOIN alert_state s ON 1 = 1")
  if not rows then return nil, err end
  local states = {}
  for _, r in ipairs(rows) do
    if r.namespace then
      r.firing = r.firing == 1
      r.notified_age_ms = r.notified_age_us and r.notified_age_us // 1000
      local pods = json.decode(r.pods or "[]")
      r.pods = type(pods) == "table" and pods or {}
      states[M.key(r)] = r
    end
  end
  return states, rows[1].now
end

local WHERE = " WHERE namespace = ? AND application = ? AND environment = ? AND metric = ? AND version = ?"

-- The conditional write of one edge: true when it counted, false when the
-- state had moved on (another leader won), nil, err on a database error.
local function write_state(edge, t, prior, pods, now)
  local res, err, code
  if edge == "FIRING" and not prior then
    res, err, code = oops.db.exec(
      "INSERT INTO alert_state (namespace, application, environment, metric, firing, " ..
      "firing_since, last_notified_at, pods, version) VALUES (?, ?, ?, ?, 1, ?, ?, ?, 1)",
      t.namespace, t.application, t.environment, t.metric, now, now, json.encode(json.array(pods)))
    if not res and code == "exists" then return false end
  elseif edge == "FIRING" then
    res, err = oops.db.exec(
      "UPDATE alert_state SET firing = 1, firing_since = ?, last_notified_at = ?, pods = ?, " ..
      "version = version + 1" .. WHERE,
      now, now, json.encode(json.array(pods)), t.namespace, t.application, t.environment, t.metric, prior.version)
  elseif edge == "REPEAT" then
    res, err = oops.db.exec(
      "UPDATE alert_state SET last_notified_at = ?, pods = ?, version = version + 1" .. WHERE,
      now, json.encode(json.array(pods)), t.namespace, t.application, t.environment, t.metric, prior.version)
  else -- RESOLVED: the pods column keeps the last firing pods
    res, err = oops.db.exec(
      "UPDATE alert_state SET firing = 0, last_notified_at = ?, version = version + 1" .. WHERE,
      now, t.namespace, t.application, t.environment, t.metric, prior.version)
  end
  if not res then return nil, err end
  return res.affected == 1
end

-- The payload of an edge: FIRING starts the episode now; REPEAT and RESOLVED
-- carry its start, RESOLVED the last firing pods and how long it lasted.
local function payload_for(edge, t, prior, pods, now)
  if edge == "FIRING" then return M.payload(edge, t, pods, now, now) end
  if edge == "REPEAT" then return M.payload(edge, t, pods, prior.firing_since, now) end
  return M.payload(edge, t, prior.pods, prior.firing_since, now, prior.firing_for_s)
end

-- Announce one edge: state and outbox row in one transaction (nothing in it
-- waits, so no other task's statement lands inside). "made" | "lost" | nil, err.
function M.announce(edge, t, prior, pods, now)
  local version = (prior and prior.version or 0) + 1
  local body = payload_for(edge, t, prior, pods, now)
  local ok, err = oops.db.begin()
  if not ok then return nil, err end
  -- Fenced by the lock session, not only by the held set in memory: a leader
  -- frozen mid-tick (its session reaped, another server leading) that wakes
  -- up still believes it leads until its validation runs; the database says
  -- otherwise, and its stale probe decides nothing.
  local mine, oerr = leader.owned(M.LOCK)
  if not mine then
    oops.db.rollback()
    if mine == nil then return nil, "reading the leader lock's owner failed: " .. tostring(oerr) end
    return "lost"
  end
  local won, werr = write_state(edge, t, prior, pods, now)
  if not won then
    oops.db.rollback()
    if won == false then return "lost" end
    return nil, werr
  end
  ok, err = oops.db.exec("INSERT INTO outbox (event_id, kind, payload) VALUES (?, 'alert', ?)",
    M.event_id(t, version), body)
  if ok then ok, err = oops.db.commit() end
  if not ok then
    oops.db.rollback()
    return nil, err
  end
  require("oops.watch").hint("outbox") -- the notifier looks at its next tick, not at the watcher's
  return "made"
end

--------------------------------------------------------------------- tick

local function fields(t, extra)
  local f = { scan = SCAN, app = t.namespace .. "/" .. t.application, env = t.environment, metric = t.metric }
  for k, v in pairs(extra or {}) do f[k] = v end
  return f
end

-- Probe every target side by side; results[i] = { pods = } or { err = }.
local function probe_all(targets, probe)
  local results = {}
  local steps = {}
  for i, t in ipairs(targets) do
    steps[i] = function()
      local pods, err = probe(t)
      results[i] = pods and { pods = pods } or { err = tostring(err) }
    end
  end
  tasks.all(steps, "alert probe")
  for i, t in ipairs(targets) do
    local r = results[i] or { err = "the probe raised an error" }
    results[i] = r
    if r.err then
      oops.metrics.inc("oops_alert_probes_total", { result = "error" })
      log.warn("alert probe failed, state unchanged: " .. r.err, fields(t))
    else
      oops.metrics.inc("oops_alert_probes_total", { result = #r.pods > 0 and "firing" or "clear" })
    end
  end
  return results
end

local function apply(edge, t, prior, pods, now)
  local outcome, err = M.announce(edge, t, prior, pods, now)
  if outcome == "made" then
    oops.metrics.inc("oops_alert_edges_total", { edge = edge })
    log.info("alert " .. edge, fields(t, { pods = table.concat(edge == "RESOLVED" and prior.pods or pods, ","),
      threshold = t.threshold }))
  elseif outcome == "lost" then
    log.info("alert " .. edge .. " already announced by another server", fields(t))
  else
    log.error("alert " .. edge .. " not written: " .. tostring(err), fields(t))
  end
end

-- A firing state whose target left the policy (application, environment or
-- limit removed): resolved, with what the policy still says about it.
local function orphan_target(pol, s)
  local app = (pol.applications or {})[s.namespace .. "/" .. s.application]
  local r = app and rule(pol, app, s.metric)
  local alert_rule = pol.alert and pol.alert[s.metric]
  return { namespace = s.namespace, application = s.application, environment = s.environment,
    metric = s.metric, percent = alert_rule and alert_rule.percent,
    limit = r and r.limit, threshold = r and r.threshold }
end

function M.run(pol, _gw)
  local a = pol.alert
  if not (a and a.enabled) then return end
  leader.db_now() -- keeps the offset fresh: this scan wakes at the database's minutes too
  if not leader.hold(M.LOCK, SCAN) then return end
  local targets = M.targets(pol)
  local results = probe_all(targets, probes.for_alert(a))
  -- Probing waits; the lock may have gone meanwhile (fail closed).
  if not oops.locks.holds(M.LOCK) then return end
  local states, now = read_state()
  if not states then
    log.error("alert state unreadable: " .. tostring(now), { scan = SCAN })
    return
  end
  local live = {}
  for i, t in ipairs(targets) do
    local key = M.key(t)
    live[key] = true
    local prior = states[key]
    local edge = M.decide(prior, results[i].pods, a.every_ms)
    if edge then apply(edge, t, prior, results[i].pods, now) end
  end
  for _, key in ipairs(sorted_keys(states)) do
    local s = states[key]
    if s.firing and not live[key] then apply("RESOLVED", orphan_target(pol, s), s, nil, now) end
  end
end

return M
