-- The one way the tools start a real oopsd (the scenario runner's servers,
-- bench/'s): OOPS_DB in its environment, never in argv (ps must not show the
-- password); its output appended to a log file; started once it logged
-- `msg="started: ...`.
--
--   local server = require("oops.scenario.server")
--   local s = {}   -- the caller's record of this server (a scenario's Server)
--   local started, log = server.start(s, {
--     oopsd = "/path/oopsd", name = "s1", policies = DIR, db = URL, log_path = FILE,
--     listen = "off",         -- default; "127.0.0.1:0" binds a free port
--     wrap = function(argv) return argv end, -- optional: run it another way
--                             -- (inside a network namespace: ns:argv)
--     args = { "--simulate", URL }, -- optional: more flags
--     env = { TZ = "Asia/Kolkata" }, -- optional: added to its environment
--                             -- (OOPS_DB cannot be set this way)
--   })
--   -- started: s, once it logged "started:"; or nil and its log when it
--   -- exited first or did not start within 30 s (then it is left running:
--   -- the caller decides).
--   s.proc, s.pid     the oops.proc handle and its pid
--   s.exit            nil while it runs; oops.proc's exit result once it ended
--   s.started         true once it logged "started:"
--   s.port            the HTTP port it bound (nil with --listen off)
--   server.stop(s [, seconds])  SIGTERM, SIGKILL after `seconds` (default 20);
--                     the exit status, or nil when it had to be killed
--
-- Its environment is the caller's (inherit_env: sanitizer settings, ...),
-- with OOPS_DB set. Everything here waits: call it from a task.
local oops = require("oops")
local files = require("oops.scenario.files")

local M = {}

local START_MS = 30000

local function sleep(seconds) oops.sleep(math.floor(seconds * 1000)) end

function M.start(s, o)
  local log = assert(io.open(o.log_path, "a"))
  local head = "" -- the output up to "started:" (its last 4 KiB), which a read may split
  local argv = { o.oopsd, "--name", o.name, "--policies", o.policies,
    "--listen", o.listen or "off", "--drain", "3000" }
  for _, a in ipairs(o.args or {}) do argv[#argv + 1] = a end
  if o.wrap then argv = o.wrap(argv) end
  s.started, s.port, s.exit = false, nil, nil
  local env = {}
  for k, v in pairs(o.env or {}) do env[k] = v end
  env.OOPS_DB = o.db -- not in argv: ps must not show the password
  -- A URL without one (tests/lib/mariadb.sh's) names its file; oops.proc
  -- hands a child no OOPS_DB* of ours unless given here.
  env.OOPS_DB_PASSWORD_FILE = env.OOPS_DB_PASSWORD_FILE or os.getenv("OOPS_DB_PASSWORD_FILE")
  s.proc = assert(oops.proc.start {
    argv = argv,
    env = env,
    inherit_env = true, -- a tool: its servers get the caller's environment (sanitizer settings, ...)
    on_output = function(_, data)
      log:write(data)
      log:flush()
      if not s.started then
        head = (head .. data):sub(-4096)
        if head:find('msg="started:', 1, true) then
          s.started = true
          s.port = tonumber(head:match('msg="started:[^"]*listening on [%d.]+:(%d+)'))
          head = nil
        end
      end
    end,
    on_exit = function(r)
      log:close()
      s.exit = r
    end,
  })
  s.pid = s.proc:pid()
  local deadline = oops.now_ms() + START_MS
  while not s.started and not s.exit and oops.now_ms() < deadline do sleep(0.05) end
  if not s.started then return nil, files.read(o.log_path) or "" end
  return s
end

function M.stop(s, seconds)
  if not s.proc then return nil end
  if s.exit then return s.exit.status end
  s.proc:kill(15)
  local deadline = oops.now_ms() + (seconds or 20) * 1000
  while not s.exit and oops.now_ms() < deadline do sleep(0.05) end
  if s.exit then return s.exit.status end
  s.proc:kill(9)
  deadline = oops.now_ms() + 5000
  while not s.exit and oops.now_ms() < deadline do sleep(0.05) end
  return nil
end

return M
