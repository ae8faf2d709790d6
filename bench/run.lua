-- bench/run: the driver (run by the bench/run wrapper under `oopsd lua`).
-- Runs each measured case in a process of its own (bench/case.lua, on a
-- database of its own in one throwaway MariaDB) and each failover fault as a
-- scenario (bench/failover.lua, `oopsctl scenario`, its own MariaDB), then
-- prints one table, writes the JSON and draws the plots.
local oops = require("oops")
local json = require("oops.json")
local lfs = require("lfs")
local here = arg[0]:match("^(.*)/[^/]*$") or "."
local C = dofile(here .. "/common.lua")
local files = require("oops.scenario.files")

local USAGE = [[
usage: bench/run [--quick] [--only SECTIONS] [--sizes N,N] [--servers S,S]
                 [--samples K] [--bound SECONDS] [--idle SECONDS] [--out DIR] [--build DIR]
                 [--faults F,F] [--compare REV] [--fleet-sizes S,S] [--fleet-pipelines N]
                 [--fleet-idle SECONDS] [--fleet-settle SECONDS] [--fleet-kills K]
                 [--notify-pipelines N] [--canaries N]
  --quick        small sizes for development: --sizes 100,300 --servers 1,3
                 --samples 2 --bound 10 --idle 5 (and 100 pipelines for the reaction;
                 the fleet: --fleet-sizes 10 --fleet-pipelines 200 --fleet-idle 10
                 --fleet-settle 5 --fleet-kills 1)
  --only         a comma-separated subset of scale,failover,reaction,footprint,fleet,notify,canary
                 (default: all but fleet, notify and canary, which run only when named:
                 the fleet about 4 minutes for 50 servers, 25 for 50,100,200)
  --sizes        pipelines per scale case (default 100,1000,10000)
  --servers      servers per scale case (default 1,3,5)
  --samples      failover rounds per kind of lock session (default 3)
  --faults       the failover faults to run (default kill,cut,freeze,partition)
  --bound        how long a takeover is awaited where the lock session keeps the
                 database server's default wait_timeout (default 60 s)
  --idle         the idle footprint's window (default 30 s)
  --fleet-sizes  servers per fleet case, each on a MariaDB of its own whose
                 max_connections is max(500, 8 x servers + 100) (default 50,100,200)
  --fleet-pipelines  pipelines the fleet drives at once (default 2000)
  --fleet-idle   the fleet's idle window (default 60 s: the retention leader's
                 minute falls in it)
  --fleet-settle how long the fleet's connections may take to settle to 2 a
                 server, before the idle window and after the takeovers
                 (default 45 s: the pool gives back a connection idle 30 s)
  --fleet-kills  single-server SIGKILLs in the fleet's takeover (default 3)
  --notify-pipelines  pipelines of the notify cases, 4 events each (default 3000:
                 12,000 events to one webhook receiver; then issue 37's three
                 routes (a webhook, a slack route for ERROR only, a webhook whose
                 receiver answers 500 for its first 20 s) to a receiver that keeps
                 connections alive, and to one that closes each (Node.js))
  --canaries     canaries at once on three servers, against a real Prometheus
                 (default 500; bench/canary.lua, the working tree only)
  --out          where latest.json and the plots go (default bench/results)
  --build        the build directory with oopsd and oopsctl (default build/)
  --compare REV  also build REV (any git commit-ish: HEAD~3, a hash, a tag) from a
                 clean copy (git archive, RelWithDebInfo, in a temporary directory
                 removed at the end) and run every selected case on it and on
                 --build, one after the other (alternating which goes first), each
                 on a fresh database of the same MariaDB; prints one table: case,
                 measure, REV's value, the working tree's, ratio (after / before);
                 the JSON gets a "compare" key
  --replot       measure nothing: print the table and redraw the plots of
                 OUT/latest.json
]]

---------------------------------------------------------------- options

local function die(msg)
  io.stderr:write("bench/run: " .. msg .. "\n")
  os.exit(1)
end

