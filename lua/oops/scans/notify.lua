-- The notifier (DESIGN.md "Notifications", REFERENCE.md §12.9): delivers the
-- outbox — pipeline events and alert edges, written in the same transaction
-- as the change they announce — to the routes of the running policy.
--
--   * One deliverer: the sticky lock oops:leader:notify. Two would deliver
--     every event twice; a frozen leader waking up is harmless (below).
--   * At least once, never lost: a row is marked delivered only after every
--     route took it, with a conditional update (`attempts` and
--     `delivered_routes` as read, `delivered_at IS NULL`), so a leader that
--     lost the lock meanwhile cannot undo what the new one recorded. A crash
--     between a send and the mark means a resend with the same id: receivers
--     deduplicate on it.
--   * Per route, in id order: a route stops at its first failure (or at a row
--     still waiting for its retry) so receivers see events in order; routes
--     are independent, so a failing webhook never holds back the command or
--     the log route. Failures back off: initial * 2^attempts, at most max.
--   * Routes are identified by what they are (kind + url/argv), so a reload
--     that keeps a route keeps what it delivered; a route added by a reload
--     gets the events not yet fully delivered.
local oops = require("oops")
local log = require("oops.log")
local leader = require("oops.leader")
local watch = require("oops.watch")
local notify = require("oops.notification")
local tasks = require("oops.tasks")
local shown_url = require("oops.url").show

local M = { name = "notify" }
local SCAN = "notify"
local LOCK = leader.lock(SCAN)
M.LOCK = LOCK

-- Rows read per route and tick; the next tick takes the rest.
M.BATCH = 100
M.HTTP_TIMEOUT_MS = 10000
M.COMMAND_TIMEOUT_MS = 30000
-- A route stops taking rows after this long in one tick, so a slow (but
-- answering) receiver delays the other routes' next tick by about this much
-- plus one request, never by a whole batch.
M.TICK_BUDGET_MS = 5000
local MAX_ERROR = 1000 -- characters of last_error kept

local reconciled_version -- the policy whose removed routes were accounted for

------------------------------------------------------------------ routes

-- FNV-1a 32 as 8 hex digits: a short stable name for a URL or an argv.
local function fnv32(s)
  local h = 0x811c9dc5
  for i = 1, #s do h = ((h ~ s:byte(i)) * 0x01000193) & 0xffffffff end
  return string.format("%08x", h)
end

-- The key a route is recorded under in delivered_routes (no commas:
-- FIND_IN_SET reads the column as a comma-separated list).
function M.route_key(r)
  if r.kind == "webhook" then return "webhook:" .. fnv32(r.url) end
  if r.kind == "command" then return "command:" .. fnv32(table.concat(r.argv, "\0")) end
  return r.kind
end

local function split_keys(text)
  local set = {}
  for k in (text or ""):gmatch("[^,]+") do set[k] = true end
  return set
end

