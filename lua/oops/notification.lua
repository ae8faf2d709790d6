-- oops.notification: the notification messages (pure: no I/O, no clock), built
-- from outbox rows by the notifier scan (oops.scans.notify). REFERENCE.md
-- sections 8 and 10 give the contents; every message is plain data:
--
--   { id = "pipeline-event-42",           -- outbox.event_id: stable, receivers deduplicate on it
--     kind = "pipeline" | "alert",
--     type = "SUCCEEDED" | ... | "FIRING" | "REPEAT" | "RESOLVED",
--     level = "info" | "warning" | "success" | "error" | "neutral",
--     title = "shop/api prod: SUCCEEDED",
--     facts = { { name = "application", value = "shop/api" }, ... },  -- in display order
--     advice = "..." | nil,
--     time = "2026-08-01T12:00:00.123456Z" }                          -- UTC, RFC 3339
--
-- M.encode(message) is the JSON that webhooks receive (POST body) and
-- commands read on stdin; `advice` is null when there is none.
--
-- THE ALERT PAYLOAD CONTRACT (what the alert scan writes, what this file reads)
-- -----------------------------------------------------------------------------
-- For each alert edge the alert scan inserts, in the same transaction as its
-- conditional alert_state update:
--
--   INSERT INTO outbox (event_id, kind, payload) VALUES (?, 'alert', ?)
--
-- event_id: stable and unique per edge (oops.scans.alert uses
-- "alert-<ns>/<app>/<env>/<metric>-<alert_state.version>"), so a repeated
-- insert of one edge fails on the unique key instead of announcing it twice.
-- payload: a JSON object (M.alert_payload builds and checks one):
--
--   edge         "FIRING" | "REPEAT" | "RESOLVED"                      required
--   namespace    "shop"                                                required
--   application  "api"                                                 required
--   environment  "prod"                                                required
--   metric       "cpu" | "memory"                                      required
--   percent      threshold percent, 1..100 (95)                        number or null
--   threshold    limit * percent // 100, millicores (cpu) or bytes     number or null
--   limit        the limit, millicores (cpu) or bytes (memory)         number or null
--                (null: a RESOLVED target whose limit left the policy)
--   pods         ["api-0", "api-3"]: the pods over the threshold        list ([] allowed)
--                (RESOLVED: the last ones seen)
--   since        firing_since, UTC "YYYY-MM-DD HH:MM:SS[.ffffff]"      string or null
--   time         the edge, same format; absent: the outbox row's       optional
--                created_at (the same transaction's NOW(6))
--   duration_s   RESOLVED: seconds the episode lasted; absent: time -  optional
--                since
--
-- alert_payload raises on a missing or mistyped field (a caller's mistake),
-- so a bad payload never reaches the outbox; alert_message returns nil, why
-- for one read from the database.
local json = require("oops.json")

local M = {}

------------------------------------------------------------------ levels

-- REFERENCE.md section 10; BUILDING (RUNNING, an event the original lacked)
-- is info like CREATED.
M.PIPELINE_LEVELS = {
  CREATED = "info", BUILDING = "info", BUILD_SUCCEEDED = "warning", DEPLOYING = "info", OVERRIDE = "warning",
  DEPLOY_REQUESTED = "info",
  ROLLING_OUT = "info", SUCCEEDED = "success", FAILED = "error", STOPPED = "neutral",
  -- a canary's (issue 38): a step made, a step waiting for an operator, an
  -- operator's requests
  CANARY_STEP = "info", CANARY_PAUSED = "warning", CANARY_ABORT = "warning", CANARY_PROMOTE = "info",
  -- a person's approval of a release, or its rejection (issue 39)
  APPROVED = "info", REJECTED = "warning",
}

-- Over the limit, memory is an error (the kernel OOM-kills the pod) and CPU a
-- warning (the pod is throttled, slower but alive).
local ALERT_LEVELS = { cpu = "warning", memory = "error" }
local EDGES = { FIRING = true, REPEAT = true, RESOLVED = true }
local METRIC_NAMES = { cpu = "CPU", memory = "memory" }
local TITLES = {
  FIRING = "exceeded threshold", REPEAT = "still over limit", RESOLVED = "recovered",
}
M.ADVICE = {
  cpu = "CPU over the limit is throttled: requests slow down. Raise the CPU limit or scale out.",
  memory = "Memory at the limit means an OOM kill: the pod restarts and drops its requests. "
    .. "Raise the memory limit or look for a leak.",
}

-- How many pods a message names before "and N more pods".
M.MAX_PODS = 10

------------------------------------------------------------------ time

-- "2026-08-01 12:00:00[.ffffff]" or "2026-08-01T12:00:00[.ffffff][Z]" →
-- its parts, or nil.
local function time_parts(s)
  if type(s) ~= "string" then return nil end
  local y, mo, d, h, mi, sec, frac = s:match("^(%d%d%d%d)-(%d%d)-(%d%d)[ T](%d%d):(%d%d):(%d%d)(%.?%d*)Z?$")
  if not y then return nil end
  return { y = tonumber(y), mo = tonumber(mo), d = tonumber(d), h = tonumber(h), mi = tonumber(mi),
    s = tonumber(sec), frac = frac }
end

-- Days since 1970-01-01 of a civil date, in UTC (without os.time, which
-- reads the server's time zone).
local days_from_civil = require("oops.windows").days_from_civil

-- Epoch seconds (a float with the fraction) of a UTC time string, or nil.
function M.epoch(s)
  local t = time_parts(s)
  if not t then return nil end
  local frac = (t.frac ~= "" and t.frac ~= ".") and tonumber("0" .. t.frac) or 0
  return days_from_civil(t.y, t.mo, t.d) * 86400 + t.h * 3600 + t.mi * 60 + t.s + frac
end

-- The message's time: RFC 3339 UTC, keeping the microseconds.
function M.iso_time(s)
  local t = time_parts(s)
  if not t then return s end
  return string.format("%04d-%02d-%02dT%02d:%02d:%02d%sZ", t.y, t.mo, t.d, t.h, t.mi, t.s,
    t.frac == "." and "" or t.frac)
end

-- A time as people read it in a fact: "2026-08-01 12:00:00 UTC".
function M.show_time(s)
  local t = time_parts(s)
  if not t then return s end
  return string.format("%04d-%02d-%02d %02d:%02d:%02d UTC", t.y, t.mo, t.d, t.h, t.mi, t.s)
end

------------------------------------------------------------------ units

-- Drop a trailing ".0" so whole numbers read as such: 4 → "4", 3.6 → "3.6".
local function number(v, decimals)
  local s = string.format("%." .. (decimals or 1) .. "f", v)
  if s:find(".", 1, true) then s = s:gsub("0+$", ""):gsub("%.$", "") end
  return s
end

-- CPU in millicores, as Kubernetes writes it: 1900 → "1900m".
function M.cpu(mc)
  return number(mc, 0) .. "m"
end

local BINARY = { { "Ti", 1 << 40 }, { "Gi", 1 << 30 }, { "Mi", 1 << 20 }, { "Ki", 1 << 10 } }

-- Bytes in the largest binary unit that keeps the number at least 1, one
-- decimal at most: 3865470566 → "3.6Gi", 4294967296 → "4Gi", 512 → "512".
function M.bytes(n)
  for _, u in ipairs(BINARY) do
    if n >= u[2] then return number(n / u[2], 1) .. u[1] end
  end
  return number(n, 0)
end

local function quantity(metric, v)
  return metric == "cpu" and M.cpu(v) or M.bytes(v)
end

-- "95% (1900m / 2000m)".
function M.threshold_text(metric, percent, threshold, limit)
  return number(percent, 1) .. "% (" .. quantity(metric, threshold) .. " / " .. quantity(metric, limit) .. ")"
end

-- The first MAX_PODS pods, then how many more: "api-0, api-1 and 3 more pods".
function M.pods_text(pods)
  local shown = {}
  for i = 1, math.min(#pods, M.MAX_PODS) do shown[i] = tostring(pods[i]) end
  local text = table.concat(shown, ", ")
  local more = #pods - #shown
  if more > 0 then text = text .. " and " .. more .. " more pod" .. (more == 1 and "" or "s") end
  return text
end

-- How long, in the two largest units that matter: 750 → "12m 30s",
-- 3930 → "1h 5m", 90061 → "1d 1h", 0 → "0s".
function M.duration_text(seconds)
  local s = math.floor(math.max(seconds, 0) + 0.5)
  local parts = {}
  for _, u in ipairs({ { "d", 86400 }, { "h", 3600 }, { "m", 60 }, { "s", 1 } }) do
    if s >= u[2] and #parts < 2 then
      parts[#parts + 1] = (s // u[2]) .. u[1]
      s = s % u[2]
    elseif #parts > 0 then
      break -- "1h 5m", not "1h 0m 5s": the second unit must follow the first
    end
  end
  return #parts > 0 and table.concat(parts, " ") or "0s"
end

------------------------------------------------------------------ messages

local function fact(facts, name, value)
  if value == nil or value == "" then return end
  facts[#facts + 1] = { name = name, value = tostring(value) }
end

-- The branch a pipeline builds from, when its source JSON names one.
local function branch(source)
  if type(source) ~= "string" then return nil end
  local t = json.decode(source)
  if type(t) == "table" and type(t.branch) == "string" then return t.branch end
end

local PIPELINE_ADVICE = {
  BUILD_SUCCEEDED = function(r)
    if r.deploy_mode ~= "manual" then
      -- An automatic release a deploy window, freeze or slot holds (issue 26).
      return "It deploys when allowed; `oopsctl deploy " .. r.pipeline_id ..
        " --override --reason TEXT` releases it from a window or freeze now."
    end
    return "Manual release: run `oopsctl deploy " .. r.pipeline_id .. "` to deploy it."
  end,
  FAILED = function(r) return "See what it ran: `oopsctl logs " .. r.pipeline_id .. "`." end,
}

-- A pipeline event's message. `r` is one row of the outbox joined with
-- pipeline_event and pipeline: event_id, event_type, pipeline_id, namespace,
-- application, environment, deploy_mode, trigger_type, artifact, source,
-- server, message, event_at; actor and reason for an operator's event
-- (issue 27). nil, why when the join found no event.
function M.pipeline_message(r)
  if type(r) ~= "table" then error("notify.pipeline_message: expects a row table", 2) end
  if not r.event_type or not r.namespace then
    return nil, "pipeline event or pipeline not found"
  end
  local app = r.namespace .. "/" .. r.application
  local facts = {}
  fact(facts, "application", app)
  fact(facts, "environment", r.environment)
  fact(facts, "mode", r.deploy_mode)
  fact(facts, "trigger", r.trigger_type)
  fact(facts, "pipeline", r.pipeline_id)
  fact(facts, "artifact", r.artifact)
  fact(facts, "branch", branch(r.source))
  fact(facts, "server", r.server)
  fact(facts, "actor", r.actor)
  fact(facts, "reason", r.reason)
  fact(facts, "time", M.show_time(r.event_at))
  fact(facts, "detail", r.message)
  local advice = PIPELINE_ADVICE[r.event_type]
  return {
    id = r.event_id, kind = "pipeline", type = r.event_type,
    level = M.PIPELINE_LEVELS[r.event_type] or "info",
    title = app .. " " .. r.environment .. ": " .. r.event_type,
    facts = facts, advice = advice and advice(r) or nil,
    time = M.iso_time(r.event_at),
  }
end

-- A number, or nil for JSON null or absent.
local function num(v) return type(v) == "number" and v or nil end

-- Why a decoded payload cannot make a message, or nil.
local function bad_payload(p)
  if type(p) ~= "table" then return "not a JSON object" end
  if not EDGES[p.edge] then return "edge: " .. tostring(p.edge) .. " (want FIRING, REPEAT or RESOLVED)" end
  if not METRIC_NAMES[p.metric] then return "metric: " .. tostring(p.metric) .. " (want cpu or memory)" end
  for _, k in ipairs({ "namespace", "application", "environment" }) do
    if type(p[k]) ~= "string" then return k .. ": missing" end
  end
  for _, k in ipairs({ "percent", "threshold", "limit", "duration_s" }) do
    if p[k] ~= nil and p[k] ~= json.null and type(p[k]) ~= "number" then return k .. ": not a number" end
  end
  if p.pods ~= nil and p.pods ~= json.null and type(p.pods) ~= "table" then return "pods: not a list" end
end

-- "95% (1900m / 2000m)", "95%" without the quantities, nil without the percent.
local function threshold_fact(p)
  local pct, thr, lim = num(p.percent), num(p.threshold), num(p.limit)
  if not pct then return nil end
  if not (thr and lim) then return number(pct, 1) .. "%" end
  return M.threshold_text(p.metric, pct, thr, lim)
end

-- An alert edge's message. `payload` is the outbox row's JSON text (or the
-- table it decodes to); created_at the row's, used when the payload has no
-- time. nil, why when the payload is malformed.
function M.alert_message(event_id, payload, created_at)
  if type(event_id) ~= "string" then error("notify.alert_message: event_id must be a string", 2) end
  local p = payload
  if type(payload) == "string" then
    local t, err = json.decode(payload)
    if t == nil then return nil, "alert payload: not JSON: " .. tostring(err) end
    p = t
  end
  local why = bad_payload(p)
  if why then return nil, "alert payload: " .. why end
  local time = type(p.time) == "string" and p.time or created_at
  local since = type(p.since) == "string" and p.since or nil
  local pods = {}
  for _, pod in ipairs(type(p.pods) == "table" and p.pods or {}) do pods[#pods + 1] = tostring(pod) end
  local facts = {}
  fact(facts, "application", p.namespace .. "/" .. p.application)
  fact(facts, "environment", p.environment)
  fact(facts, "metric", p.metric)
  fact(facts, "threshold", threshold_fact(p))
  fact(facts, "pods", M.pods_text(pods))
  fact(facts, "start time", since and M.show_time(since))
  fact(facts, "time", time and M.show_time(time))
  if p.edge == "RESOLVED" then
    local d = num(p.duration_s)
      or (M.epoch(time) and M.epoch(since) and M.epoch(time) - M.epoch(since))
    fact(facts, "lasted", d and M.duration_text(d))
  end
  return {
    id = event_id, kind = "alert", type = p.edge,
    level = p.edge == "RESOLVED" and "success" or ALERT_LEVELS[p.metric],
    title = "resource alert | " .. METRIC_NAMES[p.metric] .. " " .. TITLES[p.edge],
    facts = facts,
    advice = p.edge ~= "RESOLVED" and M.ADVICE[p.metric] or nil,
    time = time and M.iso_time(time) or nil,
  }
end

-- The JSON of a message, keys in a fixed order (id, kind, type, level,
-- title, facts, advice, time; each fact name, value), so the same message is
-- the same bytes from every server: a resend is an exact duplicate. advice
-- and time are null when absent.
local MESSAGE_KEYS = { "id", "kind", "type", "level", "title", "facts", "advice", "time" }
local FACT_KEYS = { "name", "value" }

function M.encode(m)
  if type(m) ~= "table" then error("notify.encode: expects a message table", 2) end
  local facts = json.array()
  for i, f in ipairs(m.facts or {}) do facts[i] = json.object({ name = f.name, value = f.value }, FACT_KEYS) end
  return json.encode(json.object({
    id = m.id, kind = m.kind, type = m.type, level = m.level, title = m.title,
    facts = facts, advice = m.advice, time = m.time,
  }, MESSAGE_KEYS))
end

------------------------------------------------------------------ for the alert scan

local function need(t, k, ty, what)
  if type(t[k]) ~= ty then
    error("notify.alert_payload: " .. k .. " must be " .. what .. ", not " .. type(t[k]), 3)
  end
end

-- The outbox payload of one alert edge (see the contract at the top), as
-- JSON text. Raises on a missing or mistyped field.
function M.alert_payload(t)
  if type(t) ~= "table" then error("notify.alert_payload: expects a table", 2) end
  if not EDGES[t.edge] then error("notify.alert_payload: edge must be FIRING, REPEAT or RESOLVED", 2) end
  if not METRIC_NAMES[t.metric] then error("notify.alert_payload: metric must be cpu or memory", 2) end
  for _, k in ipairs({ "namespace", "application", "environment" }) do need(t, k, "string", "a string") end
  -- nil (JSON null) only for a target whose limit left the policy
  for _, k in ipairs({ "percent", "threshold", "limit" }) do
    if t[k] ~= nil then need(t, k, "number", "a number") end
  end
  if t.since ~= nil then need(t, "since", "string", "a UTC time string") end
  need(t, "pods", "table", "a list of pod names")
  if t.time ~= nil then need(t, "time", "string", "a UTC time string") end
  if t.duration_s ~= nil then need(t, "duration_s", "number", "a number of seconds") end
  for _, k in ipairs({ "since", "time" }) do
    if t[k] ~= nil and not time_parts(t[k]) then
      error('notify.alert_payload: ' .. k .. ' must look like "2026-08-01 12:00:00.000000" (UTC), not "'
        .. t[k] .. '"', 2)
    end
  end
  local pods = {}
  for i, pod in ipairs(t.pods) do
    if type(pod) ~= "string" then error("notify.alert_payload: pods[" .. i .. "] must be a string", 2) end
    pods[i] = pod
  end
  local out = {}
  for _, k in ipairs({ "edge", "namespace", "application", "environment", "metric", "time", "duration_s" }) do
    out[k] = t[k]
  end
  for _, k in ipairs({ "percent", "threshold", "limit", "since" }) do
    if t[k] == nil then out[k] = json.null else out[k] = t[k] end
  end
  out.pods = json.array(pods)
  return json.encode(out)
end

return M
