-- oops.policy.release: release safety as the policy states it (issue 26):
-- the freeze block, an application's deploy windows, deploy.concurrency and
-- what a failed rollout does (rollout.on_failure, an application's own
-- rollout); freezes placed on deploy.timezone's clock once every file is
-- loaded. oops.release and oops.windows apply them.
local show = require("oops.duration").show
local canary = require("oops.policy.canary")
local windows = require("oops.windows")
local KEYS = require("oops.policy.keys").KEYS
local values = require("oops.policy.values")

local sorted_keys, set_of, is_list, a_type = values.sorted_keys, values.set_of, values.is_list, values.a_type
local whole, is_label, environments = values.whole, values.is_label, values.environments

local M = { build = {} }
local build = M.build

-- A freeze lasts at most this long; windows per application and environment.
M.MAX_FREEZE_DAYS = 400
M.MAX_WINDOWS = 32

-- concurrency = { prod = 2 }: environment -> the most of its pipelines
-- deploying at once.
local function deploy_concurrency(d, v)
  local out = {}
  if v == nil then return out end
  if type(v) ~= "table" then
    d:fail("concurrency", "must be a table like { prod = 2 }, not " .. a_type(v))
    return out
  end
  for _, env in ipairs(sorted_keys(v)) do
    if not is_label(env) then
      d:fail("concurrency", show(env) .. ': not an environment name (lowercase letters, digits and "-", like "prod")')
    else
      out[env] = d:field(v, env, whole(1, 100), nil, "concurrency." .. env)
    end
  end
  return out
end

-- What a failed rollout does: "fail" (the pipeline fails) or "rollback".
local function on_failure(v)
  if v ~= "fail" and v ~= "rollback" then return nil, show(v) .. ': must be "fail" or "rollback"' end
  return v
end

