-- The scenario runner: `oopsctl [--db URL] scenario FILE`.
--
-- A scenario starts real oopsd servers on a database of its own (with the
-- simulated gateway, or whatever its policy says), acts like users and like
-- failures (create, stop, deploy, SIGKILL, SIGSTOP, faults in the simulated
-- cluster), and checks what happened in the database. Operators use it to
-- try a policy change before shipping it; the project's own multi-server
-- tests are scenarios too (tests/scenarios/). Output is TAP.
--
-- The scenario file is plain Lua with these functions in scope:
--   servers { count = 3, policy = [[ ... ]] | policies = "dir" [, overrides = { ["f.lua"] = [[...]] }],
--             names = {...}, netns = true,    each server runs a copy of its own
--             args = { "--flag", ... },        more oopsd flags
--             db = URL,                       (db: the account its servers connect as; default
--                                             the scenario's own)
--             env = {...} | envs = { {...}, ... } }  added to every server's / the i-th
--                                             server's environment (TZ, LD_PRELOAD, ...)
--                                   → list of servers (s.name, s:kill(sig), s:stop(),
--                                     s:start(), s:alive(), s:log())
--   server(name)                    → one of them
--   create { app = "shop/api", env = "prod", manual = false, artifact = "...", source = "{json}" }
--                                   → pipeline (p.id, p:status(), p:row(), p:events(),
--                                     p:drivers(), p:driver(), p:calls(action), p:stop(),
--                                     p:deploy(), p:wait(status [, seconds]))
--   rollback { app = "shop/api", env = "prod" [, to = ID] }
--                                   → the new pipeline, or nil, exit status, stderr
--   wait_until(desc, fn [, seconds])  polls fn until true; a failed check when it never is
--   expect(cond, desc [, diag])     one TAP check
--   sql(query, ...)                 rows from the scenario's database (bound parameters)
--   fault(target, call, message)    inject a simulated gateway error ("ns/app/env", "deploy")
--   clear_fault(target, call)
--   fail_job(p), delete_job(p [, "rollout"])  the pipeline's simulated build fails / its
--                                   build (or rollout) job vanishes
--   fail_rollout(p [, reason])      its simulated rollout fails
--   receiver { fail_first = n }     a webhook receiver for the policy's notify block
--                                   (r.url, r:fail(true|false|n), r:deliveries(), r:ids())
--   held_by(list, name)             the pipelines of list that server name drives now
--   held_elsewhere(list, name)      every one of list driven, none by server name
--   server_session(name)            the lock session holding server name's name lock, or nil
--   settle(seconds)                 how long the end checks wait for things to finish (30)
--   restart_database { down = s }   stop the scenario's own database, wait, start it again
--                                   (only without --db: the runner owns it then)
--   sleep(seconds), note(text), oopsctl(args...) → exit code, stdout, stderr
--   skip(reason)                    one "ok # SKIP" line, no end checks: `return` after it
--   skewed_clock(seconds)           an env for servers { envs = } whose clock runs `seconds`
--                                   off (libfaketime), or nil, why
--   workdir()                       this run's directory (servers' policies and logs)
--   here(rel)                       the absolute path of a file next to the scenario
--
-- Faults on a server s: s:kill("KILL"), s:freeze() / s:thaw() (SIGSTOP /
-- SIGCONT), s:cut() (its lock session killed from the database side),
-- s:reload([policy text]) → true | false, the refusal's log line.
--
-- Checked at the end of every scenario, whatever it did
-- (lua/oops/scenario/check.lua): no pipeline left a status twice, no side
-- effect twice (build submit, deploy, restart, alert announcement), every
-- notification delivered (and received by every receiver), every pipeline
-- finished, every restart claim resolved, and after each fault no
-- transition by the server's lost session. Then a report: faults, pipelines,
-- takeovers with their latency (fault → first transition by the new
-- driver), violations. Exit 0 only when every check passed.
local oops = require("oops")
local files = require("oops.scenario.files")
local launcher = require("oops.scenario.server")

local M = {}

local tap = { n = 0, failed = 0 }

local function ok(cond, desc, diag)
  tap.n = tap.n + 1
  if cond then
    io.write(("ok %d - %s\n"):format(tap.n, desc))
  else
    tap.failed = tap.failed + 1
    io.write(("not ok %d - %s\n"):format(tap.n, desc))
    if diag then io.write("#   " .. tostring(diag):gsub("\n", "\n#   ") .. "\n") end
  end
  io.flush()
  return cond
end

local note_to -- M.set_note: where notes go instead of standard output
local function note(text)
  if note_to then return note_to(tostring(text)) end
  io.write("# " .. tostring(text):gsub("\n", "\n# ") .. "\n")
  io.flush()
