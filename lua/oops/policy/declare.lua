-- oops.policy.declare: one declaration, checked and stored into the policy
-- being built: where it was written and how messages name it (Decl, which
-- the block families' builders check fields through), which family builds
-- each kind, and the kinds that may appear once.
local show = require("oops.duration").show
local values = require("oops.policy.values")
local alert = require("oops.policy.alert")
local application = require("oops.policy.application")
local canary = require("oops.policy.canary")
local engine = require("oops.policy.engine")
local notify = require("oops.policy.notify")
local release = require("oops.policy.release")

local sorted_keys, set_of, a_type, is_label = values.sorted_keys, values.set_of, values.a_type, values.is_label
local bad_app_name = application.bad_app_name

local M = {}

-- Shown when a declaration is written the wrong way round.
M.EXAMPLES = {
  scan = 'scan { interval = "5s" }',
  build = 'build { timeout = "2h" }',
  deploy = 'deploy { timeout = "10m", timezone = "Europe/Paris" }',
  rollout = 'rollout { timeout = "5m" }',
  locks = 'locks { validate_every = "30s" }',
  restarts = 'restarts { timezone = "Europe/Paris", grace = "2m" }',
  alert = 'alert { cpu = { percent = 95, sustained = "10m" } }',
  retention = 'retention { pipelines = "180d", logs = "30d" }',
  notify = 'notify { webhook = "http://127.0.0.1:9000/hook" }',
  gateway = 'gateway "simulated" { build = "2s" }',
  application = 'application "shop/api" { environments = { "prod" } }',
  freeze = 'freeze "year-end" { from = "2026-12-20 00:00", to = "2027-01-04 08:00" }',
  analysis = 'analysis "errors" { prometheus = "http://127.0.0.1:9090", query = "...", success = function(v) ' ..
    "return v < 0.01 end }",
}
local EXAMPLES = M.EXAMPLES

---------------------------------------------------------------- declarations
-- A declaration being checked: where it was written and how messages name
-- it: unnamed ones as "scan.interval", named ones as 'application "x": build'.

local Decl = {}
Decl.__index = Decl

local function new_decl(st, where, kind, name)
  local label = name and (kind .. " " .. show(name)) or kind
  return setmetatable({ st = st, where = where, label = label, sep = name and ": " or "." }, Decl)
end

function Decl:what(path)
  if not path then return self.label end
  return self.label .. self.sep .. path
end

function Decl:fail(path, why)
  self.st.errors[#self.st.errors + 1] = self.where .. ": " .. self:what(path) .. ": " .. why
  self.failed = true
end

-- Report every key of `t` that is not in `known` (a sorted list).
function Decl:only(path, t, known)
  local ok = set_of(known)
  for _, k in ipairs(sorted_keys(t)) do
    if not ok[k] then
      self:fail(path, "unknown key " .. show(k) .. " (known: " .. table.concat(known, ", ") .. ")")
    end
  end
end

-- Check t[key] with `check`; the default when absent or wrong.
function Decl:field(t, key, check, default, path)
  local v = t[key]
  if v == nil then return default end
  local out, why = check(v)
  if out == nil then
    self:fail(path or key, why)
    return default
  end
  return out
end

-- A nested table such as alert.cpu: its keys checked, {} when absent.
function Decl:sub(t, key, known)
  local v = t[key]
  if v == nil then return {} end
  if type(v) ~= "table" then
    self:fail(key, "must be a table with keys " .. table.concat(known, ", ") .. ", not " .. a_type(v))
    return {}
  end
  self:only(key, v, known)
  return v
end

-- Each builder checks one declaration's body and returns what the policy
-- stores for it; each block family's file holds its kinds' builders.
local build = {}
for _, family in ipairs({ engine, alert, notify, application, release, canary }) do
  for kind, builder in pairs(family.build) do
    assert(build[kind] == nil, kind .. ": built by two block families")
    build[kind] = builder
  end
end

---------------------------------------------------------- into the policy

-- Declarations that may appear once in the whole policy, keyed by kind
-- (applications are keyed by their name instead; notify may repeat).
local SINGLE = { scan = true, build = true, deploy = true, rollout = true, locks = true, restarts = true,
  alert = true, gateway = true, retention = true }

-- Store a checked declaration into the policy being built.
local function store(st, d, kind, name, value)
  local p = st.policy
  if kind == "application" then
    p.applications[name] = value
    p.sources.applications[name] = d.where
    st.app_order[#st.app_order + 1] = { name = name, decl = d }
  elseif kind == "analysis" then
    p.analyses[name] = value
  elseif kind == "freeze" then
    st.freeze_order[#st.freeze_order + 1] = { freeze = value, decl = d }
  elseif kind == "notify" then
    p.sources.notify[#p.sources.notify + 1] = d.where
    st.notifies[#st.notifies + 1] = value
  else
    p[kind] = value
    p.sources[kind] = d.where
  end
end

-- Check and store one declaration written at `where`.
local function declare(st, where, kind, name, body)
  local d = new_decl(st, where, kind, name)
  if type(body) ~= "table" then
    return d:fail(nil, "expects a table, like " .. EXAMPLES[kind])
  end
  if kind == "application" then
    local why = bad_app_name(name)
    if why then return d:fail(nil, why) end
  end
  if kind == "freeze" and not is_label(name) then
    return d:fail(nil, 'name must be lowercase letters, digits and "-" (like "year-end")')
  end
  local key = SINGLE[kind] and kind or ((kind == "application" or kind == "freeze" or kind == "analysis") and d.label)
  if key then
    if st.seen[key] then return d:fail(nil, "already declared at " .. st.seen[key]) end
    st.seen[key] = where
  end
  local value = build[kind](d, body, name, st)
  if value ~= nil then store(st, d, kind, name, value) end
end

M.declare = declare

return M
