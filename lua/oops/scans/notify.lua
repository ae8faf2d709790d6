-- The notifier (DESIGN.md "Notifications", REFERENCE.md §12.9): delivers the
-- outbox — pipeline events and alert edges, written in the same transaction
-- as the change they announce — to the routes of the running policy, each
-- route from a queue of its own (issue 37).
--
--   * One deliverer: the sticky lock oops:leader:notify. Two would deliver
--     every event twice; a frozen leader waking up is harmless (below).
--   * Routing: the leader reads the outbox rows not yet routed (`routed = 0`,
--     oldest first, ix_outbox_unrouted) and writes, in one transaction, a
--     notify_pending row for each route that wants the event (its filters —
--     events, environments, applications — are applied here, once: a row a
--     route filters out costs it nothing more) and `routed = 1`; a row no
--     route wants is delivered at once. A route added by a reload gets the
--     events routed from then on (oopsd.policy(5) says so). Rows of the
--     outbox before schema 14 keep what each route took (delivered_routes):
--     those routes are skipped.
--   * A queue per route: a route reads its own notify_pending rows in id order
--     (its primary key: the read costs its own backlog only), BATCH at a
--     time, IN_FLIGHT sends at once, each pipeline's rows one after the other
--     (a lane: alerts share one); a row waiting for its retry holds back the
--     later rows of its lane only; a failure stops the round's new sends. A
--     row it delivered is deleted from its queue, and the outbox row is
--     delivered (delivered_at) once no queue holds it, with a conditional
--     update: at least once, each message with its stable id (a resend after
--     a crash between a send and the delete: receivers deduplicate on it).
--   * Routes never wait for each other: each route's rounds run in a task of
--     its own that outlives the tick (one per route at most), so a hanging or
--     slow receiver delays no other route by even one tick.
--   * Retries on each route's own clock: a failed row counts its own attempts
--     (initial * 2^attempts, at most max); a round that failed and delivered
--     nothing backs the whole route off the same way (notify_route: failures,
--     retry_at), so a receiver that is down costs a few statements a minute.
--     A round that delivered nothing and failed nothing (every lane waits for
--     a retry) sleeps until the first of those retries is due or new rows
--     are routed to it: no round repeats without progress.
--   * A route a reload removed releases its queue in pages of RELEASE_PAGE
--     (notify_route.removed_at while it does), whatever its size; then its
--     row goes. Routes are identified by what they are (kind + url/argv), so
--     a reload that keeps a route keeps its queue.
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

-- Rows a route reads per round; the next round takes the rest.
M.BATCH = 250
-- Outbox rows routed per statement (and per transaction).
M.ROUTE_BATCH = 250
-- Requests (commands) a route has in flight at once: HTTP keep-alive keeps
-- their connections.
M.IN_FLIGHT = 8
-- Ids one IN-list statement takes at most (its shapes: powers of two up to it).
M.MARK_CHUNK = 256
-- Rows of a removed route released per statement, and pages per tick.
M.RELEASE_PAGE = 1000
M.RELEASE_PAGES = 20
M.HTTP_TIMEOUT_MS = 10000
M.COMMAND_TIMEOUT_MS = 30000
-- A route's task stops taking rows after this long in one go (its rounds go
-- on until then while rows wait); the next tick starts it again.
M.TICK_BUDGET_MS = 10000
-- While the engine has a backlog (it comes first): routing batches and a
-- route's rounds per tick.
M.BACKLOG_BATCHES = 4
-- A receiver's answer is read to this many bytes (its status is what counts).
M.RESPONSE_MAX = 64 * 1024
local MAX_ERROR = 1000 -- characters of last_error kept

------------------------------------------------------------------ routes

-- FNV-1a 32 as 8 hex digits: a short stable name for a URL or an argv.
local function fnv32(s)
  local h = 0x811c9dc5
  for i = 1, #s do h = ((h ~ s:byte(i)) * 0x01000193) & 0xffffffff end
  return string.format("%08x", h)
end