-- windows = { prod = { "Mon-Fri 09:00-17:00", ... } } -> { prod = { spec, ... } }
-- (oops.windows.parse_window), each environment one of its environments.
local function app_windows(d, v, envs)
  local out = {}
  if v == nil then return out end
  local like = 'must be a table like { prod = { "Mon-Fri 09:00-17:00" } }'
  if type(v) ~= "table" or #v > 0 then
    d:fail("windows", like .. (type(v) ~= "table" and (", not " .. a_type(v)) or " (keyed by environment)"))
    return out
  end
  local listed = set_of(envs or {})
  for _, env in ipairs(sorted_keys(v)) do
    local list, path = v[env], "windows." .. tostring(env)
    if envs and not listed[env] then
      d:fail(path, show(env) .. " is not one of its environments (" .. table.concat(envs, ", ") .. ")")
    elseif type(list) ~= "table" or not is_list(list) or #list == 0 then
      d:fail(path, 'must be a non-empty list of windows like { "Mon-Fri 09:00-17:00", "Sat 10:00-12:00" }')
    elseif #list > M.MAX_WINDOWS then
      d:fail(path, #list .. " windows: at most " .. M.MAX_WINDOWS)
    else
      local specs = {}
      for i, text in ipairs(list) do
        local spec, why = windows.parse_window(text)
        if spec then specs[#specs + 1] = spec else d:fail(path .. "[" .. i .. "]", why) end
      end
      if #specs == #list then out[env] = specs end
    end
  end
  return out
end

-- approvals = { prod = 2 } (issue 39): how many persons other than its
-- creator must approve a release to that environment before its deploy
-- (1 to M.MAX_APPROVALS); {} when none is asked.
M.MAX_APPROVALS = 9 -- PIPELINE_APPROVALS_MAX (src/pipeline.h): what a pipeline records
local function app_approvals(d, v, envs)
  local out = {}
  if v == nil then return out end
  if type(v) ~= "table" or #v > 0 then
    d:fail("approvals", "must be a table like { prod = 2 }" ..
      (type(v) ~= "table" and (", not " .. a_type(v)) or " (keyed by environment)"))
    return out
  end
  local listed = set_of(envs or {})
  for _, env in ipairs(sorted_keys(v)) do
    local n, path = v[env], "approvals." .. tostring(env)
    if envs and not listed[env] then
      d:fail(path, show(env) .. " is not one of its environments (" .. table.concat(envs, ", ") .. ")")
    elseif math.type(n) ~= "integer" or n < 1 or n > M.MAX_APPROVALS then
      d:fail(path, "must be a whole number of persons from 1 to " .. M.MAX_APPROVALS .. ", not " .. show(n))
    else
      out[env] = n
    end
  end
  return out
end

-- rollout = { on_failure = "rollback", strategy = "canary", steps = {...} }:
-- this application's own choices (on_failure nil: rollout.on_failure; no
-- strategy: the rollout declaration's plan); nil when it makes none.
local function app_rollout(d, t, st)
  if t.rollout == nil then return nil end
  local r = d:sub(t, "rollout", KEYS["application.rollout"])
  local v = d:field(r, "on_failure", on_failure, nil, "rollout.on_failure")
  local strategy, steps = canary.rollout_plan(d, r, "rollout.", st, nil)
  if not (v or strategy) then return nil end
  return { on_failure = v, strategy = strategy, steps = steps }
end

-- freeze "NAME" { from = "YYYY-MM-DD HH:MM", to = ..., environments = {...} }:
-- checked here; its epochs come once every file is loaded (resolve_freezes),
-- since deploy.timezone may be declared in a later file.
function build.freeze(d, t, name)
  d:only(nil, t, KEYS.freeze)
  local f = { name = name, where = d.where }
  for _, key in ipairs({ "from", "to" }) do
    if t[key] == nil then
      d:fail(key, key == "to" and 'required (a freeze that never ends is an error), like to = "2027-01-04 08:00"'
        or 'required, like from = "2026-12-20 00:00"')
    end
    f[key .. "_local"] = d:field(t, key, windows.parse_local, nil)
    f[key .. "_text"] = f[key .. "_local"] and t[key]
  end
  local envs = d:field(t, "environments", environments, nil)
  f.environments = envs and set_of(envs) or nil
  if not (f.from_local and f.to_local) then return nil end
  return f
end

-- A freeze's local times as epochs in deploy.timezone: from at its earliest
-- occurrence and to at its latest (an hour that occurs twice is frozen
-- whole; a time in a spring-forward gap is the gap's end). to must come
-- after from, at most MAX_FREEZE_DAYS later. pol.freezes sorted by from.
local function resolve_freezes(st)
  local tz = st.policy.deploy.timezone
  local out = {}
  for _, entry in ipairs(st.freeze_order) do
    local f, d = entry.freeze, entry.decl
    local from = windows.epochs(f.from_local, tz)
    local _, to = windows.epochs(f.to_local, tz)
    if not (from and to) then
      d:fail(nil, "cannot place " .. show(f.from_text) .. " or " .. show(f.to_text) .. " in " .. show(tz))
    elseif to <= from then
      -- Written in order, yet not after: both in one spring-forward gap.
      local why = f.to_text > f.from_text and " (in " .. tz .. " the clocks skip from one to the other)" or ""
      d:fail("to", show(f.to_text) .. " is not after from " .. show(f.from_text) .. why)
    elseif to - from > M.MAX_FREEZE_DAYS * 86400 then
      d:fail("to", show(f.to_text) .. " is more than " .. M.MAX_FREEZE_DAYS .. " days after from "
        .. show(f.from_text))
    else
      out[#out + 1] = { name = f.name, from = from, to = to, from_text = f.from_text, to_text = f.to_text,
        environments = f.environments, where = f.where }
    end
  end
  table.sort(out, function(a, b)
    if a.from ~= b.from then return a.from < b.from end
    return a.name < b.name
  end)
  st.policy.freezes = out
end

M.concurrency, M.on_failure, M.app_windows, M.app_rollout = deploy_concurrency, on_failure, app_windows, app_rollout
M.app_approvals = app_approvals
M.resolve_freezes = resolve_freezes

return M
