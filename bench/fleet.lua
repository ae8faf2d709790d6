-- bench/run's fleet case (issue 24), in a process of its own:
--   oopsd lua bench/fleet.lua SERVERS PIPELINES WORKDIR
-- Prints one JSON object on stdout (the last line); servers log to
-- WORKDIR/sN.log, MariaDB to WORKDIR/mariadb/error.log.
--
-- Environment: OOPSD (the servers' binary), OOPSCTL (migrates the database:
-- the servers' own build), BENCH_POLICY (the shipped oopsd.lua of that build's
-- tree), and optionally BENCH_IDLE (the idle window, s, default 60),
-- BENCH_SETTLE (how long connections may take to settle, s, default 45),
-- BENCH_PERFORMANCE_SCHEMA (0: off, and no per-server statement counts; the
-- database's memory per connection without it), BENCH_MAX_PREPARED_STMT_COUNT
-- (default 64 × max_connections: MariaDB's own 16,382, for every session
-- together, failed pipelines of 200 servers of the build before issue 24;
-- the peak used is measured and judged against 16,382),
-- BENCH_KILL_ROUNDS (single-server kills, default 3), BENCH_MAX_CONNECTIONS
-- (default max(500, 8 × SERVERS + 100)), BENCH_PROFILE (1: the drive's ten
-- most frequent statement shapes per pipeline, from the general log, in
-- drive.top_statements; it slows the drive).
--
-- A MariaDB of its own (so its global counters count this fleet and nothing
-- else), with performance_schema on (per-thread statement counters) and
-- max_connections raised with the fleet; SERVERS real oopsd with the shipped
-- oopsd.lua (scan 5 s, lock validation 30 s, the simulated gateway: builds
-- 2 s, rollouts 1 s) and no apps.lua, so that any application is simulated
-- (the shipped apps.lua declares two, and at most one pipeline of each may
-- be unfinished). Then, in order:
--   1. settle: until every server holds at most 2 database connections, or
--      BENCH_SETTLE s (the pool's give-back after 30 s idle);
--   2. idle: BENCH_IDLE s with nothing to do: connections per server (exact,
--      from /proc), statements from the database's side (global Questions
--      and performance_schema per thread, mapped to a server by the client
--      port of its connection), RSS and CPU per server;
--   3. drive: PIPELINES pipelines at once, until all SUCCEEDED: time on the
--      database's clock, peak connections (sampled from /proc every 0.5 s,
--      and MariaDB's Max_used_connections), spread, peak RSS, CPU;
--   4. takeover: 3 pipelines a server held RUNNING (their build status call
--      fails, a transient error), then SIGKILL of one server (BENCH_KILL_ROUNDS
--      times), of the leader locks' holder, and of 10 % of the servers at once;
--      each victim's pipeline and leader lock polled from here every 10 ms
--      with IS_USED_LOCK until another session holds it: the time from the
--      SIGKILL. Then the builds are let go and every pipeline must have been
--      submitted (and deployed) exactly once (sim_call);
--   5. idle again: connections per server once settled (BENCH_SETTLE bound).
-- Nothing is asserted here: bench/run prints the table and judges.
local oops = require("oops")
local json = require("oops.json")
local lfs = require("lfs")
local here = arg[0]:match("^(.*)/[^/]*$") or "."
local C = dofile(here .. "/common.lua")
local files = require("oops.scenario.files")
local scenario_sql = require("oops.scenario").sql -- rows, or raises naming the statement

local N, P, WORK = math.tointeger(tonumber(arg[1] or "")), math.tointeger(tonumber(arg[2] or "")), arg[3]
if not N or not P or not WORK then
  io.stderr:write("usage: oopsd lua bench/fleet.lua SERVERS PIPELINES WORKDIR\n")
  os.exit(2)
end
local OOPSD = assert(os.getenv("OOPSD"), "OOPSD: the oopsd binary")
local OOPSCTL = os.getenv("OOPSCTL")
local POLICY = assert(os.getenv("BENCH_POLICY"), "BENCH_POLICY: the shipped oopsd.lua")
local function env_number(name, default) return tonumber(os.getenv(name) or "") or default end
local IDLE_S = env_number("BENCH_IDLE", 60)
local SETTLE_S = env_number("BENCH_SETTLE", 45)
local KILL_ROUNDS = env_number("BENCH_KILL_ROUNDS", 3)
local MAX_CONNECTIONS = env_number("BENCH_MAX_CONNECTIONS", math.max(500, 8 * N + 100))
local PERFORMANCE_SCHEMA = os.getenv("BENCH_PERFORMANCE_SCHEMA") ~= "0"
local PROFILE = os.getenv("BENCH_PROFILE") == "1"
local MAX_PREPARED = math.tointeger(env_number("BENCH_MAX_PREPARED_STMT_COUNT",
  math.max(16382, 64 * MAX_CONNECTIONS)))
local IDLE_CONNECTIONS = 2     -- issue 24's budget: what "settled" means
local POLL_MS = 10             -- the takeover poll
local TAKEOVER_BOUND_S = 60    -- a victim's pipelines: "not within" after this
local LEADER_BOUND_S = 120     -- its leader locks (the retention leader ticks every minute)
local HELD_PER_SERVER = 3      -- pipelines held RUNNING per server for the takeover
local STARTING_AT_ONCE = 16    -- servers started side by side

local db -- the MariaDB
local own = 0 -- statements this process sent (subtracted from the global counters)
local function sql(q, ...)
  own = own + 1
  return scenario_sql(q, ...)
end

local function say(fmt, ...) io.stderr:write(("bench fleet N=%d: " .. fmt .. "\n"):format(N, ...)) end

local function db_now() return tonumber(sql("SELECT UNIX_TIMESTAMP(NOW(6)) AS t")[1].t) end

local function placeholders(k) return ("?, "):rep(k - 1) .. "?" end

---------------------------------------------------------------- servers

local servers = {} -- { name, pid, proc, port, ... } (oops.scenario.server records)

-- Started one after the other over one scan interval (at most
-- STARTING_AT_ONCE starting at a time), so their ticks fall at every phase
-- of the interval as in a fleet started over time: started all at once,
-- every server would tick within the same fraction of a second, and a
-- takeover's time would depend on where the kill fell against that one
-- moment.
local function start_servers(policies, interval_s)
  local pending, failed = 0, {}
  local t0 = oops.now_ms()
  for i = 1, N do
    C.sleep(math.max(0, t0 + (i - 1) * interval_s * 1000 / N - oops.now_ms()) / 1000)
    while pending >= STARTING_AT_ONCE do C.sleep(0.02) end
    pending = pending + 1
    oops.task("start s" .. i, function()
      local ok, s = pcall(C.start_server, { oopsd = OOPSD, name = "s" .. i, policies = policies, db = db.url,
        log_path = ("%s/s%d.log"):format(WORK, i) })
      if ok then servers[i] = s else failed[#failed + 1] = tostring(s) end
      pending = pending - 1
    end)
  end
  while pending > 0 do C.sleep(0.05) end
  if #failed > 0 then error(("%d of %d servers did not start; the first:\n%s"):format(#failed, N, failed[1])) end
end

local function alive()
  local out = {}
  for _, s in ipairs(servers) do if not s.exit and not s.killed then out[#out + 1] = s end end
  return out
end

local function pids_of(list)
  local out = {}
  for i, s in ipairs(list) do out[i] = s.pid end
  return out
end

-- Connections of every live server: per pid and the summary.
local function connections(list) return C.db_connections(pids_of(list or alive()), db.port) end

-- Each live server's lock session: { [name] = connection id } and back, as
-- the database says (its server lock held by that session).
local function sessions()
  local by_name, by_conn = {}, {}
  for _, r in ipairs(sql("SELECT name, lock_connection_id AS c, IS_USED_LOCK(CONCAT(?, name)) AS held FROM server",
      oops.locks.names.server_prefix)) do
    if r.held and r.held == r.c then by_name[r.name], by_conn[r.c] = r.c, r.name end
  end
  return by_name, by_conn
end

local function stop_all()
  local pending = 0
  for _, s in ipairs(servers) do
    if not s.exit then
      pending = pending + 1
      oops.task("stop " .. s.name, function()
        pcall(C.stop_server, s, 10)
        pending = pending - 1
      end)
    end
  end
  local deadline = oops.now_ms() + 60000
  while pending > 0 and oops.now_ms() < deadline do C.sleep(0.05) end
end

---------------------------------------------------------------- the database's counters

local STATUS = { "QUESTIONS", "COM_STMT_PREPARE", "THREADS_CONNECTED", "MAX_USED_CONNECTIONS", "MEMORY_USED",
  "PREPARED_STMT_COUNT" }

local function global_status()
  local out = {}
  for _, r in ipairs(sql("SELECT VARIABLE_NAME AS k, VARIABLE_VALUE AS v FROM information_schema.GLOBAL_STATUS " ..
      "WHERE VARIABLE_NAME IN (" .. placeholders(#STATUS) .. ")", table.unpack(STATUS))) do
    out[r.k:lower()] = tonumber(r.v)
  end
  return out
end

-- Statements per session (performance_schema): { [connection id] =
-- { statements, prepares, port } }. "Statements" are what Questions counts
-- (executions of prepared statements, text queries, pings...): every
-- top-level statement event but Prepare and Close stmt (which Questions
-- leaves out); statements inside stored procedures (statement/sp/...) are
-- part of their CALL.
local function thread_statements()
  local out = {}
  if not PERFORMANCE_SCHEMA then return out end
  for _, r in ipairs(sql([[SELECT t.PROCESSLIST_ID AS id, e.EVENT_NAME AS ev, e.COUNT_STAR AS n
      FROM performance_schema.events_statements_summary_by_thread_by_event_name e
      JOIN performance_schema.threads t ON t.THREAD_ID = e.THREAD_ID
      WHERE e.COUNT_STAR > 0 AND t.PROCESSLIST_ID IS NOT NULL]])) do
    local x = out[r.id] or { statements = 0, prepares = 0 }
    out[r.id] = x
    if r.ev == "statement/com/Prepare" then
      x.prepares = x.prepares + r.n
    elseif r.ev ~= "statement/com/Close stmt" and not r.ev:match("^statement/sp/") then
      x.statements = x.statements + r.n
    end
  end
  for _, r in ipairs(sql("SELECT ID AS id, HOST AS host FROM information_schema.PROCESSLIST")) do
    local port = r.host and tonumber(r.host:match(":(%d+)$"))
    if out[r.id] and port then out[r.id].port = port end
  end
  return out
end

-- One look at the idle fleet: the global counters, per-session statements,
-- connections and memory of every live server.
local function look(list)
  local x = { t = oops.now_ms(), status = global_status() }
  x.own = own -- this process's statements up to its read of the counters (that one included)
  x.threads = thread_statements()
  x.per, x.conns = connections(list)
  x.usage = {}
  for _, s in ipairs(list) do x.usage[s.pid] = C.proc_usage(s.pid) end
  x.db_usage = C.proc_usage(db.proc:pid())
  return x
end

local function stats(xs)
  local n, sum, max, min = 0, 0, nil, nil
  for _, x in ipairs(xs) do
    n, sum = n + 1, sum + x
    max, min = math.max(max or x, x), math.min(min or x, x)
  end
  return { n = n, mean = n > 0 and sum / n or nil, max = max, min = min, p50 = C.quantile(xs, 0.5) }
end

-- Per server: statements sent by its sessions between two looks (sessions
-- present at the end; one opened meanwhile counts from 0; one closed
-- meanwhile is lost, and counted in `sessions_lost`).
local function per_server_statements(list, a, b)
  local pid_of_port = {}
  for pid, r in pairs(b.per) do for _, port in ipairs(r.ports) do pid_of_port[port] = pid end end
  for pid, r in pairs(a.per) do for _, port in ipairs(r.ports) do pid_of_port[port] = pid_of_port[port] or pid end end
  local st, pr, lost = {}, {}, 0
  for id, t in pairs(b.threads) do
    local pid = t.port and pid_of_port[t.port]
    if pid then
      local t0 = a.threads[id] or { statements = 0, prepares = 0 }
      st[pid] = (st[pid] or 0) + t.statements - t0.statements
      pr[pid] = (pr[pid] or 0) + t.prepares - t0.prepares
    end
  end
  for id, t in pairs(a.threads) do
    if not b.threads[id] and t.port and pid_of_port[t.port] then lost = lost + 1 end
  end
  local xs, ps = {}, {}
  for i, s in ipairs(list) do xs[i], ps[i] = st[s.pid] or 0, pr[s.pid] or 0 end
  return xs, ps, lost
end

-- What the database server uses: its Memory_used (what it allocated, by
-- its own count) and its RSS, with the sessions connected.
local function db_memory()
  local st = global_status()
  local u = C.proc_usage(db.proc:pid())
  return { memory_used = st.memory_used, rss_kb = u and u.rss_kb, threads = st.threads_connected }
end

-- The database's memory per connection: between two db_memory() looks.
local function per_connection(a, b)
  local k = b.threads - a.threads
  if k <= 0 then return nil end
  return { connections = k, memory_used_bytes = (b.memory_used - a.memory_used) / k,
    rss_bytes = a.rss_kb and b.rss_kb and (b.rss_kb - a.rss_kb) * 1024 / k }
end

-- The database's memory per named lock: this process's session takes
-- `n` locks (1,000 names a statement, as the servers do), then lets them go
-- (measured with the fleet stopped: its sessions' churn moves Memory_used by
-- megabytes).
local function per_lock(n)
  local a = db_memory()
  for i = 1, n, 1000 do
    local k = math.min(1000, n - i + 1)
    local cols, names = {}, {}
    for j = 1, k do cols[j], names[j] = "GET_LOCK(?, 0)", ("bench:lock:%d"):format(i + j - 1) end
    sql("SELECT " .. table.concat(cols, ", "), table.unpack(names))
  end
  local b = db_memory()
  sql("SELECT RELEASE_ALL_LOCKS() AS n")
  return { locks = n, memory_used_bytes = (b.memory_used - a.memory_used) / n,
    rss_bytes = a.rss_kb and b.rss_kb and (b.rss_kb - a.rss_kb) * 1024 / n }
end

---------------------------------------------------------------- phases

-- Until every live server holds at most IDLE_CONNECTIONS connections, or
-- `bound` seconds: { seconds = how long it took (absent when it did not),
-- connections = the last look's summary }.
local function settle(bound)
  local t0 = oops.now_ms()
  local sum
  repeat
    sum = select(2, connections())
    if sum.max <= IDLE_CONNECTIONS then return { seconds = (oops.now_ms() - t0) / 1000, connections = sum } end
    C.sleep(0.5)
  until oops.now_ms() - t0 >= bound * 1000
  return { connections = sum, within = false }
end

local function daemon_round_trips(list)
  local total = 0
  for _, s in ipairs(list) do
    local ok, m = pcall(C.metrics, s)
    if ok then total = total + C.sum(m, "oops_db_round_trips_total") end
  end
  return total
end

-- How many statements two looks with nothing else between them cost this
-- process (its own share of the global counters), to check `own`.
local function self_check(list)
  local a = look(list)
  local b = look(list)
  return { questions = b.status.questions - a.status.questions, counted = b.own - a.own }
end

local function idle(list)
  local rt0 = daemon_round_trips(list)
  local a = look(list)
  C.sleep(IDLE_S)
  local b = look(list)
  local rt1 = daemon_round_trips(list)
  local wall = (b.t - a.t) / 1000
  -- Less this process's own statements between the two reads of Questions.
  local questions = b.status.questions - a.status.questions - (b.own - a.own)
  local st, pr, lost = per_server_statements(list, a, b)
  local rate, prate = {}, {}
  if PERFORMANCE_SCHEMA then
    for i = 1, #st do rate[i], prate[i] = st[i] / wall, pr[i] / wall end
  end
  local rss, cpu, anon = {}, {}, {}
  for i, s in ipairs(list) do
    local u0, u1 = a.usage[s.pid], b.usage[s.pid]
    rss[i], anon[i] = u1 and u1.rss_kb or 0, u1 and u1.anon_kb or 0
    cpu[i] = u0 and u1 and 100 * (u1.cpu - u0.cpu) / wall or 0
  end
  local dbu0, dbu1 = a.db_usage, b.db_usage
  return {
    seconds = wall, servers = #list,
    connections = { at_start = a.conns, at_end = b.conns },
    threads_connected = b.status.threads_connected, prepared_statements = b.status.prepared_stmt_count,
    statements_per_s = questions / wall, statements_per_s_per_server = questions / wall / #list,
    prepares_per_s_per_server = (b.status.com_stmt_prepare - a.status.com_stmt_prepare) / wall / #list,
    per_server = { statements_per_s = stats(rate), prepares_per_s = stats(prate), sessions_lost = lost },
    daemon_round_trips_per_s_per_server = (rt1 - rt0) / wall / #list,
    rss_kb = stats(rss), anon_kb = stats(anon), cpu_percent = stats(cpu),
    database_cpu_percent = dbu0 and dbu1 and 100 * (dbu1.cpu - dbu0.cpu) / wall or nil,
  }
end

-- PIPELINES pipelines at once until every one SUCCEEDED.
local function drive(list)
  sql("FLUSH STATUS") -- Max_used_connections starts again from the connections open now
  local peak_per, peak_total, samples, stop = {}, 0, 0, false
  local dbpid = db.proc:pid()
  local u0 = { db = C.proc_usage(dbpid) }
  for _, s in ipairs(list) do u0[s.pid] = C.proc_usage(s.pid) end
  local peak_prepared = 0
  oops.task("connections sampler", function()
    while not stop do
      local per, sum = connections(list)
      for pid, r in pairs(per) do peak_per[pid] = math.max(peak_per[pid] or 0, r.n or 0) end
      peak_total, samples = math.max(peak_total, sum.total), samples + 1
      peak_prepared = math.max(peak_prepared, global_status().prepared_stmt_count or 0)
      C.sleep(0.5)
    end
  end)
  if PROFILE then C.profile_start(sql) end
  local q0, own0 = global_status().questions, own
  local t0, w0 = db_now(), oops.now_ms()
  local ids = C.insert_pipelines(P, { prefix = "f", namespace = "fleet", app = "app" })
  own = own + 2 + math.ceil(P / 500) -- BEGIN, the INSERTs, COMMIT
  -- Until every one has finished (an ERROR is counted and shown, not awaited).
  local deadline = oops.now_ms() + 15 * 60 * 1000
  local finished = "SELECT COUNT(*) AS n FROM pipeline WHERE id LIKE 'f%' AND " ..
    "status IN ('SUCCEEDED', 'ERROR', 'STOPPED')"
  while sql(finished)[1].n < P do
    if oops.now_ms() > deadline then error("the drive: not every pipeline finished after 15 min") end
    C.sleep(0.5)
  end
  local wall_local = (oops.now_ms() - w0) / 1000
  local t1 = tonumber(sql("SELECT UNIX_TIMESTAMP(MAX(status_changed_at)) AS t FROM pipeline WHERE id LIKE 'f%'")[1].t)
  stop = true
  local st = global_status()
  local q = st.questions - q0 - (own - own0)
  local drivers = {}
  for _, r in ipairs(sql([[SELECT server, COUNT(*) AS n FROM pipeline_event
      WHERE to_status = 'SUCCEEDED' AND pipeline_id LIKE 'f%' GROUP BY server]])) do drivers[r.server] = r.n end
  local per, used, peaks, hwm, cpu = {}, 0, {}, {}, 0
  for i, s in ipairs(list) do
    per[i] = drivers[s.name] or 0
    if per[i] > 0 then used = used + 1 end
    peaks[i] = peak_per[s.pid] or 0
    local u = C.proc_usage(s.pid)
    hwm[i] = u and u.hwm_kb or 0
    if u and u0[s.pid] then cpu = cpu + u.cpu - u0[s.pid].cpu end
  end
  local dbu = C.proc_usage(dbpid)
  local mean = P / #list
  local failed = sql([[SELECT COUNT(*) AS n, MIN(message) AS first FROM pipeline
    WHERE id LIKE 'f%' AND status <> 'SUCCEEDED']])[1]
  return {
    pipelines = #ids, wall_s = t1 - t0, wall_local_s = wall_local,
    not_succeeded = failed.n, not_succeeded_message = failed.first,
    prepared_statements_peak = peak_prepared,
    spread = stats(per).max / mean, servers_driving = used, drivers = stats(per),
    connections_peak = { per_server = stats(peaks), total_sampled = peak_total, samples = samples,
      mariadb_max_used = st.max_used_connections },
    statements_per_pipeline = q / P,
    top_statements = PROFILE and C.profile_top(sql, P, 10) or nil,
    peak_rss_kb = stats(hwm),
    cpu_percent = { servers = 100 * cpu / wall_local,
      mariadb = dbu and u0.db and 100 * (dbu.cpu - u0.db.cpu) / wall_local or nil },
  }
end

-- Wait until no lock named in `names` is held (the sweep releases a
-- finished pipeline's lock one rollout tick after its SUCCEEDED).
local function wait_released(pattern, bound)
  local deadline = oops.now_ms() + bound * 1000
  while sql("SELECT COUNT(*) AS n FROM pipeline WHERE id LIKE ? AND IS_USED_LOCK(CONCAT(?, id)) IS NOT NULL",
      pattern, oops.locks.names.pipeline_prefix)[1].n > 0 do
    if oops.now_ms() > deadline then return false end
    C.sleep(0.5)
  end
  return true
end

---------------------------------------------------------------- takeover

-- The session holding each lock: { [name] = connection id } (absent: free).
-- One statement per 100 names.
local function owners(names)
  local out = {}
  for i = 1, #names, 100 do
    local chunk = { table.unpack(names, i, math.min(#names, i + 99)) }
    local cols = {}
    for j = 1, #chunk do cols[j] = ("IS_USED_LOCK(?) AS c%d"):format(j) end
    local row = sql("SELECT " .. table.concat(cols, ", "), table.unpack(chunk))[1] or {}
    for j, name in ipairs(chunk) do out[name] = row["c" .. j] end
  end
  return out
end

local function lock_of(id) return oops.locks.names.pipeline_prefix .. id end

local function leader_names()
  local out = {}
  for _, name in pairs(oops.locks.names.leaders) do out[#out + 1] = name end
  table.sort(out)
  return out
end

-- 3 pipelines a server, each of its own target whose build status call
-- fails until the end: they stay RUNNING, held by whoever took them.
local function hold_pipelines()
  local k = HELD_PER_SERVER * N
  local values, params = {}, {}
  for i = 1, k do
    values[i] = "(?, 'fail_build_status', 'held by bench/fleet.lua')"
    params[i] = ("fleet/t%d/prod"):format(i)
  end
  sql("INSERT INTO sim_job (pipeline_id, kind, outcome) VALUES " .. table.concat(values, ", "), table.unpack(params))
  local ids = C.insert_pipelines(k, { prefix = "t", namespace = "fleet", app = "t" })
  own = own + 2 + math.ceil(k / 500)
  local names = {}
  for i, id in ipairs(ids) do names[i] = lock_of(id) end
  local deadline = oops.now_ms() + 120000
  while true do
    local o, free = owners(names), 0
    for _, name in ipairs(names) do if not o[name] then free = free + 1 end end
    local running = sql("SELECT COUNT(*) AS n FROM pipeline WHERE id LIKE 't%' AND status = 'RUNNING'")[1].n
    if free == 0 and running == k then break end
    if oops.now_ms() > deadline then
      error(("takeover: %d of %d pipelines still free, %d RUNNING, after 120 s"):format(free, k, running))
    end
    C.sleep(0.5)
  end
  return ids, names
end

-- SIGKILL `victims` at once; poll each lock they held (their pipelines in
-- `pnames`, the leader locks in `lnames`) every POLL_MS until a session
-- other than theirs holds it. Times from the moment before the first kill.
local function kill_round(kind, victims, names, by_name)
  local theirs = {}
  for _, v in ipairs(victims) do theirs[by_name[v.name]] = true end
  local o = owners(names.all)
  local watch, role = {}, {}
  for _, name in ipairs(names.all) do
    if o[name] and theirs[o[name]] then watch[#watch + 1] = name end
  end
  for _, name in ipairs(names.leaders) do role[name] = true end
  local leaders_watched = false
  for _, name in ipairs(watch) do if role[name] then leaders_watched = true end end
  -- At a random moment of the scan interval (the servers' ticks are spread
  -- over it; see start_servers).
  C.sleep(math.random() * names.interval_s)
  local t0 = oops.time()
  for _, v in ipairs(victims) do
    v.killed = true
    v.proc:kill(9)
  end
  local got, pending = {}, {}
  for _, name in ipairs(watch) do pending[#pending + 1] = name end
  local deadline = oops.now_ms() + (leaders_watched and LEADER_BOUND_S or TAKEOVER_BOUND_S) * 1000
  local polls = 0
  while #pending > 0 and oops.now_ms() < deadline do
    local now = owners(pending)
    local t = oops.time()
    polls = polls + 1
    local still = {}
    for _, name in ipairs(pending) do
      local c = now[name]
      if c and not theirs[c] then got[name] = t - t0 else still[#still + 1] = name end
    end
    pending = still
    if #pending > 0 then C.sleep(POLL_MS / 1000) end
  end
  local r = { kind = kind, victims = {}, pipelines = {}, leaders = {}, censored_pipelines = 0, censored_leaders = 0,
    polls = polls, seconds = oops.time() - t0 }
  for i, v in ipairs(victims) do r.victims[i] = v.name end
  r.leader_times = {} -- { [lock name] = seconds, or false when not within the bound }
  for _, name in ipairs(watch) do
    local list = role[name] and r.leaders or r.pipelines
    if got[name] then list[#list + 1] = got[name]
    elseif role[name] then r.censored_leaders = r.censored_leaders + 1
    else r.censored_pipelines = r.censored_pipelines + 1 end
    if role[name] then r.leader_times[name] = got[name] or false end
  end
  return r
end

-- Victims: the live servers holding the most of `pnames` (leader holders
-- last unless `leaders` asks for them first).
local function pick(k, names, by_conn, want_leader)
  local o = owners(names.all)
  local held, leads = {}, {}
  for _, name in ipairs(names.pipelines) do
    local who = o[name] and by_conn[o[name]]
    if who then held[who] = (held[who] or 0) + 1 end
  end
  for _, name in ipairs(names.leaders) do
    local who = o[name] and by_conn[o[name]]
    if who then leads[who] = (leads[who] or 0) + 1 end
  end
  local list = alive()
  table.sort(list, function(a, b)
    local la, lb = leads[a.name] or 0, leads[b.name] or 0
    if want_leader and la ~= lb then return la > lb end
    if not want_leader and (la > 0) ~= (lb > 0) then return la == 0 end
    local ha, hb = held[a.name] or 0, held[b.name] or 0
    if ha ~= hb then return ha > hb end
    return a.name < b.name
  end)
  local out = {}
  for i = 1, math.min(k, #list) do out[i] = list[i] end
  return out, leads
end

local function takeover(interval_s)
  local ids, pnames = hold_pipelines()
  local lnames = leader_names()
  local all = {}
  for _, n in ipairs(pnames) do all[#all + 1] = n end
  for _, n in ipairs(lnames) do all[#all + 1] = n end
  local names = { pipelines = pnames, leaders = {}, all = pnames, interval_s = interval_s }
  local with_leaders = { pipelines = pnames, leaders = lnames, all = all, interval_s = interval_s }
  local rounds = {}
  local function round(kind, k, want_leader)
    local by_name, by_conn = sessions()
    local victims = pick(k, with_leaders, by_conn, want_leader)
    say("takeover: SIGKILL %s (%s)", kind, victims[1] and victims[1].name or "?")
    rounds[#rounds + 1] = kill_round(kind, victims, want_leader ~= nil and with_leaders or names, by_name)
    for _, v in ipairs(victims) do
      local deadline = oops.now_ms() + 10000
      while not v.exit and oops.now_ms() < deadline do C.sleep(0.02) end
    end
    -- Every held pipeline back with a live server before the next round.
    local deadline = oops.now_ms() + 120000
    repeat
      local o, free = owners(pnames), 0
      for _, n in ipairs(pnames) do if not o[n] then free = free + 1 end end
      if free == 0 then break end
      C.sleep(0.2)
    until oops.now_ms() > deadline
  end
  for _ = 1, KILL_ROUNDS do round("one", 1, nil) end
  round("leader", 1, true)
  round("tenth", math.max(1, math.ceil(N / 10)), false)
  -- Let the builds go; every pipeline must finish with one build and one deploy.
  sql("DELETE FROM sim_job WHERE kind = 'fail_build_status' AND pipeline_id LIKE 'fleet/t%'")
  local deadline = oops.now_ms() + 300000
  while sql("SELECT COUNT(*) AS n FROM pipeline WHERE id LIKE 't%' AND status <> 'SUCCEEDED'")[1].n > 0 do
    if oops.now_ms() > deadline then break end
    C.sleep(0.5)
  end
  local function twice(action)
    return sql([[SELECT COUNT(*) AS n FROM pipeline p WHERE (SELECT COUNT(*) FROM sim_call c
      WHERE c.pipeline_id = p.id AND c.action = ?) <> 1]], action)[1].n
  end
  return {
    held = #ids, rounds = rounds,
    not_succeeded = sql("SELECT COUNT(*) AS n FROM pipeline WHERE status <> 'SUCCEEDED'")[1].n,
    builds_not_once = twice("build_submit"), deploys_not_once = twice("deploy"),
    poll_ms = POLL_MS,
  }
end

---------------------------------------------------------------- main

local result = { servers = N, pipelines = P, max_connections = MAX_CONNECTIONS, idle_window_s = IDLE_S,
  settle_bound_s = SETTLE_S, performance_schema = PERFORMANCE_SCHEMA, phases = {} }

local function phase(name, fn, ...)
  local t0 = oops.now_ms()
  say("%s ...", name)
  local r = fn(...)
  result.phases[name] = (oops.now_ms() - t0) / 1000
  say("%s: %.1f s", name, result.phases[name])
  return r
end

math.randomseed(os.time(), math.floor(oops.time() * 1e6) % 1000000)
local ran, err = pcall(oops.wait, function()
  local e
  local args = { "--performance-schema=" .. (PERFORMANCE_SCHEMA and "ON" or "OFF") }
  if MAX_PREPARED then args[#args + 1] = "--max-prepared-stmt-count=" .. MAX_PREPARED end
  db, e = require("oops.scenario.mariadb").start { dir = WORK .. "/mariadb", max_connections = MAX_CONNECTIONS,
    args = args }
  if not db then error("cannot start MariaDB: " .. tostring(e)) end
  local connected, cerr = oops.connect { db = db.url, name = "bench", locks = false }
  if not connected then error("cannot connect: " .. tostring(cerr)) end
  if OOPSCTL then
    local r = oops.proc.run { argv = { OOPSCTL, "migrate" }, env = { OOPS_DB = db.url }, inherit_env = true,
      timeout_ms = 120000 }
    if not r or not r.ok then error("oopsctl migrate: " .. tostring(r and (r.stderr .. r.stdout) or "did not run")) end
  else
    assert(oops.migrate())
  end
  local v = sql("SELECT VERSION() AS v, @@global.max_prepared_stmt_count AS p")[1]
  result.mariadb, result.max_prepared_stmt_count = v.v, v.p
  local policies = WORK .. "/policies"
  lfs.mkdir(policies)
  files.write(policies .. "/oopsd.lua", assert(files.read(POLICY), "cannot read " .. POLICY))
  -- The shipped scan interval (5 s), read from the policy as written.
  local text = files.read(policies .. "/oopsd.lua")
  local iv = text:match('\nscan%s*{[^}]*interval%s*=%s*"(%d+)s"')
  result.scan_interval_s = tonumber(iv) or 5
  local m0 = db_memory()
  phase("start", start_servers, policies, result.scan_interval_s)
  result.settle = phase("settle", settle, SETTLE_S)
  result.database_memory = { before = m0, idle = db_memory() }
  result.database_memory.per_connection = per_connection(m0, result.database_memory.idle)
  local list = alive()
  result.self_check = self_check(list)
  result.idle = phase("idle", idle, list)
  result.drive = phase("drive", drive, list)
  result.drive.released = wait_released("f%", 120)
  result.takeover = phase("takeover", takeover, result.scan_interval_s)
  result.idle_again = phase("settle again", settle, SETTLE_S)
  result.idle_again.servers = #alive()
  -- With every server stopped, so that nothing else moves Memory_used.
  stop_all()
  -- 20,000, not more: a session's GET_LOCK costs more the more locks it
  -- holds (here 2,000 in 0.03 s, 8,000 in 0.4 s).
  result.database_memory.per_lock = per_lock(20000)
end)
pcall(oops.wait, function()
  stop_all()
  if db then db:stop() end
end)
if not ran then
  C.kill_all()
  io.stderr:write("bench fleet: " .. tostring(err) .. "\n")
  os.exit(1)
end
io.write(json.encode(result), "\n")
os.exit(0)
