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
--   * Per route, oldest first, the events of one pipeline in order (issue 28):
--     a route's rows are read BATCH at a time and sent IN_FLIGHT at once, each
--     pipeline's rows one after the other (a lane: alerts share one); a row
--     waiting for its retry holds back the later rows of its lane only, and a
--     failure stops the route's new sends for the round. Routes are
--     independent and run side by side, so a failing or hanging webhook never
--     holds back another. Failures back off: initial * 2^attempts, at most max.
--   * Marked in batches: the rows a round delivered (to every route, or to
--     some) are marked by a few UPDATEs of up to MARK_CHUNK rows, each row
--     still conditional on what was read; a failed send is never marked.
--     Rounds follow each other within a tick while a batch came back full
--     (TICK_BUDGET_MS at most), so a flood drains at the receivers' speed.
--   * A route's filters (events, environments, applications) decide what it
--     is sent; what it does not want is marked taken by it, unsent.
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
local P = require("oops.pipelines")

local M = { name = "notify" }
local SCAN = "notify"
local LOCK = leader.lock(SCAN)
M.LOCK = LOCK

-- Rows read per route and round; the next round or tick takes the rest.
M.BATCH = 250
-- Requests (commands) a route has in flight at once: HTTP keep-alive keeps
-- their connections.
M.IN_FLIGHT = 8
-- Rows one marking UPDATE takes at most (its shapes: powers of two up to it).
M.MARK_CHUNK = 256
M.HTTP_TIMEOUT_MS = 10000
M.COMMAND_TIMEOUT_MS = 30000
-- A route stops taking rows after this long in one tick (its rounds go on
-- until then while rows wait), so a slow (but answering) receiver delays the
-- other routes' next tick by about this much plus one request, never by a
-- whole batch; their rounds within a tick never wait for it.
M.TICK_BUDGET_MS = 10000
-- A receiver's answer is read to this many bytes (its status is what counts).
M.RESPONSE_MAX = 64 * 1024
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
  if r.url then return r.kind .. ":" .. fnv32(r.url) end
  if r.kind == "command" then return "command:" .. fnv32(table.concat(r.argv, "\0")) end
  return r.kind
end

local function split_keys(text)
  local set = {}
  for k in (text or ""):gmatch("[^,]+") do set[k] = true end
  return set
end

------------------------------------------------------------------ sending

local function short(s)
  s = tostring(s):gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")
  return #s > 200 and s:sub(1, 200) .. "..." or s
end

local send = {}

-- The body a route sends: its format's template (lua/oops/formats/), the
-- page's address for the link when the policy says where it lives.
local formats = require("oops.formats")
M.page = nil -- the running policy's notify.page (set by M.run)

function send.webhook(route, m, json)
  local body, ctype, extra = json, "application/json", nil
  if route.format and route.format ~= "json" then
    local f = assert(formats.get(route.format))
    body, ctype, extra = f.render(m, { page = M.page, server = oops.server_name() })
  end
  local headers = {
    ["Content-Type"] = ctype,
    ["X-Oops-Event-Id"] = m.id,
    ["X-Oops-Server"] = oops.server_name(),
  }
  for k, v in pairs(extra or {}) do headers[k] = v end
  local res, err = oops.http.request {
    url = route.url, method = "POST", body = body, timeout_ms = M.HTTP_TIMEOUT_MS, headers = headers,
    ca = route.ca, max_body = M.RESPONSE_MAX, truncate = true,
    allow_userinfo = true, -- the policy's URL as written; masked wherever shown (oops.url)
  }
  if not res then return nil, err end
  if res.status < 200 or res.status > 299 then
    return nil, "HTTP " .. res.status .. (res.body ~= "" and ": " .. short(res.body) or "")
  end
  return true
end

send.slack, send.teams = send.webhook, send.webhook

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
       e.pipeline_id, e.event_type, e.to_status, e.message, e.server, e.actor, e.reason,
       e.created_at AS event_at,
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

-- The message and its JSON, built once per row and tick whatever the routes
-- (the cache starts over past BUILT_MAX rows: bounded).
M.BUILT_MAX = 512
local function built(tick, row)
  local cache = tick.built
  local b = cache.rows[row.id]
  if not b then
    local m, why = message(row)
    b = { m = m, why = why } -- its JSON: encoded once, when a route that sends it first needs it
    if cache.n >= M.BUILT_MAX then cache.rows, cache.n = {}, 0 end
    cache.rows[row.id], cache.n = b, cache.n + 1
  end
  return b
end

