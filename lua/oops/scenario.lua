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
--   servers { count = 3, policy = [[ ... ]] | policies = "dir", names = {...} }
--                                   → list of servers (s.name, s:kill(sig), s:stop(),
--                                     s:start(), s:alive(), s:log())
--   server(name)                    → one of them
--   create { app = "shop/api", env = "prod", manual = false, artifact = "..." }
--                                   → pipeline (p.id, p:status(), p:row(), p:events(),
--                                     p:drivers(), p:driver(), p:calls(action), p:stop(),
--                                     p:deploy(), p:wait(status [, seconds]))
--   wait_until(desc, fn [, seconds])  polls fn until true; a failed check when it never is
--   expect(cond, desc [, diag])     one TAP check
--   sql(query, ...)                 rows from the scenario's database (bound parameters)
--   fault(target, call, message)    inject a simulated gateway error ("ns/app/env", "deploy")
--   clear_fault(target, call)
--   sleep(seconds), note(text), oopsctl(args...) → exit code, stdout, stderr
local oops = require("oops")

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

local function note(text)
  io.write("# " .. tostring(text):gsub("\n", "\n# ") .. "\n")
  io.flush()
end

local function sql(q, ...)
  local rows, err = oops.db.exec(q, ...)
  if not rows then error("sql: " .. tostring(err) .. "\n  in: " .. q, 2) end
  return rows
end

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

local Server = {}
Server.__index = Server

local function write_file(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

function Server:start()
  assert(not self:alive(), self.name .. " is already running")
  local log = io.open(self.log_path, "a")
  self.started = false
  local me = self
  self.proc = assert(oops.proc.start {
    argv = { run.oopsd, "--name", self.name, "--policies", self.policies,
      "--listen", "off", "--drain", "3000" },
    env = { OOPS_DB = run.db },       -- not in argv: ps must not show the password
    on_output = function(_, data)
      log:write(data)
      log:flush()
      if data:find('msg="started:', 1, true) then me.started = true end
    end,
    on_exit = function(r)
      log:close()
      me.exit = r
    end,
  })
  self.exit = nil
  local deadline = oops.now_ms() + 30000
  while not self.started and not self.exit and oops.now_ms() < deadline do sleep(0.05) end
  if not self.started then
    error(("server %s did not start:\n%s"):format(self.name, read_file(self.log_path)), 2)
  end
  return self
end

function Server:alive() return self.proc ~= nil and self.exit == nil end

-- Send a signal: "KILL", "TERM", "STOP", "CONT" (or a number).
function Server:kill(sig)
  local n = ({ KILL = 9, TERM = 15, STOP = 19, CONT = 18, HUP = 1, INT = 2 })[sig or "KILL"] or sig
  if self:alive() then self.proc:kill(n) end
  if n == 9 then
    local deadline = oops.now_ms() + 10000
    while self.exit == nil and oops.now_ms() < deadline do sleep(0.05) end
  end
end

-- SIGTERM and wait for the exit; returns its exit status.
function Server:stop(seconds)
  if not self:alive() then return self.exit and self.exit.status end
  self.proc:kill(15)
  local deadline = oops.now_ms() + (seconds or 20) * 1000
  while self.exit == nil and oops.now_ms() < deadline do sleep(0.05) end
  if self.exit == nil then self.proc:kill(9) return nil end
  return self.exit.status
end

function Server:log() return read_file(self.log_path) end

local function servers(opts)
  opts = opts or {}
  local dir = opts.policies
  if opts.policy then
    dir = run.dir .. "/policy-" .. (#run.order + 1)
    require("lfs").mkdir(dir)
    write_file(dir .. "/scenario.lua", opts.policy)
  elseif dir and not dir:match("^/") then
    dir = run.base .. "/" .. dir
  end
  assert(dir, "servers{}: give policy = [[...]] or policies = \"dir\"")
  local list = {}
  local count = opts.count or (opts.names and #opts.names) or 1
  for i = 1, count do
    local name = opts.names and opts.names[i] or ("s" .. (#run.order + 1))
    local s = setmetatable({ name = name, policies = dir,
      log_path = run.dir .. "/" .. name .. ".log" }, Server)
    run.servers[name] = s
    run.order[#run.order + 1] = s
    list[#list + 1] = s
  end
  for _, s in ipairs(list) do s:start() end
  return list
end

---------------------------------------------------------------- pipelines

local Pipeline = {}
Pipeline.__index = Pipeline

local function oopsctl(...)
  local argv = { run.oopsctl, ... }
  local r = oops.proc.run { argv = argv, env = { OOPS_DB = run.db }, timeout_ms = 30000 }
  return r.status, r.stdout, r.stderr
end

local function create(opts)
  local args = { "create", "--app", (assert(opts.app, "create{}: app")), "--env", (assert(opts.env, "create{}: env")) }
  if opts.manual then args[#args + 1] = "--manual" end
  if opts.artifact then args[#args + 1] = "--artifact"; args[#args + 1] = opts.artifact end
  local status, out, err = oopsctl(table.unpack(args))
  if status ~= 0 then error("create " .. opts.app .. ": " .. err, 2) end
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
    "IS_USED_LOCK(CONCAT('oops:pipeline:', ?))", self.id)
  return rows[1] and rows[1].name
end

function Pipeline:calls(action)
  return sql("SELECT COUNT(*) AS n FROM sim_call WHERE pipeline_id = ? AND action = ?", self.id, action)[1].n
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

---------------------------------------------------------------- running one

local function environment()
  local env = {
    servers = servers, server = function(n) return run.servers[n] end,
    create = create, wait_until = wait_until, expect = ok, sql = sql,
    fault = fault, clear_fault = clear_fault, sleep = sleep, note = note, oopsctl = oopsctl,
    oops = oops,
  }
  return setmetatable(env, { __index = _G })
end

local function cleanup()
  for _, s in ipairs(run.order) do
    if s:alive() then
      s:kill("CONT")
      s:stop(10)
    end
  end
end

-- Connect, migrate and make the scenario functions ready (the demo uses
-- them too). The functions table, or nil, err.
function M.begin(url, oopsd, oopsctl_bin, workdir, base)
  run = { servers = {}, order = {}, db = url, oopsd = oopsd, oopsctl = oopsctl_bin,
    dir = workdir, base = base or "." }
  local connected, cerr = oops.connect { db = url, name = "scenario", locks = false }
  if not connected then return nil, cerr end
  local applied, merr = oops.migrate()
  if not applied then return nil, merr end
  return environment()
end

M.cleanup = function() cleanup() end

-- Run the scenario at path against database url; returns the exit code.
function M.main(path, url, oopsd, oopsctl_bin, workdir)
  local env, err = M.begin(url, oopsd, oopsctl_bin, workdir, path:match("^(.*)/[^/]*$"))
  if not env then
    io.stderr:write("oopsctl scenario: " .. tostring(err) .. "\n")
    return 2
  end
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
