-- The fleet page's data (issue 16): what `/api/fleet` and `/api/pipeline/ID`
-- answer, read from the database by tasks and kept in memory, so the HTTP
-- handler (C, on the loop) answers at once and never waits on the database.
--
--   * The fleet snapshot is refreshed every REFRESH_MS, and only while the page
--     has been asked for within the last WANTED_MS: a server nobody looks at
--     sends no query for it. One refresh is at most 7 statements, each served
--     by an index (tests/integration/explain.sh) and bounded by a LIMIT,
--     whatever the history holds: servers, leader locks (+ the database's
--     clock), unfinished pipelines, the RECENT newest pipelines, the last
--     restart outcomes per scheduled target (one UNION statement), firing
--     alerts, the outbox backlog per set of routes already done.
--   * A pipeline's detail (events, command output) is read on demand by a task
--     (at most MAX_FETCHING at once) into a cache of DETAIL_CACHE entries; the
--     page polls: 202 while it is being read, then the JSON (at most
--     DETAIL_TTL_MS old; an older one is answered and read again).
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
M.EVENTS = 200
M.LOGS = 20
M.LOG_BYTES = 8192

local UNFINISHED = { "INITIALIZED", "RUNNING", "BUILD_SUCCEEDED", "DEPLOYING", "ROLLING_OUT" }

local state = {
  wanted_at = nil, -- oops.now_ms() of the last request
  snapshot = nil,  -- the fleet's JSON text
  error = nil,     -- why the last refresh failed
  details = {},    -- id -> { at = now_ms, json = text }
  fetching = {},   -- id -> true
  nfetching = 0,
  policy = nil,    -- function returning the running policy (engine.policy)
  stats = { refreshes = 0, statements = 0, last_ms = 0 },
}

local function num(v) return v ~= nil and tonumber(v) or nil end

------------------------------------------------------------------ queries

local PIPELINE_COLUMNS = "id, namespace, application, environment, status, deploy_mode, trigger_type,"
  .. " LEFT(artifact, 200) AS artifact, LEFT(message, 300) AS message, driven_by,"
  .. " created_at, status_changed_at,"
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
  outbox = "SELECT delivered_routes, COUNT(*) AS n,"
    .. " TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) AS age_us"
    .. " FROM outbox WHERE delivered_at IS NULL GROUP BY delivered_routes LIMIT 100",
  pipeline = "SELECT " .. PIPELINE_COLUMNS .. ", LEFT(source, 2000) AS source FROM pipeline WHERE id = ?",
  events = "SELECT id, event_type, from_status, to_status, LEFT(message, 1000) AS message, server,"
    .. " lock_session, created_at FROM pipeline_event WHERE pipeline_id = ? ORDER BY id LIMIT ?",
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