-- The key a route's queue is kept under (notify_pending.route_key; no commas:
-- the outbox of schema 13 listed keys in delivered_routes).
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

-- What every read joins to an outbox row: its pipeline event (kind
-- 'pipeline') and the pipeline, for the message and the filters.
local JOINED = [[
       o.event_id, o.kind, o.payload, o.created_at,
       e.pipeline_id, e.event_type, e.to_status, e.message, e.server, e.actor, e.reason,
       e.created_at AS event_at,
       p.namespace, p.application, p.environment, p.deploy_mode, p.trigger_type,
       p.artifact, p.source
  FROM outbox o
  LEFT JOIN pipeline_event e ON o.kind = 'pipeline' AND e.id = o.ref_id
  LEFT JOIN pipeline p ON p.id = e.pipeline_id]]

-- The rows not routed yet, oldest first (ix_outbox_unrouted).
local UNROUTED_SQL = "SELECT o.id, o.delivered_routes, o.delivered_at," .. JOINED
  .. " WHERE o.routed = 0 ORDER BY o.id LIMIT ?"

-- A route's queue, oldest first (its primary key), with whether each row's
-- retry is due and how long until it is.
local QUEUE_SQL = "SELECT n.outbox_id AS id, n.attempts, (n.next_attempt_at <= NOW(6)) AS due,"
  .. " TIMESTAMPDIFF(MICROSECOND, NOW(6), n.next_attempt_at) AS wait_us,"
  .. JOINED:gsub("FROM outbox o", "FROM notify_pending n JOIN outbox o ON o.id = n.outbox_id", 1)
  .. " WHERE n.route_key = ? ORDER BY n.outbox_id LIMIT ?"

local function message(row)
  if row.kind == "pipeline" then return notify.pipeline_message(row) end
  if row.kind == "alert" then return notify.alert_message(row.event_id, row.payload, row.created_at) end
  return nil, "unknown outbox kind " .. tostring(row.kind)
end

-- The message and its JSON, built once per row whatever the routes (the
-- cache starts over past BUILT_MAX rows, and when no route is at work: bounded,
-- and nothing kept while idle).
M.BUILT_MAX = 256
local cache = { rows = {}, n = 0 }
local function built(row)
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

------------------------------------------------------------------ writing

local function exec(sql, ...)
  local res, err = oops.db.exec(sql, ...)
  if not res then log.warn("notify: " .. tostring(err), { scan = SCAN }) end
  return res, err
end

-- The smallest power of two >= n (at most MARK_CHUNK): the statement shapes.
local function shape(n)
  local k = 1
  while k < n do k = k * 2 end
  return math.min(k, M.MARK_CHUNK)
end

