-- A throwaway MariaDB driven from Lua (the Lua twin of tests/lib/mariadb.sh):
-- `oopsctl scenario FILE` without --db runs the scenario on one of these, and
-- restart_database{} stops and starts it under the running servers.
--
--   local db, err = require("oops.scenario.mariadb").start { dir = DIR, bind = { "10.0.0.1" } }
--     dir   a directory that does not exist yet or is empty; the data, the
--           socket and the logs live there and db:stop() removes it
--     bind  optional extra IPv4 addresses to listen on besides 127.0.0.1
--           (for a server in its own network namespace); user `oops` may
--           connect from each of them
--     clients optional extra hosts user `oops` may connect from, as MariaDB
--           account hosts: an IPv4 address, address/netmask
--           ("10.213.0.0/255.255.0.0") or a pattern with % ("10.213.%")
--     max_connections optional: a number, or "default" for the server's own
--           (151); 500 when not given, as in tests/lib/mariadb.sh
--     args  optional extra server options, e.g. { "--performance-schema=ON" }
--           (bench/fleet.lua's per-thread statement counters)
--   db.url            mysql://oops:PASSWORD@127.0.0.1:PORT/oops
--   db.port, db.password, db.dir, db.socket, db.user (the OS user running it)
--   db:url_for(host)  the same URL with another host
--   db:admin(sql)     SQL text run by the mariadb client on the socket, as
--                     the account of the OS user who started it (unix_socket
--                     auth, no password; all privileges). No placeholders: our
--                     own values only, e.g. CREATE DATABASE
--   db:restart { down = seconds [, stop_within = seconds] }  stop mariadbd (SIGTERM;
--                     SIGKILL after stop_within, default 30),
--                     stay down, start it on the same port and data, wait until it
--                     answers; true or nil, err
--   db:kill()         SIGKILL mariadbd (a crash); db:restart{} brings it back
--   db:stop()         stop mariadbd and remove dir
--
-- Reachable by the user who started it alone (issue 34; `oopsctl chaos` runs
-- as root, on shared hosts too), as tests/lib/mariadb.sh: dir and the socket
-- are 0700 (the socket again after each restart); root and the OS user's
-- account log in by unix_socket on that socket only, and any account that
-- could log in without a password (anonymous, root over TCP, an empty
-- authentication string) is dropped after the install, the start failing if
-- one is left; `oops` has a random password; secure_file_priv is dir/files
-- (0700), so INTO OUTFILE/DUMPFILE, LOAD DATA and LOAD_FILE() reach nothing
-- else, whoever runs mariadbd.
--
-- Everything here waits (oops.proc.run, oops.sleep): call it from a task
-- (oops.wait, oops.task or a scenario). Processes run as argv, never through
-- a shell; the password never appears in an argv (the bootstrap SQL goes to
-- the client's stdin; servers get the URL in OOPS_DB: scenario/server.lua).
local oops = require("oops")
local files = require("oops.scenario.files")
local lfs = require("lfs")

local M = {}

local Db = {}
Db.__index = Db

local START_SECONDS = 60     -- mariadbd answering after a start
local STOP_SECONDS = 30      -- SIGTERM to exit, before SIGKILL

local function sleep(seconds) oops.sleep(math.floor(seconds * 1000)) end

-- The file's text, "" when there is none (yet).
local function read_file(path) return files.read(path) or "" end
local write_file = files.write

-- The last non-empty line of a text (a log), trimmed; "(empty log)" when none.
local function last_line(text)
  local last
  for line in text:gmatch("[^\n]+") do
    if line:match("%S") then last = line end
  end
  return last and last:match("^%s*(.-)%s*$") or "(empty log)"
end

-- Ports with a socket on them (listening or not), from /proc/net/tcp{,6}.
local function ports_in_use()
  local used = {}
  for _, f in ipairs { "/proc/net/tcp", "/proc/net/tcp6" } do
    for line in read_file(f):gmatch("[^\n]+") do
      local hex = line:match("^%s*%d+:%s+%x+:(%x+)%s")
      if hex then used[tonumber(hex, 16)] = true end
    end
  end
  return used
end

local function free_port()
  local used = ports_in_use()
  for _ = 1, 200 do
    local p = math.random(20000, 31999) -- below the ephemeral range (32768+)
    if not used[p] then return p end
  end
  return nil
end

M.free_port = function() return free_port() end

local function random_password()
  local f = io.open("/dev/urandom", "rb")
  local bytes = f and f:read(24) or tostring(oops.time()) .. tostring({})
  if f then f:close() end
  local alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
  local out = {}
  for i = 1, 24 do
    local b = bytes:byte((i - 1) % #bytes + 1)
    out[i] = alphabet:sub(b % #alphabet + 1, b % #alphabet + 1)
  end
  return "pw" .. table.concat(out)
end
M.random_password = random_password

local function is_ipv4(s)
  if type(s) ~= "string" then return false end
  local a, b, c, d = s:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  if not a then return false end
  for _, n in ipairs { a, b, c, d } do
    if tonumber(n) > 255 then return false end
  end
  return true
end

-- An account host we accept: IPv4, IPv4/netmask, or digits, dots and %.
local function is_client_host(s)
  if type(s) ~= "string" or s == "" then return false end
  if is_ipv4(s) then return true end
  local a, m = s:match("^([^/]+)/([^/]+)$")
  if a then return is_ipv4(a) and is_ipv4(m) end
  return s:match("^[%d%.%%]+$") ~= nil
end

local function dir_is_empty(dir)
  for name in lfs.dir(dir) do
    if name ~= "." and name ~= ".." then return false end
  end
  return true
end

-- Run a command to its end; the result, or nil, "cannot run ...".
local function run(argv, opts)
  opts = opts or {}
  opts.argv = argv
  opts.timeout_ms = opts.timeout_ms or 120000
  return oops.proc.run(opts)
end

-- SQL text run by the mariadb client on the private socket as the OS user
-- who started the server (its account, made by mariadb-install-db --user,
-- logs in by unix_socket: no password): the oops.proc.run result, or nil,
-- err. No placeholders: only for statements whose values are ours.
function Db:admin(sql, opts)
  local argv = { "mariadb", "--no-defaults", "--socket=" .. self.socket, "--user=" .. self.user, "--batch" }
  if opts and opts.rows then argv[#argv + 1] = "--skip-column-names" end
  return run(argv, { stdin = sql, timeout_ms = 30000 })
end

-- The accounts someone could log in to without a password (over TCP above
-- all), one 'user'@'host' a row: anonymous ones, root anywhere but the
-- socket (localhost), and any account, neither locked nor a role, with a way
-- in (its plugin, or one of its OR alternatives) that is not unix_socket and
-- has an empty authentication string. The same as MDB_OPEN_ACCOUNTS in
-- tests/lib/mariadb.sh.
local OPEN_ACCOUNTS = [[
SELECT CONCAT(QUOTE(g.User), '@', QUOTE(g.Host)) FROM mysql.global_priv g
  WHERE IFNULL(JSON_EXTRACT(g.Priv, '$.account_locked'), 'false') <> 'true'
    AND IFNULL(JSON_EXTRACT(g.Priv, '$.is_role'), 'false') <> 'true'
    AND (g.User = '' OR (g.User = 'root' AND g.Host <> 'localhost')
      OR (IFNULL(JSON_VALUE(g.Priv, '$.authentication_string'), '') = ''
        AND IFNULL(JSON_VALUE(g.Priv, '$.plugin'), 'mysql_native_password') NOT IN ('unix_socket', 'auth_socket'))
      OR EXISTS (SELECT 1 FROM JSON_TABLE(JSON_EXTRACT(g.Priv, '$.auth_or'), '$[*]' COLUMNS (
          plugin VARCHAR(64) PATH '$.plugin', auth TEXT PATH '$.authentication_string')) a
        WHERE a.plugin NOT IN ('unix_socket', 'auth_socket') AND IFNULL(a.auth, '') = ''));
]]

-- The open accounts, as a list of 'user'@'host'; or nil, err.
function Db:_open_accounts()
  local r, err = self:admin(OPEN_ACCOUNTS, { rows = true })
  if not r or not r.ok then return nil, r and last_line(r.stderr) or tostring(err) end
  local list = {}
  for line in r.stdout:gmatch("[^\n]+") do list[#list + 1] = line end
  return list
end

-- Drop every open account, then check that none is left. true, or nil, err.
function Db:_lock_down()
  local open, err = self:_open_accounts()
  if not open then return nil, "listing the accounts failed: " .. err end
  if #open > 0 then
    local drop = {}
    for i, a in ipairs(open) do drop[i] = "DROP USER " .. a .. ";" end
    local r, derr = self:admin(table.concat(drop, "\n") .. "\n")
    if not r or not r.ok then
      return nil, ("dropping %s failed: %s"):format(table.concat(open, ", "),
        r and last_line(r.stderr) or tostring(derr))
    end
  end
  open, err = self:_open_accounts()
  if not open then return nil, "listing the accounts failed: " .. err end
  if #open > 0 then return nil, "accounts without a password are left: " .. table.concat(open, ", ") end
  return true
end

-- chmod 700 path, and check it took: true, or nil, err.
local function private(path)
  local r, err = run { "chmod", "700", "--", path }
  if not r or not r.ok then
    return nil, ("cannot make %s private: %s"):format(path, r and last_line(r.stderr) or tostring(err))
  end
  if lfs.attributes(path, "permissions") ~= "rwx------" then
    return nil, ("%s is not private (mode %s)"):format(path, tostring(lfs.attributes(path, "permissions")))
  end
  return true
end

function Db:_answers()
  local r = self:admin("SELECT 1;\n")
  return r ~= nil and r.ok
end

function Db:_argv()
  local argv = { "mariadbd", "--no-defaults", "--datadir=" .. self.dir .. "/data",
    "--socket=" .. self.socket, "--port=" .. self.port,
    "--bind-address=" .. table.concat(self.bind, ","), "--user=" .. self.user,
    "--pid-file=" .. self.dir .. "/mysqld.pid", "--log-error=" .. self.dir .. "/error.log",
    "--tmpdir=" .. self.dir .. "/tmp", "--secure-file-priv=" .. self.dir .. "/files",
    "--innodb-buffer-pool-size=128M", "--innodb-log-file-size=64M", "--skip-log-bin",
    "--innodb-flush-log-at-trx-commit=2", "--skip-name-resolve", "--innodb-fast-shutdown=2" }
  if self.max_connections ~= "default" then
    argv[#argv + 1] = "--max-connections=" .. math.tointeger(self.max_connections or 500)
  end
  for _, a in ipairs(self.args or {}) do argv[#argv + 1] = a end
  return argv
end

-- Start mariadbd on self.port and wait until it answers. true, or nil, err
-- (the process is gone then).
function Db:_spawn()
  local box = {}
  local h, err = oops.proc.start {
    argv = self:_argv(),
    max_output = 64 * 1024,
    on_exit = function(r) box.exit = r end,
  }
  if not h then return nil, err end
  self.proc, self.box = h, box
  local deadline = oops.now_ms() + START_SECONDS * 1000
  while oops.now_ms() < deadline do
    if box.exit then break end
    if self:_answers() then
      -- The socket is made anew at each start: private again (dir is already).
      local ok, perr = private(self.socket)
      if ok then return true end
      self:_halt(9)
      return nil, perr
    end
    sleep(0.1)
  end
  if not box.exit then self:_halt(9) end
  self.proc = nil
  local why = last_line(read_file(self.dir .. "/error.log"))
  if not box.exit then why = "no answer after " .. START_SECONDS .. "s; " .. why end
  return nil, why
end

-- Signal mariadbd and wait for its exit: SIGTERM then SIGKILL after
-- `seconds`, or SIGKILL at once (sig 9). true when it is gone.
function Db:_halt(sig, seconds)
  local h, box = self.proc, self.box
  if not h or box.exit then self.proc = nil return true end
  h:kill(sig or 15)
  local deadline = oops.now_ms() + (seconds or STOP_SECONDS) * 1000
  while not box.exit and oops.now_ms() < deadline do sleep(0.05) end
  if not box.exit then
    h:kill(9)
    deadline = oops.now_ms() + 10000
    while not box.exit and oops.now_ms() < deadline do sleep(0.05) end
  end
  if box.exit then self.proc = nil end
  return box.exit ~= nil
end

-- What mariadb-install-db's output says before the generic advice it ends
-- with (the bootstrap server's own lines), at most 12, on one line.
local function install_why(text)
  local why = {}
  for line in text:gmatch("[^\n]+") do
    if line:find("Installation of system tables failed", 1, true) or #why == 12 then break end
    if line:match("%S") and not line:match("^Installing MariaDB") then why[#why + 1] = line end
  end
  return #why > 0 and table.concat(why, " | ") or last_line(text)
end

-- A new data directory in dir/data, its temporary files in dir/tmp (the
-- bootstrap's temporary tables in a shared /tmp collide with another
-- bootstrap's); one retry on a clean directory. root and `user` log in by
-- unix_socket alone (`normal` made root@127.0.0.1, root@::1 and
-- root@localhost without a password). true, or nil, err.
local function install(dir, user)
  local why
  for attempt = 1, 2 do
    run { "rm", "-rf", "--", dir .. "/data", dir .. "/tmp" }
    lfs.mkdir(dir .. "/tmp")
    local r, rerr = run({ "mariadb-install-db", "--no-defaults", "--datadir=" .. dir .. "/data",
      "--tmpdir=" .. dir .. "/tmp", "--user=" .. user, "--auth-root-authentication-method=socket",
      "--skip-test-db" })
    if not r then return nil, "mariadb-install-db failed: " .. tostring(rerr) end
    write_file(("%s/install.%d.log"):format(dir, attempt), r.stdout .. r.stderr)
    if r.ok then return true end
    why = install_why(r.stdout .. r.stderr)
    io.stderr:write(("mariadb-install-db failed (attempt %d of 2): %s\n"):format(attempt, why))
  end
  return nil, "mariadb-install-db failed twice: " .. why
end

--- Start a throwaway MariaDB in opts.dir. Raises on a caller's mistake (no dir,
--- a dir that holds files, a bind address that is not IPv4); returns nil, err
--- when the server cannot be made or started.
function M.start(opts)
  if type(opts) ~= "table" or type(opts.dir) ~= "string" or opts.dir == "" then
    error("oops.scenario.mariadb.start: give { dir = \"/path/to/a/new/dir\" }", 2)
  end
  local dir = opts.dir:gsub("/+$", "")
  local binds = { "127.0.0.1" }
  local seen = { ["127.0.0.1"] = true }
  for _, a in ipairs(opts.bind or {}) do
    if not is_ipv4(a) then
      error(("oops.scenario.mariadb.start: bind address %q is not an IPv4 address"):format(tostring(a)), 2)
    end
    if not seen[a] then seen[a] = true; binds[#binds + 1] = a end
  end
  local clients = {}
  for _, h in ipairs(opts.clients or {}) do
    if not is_client_host(h) then
      error(("oops.scenario.mariadb.start: client host %q is not an IPv4 address, address/netmask " ..
        "or pattern like 10.0.%%"):format(tostring(h)), 2)
    end
    clients[#clients + 1] = h
  end
  local mode = lfs.attributes(dir, "mode")
  if mode == nil then
    local made, merr = lfs.mkdir(dir)
    if not made then return nil, ("cannot create %s: %s"):format(dir, tostring(merr)) end
  elseif mode ~= "directory" then
    error(("oops.scenario.mariadb.start: %s exists and is not a directory"):format(dir), 2)
  elseif not dir_is_empty(dir) then
    error(("oops.scenario.mariadb.start: %s is not empty (it is removed by db:stop())"):format(dir), 2)
  end

  local mc = opts.max_connections
  if mc ~= nil and mc ~= "default" and not (math.tointeger(mc) and mc >= 1) then
    error(("oops.scenario.mariadb.start: max_connections %q is not a number above 0 or \"default\""):format(
      tostring(mc)), 2)
  end
  for _, a in ipairs(opts.args or {}) do
    if type(a) ~= "string" or not a:match("^%-%-[%w_-]+") then
      error(("oops.scenario.mariadb.start: server option %q does not start with --"):format(tostring(a)), 2)
    end
  end
  local self = setmetatable({ dir = dir, socket = dir .. "/mysqld.sock", bind = binds, max_connections = mc,
    args = opts.args }, Db)

  local id, ierr = run { "id", "-un" }
  local uid = run { "id", "-u" }
  if not id or not id.ok or not uid or not uid.ok then
    return nil, "cannot tell which user runs mariadbd: " .. (id and last_line(id.stderr) or tostring(ierr))
  end
  self.user = id.stdout:match("%S+")
  -- Private: the data, the socket, the logs and the files dir live here.
  if lfs.attributes(dir, "uid") ~= math.tointeger(tonumber(uid.stdout:match("%d+"))) then
    return nil, ("%s belongs to another user"):format(dir)
  end
  local ok, ierr2 = private(dir)
  if not ok then return nil, ierr2 end

  ok, ierr2 = install(dir, self.user)
  if not ok then return nil, ierr2 end
  -- The one place INTO OUTFILE/DUMPFILE, LOAD DATA and LOAD_FILE() may reach.
  lfs.mkdir(dir .. "/files")
  ok, ierr2 = private(dir .. "/files")
  if not ok then return nil, ierr2 end

  -- A free port can be taken between the look and the bind: try a few.
  local err
  for _ = 1, 3 do
    self.port = free_port()
    if not self.port then return nil, "mariadbd: no free loopback port found" end
    local up
    up, err = self:_spawn()
    if up then break end
    err = ("mariadbd did not start on port %d: %s"):format(self.port, tostring(err))
    self.port = nil
  end
  if not self.port then return nil, err end
  local locked, lerr = self:_lock_down()
  if not locked then
    self:_halt(9)
    return nil, lerr
  end

  self.password = random_password()
  local users = { "127.0.0.1", "localhost" }
  for i = 2, #binds do users[#users + 1] = binds[i] end
  for _, h in ipairs(clients) do users[#users + 1] = h end
  local seen_user = {}
  -- The values here are ours (an alphanumeric password, checked addresses
  -- and host patterns), as in tests/lib/mariadb.sh; account statements take no
  -- placeholders. Sent on stdin so the password stays out of every argv.
  local sql = {}
  for _, host in ipairs(users) do
    if seen_user[host] then goto next end
    seen_user[host] = true
    sql[#sql + 1] = ("CREATE USER 'oops'@'%s' IDENTIFIED BY '%s';"):format(host, self.password)
    sql[#sql + 1] = ("GRANT ALL PRIVILEGES ON *.* TO 'oops'@'%s';"):format(host)
    ::next::
  end
  sql[#sql + 1] = "CREATE DATABASE oops;"
  local c, cerr = self:admin(table.concat(sql, "\n") .. "\n")
  if not c or not c.ok then
    self:_halt(9)
    return nil, "creating the oops user and database failed: " ..
      (c and last_line(c.stderr) or tostring(cerr))
  end
  self.url = self:url_for("127.0.0.1")
  return self
end

function Db:url_for(host)
  return ("mysql://oops:%s@%s:%d/oops"):format(self.password, host, self.port)
end

function Db:running() return self.proc ~= nil and not self.box.exit end

--- Stop mariadbd (SIGTERM, SIGKILL after a bound), stay down opts.down
--- seconds (default 0), start it again on the same port and data, and wait
--- until it answers. Also brings back a server stopped by db:kill().
function Db:restart(opts)
  opts = opts or {}
  local down = opts.down or 0
  if type(down) ~= "number" or down < 0 then
    error("db:restart: down must be a number of seconds >= 0", 2)
  end
  if self.removed then error("db:restart: the database was stopped and removed", 2) end
  if not self:_halt(15, opts.stop_within or STOP_SECONDS) then
    return nil, ("mariadbd on port %d did not exit after SIGKILL"):format(self.port)
  end
  if down > 0 then sleep(down) end
  -- The port was ours a moment ago; if something took it meanwhile, or the
  -- kernel still holds it, try again for a while.
  local err
  local deadline = oops.now_ms() + START_SECONDS * 1000
  repeat
    local up
    up, err = self:_spawn()
    if up then return true end
    sleep(0.5)
  until oops.now_ms() >= deadline
  return nil, ("mariadbd did not start on port %d: %s"):format(self.port, tostring(err))
end

--- SIGKILL mariadbd and wait for it to go (a crash; the data stays).
function Db:kill()
  return self:_halt(9)
end

--- Stop mariadbd and remove the directory (the data is thrown away: a short
--- grace, then SIGKILL). Safe to call twice.
function Db:stop()
  if self.removed then return true end
  self:_halt(15, 5)
  self.removed = true
  local r, err = run { "rm", "-rf", "--", self.dir }
  if not r or not r.ok then
    return nil, ("cannot remove %s: %s"):format(self.dir, r and last_line(r.stderr) or tostring(err))
  end
  return true
end

return M
