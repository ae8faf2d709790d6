-- oops.policy: loads the operators' policy files into plain data.
--
--   local p, errs = policy.load_dir("policies", { cron_parse = oops.cron.parse })
--   local p, errs = policy.load_files({ "policies/oopsd.lua" }, opts)
--
-- Either the whole policy (defaults filled in) or nil and EVERY error of EVERY
-- file, each as "file:line: what: why", so an operator fixes them in one pass.
--
-- This file is the loader and the module's whole interface: the bounds on
-- policy code, reading the files, running each in its sandbox (sandbox.lua),
-- the checks that need every file, --simulate, and the errors' bounds. The
-- rest of the folder: values.lua (the value checks), keys.lua (the
-- language's names), defaults.lua, declare.lua (one declaration), and one
-- file per block family: engine.lua (scan, build, deploy, rollout, locks,
-- restarts, retention, gateway), alert.lua, notify.lua, application.lua,
-- release.lua (freezes, windows, concurrency, on_failure), canary.lua (a
-- rollout's strategy and steps, the analysis block, fill and plan).
local application = require("oops.policy.application")
local canary = require("oops.policy.canary")
local defaults = require("oops.policy.defaults")
local engine = require("oops.policy.engine")
local keys = require("oops.policy.keys")
local notify = require("oops.policy.notify")
local release = require("oops.policy.release")
local sandbox = require("oops.policy.sandbox")
local values = require("oops.policy.values")

local M = {}

-- A runaway file is stopped after this many VM instructions (a policy file
-- that declares things needs a few thousand).
M.INSTRUCTION_LIMIT = 10000000

-- The rest of the bounds on policy code (oops.sandbox.run, src/runtime/oops_sandbox.c):
-- memory the state may grow by while one file runs, the wall-clock time the
-- whole load may take (every file together: SIGHUP blocks the loop that
-- long at most), and the same for each call of a hook. A file is read only
-- if it is a regular file (after symlinks) of at most MAX_FILE_BYTES; a
-- directory holds at most MAX_FILES policy files.
M.MEMORY_LIMIT = 32 * 1024 * 1024
M.LOAD_TIME_MS = 1000
M.HOOK_LIMITS = { memory = 8 * 1024 * 1024, time_ms = 500, instructions = 10000000 }
M.MAX_FILE_BYTES = 1024 * 1024
M.MAX_FILES = 1000
-- Errors reported at most, each cut to at most this many bytes (they reach
-- logs and /healthz).
M.MAX_ERRORS = 50
M.MAX_ERROR_BYTES = 400

-- The rest of the interface, defined beside what it is about (the same
-- tables and functions).
M.MAX_NEW_LIMIT, M.PARALLEL_LIMIT = engine.MAX_NEW_LIMIT, engine.PARALLEL_LIMIT
M.MAX_FREEZE_DAYS, M.MAX_WINDOWS = release.MAX_FREEZE_DAYS, release.MAX_WINDOWS
M.NOTIFY_EVENTS = notify.NOTIFY_EVENTS
M.HOOKS, M.keys = keys.HOOKS, keys.keys
M.PLACEHOLDER = values.PLACEHOLDER
M.DEFAULTS, M.defaults, M.app_timeout_default = defaults.DEFAULTS, defaults.defaults, defaults.app_timeout_default
M.getenv = sandbox.getenv

local oops_module, run_file = sandbox.oops_module, sandbox.run_file
local check_exec, check_deploy_timeouts = application.check_exec, application.check_deploy_timeouts
local resolve_freezes, merge_notify = release.resolve_freezes, notify.merge_notify

-- A policy file's text: a regular file (after symlinks) of at most
-- MAX_FILE_BYTES, opened without blocking (a FIFO named zz.lua or a link to
-- /dev/zero is an error naming the file, never a hang).
local function read_file(path)
  local oops = oops_module()
  if oops then
    return oops.sandbox.read(path, M.MAX_FILE_BYTES)
  end
  local mode = require("lfs").attributes(path, "mode")
  if mode == nil then return nil, path .. ": No such file or directory" end
  if mode ~= "file" then return nil, path .. ": " .. mode .. ", not a regular file: only regular files are read" end
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local text, rerr = f:read(M.MAX_FILE_BYTES + 1)
  f:close()
  if text and #text > M.MAX_FILE_BYTES then return nil, path .. ": larger than " .. M.MAX_FILE_BYTES .. " bytes" end
  if not text and rerr then return nil, path .. ": " .. tostring(rerr) end
  return text or ""
end

----------------------------------------------------- once every file is loaded
-- Then come the checks that need the whole policy, each its block family's:
-- check_exec and check_deploy_timeouts (application.lua), resolve_freezes
-- (release.lua), merge_notify (notify.lua), check_analyses (canary.lua);
-- then --simulate.

-- --simulate URL (oopsctl chaos): the policy as written (applications,
-- timeouts, schedules, alert rules, hooks), but nothing real runs or hears
-- of it: the simulated gateway (its timings kept when the policy has it),
-- the simulated alert probe, and every notification a webhook to URL.
local function simulate(st, webhook)
  local p = st.policy
  local checked, why = values.url(webhook)
  if not checked then
    st.errors[#st.errors + 1] = "--simulate " .. why
    return
  end
  if p.gateway.kind ~= "simulated" then p.gateway = defaults.defaults().gateway end
  p.alert.probe = { kind = "simulated", scrape_interval_ms = defaults.D.scrape_interval }
  p.notify.routes = { { kind = "webhook", url = checked, format = "json" } }
  p.simulated = true
end

-- FNV-1a 64 over each file's name and text: equal policies, equal hashes.
local function version_hash(names, texts)
  local h = 0xcbf29ce484222325
  for i, name in ipairs(names) do
    local s = name .. "\0" .. texts[i] .. "\0"
    for j = 1, #s do h = (h ~ s:byte(j)) * 0x100000001b3 end
  end
  return string.format("%016x", h)
end

local function basename(path) return path:match("([^/]*)$") end

--------------------------------------------------------------- public API

-- The cron parser: injected, else the C binding, else none with opts.no_cron.
local function resolve_cron(opts)
  if opts.cron_parse ~= nil then
    if type(opts.cron_parse) ~= "function" then error("policy: opts.cron_parse must be a function", 3) end
    return opts.cron_parse
  end
  local oops = package.loaded["oops"]
  if oops == nil then
    local ok, mod = pcall(require, "oops")
    oops = ok and mod or nil
  end
  local cron = type(oops) == "table" and type(oops.cron) == "table" and oops.cron.parse
  if type(cron) == "function" then return cron end
  if opts.no_cron then return nil end
  error("policy: no cron parser (pass opts.cron_parse, load the oops module, or set opts.no_cron)", 3)
end

local function check_opts(opts)
  if opts ~= nil and type(opts) ~= "table" then error("policy: opts must be a table", 3) end
  opts = opts or {}
  local limit = opts.instruction_limit or M.INSTRUCTION_LIMIT
  if math.type(limit) ~= "integer" or limit < 1 then
    error("policy: opts.instruction_limit must be a positive integer", 3)
  end
  for _, k in ipairs({ "memory_limit", "time_ms" }) do
    if opts[k] ~= nil and (math.type(opts[k]) ~= "integer" or opts[k] < 1) then
      error("policy: opts." .. k .. " must be a positive integer", 3)
    end
  end
  return opts, limit
end

-- A parser that raises is reported like one that returns nil, err.
local function safe_cron(parse)
  if not parse then return nil end
  return function(expr)
    local ok, handle, why = pcall(parse, expr)
    if not ok then return nil, tostring(handle) end
    if handle == nil then return nil, tostring(why or "invalid cron expression") end
    return handle
  end
end

-- At most MAX_ERRORS errors of at most MAX_ERROR_BYTES each: an error a
-- policy raises itself may carry anything, and errors reach logs and /healthz.
local function bounded(errors)
  local out = {}
  for i, e in ipairs(errors) do
    if i > M.MAX_ERRORS then
      out[#out + 1] = ("... and %d more errors"):format(#errors - M.MAX_ERRORS)
      break
    end
    if #e > M.MAX_ERROR_BYTES then e = e:sub(1, M.MAX_ERROR_BYTES - 3) .. "..." end
    out[#out + 1] = e
  end
  return out
end

local function load_paths(paths, opts)
  local limit
  opts, limit = check_opts(opts)
  local cron = resolve_cron(opts)
  local oops = oops_module()
  local now = oops and oops.now_ms() or 0
  local st = {
    policy = defaults.defaults(), errors = {}, seen = {}, app_order = {}, notifies = {}, freeze_order = {},
    instruction_limit = limit,
    memory_limit = opts.memory_limit or M.MEMORY_LIMIT,
    time_ms = opts.time_ms or M.LOAD_TIME_MS,
    deadline = now + (opts.time_ms or M.LOAD_TIME_MS),
    cron_parse = safe_cron(cron),
  }
  local names, texts = {}, {}
  for _, path in ipairs(paths) do
    local text, err = read_file(path)
    if text then
      names[#names + 1], texts[#texts + 1] = basename(path), text
      run_file(st, path, text)
    else
      st.errors[#st.errors + 1] = err
    end
    st.policy.files[#st.policy.files + 1] = path
  end
  check_exec(st)
  check_deploy_timeouts(st)
  resolve_freezes(st)
  merge_notify(st)
  canary.check_analyses(st)
  if opts.simulate ~= nil then simulate(st, opts.simulate) end
  if #st.errors > 0 then return nil, bounded(st.errors) end
  st.policy.version_hash = version_hash(names, texts)
  return st.policy
end

-- Load the given files, in the given order.
function M.load_files(paths, opts)
  if type(paths) ~= "table" then error("policy.load_files: expects a list of paths", 2) end
  for i, p in ipairs(paths) do
    if type(p) ~= "string" then error("policy.load_files: path " .. i .. " is not a string", 2) end
  end
  return load_paths(paths, opts)
end

-- Names in dir, through lua-filesystem (a Debian package the daemon depends
-- on): never through a shell.
local function list_dir(dir)
  local lfs = require("lfs")
  local mode = lfs.attributes(dir, "mode")
  if mode ~= "directory" then return nil, dir .. ": " .. (mode and "not a directory" or "no such directory") end
  local names = {}
  for name in lfs.dir(dir) do names[#names + 1] = name end
  return names
end

-- Load every *.lua file in dir, sorted by name. Hidden files (editor
-- leftovers such as ".#apps.lua") are skipped.
function M.load_dir(dir, opts)
  if type(dir) ~= "string" then error("policy.load_dir: expects a directory path", 2) end
  local names, err = list_dir(dir)
  if not names then
    check_opts(opts)
    return nil, { err }
  end
  local paths = {}
  for _, name in ipairs(names) do
    if name:match("%.lua$") and not name:match("^%.") then paths[#paths + 1] = name end
  end
  if #paths == 0 then
    check_opts(opts)
    return nil, { dir .. ": no policy files (*.lua) in it" }
  end
  if #paths > M.MAX_FILES then
    check_opts(opts)
    return nil, { dir .. ": " .. #paths .. " policy files: at most " .. M.MAX_FILES }
  end
  table.sort(paths)
  local sep = dir:sub(-1) == "/" and "" or "/"
  for i, name in ipairs(paths) do paths[i] = dir .. sep .. name end
  return load_paths(paths, opts)
end

return M