local function join_keys(set)
  local list = {}
  for k in pairs(set) do list[#list + 1] = k end
  table.sort(list)
  return #list > 0 and table.concat(list, ",") or nil
end

------------------------------------------------------------------ sending

local function short(s)
  s = tostring(s):gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")
  return #s > 200 and s:sub(1, 200) .. "..." or s
end

local send = {}

function send.webhook(route, m, json)
  local res, err = oops.http.request {
    url = route.url, method = "POST", body = json, timeout_ms = M.HTTP_TIMEOUT_MS,
    headers = {
      ["Content-Type"] = "application/json",
      ["X-Oops-Event-Id"] = m.id,
      ["X-Oops-Server"] = oops.server_name(),
    },
  }
  if not res then return nil, err end
  if res.status < 200 or res.status > 299 then
    return nil, "HTTP " .. res.status .. (res.body ~= "" and ": " .. short(res.body) or "")
  end
  return true
end

function send.command(route, m, json)
  local res, err = oops.proc.run {
    argv = route.argv, stdin = json, timeout_ms = M.COMMAND_TIMEOUT_MS,
    env = { OOPS_EVENT_ID = m.id, OOPS_EVENT_KIND = m.kind, OOPS_EVENT_TYPE = m.type },
  }
  if not res then return nil, err end
  if res.ok then return true end
  local how = res.timed_out and "timed out" or res.signal ~= 0 and ("killed by signal " .. res.signal)
    or ("exited " .. res.status)
  return nil, how .. (res.stderr ~= "" and ": " .. short(res.stderr) or "")
end

function send.log(_, m)
  log.info("notification: " .. m.title, { scan = SCAN, event = m.id, type = m.type, severity = m.level })
  return true
end

-- How a route is named in logs and outbox.last_error: a webhook by its scheme
-- and host only (its userinfo, path or query may hold the secret: oops.url).
local function where(route)
  return route.kind .. (route.url and " " .. shown_url(route.url) or route.argv and " " .. route.argv[1] or "")
end

------------------------------------------------------------------ reading

-- The rows `key` has not taken yet, oldest first, each with its pipeline
-- event joined in (for kind 'pipeline') and whether its retry is due.
local PENDING_SQL = [[
SELECT o.id, o.event_id, o.kind, o.payload, o.attempts, o.delivered_routes,
       o.created_at, (o.next_attempt_at <= NOW(6)) AS due,
       e.pipeline_id, e.event_type, e.message, e.server, e.actor, e.reason, e.created_at AS event_at,
       p.namespace, p.application, p.environment, p.deploy_mode, p.trigger_type,
       p.artifact, p.source
  FROM outbox o
  LEFT JOIN pipeline_event e ON o.kind = 'pipeline' AND e.id = o.ref_id
  LEFT JOIN pipeline p ON p.id = e.pipeline_id
 WHERE o.delivered_at IS NULL
   AND FIND_IN_SET(?, COALESCE(o.delivered_routes, '')) = 0
 ORDER BY o.id
 LIMIT ?]]

-- Anything to do at all? One cheap statement on an idle tick.
local function anything_due()
  local rows, err = oops.db.exec(
    "SELECT 1 AS one FROM outbox WHERE delivered_at IS NULL AND next_attempt_at <= NOW(6) LIMIT 1")
  if not rows then return nil, err end
  return #rows > 0
end

local function message(row)
  if row.kind == "pipeline" then return notify.pipeline_message(row) end
  if row.kind == "alert" then return notify.alert_message(row.event_id, row.payload, row.created_at) end
  return nil, "unknown outbox kind " .. tostring(row.kind)
end

------------------------------------------------------------------ one tick

-- What a tick learnt about each row it touched, by outbox id.
local function outcome(tick, row)
  local o = tick.rows[row.id]
  if not o then
    o = { row = row, ok = {}, errors = {} }
    tick.rows[row.id] = o
    tick.order[#tick.order + 1] = row.id
  end
  return o
end

-- The message and its JSON, built once per row and tick.
local function built(tick, row)
  local b = tick.built[row.id]
  if not b then
    local m, why = message(row)
    b = { m = m, why = why, json = m and notify.encode(m) }
    tick.built[row.id] = b
  end
  return b
end

-- Deliver one route's pending rows in order until one fails or is not due.
local function run_route(tick, route, key)
  local rows, err = oops.db.exec(PENDING_SQL, key, M.BATCH)
  if not rows then
    log.warn("notify: reading the outbox failed: " .. tostring(err), { scan = SCAN })
    return
  end
  local labels = { route = route.kind }
  local t0 = oops.now_ms()
  for _, row in ipairs(rows) do
    if row.due ~= 1 then return end -- waiting for its retry: later rows wait behind it
    -- The lock session dropped, or we are stopping: the next leader carries on.
    if not oops.locks.holds(LOCK) or oops.stopping() then return end
    if oops.now_ms() - t0 > M.TICK_BUDGET_MS then return end
    local b = built(tick, row)
    local o = outcome(tick, row)
    if not b.m then
      o.undeliverable = b.why
    else
      local ok, why = send[route.kind](route, b.m, b.json)
      if ok then
        o.ok[key] = true
        oops.metrics.inc("oops_notifications_delivered_total", labels)
      else
        o.errors[#o.errors + 1] = where(route) .. ": " .. tostring(why)
        oops.metrics.inc("oops_notification_failures_total", labels)
        log.warn("notification not delivered: " .. tostring(why),
          { scan = SCAN, event = row.event_id, route = where(route), attempt = row.attempts + 1 })
        return
      end
    end
  end
end

-- initial * 2^attempts, at most max.
function M.backoff_ms(retry, attempts)
  if attempts >= 40 then return retry.max_ms end
  return math.min(retry.max_ms, retry.initial_ms * (1 << attempts))
end

local function update(sql, ...)
  local res, err = oops.db.exec(sql, ...)
  if not res then log.warn("notify: recording an outcome failed: " .. tostring(err), { scan = SCAN }) end
  return res
end

-- The row's conditions: unchanged since we read it. Another leader's write
-- (a frozen one waking up) makes ours affect nothing: at worst a resend.
local SAME = " WHERE id = ? AND attempts = ? AND delivered_at IS NULL AND delivered_routes <=> ?"

-- Record one row's outcome: delivered, failed (retry later), or partly
-- delivered with the rest waiting behind an earlier row of a failing route.
local function record(o, keys, retry)
  local row = o.row
  if o.undeliverable then
    -- Not a delivery failure: retrying cannot help, and the row would hold
    -- back every later event of every route. Said loudly, kept in the table.
    log.error("notification undeliverable: " .. o.undeliverable, { scan = SCAN, event = row.event_id })
    oops.metrics.inc("oops_notifications_undeliverable_total")
    return update("UPDATE outbox SET delivered_at = NOW(6), last_error = ?" .. SAME,
      ("undeliverable: " .. o.undeliverable):sub(1, MAX_ERROR), row.id, row.attempts, row.delivered_routes)
  end
  local done = split_keys(row.delivered_routes)
  for k in pairs(o.ok) do done[k] = true end
  local complete = true
  for _, k in ipairs(keys) do complete = complete and done[k] == true end
  local routes = join_keys(done)
  if #o.errors > 0 then
    return update("UPDATE outbox SET attempts = attempts + 1, delivered_routes = ?, last_error = ?,"
      .. " next_attempt_at = NOW(6) + INTERVAL ? MICROSECOND" .. SAME,
      routes, (oops.server_name() .. ": " .. table.concat(o.errors, "; ")):sub(1, MAX_ERROR),
      M.backoff_ms(retry, row.attempts) * 1000, row.id, row.attempts, row.delivered_routes)
  elseif complete then
    return update("UPDATE outbox SET delivered_at = NOW(6), delivered_routes = ?" .. SAME,
      routes, row.id, row.attempts, row.delivered_routes)
  elseif next(o.ok) then
    return update("UPDATE outbox SET delivered_routes = ?" .. SAME,
      routes, row.id, row.attempts, row.delivered_routes)
  end
end

-- After a reload removed a route, rows waiting only for it are complete:
-- mark them, once per policy version (no route query would see them).
local function reconcile(pol, keys)
  if reconciled_version == pol.version_hash then return end
  local rows = oops.db.exec("SELECT id, attempts, delivered_routes FROM outbox"
    .. " WHERE delivered_at IS NULL AND delivered_routes IS NOT NULL ORDER BY id LIMIT 10000")
  if not rows then return end
  for _, row in ipairs(rows) do
    local done, complete = split_keys(row.delivered_routes), true
    for _, k in ipairs(keys) do complete = complete and done[k] == true end
    if complete then
      update("UPDATE outbox SET delivered_at = NOW(6)" .. SAME, row.id, row.attempts, row.delivered_routes)
    end
  end
  reconciled_version = pol.version_hash
end

function M.run(pol)
  if not leader.hold(LOCK, SCAN) then
    reconciled_version = nil -- a later leadership starts afresh
    return
  end
  -- The same route declared twice is one route: one delivery, one record.
  local routes, keys, seen = {}, {}, {}
  for _, r in ipairs(pol.notify.routes) do
    local k = M.route_key(r)
    if not seen[k] then seen[k], routes[#routes + 1], keys[#keys + 1] = true, r, k end
  end
  if #routes == 0 then return end -- nowhere to send: the outbox keeps them
  reconcile(pol, keys)
  -- Idle: the watcher's answer said nothing is due, and this server wrote
  -- nothing to the outbox since (lua/oops/watch.lua).
  if not watch.outbox_may_be_due() then return end
  watch.consume("outbox")
  local due, err = anything_due()
  if not due then
    if err then log.warn("notify: reading the outbox failed: " .. tostring(err), { scan = SCAN }) end
    return
  end
  local tick = { rows = {}, order = {}, built = {} }
  local steps = {}
  for i, r in ipairs(routes) do
    steps[i] = function() run_route(tick, r, keys[i]) end
  end
  tasks.all(steps, "notify route")
  table.sort(tick.order)
  for _, id in ipairs(tick.order) do record(tick.rows[id], keys, pol.notify.retry) end
end

return M