end

-- Rows of a statement with bound parameters; raises with the statement when
-- it fails. Also bench/'s (require("oops.scenario").sql).
local function sql(q, ...)
  local rows, err = oops.db.exec(q, ...)
  if not rows then error("sql: " .. tostring(err) .. "\n  in: " .. q, 2) end
  return rows
end
M.sql = sql

local function sleep(seconds) oops.sleep(math.floor(seconds * 1000)) end

local function wait_until(desc, fn, seconds)
  local deadline = oops.now_ms() + (seconds or 30) * 1000
  while oops.now_ms() < deadline do
    local done, v = pcall(fn)
    if done and v then return ok(true, desc) end
    sleep(0.1)
  end
  local _, last = pcall(fn)
  return ok(false, desc, "still false after " .. (seconds or 30) .. "s (last: " .. tostring(last) .. ")")
end

---------------------------------------------------------------- servers

local run = {}   -- the run's state: dir, db url, oopsd binary, servers by name

---------------------------------------------------------------- the fault log

-- Every fault the scenario injects, on the database's clock, with the lock
-- session the server had at that moment: the end checks and the report
-- (lua/oops/scenario/check.lua) read it.
function M.record_fault(kind, server_name)
  if kind == "db_restart" and not server_name then
    -- Every server loses its lock session: one entry each, so the end
    -- checks know each one's lost session.
    for _, s in ipairs(run.order) do
      if s:alive() then M.record_fault(kind, s.name) end
    end
    return
  end
  local session
  if server_name then
    local r = oops.db.exec("SELECT lock_connection_id AS c FROM server WHERE name = ?", server_name)
    session = r and r[1] and tonumber(r[1].c) or nil
  end
  local at = oops.db.now() or oops.time() -- the database may be the thing that is down
  run.faults[#run.faults + 1] = { kind = kind, server = server_name, session = session, at = at }
  note(("fault: %s%s"):format(kind, server_name and (" " .. server_name) or ""))
end

local Server = {}
Server.__index = Server

local write_file = files.write
local function read_file(path) return files.read(path) or "" end

function Server:start()
  assert(not self:alive(), self.name .. " is already running")
  local started, log = launcher.start(self, { oopsd = run.oopsd, name = self.name,
    policies = self.policies, db = self.db_url or run.db, log_path = self.log_path, env = self.env,
    args = self.args, listen = self.listen,
    wrap = self.ns and function(argv) return self.ns:argv(argv) end }) -- servers{netns = ...}
  if not started then
    error(("server %s did not start:\n%s"):format(self.name, log), 2)
  end
  return self
end

function Server:alive() return self.proc ~= nil and self.exit == nil end

-- Send a signal: "KILL", "TERM", "STOP", "CONT" (or a number). KILL, STOP
-- and CONT are faults: recorded for the end checks and the report.
local SIGNAL_FAULT = { [9] = "kill", [19] = "freeze", [18] = "thaw" }
function Server:kill(sig)
  local n = ({ KILL = 9, TERM = 15, STOP = 19, CONT = 18, HUP = 1, INT = 2 })[sig or "KILL"] or sig
  if SIGNAL_FAULT[n] and self:alive() then M.record_fault(SIGNAL_FAULT[n], self.name) end
  if self:alive() then self.proc:kill(n) end
  if n == 9 then
    local deadline = oops.now_ms() + 10000
    while self.exit == nil and oops.now_ms() < deadline do sleep(0.05) end
  end
end

-- SIGTERM and wait for the exit; returns its exit status (nil when it had
-- to be SIGKILLed after `seconds`, default 20).
function Server:stop(seconds) return launcher.stop(self, seconds) end

function Server:log() return read_file(self.log_path) end

function Server:freeze() return self:kill("STOP") end
function Server:thaw() return self:kill("CONT") end

-- Cut the server's lock session from the database side (KILL CONNECTION):
-- every lock it held is free at once; the server notices at its next
-- validation and drives nothing until it has reconnected.
function Server:cut()
  local r = oops.db.exec("SELECT lock_connection_id AS c FROM server WHERE name = ?", self.name)
  local id = r and r[1] and tonumber(r[1].c)
  if not id then error("cut: " .. self.name .. " has no lock session recorded", 2) end
  M.record_fault("cut", self.name)
  local done, err, code = oops.db.exec("KILL CONNECTION ?", id)
  if not done and code ~= "not_found" then error("cut " .. self.name .. ": " .. tostring(err), 2) end
  return id
end

-- Reload with another policy (SIGHUP) and wait for the outcome: true when the
-- server reloaded it, false, its log line when it refused it (and kept the
-- running one). A text replaces scenario.lua in the server's own directory;
-- a table { ["file.lua"] = text | false } replaces or removes files; nothing
-- reloads what is there.
function Server:reload(policy)
  if type(policy) == "string" then
    write_file(self.policies .. "/scenario.lua", policy)
  elseif type(policy) == "table" then
    for file, text in pairs(policy) do
      assert(not file:find("/", 1, true), "reload: file names in the policy directory")
      if text then write_file(self.policies .. "/" .. file, text) else os.remove(self.policies .. "/" .. file) end
    end
  end
  local before = #self:log()
  self:kill("HUP")
  local deadline = oops.now_ms() + 10000
  while oops.now_ms() < deadline do
    local new = self:log():sub(before + 1)
    if new:find("policy reloaded", 1, true) then return true end
    local line = new:match("[^\n]*policy reload failed[^\n]*")
    if line then return false, line end
    sleep(0.05)
  end
  error("reload: " .. self.name .. " logged neither success nor failure within 10s", 2)
end

---------------------------------------------------------------- network namespaces
-- servers { netns = true | "name", ... } starts each of those servers in a
-- network namespace of its own (lua/oops/scenario/netns.lua; "name" names it, with
-- "-1", "-2"... when there are several); it reaches the database through the
-- namespaces' hub address. s:partition() cuts its link (packets dropped
-- silently), s:heal() restores it. The database must be the scenario's own
-- and listen on the hub: a scenario that wants namespaces says so in its
-- first lines (`-- needs: network namespaces`) and the runner starts its
-- database with M.database_options(path). Namespaces and the hub are removed
-- at cleanup. skip(reason) reports the whole scenario as skipped (one
-- `ok N # SKIP reason` line) when what it needs is missing; the scenario
-- should return right after.
local netns = { made = {} } -- hub = address while it exists; made = namespaces of this run

