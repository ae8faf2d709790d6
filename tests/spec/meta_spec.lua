-- lua/oops/meta.lua documents exactly what the binary registers (STYLE.md,
-- habit 9): every function of the `oops` module and every method of its
-- userdata, no more and no less, each with its annotations. Run through the
-- real binary (`oopsd lua busted ...`): the module compared is the one the C
-- core builds, not a copy.
local oops = require("oops")

local ROOT = debug.getinfo(1, "S").source:sub(2):match("^(.-)tests/spec/[^/]*$") or ""
local META = ROOT .. "lua/oops/meta.lua"

-- Functions under t as path → function ("db.exec", "log"), walking subtables.
local function functions_of(t, prefix, out, seen)
  out, seen = out or {}, seen or {}
  if seen[t] then return out end
  seen[t] = true
  for k, v in pairs(t) do
    if type(k) == "string" then
      local path = prefix and (prefix .. "." .. k) or k
      if type(v) == "function" then
        out[path] = v
      elseif type(v) == "table" then
        functions_of(v, path, out, seen)
      end
    end
  end
  return out
end

-- Methods of the userdata the binary defines: the metatables it registered
-- under "oops.*" (luaL_newmetatable), as "oops.cron:matches".
local function registered_methods()
  local out = {}
  for name, mt in pairs(debug.getregistry()) do
    if type(name) == "string" and name:match("^oops%.") and type(mt) == "table"
        and type(mt.__index) == "table" then
      for k, v in pairs(mt.__index) do
        if type(v) == "function" then out[name .. ":" .. k] = v end
      end
    end
  end
  return out
end

-- meta.lua run in an environment that refuses every global: it must build
-- its tables without touching anything.
local function load_meta()
  local env = setmetatable({}, {
    __index = function(_, k) error("meta.lua reads the global " .. tostring(k), 2) end,
    __newindex = function(_, k) error("meta.lua sets the global " .. tostring(k), 2) end,
  })
  local chunk = assert(loadfile(META, "t", env))
  local stubs, classes = chunk()
  assert(type(stubs) == "table", "meta.lua must return the oops table")
  assert(type(classes) == "table", "meta.lua must return its userdata classes second")
  local fns = functions_of(stubs)
  for mtname, class in pairs(classes) do
    for k, v in pairs(class) do
      if type(v) == "function" then fns[mtname .. ":" .. k] = v end
    end
  end
  return fns, stubs
end

local function keys_missing(want, have)
  local missing = {}
  for k in pairs(want) do
    if have[k] == nil then missing[#missing + 1] = k end
  end
  table.sort(missing)
  return missing
end

local function lines_of(path)
  local lines = {}
  for l in io.lines(path) do lines[#lines + 1] = l end
  return lines
end

-- The contiguous block of "---" lines right above line n.
local function doc_block(lines, n)
  local block = {}
  local i = n - 1
  while i >= 1 and lines[i]:match("^%-%-%-") do
    table.insert(block, 1, lines[i])
    i = i - 1
  end
  return block
end

local function params_of(fn)
  local names = {}
  local info = debug.getinfo(fn, "u")
  for i = 1, info.nparams do
    local n = debug.getlocal(fn, i)
    if n ~= "self" then names[#names + 1] = n end
  end
  if info.isvararg then names[#names + 1] = "..." end
  return names
end

describe("lua/oops/meta.lua", function()
  local binary, stubs, meta

  setup(function()
    binary = functions_of(oops)
    for k, v in pairs(registered_methods()) do binary[k] = v end
    stubs, meta = load_meta()
  end)

  it("finds the functions the binary registers (sanity of the walk)", function()
    for _, path in ipairs({ "log", "wait", "db.exec", "store.transition", "locks.acquire",
                            "cron.parse", "proc.run", "http.request", "metrics.inc",
                            "oops.cron:matches", "oops.proc:kill" }) do
      assert.is_function(binary[path], path)
    end
  end)

  it("loads without touching a global and returns stubs", function()
    assert.is_function(stubs["db.exec"])
  end)

  it("describes every function the binary registers", function()
    local missing = keys_missing(binary, stubs)
    assert(#missing == 0, "registered by the binary but not described in lua/oops/meta.lua: "
      .. table.concat(missing, ", "))
  end)

  it("describes no function the binary does not have", function()
    local extra = keys_missing(stubs, binary)
    assert(#extra == 0, "described in lua/oops/meta.lua but not registered by the binary: "
      .. table.concat(extra, ", "))
  end)

  it("annotates every stub: a description, ---@ lines, a ---@param per parameter", function()
    local lines = lines_of(META)
    local problems = {}
    local defined = {}
    for path, fn in pairs(stubs) do
      local n = debug.getinfo(fn, "S").linedefined
      defined[n] = true
      local block = doc_block(lines, n)
      local annotated, described, documented = false, false, {}
      for _, l in ipairs(block) do
        if l:match("^%-%-%-@") then annotated = true end
        if l:match("^%-%-%-%s+%S") then described = true end
        local p = l:match("^%-%-%-@param%s+([%w_%.]+)")
        if p then documented[p] = true end
      end
      if not annotated then problems[#problems + 1] = path .. ": no ---@ annotation above line " .. n end
      if not described then problems[#problems + 1] = path .. ": no description above line " .. n end
      local actual = {}
      for _, p in ipairs(params_of(fn)) do
        actual[p] = true
        if not documented[p] then problems[#problems + 1] = path .. ": parameter " .. p .. " has no ---@param" end
      end
      for p in pairs(documented) do
        if not actual[p] then problems[#problems + 1] = path .. ": ---@param " .. p .. " is not a parameter" end
      end
    end
    -- Every `function ...` written in the text is one of the stubs compared
    -- above (none hidden in a table the walk does not reach).
    for i, l in ipairs(lines) do
      local name = l:match("^%s*function%s+([%w_%.:]+)%s*%(")
      if name and not defined[i] then
        problems[#problems + 1] = "line " .. i .. ": function " .. name
          .. " is not reachable from what meta.lua returns"
      end
    end
    table.sort(problems)
    assert(#problems == 0, "\n  " .. table.concat(problems, "\n  "))
  end)

  -- The error names (src/error_names.h): the binary's oops.error_names, the
  -- ---@alias oops.ErrorName lines and meta.lua's oops.error_names are the
  -- same list, in the same order.
  it("lists the error names the binary has, as oops.ErrorName and oops.error_names", function()
    assert.is_table(oops.error_names)
    assert.is_true(#oops.error_names > 0)
    local alias, inside = {}, false
    for _, l in ipairs(lines_of(META)) do
      if l:match("^%-%-%-@alias oops%.ErrorName%s*$") then
        inside = true
      elseif inside then
        local name = l:match('^%-%-%-| "([%w_]+)"%s+#%s*%S')
        if not name then break end
        alias[#alias + 1] = name
      end
    end
    assert.are.same(oops.error_names, alias)
    assert.are.same(oops.error_names, meta.error_names)
    for _, name in ipairs(oops.error_names) do
      assert.truthy(name:match("^[a-z_]+$"), name)
    end
  end)

  -- The lock names (src/lock_names.h) as meta.lua documents them.
  it("documents oops.locks.names as the binary has them", function()
    assert.are.same(oops.locks.names, meta.locks.names)
  end)
end)