-- Run `sql` (with "%s" where the IN list goes) for ids in chunks of at most
-- MARK_CHUNK, padded to a power of two by repeating the last id, so a few
-- statement shapes serve every batch; `pre` are the parameters before the
-- list. False when a statement failed.
local function in_chunks(sql, pre, ids)
  local fine, i = true, 1
  while i <= #ids do
    local n = math.min(M.MARK_CHUNK, #ids - i + 1)
    local k = shape(n)
    local marks, params = {}, {}
    for j, v in ipairs(pre) do params[j] = v end
    for j = 1, k do
      marks[j] = "?"
      params[#params + 1] = ids[i + math.min(j, n) - 1]
    end
    fine = exec(sql:format(table.concat(marks, ", ")), table.unpack(params)) and fine
    i = i + n
  end
  return fine
end

-- Outbox rows no queue holds any more are delivered. Conditional: a row still
-- queued for another route, or delivered already, is left alone. The index is
-- named: with statistics that lag a queue's growth (no ANALYZE since), MariaDB
-- was seen reading the whole queue table once per id.
local DELIVERED_SQL = "UPDATE outbox o SET o.delivered_at = NOW(6) WHERE o.id IN (%s)"
  .. " AND o.delivered_at IS NULL AND o.routed = 1"
  .. " AND NOT EXISTS (SELECT 1 FROM notify_pending n FORCE INDEX (ix_notify_pending_outbox)"
  .. " WHERE n.outbox_id = o.id)"

-- Take ids off the route's queue (delivered, or not for it), then deliver
-- the outbox rows no other queue holds.
local function dequeue(key, ids)
  if #ids == 0 then return end
  table.sort(ids)
  in_chunks("DELETE FROM notify_pending WHERE route_key = ? AND outbox_id IN (%s)", { key }, ids)
  in_chunks(DELIVERED_SQL, {}, ids)
end

------------------------------------------------------------------ routing

-- Route one batch of the rows not routed yet to the routes (`routes`: the
-- policy's, each { route =, key = }). Returns the number of rows read (a
-- full batch: more may wait) and the set of keys that got rows, or nil.
local function route_batch(routes)
  local rows = exec(UNROUTED_SQL, M.ROUTE_BATCH)
  if not rows then return nil end
  if #rows == 0 then return 0, {} end
  local ids, pairs_, unwanted, got = {}, {}, {}, {}
  for _, row in ipairs(rows) do
    ids[#ids + 1] = row.id
    if row.delivered_at == nil then
      local b = built(row)
      if not b.m then
        -- Not a delivery failure: retrying cannot help. Said loudly, kept in the table.
        log.error("notification undeliverable: " .. tostring(b.why), { scan = SCAN, event = row.event_id })
        oops.metrics.inc("oops_notifications_undeliverable_total")
        exec("UPDATE outbox SET delivered_at = NOW(6), last_error = ? WHERE id = ? AND delivered_at IS NULL",
          ("undeliverable: " .. tostring(b.why)):sub(1, MAX_ERROR), row.id)
      else
        local took, any = split_keys(row.delivered_routes), false -- took: before schema 14
        for _, r in ipairs(routes) do
          if not took[r.key] and M.wanted(r.route, row, b.m) then
            pairs_[#pairs_ + 1] = { r.key, row.id }
            got[r.key], any = true, true
          end
        end
        if not any then unwanted[#unwanted + 1] = row.id end
      end
    end
  end
  -- One transaction: the queues' rows and `routed`, or neither (a retry
  -- routes the batch again; INSERT IGNORE keeps a row queued once).
  local ok = oops.db.begin()
  if not ok then return nil end
  local fine, i = true, 1
  while fine and i <= #pairs_ do
    local n = math.min(M.MARK_CHUNK, #pairs_ - i + 1)
    local k = shape(n)
    local values, params = {}, {}
    for j = 1, k do
      local pr = pairs_[i + math.min(j, n) - 1]
      values[j] = "(?, ?)"
      params[2 * j - 1], params[2 * j] = pr[1], pr[2]
    end
    fine = exec("INSERT IGNORE INTO notify_pending (route_key, outbox_id) VALUES " .. table.concat(values, ", "),
      table.unpack(params)) ~= nil
    i = i + n
  end
  fine = fine and in_chunks("UPDATE outbox SET routed = 1 WHERE id IN (%s) AND routed = 0", {}, ids)
  fine = fine and in_chunks("UPDATE outbox SET delivered_at = NOW(6) WHERE id IN (%s) AND delivered_at IS NULL",
    {}, unwanted)
  if not fine then
    oops.db.rollback()
    return nil
  end
  if not oops.db.commit() then return nil end
  return #rows, got
end

------------------------------------------------------------------ a route's round

-- Each route's state while this server leads, by key: { route, key, running
-- (its task is at work), gate_ms (no round before this oops.now_ms()),
-- failures (rounds in a row that failed and delivered nothing), retry, gen
-- (counts the routings that gave it rows) }.
local state = {}
local policy_version -- the policy whose routes were registered
local releasing = {} -- keys of removed routes whose queues are being released

-- The lane a row is sent in: its pipeline's (events of one pipeline in
-- order); every alert in one.
local function lane_of(row)
  if row.kind == "pipeline" and row.pipeline_id then return "p:" .. row.pipeline_id end
  return "k:" .. tostring(row.kind)
end

-- initial * 2^attempts, at most max.
function M.backoff_ms(retry, attempts)
  if attempts >= 40 then return retry.max_ms end
  return math.min(retry.max_ms, retry.initial_ms * (1 << attempts))
end

local function holding(st)
  return state[st.key] == st and oops.locks.holds(LOCK) and not oops.stopping()
end

-- Send one row; false when the round must stop (a failure).
local function deliver(st, row, round)
  local b = built(row)
  if not b.m then -- routed before it became unbuildable (a policy's format changed): never sendable
    round.taken[#round.taken + 1] = row.id
    log.error("notification undeliverable: " .. tostring(b.why), { scan = SCAN, event = row.event_id })
    return true
  end
  local route = st.route
  if not M.wanted(route, row, b.m) then -- its filter changed since it was routed
    round.taken[#round.taken + 1] = row.id
    return true
  end
  if b.json == nil and route.kind ~= "log" then b.json = notify.encode(b.m) end
  local ok, why = send[route.kind](route, b.m, b.json)
  local labels = { route = route.kind }
  if ok then
    round.taken[#round.taken + 1] = row.id
    round.sent = round.sent + 1
    oops.metrics.inc("oops_notifications_delivered_total", labels)
    return true
  end
  local text = (oops.server_name() .. ": " .. where(route) .. ": " .. tostring(why)):sub(1, MAX_ERROR)
  round.failed[#round.failed + 1] = { row = row, error = text }
  round.last_error = text
  oops.metrics.inc("oops_notification_failures_total", labels)
  log.warn("notification not delivered: " .. tostring(why),
    { scan = SCAN, event = row.event_id, route = where(route), attempt = row.attempts + 1 })
  return false
end

-- One round of a route: read its queue's head, send what is due lane by lane,
-- IN_FLIGHT at once, until the first failure; record. Returns whether another
-- round should follow at once (a full batch, progress, no failure).
local function round(st, t0)
  local gen = st.gen -- rows routed to it while this round runs wake it again (below)
  local rows = exec(QUEUE_SQL, st.key, M.BATCH)
  if not rows then return false end
  if #rows == 0 then
    st.gate_ms = st.gen == gen and math.huge or 0 -- nothing queued: until rows are routed to it
    if st.failures > 0 then
      -- Nothing left that failed (another delivered it: a leader that thawed,
      -- or one that died before it recorded so): the route is not failing.
      -- Kept, its new rows would wait for a back-off that nothing starts.
      st.failures = 0
      exec("UPDATE notify_route SET failures = 0, retry_at = NULL WHERE route_key = ?", st.key)
    end
    return false
  end
  local lanes, order, soonest = {}, {}, nil
  for _, row in ipairs(rows) do
    local k = lane_of(row)
    if not lanes[k] then
      lanes[k] = {}
      order[#order + 1] = lanes[k]
    end
    table.insert(lanes[k], row)
  end
  local r = { taken = {}, failed = {}, sent = 0 }
  local stop, next_lane = false, 1
  local function worker()
    while not stop do
      local lane = order[next_lane]
      if not lane then return end
      next_lane = next_lane + 1
      for _, row in ipairs(lane) do
        if row.due ~= 1 then -- waiting for its retry: its lane's later rows wait behind it
          local wait = math.max(0, (tonumber(row.wait_us) or 0) // 1000)
          soonest = math.min(soonest or wait, wait)
          break
        end
        if stop or not holding(st) or oops.now_ms() - t0 > M.TICK_BUDGET_MS then
          stop = true
          return
        end
        if not deliver(st, row, r) then
          stop = true
          return
        end
      end
    end
  end
  local workers = {}
  for i = 1, math.min(M.IN_FLIGHT, #order) do workers[i] = worker end
  tasks.all(workers, "notify " .. st.route.kind)
  -- Record: failures one by one (at most IN_FLIGHT), the rows taken in batches.
  for _, f in ipairs(r.failed) do
    exec("UPDATE notify_pending SET attempts = attempts + 1, last_error = ?,"
      .. " next_attempt_at = NOW(6) + INTERVAL ? MICROSECOND WHERE route_key = ? AND outbox_id = ?",
      f.error, M.backoff_ms(st.retry, f.row.attempts) * 1000, st.key, f.row.id)
  end
  dequeue(st.key, r.taken)
  local now = oops.now_ms()
  if #r.failed > 0 and #r.taken == 0 then
    -- Down, it seems: the route backs off on its own clock.
    local wait = M.backoff_ms(st.retry, st.failures)
    st.failures = st.failures + 1
    st.gate_ms = now + wait
    exec("UPDATE notify_route SET failures = ?, retry_at = NOW(6) + INTERVAL ? MICROSECOND, last_error = ?"
      .. " WHERE route_key = ?", st.failures, wait * 1000, r.last_error, st.key)
    return false
  end
  if #r.failed > 0 or (st.failures > 0 and #r.taken > 0) then
    -- The route's last error stays (oopsctl outbox, the page) after the row got through.
    st.failures = 0
    exec("UPDATE notify_route SET failures = 0, retry_at = NULL, last_error = COALESCE(?, last_error)"
      .. " WHERE route_key = ?", r.last_error, st.key)
  end
  if #r.taken == 0 and #r.failed == 0 then
    -- No progress and no failure: every lane waits for a retry (or the tick's
    -- budget ran out). Nothing to do before the first retry is due.
    if not stop and st.gen == gen then st.gate_ms = now + (soonest or 1000) end
    return false
  end
  return #r.failed == 0 and not stop and #rows >= M.BATCH
end

-- A route's task: rounds while they make progress, within the budget.
-- A route backing off waits for its gate here, not for the next tick after
-- it (each back-off step came a tick late); a longer wait than the budget
-- is left to the ticks.
local function run_route(st)
  local t0, rounds = oops.now_ms(), 0
  while holding(st) do
    local more = round(st, t0)
    rounds = rounds + 1
    local now = oops.now_ms()
    if st.failures > 0 and st.gate_ms > now and st.gate_ms - t0 <= M.TICK_BUDGET_MS then
      oops.sleep(st.gate_ms - now)
    elseif not more or now - t0 > M.TICK_BUDGET_MS or (P.backlog() and rounds >= M.BACKLOG_BATCHES) then
      return
    end
  end
end

local function start(st)
  if st.running then return end
  st.running = true
  oops.task("notify route " .. st.key, function()
    local ok, err = xpcall(run_route, debug.traceback, st)
    st.running = false
    if not ok then log.failure("notify route " .. where(st.route), err) end
  end)
end

------------------------------------------------------------------ the routes' registry

-- The policy's routes, each once (the same route declared twice is one).
local function policy_routes(pol)
  local out, seen = {}, {}
  for _, r in ipairs(pol.notify.routes) do
    local k = M.route_key(r)
    if not seen[k] then
      seen[k] = true
      out[#out + 1] = { route = r, key = k }
    end
  end
  return out
end

-- Register the policy's routes (once per policy version and leadership):
-- new ones get a row, routes the table has and the policy not are marked
-- removed (their queues released in pages), and each route's failures and
-- back-off are read back, so a new leader keeps a failing route's clock.
local function register(pol, routes)
  local rows = exec("SELECT route_key, failures, TIMESTAMPDIFF(MICROSECOND, NOW(6), retry_at) AS wait_us,"
    .. " removed_at IS NOT NULL AS removed FROM notify_route LIMIT 1000")
  if not rows then return false end
  local known, want = {}, {}
  for _, row in ipairs(rows) do known[row.route_key] = row end
  local fresh = {}
  for _, r in ipairs(routes) do
    want[r.key] = true
    local row = known[r.key]
    if not row or row.removed == 1 then
      if not exec("INSERT INTO notify_route (route_key, name) VALUES (?, ?)"
        .. " ON DUPLICATE KEY UPDATE removed_at = NULL, name = VALUES(name), failures = 0, retry_at = NULL",
        r.key, where(r.route):sub(1, 300)) then return false end
      row = nil
    end
    local st = state[r.key] or { key = r.key, failures = 0, gate_ms = 0, gen = 0 }
    st.route, st.retry = r.route, pol.notify.retry
    if row and not state[r.key] then
      st.failures = math.tointeger(row.failures) or 0
      local wait = tonumber(row.wait_us)
      if wait and wait > 0 then st.gate_ms = oops.now_ms() + wait // 1000 end
    end
    fresh[r.key] = st
    releasing[r.key] = nil
  end
  for key, row in pairs(known) do
    if not want[key] then
      if row.removed ~= 1 and not exec("UPDATE notify_route SET removed_at = NOW(6) WHERE route_key = ?", key) then
        return false
      end
      releasing[key] = true
    end
  end
  state = fresh
  return true
end

-- Release removed routes' queues: RELEASE_PAGE rows a statement, at most
-- RELEASE_PAGES pages a tick; a route whose queue is empty loses its row.
local function release()
  local pages = 0
  for key in pairs(releasing) do
    while pages < M.RELEASE_PAGES do
      pages = pages + 1
      local rows = exec("SELECT outbox_id FROM notify_pending WHERE route_key = ? ORDER BY outbox_id LIMIT ?",
        key, M.RELEASE_PAGE)
      if not rows then return end
      if #rows == 0 then
        if exec("DELETE FROM notify_route WHERE route_key = ? AND removed_at IS NOT NULL", key) then
          releasing[key] = nil
        end
        break
      end
      local ids = {}
      for i, row in ipairs(rows) do ids[i] = row.outbox_id end
      dequeue(key, ids)
      log.info(("notify: released %d rows of a removed route"):format(#ids), { scan = SCAN, route = key })
    end
  end
end

------------------------------------------------------------------ the tick

local function drop_state()
  state, policy_version, releasing = {}, nil, {}
end

function M.run(pol)
  if not leader.hold(LOCK, SCAN) then
    drop_state() -- a later leadership starts afresh; running route tasks see it and end
    return
  end
  local routes = policy_routes(pol)
  M.page = pol.notify.page
  if policy_version ~= pol.version_hash then
    if not register(pol, routes) then return end
    policy_version = pol.version_hash
  end
  if next(releasing) then release() end
  if #routes == 0 then return end -- nowhere to send: the outbox keeps them
  -- Routing: only when the watcher's answer says rows wait to be routed, or
  -- this server wrote to the outbox since (lua/oops/watch.lua). The queues
  -- need no look: each route's clock (gate_ms) says when it has work.
  local now = oops.now_ms()
  if watch.outbox_may_be_due() then
    watch.consume("outbox")
    -- Route what is new: batches while they come back full, within the
    -- budget; BACKLOG_BATCHES a tick while the engine has a backlog.
    local batches = 0
    repeat
      batches = batches + 1
      local n, got = route_batch(routes)
      if not n then break end
      for key in pairs(got) do
        local st = state[key]
        if st then
          st.gen = st.gen + 1
          -- New rows: look again, unless the route backs off on its clock
          -- (asleep for want of rows, it looks whatever its failures).
          if st.failures == 0 or st.gate_ms == math.huge then st.gate_ms = 0 end
        end
      end
    until n < M.ROUTE_BATCH or oops.now_ms() - now > M.TICK_BUDGET_MS
      or (P.backlog() and batches >= M.BACKLOG_BATCHES)
      or not oops.locks.holds(LOCK) or oops.stopping()
  end
  -- Each route whose clock allows, in a task of its own (one at a time).
  local busy = false
  for _, r in ipairs(routes) do
    local st = state[r.key]
    if st and not st.running and oops.now_ms() >= st.gate_ms then start(st) end
    busy = busy or (st ~= nil and st.running)
  end
  if not busy then cache.rows, cache.n = {}, 0 end
end

return M
