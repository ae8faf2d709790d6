-- One measured case of bench/run, in a process of its own on a database of
-- its own (OOPS_DB, empty; migrated here). Prints one JSON object on stdout.
--   oopsd lua bench/case.lua scale    N SERVERS WORKDIR
--   oopsd lua bench/case.lua reaction N SERVERS WORKDIR
--   oopsd lua bench/case.lua idle     POLICY_DIR SECONDS WORKDIR
--   oopsd lua bench/case.lua notify   N [RECEIVER] WORKDIR
--   oopsd lua bench/case.lua receiver PORT_FILE STOP_FILE [--close] [--fail PATH=SECONDS]...
--   oopsd lua bench/case.lua probe    INTERVAL_MS TIMEOUT_MS STOP_FILE PORT...
-- OOPSD: the oopsd binary to run as servers. Servers log to WORKDIR/*.log.
-- OOPSCTL (optional): migrate the case's database with that oopsctl (the
-- servers' own build, so a build compared with --compare meets its schema),
-- else with this process's oopsd. BENCH_LUA (optional): the oopsd that runs
-- this file, to start the /healthz probe (the probe mode) as a process of its
-- own.
local oops = require("oops")
local json = require("oops.json")
local here = arg[0]:match("^(.*)/[^/]*$") or "."
local C = dofile(here .. "/common.lua")
local files = require("oops.scenario.files")
local sql = require("oops.scenario").sql -- rows, or raises naming the statement
local BOUNDS = require("oops.engine").DURATION_BUCKETS

local mode = arg[1]

---------------------------------------------------------------- /healthz probe
-- `case.lua probe`: GET /healthz of every PORT at a fixed rate, open loop: a
-- request is sent every INTERVAL_MS whether or not the previous one came back
-- (each in a task of its own), so a server whose loop is stuck for seconds
-- gets a request every interval of it, each counting what it waited, instead
-- of one request per stall (coordinated omission). A request that got no
-- answer within TIMEOUT_MS counts as TIMEOUT_MS. Stops sending once STOP_FILE
-- exists, waits for the requests in flight, prints one JSON object:
-- { samples = { {port, sent_at (oops.time()), ms, status or 0}, ... } }.
-- A process of its own, so that the case's own blocking database calls
-- (inserting the pipelines, polling) cannot delay a probe's answer.
if mode == "probe" then
  local interval, timeout, stop_file = math.tointeger(tonumber(arg[2])), math.tointeger(tonumber(arg[3])), arg[4]
  local ports = {}
  for i = 5, #arg do ports[#ports + 1] = math.tointeger(tonumber(arg[i])) end
  local samples, inflight = {}, 0
  local function probe(port)
    inflight = inflight + 1
    local sent = oops.time()
    local r = oops.http.request { url = ("http://127.0.0.1:%d/healthz"):format(port), timeout_ms = timeout }
    local took = (oops.time() - sent) * 1000
    samples[#samples + 1] = { port, sent, r and math.max(0, took) or timeout, r and r.status or 0 }
    inflight = inflight - 1
  end
  local ok, err = pcall(oops.wait, function()
    local lfs = require("lfs")
    local t0, k = oops.now_ms(), 0
    while not lfs.attributes(stop_file) do
      for _, port in ipairs(ports) do oops.task("probe", probe, port) end
      k = k + 1
      oops.sleep(math.max(0, t0 + k * interval - oops.now_ms()))
    end
    while inflight > 0 do oops.sleep(10) end
  end)
  if not ok then
    io.stderr:write("bench probe: " .. tostring(err) .. "\n")
    os.exit(1)
  end
  io.write(json.encode({ samples = samples }), "\n")
  os.exit(0)
end

---------------------------------------------------------------- a receiver
-- `case.lua receiver PORT_FILE STOP_FILE [--close] [--fail PATH=SECONDS]...`:
-- a webhook receiver answering at once, in a process of its own (the case's
-- blocking database calls must not delay its answers). Writes its port to
-- PORT_FILE, counts the requests by path and X-Oops-Event-Id until STOP_FILE
-- exists, prints one JSON object: { received, distinct, duplicates,
-- first_at, last_at (oops.time(), of the requests answered 200), close,
-- impl, connections (when known), paths = { [PATH] = { requests, failed,
-- received, distinct, duplicates, first_at, last_at, fail_from,
-- switched_at } } }.
--   --fail PATH=SECONDS  answer 500 on PATH for SECONDS from its first
--     request (fail_from), 200 from then on (switched_at = fail_from + SECONDS).
--   --close  close the connection after each answer (Connection: close). The
--     bench's own server, oops.http.serve, cannot: its handler returns status,
--     body and content type only, and libmicrohttpd keeps an HTTP/1.1
--     client's connection alive. This receiver is then the same logic in
--     Node.js (RECEIVER_JS below), run by this process; without node it fails.
-- Keep-alive (the default) is oops.http.serve, as the notifier meets it in the
-- single-route case.
local RECEIVER_JS = [==[
const http = require("http"), fs = require("fs");
const [portFile, stopFile, closeArg, failJson] = process.argv.slice(1);
const close = closeArg === "1", fail = JSON.parse(failJson);
const now = () => (performance.timeOrigin + performance.now()) / 1000;
const out = { received: 0, distinct: 0, duplicates: 0, close, impl: "node " + process.version, connections: 0,
  paths: {} };
const seen = new Set(), seenBy = {};
const srv = http.createServer((req, res) => {
  req.on("data", () => {});
  req.on("end", () => {
    const t = now(), path = decodeURIComponent(req.url.split("?")[0]), id = req.headers["x-oops-event-id"] || "?";
    const p = out.paths[path] ||
      (out.paths[path] = { requests: 0, failed: 0, received: 0, distinct: 0, duplicates: 0 });
    seenBy[path] = seenBy[path] || new Set();
    p.requests++;
    let status = 200;
    if (fail[path] !== undefined) {
      if (p.fail_from === undefined) { p.fail_from = t; p.switched_at = t + fail[path]; }
      if (t < p.switched_at) status = 500;
    }
    if (status === 500) p.failed++;
    else {
      p.received++; out.received++;
      p.first_at = p.first_at || t; p.last_at = t;
      out.first_at = out.first_at || t; out.last_at = t;
      if (seenBy[path].has(id)) p.duplicates++; else { seenBy[path].add(id); p.distinct++; }
      if (seen.has(path + " " + id)) out.duplicates++; else { seen.add(path + " " + id); out.distinct++; }
    }
    const body = status === 200 ? "ok" : "failing on purpose";
    res.writeHead(status, { "Content-Type": "text/plain", "Content-Length": body.length,
      "Connection": close ? "close" : "keep-alive" });
    res.end(body);
  });
});
srv.on("connection", () => out.connections++);
srv.keepAliveTimeout = 30000;
srv.listen(0, "127.0.0.1", () => fs.writeFileSync(portFile, srv.address().port + "\n"));
setInterval(() => {
  if (!fs.existsSync(stopFile)) return;
  srv.close();
  process.stdout.write(JSON.stringify(out) + "\n", () => process.exit(0));
}, 100);
]==]
if mode == "receiver" then
  local port_file, stop_file = arg[2], arg[3]
  local close, fail = false, {}
  local i = 4
  while arg[i] do
    if arg[i] == "--close" then close = true
    elseif arg[i] == "--fail" and arg[i + 1] and arg[i + 1]:match("^/[^=]*=%d+%.?%d*$") then
      local path, s = arg[i + 1]:match("^(/[^=]*)=(.+)$")
      fail[path] = tonumber(s)
      i = i + 1
    else
      io.stderr:write("bench receiver: unknown option " .. tostring(arg[i]) .. "\n")
      os.exit(2)
    end
    i = i + 1
  end
  local out = { received = 0, distinct = 0, duplicates = 0, close = close, impl = "oops.http.serve", paths = {} }
  local ok, err = pcall(oops.wait, function()
    if close then
      -- Node.js answers; this process waits for it and hands on its JSON.
      local r = oops.proc.run { argv = { "node", "-e", RECEIVER_JS, port_file, stop_file, "1", json.encode(fail) },
        inherit_env = true, timeout_ms = 4 * 3600 * 1000, max_output = 16 * 1024 * 1024 }
      if not r then error("cannot run node (the closing receiver needs Node.js)") end
      if not r.ok then error("node: " .. r.stderr:sub(-2000)) end
      out = assert(json.decode(r.stdout:match("[^\n]*\n?$") or ""), "node printed no JSON")
      return
    end
    local seen, seen_by = {}, {}
    local srv = assert(oops.http.serve { listen = "127.0.0.1:0", max_body = 1 << 20, handler = function(req)
      local id, path, now = req.headers["x-oops-event-id"] or "?", req.path, oops.time()
      local p = out.paths[path]
      if not p then
        p = { requests = 0, failed = 0, received = 0, distinct = 0, duplicates = 0 }
        out.paths[path], seen_by[path] = p, {}
      end
      p.requests = p.requests + 1
      if fail[path] then
        if not p.fail_from then p.fail_from, p.switched_at = now, now + fail[path] end
        if now < p.switched_at then
          p.failed = p.failed + 1
          return 500, "failing on purpose"
        end
      end
      p.received, out.received = p.received + 1, out.received + 1
      p.first_at, p.last_at = p.first_at or now, now
      out.first_at, out.last_at = out.first_at or now, now
      if seen_by[path][id] then p.duplicates = p.duplicates + 1
      else seen_by[path][id], p.distinct = true, p.distinct + 1 end
      local k = path .. " " .. id
      if seen[k] then out.duplicates = out.duplicates + 1 else seen[k], out.distinct = true, out.distinct + 1 end
      return 200, "ok"
    end })
    files.write(port_file, tostring(srv:port()) .. "\n")
    local lfs = require("lfs")
    while not lfs.attributes(stop_file) do oops.sleep(100) end
    srv:close()
  end)
  if not ok then
    io.stderr:write("bench receiver: " .. tostring(err) .. "\n")
    os.exit(1)
  end
  io.write(json.encode(out), "\n")
  os.exit(0)
end

local OOPSD = assert(os.getenv("OOPSD"), "OOPSD: the oopsd binary")
local DB = assert(os.getenv("OOPS_DB"), "OOPS_DB: the case's database")

-- The policy of the scale and reaction cases: scan every 500 ms, a simulated
-- gateway with instant builds, deploys and rollouts (scale) or builds whose
-- end the bench decides (reaction: "1h", then ready_at is set by the bench).
local function policy_dir(workdir, name, text)
  local dir = workdir .. "/policy-" .. name
  require("lfs").mkdir(dir)
  files.write(dir .. "/bench.lua", text)
  return dir
end

local function db_now() return tonumber(sql("SELECT UNIX_TIMESTAMP(NOW(6)) AS t")[1].t) end

local function start_servers(n, policies, workdir)
  local list = {}
  for i = 1, n do
    list[i] = C.start_server { oopsd = OOPSD, name = "s" .. i, policies = policies, db = DB,
      log_path = ("%s/s%d.log"):format(workdir, i) }
  end
  return list
end

-- n pipelines appear at once (bench/common.lua).
local function insert_pipelines(n) C.insert_pipelines(n) end

-- Start the /healthz probe (above) on the servers; returns a function that
-- stops it and returns its samples (an empty list when it could not run).
local PROBE_INTERVAL_MS, PROBE_TIMEOUT_MS = 50, 2000
local function start_probe(servers, workdir)
  local lua = os.getenv("BENCH_LUA")
  local stop_file = workdir .. "/probe.stop"
  if not lua then return function() return {} end end
  local argv = { lua, "lua", arg[0], "probe", tostring(PROBE_INTERVAL_MS), tostring(PROBE_TIMEOUT_MS), stop_file }
  for _, s in ipairs(servers) do argv[#argv + 1] = tostring(s.port) end
  local result
  local rec = {}
  local h = oops.proc.start { argv = argv, inherit_env = true, max_output = 64 * 1024 * 1024,
    timeout_ms = 4 * 3600 * 1000, on_exit = function(r) result, rec.exit = r, r end }
  if not h then return function() return {} end end
  rec.proc = h
  C.started[#C.started + 1] = rec -- killed by C.kill_all when the case fails
  return function()
    files.write(stop_file, "stop\n")
    local deadline = oops.now_ms() + PROBE_TIMEOUT_MS + 30000
    while not result and oops.now_ms() < deadline do C.sleep(0.05) end
    if not result then h:kill(9) return {} end
    local doc = result.ok and json.decode(result.stdout:match("[^\n]*\n?$") or "")
    if type(doc) ~= "table" then
      files.write(workdir .. "/probe.err", result.stderr)
      return {}
    end
    return doc.samples
  end
end

-- Latencies (ms) of the probes sent in [from, to) (oops.time()), summed up.
local function healthz_summary(samples, from, to)
  local xs, timeouts, not_ok = {}, 0, 0
  for _, x in ipairs(samples) do
    if x[2] >= from and x[2] < to then
      xs[#xs + 1] = x[3]
      if x[4] == 0 then timeouts = timeouts + 1 elseif x[4] ~= 200 then not_ok = not_ok + 1 end
    end
  end
  return { n = #xs, p50 = C.quantile(xs, 0.5), p99 = C.quantile(xs, 0.99), max = C.quantile(xs, 1),
    timeouts = timeouts, not_ok = not_ok, interval_ms = PROBE_INTERVAL_MS, timeout_ms = PROBE_TIMEOUT_MS }
end

local function count(status)
  return sql("SELECT COUNT(*) AS n FROM pipeline WHERE status = ?", status)[1].n
end

-- Sample every server's CPU and memory while fn runs; returns fn's results
-- and per server { cpu_s, peak_rss_kb, samples = { {t, rss_kb, cpu_s} } }.
local function sampled(servers, fn)
  local usage, stop = {}, false
  for _, s in ipairs(servers) do usage[s.name] = { first = C.proc_usage(s.pid), samples = {} } end
  local t0 = oops.now_ms()
  oops.task("sampler", function()
    while not stop do
      for _, s in ipairs(servers) do
        local u = C.proc_usage(s.pid)
        if u then
          local us = usage[s.name]
          us.samples[#us.samples + 1] = { (oops.now_ms() - t0) / 1000, u.rss_kb, u.cpu - us.first.cpu, u.anon_kb }
          if u.anon_kb > (us.peak_anon_kb or 0) then us.peak_anon_kb, us.file_at_peak_kb = u.anon_kb, u.file_kb end
          us.last = u
        end
      end
      C.sleep(0.5)
    end
  end)
  local results = table.pack(fn())
  stop = true
  local wall = (oops.now_ms() - t0) / 1000
  for _, s in ipairs(servers) do
    local us, u = usage[s.name], C.proc_usage(s.pid)
    us.last = u or us.last
    us.cpu_s = us.last.cpu - us.first.cpu
    us.user_s, us.sys_s = us.last.user - us.first.user, us.last.sys - us.first.sys
    us.cpu_percent = 100 * us.cpu_s / wall
    us.peak_rss_kb = us.last.hwm_kb
    us.rss_kb = us.last.rss_kb
    us.first, us.last = nil, nil
  end
  return usage, table.unpack(results, 1, results.n)
end

local function snapshot(servers)
  local m = {}
  for i, s in ipairs(servers) do m[i] = C.metrics(s) end
  return m
end

local function deltas(servers, before, after)
  local d = {}
  for i = 1, #servers do d[i] = { before = before[i], after = after[i] } end
  return C.delta(d)
end

-- The scan-duration quantiles of a (delta of) /metrics.
local function scans(m)
  local out = {}
  for _, scan in ipairs { "build", "rollout" } do
    local b = C.scan_buckets(m, scan, BOUNDS)
    out[scan] = { ticks = b[#b][2], p50 = C.hist_quantile(b, 0.5), p99 = C.hist_quantile(b, 0.99),
      sum = C.sum(m, "oops_scan_duration_seconds_sum", { scan = scan }) }
  end
  return out
end

-- Reaction: a pipeline's build job ready (sim_job.ready_at) → its deploy
-- claim (the RUNNING -> DEPLOYING event), both on the database's clock.
local function reactions()
  local rows = sql([[SELECT TIMESTAMPDIFF(MICROSECOND, j.ready_at, e.created_at) / 1e6 AS r
    FROM sim_job j JOIN pipeline_event e ON e.pipeline_id = j.pipeline_id AND e.to_status = 'DEPLOYING'
    WHERE j.kind = 'build']])
  local xs = {}
  for i, r in ipairs(rows) do xs[i] = tonumber(r.r) end
  return xs
end

local function summary(xs)
  return { n = #xs, p50 = C.quantile(xs, 0.5), p90 = C.quantile(xs, 0.9), p99 = C.quantile(xs, 0.99),
    max = C.quantile(xs, 1), min = C.quantile(xs, 0) }
end

local function wait_all(n, status, seconds)
  local deadline = oops.now_ms() + seconds * 1000
  while count(status) < n do
    if oops.now_ms() > deadline then
      error(("%d of %d pipelines %s after %ds"):format(count(status), n, status, seconds))
    end
    C.sleep(0.25)
  end
end

local cases = {}
-- BENCH_PROFILE=1: the scale case also gives the drive's twenty most frequent
-- statement shapes per pipeline (top_statements; C.profile_top). The general
-- log slows the drive: its wall time is then no figure to compare.
local PROFILE = os.getenv("BENCH_PROFILE") == "1"

-- N pipelines at once on S servers, instant builds: until all SUCCEEDED.
function cases.scale(n, nservers, workdir)
  n, nservers = tonumber(n), tonumber(nservers)
  local dir = policy_dir(workdir, "scale", [[
scan    { interval = "500ms" }
gateway "simulated" { build = "0s", deploy = "0s", rollout = "0s" }
]])
  local servers = start_servers(nservers, dir, workdir)
  C.sleep(1) -- every server has ticked once
  local before = snapshot(servers)
  -- The database's CPU too, when bench/run says which process it is.
  local watched = { table.unpack(servers) }
  local dbpid = tonumber(os.getenv("BENCH_DB_PID") or "")
  if dbpid then watched[#watched + 1] = { name = "mariadbd", pid = dbpid } end
  local stop_probe = start_probe(servers, workdir)
  C.sleep(0.2) -- the probe process has started
  local probe_from, probe_to, top
  local usage, t0, t1, at_end = sampled(watched, function()
    if PROFILE then C.profile_start(sql) end
    local t0 = db_now()
    probe_from = oops.time()
    insert_pipelines(n)
    wait_all(n, "SUCCEEDED", 1800)
    probe_to = oops.time()
    top = PROFILE and C.profile_top(sql, n, 20) or nil
    local t1 = tonumber(sql("SELECT UNIX_TIMESTAMP(MAX(status_changed_at)) AS t FROM pipeline")[1].t)
    local at_end = snapshot(servers) -- the scan ticks until every pipeline SUCCEEDED
    -- The costs counted below include each pipeline's last statement too:
    -- the sweep's RELEASE_LOCK, one rollout tick after its SUCCEEDED.
    local deadline = oops.now_ms() + 600000
    while sql([[SELECT COUNT(*) AS n FROM pipeline
        WHERE IS_USED_LOCK(CONCAT(?, id)) IS NOT NULL]], oops.locks.names.pipeline_prefix)[1].n > 0 do
      if oops.now_ms() > deadline then error("pipeline locks still held 600s after the last SUCCEEDED") end
      C.sleep(0.25)
    end
    return t0, t1, at_end
  end)
  local after = snapshot(servers)
  local healthz = healthz_summary(stop_probe(), probe_from, probe_to)
  local d = deltas(servers, before, after)
  local drivers = {}
  for _, r in ipairs(sql([[SELECT server, COUNT(*) AS n FROM pipeline_event
      WHERE to_status = 'SUCCEEDED' GROUP BY server]])) do drivers[r.server] = r.n end
  local per, maxd = {}, 0
  for i, s in ipairs(servers) do
    per[i] = drivers[s.name] or 0
    maxd = math.max(maxd, per[i])
  end
  local trips = C.sum(d, "oops_db_round_trips_total")
  local acq = C.sum(d, "oops_lock_acquire_statements_total")
  local batches = C.sum(d, "oops_lock_acquire_batches_total")
  -- The simulated gateway's own statements (a real gateway is no database
  -- client); absent from a build older than its counter.
  local sim = after[1]["oops_sim_statements_total"] and C.sum(d, "oops_sim_statements_total") or nil
  -- Since its rows and point reads go through oops.db.insert and
  -- oops.db.lookup (batched), those statements are counted by the binding,
  -- per table.
  if sim then
    sim = sim + C.sum(d, "oops_db_insert_statements_total", { table = "sim_call" }) +
      C.sum(d, "oops_db_insert_statements_total", { table = "sim_job" }) +
      C.sum(d, "oops_db_lookup_statements_total", { table = "sim_job" })
  end
  local out = {
    n = n, servers = nservers, wall_s = t1 - t0,
    round_trips = trips, round_trips_per_pipeline = trips / n,
    sim_statements = sim, engine_round_trips_per_pipeline = sim and (trips - sim) / n or nil,
    healthz = healthz,
    round_trips_work = C.sum(d, "oops_db_round_trips_total", { conn = "work" }),
    round_trips_locks = C.sum(d, "oops_db_round_trips_total", { conn = "locks" }),
    lock_statements = acq, lock_batches = batches,
    lock_statements_per_scan = batches > 0 and acq / batches or nil,
    scans = scans(deltas(servers, before, at_end)), drivers = per, spread = maxd / (n / nservers),
    reaction = summary(reactions()),
    top_statements = top,
    usage = {},
  }
  for i, s in ipairs(servers) do
    local u = usage[s.name]
    out.usage[i] = { server = s.name, cpu_s = u.cpu_s, user_s = u.user_s, sys_s = u.sys_s, cpu_percent = u.cpu_percent,
      peak_anon_kb = u.peak_anon_kb, file_at_peak_kb = u.file_at_peak_kb,
      peak_rss_kb = u.peak_rss_kb, samples = u.samples }
  end
  local u = usage.mariadbd
  if u then out.database = { cpu_s = u.cpu_s, cpu_percent = u.cpu_percent } end
  for _, s in ipairs(servers) do C.stop_server(s) end
  return out
end

-- Reaction: N pipelines on S servers whose builds end at random moments
-- (ready_at set by the bench over 3 s): how long after its build ended each
-- was claimed for deploy.
function cases.reaction(n, nservers, workdir)
  n, nservers = tonumber(n), tonumber(nservers)
  local dir = policy_dir(workdir, "reaction", [[
scan    { interval = "500ms" }
gateway "simulated" { build = "1h", deploy = "0s", rollout = "0s" }
]])
  local servers = start_servers(nservers, dir, workdir)
  insert_pipelines(n)
  local deadline = oops.now_ms() + 120000
  while sql("SELECT COUNT(*) AS n FROM sim_job WHERE kind = 'build'")[1].n < n do
    if oops.now_ms() > deadline then error("builds not all submitted after 120s") end
    C.sleep(0.25)
  end
  -- Every build ends at its own random moment in the next 3 s. RAND() is
  -- the database's: the values are not ours to paste.
  sql("UPDATE sim_job SET ready_at = NOW(6) + INTERVAL FLOOR(RAND() * ?) MICROSECOND WHERE kind = 'build'", 3000000)
  wait_all(n, "SUCCEEDED", 600)
  local xs = reactions()
  for _, s in ipairs(servers) do C.stop_server(s) end
  return { n = n, servers = nservers, interval_s = 0.5, reaction = summary(xs), samples = xs }
end

-- A receiver (the receiver mode above) in a process of its own, on a free
-- port: { port, stop = function() -> its JSON (a table; {} when it printed
-- none) }. `opts`: the receiver mode's options after STOP_FILE.
local function start_receiver(workdir, name, opts)
  local lua = os.getenv("BENCH_LUA") or OOPSD
  local port_file, stop_file = ("%s/%s.port"):format(workdir, name), ("%s/%s.stop"):format(workdir, name)
  local argv = { lua, "lua", arg[0], "receiver", port_file, stop_file }
  for _, o in ipairs(opts or {}) do argv[#argv + 1] = o end
  local result
  local rec = {}
  local h = assert(oops.proc.start { argv = argv, inherit_env = true, max_output = 16 * 1024 * 1024,
    timeout_ms = 3600 * 1000, on_exit = function(r) result, rec.exit = r, r end })
  rec.proc = h
  C.started[#C.started + 1] = rec
  local deadline = oops.now_ms() + 20000
  while not files.read(port_file) do
    if oops.now_ms() > deadline or result then
      error("the receiver did not start: " .. tostring(result and result.stderr or "no port after 20 s"))
    end
    C.sleep(0.05)
  end
  local port = tonumber(files.read(port_file))
  return { port = port, stop = function()
    files.write(stop_file, "stop\n")
    local until_ms = oops.now_ms() + 20000
    while not result and oops.now_ms() < until_ms do C.sleep(0.05) end
    if result and not result.ok then files.write(("%s/%s.err"):format(workdir, name), result.stderr) end
    return result and result.ok and json.decode(result.stdout:match("[^\n]*\n?$") or "") or {}
  end }
end

-- Notifications at flood scale (issue 28): N pipelines on an instant gateway,
-- one server, one webhook route to a receiver of its own that answers at
-- once. The drain: from the last pipeline's SUCCEEDED to the last outbox row
-- delivered (both on the database's clock), bounded by NOTIFY_WAIT_S; what
-- was still undelivered 30 s after the last SUCCEEDED; every id received, and
-- how many twice.
local NOTIFY_WAIT_S = 180
local function notify_one(n, workdir)
  local rcv = start_receiver(workdir, "receiver")
  local dir = policy_dir(workdir, "notify", ([[
scan    { interval = "500ms" }
gateway "simulated" { build = "0s", deploy = "0s", rollout = "0s" }
notify  { webhook = "http://127.0.0.1:%d/hook" }
]]):format(rcv.port))
  local s = start_servers(1, dir, workdir)[1]
  C.sleep(1)
  local t0 = db_now()
  insert_pipelines(n)
  wait_all(n, "SUCCEEDED", 1800)
  local last = tonumber(sql("SELECT UNIX_TIMESTAMP(MAX(status_changed_at)) AS t FROM pipeline")[1].t)
  local events = tonumber(sql("SELECT COUNT(*) AS n FROM outbox")[1].n)
  local pending_30, drained_at
  local stop_at = last + NOTIFY_WAIT_S
  while true do
    local r = sql("SELECT COUNT(*) AS n, UNIX_TIMESTAMP(NOW(6)) AS now FROM outbox WHERE delivered_at IS NULL")[1]
    local undelivered, now = tonumber(r.n), tonumber(r.now)
    if not pending_30 and now >= last + 30 then pending_30 = undelivered end
    if undelivered == 0 then
      drained_at = tonumber(sql("SELECT UNIX_TIMESTAMP(MAX(delivered_at)) AS t FROM outbox")[1].t)
      break
    end
    if now > stop_at then break end
    C.sleep(0.1)
  end
  local first = tonumber(sql("SELECT UNIX_TIMESTAMP(MIN(created_at)) AS t FROM outbox")[1].t)
  C.stop_server(s)
  local got = rcv.stop()
  local drain = drained_at and math.max(0, drained_at - last) or nil
  return { n = n, events = events, drive_s = last - t0, drain_s = drain, wait_s = NOTIFY_WAIT_S,
    undelivered_after_30s = pending_30 or 0,
    events_per_s = drained_at and events / math.max(0.001, drained_at - first) or nil,
    received = got.received, distinct = got.distinct, duplicates = got.duplicates }
end

-- Issue 37: a queue per route. N pipelines on an instant gateway, one server,
-- three routes to one receiver (RECEIVER: "keep-alive", or "close": each
-- connection closed after its answer), a path each:
--   /all     a webhook for every event (healthy);
--   /errors  a slack route for ERROR events only (healthy; a filtered route);
--   /flaky   a webhook whose receiver answers 500 for NOTIFY_FAIL_S from its
--            first request, then 200 (the failing route). The policy's retry
--            is 1 s doubling to 4 s (the default doubles to 1 min): a route
--            is tried again at most 4 s after its receiver recovered.
-- Polled every NOTIFY_POLL_S on the database's clock: when each route's queue
-- is empty once every pipeline SUCCEEDED and every event was routed
-- (schema 14: its notify_pending rows, and outbox rows not routed yet;
-- before it, schema 13: the undelivered outbox rows its key has not taken,
-- delivered_routes). Measured: the healthy routes' drain after the last
-- SUCCEEDED; the failing route's drain after the receiver switched to 200
-- (its first delivery after the switch, the route's back-off, apart); the
-- server's statements (oops_db_round_trips_total) per delivery (a row
-- delivered to a route that wanted it), over the whole run (the engine's
-- drive included) and after the drive (from the last SUCCEEDED on, the
-- work connections: the notifier, with the idle engine's ticks); the
-- server's peak RSS; ids received and received twice per path.
local NOTIFY_FAIL_S, NOTIFY_POLL_S, NOTIFY_ROUTES_WAIT_S = 20, 0.1, 240
local function notify_routes(n, kind, workdir)
  if kind ~= "keep-alive" and kind ~= "close" then
    error("notify: receiver kind " .. tostring(kind) .. ": keep-alive or close")
  end
  local rcv = start_receiver(workdir, "receiver", kind == "close" and
    { "--close", "--fail", "/flaky=" .. NOTIFY_FAIL_S } or { "--fail", "/flaky=" .. NOTIFY_FAIL_S })
  local base = ("http://127.0.0.1:%d"):format(rcv.port)
  local routes = {
    { name = "all", path = "/all", kind = "webhook", healthy = true },
    { name = "errors", path = "/errors", kind = "slack", healthy = true, filter = "ERROR" },
    { name = "flaky", path = "/flaky", kind = "webhook", healthy = false },
  }
  local key_of = require("oops.scans.notify").route_key
  for _, r in ipairs(routes) do r.key = key_of { kind = r.kind, url = base .. r.path } end
  local dir = policy_dir(workdir, "notify-routes", ([[
scan    { interval = "500ms" }
gateway "simulated" { build = "0s", deploy = "0s", rollout = "0s" }
notify  { webhook = "%s/all" }
notify  { slack = "%s/errors", events = { "ERROR" } }
notify  { webhook = "%s/flaky", retry = { initial = "1s", max = "4s" } }
]]):format(base, base, base))
  local s = start_servers(1, dir, workdir)[1]
  -- Schema 14 has a queue per route; 13 (before issue 37) records in the
  -- outbox which routes took a row.
  local queues = tonumber(sql([[SELECT COUNT(*) AS n FROM information_schema.tables
    WHERE table_schema = DATABASE() AND table_name = 'notify_pending']])[1].n) > 0
  local function pending(r)
    if queues then
      return tonumber(sql("SELECT COUNT(*) AS n FROM notify_pending WHERE route_key = ?", r.key)[1].n)
    end
    return tonumber(sql([[SELECT COUNT(*) AS n FROM outbox WHERE delivered_at IS NULL
      AND FIND_IN_SET(?, COALESCE(delivered_routes, '')) = 0]], r.key)[1].n)
  end
  local function unrouted()
    if not queues then return 0 end
    return tonumber(sql("SELECT COUNT(*) AS n FROM outbox WHERE routed = 0")[1].n)
  end
  if queues then -- the leader registered the routes under the keys we count
    local deadline = oops.now_ms() + 30000
    while tonumber(sql("SELECT COUNT(*) AS n FROM notify_route WHERE route_key IN (?, ?, ?)",
        routes[1].key, routes[2].key, routes[3].key)[1].n) < 3 do
      if oops.now_ms() > deadline then error("the routes are not in notify_route after 30 s: their keys differ") end
      C.sleep(0.1)
    end
  end
  C.sleep(1)
  local before = C.metrics(s)
  local t0, last, at_last, backlog, left
  local usage = sampled({ s }, function()
    t0 = db_now()
    insert_pipelines(n)
    local deadline = oops.now_ms() + 1800 * 1000
    while true do
      local now = db_now()
      if not last then
        local done = count("SUCCEEDED")
        if done >= n then
          last = tonumber(sql("SELECT UNIX_TIMESTAMP(MAX(status_changed_at)) AS t FROM pipeline")[1].t)
          at_last = C.metrics(s)
          backlog = { unrouted = unrouted() }
          for _, r in ipairs(routes) do backlog[r.name] = pending(r) end
        elseif oops.now_ms() > deadline then
          error(("%d of %d pipelines SUCCEEDED after 1800 s"):format(done, n))
        end
      end
      if last then
        local open = unrouted()
        local all = true
        for _, r in ipairs(routes) do
          if not r.drained_at then
            if open == 0 and pending(r) == 0 then r.drained_at = now else all = false end
          end
        end
        if all then break end
        if now > last + NOTIFY_ROUTES_WAIT_S then
          left = { unrouted = open }
          for _, r in ipairs(routes) do left[r.name] = pending(r) end
          break
        end
      end
      C.sleep(NOTIFY_POLL_S)
    end
  end)
  local after = C.metrics(s)
  local events = tonumber(sql("SELECT COUNT(*) AS n FROM outbox")[1].n)
  local errors = tonumber(sql([[SELECT COUNT(*) AS n FROM outbox o
    JOIN pipeline_event e ON o.kind = 'pipeline' AND e.id = o.ref_id
    WHERE e.to_status = 'ERROR' OR e.event_type = 'ERROR']])[1].n)
  local undelivered = tonumber(sql("SELECT COUNT(*) AS n FROM outbox WHERE delivered_at IS NULL")[1].n)
  C.stop_server(s)
  local got = rcv.stop()
  local paths = got.paths or {}
  local out = { n = n, receiver = kind, receiver_impl = got.impl, connections = got.connections,
    events = events, error_events = errors, drive_s = last - t0, last_at = last, wait_s = NOTIFY_ROUTES_WAIT_S,
    fail_s = NOTIFY_FAIL_S, poll_s = NOTIFY_POLL_S, schema = queues and "queues" or "delivered_routes",
    backlog_at_last = backlog, left = left, undelivered_at_end = undelivered, routes = {} }
  local wanted = { all = events, errors = errors, flaky = events }
  local deliveries = 0
  for _, r in ipairs(routes) do
    local p = paths[r.path] or {}
    out.routes[r.name] = { kind = r.kind, key = r.key, healthy = r.healthy, wanted = wanted[r.name],
      drained_at = r.drained_at, requests = p.requests or 0, failed = p.failed or 0, received = p.received or 0,
      distinct = p.distinct or 0, duplicates = p.duplicates or 0, first_at = p.first_at, last_at = p.last_at,
      fail_from = p.fail_from, switched_at = p.switched_at }
    deliveries = deliveries + wanted[r.name]
  end
  -- The healthy routes: the last of them drained, after the last SUCCEEDED.
  local healthy, drained = 0, true
  for _, r in ipairs(routes) do
    if r.healthy then
      if r.drained_at then healthy = math.max(healthy, r.drained_at - last) else drained = false end
    end
  end
  out.healthy_drain_s = drained and math.max(0, healthy) or nil
  local fr = out.routes.flaky
  if fr.switched_at and fr.drained_at then
    out.failing_drain_s = math.max(0, fr.drained_at - fr.switched_at)
    out.failing_first_ok_s = fr.first_at and fr.first_at - fr.switched_at
  end
  local d_run = C.delta { { before = before, after = after } }
  local d_after = C.delta { { before = at_last, after = after } }
  out.deliveries = deliveries
  out.round_trips = C.sum(d_run, "oops_db_round_trips_total")
  out.statements_per_delivery = deliveries > 0 and out.round_trips / deliveries or nil
  out.delivered_metric = C.sum(d_run, "oops_notifications_delivered_total")
  out.failures_metric = C.sum(d_run, "oops_notification_failures_total")
  out.after_drive = { round_trips = C.sum(d_after, "oops_db_round_trips_total", { conn = "work" }),
    deliveries = C.sum(d_after, "oops_notifications_delivered_total") }
  out.after_drive.statements_per_delivery = out.after_drive.deliveries > 0
    and out.after_drive.round_trips / out.after_drive.deliveries or nil
  local u = usage[s.name]
  out.usage = { cpu_s = u.cpu_s, cpu_percent = u.cpu_percent, peak_rss_kb = u.peak_rss_kb,
    peak_anon_kb = u.peak_anon_kb, samples = u.samples }
  out.received, out.distinct, out.duplicates = got.received, got.distinct, got.duplicates
  return out
end

-- `notify N WORKDIR`: the single-route case; `notify N RECEIVER WORKDIR`: the
-- three routes of issue 37 against a "keep-alive" or "close" receiver.
function cases.notify(n, a, b)
  n = tonumber(n)
  if b == nil then return notify_one(n, a) end
  return notify_routes(n, a, b)
end

-- One server, no pipelines: CPU, memory and statements over `seconds`.
function cases.idle(policies, seconds, workdir)
  seconds = tonumber(seconds)
  local s = start_servers(1, policies, workdir)[1]
  C.sleep(math.min(10, seconds / 2)) -- start-up done, every scan has ticked
  -- A server's first /metrics read starts its delivery figures (issue 39:
  -- two statements, again each 5 minutes it is read): read once and let
  -- them finish before the window, so it counts what an idle, scraped
  -- server sends (each read in the window still costs its gauges' one).
  C.metrics(s)
  C.sleep(2)
  local before = C.metrics(s)
  local u0, t0 = C.proc_usage(s.pid), oops.now_ms()
  C.sleep(seconds)
  local u1, t1 = C.proc_usage(s.pid), oops.now_ms()
  local pss = C.pss_kb(s.pid)
  local after = C.metrics(s)
  local wall = (t1 - t0) / 1000
  local d = C.delta { { before = before, after = after } }
  C.stop_server(s)
  return {
    seconds = wall, cpu_s = u1.cpu - u0.cpu, cpu_percent = 100 * (u1.cpu - u0.cpu) / wall,
    rss_kb = u1.rss_kb, peak_rss_kb = u1.hwm_kb, anon_kb = u1.anon_kb, file_kb = u1.file_kb, pss_kb = pss,
    statements_per_s = C.sum(d, "oops_db_round_trips_total") / wall,
    ticks = C.sum(d, "oops_scan_runs_total"),
  }
end

local result
local ran, err = pcall(oops.wait, function()
  local connected, cerr = oops.connect { db = DB, name = "bench", locks = false }
  if not connected then error("cannot connect: " .. tostring(cerr)) end
  local ctl = os.getenv("OOPSCTL")
  if ctl then
    local r = oops.proc.run { argv = { ctl, "migrate" }, env = { OOPS_DB = DB }, inherit_env = true,
      timeout_ms = 120000 }
    if not r or not r.ok then error("oopsctl migrate: " .. tostring(r and (r.stderr .. r.stdout) or "did not run")) end
  else
    assert(oops.migrate())
  end
  local fn = cases[mode]
  if not fn then error("unknown case " .. tostring(mode) .. " (scale, reaction, idle, notify)") end
  result = fn(table.unpack(arg, 2))
  result.mariadb = sql("SELECT VERSION() AS v")[1].v
end)
if not ran then
  C.kill_all()
  io.stderr:write("bench case " .. tostring(mode) .. ": " .. tostring(err) .. "\n")
  os.exit(1)
end
io.write(json.encode(result), "\n")
os.exit(0)