local function list_of_numbers(s, what)
  local t = {}
  for x in (s or ""):gmatch("[^,]+") do
    local n = math.tointeger(tonumber(x))
    if not n or n < 1 then die(what .. ": " .. x .. " is not a whole number above 0") end
    t[#t + 1] = n
  end
  if #t == 0 then die(what .. ": expects a comma-separated list like 100,1000") end
  return t
end

local opt = { sizes = { 100, 1000, 10000 }, servers = { 1, 3, 5 }, samples = 3, bound = 60, idle = 30,
  reaction_n = 300, out = here .. "/results",
  fleet_sizes = { 50, 100, 200 }, fleet_pipelines = 2000, fleet_idle = 60, fleet_settle = 45, fleet_kills = 3,
  notify_pipelines = 3000, canaries = 500,
  only = { scale = true, failover = true, reaction = true, footprint = true } }
local given = {}
do
  local i = 1
  local function value(name)
    i = i + 1
    if arg[i] == nil then die(name .. " expects a value") end
    return arg[i]
  end
  while i <= #arg do
    local a = arg[i]
    if a == "--quick" then given.quick = true
    elseif a == "--replot" then opt.replot = true
    elseif a == "--build" then opt.build = value(a)
    elseif a == "--out" then opt.out = value(a)
    elseif a == "--compare" then opt.compare = value(a)
    -- Set by the bench/run wrapper, which builds REV: where, and what REV named.
    elseif a == "--compare-build" then opt.compare_build = value(a)
    elseif a == "--compare-src" then opt.compare_src = value(a)
    elseif a == "--compare-commit" then opt.compare_commit = value(a)
    elseif a == "--sizes" then given.sizes = list_of_numbers(value(a), a)
    elseif a == "--servers" then given.servers = list_of_numbers(value(a), a)
    elseif a == "--samples" then given.samples = list_of_numbers(value(a), a)[1]
    elseif a == "--bound" then given.bound = list_of_numbers(value(a), a)[1]
    elseif a == "--idle" then given.idle = list_of_numbers(value(a), a)[1]
    elseif a == "--fleet-sizes" then given.fleet_sizes = list_of_numbers(value(a), a)
    elseif a == "--fleet-pipelines" then given.fleet_pipelines = list_of_numbers(value(a), a)[1]
    elseif a == "--fleet-idle" then given.fleet_idle = list_of_numbers(value(a), a)[1]
    elseif a == "--fleet-settle" then given.fleet_settle = list_of_numbers(value(a), a)[1]
    elseif a == "--fleet-kills" then given.fleet_kills = list_of_numbers(value(a), a)[1]
    elseif a == "--notify-pipelines" then given.notify_pipelines = list_of_numbers(value(a), a)[1]
    elseif a == "--canaries" then given.canaries = list_of_numbers(value(a), a)[1]
    elseif a == "--faults" then
      opt.faults = {}
      for f in value(a):gmatch("[^,]+") do
        if not ({ kill = 1, cut = 1, freeze = 1, partition = 1 })[f] then
          die("--faults: unknown fault " .. f .. " (kill, cut, freeze, partition)")
        end
        opt.faults[#opt.faults + 1] = f
      end
    elseif a == "--only" then
      opt.only = {}
      for s in value(a):gmatch("[^,]+") do
        if not ({ scale = 1, failover = 1, reaction = 1, footprint = 1, fleet = 1, notify = 1, canary = 1 })[s] then
          die("--only: unknown section " .. s .. " (scale, failover, reaction, footprint, fleet, notify, canary)")
        end
        opt.only[s] = true
      end
    elseif a == "--help" or a == "-h" then io.write(USAGE) os.exit(0)
    else die("unknown option " .. a .. "\n" .. USAGE) end
    i = i + 1
  end
end
if given.quick then
  opt.sizes, opt.servers, opt.samples, opt.bound, opt.idle, opt.reaction_n = { 100, 300 }, { 1, 3 }, 2, 10, 5, 100
  opt.fleet_sizes, opt.fleet_pipelines, opt.fleet_idle, opt.fleet_settle, opt.fleet_kills = { 10 }, 200, 10, 5, 1
  opt.notify_pipelines = 500
end
for k, v in pairs(given) do if k ~= "quick" then opt[k] = v end end
opt.quick = given.quick or false
if not opt.build then die("--build DIR is required (the bench/run wrapper passes it)") end
local OOPSD, OOPSCTL = opt.build .. "/oopsd", opt.build .. "/oopsctl"
if opt.compare and not opt.replot and not opt.compare_build then
  die("--compare REV: run it through the bench/run wrapper (it builds REV)")
end

local command = { "bench/run" }
do
  local skip = { ["--build"] = true, ["--compare-build"] = true, ["--compare-src"] = true, ["--compare-commit"] = true }
  local i = 1
  while i <= #arg do
    if skip[arg[i]] then i = i + 1 else command[#command + 1] = arg[i] end
    i = i + 1
  end
end

-- The builds a case runs on: the working tree's (--build), and with
-- --compare the one of REV, "before". Results of "after" go to `results`
-- (what the table, the plots and --replot read), of "before" to `before`.
local ROOT = here:match("^(.*)/bench$") or (here .. "/..")
local AFTER = { key = "after", label = "", oopsd = OOPSD, oopsctl = OOPSCTL, src = ROOT }
local BEFORE = opt.compare_build and { key = "before", label = " [" .. opt.compare .. "]",
  oopsd = opt.compare_build .. "/oopsd", oopsctl = opt.compare_build .. "/oopsctl", src = opt.compare_src or ROOT }

---------------------------------------------------------------- helpers

local function say(fmt, ...) io.stderr:write(("bench: " .. fmt .. "\n"):format(...)) io.stderr:flush() end

local function mkdirs(path)
  local acc = path:sub(1, 1) == "/" and "" or "."
  for part in path:gmatch("[^/]+") do
    acc = acc .. "/" .. part
    if not lfs.attributes(acc) then lfs.mkdir(acc) end
  end
end

local function machine()
  local cpuinfo = files.read("/proc/cpuinfo") or ""
  local n = 0
  for _ in cpuinfo:gmatch("\nprocessor%s*:") do n = n + 1 end
  if cpuinfo:match("^processor%s*:") then n = n + 1 end
  local mem = tonumber((files.read("/proc/meminfo") or ""):match("MemTotal:%s*(%d+)")) or 0
  return {
    nproc = n, cpu = cpuinfo:match("model name%s*:%s*([^\n]+)") or "unknown",
    memory_gb = math.floor(mem / 1048576 * 10 + 0.5) / 10,
    kernel = ((files.read("/proc/sys/kernel/osrelease") or "?"):gsub("%s+$", "")),
  }
end

local work, parent = files.workdir("oops-bench")
if not work then die("cannot create a work directory under " .. parent) end
local results -- what latest.json holds
local before = {} -- with --compare: REV's results, as `results` holds the working tree's
local function res_of(side) return side == BEFORE and before or results end

-- Run fn(side) on each build: with --compare on both, the order alternating
-- from one call to the next (ABBA...), so drift on a shared machine hits
-- both sides alike.
local ncalls = 0
local function each_side(fn)
  ncalls = ncalls + 1
  if not BEFORE then return fn(AFTER) end
  for _, side in ipairs(ncalls % 2 == 1 and { BEFORE, AFTER } or { AFTER, BEFORE }) do fn(side) end
end
local failed = {} -- what went wrong, for the end

-- Run one case of bench/case.lua on a fresh database; its JSON, or nil.
local db
local dbseq = 0
local function run_case(label, mode, side, ...)
  label = label .. side.label
  dbseq = dbseq + 1
  local name = ("bench_%d_%s"):format(dbseq, mode)
  local r = db:admin("CREATE DATABASE " .. name .. ";\n")
  if not r or not r.ok then
    failed[#failed + 1] = label .. ": cannot create its database"
    return nil
  end
  local dir = ("%s/%s"):format(work, name)
  lfs.mkdir(dir)
  local t0 = oops.now_ms()
  local args = { OOPSD, "lua", here .. "/case.lua", mode }
  for _, a in ipairs { ... } do args[#args + 1] = tostring(a) end
  args[#args + 1] = dir
  local res = oops.proc.run { argv = args, timeout_ms = 40 * 60 * 1000, inherit_env = true,
    env = { OOPS_DB = db:url_for("127.0.0.1"):gsub("/oops$", "/" .. name), OOPSD = side.oopsd,
      OOPSCTL = side.oopsctl, BENCH_LUA = OOPSD, BENCH_DB_PID = tostring(db.proc:pid()) } }
  local took = (oops.now_ms() - t0) / 1000
  if res then files.write(dir .. "/case.err", res.stderr) end
  local doc = res and res.ok and json.decode(res.stdout:match("[^\n]*\n?$") or "")
  if type(doc) ~= "table" then
    local why = res and (res.stderr:match("bench case [^\n]*") or res.stderr:match("([^\n]+)%s*$")
      or ("exit " .. res.status)) or "did not run"
    failed[#failed + 1] = ("%s: %s (logs in %s)"):format(label, why, dir)
    say("%s: FAILED: %s", label, why)
    return nil
  end
  say("%s: done in %.1fs", label, took)
  if doc.mariadb then results.machine.mariadb = doc.mariadb end
  return doc
end

---------------------------------------------------------------- the sections

results = { machine = machine(), command = table.concat(command, " "), quick = opt.quick,
  started = os.date("!%Y-%m-%dT%H:%M:%SZ"), options = opt }

local function scale()
  results.scale, before.scale = {}, {}
  for _, n in ipairs(opt.sizes) do
    for _, s in ipairs(opt.servers) do
      each_side(function(side)
        local doc = run_case(("scale N=%d servers=%d"):format(n, s), "scale", side, n, s)
        if doc then table.insert(res_of(side).scale, doc) end
      end)
    end
  end
end

local FAULTS = { "kill", "cut", "freeze", "partition" }

local function failover_one(f, side)
  local res = res_of(side)
  local out = ("%s/failover-%s%s.json"):format(work, f, side == BEFORE and "-before" or "")
  local t0 = oops.now_ms()
  local env = { PATH = os.getenv("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin", TMPDIR = work,
    HOME = os.getenv("HOME") or "/tmp", BENCH_FAULT = f, BENCH_SAMPLES = tostring(opt.samples),
    BENCH_BOUND = tostring(opt.bound), BENCH_OUT = out }
  -- clear_env: an OOPS_DB in the caller's environment must not point the
  -- scenario at a shared database (it starts its own).
  local r = oops.proc.run { argv = { side.oopsctl, "scenario", here .. "/failover.lua" }, env = env,
    clear_env = true, timeout_ms = 20 * 60 * 1000 }
  local tap = ("%s/failover-%s%s.tap"):format(work, f, side == BEFORE and "-before" or "")
  files.write(tap, (r and r.stdout or "") .. (r and r.stderr or ""))
  local doc = files.read(out)
  doc = doc and json.decode(doc)
  if type(doc) ~= "table" then
    failed[#failed + 1] = ("failover %s%s: no result (see %s)"):format(f, side.label, tap)
    say("failover %s%s: FAILED (see %s)", f, side.label, tap)
  else
    doc.checks_passed = r ~= nil and r.ok
    if not doc.checks_passed then
      failed[#failed + 1] = ("failover %s%s: the scenario's checks failed (see %s)"):format(f, side.label, tap)
    end
    res.failover[#res.failover + 1] = doc
    say("failover %s%s: done in %.1fs", f, side.label, (oops.now_ms() - t0) / 1000)
  end
end

local function failover()
  results.failover, before.failover = {}, {}
  for _, f in ipairs(opt.faults or FAULTS) do each_side(function(side) failover_one(f, side) end) end
end

-- Canaries (issue 38): bench/canary.lua as a scenario of its own (its own
-- MariaDB and Prometheus), the working tree only (an older build has no
-- canary to compare).
local function canary()
  local out = work .. "/canary.json"
  local env = { PATH = os.getenv("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin", TMPDIR = work,
    HOME = os.getenv("HOME") or "/tmp", BENCH_CANARIES = tostring(opt.canaries), BENCH_OUT = out }
  local r = oops.proc.run { argv = { AFTER.oopsctl, "scenario", here .. "/canary.lua" }, env = env,
    clear_env = true, timeout_ms = 30 * 60 * 1000 }
  local tap = work .. "/canary.tap"
  files.write(tap, (r and r.stdout or "") .. (r and r.stderr or ""))
  local doc = files.read(out)
  doc = doc and json.decode(doc)
  if type(doc) ~= "table" then
    failed[#failed + 1] = "canary: no result (see " .. tap .. ")"
    return
  end
  doc.checks_passed = r ~= nil and r.ok
  if not doc.checks_passed then failed[#failed + 1] = "canary: the scenario's checks failed (see " .. tap .. ")" end
  results.canary = doc
end

local function reaction()
  each_side(function(side)
    res_of(side).reaction = run_case(("reaction N=%d servers=3"):format(opt.reaction_n), "reaction", side,
      opt.reaction_n, 3)
  end)
end

local function footprint()
  results.footprint, before.footprint = {}, {}
  -- The shipped policies of each build's own tree: their keys are its own.
  each_side(function(side)
    res_of(side).footprint.idle_shipped = run_case(("idle, shipped policies (%ds)"):format(opt.idle), "idle", side,
      side.src .. "/policies", opt.idle)
  end)
  local dir = work .. "/policy-idle-fast"
  lfs.mkdir(dir)
  files.write(dir .. "/bench.lua", 'scan { interval = "500ms" }\n' ..
    'gateway "simulated" { build = "0s", deploy = "0s", rollout = "0s" }\n')
  each_side(function(side)
    res_of(side).footprint.idle_fast = run_case(("idle, scan 500ms (%ds)"):format(opt.idle), "idle", side, dir,
      opt.idle)
  end)
  -- Driving: one server alone with the largest scale case (measured there).
  local biggest = {}
  for _, side in ipairs { AFTER, BEFORE } do
    for _, c in ipairs(res_of(side).scale or {}) do
      if c.servers == 1 and (not biggest[side] or c.n > biggest[side].n) then biggest[side] = c end
    end
  end
  if not biggest[AFTER] then
    local n = opt.sizes[#opt.sizes]
    each_side(function(side)
      biggest[side] = run_case(("scale N=%d servers=1 (footprint)"):format(n), "scale", side, n, 1)
    end)
  end
  for side, c in pairs(biggest) do
    local u = c.usage[1]
    res_of(side).footprint.driving = { n = c.n, wall_s = c.wall_s, cpu_percent = u.cpu_percent, user_s = u.user_s,
      peak_anon_kb = u.peak_anon_kb, file_at_peak_kb = u.file_at_peak_kb,
      sys_s = u.sys_s, peak_rss_kb = u.peak_rss_kb, samples = u.samples,
      database_cpu_percent = c.database and c.database.cpu_percent }
  end
end

-- The fleet (bench/fleet.lua): each size in a process of its own, on a
-- MariaDB of its own (started there: its global counters count that fleet
-- alone, and its max_connections grows with the fleet).
local function fleet_one(n, side)
  local label = ("fleet %d servers%s"):format(n, side.label)
  local dir = ("%s/fleet-%d%s"):format(work, n, side == BEFORE and "-before" or "")
  lfs.mkdir(dir)
  local t0 = oops.now_ms()
  local r = oops.proc.run { argv = { OOPSD, "lua", here .. "/fleet.lua", tostring(n), tostring(opt.fleet_pipelines),
    dir }, timeout_ms = 60 * 60 * 1000, inherit_env = true, max_output = 16 * 1024 * 1024,
    env = { OOPSD = side.oopsd, OOPSCTL = side.oopsctl, BENCH_POLICY = side.src .. "/policies/oopsd.lua",
      BENCH_IDLE = tostring(opt.fleet_idle), BENCH_SETTLE = tostring(opt.fleet_settle),
      BENCH_KILL_ROUNDS = tostring(opt.fleet_kills) } }
  if r then files.write(dir .. "/fleet.err", r.stderr) files.write(dir .. "/fleet.json", r.stdout) end
  local doc = r and r.ok and json.decode(r.stdout:match("[^\n]*\n?$") or "")
  if type(doc) ~= "table" then
    local why = r and (r.stderr:match("bench fleet: [^\n]*") or r.stderr:match("([^\n]+)%s*$")
      or ("exit " .. r.status)) or "did not run"
    failed[#failed + 1] = ("%s: %s (logs in %s)"):format(label, why, dir)
    say("%s: FAILED: %s", label, why)
    return
  end
  say("%s: done in %.1fs", label, (oops.now_ms() - t0) / 1000)
  if doc.mariadb then results.machine.mariadb = doc.mariadb end
  table.insert(res_of(side).fleet, doc)
end

-- Notifications at flood scale (issue 28): bench/case.lua notify, one
-- webhook; then issue 37's three routes (a webhook, a slack route for ERROR
-- only, a webhook failing its first 20 s) against a receiver that keeps
-- connections alive and one that closes each.
local function notify_section()
  results.notify, before.notify = {}, {}
  each_side(function(side)
    local doc = run_case(("notify N=%d"):format(opt.notify_pipelines), "notify", side, opt.notify_pipelines)
    if doc then table.insert(res_of(side).notify, doc) end
  end)
  for _, kind in ipairs { "keep-alive", "close" } do
    each_side(function(side)
      local doc = run_case(("notify N=%d, 3 routes, %s receiver"):format(opt.notify_pipelines, kind), "notify", side,
        opt.notify_pipelines, kind)
      if doc then table.insert(res_of(side).notify, doc) end
    end)
  end
end

local function fleet()
  results.fleet, before.fleet = {}, {}
  for _, n in ipairs(opt.fleet_sizes) do each_side(function(side) fleet_one(n, side) end) end
end

---------------------------------------------------------------- the table

local function ms(s) return s and ("%.0f"):format(s * 1000) or "-" end
local function secs(s) return s and ("%.2f s"):format(s) or "-" end
local function mb(kb) return kb and ("%.1f MB"):format(kb / 1024) or "-" end

-- The targets of issue 15 (and before): engine round trips per pipeline,
-- /healthz p99 and peak RSS while one server drives 10,000 pipelines.
local ENGINE_TRIPS_MAX, HEALTHZ_P99_MAX_MS, DRIVING_RSS_MAX_MB, IDLE_RSS_MAX_MB = 8, 50, 25, 20
local function big_alone(c) return c.n >= 10000 and c.servers == 1 end
local function scale_case(c) return ("N=%d, %d server%s"):format(c.n, c.servers, c.servers > 1 and "s" or "") end

-- Issue 24's budgets for a fleet on one database.
local FLEET_IDLE_CONNECTIONS, FLEET_IDLE_STATEMENTS = 2, 0.5
local FLEET_TAKEOVER_MEDIAN, FLEET_TAKEOVER_MAX = 0.5, 1.5
-- Issue 28's: 12,000 events drained within 15 s of the last pipeline's end.
local NOTIFY_DRAIN_MAX = 15
-- Issue 37's, with three routes (one failing its first 20 s): the healthy
-- routes drained within 5 s of the last SUCCEEDED, the failing one within 5 s
-- of its receiver's recovery, at most 0.1 statements per delivery.
local ROUTES_DRAIN_MAX, ROUTES_FAILING_DRAIN_MAX, ROUTES_STATEMENTS_MAX = 5, 5, 0.1
local function routes_case(c)
  return ("%d pipelines (%d events), 1 server, 3 routes, %s receiver"):format(c.n, c.events, c.receiver)
end
local ROUTE_NAMES = { "all", "errors", "flaky" }
local MARIADB_MAX_PREPARED = 16382 -- max_prepared_stmt_count's default, every session together

-- A fleet case's takeover samples of one kind ("one", "leader", "tenth"):
-- pipeline times, leader times { name = s }, censored counts, kills, victims.
local function fleet_takeover(f, kinds)
  local out = { pipelines = {}, leaders = {}, leader_times = {}, censored = 0, censored_leaders = 0, kills = 0,
    victims = 0 }
  for _, r in ipairs(f.takeover and f.takeover.rounds or {}) do
    if kinds[r.kind] then
      out.kills, out.victims = out.kills + 1, out.victims + #r.victims
      for _, x in ipairs(r.pipelines) do out.pipelines[#out.pipelines + 1] = x end
      for _, x in ipairs(r.leaders) do out.leaders[#out.leaders + 1] = x end
      for name, x in pairs(r.leader_times or {}) do out.leader_times[#out.leader_times + 1] = { name, x } end
      out.censored = out.censored + r.censored_pipelines
      out.censored_leaders = out.censored_leaders + r.censored_leaders
    end
  end
  table.sort(out.leader_times, function(a, b) return a[1] < b[1] end)
  return out
end

-- "median / p90 / max (n ...)" of takeover times, and whether the budget holds.
local function takeover_value(xs, censored, what, bound)
  if #xs == 0 and censored == 0 then return "- (nothing held by the victims)", nil end
  local v = ("%s / %s / %s (%d %s%s)"):format(secs(C.quantile(xs, 0.5)), secs(C.quantile(xs, 0.9)),
    secs(C.quantile(xs, 1)), #xs, what, censored > 0 and (", %d not within %d s"):format(censored, bound) or "")
  local max = C.quantile(xs, 1)
  return v, censored == 0 and max ~= nil and C.quantile(xs, 0.5) <= FLEET_TAKEOVER_MEDIAN and max <= FLEET_TAKEOVER_MAX
end

local function fleet_rows(res, row)
  local budget = ("median <= %.1f s, max <= %.1f s"):format(FLEET_TAKEOVER_MEDIAN, FLEET_TAKEOVER_MAX)
  for _, f in ipairs(res.fleet or {}) do
    local case = ("%d servers (max_connections %d)"):format(f.servers, f.max_connections)
    local i, st = f.idle, f.settle or {}
    local c = i.connections.at_end
    row("fleet", case, "connections per server, idle (exact, /proc): max / mean",
      ("%d / %.2f (%d in all; %s)"):format(c.max, c.mean or 0, c.total, st.seconds and
        ("settled to <= 2 in %.1f s"):format(st.seconds) or ("not <= 2 after %d s"):format(f.settle_bound_s)),
      ("<= %d"):format(FLEET_IDLE_CONNECTIONS), c.max <= FLEET_IDLE_CONNECTIONS)
    local ps = i.per_server.statements_per_s
    row("fleet", case, "statements per second per server, idle (database side)",
      ("mean %.2f (Questions / %.0f s / %d); %s, prepares %.2f; the servers' own count %.2f"):format(
        i.statements_per_s_per_server, i.seconds, i.servers, ps.max and ("per server %.2f to %.2f " ..
        "(performance_schema)"):format(ps.min, ps.max) or "not per server (performance_schema off)",
        i.prepares_per_s_per_server, i.daemon_round_trips_per_s_per_server),
      ("<= %.1f each"):format(FLEET_IDLE_STATEMENTS),
      (ps.max or i.statements_per_s_per_server) <= FLEET_IDLE_STATEMENTS)
    row("fleet", case, "RSS / CPU per server, idle: mean / max", ("%s / %s; %.2f / %.2f %% of a core (MariaDB %.1f %%)")
      :format(mb(i.rss_kb.mean), mb(i.rss_kb.max), i.cpu_percent.mean or 0, i.cpu_percent.max or 0,
        i.database_cpu_percent or 0))
    local d = f.drive
    if d then
      local cp = d.connections_peak
      row("fleet", case, "connections while driving, peak: per server max / all servers / MariaDB",
        ("%d / %d / %d (Max_used_connections)"):format(cp.per_server.max or 0, cp.total_sampled, cp.mariadb_max_used))
      local nf = d.not_succeeded or 0
      row("fleet", case, ("time to drive %d pipelines to SUCCEEDED"):format(d.pipelines),
        ("%s (%.1f statements per pipeline, database side; CPU servers %.0f %% / MariaDB %.0f %% of a core)%s"):format(
          secs(d.wall_s), d.statements_per_pipeline, d.cpu_percent.servers, d.cpu_percent.mariadb or 0,
          nf > 0 and ("; %d did not succeed: %s"):format(nf, tostring(d.not_succeeded_message)) or ""),
        "all SUCCEEDED", nf == 0)
      if d.prepared_statements_peak then
        row("fleet", case, "prepared statements in the database: idle (per connection) / peak while driving",
          ("%d (%.1f) / %d (max_prepared_stmt_count %d here)"):format(i.prepared_statements or 0,
            (i.prepared_statements or 0) / math.max(1, i.threads_connected or 1), d.prepared_statements_peak,
            f.max_prepared_stmt_count or 0), ("<= %d (MariaDB's default)"):format(MARIADB_MAX_PREPARED),
          d.prepared_statements_peak <= MARIADB_MAX_PREPARED)
      end
      row("fleet", case, "spread: pipelines driven per server, max / mean",
        ("%.2f (%d of %d servers drove some; %d to %d each)"):format(d.spread, d.servers_driving, f.servers,
          d.drivers.min or 0, d.drivers.max or 0))
      row("fleet", case, "RSS per server, peak while driving: mean / max",
        ("%s / %s"):format(mb(d.peak_rss_kb.mean), mb(d.peak_rss_kb.max)))
    end
    local t = f.takeover
    if t then
      local one = fleet_takeover(f, { one = true, leader = true })
      local v, met = takeover_value(one.pipelines, one.censored, "pipelines", 60)
      row("fleet", case, ("takeover after SIGKILL of 1 server (%d kills): median / p90 / max"):format(one.kills), v,
        budget, met)
      local tenth = fleet_takeover(f, { tenth = true })
      v, met = takeover_value(tenth.pipelines, tenth.censored, "pipelines", 60)
      row("fleet", case, ("the same, SIGKILL of 10 %% at once (%d server%s)"):format(tenth.victims,
        tenth.victims == 1 and "" or "s"), v, budget, met)
      local lead = fleet_takeover(f, { leader = true, tenth = true })
      local names = {}
      for _, x in ipairs(lead.leader_times) do
        names[#names + 1] = ("%s %s"):format(x[1]:gsub("^oops:leader:", ""), x[2] and secs(x[2]) or "not within 120 s")
      end
      v, met = takeover_value(lead.leaders, lead.censored_leaders, "leader locks", 120)
      row("fleet", case, "leader roles after SIGKILL of their holder: median / p90 / max",
        v .. (#names > 0 and ": " .. table.concat(names, ", ") or ""), budget, met)
      row("fleet", case, "pipelines whose build / deploy was submitted other than once",
        ("%d / %d (of %d; %d not SUCCEEDED at the end)"):format(t.builds_not_once, t.deploys_not_once,
          (d and d.pipelines or 0) + t.held, t.not_succeeded), "0",
        t.builds_not_once == 0 and t.deploys_not_once == 0)
    end
    local dm = f.database_memory
    if dm and dm.per_connection and dm.per_lock then
      row("fleet", case, "the database's memory per connection / per named lock (Memory_used)",
        ("%.0f KB / %.0f bytes (%d connections, %d locks; RSS %.0f KB / %.0f bytes)%s"):format(
          dm.per_connection.memory_used_bytes / 1024, dm.per_lock.memory_used_bytes, dm.per_connection.connections,
          dm.per_lock.locks, (dm.per_connection.rss_bytes or 0) / 1024, dm.per_lock.rss_bytes or 0,
          f.performance_schema and "; performance_schema on" or ""))
    end
    local a = f.idle_again
    if a then
      local ac = a.connections
      row("fleet", case, "connections per server, idle again after the drive: max / mean",
        ("%d / %.2f (%d servers; %s)"):format(ac.max, ac.mean or 0, ac.alive, a.seconds and
          ("settled in %.1f s"):format(a.seconds) or ("not <= 2 after %d s"):format(f.settle_bound_s)),
        ("<= %d"):format(FLEET_IDLE_CONNECTIONS), ac.max <= FLEET_IDLE_CONNECTIONS)
    end
  end
end

-- Issue 37's case (bench/case.lua notify N RECEIVER): its rows.
local function routes_rows(c, row)
  local case = routes_case(c)
  local function left()
    local l = c.left or {}
    return ("unrouted %d; all %d, errors %d, flaky %d"):format(l.unrouted or 0, l.all or 0, l.errors or 0, l.flaky or 0)
  end
  row("notify", case, "healthy routes (webhook, slack ERROR) drained after the last SUCCEEDED",
    c.healthy_drain_s and ("%s (all %s, errors %s; drive %s)"):format(secs(c.healthy_drain_s),
      secs(c.routes.all.drained_at and c.routes.all.drained_at - c.last_at),
      secs(c.routes.errors.drained_at and c.routes.errors.drained_at - c.last_at), secs(c.drive_s))
    or ("> %d s (not drained: %s)"):format(c.wait_s, left()),
    ("<= %d s"):format(ROUTES_DRAIN_MAX), c.healthy_drain_s ~= nil and c.healthy_drain_s <= ROUTES_DRAIN_MAX)
  row("notify", case, ("failing route drained after its receiver's recovery (500 for %d s)"):format(c.fail_s),
    c.failing_drain_s and ("%s (its first delivery %s after the recovery: back-off; drained %s after the last "
      .. "SUCCEEDED)"):format(secs(c.failing_drain_s), secs(c.failing_first_ok_s),
      secs(c.routes.flaky.drained_at - c.last_at))
      or ("not drained within %d s of the last SUCCEEDED (%s)"):format(c.wait_s, left()),
    ("<= %d s"):format(ROUTES_FAILING_DRAIN_MAX),
    c.failing_drain_s ~= nil and c.failing_drain_s <= ROUTES_FAILING_DRAIN_MAX)
  row("notify", case, "statements per delivery, whole run (the engine's drive included)",
    c.statements_per_delivery and ("%.3f (%d round trips / %d deliveries)"):format(c.statements_per_delivery,
      c.round_trips, c.deliveries) or "-",
    ("<= %.1f"):format(ROUTES_STATEMENTS_MAX),
    c.statements_per_delivery ~= nil and c.statements_per_delivery <= ROUTES_STATEMENTS_MAX)
  local a = c.after_drive
  row("notify", case, "statements per delivery after the drive (work connections)",
    a.statements_per_delivery and ("%.3f (%d / %d)"):format(a.statements_per_delivery, a.round_trips, a.deliveries)
    or ("- (%d round trips, no delivery)"):format(a.round_trips))
  row("notify", case, "server: peak RSS / CPU", ("%s / %.0f %% of a core"):format(mb(c.usage.peak_rss_kb),
    c.usage.cpu_percent or 0))
  local b = c.backlog_at_last or {}
  row("notify", case, "queued at the last SUCCEEDED", ("unrouted %d; all %d, errors %d, flaky %d"):format(
    b.unrouted or 0, b.all or 0, b.errors or 0, b.flaky or 0))
  local ids = {}
  for _, name in ipairs(ROUTE_NAMES) do
    local r = c.routes[name]
    ids[#ids + 1] = ("%s %d of %d / %d"):format(name, r.distinct, r.wanted, r.duplicates)
      .. (r.failed > 0 and (" (%d answered 500)"):format(r.failed) or "")
  end
  local dup = 0
  for _, name in ipairs(ROUTE_NAMES) do dup = dup + c.routes[name].duplicates end
  row("notify", case, "ids received / twice, per route", table.concat(ids, "; ") ..
    (c.connections and ("; %d connections for %d requests"):format(c.connections,
      c.routes.all.requests + c.routes.errors.requests + c.routes.flaky.requests) or ""),
    "all, none twice", dup == 0 and c.routes.all.distinct == c.routes.all.wanted
      and c.routes.errors.distinct == c.routes.errors.wanted and c.routes.flaky.distinct == c.routes.flaky.wanted)
end

-- The table's rows for one set of results: { section, case, measure, value, target, met? }.
-- bench/canary.lua's figures (issue 38).
local function canary_rows(c, row)
  if not c then return end
  local case = ("%d canaries, %d servers"):format(c.canaries, c.servers)
  row("canary", case, "wall time to all SUCCEEDED (weight 10, 2 measurements 3 s apart, 100)", secs(c.canary_wall_s))
  row("canary", case, "measurements recorded / expected (each once)", ("%d / %d"):format(c.measurements,
    2 * c.canaries), "= 2 per canary", c.measurements == 2 * c.canaries)
  row("canary", case, "weights applied / expected", ("%d / %d"):format(c.weights_applied, 2 * c.canaries),
    "= 2 per canary (10, 100)", c.weights_applied == 2 * c.canaries)
  row("canary", case, "engine statements per canary / per plain release",
    ("%.1f / %.1f"):format(c.canary_statements, c.plain_statements))
  row("canary", case, "engine statements per analysis measurement (canary's extra / 2)",
    ("%.1f"):format((c.canary_statements - c.plain_statements) / 2))
  local worst = 0
  local shown = {}
  for i, v in ipairs(c.bad or {}) do
    shown[i] = ("%.2f"):format(v)
    worst = math.max(worst, v)
  end
  local bound = c.bad_interval_s + c.tick_s
  row("canary", ("%d bad canaries (5 %% errors)"):format(#(c.bad or {})),
    "analysis step began -> weight 0 applied", table.concat(shown, " / ") .. " s",
    ("<= interval + tick = %.1f s"):format(bound), #shown > 0 and worst <= bound + 0.05)
end

local function table_rows(res)
  local rows = {}
  local function row(section, case, measure, value, target, met)
    rows[#rows + 1] = { section, case, measure, value, target or "-",
      met == nil and "-" or (met and "yes" or "NO") }
  end
  for _, c in ipairs(res.scale or {}) do
    local case = scale_case(c)
    row("scale", case, "wall time to all SUCCEEDED", secs(c.wall_s))
    row("scale", case, "SQL round trips per pipeline", ("%.1f"):format(c.round_trips_per_pipeline))
    local e = c.engine_round_trips_per_pipeline
    row("scale", case, "engine round trips per pipeline (simulator's apart)",
      e and ("%.1f (simulated gateway %.1f)"):format(e, c.sim_statements / c.n) or "- (no oops_sim_statements_total)",
      ("<= %d"):format(ENGINE_TRIPS_MAX), e and e <= ENGINE_TRIPS_MAX)
    local h = c.healthz
    if h then
      local target = big_alone(c) and ("p99 <= %d ms"):format(HEALTHZ_P99_MAX_MS) or nil
      row("scale", case, "/healthz latency while driving, p50 / p99 / max",
        h.n > 0 and ("%.1f / %.1f / %.1f ms (%d probes%s%s)"):format(h.p50, h.p99, h.max, h.n,
          h.timeouts > 0 and (", %d unanswered, counted %d ms"):format(h.timeouts, h.timeout_ms) or "",
          h.not_ok > 0 and (", %d not 200"):format(h.not_ok) or "") or "- (no probe)",
        target, target and h.p99 ~= nil and h.p99 <= HEALTHZ_P99_MAX_MS or nil)
    end
    for _, scan in ipairs { "build", "rollout" } do
      local s = c.scans[scan]
      row("scale", case, scan .. " scan tick, median / p99 (mean)", ("%s / %s ms (%s ms; %d ticks)"):format(
        ms(s.p50), ms(s.p99), s.ticks > 0 and ms(s.sum / s.ticks) or "-", s.ticks))
    end
    local per = c.lock_statements_per_scan
    row("scale", case, "GET_LOCK statements per scan",
      (per and ("%.2f (%d in %d ticks)"):format(per, c.lock_statements, c.lock_batches) or "-") ..
      ("; lock session in all: %.2f round trips per pipeline (RELEASE_LOCK)"):format(c.round_trips_locks / c.n),
      "1, whatever N", per and per <= 1.0 + 1e-9)
    local d = {}
    for i, x in ipairs(c.drivers) do d[i] = ("%.0f"):format(x) end
    row("scale", case, "spread over servers, max / mean", ("%.2f (%s)"):format(c.spread, table.concat(d, "/")))
    local cpu = 0
    for _, u in ipairs(c.usage) do cpu = cpu + u.cpu_percent end
    row("scale", case, "CPU during the run, servers / MariaDB", ("%.0f %% / %s of a core"):format(cpu,
      c.database and ("%.0f %%"):format(c.database.cpu_percent) or "?"))
  end
  for _, f in ipairs(res.failover or {}) do
    if f.skipped then
      row("failover", f.fault, "takeover", "skipped: " .. f.skipped)
    else
      -- kill and cut free the locks at once (the session ends with its
      -- socket, or is killed); freeze and partition wait for the database to
      -- reap the silent session.
      local at_once = f.fault == "kill" or f.fault == "cut"
      local target = at_once and f.interval_s + 1 or f.session_timeout_s + f.interval_s
      for _, kind in ipairs { "short", "server" } do
        local xs, censored, n, rounds = {}, 0, 0, 0
        for _, r in ipairs(f.rounds) do
          if r.kind == kind then
            rounds = rounds + 1
            for _, x in ipairs(r.latencies) do xs[#xs + 1] = x end
            censored = censored + r.censored
            n = n + r.pipelines
          end
        end
        local value
        if #xs == 0 and censored > 0 then
          value = ("not within %d s (%d pipelines): server wait_timeout %d s"):format(f.bound_s, censored,
            f.server_wait_timeout_s)
        else
          value = ("median %s, max %s (%d pipelines, %d faults)"):format(secs(C.quantile(xs, 0.5)),
            secs(C.quantile(xs, 1)), #xs, rounds)
          if censored > 0 then value = value .. (", %d not within %d s"):format(censored, f.bound_s) end
        end
        if kind == "short" then
          local max = C.quantile(xs, 1)
          row("failover", f.fault,
            ("fault -> first transition elsewhere (session timeout %d s)"):format(f.session_timeout_s),
            value, ("<= %.1f s"):format(target), censored == 0 and max ~= nil and max <= target)
        else
          row("failover", f.fault, "the same, session at the server's default wait_timeout", value, "(comparison)")
        end
      end
    end
  end
  local r = res.reaction
  if r then
    local x = r.reaction
    row("reaction", ("%d pipelines, 3 servers"):format(r.n), "build ready -> deploy claim",
      ("median %s, p99 %s, max %s"):format(secs(x.p50), secs(x.p99), secs(x.max)),
      ("<= %.1f s (max)"):format(r.interval_s), x.max and x.max <= r.interval_s)
  end
  local fp = res.footprint
  if fp then
    for _, k in ipairs {
      { "idle_shipped", "idle, shipped policies (scan 5s)" },
      { "idle_fast", "idle, scan 500ms" },
    } do
      local x = fp[k[1]]
      if x then
        row("footprint", k[2], "RSS", ("%s (own %s + shared files %s; PSS %s)"):format(mb(x.rss_kb), mb(x.anon_kb),
          mb(x.file_kb), mb(x.pss_kb)),
          ("<= %d MB"):format(IDLE_RSS_MAX_MB), x.rss_kb <= IDLE_RSS_MAX_MB * 1024)
        row("footprint", k[2], "CPU, % of a core", ("%.2f %%"):format(x.cpu_percent), "<= 1 %", x.cpu_percent <= 1)
        -- the budget is the shipped cadence's (what an idle server sends, the
        -- window's own two /metrics reads included)
        local shipped = k[1] == "idle_shipped"
        row("footprint", k[2], "database statements per second", ("%.2f"):format(x.statements_per_s),
          shipped and ("<= %.1f"):format(FLEET_IDLE_STATEMENTS) or nil,
          shipped and x.statements_per_s <= FLEET_IDLE_STATEMENTS or nil)
      end
    end
    local x = fp.driving
    if x then
      local case = ("driving %d pipelines, 1 server"):format(x.n)
      row("footprint", case, "peak RSS", ("%s (own at most %s + shared files %s)"):format(mb(x.peak_rss_kb),
        mb(x.peak_anon_kb), mb(x.file_at_peak_kb)), ("<= %d MB"):format(DRIVING_RSS_MAX_MB),
        x.peak_rss_kb <= DRIVING_RSS_MAX_MB * 1024)
      row("footprint", case, "CPU, % of a core", ("%.1f %% over %.1f s (user %.1f s, system %.1f s)%s"):format(
        x.cpu_percent, x.wall_s, x.user_s or 0, x.sys_s or 0,
        x.database_cpu_percent and ("; MariaDB %.0f %%"):format(x.database_cpu_percent) or ""))
    end
  end
  fleet_rows(res, row)
  canary_rows(res.canary, row)
  for _, c in ipairs(res.notify or {}) do
    if c.routes then routes_rows(c, row) end
  end
  for _, c in ipairs(res.notify or {}) do
    if c.routes then goto next end
    local case = ("%d pipelines (%d events), 1 server, 1 webhook"):format(c.n, c.events)
    local big = c.events >= 12000
    row("notify", case, "drain after the last SUCCEEDED", c.drain_s and secs(c.drain_s)
      or ("> %d s (not drained)"):format(c.wait_s), big and ("<= %d s"):format(NOTIFY_DRAIN_MAX) or nil,
      big and c.drain_s ~= nil and c.drain_s <= NOTIFY_DRAIN_MAX or (big and false or nil))
    row("notify", case, "undelivered 30 s after it", ("%d of %d"):format(c.undelivered_after_30s, c.events))
    row("notify", case, "events per second, first event to last delivery",
      c.events_per_s and ("%.0f"):format(c.events_per_s) or "-")
    row("notify", case, "ids received / twice", ("%d / %d"):format(c.distinct or 0, c.duplicates or 0))
    ::next::
  end
  return rows
end

---------------------------------------------------------------- --compare

-- Every number the comparison sets side by side, for one set of results:
-- { key, section, case, measure, value, fmt, target, met = fn(after, ratio) }.
local NO_WORSE = 1.10 -- "no worse": the ratio allows this much noise
local function measures(res)
  local out = {}
  local function m(section, case, measure, value, fmt, target, met)
    out[#out + 1] = { key = section .. "|" .. case .. "|" .. measure, section = section, case = case,
      measure = measure, value = value, fmt = fmt, target = target, met = met }
  end
  local no_worse = ("no worse (ratio <= %.2f)"):format(NO_WORSE)
  local function not_worse(_, ratio) return ratio and ratio <= NO_WORSE end
  for _, c in ipairs(res.scale or {}) do
    local case = scale_case(c)
    m("scale", case, "wall time to all SUCCEEDED", c.wall_s, "%.2f s", big_alone(c) and "ratio <= 0.40" or nil,
      big_alone(c) and function(_, ratio) return ratio and ratio <= 0.40 end or nil)
    m("scale", case, "SQL round trips per pipeline", c.round_trips_per_pipeline, "%.1f")
    m("scale", case, "engine round trips per pipeline", c.engine_round_trips_per_pipeline, "%.1f",
      ("<= %d"):format(ENGINE_TRIPS_MAX), function(x) return x <= ENGINE_TRIPS_MAX end)
    for _, scan in ipairs { "build", "rollout" } do
      local s = c.scans[scan]
      m("scale", case, scan .. " scan tick, mean", s.ticks > 0 and s.sum / s.ticks * 1000 or nil, "%.0f ms")
    end
    m("scale", case, "GET_LOCK statements per scan", c.lock_statements_per_scan, "%.2f", "1",
      function(x) return x <= 1.0 + 1e-9 end)
    local h = c.healthz or {}
    m("scale", case, "/healthz latency while driving, p50", h.p50, "%.1f ms")
    m("scale", case, "/healthz latency while driving, p99", h.p99, "%.1f ms",
      big_alone(c) and ("<= %d ms"):format(HEALTHZ_P99_MAX_MS) or nil,
      big_alone(c) and function(x) return x <= HEALTHZ_P99_MAX_MS end or nil)
    m("scale", case, "/healthz latency while driving, max", h.max, "%.1f ms")
    local rss, cpu = 0, 0
    for _, u in ipairs(c.usage) do
      rss, cpu = math.max(rss, u.peak_rss_kb or 0), cpu + u.cpu_percent
    end
    m("scale", case, "peak RSS (the largest server)", rss / 1024, "%.1f MB",
      big_alone(c) and ("<= %d MB"):format(DRIVING_RSS_MAX_MB) or nil,
      big_alone(c) and function(x) return x <= DRIVING_RSS_MAX_MB end or nil)
    m("scale", case, "CPU of the servers, % of a core", cpu, "%.0f %%")
    m("scale", case, "CPU of MariaDB, % of a core", c.database and c.database.cpu_percent, "%.0f %%")
  end
  for _, f in ipairs(res.failover or {}) do
    if not f.skipped then
      local xs, censored = {}, 0
      for _, r in ipairs(f.rounds) do
        if r.kind == "short" then
          for _, x in ipairs(r.latencies) do xs[#xs + 1] = x end
          censored = censored + r.censored
        end
      end
      local case = ("%s (session timeout %d s)"):format(f.fault, f.session_timeout_s)
      m("failover", case, "fault -> first transition elsewhere, median", C.quantile(xs, 0.5), "%.2f s", no_worse,
        not_worse)
      m("failover", case, "the same, max", censored == 0 and C.quantile(xs, 1) or nil, "%.2f s", no_worse, not_worse)
    end
  end
  local r = res.reaction
  if r then
    local case = ("%d pipelines, 3 servers"):format(r.n)
    m("reaction", case, "build ready -> deploy claim, median", r.reaction.p50, "%.3f s", no_worse, not_worse)
    m("reaction", case, "the same, p99", r.reaction.p99, "%.3f s", no_worse, not_worse)
    m("reaction", case, "the same, max", r.reaction.max, "%.3f s", no_worse, not_worse)
  end
  local fp = res.footprint or {}
  for _, k in ipairs { { "idle_shipped", "idle, shipped policies (scan 5s)" }, { "idle_fast", "idle, scan 500ms" } } do
    local x = fp[k[1]]
    if x then
      m("footprint", k[2], "RSS", x.rss_kb / 1024, "%.1f MB", no_worse, not_worse)
      m("footprint", k[2], "CPU, % of a core", x.cpu_percent, "%.2f %%", no_worse, not_worse)
      m("footprint", k[2], "database statements per second", x.statements_per_s, "%.2f", no_worse, not_worse)
    end
  end
  for _, f in ipairs(res.fleet or {}) do
    local case = ("%d servers"):format(f.servers)
    m("fleet", case, "connections per server, idle: max", f.idle.connections.at_end.max, "%d",
      ("<= %d"):format(FLEET_IDLE_CONNECTIONS), function(v) return v <= FLEET_IDLE_CONNECTIONS end)
    m("fleet", case, "statements per second per server, idle: mean", f.idle.statements_per_s_per_server, "%.2f")
    m("fleet", case, "statements per second per server, idle: max", f.idle.per_server.statements_per_s.max, "%.2f",
      ("<= %.1f"):format(FLEET_IDLE_STATEMENTS), function(v) return v <= FLEET_IDLE_STATEMENTS end)
    m("fleet", case, "RSS per server, idle: mean", f.idle.rss_kb.mean / 1024, "%.1f MB", no_worse, not_worse)
    if f.drive then
      m("fleet", case, "time to drive all pipelines", f.drive.wall_s, "%.2f s", no_worse, not_worse)
      m("fleet", case, "spread, max / mean", f.drive.spread, "%.2f")
      m("fleet", case, "connections while driving, MariaDB peak", f.drive.connections_peak.mariadb_max_used, "%d")
    end
    if f.takeover then
      for _, k in ipairs { { { one = true, leader = true }, "SIGKILL of 1" },
          { { tenth = true }, "SIGKILL of 10 %" } } do
        local t = fleet_takeover(f, k[1])
        m("fleet", case, "takeover after " .. k[2] .. ", median", C.quantile(t.pipelines, 0.5), "%.2f s",
          ("<= %.1f s"):format(FLEET_TAKEOVER_MEDIAN), function(v) return v <= FLEET_TAKEOVER_MEDIAN end)
        m("fleet", case, "takeover after " .. k[2] .. ", max", t.censored == 0 and C.quantile(t.pipelines, 1) or nil,
          "%.2f s", ("<= %.1f s"):format(FLEET_TAKEOVER_MAX), function(v) return v <= FLEET_TAKEOVER_MAX end)
      end
    end
  end
  for _, c in ipairs(res.notify or {}) do
    if not c.routes then goto next end
    local case = routes_case(c)
    m("notify", case, "healthy routes drained after the last SUCCEEDED", c.healthy_drain_s, "%.2f s",
      ("<= %d s"):format(ROUTES_DRAIN_MAX), function(v) return v <= ROUTES_DRAIN_MAX end)
    m("notify", case, "failing route drained after its recovery", c.failing_drain_s, "%.2f s",
      ("<= %d s"):format(ROUTES_FAILING_DRAIN_MAX), function(v) return v <= ROUTES_FAILING_DRAIN_MAX end)
    m("notify", case, "failing route: first delivery after its recovery", c.failing_first_ok_s, "%.2f s")
    m("notify", case, "statements per delivery, whole run", c.statements_per_delivery, "%.3f",
      ("<= %.1f"):format(ROUTES_STATEMENTS_MAX), function(v) return v <= ROUTES_STATEMENTS_MAX end)
    m("notify", case, "statements per delivery after the drive", c.after_drive.statements_per_delivery, "%.3f")
    m("notify", case, "server peak RSS", c.usage.peak_rss_kb / 1024, "%.1f MB")
    for _, name in ipairs(ROUTE_NAMES) do
      local route = c.routes[name]
      m("notify", case, ("ids received: %s (of %d)"):format(name, route.wanted), route.distinct, "%d")
      m("notify", case, ("ids received twice: %s"):format(name), route.duplicates, "%d", "0",
        function(v) return v == 0 end)
    end
    ::next::
  end
  for _, c in ipairs(res.notify or {}) do
    if c.routes then goto next end
    local case = ("%d pipelines (%d events), 1 server, 1 webhook"):format(c.n, c.events)
    m("notify", case, "drain after the last SUCCEEDED", c.drain_s, "%.2f s",
      c.events >= 12000 and ("<= %d s"):format(NOTIFY_DRAIN_MAX) or nil,
      c.events >= 12000 and function(v) return v <= NOTIFY_DRAIN_MAX end or nil)
    m("notify", case, "undelivered 30 s after it", c.undelivered_after_30s, "%d")
    m("notify", case, "events per second, first event to last delivery", c.events_per_s, "%.0f")
    m("notify", case, "received twice", c.duplicates, "%d")
    ::next::
  end
  local x = fp.driving
  if x then
    local case = ("driving %d pipelines, 1 server"):format(x.n)
    m("footprint", case, "peak RSS", x.peak_rss_kb / 1024, "%.1f MB", ("<= %d MB"):format(DRIVING_RSS_MAX_MB),
      function(v) return v <= DRIVING_RSS_MAX_MB end)
    m("footprint", case, "CPU, % of a core", x.cpu_percent, "%.1f %%")
  end
  return out
end

-- The comparison's rows: { section, case, measure, REV, working tree,
-- ratio, target, met? }; met? judges the working tree (or the ratio).
local function compare_rows(before_res, after_res)
  local rows, b, seen = {}, {}, {}
  for _, x in ipairs(measures(before_res)) do b[x.key] = x end
  local list = measures(after_res)
  for _, x in ipairs(measures(before_res)) do
    local found = false
    for _, y in ipairs(list) do if y.key == x.key then found = true break end end
    if not found then list[#list + 1] = { key = x.key, section = x.section, case = x.case, measure = x.measure,
      fmt = x.fmt, target = x.target, missing = true } end
  end
  for _, a in ipairs(list) do
    if not seen[a.key] then
      seen[a.key] = true
      local bv, av = b[a.key] and b[a.key].value, a.value
      local ratio = bv and av and bv ~= 0 and av / bv or nil
      local met
      if a.met and av ~= nil then met = a.met(av, ratio) end
      -- "n/a": that side has no such measure at all (a case it could not run,
      -- or one a revision does not know); "-": it has, without a value.
      local function shown(side, v) return v and a.fmt:format(v) or (side and "-" or "n/a") end
      rows[#rows + 1] = { a.section, a.case, a.measure, shown(b[a.key], bv), shown(a.value ~= nil or not a.missing, av),
        ratio and ("%.2f"):format(ratio) or "-", a.target or "-", met == nil and "-" or (met and "yes" or "NO") }
    end
  end
  return rows
end

local function print_table(rows, head)
  head = head or { "section", "case", "measure", "value", "target", "met?" }
  local w = {}
  for i, h in ipairs(head) do w[i] = #h end
  for _, r in ipairs(rows) do for i, c in ipairs(r) do w[i] = math.max(w[i], utf8.len(c) or #c) end end
  local function line(r)
    local cells = {}
    for i, c in ipairs(r) do cells[i] = c .. (" "):rep(w[i] - (utf8.len(c) or #c)) end
    return "| " .. table.concat(cells, " | ") .. " |"
  end
  local out = { line(head) }
  local sep = {}
  for i = 1, #w do sep[i] = ("-"):rep(w[i]) end
  out[#out + 1] = "|-" .. table.concat(sep, "-|-") .. "-|"
  for _, r in ipairs(rows) do out[#out + 1] = line(r) end
  return table.concat(out, "\n") .. "\n"
end

---------------------------------------------------------------- plots

local function plots(outdir)
  local have = oops.proc.run { argv = { "gnuplot", "--version" }, timeout_ms = 10000 }
  if not have or not have.ok then say("no gnuplot: no plots") return {} end
  local made, script = {}, {}
  local function dat(name, lines)
    local path = ("%s/%s.dat"):format(work, name)
    files.write(path, table.concat(lines, "\n") .. "\n")
    return path
  end
  local function png(name, body)
    made[#made + 1] = name .. ".png"
    script[#script + 1] = ("set output '%s/%s.png'\n%s\n"):format(outdir, name, body)
  end
  script[#script + 1] = "set terminal pngcairo size 900,560 noenhanced font ',11'\nset key left top\nset grid\n"
  if results.scale and #results.scale > 0 then
    local by = {}
    for _, c in ipairs(results.scale) do
      by[c.servers] = by[c.servers] or {}
      table.insert(by[c.servers], c)
    end
    local ss = {}
    for s in pairs(by) do ss[#ss + 1] = s end
    table.sort(ss)
    local wall, trips, ticks = {}, {}, {}
    for _, s in ipairs(ss) do
      table.sort(by[s], function(a, b) return a.n < b.n end)
      local lw, lt, lk = {}, {}, {}
      for _, c in ipairs(by[s]) do
        lw[#lw + 1] = ("%d %.3f"):format(c.n, c.wall_s)
        lt[#lt + 1] = ("%d %.2f"):format(c.n, c.round_trips_per_pipeline)
        lk[#lk + 1] = ("%d %.4f %.4f"):format(c.n, c.scans.build.p50 or 0, c.scans.build.p99 or 0)
      end
      local fw, ft, fk = dat("wall-" .. s, lw), dat("trips-" .. s, lt), dat("ticks-" .. s, lk)
      local label = ("%d server%s"):format(s, s > 1 and "s" or "")
      wall[#wall + 1] = ("'%s' using 1:2 with linespoints lw 2 title '%s'"):format(fw, label)
      trips[#trips + 1] = ("'%s' using 1:2 with linespoints lw 2 title '%s'"):format(ft, label)
      ticks[#ticks + 1] = ("'%s' using 1:2 with linespoints lw 2 title '%s, median', " ..
        "'%s' using 1:3 with linespoints dt 2 lw 2 title '%s, p99'"):format(fk, label, fk, label)
    end
    png("scale-wall", "set title 'Scale: N pipelines at once, instant builds - wall time to all SUCCEEDED'\n" ..
      "set logscale xy\nset xlabel 'active pipelines'\nset ylabel 'seconds'\nplot " .. table.concat(wall, ", ") ..
      "\nunset logscale")
    png("scale-round-trips", "set title 'Scale: SQL round trips per pipeline (every server, both connections)'\n" ..
      "set logscale x\nset xlabel 'active pipelines'\nset ylabel 'round trips per pipeline'\nset yrange [0:*]\n" ..
      "set key inside right bottom\nplot " .. table.concat(trips, ", ") ..
      "\nunset logscale\nset autoscale y\nset key inside left top")
    png("scale-build-tick", "set title 'Scale: build scan tick duration'\nset logscale xy\n" ..
      "set xlabel 'active pipelines'\nset ylabel 'seconds'\nplot " .. table.concat(ticks, ", ") .. "\nunset logscale")
  end
  if results.failover and #results.failover > 0 then
    local lines, i = {}, 0
    for _, f in ipairs(results.failover) do
      if not f.skipped then
        i = i + 1
        local per = {}
        for _, kind in ipairs { "short", "server" } do
          local xs, censored = {}, 0
          for _, r in ipairs(f.rounds) do
            if r.kind == kind then
              for _, x in ipairs(r.latencies) do xs[#xs + 1] = x end
              censored = censored + r.censored
            end
          end
          -- Not within the bound: drawn at the bound.
          if censored > 0 then xs[#xs + 1] = f.bound_s end
          per[#per + 1] = ("%.3f %.3f"):format(C.quantile(xs, 0.5) or 0, C.quantile(xs, 1) or 0)
        end
        lines[#lines + 1] = ('"%s" %s %s'):format(f.fault, per[1], per[2])
      end
    end
    if #lines > 0 then
      local fd = dat("failover", lines)
      png("failover", "set title 'Failover: fault -> first transition by another server'\n" ..
        "set style data histogram\nset style histogram cluster gap 1\nset style fill solid 0.8 border -1\n" ..
        "unset xlabel\nset key below\n" ..
        ("set logscale y\nset ylabel 'seconds (log)'\nset yrange [0.1:%d]\n"):format(math.ceil(opt.bound * 1.5)) ..
        ("plot '%s' using 2:xtic(1) title 'median, session timeout 3 s', " ..
        "'' using 4 title 'median, server default wait_timeout (capped at the bound)', " ..
        "'' using 3 title 'max, 3 s', '' using 5 title 'max, server default'"):format(fd) ..
        "\nunset logscale\nset autoscale y\nset style data lines\nset key inside left top")
    end
  end
  if results.reaction and results.reaction.samples then
    local xs = {}
    for i, x in ipairs(results.reaction.samples) do xs[i] = x end
    table.sort(xs)
    local lines = {}
    for i, x in ipairs(xs) do lines[i] = ("%.4f %.4f"):format(x, i / #xs) end
    local fr = dat("reaction", lines)
    png("reaction", ("set title 'Reaction: build ready -> deploy claim (scan interval 500 ms), " ..
      "CDF over %d pipelines'\n"):format(#xs) ..
      "set xlabel 'seconds'\nset ylabel 'fraction of pipelines'\nset yrange [0:1]\n" ..
      "set arrow from 0.5,0 to 0.5,1 nohead dt 2\n" ..
      ("plot '%s' using 1:2 with steps lw 2 title 'reaction'"):format(fr) .. "\nunset arrow\nset autoscale y")
  end
  local fp = results.footprint
  if fp and fp.driving and fp.driving.samples and #fp.driving.samples > 1 then
    local lines = {}
    for i, s in ipairs(fp.driving.samples) do
      lines[i] = ("%.2f %.2f %.3f %.2f"):format(s[1], s[2] / 1024, s[3], (s[4] or 0) / 1024)
    end
    local ff = dat("footprint", lines)
    png("footprint", ("set title 'Footprint: one server driving %d pipelines'\n"):format(fp.driving.n) ..
      "set xlabel 'seconds'\nset ylabel 'RSS (MB)'\nset y2label 'CPU seconds used'\nset y2tics\nset ytics nomirror\n" ..
      "set yrange [0:*]\nset y2range [0:*]\n" ..
      ("plot '%s' using 1:2 with lines lw 2 title 'RSS (MB)', " ..
      "'' using 1:4 with lines lw 2 title 'of which its own (anonymous, MB)', " ..
      "'' using 1:3 axes x1y2 with lines lw 2 title 'CPU seconds'"):format(ff) ..
      "\nunset y2tics\nunset y2label")
  end
  if #made == 0 then return {} end
  local sp = work .. "/plots.gp"
  files.write(sp, table.concat(script, "\n"))
  local r = oops.proc.run { argv = { "gnuplot", sp }, timeout_ms = 60000 }
  if not r or not r.ok then
    failed[#failed + 1] = "gnuplot: " .. (r and (r.stderr:match("([^\n]+)%s*$") or "") or "did not run")
    return {}
  end
  return made
end

---------------------------------------------------------------- main

local ran, err = pcall(oops.wait, function()
  if opt.replot then
    local text = files.read(opt.out .. "/latest.json")
    if not text then error("--replot: no " .. opt.out .. "/latest.json") end
    results = json.decode(text)
    results.table = table_rows(results)
    if results.compare then
      results.compare.table = compare_rows(results.compare.before or {}, results)
    end
    results.plots = plots(opt.out)
    files.write(opt.out .. "/latest.json", json.encode(results) .. "\n")
    return
  end
  local t0 = oops.now_ms()
  local v = oops.proc.run { argv = { "mariadbd", "--version" }, timeout_ms = 10000 }
  results.machine.mariadb = v and v.ok and v.stdout:match("Ver%s+(%S+)") or nil
  if opt.only.scale or opt.only.reaction or opt.only.footprint or opt.only.notify then
    local e
    db, e = require("oops.scenario.mariadb").start { dir = work .. "/mariadb" }
    if not db then error("cannot start MariaDB: " .. tostring(e)) end
  end
  if opt.only.scale then scale() end
  if opt.only.canary then canary() end
  if opt.only.reaction then reaction() end
  if opt.only.footprint then footprint() end
  if opt.only.notify then notify_section() end
  if db then db:stop() db = nil end
  if opt.only.failover then failover() end
  if opt.only.fleet then fleet() end
  results.seconds = (oops.now_ms() - t0) / 1000
  results.table = table_rows(results)
  if BEFORE then
    results.compare = { rev = opt.compare, commit = opt.compare_commit, build = opt.compare_build,
      before = before, before_table = table_rows(before), table = compare_rows(before, results) }
  end
  mkdirs(opt.out)
  results.plots = plots(opt.out)
  results.failed = failed
  files.write(opt.out .. "/latest.json", json.encode(results) .. "\n")
end)
if db then pcall(oops.wait, function() db:stop() end) end
if not ran then
  io.stderr:write("bench/run: " .. tostring(err) .. "\n(work files kept in " .. work .. ")\n")
  os.exit(1)
end

if results.compare then
  local cmp = results.compare
  local short = cmp.commit and cmp.commit:sub(1, 10)
  local rev = cmp.rev .. (short and short ~= cmp.rev and (" (" .. short .. ")") or "")
  io.write(print_table(cmp.table, { "section", "case", "measure", rev, "working tree", "ratio", "target", "met?" }))
  io.write("\nratio = working tree / " .. rev .. "; met? judges the working tree's value (or the ratio)\n")
else
  io.write(print_table(results.table))
end
io.write(("\n%s; %s, %d cores, %s; MariaDB %s; %.0f s in all\n"):format(results.command, results.machine.cpu,
  results.machine.nproc, results.machine.kernel, results.machine.mariadb or "?", results.seconds or 0))
io.write(("JSON: %s/latest.json; plots: %s\n"):format(opt.out,
  #results.plots > 0 and table.concat(results.plots, ", ") or "none"))
if #failed > 0 then
  io.write("\nFAILED:\n  " .. table.concat(failed, "\n  ") .. "\n")
  io.write("(work files kept in " .. work .. ")\n")
  os.exit(1)
end
oops.wait(function() oops.proc.run { argv = { "rm", "-rf", "--", work }, timeout_ms = 60000 } end)
os.exit(0)
