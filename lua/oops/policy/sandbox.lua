-- oops.policy.sandbox: one policy file run in its own sandbox: reads see
-- only the policy language and a safe part of the standard library, unknown
-- names are errors, the only globals a file may assign are the hooks, and a
-- file that runs too long is stopped. The declaration functions live out
-- here, so they may use `debug` to find the line each declaration was
-- written on.
local show = require("oops.duration").show
local decl = require("oops.policy.declare")
local keys = require("oops.policy.keys")
local a_type = require("oops.policy.values").a_type

local declare, EXAMPLES = decl.declare, decl.EXAMPLES

local M = {}

-- The hooks (policy.HOOKS): the globals a file may assign.
local HOOK_SET = {}
for _, h in ipairs(keys.HOOKS) do HOOK_SET[h] = true end

local File = {}
File.__index = File

-- "path:line" of the innermost frame running this file's code, so a
-- declaration reports its own line even when called through a helper.
function File:at()
  for level = 1, 200 do
    local info = debug.getinfo(level, "Sl")
    if not info then break end
    if info.source == self.source then return self.path .. ":" .. info.currentline end
  end
  return self.path
end

function File:error(msg)
  self.st.errors[#self.st.errors + 1] = msg
end

-- Declaring from a hook, once the policy is loaded, is a mistake.
function File:check_open(kind)
  if self.closed then
    error(self:at() .. ": " .. kind .. ": declarations are only allowed while the policy loads", 0)
  end
end

-- The policy language a file sees, as closures bound to this file.
function File:language()
  local lang = {}
  for _, kind in ipairs({ "scan", "build", "deploy", "rollout", "locks", "restarts", "alert", "notify",
    "retention" }) do
    lang[kind] = function(body)
      self:check_open(kind)
      declare(self.st, self:at(), kind, nil, body)
    end
  end
  for _, kind in ipairs({ "gateway", "application", "freeze", "analysis" }) do
    lang[kind] = function(name) return self:named(kind, name) end
  end
  return lang
end

-- `application "x"` returns the function that takes the body; until it is
-- called the declaration is pending, so a forgotten body is reported.
function File:named(kind, name)
  self:check_open(kind)
  local where = self:at()
  if type(name) ~= "string" then
    self:error(where .. ": " .. kind .. ": expects a name and a table, like " .. EXAMPLES[kind])
    return function() end
  end
  local pending = { where = where, label = kind .. " " .. show(name) }
  self.pending[#self.pending + 1] = pending
  return function(body)
    self:check_open(kind)
    pending.done = true
    declare(self.st, where, kind, name, body)
  end
end

-- A hook assignment: a function, once across all files.
function File:set_hook(at, name, fn)
  local st = self.st
  if type(fn) ~= "function" then
    return self:error(at .. ": " .. name .. ": must be a function, not " .. a_type(fn))
  end
  local prev = st.policy.sources.hooks[name]
  if prev then return self:error(at .. ": " .. name .. ": already defined at " .. prev) end
  st.policy.hooks[name] = fn
  st.policy.sources.hooks[name] = at
  self.hooks[name] = fn
end

local function copy(t, skip)
  local c = {}
  for k, v in pairs(t) do
    if not (skip and skip[k]) then c[k] = v end
  end
  return c
end

-- os.getenv for policies: the database settings (OOPS_DB, OOPS_DB_PASSWORD,
-- any OOPS_DB*) are refused, whatever the case; anything else as usual.
function M.getenv(name)
  if type(name) ~= "string" then error("os.getenv: expects a variable name", 2) end
  if name:upper():sub(1, 7) == "OOPS_DB" then
    error("os.getenv: " .. name:sub(1, 40) .. ": the database settings are not readable by policies", 2)
  end
  return os.getenv(name)
end

-- The safe standard library. Library tables are copies, so a file that
-- scribbles on `string` changes nothing outside its own sandbox.
local function stdlib()
  return {
    string = copy(string, { dump = true }),
    table = copy(table),
    math = copy(math, { randomseed = true }),
    utf8 = copy(utf8),
    os = { getenv = M.getenv, time = os.time, date = os.date },
    pairs = pairs, ipairs = ipairs, next = next, select = select,
    tostring = tostring, tonumber = tonumber, type = type,
    assert = assert, error = error, pcall = pcall,
  }
end

-- The file's _ENV: an empty table whose metatable serves the allowed names
-- and hooks, refuses the rest, and stores hook assignments.
function File:environment()
  local names = stdlib()
  for k, v in pairs(self:language()) do names[k] = v end
  local hook_list = table.concat(keys.HOOKS, ", ")
  return setmetatable({}, {
    __metatable = false,
    __index = function(_, k)
      if names[k] ~= nil then return names[k] end
      if HOOK_SET[k] then return self.hooks[k] end
      error(self:at() .. ": unknown name " .. show(k), 0)
    end,
    __newindex = function(_, k, v)
      local at = self:at()
      if self.closed then error(at .. ": policy globals cannot change after loading", 0) end
      if HOOK_SET[k] then return self:set_hook(at, k, v) end
      if names[k] ~= nil then
        return self:error(at .. ": cannot assign to " .. show(k) .. " (it is part of the policy language)")
      end
      self:error(at .. ": assignment to unknown global " .. show(k) .. " (hooks: " .. hook_list .. ")")
    end,
  })
end

local function new_file(st, path)
  local f = setmetatable({ st = st, path = path, source = "@" .. path, hooks = {}, pending = {} }, File)
  f.env = f:environment()
  return f
end

-- Lua shortens long chunk names ("...cies/apps.lua:3: ..."); give messages
-- the path as the caller wrote it, and a position-less message its file.
local function with_path(msg, path)
  if type(msg) ~= "string" then return path .. ": error object is " .. a_type(msg) end
  if msg:sub(1, #path + 1) == path .. ":" then return msg end
  local short, rest = msg:match("^%.%.%.(.-)(:%d+:.*)$")
  if short and path:sub(-#short) == short then return path .. rest end
  return path .. ": " .. msg
end

-- The oops module when this runs inside oopsd (oopsd, --check, oopsd lua),
-- else nil (plain Lua: the loader still works, with an instruction hook only).
local function oops_module()
  local oops = package.loaded["oops"]
  if oops == nil then
    local ok, mod = pcall(require, "oops")
    oops = ok and mod or nil
  end
  if type(oops) == "table" and oops.sandbox then return oops end
  return nil
end

-- Stop the coroutine after `limit` instructions, and keep stopping it: a
-- file's own pcall may catch the first error, never the next instruction's.
local function arm_limit(co, limit, f)
  local msg = f.path .. ": runaway: more than " .. limit .. " instructions"
  debug.sethook(co, function()
    f.runaway = msg
    debug.sethook(co, function() error(msg, 0) end, "", 1)
    error(msg, 0)
  end, "", limit)
end

-- Run one file in its sandbox; its declarations land in st. With the oops
-- module, under oops.sandbox.run (memory, the load's deadline, instructions,
-- also inside Lua's pattern functions); without it (plain Lua), under an
-- instruction hook only.
local function run_file(st, path, text)
  local f = new_file(st, path)
  if text:sub(1, 1) == "#" then text = "--" .. text end -- a #! line, as lua(1) allows
  local chunk, err = load(text, f.source, "t", f.env)
  if not chunk then return f:error(with_path(err, path)) end
  local oops = oops_module()
  if oops then
    local left = math.max(1, st.deadline - oops.now_ms())
    local ok, msg, kind = oops.sandbox.run(chunk,
      { memory = st.memory_limit, time_ms = left, instructions = st.instruction_limit })
    if not ok then
      if kind == "error" then
        f:error(with_path(msg, path))
      elseif kind == "time" then
        f:error(path .. ": still running when the policy load's time limit (" .. st.time_ms .. " ms) ran out")
      else
        f:error(path .. ": " .. msg)
      end
    end
  else
    local co = coroutine.create(chunk)
    arm_limit(co, st.instruction_limit, f)
    local ok, rerr = coroutine.resume(co)
    debug.sethook(co)
    if f.runaway then
      f:error(f.runaway)
    elseif not ok then
      f:error(with_path(rerr, path))
    end
  end
  for _, p in ipairs(f.pending) do
    if not p.done then f:error(p.where .. ": " .. p.label .. ": missing { ... } after the name") end
  end
  f.closed = true
end

M.oops_module, M.run_file = oops_module, run_file

return M
