-- The fleet page's data (issue 16): what `/api/fleet` and `/api/pipeline/ID`
-- answer, read from the database by tasks and kept in memory, so the HTTP
-- handler (C, on the loop) answers at once and never waits on the database.
--
--   * The fleet snapshot is refreshed every REFRESH_MS, and only while the page
--     has been asked for within the last WANTED_MS: a server nobody looks at
--     sends no query for it. One refresh is at most 6 statements and one per
--     notification route of the policy (MAX_ROUTES at most), each served by an index
--     (tests/integration/explain.sh) and bounded by a LIMIT, whatever the
--     history holds: servers, leader locks (+ the database's clock),
--     unfinished pipelines, the RECENT newest pipelines, the last restart
--     outcomes per scheduled target (one UNION statement), firing alerts,
--     and each route's backlog (its own queue, notify_pending, counted to
--     ROUTE_SCAN rows, and its state, notify_route: issue 37).
--   * `/api/fleet` says how old its snapshot is (snapshot_age_s, on this
--     server's clock) and why the last refresh failed (refresh_error), and how
--     long a refresh has been waiting on the database (refresh_running_s): a
--     database that is down or frozen shows as a growing age, not as live data.
--   * A pipeline's detail (events, command output) is read on demand by a task
--     (at most MAX_FETCHING at once) into a cache of DETAIL_CACHE entries; the
--     page polls: 202 while it is being read, then the JSON (at most
--     DETAIL_TTL_MS old; an older one is answered and read again). An id
--     found in no pipeline is remembered too (MISS_CACHE ids for MISS_TTL_MS),
--     and new reads are rate-limited per client address and overall (token
--     buckets: FETCH_RATE/FETCH_BURST per client, at most FETCH_CLIENTS
--     clients kept, the least recently seen evicted; FETCH_RATE_ALL /
--     FETCH_BURST_ALL in all): past the rate, a request with nothing cached to
--     answer gets 429. So a loop over random ids costs a bounded number of
--     statements. A failing read is logged at most once per FAIL_LOG_MS.
--     oops_web_fetches_total{result=found|missing|failed|limited} counts them.
local oops = require("oops")
local json = require("oops.json")
local log = require("oops.log")
local shown_url = require("oops.url").show

local M = {}

M.REFRESH_MS = 1500
M.IDLE_CHECK_MS = 250 -- how soon a first request after idling starts a refresh
M.WANTED_MS = 60000
M.RECENT = 30
M.MAX_UNFINISHED = 200
M.MAX_SERVERS = 50
M.MAX_TARGETS = 50 -- scheduled restart targets shown (each: its last 3 outcomes)
M.MAX_ALERTS = 100
M.DETAIL_CACHE = 16
M.DETAIL_TTL_MS = 2000
M.MAX_FETCHING = 4
M.MISS_CACHE = 256
M.MISS_TTL_MS = 5000
M.FETCH_RATE = 2 -- new detail reads per second, per client address
M.FETCH_BURST = 10
M.FETCH_RATE_ALL = 5 -- ... and in all
M.FETCH_BURST_ALL = 20
M.FETCH_CLIENTS = 256 -- client addresses whose bucket is kept
M.FAIL_LOG_MS = 60000
M.EVENTS = 200
M.LOGS = 20
M.LOG_BYTES = 8192

local UNFINISHED = { "INITIALIZED", "RUNNING", "BUILD_SUCCEEDED", "DEPLOYING", "ROLLING_OUT" }

local state = {
  wanted_at = nil, -- oops.now_ms() of the last request
  snapshot = nil,  -- the fleet's JSON text
  error = nil,     -- why the last refresh failed
  snapshot_at = nil, -- oops.now_ms() when the snapshot was read
  refresh_started = nil, -- oops.now_ms() when the refresh under way started
  details = {},    -- id -> { at = now_ms, json = text }
  misses = {},     -- id -> now_ms: no such pipeline (MISS_CACHE at most)
  nmisses = 0,
  fetching = {},   -- id -> true
  nfetching = 0,
  limiter = nil,   -- M.limiter(): detail reads per client and overall
  fail = { logged_at = nil, since = 0 }, -- failed detail reads: last log, how many since
  policy = nil,    -- function returning the running policy (engine.policy)
  stats = { refreshes = 0, statements = 0, last_ms = 0 },
}

local function num(v) return v ~= nil and tonumber(v) or nil end

-- A lowercase DNS label (pipeline_label_valid): what names an application or environment.
local function label(s)
  return type(s) == "string" and #s <= 63 and (s:match("^[a-z0-9]$") or s:match("^[a-z0-9][a-z0-9-]*[a-z0-9]$")) ~= nil
end

------------------------------------------------------------------ queries

local PIPELINE_COLUMNS = "id, namespace, application, environment, status, deploy_mode, trigger_type,"
  .. " LEFT(artifact, 200) AS artifact, LEFT(message, 300) AS message, driven_by,"
  .. " created_at, status_changed_at, hold, deploy_requested_at IS NOT NULL AS requested,"
  .. " TIMESTAMPDIFF(MICROSECOND, status_changed_at, NOW(6)) AS age_us,"
  .. " IS_USED_LOCK(CONCAT(?, id)) AS owner,"
  -- where a finished pipeline stopped (its last event's from): which step failed
  .. " (SELECT e.from_status FROM pipeline_event e WHERE e.pipeline_id = pipeline.id"
  .. " ORDER BY e.id DESC LIMIT 1) AS last_from"

local SQL = {
  servers = "SELECT name, lock_connection_id AS conn, host, pid, health, policy_hash, oopsd_version,"
    .. " started_at, TIMESTAMPDIFF(SECOND, started_at, NOW(6)) AS up_s,"
    .. " TIMESTAMPDIFF(SECOND, last_seen, NOW(6)) AS seen_s,"
    .. " IS_USED_LOCK(CONCAT(?, name)) AS owner"
    .. " FROM server ORDER BY last_seen DESC LIMIT ?",
  unfinished = "SELECT " .. PIPELINE_COLUMNS
    .. " FROM pipeline WHERE status IN (?, ?, ?, ?, ?) ORDER BY created_at DESC LIMIT ?",
  recent = "SELECT " .. PIPELINE_COLUMNS .. " FROM pipeline ORDER BY created_at DESC LIMIT ?",
  restart_one = "(SELECT namespace, application, environment, occurrence, fired_by, LEFT(outcome, 300) AS outcome,"
    .. " finished_at FROM restart_run WHERE namespace = ? AND application = ? AND environment = ?"
    .. " ORDER BY occurrence DESC LIMIT 3)",
  alerts = "SELECT namespace, application, environment, metric, firing_since,"
    .. " TIMESTAMPDIFF(SECOND, firing_since, NOW(6)) AS for_s, LEFT(pods, 300) AS pods"
    .. " FROM alert_state WHERE firing = 1 LIMIT ?",
  -- a notification route's backlog (issue 37), one statement per route of the policy: its queue counted
  -- (notify_pending's primary key range, at most ROUTE_SCAN rows) with its first failing row, the age of its
  -- head's outbox row, that failing row's last error, and the route's own state (notify_route)
  route = "SELECT c.n, c.failing,"
    .. " TIMESTAMPDIFF(MICROSECOND, (SELECT o.created_at FROM notify_pending h LEFT JOIN outbox o ON o.id = h.outbox_id"
    .. " WHERE h.route_key = ? ORDER BY h.outbox_id LIMIT 1), NOW(6)) AS age_us,"
    .. " (SELECT LEFT(e.last_error, 1000) FROM notify_pending e WHERE e.route_key = ? AND e.outbox_id = c.failing_id)"
    .. " AS row_error, r.failures, TIMESTAMPDIFF(MICROSECOND, NOW(6), r.retry_at) AS retry_us,"
    .. " LEFT(r.last_error, 1000) AS route_error"
    .. " FROM (SELECT COUNT(*) AS n, SUM(q.attempts > 0) AS failing, MIN(IF(q.attempts > 0, q.outbox_id, NULL))"
    .. " AS failing_id FROM (SELECT outbox_id, attempts FROM notify_pending WHERE route_key = ? LIMIT ?) AS q) AS c"
    .. " LEFT JOIN notify_route r ON r.route_key = ?",
  -- with the name of the live server whose lock session holds the pipeline's lock
  pipeline = "SELECT " .. PIPELINE_COLUMNS .. ", LEFT(source, 2000) AS source,"
    -- a canary's state (issue 38)
    .. " step, weight, paused, canary_request, TIMESTAMPDIFF(MICROSECOND, step_at, NOW(6)) AS step_age_us,"
    -- its approvals (issue 39)
    .. " approvals, approved_by,"
    -- the release it was promoted from (issue 39)
    .. " promoted_from,"
    .. " (SELECT s.name FROM server s WHERE s.lock_connection_id = IS_USED_LOCK(CONCAT(?, pipeline.id))"
    .. " AND IS_USED_LOCK(CONCAT(?, s.name)) = s.lock_connection_id LIMIT 1) AS owner_name"
    .. " FROM pipeline WHERE id = ?",
  -- a canary's measurements (primary key: pipeline, step, n)
  measurements = "SELECT step, n, analysis, value, verdict, LEFT(detail, 300) AS detail, measured_at"
    .. " FROM canary_measurement WHERE pipeline_id = ? ORDER BY step, n LIMIT ?",
  events = "SELECT id, event_type, from_status, to_status, LEFT(message, 1000) AS message, server,"
    .. " lock_session, actor, reason, created_at FROM pipeline_event WHERE pipeline_id = ? ORDER BY id LIMIT ?",
  -- what `oopsctl history` reads (pipeline_store_history): the unfinished one, then the releases
  history = "SELECT id, trigger_type, status, LEFT(artifact, 200) AS artifact, created_at, status_changed_at"
    .. " FROM pipeline WHERE namespace = ? AND application = ? AND environment = ?"
    .. " AND (status = 'SUCCEEDED' OR unfinished_key IS NOT NULL)"
    .. " ORDER BY status = 'SUCCEEDED', IF(status = 'SUCCEEDED', status_changed_at, created_at) DESC,"
    .. " created_at DESC, id DESC LIMIT ?",
  -- the application's operator actions in that environment, refusals too (the audit log, issue 34)
  actions = "SELECT created_at, actor, action, pipeline_id, outcome, reason, detail FROM operator_action"
    .. " WHERE namespace = ? AND application = ? AND environment = ?"
    .. " ORDER BY created_at DESC, id DESC LIMIT ?",
  logs = "SELECT id, step, server, LEFT(argv, 1000) AS argv, exit_status, result, duration_ms,"
    .. " RIGHT(output, ?) AS output, created_at FROM pipeline_log WHERE pipeline_id = ?"
    .. " ORDER BY id DESC LIMIT ?",
}
M.SQL = SQL

local function exec(counter, sql, ...)
  counter.n = counter.n + 1
  local rows, err = oops.db.exec(sql, ...)
  if not rows then error({ why = tostring(err) }) end
  return rows
end

-- The statuses' bounds in the running policy (what the scans fail a pipeline past).
local function timeouts(pol)
  if not pol then return {} end
  return { RUNNING = pol.build.timeout_ms / 1000, DEPLOYING = pol.deploy.timeout_ms / 1000,
    ROLLING_OUT = pol.rollout.max_ms / 1000 }
end

-- A pipeline lock held by a session that is no live server's lock session (an
-- oopsd older than the server table, or one whose row is not written yet).
function M.unknown_driver(owner)
  return ("lock session %d, not a live server's"):format(owner)
end

local function pipeline_row(r, by_conn, limits)
  local owner = num(r.owner)
  return {
    id = r.id, namespace = r.namespace, application = r.application, environment = r.environment,
    status = r.status, mode = r.deploy_mode, trigger = r.trigger_type, artifact = r.artifact,
    message = r.message, created_at = r.created_at, status_changed_at = r.status_changed_at,
    age_s = (num(r.age_us) or 0) / 1e6, timeout_s = limits[r.status],
    driver = owner and (by_conn[owner] or M.unknown_driver(owner)) or nil,
    driven_by = r.driven_by, last_from = r.last_from,
    -- why it waits to deploy (issue 26: a window, freeze or slot; its message says more)
    hold = (r.status == "INITIALIZED" or r.status == "BUILD_SUCCEEDED") and r.hold or nil,
    deploy_requested = num(r.requested) == 1,
  }
end

local function leader_locks()
  local scans, names = {}, {}
  for scan in pairs(oops.locks.names.leaders) do scans[#scans + 1] = scan end
  table.sort(scans)
  for i, scan in ipairs(scans) do names[i] = oops.locks.names.leaders[scan] end
  return scans, names
end

local function restart_targets(pol)
  local list = {}
  for name, a in pairs(pol and pol.applications or {}) do
    for env, r in pairs(a.restart or {}) do
      if r.expr then
        list[#list + 1] = { app = name, namespace = a.namespace, application = a.application,
          environment = env, cron = r.cron, expr = r.expr }
      end
    end
  end
  table.sort(list, function(x, y) return x.app .. "/" .. x.environment < y.app .. "/" .. y.environment end)
  while #list > M.MAX_TARGETS do list[#list] = nil end
  return list
end

M.ROUTE_SCAN = 10000 -- queue rows a route's count reads at most (the page refreshes every 1.5 s: "10000+")
M.MAX_ROUTES = 50 -- notification routes shown (a statement each), in the policy's order

-- A route as the page shows it, from its SQL.route row: a webhook by its scheme and host only (its
-- userinfo, path or query may hold the secret: oops.url); the last error masked again (oops.outbox:
-- URLs, userinfo; bounded): the route's own while its rounds fail (failures > 0), else its first
-- failing row's. failures, retry_in_s: its back-off (notify_route); capped: pending reached ROUTE_SCAN.
function M.route_backlog(row, r)
  local mask = require("oops.outbox").mask_error
  local failures = math.tointeger(num(row.failures) or 0) or 0
  local pending = math.tointeger(num(row.n) or 0) or 0
  local retry_us = num(row.retry_us)
  return { kind = r.kind, where = r.url and shown_url(r.url) or (r.argv and r.argv[1]) or r.kind,
    pending = pending, oldest_s = math.max(0, (num(row.age_us) or 0) / 1e6),
    failing = math.tointeger(num(row.failing) or 0) or 0, capped = pending >= M.ROUTE_SCAN,
    failures = failures, retry_in_s = retry_us and math.max(0, retry_us / 1e6) or nil,
    last_error = mask(failures > 0 and row.route_error or row.row_error or nil) }
end

-- One snapshot of the fleet, as a table ready for JSON.
function M.read_fleet(pol)
  local c = { n = 0 }
  local t0 = oops.now_ms()
  local names = oops.locks.names
  -- Servers: live when their name lock is held by the lock session they registered.
  local servers, by_conn = {}, {}
  for _, r in ipairs(exec(c, SQL.servers, names.server_prefix, M.MAX_SERVERS)) do
    local conn, owner = num(r.conn), num(r.owner)
    local s = { name = r.name, host = r.host, pid = num(r.pid), health = r.health,
      policy_hash = r.policy_hash, version = r.oopsd_version, started_at = r.started_at,
      up_s = num(r.up_s), seen_s = num(r.seen_s), lock_session = owner or conn,
      live = owner ~= nil, leaders = json.array({}) }
    if owner then by_conn[owner] = r.name end
    servers[#servers + 1] = s
  end
  table.sort(servers, function(a, b) -- live ones first, then by name
    if a.live ~= b.live then return a.live end
    return a.name < b.name
  end)
  -- Leader locks and the database's clock, in one statement.
  local scans, lock_names = leader_locks()
  local cols = { "UNIX_TIMESTAMP(NOW(6)) AS now" }
  for i in ipairs(lock_names) do cols[#cols + 1] = ("IS_USED_LOCK(?) AS l%d"):format(i) end
  local lrow = exec(c, "SELECT " .. table.concat(cols, ", "), table.unpack(lock_names))[1]
  local now = num(lrow.now) or os.time()
  local leaders = {}
  for i, scan in ipairs(scans) do
    local owner = num(lrow["l" .. i])
    local who = owner and by_conn[owner]
    leaders[scan] = who or json.null
    for _, s in ipairs(servers) do
      if who and s.name == who then s.leaders[#s.leaders + 1] = scan end
    end
  end
  -- Policy versions: a live server whose hash differs from most live ones is marked.
  local votes, top, top_n = {}, nil, 0
  for _, s in ipairs(servers) do
    if s.live and s.policy_hash then
      votes[s.policy_hash] = (votes[s.policy_hash] or 0) + 1
      if votes[s.policy_hash] > top_n then top, top_n = s.policy_hash, votes[s.policy_hash] end
    end
  end
  for _, s in ipairs(servers) do s.policy_differs = s.live and s.policy_hash ~= nil and s.policy_hash ~= top end
  -- Pipelines: every unfinished one (bounded), then the newest ones.
  local limits = timeouts(pol)
  local pipelines, seen = {}, {}
  local args = { names.pipeline_prefix }
  for _, st in ipairs(UNFINISHED) do args[#args + 1] = st end
  args[#args + 1] = M.MAX_UNFINISHED
  for _, r in ipairs(exec(c, SQL.unfinished, table.unpack(args))) do
    pipelines[#pipelines + 1] = pipeline_row(r, by_conn, limits)
    seen[r.id] = true
  end
  for _, r in ipairs(exec(c, SQL.recent, names.pipeline_prefix, M.RECENT)) do
    if not seen[r.id] then pipelines[#pipelines + 1] = pipeline_row(r, by_conn, limits) end
  end
  table.sort(pipelines, function(a, b)
    if a.created_at ~= b.created_at then return a.created_at > b.created_at end
    return a.id > b.id
  end)
  -- Scheduled restarts: the next occurrence (policy + the database's clock), the last outcomes.
  local restarts = {}
  local targets = restart_targets(pol)
  if #targets > 0 then
    local parts, targs = {}, {}
    for i, t in ipairs(targets) do
      parts[i] = SQL.restart_one
      targs[#targs + 1], targs[#targs + 2], targs[#targs + 3] = t.namespace, t.application, t.environment
    end
    local last = {}
    for _, r in ipairs(exec(c, table.concat(parts, " UNION ALL "), table.unpack(targs))) do
      local k = r.namespace .. "/" .. r.application .. "/" .. r.environment
      last[k] = last[k] or json.array({})
      last[k][#last[k] + 1] = { occurrence = r.occurrence, fired_by = r.fired_by, outcome = r.outcome,
        finished_at = r.finished_at }
    end
    local tz = pol.restarts.timezone
    for _, t in ipairs(targets) do
      local k = t.namespace .. "/" .. t.application .. "/" .. t.environment
      local ok, nxt = pcall(t.expr.next, t.expr, math.floor(now), tz)
      local l = last[k] or json.array({})
      table.sort(l, function(a, b) return a.occurrence > b.occurrence end)
      restarts[#restarts + 1] = { app = t.app, namespace = t.namespace, application = t.application,
        environment = t.environment, cron = t.cron, next = ok and nxt and os.date("!%Y-%m-%d %H:%M:%S", nxt) or nil,
        next_in_s = ok and nxt and nxt - now or nil, last = l }
    end
  end
  -- Firing alerts.
  local alerts = {}
  for _, r in ipairs(exec(c, SQL.alerts, M.MAX_ALERTS)) do
    alerts[#alerts + 1] = { namespace = r.namespace, application = r.application, environment = r.environment,
      metric = r.metric, since = r.firing_since, for_s = num(r.for_s), pods = r.pods }
  end
  -- Notification backlog per route of the running policy: each route's own queue and state.
  local routes = {}
  local route_key = require("oops.scans.notify").route_key
  local done_keys = {}
  for _, r in ipairs(pol and pol.notify.routes or {}) do
    local key = route_key(r)
    if not done_keys[key] and #routes < M.MAX_ROUTES then
      done_keys[key] = true
      routes[#routes + 1] = M.route_backlog(exec(c, SQL.route, key, key, key, M.ROUTE_SCAN, key)[1] or {}, r)
    end
  end
  return {
    server = oops.server_name(), now = now, refresh_ms = M.REFRESH_MS,
    servers = json.array(servers), leaders = leaders, pipelines = json.array(pipelines),
    restarts = json.array(restarts), alerts = json.array(alerts), routes = json.array(routes),
    statements = c.n, read_ms = oops.now_ms() - t0,
  }
end

-- A canary's section of a pipeline's detail (issue 38): its plan under this
-- server's policy, its state, and its measurements (one statement); nil for
-- a pipeline that is no canary.
M.MEASUREMENTS = 200
local function canary_of(c, pol, row, p, id)
  local steps = pol and p.trigger ~= "rollback" and require("oops.policy.canary").plan(pol, p) or nil
  local step = num(row.step) or 0
  if not steps and step == 0 then return nil end
  local plan = {}
  for i, s in ipairs(steps or {}) do
    local a = s.analysis and pol.analyses and pol.analyses[s.analysis]
    plan[i] = s.weight and { kind = "weight", weight = s.weight }
      or s.analysis and { kind = "analysis", name = s.analysis, count = a and a.count,
        interval_ms = a and a.interval_ms }
      or { kind = "pause", ms = s.pause_ms, until_operator = s.pause == true or nil }
  end
  local age_s = num(row.step_age_us) and num(row.step_age_us) / 1e6 or nil
  local cur = steps and steps[step]
  local m = {}
  for _, r in ipairs(exec(c, SQL.measurements, id, M.MEASUREMENTS)) do
    m[#m + 1] = { step = num(r.step), n = num(r.n), analysis = r.analysis, value = num(r.value), verdict = r.verdict,
      detail = r.detail, at = r.measured_at }
  end
  return { steps = json.array(plan), step = step, weight = num(row.weight), paused = row.paused,
    request = row.canary_request, step_age_s = age_s,
    pause_left_ms = cur and cur.pause_ms and age_s and math.max(0, cur.pause_ms - age_s * 1000) or nil,
    measurements = json.array(m) }
end

-- A release's approvals (issue 39): how many its policy asks for here (this
-- server's policy), how many persons gave one and who; nil when it needs
-- none and has none.
function M.approval_of(pol, row, p)
  local needed = pol and require("oops.release").approvals_needed(pol, p) or 0
  local count = num(row.approvals) or 0
  if needed == 0 and count == 0 then return nil end
  local by = {}
  for name in (row.approved_by or ""):gmatch("[^,]+") do by[#by + 1] = name end
  return { needed = needed, count = count, by = json.array(by) }
end

-- The promotion of p's environment in this server's policy (issue 39: its
-- application's promote = {...}), or nil.
local function promote_rule(pol, p)
  local a = pol and pol.applications and pol.applications[p.namespace .. "/" .. p.application]
  return a and a.promote and a.promote[p.environment]
end

-- Where a live release goes next: { to, after_ms }, or nil.
function M.promotion_of(pol, p)
  if p.status ~= "SUCCEEDED" or p.trigger == "rollback" then return nil end
  local r = promote_rule(pol, p)
  return r and { to = r.to, after_ms = r.after_ms } or nil
end

function M.read_pipeline(id)
  local c = { n = 0 }
  local names = oops.locks.names
  local rows = exec(c, SQL.pipeline, names.pipeline_prefix, names.pipeline_prefix, names.server_prefix, id)
  if #rows == 0 then return nil end
  local pol = state.policy and state.policy()
  local owner = num(rows[1].owner)
  local p = pipeline_row(rows[1], owner and rows[1].owner_name and { [owner] = rows[1].owner_name } or {},
    timeouts(pol))
  p.source = rows[1].source
  p.promoted_from = rows[1].promoted_from
  p.canary = canary_of(c, pol, rows[1], p, id)
  p.approval = M.approval_of(pol, rows[1], p)
  p.promotion = M.promotion_of(pol, p)
  local events = {}
  for _, r in ipairs(exec(c, SQL.events, id, M.EVENTS)) do
    events[#events + 1] = { id = num(r.id), type = r.event_type, from = r.from_status, to = r.to_status,
      message = r.message, server = r.server, lock_session = num(r.lock_session), at = r.created_at,
      actor = r.actor, reason = r.reason }
  end
  local logs = {}
  for _, r in ipairs(exec(c, SQL.logs, M.LOG_BYTES, id, M.LOGS)) do
    table.insert(logs, 1, { id = num(r.id), step = r.step, server = r.server, argv = r.argv,
      exit_status = num(r.exit_status), result = r.result, duration_ms = num(r.duration_ms),
      output = r.output, at = r.created_at })
  end
  return { pipeline = p, events = json.array(events), logs = json.array(logs), statements = c.n }
end

M.HISTORY = 20
M.ACTIONS = 20

-- An application's releases in an environment, what `oopsctl history --json`
-- prints: the one in progress first, then the releases that went live, the
-- newest SUCCEEDED one live (none yet: an empty list, as oopsctl prints);
-- and the operators' newest actions there, whatever came of them (what
-- `oopsctl audit --app NS/APP --env ENV --json` lists: done, refused with the
-- words the operator saw, stale, already).
function M.read_history(ns, app, env)
  local c = { n = 0 }
  local releases, live = {}, nil
  for _, r in ipairs(exec(c, SQL.history, ns, app, env, M.HISTORY)) do
    local ok = r.status == "SUCCEEDED"
    if ok and not live then live = r.id end
    releases[#releases + 1] = { id = r.id, trigger = r.trigger_type, status = r.status, artifact = r.artifact,
      created_at = r.created_at, finished_at = ok and r.status_changed_at or json.null, live = r.id == live }
  end
  local actions = {}
  for _, a in ipairs(exec(c, SQL.actions, ns, app, env, M.ACTIONS)) do
    actions[#actions + 1] = { at = a.created_at, actor = a.actor, action = a.action,
      pipeline = a.pipeline_id or json.null, outcome = a.outcome, reason = a.reason or json.null,
      detail = a.detail or json.null }
  end
  return { namespace = ns, application = app, environment = env, live = live or json.null,
    releases = json.array(releases), actions = json.array(actions), statements = c.n }
end

------------------------------------------------------------------ tasks

local function wanted(now)
  return state.wanted_at ~= nil and now - state.wanted_at < M.WANTED_MS
end

local function refresh()
  local pol = state.policy and state.policy()
  state.refresh_started = oops.now_ms()
  local ok, res = pcall(M.read_fleet, pol)
  state.refresh_started = nil
  state.stats.refreshes = state.stats.refreshes + 1
  if ok then
    state.snapshot, state.error = json.encode(res), nil
    state.snapshot_at = oops.now_ms()
    state.stats.statements, state.stats.last_ms = res.statements, res.read_ms
  else
    local why = type(res) == "table" and res.why or tostring(res)
    if state.error ~= why then log.warn("fleet page: reading the fleet failed: " .. why, { scan = "web" }) end
    state.error = why
  end
end

-- The refresher: one task for the server's life; idle (no query) while
-- nobody looks at the page.
local function loop()
  while true do
    local now = oops.now_ms()
    local pause = M.IDLE_CHECK_MS
    if wanted(now) then
      refresh()
      pause = math.max(M.IDLE_CHECK_MS, M.REFRESH_MS - (oops.now_ms() - now))
    end
    if not oops.sleep(pause) then return end
  end
end

oops.metrics.describe("oops_web_fetches_total", "counter",
  "fleet page pipeline detail reads: found, missing (no such pipeline), failed; limited: refused (429)")

function M.start(policy_fn)
  state.policy = policy_fn
  for _, r in ipairs({ "found", "missing", "failed", "limited" }) do
    oops.metrics.inc("oops_web_fetches_total", { result = r }, 0) -- shown from the start
  end
  oops.task("web", loop)
end

------------------------------------------------------------------ limits

-- Token buckets: one per client address (at most `clients`, the least
-- recently seen evicted) and one for all. take(client, now) takes a token
-- from both, or none: -> true, or false and the ms until one is there.
function M.limiter(o)
  local L = { clients = {}, n = 0 }
  local function refill(b, rate, burst, now)
    b.tokens = math.min(burst, b.tokens + (now - b.at) * rate / 1000)
    b.at = now
  end
  L.all = { tokens = o.burst_all, at = nil }
  function L.take(client, now)
    local b = L.clients[client]
    if not b then
      if L.n >= o.clients then
        local oldest, at = nil, math.huge
        for k, v in pairs(L.clients) do
          if v.seen < at then oldest, at = k, v.seen end
        end
        L.clients[oldest], L.n = nil, L.n - 1
      end
      b = { tokens = o.burst, at = now }
      L.clients[client], L.n = b, L.n + 1
    end
    b.seen = now
    refill(b, o.rate, o.burst, now)
    L.all.at = L.all.at or now
    refill(L.all, o.rate_all, o.burst_all, now)
    if b.tokens >= 1 and L.all.tokens >= 1 then
      b.tokens, L.all.tokens = b.tokens - 1, L.all.tokens - 1
      return true
    end
    local need = math.max(b.tokens < 1 and (1 - b.tokens) * 1000 / o.rate or 0,
      L.all.tokens < 1 and (1 - L.all.tokens) * 1000 / o.rate_all or 0)
    return false, math.ceil(need)
  end
  return L
end

local function limiter()
  state.limiter = state.limiter or M.limiter({ rate = M.FETCH_RATE, burst = M.FETCH_BURST,
    rate_all = M.FETCH_RATE_ALL, burst_all = M.FETCH_BURST_ALL, clients = M.FETCH_CLIENTS })
  return state.limiter
end

local function counted(result) oops.metrics.inc("oops_web_fetches_total", { result = result }) end

-- Logged once per FAIL_LOG_MS, with how many failed since the last line.
local function fetch_failed(id, why)
  counted("failed")
  local f, now = state.fail, oops.now_ms()
  f.since = f.since + 1
  if f.logged_at and now - f.logged_at < M.FAIL_LOG_MS then return end
  local more = f.since > 1 and (" (%d reads failed since the last such line)"):format(f.since - 1) or ""
  log.warn("fleet page: reading pipeline " .. id .. " failed: " .. why .. more, { scan = "web" })
  f.logged_at, f.since = now, 0
end

-- Bounded caches: drop the oldest entry when full (n entries, `at` of each).
local function drop_oldest(t, at_of)
  local oldest_id, oldest_at = nil, math.huge
  for k, v in pairs(t) do
    if at_of(v) < oldest_at then oldest_id, oldest_at = k, at_of(v) end
  end
  if oldest_id ~= nil then t[oldest_id] = nil end
end

local function fetch(id, read, ...)
  local ok, res = pcall(read, ...)
  state.fetching[id], state.nfetching = nil, state.nfetching - 1
  if not ok then return fetch_failed(id, type(res) == "table" and res.why or tostring(res)) end
  local now = oops.now_ms()
  if not res then
    counted("missing")
    if state.details[id] then state.details[id] = nil end
    if not state.misses[id] then
      if state.nmisses >= M.MISS_CACHE then
        drop_oldest(state.misses, function(at) return at end)
      else
        state.nmisses = state.nmisses + 1
      end
    end
    state.misses[id] = now
    return
  end
  counted("found")
  if state.misses[id] then state.misses[id], state.nmisses = nil, state.nmisses - 1 end
  local n = 0
  for _ in pairs(state.details) do n = n + 1 end
  if n >= M.DETAIL_CACHE and not state.details[id] then drop_oldest(state.details, function(v) return v.at end) end
  state.details[id] = { at = now, json = json.encode(res) }
end

------------------------------------------------------------------ HTTP

local function answer(status, t) return status, json.encode(t) end

-- The snapshot with how old it is and how its refresh is going, in front.
local function fleet(now)
  if not state.snapshot then
    return answer(state.error and 503 or 202, { pending = true, error = state.error })
  end
  local head = json.encode({
    snapshot_age_s = (now - state.snapshot_at) / 1000,
    refresh_error = state.error or json.null,
    refresh_running_s = state.refresh_started and (now - state.refresh_started) / 1000 or json.null,
  })
  return 200, head:sub(1, -2) .. "," .. state.snapshot:sub(2)
end

-- A detail read on demand: the pipeline (key = its id) or a history (key
-- "history:NS/APP/ENV"), read by read(...) in a task.
local function detail(id, client, now, read, ...)
  local missed = state.misses[id]
  if missed and now - missed < M.MISS_TTL_MS then return answer(404, { error = "no pipeline " .. id }) end
  local d = state.details[id]
  local fresh = d and now - d.at < M.DETAIL_TTL_MS
  if not fresh and not state.fetching[id] and state.nfetching < M.MAX_FETCHING then
    local ok, wait_ms = limiter().take(client or "?", now)
    if ok then
      state.fetching[id], state.nfetching = true, state.nfetching + 1
      oops.task("web pipeline", fetch, id, read, ...)
    elseif not d and not missed then
      counted("limited")
      return answer(429, { error = "too many pipeline reads; try again later", retry_after_ms = wait_ms })
    end
  end
  if d then return 200, d.json end
  if missed then return answer(404, { error = "no pipeline " .. id }) end -- read again meanwhile
  return answer(202, { pending = true })
end

-- engine.http(path, client) -> status, JSON text. Called by the daemon's HTTP
-- handler on the loop with the client's address: reads memory only, starts
-- tasks, never waits.
function M.http(path, client)
  local now = oops.now_ms()
  state.wanted_at = now
  if path == "/api/fleet" then return fleet(now) end
  if path == "/api/stats" then return require("oops.stats.live").http(now) end
  local id = path:match("^/api/pipeline/([a-z0-9]+)$")
  if id and #id <= 64 then return detail(id, client, now, M.read_pipeline, id) end
  local ns, app, env = path:match("^/api/history/([^/]+)/([^/]+)/([^/]+)$")
  if ns then
    if not (label(ns) and label(app) and label(env)) then
      return answer(404, { error = "no such application: names are lowercase DNS labels" })
    end
    return detail("history:" .. ns .. "/" .. app .. "/" .. env, client, now, M.read_history, ns, app, env)
  end
  return answer(404, { error = "no such endpoint" })
end

------------------------------------------------------------------ actions

-- Operators' actions from the page (issue 27): POST /api/pipeline/ID/stop,
-- /api/pipeline/ID/deploy, /api/rollback. The daemon has checked who asks
-- (an operator of --http-users, Authorization header only), the origin (CSRF)
-- and bounded the body; here the body is read and the action runs as a task
-- (operator.c through oops.store.act: oopsctl's rules and messages), answered
-- when it is done through answer(ticket, status, json). At most MAX_ACTIONS
-- at once (beyond: 503, nothing done).
M.MAX_ACTIONS = 4
local acting = 0

local STATUS_OF = { ok = 200, input = 422, notfound = 404, stale = 409, db = 503 }

-- The body's fields: a JSON object of known keys with string values (bool for override).
local function read_body(body, keys)
  local ok, t = pcall(json.decode, body ~= "" and body or "{}")
  if not ok or type(t) ~= "table" or t[1] ~= nil then return nil, "the body must be a JSON object" end
  for k, v in pairs(t) do
    local want = keys[k]
    if not want then return nil, ("unknown field %q"):format(tostring(k)) end
    if v ~= json.null and type(v) ~= want then return nil, ("%s must be a %s"):format(k, want) end
    if v == json.null then t[k] = nil end
  end
  return t
end

-- What oopsctl's --reason takes (pipeline_reason_check does it again in C).
local function reason_ok(r)
  if r == nil then return true end
  if #r < 1 or #r > 500 then return false, "reason must be 1 to 500 bytes" end
  if r:find("[%z\1-\31\127]") then return false, "reason holds a control character" end
  return true
end

local STATUSES = { INITIALIZED = true, RUNNING = true, BUILD_SUCCEEDED = true, DEPLOYING = true,
  ROLLING_OUT = true, SUCCEEDED = true, ERROR = true, STOPPED = true }

-- The action a POST asks for: kind, args; or nil, status, why.
local function action_of(path, body)
  local id, verb = path:match("^/api/pipeline/([a-z0-9]+)/([a-z_]+)$")
  if id then
    if #id > 24 then return nil, 404, "no pipeline " .. id end
    if verb == "stop" then
      local t, why = read_body(body, { reason = "string", expect = "string" })
      if not t then return nil, 400, why end
      if t.expect and not STATUSES[t.expect] then return nil, 400, "expect: not a status: " .. t.expect end
      return "stop", { id = id, reason = t.reason, expect = t.expect }
    elseif verb == "deploy" then
      local t, why = read_body(body, { reason = "string", override = "boolean" })
      if not t then return nil, 400, why end
      if t.override and not t.reason then
        return nil, 422, "an override needs a reason (it is kept in the pipeline's history)"
      end
      return "deploy", { id = id, reason = t.reason, override = t.override == true }
    elseif verb == "approve" or verb == "reject" then -- a release's, before its deploy (issue 39)
      local t, why = read_body(body, { reason = "string" })
      if not t then return nil, 400, why end
      if not t.reason then return nil, 422, verb .. " needs a reason (it is kept in the pipeline's history)" end
      return verb, { id = id, reason = t.reason }
    elseif verb == "promote_now" then -- a live release's promotion, its wait skipped (issue 39)
      local t, why = read_body(body, { reason = "string", to = "string" })
      if not t then return nil, 400, why end
      if not t.reason then return nil, 422, "promote_now needs a reason (it is kept in the new pipeline's history)" end
      if not label(t.to) then return nil, 422, "to must be an environment (a lowercase DNS label)" end
      return verb, { id = id, reason = t.reason, to = t.to }
    elseif verb == "abort" or verb == "promote" then -- a canary's (issue 38)
      local t, why = read_body(body, verb == "promote" and { reason = "string", full = "boolean" } or
        { reason = "string" })
      if not t then return nil, 400, why end
      if not t.reason then return nil, 422, verb .. " needs a reason (it is kept in the pipeline's history)" end
      return verb, { id = id, reason = t.reason, full = t.full == true }
    end
    return nil, 404, "no such action: " .. verb
  end
  if path == "/api/rollback" then
    local t, why = read_body(body, { reason = "string", app = "string", env = "string", to = "string" })
    if not t then return nil, 400, why end
    local ns, app = (t.app or ""):match("^([^/]+)/([^/]+)$")
    if not (ns and label(ns) and label(app)) then return nil, 422, "app must be NS/APP (lowercase DNS labels)" end
    if not label(t.env) then return nil, 422, "env must be a lowercase DNS label" end
    if t.to and not (t.to:match("^[a-z0-9]+$") and #t.to <= 24) then return nil, 422, "to: not a pipeline id" end
    return "rollback", { namespace = ns, application = app, environment = t.env, to = t.to, reason = t.reason }
  end
  return nil, 404, "no such endpoint"
end

-- Forget what the page was told of a pipeline (and of its application's
-- history): its next read shows the action's event.
local function forget(id)
  if id then state.details[id] = nil end
  for k in pairs(state.details) do
    if k:sub(1, 8) == "history:" then state.details[k] = nil end
  end
  state.snapshot_at = state.snapshot_at and state.snapshot_at - M.REFRESH_MS -- shown as older: refreshed soon
end

-- promote_now: this server's policy must promote the release's environment
-- to args.to (what the page showed): nil, or the refusal.
local function promotion_refused(args)
  local p = oops.store.get(args.id)
  if not p then return nil end -- op_promote_now says what is wrong
  local r = promote_rule(state.policy and state.policy(), p)
  if r and r.to == args.to then return nil end
  return ("promote_now %s: %s/%s %s promotes %s, not to %s (policy promote = {...})"):format(args.id, p.namespace,
    p.application, p.environment, r and ("to " .. r.to) or "nowhere", args.to)
end

local function act(ticket, kind, args, answer_fn)
  local refused = kind == "promote_now" and promotion_refused(args)
  if refused then
    acting = acting - 1
    return answer_fn(ticket, 422, json.encode({ error = refused }))
  end
  local ok, code, text = pcall(oops.store.act, kind, args)
  acting = acting - 1
  if not ok then
    log.error("fleet page: " .. kind .. " failed: " .. tostring(code), { scan = "web" })
    return answer_fn(ticket, 500, json.encode({ error = "internal error (logged)" }))
  end
  if code == nil then -- no connection could be used
    return answer_fn(ticket, 503, json.encode({ error = "database unavailable: " .. tostring(text) }))
  end
  local status = STATUS_OF[code] or 500
  if code == "db" then
    log.warn("fleet page: " .. kind .. " by " .. args.actor .. " failed: " .. tostring(text), { scan = "web" })
    text = "database error (logged)"
  end
  if status == 200 then
    local r = json.decode(text)
    forget(args.id)
    forget(r and r.id)
    log.info(("fleet page: %s %s by %s%s"):format(kind, args.id or (args.namespace .. "/" .. args.application ..
      " " .. args.environment), args.actor, args.reason and (": " .. args.reason) or ""), { scan = "web" })
    return answer_fn(ticket, 200, text)
  end
  return answer_fn(ticket, status, json.encode({ error = text }))
end

-- engine.http_post(path, body, actor, ticket, answer) -> status, JSON text
-- now; or nothing: the answer comes through answer(ticket, status, json) once
-- the action's task is done. Called on the loop; never waits.
function M.post(path, body, actor, ticket, answer_fn)
  state.wanted_at = oops.now_ms()
  local kind, args, why = action_of(path, body)
  if not kind then return args, json.encode({ error = why }) end
  local ok, rwhy = reason_ok(args.reason)
  if not ok then return 422, json.encode({ error = rwhy }) end
  if acting >= M.MAX_ACTIONS then
    return 503, json.encode({ error = "too many actions at once; try again" })
  end
  args.actor = actor
  acting = acting + 1
  oops.task("web action", act, ticket, kind, args, answer_fn)
end

-- For tests: what the refresher did.
function M.stats() return state.stats end

return M