-- Does the route want this row (its filters, issue 28)? Filters read the
-- row: its event type and status, its application and environment.
function M.wanted(route, row, m)
  local f = route.filter
  if not f then return true end
  if f.events then
    local names = row.kind == "alert" and { "alert", m and m.type } or { row.event_type, row.to_status }
    local hit = false
    for _, n in ipairs(names) do hit = hit or (n ~= nil and f.events[n] == true) end
    if not hit then return false end
  end
  local env, app = row.environment, row.namespace and (row.namespace .. "/" .. row.application)
  if row.kind == "alert" and m then
    for _, fact in ipairs(m.facts or {}) do
      if fact.name == "environment" then env = fact.value end
      if fact.name == "application" then app = fact.value end
    end
  end
  if f.environments and not f.environments[env or ""] then return false end
  if f.applications then
    local hit = false
    for _, pat in ipairs(f.applications) do hit = hit or (app ~= nil and app:match(pat) ~= nil) end
    if not hit then return false end
  end
  return true
end

-- The lane a row is sent in: its pipeline's (events of one pipeline in
-- order); every alert in one.
local function lane_of(row)
  if row.kind == "pipeline" and row.pipeline_id then return "p:" .. row.pipeline_id end
  return "k:" .. tostring(row.kind)
end

-- A row the route took: marked with others as soon as MARK_CHUNK are waiting
-- (a leader killed mid-round resends at most that many, plus those in flight);
-- the rest at the round's end (record).
local mark -- below
local function taken(tick, key, id)
  local t = tick.taken
  t[#t + 1] = id
  if #t >= M.MARK_CHUNK then
    tick.taken = {}
    mark(t, key, tick.keys)
  end
end

-- Send one row on the route; false when the route must stop (a failure).
local function deliver(tick, route, key, row, labels)
  local b = built(tick, row)
  local o = outcome(tick, row)
  if not b.m then
    o.undeliverable = b.why
    return true
  end
  if not M.wanted(route, row, b.m) then
    o.ok[key] = true -- not for this route: taken, unsent
    taken(tick, key, row.id)
    return true
  end
  if b.json == nil and route.kind ~= "log" then b.json = notify.encode(b.m) end
  local ok, why = send[route.kind](route, b.m, b.json)
  if ok then
    o.ok[key] = true
    taken(tick, key, row.id)
    oops.metrics.inc("oops_notifications_delivered_total", labels)
    return true
  end
  o.errors[#o.errors + 1] = where(route) .. ": " .. tostring(why)
  oops.metrics.inc("oops_notification_failures_total", labels)
  log.warn("notification not delivered: " .. tostring(why),
    { scan = SCAN, event = row.event_id, route = where(route), attempt = row.attempts + 1 })
  return false
end

-- Deliver one route's pending rows: lanes oldest first, IN_FLIGHT at once,
-- each lane in order until a row is not due; the first failure stops new
-- sends. Returns true when the batch was full (more may wait).
local function run_route(tick, route, key)
  local rows, err = oops.db.exec(PENDING_SQL, key, M.BATCH)
  if not rows then
    log.warn("notify: reading the outbox failed: " .. tostring(err), { scan = SCAN })
    return false
  end
  local lanes, order = {}, {}
  for _, row in ipairs(rows) do
    local k = lane_of(row)
    if not lanes[k] then
      lanes[k] = {}
      order[#order + 1] = lanes[k]
    end
    table.insert(lanes[k], row)
  end
  local labels = { route = route.kind }
  local stop, next_lane = false, 1
  local function worker()
    while not stop do
      local lane = order[next_lane]
      if not lane then return end
      next_lane = next_lane + 1
      for _, row in ipairs(lane) do
        if row.due ~= 1 then break end -- waiting for its retry: its lane's later rows wait behind it
        -- The lock session dropped, or we are stopping: the next leader carries on.
        if stop or not oops.locks.holds(LOCK) or oops.stopping() or oops.now_ms() - tick.t0 > M.TICK_BUDGET_MS then
          stop = true
          return
        end
        if not deliver(tick, route, key, row, labels) then
          stop = true
          return
        end
      end
    end
  end
  local workers = {}
  for i = 1, math.min(M.IN_FLIGHT, #order) do workers[i] = worker end
  tasks.all(workers, "notify " .. route.kind)
  return #rows >= M.BATCH and not stop
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

-- Record a row that failed or cannot be built: one UPDATE each (at most
-- IN_FLIGHT failures per route and round). A failure counts an attempt and
-- sets the retry, only while the row is undelivered: a frozen leader waking
-- up cannot undo a delivery another recorded, at worst it delays a retry.
local function record_one(o, retry)
  local row = o.row
  if o.undeliverable then
    -- Not a delivery failure: retrying cannot help, and the row would hold
    -- back every later event of its lane. Said loudly, kept in the table.
    log.error("notification undeliverable: " .. o.undeliverable, { scan = SCAN, event = row.event_id })
    oops.metrics.inc("oops_notifications_undeliverable_total")
    return update("UPDATE outbox SET delivered_at = NOW(6), last_error = ? WHERE id = ? AND delivered_at IS NULL",
      ("undeliverable: " .. o.undeliverable):sub(1, MAX_ERROR), row.id)
  end
  return update("UPDATE outbox SET attempts = attempts + 1, last_error = ?,"
    .. " next_attempt_at = NOW(6) + INTERVAL ? MICROSECOND WHERE id = ? AND delivered_at IS NULL",
    (oops.server_name() .. ": " .. table.concat(o.errors, "; ")):sub(1, MAX_ERROR),
    M.backoff_ms(retry, row.attempts) * 1000, row.id)
end

-- The smallest power of two >= n (at most MARK_CHUNK): the statement shapes.
local function shape(n)
  local k = 1
  while k < n do k = k * 2 end
  return math.min(k, M.MARK_CHUNK)
end

-- Mark the rows a route took (delivered to it, or not for it): its key
-- appended to delivered_routes, and delivered_at set once every route of the
-- policy is there, in one UPDATE per MARK_CHUNK rows. Conditional on the row
-- being undelivered and not yet taken by this route, and an append, never a
-- rewrite: routes marking side by side (or a frozen leader waking up) never
-- undo each other's record. MariaDB evaluates the SET list left to right, so
-- delivered_at reads the appended list. Padded to a power of two by repeating
-- the last id, so a few statement shapes serve every batch.
function mark(ids, key, keys)
  local all = {}
  for i = 1, #keys do all[i] = "FIND_IN_SET(?, delivered_routes) > 0" end
  local complete = table.concat(all, " AND ")
  local i = 1
  while i <= #ids do
    local n = math.min(M.MARK_CHUNK, #ids - i + 1)
    local k = shape(n)
    local marks, params = {}, { key }
    for _, kk in ipairs(keys) do params[#params + 1] = kk end
    for j = 1, k do
      marks[j] = "?"
      params[#params + 1] = ids[i + math.min(j, n) - 1]
    end
    params[#params + 1] = key
    local sql = "UPDATE outbox SET delivered_routes = CONCAT_WS(',', delivered_routes, ?),"
      .. " delivered_at = IF(" .. complete .. ", NOW(6), NULL)"
      .. " WHERE id IN (" .. table.concat(marks, ", ") .. ") AND delivered_at IS NULL"
      .. " AND FIND_IN_SET(?, COALESCE(delivered_routes, '')) = 0"
    -- Once more when it fails (a deadlock with another route's mark of the same
    -- rows): the statement is idempotent, and a mark lost is a resend.
    if not oops.db.exec(sql, table.unpack(params)) then update(sql, table.unpack(params)) end
    i = i + n
  end
end

-- Record what a route's round learnt: the rows it took and not yet marked,
-- in batches; its failures and the undeliverable rows one by one.
local function record(tick, key, keys, retry)
  table.sort(tick.order)
  for _, id in ipairs(tick.order) do
    local o = tick.rows[id]
    if o.undeliverable or #o.errors > 0 then record_one(o, retry) end
  end
  local t = tick.taken
  tick.taken = {}
  table.sort(t)
  mark(t, key, keys)
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
  M.page = pol.notify.page
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
  -- Each route on its own, side by side: rounds (read, send, mark) while its
  -- batch comes back full, within the tick's budget; no route waits for
  -- another's round. While this server's scans have a backlog to take
  -- (pipelines.backlog: a tick took its whole share and more were free), one
  -- round a tick: the engine comes first, its events are delivered as it
  -- drives and the rest right after.
  local t0, cache = oops.now_ms(), { rows = {}, n = 0 }
  local steps = {}
  for i, r in ipairs(routes) do
    steps[i] = function()
      repeat
        local tick = { rows = {}, order = {}, built = cache, t0 = t0, taken = {}, keys = keys }
        local more = run_route(tick, r, keys[i])
        record(tick, keys[i], keys, pol.notify.retry)
      until not more or oops.now_ms() - t0 > M.TICK_BUDGET_MS or not oops.locks.holds(LOCK) or oops.stopping()
        or P.backlog()
    end
  end
  tasks.all(steps, "notify route")
end

return M