local function scenario_needs(path, what)
  local f = io.open(path, "r")
  if not f then return false end
  local found = false
  for _ = 1, 10 do
    local line = f:read("l")
    if not line then break end
    local needs = line:match("^%-%-%s*needs:%s*(.*)$")
    if needs and needs:find(what, 1, true) then found = true end
  end
  f:close()
  return found
end

-- Extra options for oops.scenario.mariadb.start for the scenario at path: when it
-- needs network namespaces and they can be made here, the hub address to
-- listen on and the addresses its namespaced servers connect from.
-- nil otherwise (the scenario then finds out through oops.scenario.netns.available).
function M.database_options(path)
  if not scenario_needs(path, "network namespaces") then return nil end
  return M.netns_options()
end

-- The same for a caller that wants namespaces whenever they can be made
-- (oopsctl chaos): nil, why when they cannot.
function M.netns_options()
  local N = require("oops.scenario.netns")
  if not N.available() then return nil end
  local hub, err = N.hub()
  if not hub then
    netns.hub_error = err -- servers{netns = ...} says so
    return nil
  end
  netns.hub = hub
  return { bind = { hub }, clients = { N.CLIENTS } }
end

local function netns_attach(list, want)
  if want ~= true and (type(want) ~= "string" or want == "") then
    error("servers{}: netns must be true or a namespace name", 3)
  end
  if not run.database then
    error("servers{netns = ...}: needs a database the scenario owns (the namespaces reach it " ..
      "through their hub address): run it without --db", 3)
  end
  local N = require("oops.scenario.netns")
  local available, why = N.available()
  if not available then
    error("servers{netns = ...}: network namespaces unavailable: " .. tostring(why) ..
      " (check oops.scenario.netns.available() first and skip())", 3)
  end
  if not netns.hub then
    error("servers{netns = ...}: the scenario's database does not listen on the namespaces' hub: " ..
      (netns.hub_error or "put `-- needs: network namespaces` in the scenario's first lines"), 3)
  end
  for i, s in ipairs(list) do
    local name = want ~= true and (#list > 1 and want .. "-" .. i or want) or nil
    local ns, err = N.create(name)
    if not ns then error(("servers{netns = ...}: %s: %s"):format(s.name, err), 3) end
    netns.made[#netns.made + 1] = ns
    s.ns = ns
    s.db_url = run.database:url_for(ns.hub)
  end
end

local function record(kind, s)
  if M.record_fault then M.record_fault(kind, s.name) end
end

-- Cut this server's link: its sessions hang, the database reaps its lock
-- session after wait_timeout and its pipelines move to other servers.
function Server:partition()
  if not self.ns then error(self.name .. ": partition() needs a server started with servers{netns = true}", 2) end
  record("partition", self)
  local fine, err = self.ns:cut()
  if not fine then error(self.name .. ": partition: " .. err, 2) end
end

function Server:heal()
  if not self.ns then error(self.name .. ": heal() needs a server started with servers{netns = true}", 2) end
  local fine, err = self.ns:heal()
  if not fine then error(self.name .. ": heal: " .. err, 2) end
  record("heal", self)
end

-- The environment that runs a server with its clock `seconds` off the real
-- one (libfaketime; the monotonic clock left alone), for servers { envs = }:
-- a table, or nil and why when libfaketime is not installed. The sanitizer
-- runtime wants to come first among preloaded libraries; under LD_PRELOAD it
-- cannot, and need not (libfaketime is the only one).
local FAKETIME_LIBS = { "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
  "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1" }
-- The same with the variables given (FAKETIME, or FAKETIME_TIMESTAMP_FILE
-- for a clock that can move: oopsctl chaos).
function M.faketime_env(vars)
  for _, lib in ipairs(FAKETIME_LIBS) do
    local f = io.open(lib)
    if f then
      f:close()
      local asan = os.getenv("ASAN_OPTIONS")
      local env = { LD_PRELOAD = lib, FAKETIME_DONT_FAKE_MONOTONIC = "1",
        ASAN_OPTIONS = (asan and asan .. ":" or "") .. "verify_asan_link_order=0" }
      for k, v in pairs(vars) do env[k] = v end
      return env
    end
  end
  return nil, "libfaketime is not installed (apt-get install faketime)"
end

local function skewed_clock(seconds) return M.faketime_env { FAKETIME = ("%+ds"):format(seconds) } end

local function skip(reason)
  run.skipped = tostring(reason) -- M.main then runs no end checks
  tap.n = tap.n + 1
  io.write(("ok %d # SKIP %s\n"):format(tap.n, (tostring(reason):gsub("\n", " "))))
  io.flush()
end

-- Before the servers are stopped: a server still cut off could not drain.
local function netns_heal_all()
  for _, ns in ipairs(netns.made) do
    if ns.is_cut then
      local fine, err = ns:heal()
      if not fine then note("cleanup: " .. err) end
    end
  end
end

-- After the servers stopped: remove the namespaces, then the hub. Runs in a
-- task; a second call does nothing. The runner calls it too (M.netns_cleanup),
-- for a run that never reached its cleanup.
local function netns_cleanup()
  local N = require("oops.scenario.netns")
  for _, ns in ipairs(netns.made) do
    local fine, err = ns:destroy()
    if not fine then note("cleanup: " .. err) end
  end
  netns.made = {}
  if netns.hub then
    local fine, err = N.remove_hub()
    if not fine then note("cleanup: " .. err) end
    netns.hub = nil
  end
end
M.netns_cleanup = netns_cleanup


local function servers(opts)
  opts = opts or {}
  local dir = opts.policies
  if dir and not dir:match("^/") then dir = run.base .. "/" .. dir end
  assert(dir or opts.policy, "servers{}: give policy = [[...]] or policies = \"dir\"")
  local list = {}
  local count = opts.count or (opts.names and #opts.names) or 1
  for i = 1, count do
    local name = opts.names and opts.names[i] or ("s" .. (#run.order + 1))
    -- A directory of its own (a copy of `policies`, scripts included, plus
    -- `policy` as scenario.lua, plus `overrides`), so one server can be
    -- reloaded alone.
    local own = run.dir .. "/policy-" .. name
    require("lfs").mkdir(own)
    if dir then
      local r = oops.proc.run { argv = { "cp", "-a", dir .. "/.", own }, timeout_ms = 10000 }
      if r.status ~= 0 then error(("servers{}: copying %s: %s"):format(dir, r.stderr or "cp failed"), 2) end
    end
    if opts.policy then write_file(own .. "/scenario.lua", opts.policy) end
    for file, text in pairs(opts.overrides or {}) do
      assert(not file:find("/", 1, true), "servers{}: overrides are file names in the policy directory")
      if text then write_file(own .. "/" .. file, text) else os.remove(own .. "/" .. file) end
    end
    -- env: a table for every server, or envs = { {...}, {...} } one per server
    -- (TZ, a faketime offset...): added to the server's environment.
    -- listen: "127.0.0.1:0" for a server whose /metrics a bench reads (s.port)
    local s = setmetatable({ name = name, policies = own, db_url = opts.db, args = opts.args, listen = opts.listen,
      env = (opts.envs and opts.envs[i]) or opts.env,
      log_path = run.dir .. "/" .. name .. ".log" }, Server)
    run.servers[name] = s
    run.order[#run.order + 1] = s
    list[#list + 1] = s
  end
  if opts.netns then netns_attach(list, opts.netns) end
  for _, s in ipairs(list) do s:start() end
  return list
end

---------------------------------------------------------------- pipelines

local Pipeline = {}
Pipeline.__index = Pipeline

-- oopsctl as `person` (nil: whoever runs the scenario): SUDO_USER is the
-- first name oopsctl takes for who acts (alice@HOST).
local function oopsctl_as(person, ...)
  local argv = { run.oopsctl, ... }
  local env = { OOPS_DB = run.db, OOPS_DB_PASSWORD_FILE = os.getenv("OOPS_DB_PASSWORD_FILE") } -- see server.lua
  if person then env.SUDO_USER = person end
  local r = oops.proc.run { argv = argv, env = env, inherit_env = true, timeout_ms = 30000 }
  return r.status, r.stdout, r.stderr
end

local function oopsctl(...) return oopsctl_as(nil, ...) end

local function create(opts)
  local args = { "create", "--app", (assert(opts.app, "create{}: app")), "--env", (assert(opts.env, "create{}: env")) }
  if opts.manual then args[#args + 1] = "--manual" end
  if opts.artifact then args[#args + 1] = "--artifact"; args[#args + 1] = opts.artifact end
  if opts.source then args[#args + 1] = "--source"; args[#args + 1] = opts.source end
  local status, out, err = oopsctl_as(opts.as, table.unpack(args))
  if status ~= 0 then error("create " .. opts.app .. ": " .. err, 2) end
  return setmetatable({ id = out:match("%S+"), app = opts.app, env = opts.env }, Pipeline)
end

-- oopsctl rollback --app APP --env ENV [--to ID]: the new pipeline, or
-- nil, exit status, stderr.
local function rollback(opts)
  local args = { "rollback", "--app", (assert(opts.app, "rollback{}: app")),
    "--env", (assert(opts.env, "rollback{}: env")) }
  if opts.to then args[#args + 1] = "--to"; args[#args + 1] = opts.to end
  local status, out, err = oopsctl(table.unpack(args))
  if status ~= 0 then return nil, status, err end
  return setmetatable({ id = out:match("%S+"), app = opts.app, env = opts.env }, Pipeline)
end

function Pipeline:row() return sql("SELECT * FROM pipeline WHERE id = ?", self.id)[1] end
function Pipeline:status() return self:row().status end

function Pipeline:events()
  return sql("SELECT * FROM pipeline_event WHERE pipeline_id = ? ORDER BY id", self.id)
end

-- Distinct servers (not oopsctl) that made this pipeline's transitions, in order.
function Pipeline:drivers()
  local seen, list = {}, {}
  for _, e in ipairs(self:events()) do
    if not e.server:match("^oopsctl@") and not seen[e.server] then
      seen[e.server] = true
      list[#list + 1] = e.server
    end
  end
  return list
end

-- The server holding this pipeline's lock now, or nil.
function Pipeline:driver()
  local rows = sql("SELECT s.name FROM server s WHERE s.lock_connection_id = " ..
    "IS_USED_LOCK(CONCAT(?, ?))", oops.locks.names.pipeline_prefix, self.id)
  return rows[1] and rows[1].name
end

function Pipeline:calls(action)
  return sql("SELECT COUNT(*) AS n FROM sim_call WHERE pipeline_id = ? AND action = ?", self.id, action)[1].n
end

-- The canary weights the simulated gateway applied for it, in order ("10,50,100").
function Pipeline:weights()
  local out = {}
  for _, r in ipairs(sql("SELECT action FROM sim_call WHERE pipeline_id = ? AND action LIKE 'weight:%' " ..
    "ORDER BY id", self.id)) do
    out[#out + 1] = r.action:sub(8)
  end
  return table.concat(out, ",")
end

function Pipeline:stop(expect)
  if expect then return oopsctl("stop", self.id, "--expect", expect) end
  return oopsctl("stop", self.id)
end

function Pipeline:deploy() return oopsctl("deploy", self.id) end

function Pipeline:wait(status, seconds)
  local want = {}
  if type(status) == "table" then for _, s in ipairs(status) do want[s] = true end else want[status] = true end
  local deadline = oops.now_ms() + (seconds or 30) * 1000
  repeat
    local st = self:status()
    if want[st] then return st end
    sleep(0.1)
  until oops.now_ms() >= deadline
  return nil, self:status()
end

function Pipeline:message() return self:row().message end

---------------------------------------------------------------- faults

local function fault(target, call, message)
  sql("INSERT INTO sim_job (pipeline_id, kind, outcome) VALUES (?, ?, ?) " ..
    "ON DUPLICATE KEY UPDATE outcome = VALUES(outcome)", target, "fail_" .. call, message or "simulated failure")
end

local function clear_fault(target, call)
  sql("DELETE FROM sim_job WHERE pipeline_id = ? AND kind = ?", target, "fail_" .. call)
end

-- The simulated cluster's jobs of one pipeline (see gateways/simulated.lua).
local function job_fault(p, kind, outcome, fault_kind)
  local id = type(p) == "table" and p.id or p
  local deadline = oops.now_ms() + 30000
  repeat -- the job appears when its step runs
    local r = sql("SELECT COUNT(*) AS n FROM sim_job WHERE pipeline_id = ? AND kind = ?", id, kind)[1]
    if r.n > 0 then
      M.record_fault(fault_kind)
      if outcome == false then
        sql("DELETE FROM sim_job WHERE pipeline_id = ? AND kind = ?", id, kind)
      else
        sql("UPDATE sim_job SET outcome = ? WHERE pipeline_id = ? AND kind = ?", outcome, id, kind)
      end
      return true
    end
    sleep(0.05)
  until oops.now_ms() >= deadline
  error(("%s: pipeline %s has no simulated %s job after 30s"):format(fault_kind, id, kind), 3)
end

-- Make a pipeline's build fail, its build (or rollout) job vanish, its
-- rollout fail with a reason.
local function fail_job(p) return job_fault(p, "build", "failed", "build_failed") end
local function delete_job(p, kind)
  kind = kind or "build"
  return job_fault(p, kind, false, kind .. "_deleted")
end
local function fail_rollout(p, reason)
  return job_fault(p, "rollout", reason or "ImagePullBackOff (simulated)", "rollout_failed")
end

-- A webhook receiver (lua/oops/scenario/receiver.lua) for the scenario's notify
-- policy: r.url, r:fail(true|false|n), r:deliveries(), r:ids(). The end
-- checks require every notification to have reached it.
local function receiver(opts)
  local r = assert(require("oops.scenario.receiver").start(opts or {}))
  local fail = r.fail
  r.fail = function(self, v)
    M.record_fault(v and "receiver_down" or "receiver_up")
    return fail(self, v)
  end
  run.receivers[#run.receivers + 1] = r
  return r
end

---------------------------------------------------------------- metrics

-- A real Prometheus (Debian's, lua/oops/scenario/prometheus.lua) scraping
-- the simulated gateway's traffic (lua/oops/scenario/traffic.lua), started
-- once per run and stopped at its end: { url (what a policy's analysis
-- names, its password in it), prom, traffic }. opts.host: the address both
-- listen on (default 127.0.0.1; oopsctl chaos gives the namespaces' hub).
local function prometheus(opts)
  if run.prometheus then return run.prometheus end
  local host = opts and opts.host
  local token = require("oops.scenario.mariadb").random_password()
  local traffic = assert(require("oops.scenario.traffic").start { token = token, host = host })
  local prom, err = require("oops.scenario.prometheus").start { dir = run.dir, host = host,
    targets = { { address = traffic.address, token = token } } }
  if not prom then
    traffic:stop()
    error("prometheus: " .. tostring(err), 2)
  end
  run.prometheus = { url = prom.url, prom = prom, traffic = traffic }
  return run.prometheus
end

---------------------------------------------------------------- alerts

-- The alert announcements of target "NS/APP/ENV/METRIC" in the outbox,
-- oldest first: each payload decoded (cjson: a JSON null is cjson.null),
-- with the row's created_at.
local function alert_edges(key)
  local cjson = require("cjson")
  local list = {}
  for _, r in ipairs(sql("SELECT payload, created_at FROM outbox WHERE kind = 'alert' AND event_id LIKE ? " ..
      "ORDER BY id", "alert-" .. key .. "-%")) do
    local doc = cjson.decode(r.payload)
    doc.created_at = r.created_at
    list[#list + 1] = doc
  end
  return list
end

-- How many of them are `edge` (FIRING, REPEAT, RESOLVED).
local function alert_count(key, edge)
  local n = 0
  for _, e in ipairs(alert_edges(key)) do if e.edge == edge then n = n + 1 end end
  return n
end

-- What the simulated traffic of an artifact is: { error_rate = 0..1, rps }.
local function artifact_traffic(artifact, t)
  sql("INSERT INTO sim_artifact (artifact, error_rate, rps) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE " ..
    "error_rate = VALUES(error_rate), rps = VALUES(rps)", artifact, t.error_rate or 0, t.rps or 20)
end

-- A pod's use as the alert probe's Prometheus sees it (the exporter of
-- prometheus()): pod_use("shop", "api-1", { cpu = 800, memory = 2^29 }).
local function pod_use(namespace, pod, use)
  prometheus().traffic:set_pod(namespace, pod, use)
end

---------------------------------------------------------------- the end

-- The end checks (lua/oops/scenario/check.lua), polled until they all pass
-- or `seconds` ran out (what
-- takes time to come true: nothing stuck, everything delivered): results
-- ({desc, ok, diag}...) and the report's lines.
local function checks(seconds)
  local check = require("oops.scenario.check")
  local ctx = { sql = sql, faults = run.faults, receivers = run.receivers, began = run.began,
                release = run.release }
  local deadline = oops.now_ms() + (seconds or 0) * 1000
  local results
  repeat
    local fine, r = pcall(check.verify, ctx)
    results = fine and r or { { desc = "the end checks ran", ok = false, diag = r } }
    local all = true
    for _, c in ipairs(results) do if not c.ok then all = false end end
    if all then break end
    sleep(0.25)
  until oops.now_ms() >= deadline
  local fine, lines = pcall(check.report, ctx, results)
  return results, fine and lines or { "report failed: " .. tostring(lines) }
end
M.checks = checks

-- Checked at the end of every scenario while its servers still run, given
-- up to settle(seconds) (default 30) to come true; then the report: faults,
-- pipelines, takeovers and their latency, violations.
-- A failed check's pipelines, as the servers' logs tell them: the last
-- lines of each log naming each pipeline its diagnosis names (CI prints only
-- the first lines of a failed run, so these come right after the check).
local function log_lines_of(diag)
  local out, seen = {}, {}
  for id in tostring(diag or ""):gmatch("%f[%w]([%l%d]%w%w%w%w%w%w%w%w%w%w%w)%f[%W]") do
    if not seen[id] and #out < 24 then
      seen[id] = true
      for _, s in ipairs(run.order) do
        local mine = {}
        for line in s:log():gmatch("[^\n]+") do
          if line:find(id, 1, true) then mine[#mine + 1] = line end
        end
        for i = math.max(1, #mine - 3), #mine do out[#out + 1] = s.name .. ": " .. mine[i] end
      end
    end
  end
  return out
end

local function finish()
  local results, lines = checks(run.settle or 30)
  for _, c in ipairs(results) do
    if not ok(c.ok, "end: " .. c.desc, c.diag) then
      local about = log_lines_of(c.diag)
      if #about > 0 then note("what the servers logged of them:\n" .. table.concat(about, "\n")) end
    end
  end
  note(table.concat(lines, "\n"))
end
M.finish = finish

---------------------------------------------------------------- database restarts

-- restart_database { down = seconds }: stop the scenario's own MariaDB
-- (SIGTERM, SIGKILL after a bound), keep it down `down` seconds (default 3),
-- start it again on the same port and data and wait until it answers. Only
-- on a database the scenario started (no --db): run.database, set by M.main.
local function restart_database(opts)
  opts = opts or {}
  local db = run.database
  if not db then
    error("restart_database needs a database the scenario owns: run it without --db", 2)
  end
  if M.record_fault then M.record_fault("db_restart", nil) end
  local t0 = oops.now_ms()
  local done, err = db:restart { down = opts.down or 3 }
  if not done then error("restart_database: " .. tostring(err), 2) end
  -- The scenario's own connection is reopened by the call after the one
  -- that finds it lost: make those calls here, not in the scenario's next sql().
  local deadline = oops.now_ms() + 30000
  while not oops.db.exec("SELECT 1") do
    if oops.now_ms() > deadline then error("restart_database: no connection 30s after the restart", 2) end
    sleep(0.1)
  end
  note(("database restarted: down %.1fs in all"):format((oops.now_ms() - t0) / 1000))
  if M.record_fault then M.record_fault("db_up") end
end

-- The pipelines of `list` that server `name` drives now (p:driver()).
local function held_by(list, name)
  local out = {}
  for _, p in ipairs(list) do if p:driver() == name then out[#out + 1] = p end end
  return out
end

-- Is every pipeline of `list` driven by a server other than `name`?
local function held_elsewhere(list, name)
  for _, p in ipairs(list) do
    local d = p:driver()
    if d == nil or d == name then return false end
  end
  return true
end

-- The lock session holding server `name`'s name lock, or nil.
local function server_session(name)
  local r = sql("SELECT IS_USED_LOCK(CONCAT(?, ?)) AS c", oops.locks.names.server_prefix, name)[1]
  return r and r.c
end

---------------------------------------------------------------- running one

local function environment()
  local env = {
    servers = servers, server = function(n) return run.servers[n] end,
    create = create, rollback = rollback, wait_until = wait_until, expect = ok, sql = sql,
    fault = fault, clear_fault = clear_fault, sleep = sleep, note = note, oopsctl = oopsctl, oopsctl_as = oopsctl_as,
    fail_job = fail_job, delete_job = delete_job, fail_rollout = fail_rollout, receiver = receiver,
    held_by = held_by, held_elsewhere = held_elsewhere, server_session = server_session,
    prometheus = prometheus, artifact_traffic = artifact_traffic, pod_use = pod_use,
    alert_edges = alert_edges, alert_count = alert_count,
    settle = function(seconds) run.settle = seconds end,
    release_rules = M.release_rules,
    oops = oops, skip = skip, skewed_clock = skewed_clock,
    -- where this run keeps its files (servers' policies and logs), and the
    -- absolute path of a file next to the scenario
    workdir = function() return run.dir end,
    here = function(rel)
      local base = run.base
      if base:sub(1, 1) ~= "/" then base = require("lfs").currentdir() .. "/" .. base end
      return base .. "/" .. rel
    end,
  }
  env.restart_database = restart_database -- database restarts (own database only)
  return setmetatable(env, { __index = _G })
end

local function cleanup()
  netns_heal_all()
  if run.prometheus then
    run.prometheus.prom:stop()
    run.prometheus.traffic:stop()
    run.prometheus = nil
  end
  for _, s in ipairs(run.order) do
    if s:alive() then
      s.proc:kill(18) -- a frozen one must run to stop (not a fault: no record)
      s:stop(10)
    end
  end
  netns_cleanup()
end

-- Connect, migrate and make the scenario functions ready (the demo uses
-- them too). The functions table, or nil, err.
function M.begin(url, oopsd, oopsctl_bin, workdir, base)
  run = { servers = {}, order = {}, db = url, oopsd = oopsd, oopsctl = oopsctl_bin,
    dir = workdir, base = base or ".", faults = {}, receivers = {} }
  local connected, cerr = oops.connect { db = url, name = "scenario", locks = false }
  if not connected then return nil, cerr end
  local applied, merr = oops.migrate()
  if not applied then return nil, merr end
  run.began = oops.db.now() or oops.time()
  return environment()
end

M.cleanup = function() cleanup() end

-- For oopsctl chaos (lua/oops/chaos/), which runs scenario functions
-- without a scenario file: the database it owns (restart_database), the
-- faults recorded so far, and the namespaces' hub address (nil without).
function M.use_database(db) run.database = db end
-- What the end checks hold the release-safety rules to (issue 26):
-- { slots = { prod = 2 }, freezes = { { name =, from = epoch, to = epoch,
-- environments = { prod = true } } } }, epochs on the database's clock.
function M.release_rules(t) run.release = t end
function M.set_note(fn) note_to = fn end
function M.faults() return run.faults end
function M.hub() return netns.hub end

-- Run the scenario at path against database url; returns the exit code.
-- database: the handle of the MariaDB the scenario owns (lua/oops/scenario/mariadb.lua),
-- nil when it runs on a --db database.
function M.main(path, url, oopsd, oopsctl_bin, workdir, database)
  local env, berr = M.begin(url, oopsd, oopsctl_bin, workdir, path:match("^(.*)/[^/]*$"))
  if not env then
    io.stderr:write("oopsctl scenario: " .. tostring(berr) .. "\n")
    return 2
  end
  run.database = database -- for restart_database
  local existing = oops.db.exec("SELECT COUNT(*) AS n FROM pipeline")[1].n
  if existing > 0 then
    io.stderr:write(("oopsctl scenario: the database already holds %d pipelines; a scenario needs " ..
      "a database of its own (it starts servers and creates and stops pipelines)\n"):format(existing))
    return 1
  end
  local chunk, lerr = loadfile(path, "t", env)
  if not chunk then
    io.stderr:write("oopsctl scenario: " .. lerr .. "\n")
    return 1
  end
  local done, err = pcall(oops.wait, function()
    local fine, e = xpcall(chunk, debug.traceback)
    if fine and not run.skipped then -- the end checks, while the servers still run
      fine, e = xpcall(finish, debug.traceback)
    end
    cleanup()
    if not fine then error(e, 0) end
  end)
  if not done then
    ok(false, "the scenario ran to its end", err)
    for _, s in ipairs(run.order) do note(s.name .. " log (tail):\n" .. s:log():sub(-3000)) end
  elseif tap.failed > 0 then
    for _, s in ipairs(run.order) do note(s.name .. " log (tail):\n" .. s:log():sub(-2000)) end
  end
  io.write(("1..%d\n"):format(tap.n))
  return tap.failed == 0 and 0 or 1
end

return M
