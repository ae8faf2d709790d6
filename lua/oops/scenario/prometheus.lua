-- A throwaway Prometheus server (Debian's `prometheus`) for scenarios,
-- oopsctl chaos and bench (issue 38): its configuration and data in a
-- private directory, listening on a free loopback port, scraping the given
-- targets every second with their bearer tokens, and refusing anyone
-- without its basic-auth password (a random one, bcrypt-hashed by
-- apache2-utils' htpasswd, read from stdin: never in an argv), so another
-- local user can neither read its metrics nor query it.
--   local prom = assert(require("oops.scenario.prometheus").start {
--     dir = DIR, targets = { { address = "127.0.0.1:PORT", token = SECRET } } [, host = ADDR] })
--   prom.url      http://oops:PASSWORD@127.0.0.1:PORT (what a policy names)
-- host: the address it listens on (default 127.0.0.1); oopsctl chaos gives
-- the network namespaces' hub, so that servers in a namespace reach it.
--   prom:stop()
-- Everything here waits: call it from a task.
local oops = require("oops")
local files = require("oops.scenario.files")
local mariadb = require("oops.scenario.mariadb")

local M = {}

M.START_MS = 30000
M.SCRAPE = "1s"

local Prom = {}
Prom.__index = Prom

-- (In the private directory start makes: no other user reaches them.)
local function write_private(path, text) files.write(path, text) end

local function config(dir, targets)
  local out = { "global:", "  scrape_interval: " .. M.SCRAPE, "  evaluation_interval: " .. M.SCRAPE,
    "scrape_configs:" }
  for i, t in ipairs(targets) do
    local tok = ("%s/scrape-token-%d"):format(dir, i)
    write_private(tok, t.token)
    out[#out + 1] = ("  - job_name: target%d"):format(i)
    out[#out + 1] = "    authorization:"
    out[#out + 1] = "      credentials_file: " .. tok
    out[#out + 1] = "    static_configs:"
    out[#out + 1] = ("      - targets: ['%s']"):format(t.address)
  end
  return table.concat(out, "\n") .. "\n"
end

-- The scenario's basic-auth line: "oops:$2y$..." from htpasswd.
local function hashed(password)
  local r, err = oops.proc.run { argv = { "htpasswd", "-niB", "-C", "5", "oops" }, stdin = password .. "\n",
    timeout_ms = 20000 }
  if not r then return nil, "htpasswd: " .. tostring(err) .. " (apache2-utils; scripts/setup.sh installs it)" end
  local line = r.ok and r.stdout:match("^(oops:%$2[aby]%$[^\n]+)")
  if not line then return nil, "htpasswd failed: " .. r.stderr end
  return line:match("^oops:(.*)$")
end

local function ready(self)
  local r = oops.http.request { url = self.url .. "/-/ready", method = "GET", timeout_ms = 2000,
    allow_userinfo = true }
  return r and r.status == 200
end

-- start{ dir, targets = { { address, token }... }, host }: the server, or nil, err.
function M.start(opts)
  local dir = assert(opts.dir, "prometheus.start{dir}")
  local host = opts.host or "127.0.0.1"
  if not oops.fs.mkdir_private(dir .. "/prometheus") then return nil, "cannot make " .. dir .. "/prometheus" end
  dir = dir .. "/prometheus"
  local self = setmetatable({ dir = dir, password = mariadb.random_password() }, Prom)
  local hash, herr = hashed(self.password)
  if not hash then return nil, herr end
  write_private(dir .. "/web.yml", ("basic_auth_users:\n  oops: '%s'\n"):format(hash))
  write_private(dir .. "/prometheus.yml", config(dir, opts.targets or {}))
  for _ = 1, 5 do
    self.port = mariadb.free_port()
    self.plain = ("http://%s:%d"):format(host, self.port)
    self.url = ("http://oops:%s@%s:%d"):format(self.password, host, self.port)
    local log = assert(io.open(dir .. "/prometheus.log", "a"))
    self.exit = nil
    self.proc = assert(oops.proc.start {
      argv = { "prometheus", "--config.file=" .. dir .. "/prometheus.yml", "--storage.tsdb.path=" .. dir .. "/data",
        "--web.listen-address=" .. host .. ":" .. self.port, "--web.config.file=" .. dir .. "/web.yml",
        "--log.level=warn" },
      on_output = function(_, data) log:write(data) log:flush() end,
      on_exit = function(r) log:close() self.exit = r end,
    })
    local deadline = oops.now_ms() + M.START_MS
    while not self.exit and oops.now_ms() < deadline do
      if ready(self) then
        -- Its first scrapes come about 5 s after it is ready (service
        -- discovery's first update): wait for every target's.
        while oops.now_ms() < deadline do
          local up = self:query("count(up == 1)")
          local n = up and up.data and up.data.result and up.data.result[1] and tonumber(up.data.result[1].value[2])
          if (n or 0) >= #(opts.targets or {}) then return self end
          oops.sleep(250)
        end
        break
      end
      oops.sleep(200)
    end
    self:stop()
    if not self.exit then break end -- it ran but never got ready: not a port clash
  end
  return nil, "prometheus did not get ready: " .. (files.read(dir .. "/prometheus.log") or ""):sub(-600)
end

-- Ask it one instant query (for tests): the decoded answer, or nil, err.
function Prom:query(q)
  local r, err = oops.http.request { url = self.url .. "/api/v1/query?query=" ..
    require("oops.probes.prometheus").encode(q), method = "GET", timeout_ms = 5000, allow_userinfo = true }
  if not r then return nil, err end
  return require("oops.json").decode(r.body)
end

function Prom:stop()
  if self.proc and not self.exit then
    self.proc:kill(15)
    local deadline = oops.now_ms() + 10000
    while not self.exit and oops.now_ms() < deadline do oops.sleep(100) end
    if not self.exit then self.proc:kill(9) end
  end
end

return M