local function pipeline_row(r, by_conn, limits)
  local owner = num(r.owner)
  return {
    id = r.id, namespace = r.namespace, application = r.application, environment = r.environment,
    status = r.status, mode = r.deploy_mode, trigger = r.trigger_type, artifact = r.artifact,
    message = r.message, created_at = r.created_at, status_changed_at = r.status_changed_at,
    age_s = (num(r.age_us) or 0) / 1e6, timeout_s = limits[r.status],
    driver = owner and (by_conn[owner] or ("session " .. owner)) or nil,
    driven_by = r.driven_by, last_from = r.last_from,
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
  -- Notification backlog per route of the running policy.
  local groups = exec(c, SQL.outbox)
  local routes = {}
  local route_key = require("oops.scans.notify").route_key
  local done_keys = {}
  for _, r in ipairs(pol and pol.notify.routes or {}) do
    local key = route_key(r)
    if not done_keys[key] then
      done_keys[key] = true
      local pending, oldest = 0, 0
      for _, g in ipairs(groups) do
        local done = false
        for k in (g.delivered_routes or ""):gmatch("[^,]+") do if k == key then done = true end end
        if not done then
          pending = pending + (num(g.n) or 0)
          oldest = math.max(oldest, (num(g.age_us) or 0) / 1e6)
        end
      end
      -- A webhook by its scheme and host only: its userinfo, path or query may hold
      -- the secret (oops.url).
      routes[#routes + 1] = { kind = r.kind, where = r.url and shown_url(r.url) or (r.argv and r.argv[1]) or r.kind,
        pending = pending, oldest_s = oldest }
    end
  end
  return {
    server = oops.server_name(), now = now, refresh_ms = M.REFRESH_MS,
    servers = json.array(servers), leaders = leaders, pipelines = json.array(pipelines),
    restarts = json.array(restarts), alerts = json.array(alerts), routes = json.array(routes),
    statements = c.n, read_ms = oops.now_ms() - t0,
  }
end

function M.read_pipeline(id)
  local c = { n = 0 }
  local names = oops.locks.names
  local rows = exec(c, SQL.pipeline, names.pipeline_prefix, id)
  if #rows == 0 then return nil end
  local pol = state.policy and state.policy()
  local p = pipeline_row(rows[1], {}, timeouts(pol))
  p.source = rows[1].source
  local events = {}
  for _, r in ipairs(exec(c, SQL.events, id, M.EVENTS)) do
    events[#events + 1] = { id = num(r.id), type = r.event_type, from = r.from_status, to = r.to_status,
      message = r.message, server = r.server, lock_session = num(r.lock_session), at = r.created_at }
  end
  local logs = {}
  for _, r in ipairs(exec(c, SQL.logs, M.LOG_BYTES, id, M.LOGS)) do
    table.insert(logs, 1, { id = num(r.id), step = r.step, server = r.server, argv = r.argv,
      exit_status = num(r.exit_status), result = r.result, duration_ms = num(r.duration_ms),
      output = r.output, at = r.created_at })
  end
  return { pipeline = p, events = json.array(events), logs = json.array(logs), statements = c.n }
end

------------------------------------------------------------------ tasks

local function wanted(now)
  return state.wanted_at ~= nil and now - state.wanted_at < M.WANTED_MS
end

local function refresh()
  local pol = state.policy and state.policy()
  local ok, res = pcall(M.read_fleet, pol)
  state.stats.refreshes = state.stats.refreshes + 1
  if ok then
    state.snapshot, state.error = json.encode(res), nil
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

function M.start(policy_fn)
  state.policy = policy_fn
  oops.task("web", loop)
end

local function fetch(id)
  local ok, res = pcall(M.read_pipeline, id)
  state.fetching[id], state.nfetching = nil, state.nfetching - 1
  if not ok then
    local why = type(res) == "table" and res.why or tostring(res)
    log.warn("fleet page: reading pipeline " .. id .. " failed: " .. why, { scan = "web" })
    return
  end
  -- Keep at most DETAIL_CACHE entries: drop the oldest.
  local n, oldest_id, oldest_at = 0, nil, math.huge
  for k, v in pairs(state.details) do
    n = n + 1
    if v.at < oldest_at then oldest_id, oldest_at = k, v.at end
  end
  if n >= M.DETAIL_CACHE and not state.details[id] then state.details[oldest_id] = nil end
  state.details[id] = { at = oops.now_ms(), json = res and json.encode(res) or false }
end

------------------------------------------------------------------ HTTP

local function answer(status, t) return status, json.encode(t) end

-- engine.http(path) -> status, JSON text. Called by the daemon's HTTP handler
-- on the loop: reads memory only, starts tasks, never waits.
function M.http(path)
  local now = oops.now_ms()
  state.wanted_at = now
  if path == "/api/fleet" then
    if not state.snapshot then
      return answer(state.error and 503 or 202, { pending = true, error = state.error })
    end
    return 200, state.snapshot
  end
  local id = path:match("^/api/pipeline/([a-z0-9]+)$")
  if id and #id <= 64 then
    local d = state.details[id]
    local fresh = d and now - d.at < M.DETAIL_TTL_MS
    if not fresh and not state.fetching[id] and state.nfetching < M.MAX_FETCHING then
      state.fetching[id], state.nfetching = true, state.nfetching + 1
      oops.task("web pipeline", fetch, id)
    end
    if d and d.json == false then return answer(404, { error = "no pipeline " .. id }) end
    if d then return 200, d.json end
    return answer(202, { pending = true })
  end
  return answer(404, { error = "no such endpoint" })
end

-- For tests: what the refresher did.
function M.stats() return state.stats end

return M
