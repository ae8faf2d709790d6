-- What bench/run.lua (the driver) and bench/case.lua (one measured case, in a
-- process of its own) share: /proc, real oopsd servers (started by the
-- scenario runner's launcher, oops.scenario.server), /metrics, quantiles.
-- Files are read and written with oops.scenario.files. Loaded with dofile();
-- everything that waits must run in a task.
local oops = require("oops")
local files = require("oops.scenario.files")
local launcher = require("oops.scenario.server")
local lfs = require("lfs")

local C = {}

function C.sleep(seconds) oops.sleep(math.max(0, math.floor(seconds * 1000))) end

---------------------------------------------------------------- /proc

local clk_tck
-- Clock ticks per second of /proc/PID/stat's utime and stime.
function C.clk_tck()
  if clk_tck then return clk_tck end
  local r = oops.proc.run { argv = { "getconf", "CLK_TCK" }, timeout_ms = 5000 }
  clk_tck = r and r.ok and tonumber(r.stdout:match("%d+")) or 100
  return clk_tck
end

-- CPU seconds used so far (user + system) and memory of a process:
-- { cpu = s (user + sys), user, sys, rss_kb = current, hwm_kb = peak,
-- anon_kb, file_kb }, or nil when it is gone.
function C.proc_usage(pid)
  local stat = files.read("/proc/" .. pid .. "/stat")
  local status = files.read("/proc/" .. pid .. "/status")
  if not stat or not status then return nil end
  -- Fields after the command (which may hold spaces) start at field 3.
  local rest = stat:match("%) (.*)$")
  local f = {}
  for x in rest:gmatch("%S+") do f[#f + 1] = x end
  local utime, stime = tonumber(f[12]), tonumber(f[13]) -- fields 14 and 15
  return {
    cpu = (utime + stime) / C.clk_tck(), user = utime / C.clk_tck(), sys = stime / C.clk_tck(),
    rss_kb = tonumber(status:match("VmRSS:%s*(%d+)")) or 0,
    hwm_kb = tonumber(status:match("VmHWM:%s*(%d+)")) or 0,
    -- RSS = anonymous memory (heap, stacks: this process's own) + pages of
    -- mapped files (the binary and its shared libraries, shared with every
    -- other process that maps them).
    anon_kb = tonumber(status:match("RssAnon:%s*(%d+)")) or 0,
    file_kb = tonumber(status:match("RssFile:%s*(%d+)")) or 0,
  }
end

-- Proportional set size: shared pages divided among the processes that map
-- them (a shared library's pages count fully in every RSS).
function C.pss_kb(pid)
  return tonumber((files.read("/proc/" .. pid .. "/smaps_rollup") or ""):match("\nPss:%s*(%d+)"))
end

-- The sockets connected to a database server's TCP port, from
-- /proc/net/tcp and tcp6 (this network namespace): { [inode] = local port }
-- of every ESTABLISHED row whose remote port is `port`.
function C.tcp_peers_of(port)
  local out = {}
  for _, f in ipairs { "/proc/net/tcp", "/proc/net/tcp6" } do
    for line in (files.read(f) or ""):gmatch("[^\n]+") do
      -- sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
      local lport, rport, st, inode = line:match(
        "^%s*%d+:%s+%x+:(%x+)%s+%x+:(%x+)%s+(%x+)%s+%S+%s+%S+%s+%S+%s+%d+%s+%d+%s+(%d+)")
      if lport and tonumber(rport, 16) == port and st == "01" then out[inode] = tonumber(lport, 16) end
    end
  end
  return out
end

-- The socket inodes a process holds open (/proc/PID/fd links "socket:[N]"),
-- as a list; nil when the process is gone.
function C.socket_inodes(pid)
  local dir = "/proc/" .. pid .. "/fd"
  local ok, iter, state = pcall(lfs.dir, dir)
  if not ok then return nil end
  local out = {}
  for fd in iter, state do
    local target = fd ~= "." and fd ~= ".." and lfs.symlinkattributes(dir .. "/" .. fd, "target")
    local inode = target and target:match("^socket:%[(%d+)%]$")
    if inode then out[#out + 1] = inode end
  end
  return out
end

-- Exactly how many connections each process holds to the database server on
-- TCP `port`: its sockets (/proc/PID/fd) that are ESTABLISHED rows of
-- /proc/net/tcp{,6} with that remote port. pids: list; returns
-- { [pid] = { n = count, ports = { local port, ... } } } (n = nil for a
-- process that is gone), and the summary { max, mean, total, alive }.
-- Counted from outside, so it sees the lock session and every pool
-- connection alike, whatever the daemon reports.
function C.db_connections(pids, port)
  local peers = C.tcp_peers_of(port)
  local per, max, total, alive = {}, 0, 0, 0
  for _, pid in ipairs(pids) do
    local inodes = C.socket_inodes(pid)
    local r = { ports = {} }
    if inodes then
      r.n = 0
      for _, inode in ipairs(inodes) do
        if peers[inode] then r.n, r.ports[#r.ports + 1] = r.n + 1, peers[inode] end
      end
      max, total, alive = math.max(max, r.n), total + r.n, alive + 1
    end
    per[pid] = r
  end
  return per, { max = max, total = total, alive = alive, mean = alive > 0 and total / alive or nil }
end

---------------------------------------------------------------- servers

C.started = {} -- every server started by this process, for C.kill_all()

-- SIGKILL every server still running (a case that failed half-way).
function C.kill_all()
  for _, s in ipairs(C.started) do if s.proc and not s.exit then s.proc:kill(9) end end
end

-- Start one oopsd listening on a free loopback port; returns { name, port,
-- pid, proc, log_path } once it has logged "started:", or raises with its log.
function C.start_server(o)
  local s = { name = o.name, log_path = o.log_path }
  C.started[#C.started + 1] = s
  local started, log = launcher.start(s, { oopsd = o.oopsd, name = o.name, policies = o.policies,
    db = o.db, log_path = o.log_path, listen = "127.0.0.1:0" })
  if not started or not s.port then
    s.proc:kill(9)
    error(("oopsd %s did not start:\n%s"):format(o.name, (log or files.read(o.log_path) or ""):sub(-2000)), 2)
  end
  return s
end

-- SIGTERM, then SIGKILL after `seconds` (default 10); waits for the exit.
function C.stop_server(s, seconds) launcher.stop(s, seconds or 10) end

---------------------------------------------------------------- pipelines

-- n INITIALIZED pipelines appear at once: multi-row INSERTs (500 rows, 5
-- bound values each) in one transaction, on this process's connection. Rows
-- as `oopsctl create` writes them, without its CREATED event (the servers
-- never read it). opts (all optional): prefix and first (ids are prefix +
-- 11 digits counting from first: "b", 1), namespace ("bench"), app (the
-- application is app .. the number: "app"); environment prod. Returns the
-- ids.
function C.insert_pipelines(n, opts)
  opts = opts or {}
  local prefix, ns, app, first = opts.prefix or "b", opts.namespace or "bench", opts.app or "app", opts.first or 1
  assert(oops.db.begin())
  local ids, i = {}, 0
  while i < n do
    local k = math.min(500, n - i)
    local values, params = {}, {}
    for j = 1, k do
      local x = first + i + j - 1
      values[j] = "(?, ?, ?, ?, ?)"
      local p = #params
      ids[#ids + 1] = ("%s%011d"):format(prefix, x)
      params[p + 1], params[p + 2], params[p + 3] = ids[#ids], ns, ("%s%d"):format(app, x)
      params[p + 4], params[p + 5] = "prod", "INITIALIZED"
    end
    local done, err = oops.db.exec("INSERT INTO pipeline (id, namespace, application, environment, status) VALUES " ..
      table.concat(values, ", "), table.unpack(params))
    if not done then oops.db.rollback(); error("insert: " .. tostring(err)) end
    i = i + k
  end
  assert(oops.db.commit())
  return ids
end

---------------------------------------------------------------- /metrics

-- A server's /metrics as { ["name{labels}"] = value }.
function C.metrics(s)
  local r, err
  for attempt = 1, 3 do -- a loaded machine may be slow to answer
    r, err = oops.http.request { url = ("http://127.0.0.1:%d/metrics"):format(s.port), timeout_ms = 10000 }
    if r and r.status == 200 then break end
    if attempt < 3 then C.sleep(1) end
  end
  if not r or r.status ~= 200 then
    error(("metrics of %s (port %d): %s"):format(s.name, s.port, tostring(r and ("HTTP " .. r.status) or err)), 2)
  end
  local m = {}
  for line in r.body:gmatch("[^\n]+") do
    local key, v = line:match("^([%w_]+[^%s]*)%s+(%S+)$")
    if key and not line:match("^#") then m[key] = tonumber(v) end
  end
  return m
end

-- after - before for every series (counters), summed over several servers:
-- diffs = list of { before = m, after = m }.
function C.delta(diffs)
  local out = {}
  for _, d in ipairs(diffs) do
    for k, v in pairs(d.after) do out[k] = (out[k] or 0) + v - (d.before[k] or 0) end
  end
  return out
end

-- Sum of the series of `name` whose labels contain every `k="v"` in `want`.
function C.sum(m, name, want)
  local total = 0
  for k, v in pairs(m) do
    local n, labels = k:match("^([%w_]+)(.*)$")
    if n == name then
      local fits = true
      for lk, lv in pairs(want or {}) do
        if not labels:find(('%s="%s"'):format(lk, lv), 1, true) then fits = false end
      end
      if fits then total = total + v end
    end
  end
  return total
end

---------------------------------------------------------------- quantiles

-- Nearest-rank quantile of a list of numbers (sorted here); nil when empty.
-- BENCH_PROFILE=1 (fleet.lua, case.lua scale): what a drive spent its
-- statements on, by shape. The database's general log (to a table) records
-- the drive's statements, the servers' prepared ones with their values in:
-- numbers and quoted strings become ?, IN lists one (?). It slows the drive,
-- so only when asked. `sql` runs a statement (oops.scenario's sql). MariaDB
-- neither digests nor counts prepared statements' executions in
-- performance_schema: the log is the only way.
function C.profile_start(sql)
  sql("SET GLOBAL log_output = 'TABLE'")
  sql("TRUNCATE mysql.general_log")
  sql("SET GLOBAL general_log = 1")
end

-- The `top` most frequent shapes since profile_start: { per_pipeline, text }.
function C.profile_top(sql, pipelines, top)
  sql("SET GLOBAL general_log = 0")
  local by = {}
  for _, r in ipairs(sql([[SELECT LEFT(CONVERT(argument USING utf8mb4), 400) AS t FROM mysql.general_log
      WHERE command_type IN ('Query', 'Execute')]])) do
    local t = tostring(r.t):gsub("'[^']*'", "?"):gsub("%f[%w_]%-?%d+%.?%d*%f[^%w_]", "?")
      :gsub("%(%?[%?, ]*%)", "(?)"):gsub("%s+", " "):sub(1, 160)
    by[t] = (by[t] or 0) + 1
  end
  sql("TRUNCATE mysql.general_log")
  local list = {}
  for text, n in pairs(by) do list[#list + 1] = { per_pipeline = n / pipelines, text = text } end
  table.sort(list, function(x, y) return x.per_pipeline > y.per_pipeline end)
  for i = #list, top + 1, -1 do list[i] = nil end
  return list
end

function C.quantile(xs, q)
  if #xs == 0 then return nil end
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  return s[math.min(#s, math.max(1, math.ceil(q * #s)))]
end

-- Quantile from the cumulative buckets { {le, count}, ... } (le ascending,
-- the last one math.huge), interpolated linearly inside the bucket the way
-- Prometheus' histogram_quantile does; above the last finite bound: that
-- bound. nil when there are no observations.
function C.hist_quantile(buckets, q)
  local total = buckets[#buckets][2]
  if total == 0 then return nil end
  local rank = q * total
  local prev_le, prev_n = 0, 0
  for _, b in ipairs(buckets) do
    local le, n = b[1], b[2]
    if n >= rank then
      if le == math.huge then return prev_le end
      if n == prev_n then return le end
      return prev_le + (le - prev_le) * (rank - prev_n) / (n - prev_n)
    end
    prev_le, prev_n = le, n
  end
  return prev_le
end

-- The tick-duration histogram of one scan from a (delta of) /metrics.
function C.scan_buckets(m, scan, bounds)
  local out = {}
  for _, le in ipairs(bounds) do
    out[#out + 1] = { le, C.sum(m, "oops_scan_duration_seconds_bucket", { scan = scan, le = ("%g"):format(le) }) }
  end
  out[#out + 1] = { math.huge, C.sum(m, "oops_scan_duration_seconds_bucket", { scan = scan, le = "+Inf" }) }
  return out
end

return C
