-- oops.policy.application: the application block: an application's name and
-- environments, its commands (build, one command or external; deploy,
-- health, restart) and their environment, restart schedules, limits and
-- command timeouts (its deploy windows and rollout choice: release.lua; its
-- promotions: promote.lua);
-- and what the whole policy asks of every application once all files are
-- loaded (the exec gateway's commands, deploy timeouts within deploy.timeout).
local duration = require("oops.duration")
local quantity = require("oops.quantity")
local D = require("oops.policy.defaults").D
local keys = require("oops.policy.keys")
local release = require("oops.policy.release")
local values = require("oops.policy.values")

local show = duration.show
local KEYS, APP_KEYS = keys.KEYS, keys.APP_KEYS
local PIPELINE_PLACEHOLDERS, BUILD_PLACEHOLDERS = keys.PIPELINE_PLACEHOLDERS, keys.BUILD_PLACEHOLDERS
local JOB_PLACEHOLDERS, RESTART_PLACEHOLDERS = keys.JOB_PLACEHOLDERS, keys.RESTART_PLACEHOLDERS
local WEIGHT_PLACEHOLDERS = keys.WEIGHT_PLACEHOLDERS
local sorted_keys, set_of, is_list, a_type = values.sorted_keys, values.set_of, values.is_list, values.a_type
local dur, positive, argv, is_label, environments = values.dur, values.positive, values.argv, values.is_label,
  values.environments
local app_windows, app_rollout, app_approvals = release.app_windows, release.app_rollout, release.app_approvals
local app_promote = require("oops.policy.promote").app_promote

local M = { build = {} }
local build = M.build

-- env = { KUBECONFIG = "/etc/oopsd/kube" }: added to the allow-listed
-- environment of the application's commands. OOPS_* names are the engine's
-- (the pipeline's own variables; never the database settings).
local function app_env(v)
  local like = 'must be a table of NAME = "value" like { KUBECONFIG = "/etc/oopsd/kube" }'
  if type(v) ~= "table" then return nil, like .. ", not " .. a_type(v) end
  local out, n = {}, 0
  for _, k in ipairs(sorted_keys(v)) do
    local val = v[k]
    n = n + 1
    if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") or #k > 128 then
      return nil, show(k) .. ": not a variable name (letters, digits and _, not starting with a digit)"
    end
    if k:upper():sub(1, 5) == "OOPS_" then
      return nil, show(k) .. ": OOPS_* names are the engine's own (the pipeline's variables)"
    end
    if type(val) ~= "string" then return nil, k .. ": must be a string, not " .. a_type(val) end
    if #val > 4096 or val:find("\0", 1, true) then
      return nil, k .. ": must be at most 4096 bytes, without NUL"
    end
    out[k] = val
  end
  if n > 64 then return nil, "at most 64 variables" end
  return out
end

-- restart = { prod = "0 3 * * *" } -> { prod = { cron = ..., expr = handle } }
local function app_restart(d, v, envs, cron_parse)
  local out = {}
  if v == nil then return out end
  if type(v) ~= "table" then
    d:fail("restart", 'must be a table like { prod = "0 3 * * *" }, not ' .. a_type(v))
    return out
  end
  local listed = set_of(envs or {})
  for _, env in ipairs(sorted_keys(v)) do
    local cron, path = v[env], "restart." .. tostring(env)
    if envs and not listed[env] then
      d:fail(path, show(env) .. " is not one of its environments (" .. table.concat(envs, ", ") .. ")")
    elseif type(cron) ~= "string" then
      d:fail(path, 'must be a cron string like "0 3 * * *", not ' .. a_type(cron))
    elseif not cron_parse then -- opts.no_cron: kept as written, unchecked
      out[env] = { cron = cron }
    else
      local expr, why = cron_parse(cron)
      if expr == nil then
        d:fail(path, show(cron) .. ": " .. why)
      else
        out[env] = { cron = cron, expr = expr }
      end
    end
  end
  return out
end

local function app_limits(d, t)
  local l = d:sub(t, "limits", KEYS["application.limits"])
  return {
    cpu_millicores = d:field(l, "cpu", positive(quantity.cpu), nil, "limits.cpu"),
    memory_bytes = d:field(l, "memory", positive(quantity.memory), nil, "limits.memory"),
  }
end

local function app_timeouts(d, t)
  local names = KEYS["application.timeouts"]
  local tt = d:sub(t, "timeouts", names)
  local out = {}
  for _, name in ipairs(names) do
    out[name] = d:field(tt, name, dur(1), D.app_timeouts[name], "timeouts." .. name)
  end
  return out, tt.deploy ~= nil, tt.build ~= nil
end

-- build = { "make", "image" } (one command: a child process of the server
-- that drives the pipeline) or build = { submit = {...}, status = {...},
-- cancel = {...} } (an external build any server can poll; exec/external_builds.lua).
local function app_build(d, t)
  local v = t.build
  if v == nil then return nil end
  if type(v) == "table" and not is_list(v) then
    local b = d:sub(t, "build", KEYS["application.build"])
    local out = { external = true }
    for _, cmd in ipairs({ "submit", "status", "cancel" }) do
      if b[cmd] == nil then
        d:fail("build." .. cmd, "required in an external build (build = { submit = {...}, status = {...}, " ..
          "cancel = {...} })")
      end
      out[cmd] = d:field(b, cmd, argv(cmd == "submit" and BUILD_PLACEHOLDERS or JOB_PLACEHOLDERS), nil,
        "build." .. cmd)
    end
    return out
  end
  return d:field(t, "build", argv(BUILD_PLACEHOLDERS), nil)
end

function build.application(d, t, name, st)
  local ns, app = name:match("^(.-)/(.*)$")
  d:only(nil, t, APP_KEYS)
  local a = { namespace = ns, application = app }
  if t.environments == nil then
    d:fail("environments", 'required, like environments = { "staging", "prod" }')
  end
  local before = d.failed
  a.environments = d:field(t, "environments", environments, {})
  local envs_ok = t.environments ~= nil and d.failed == before
  a.build = app_build(d, t)
  a.deploy = d:field(t, "deploy", argv(PIPELINE_PLACEHOLDERS), nil)
  a.health = d:field(t, "health", argv(PIPELINE_PLACEHOLDERS), nil)
  a.weight = d:field(t, "weight", argv(WEIGHT_PLACEHOLDERS), nil)
  a.restart_cmd = d:field(t, "restart_command", argv(RESTART_PLACEHOLDERS), nil)
  a.env = d:field(t, "env", app_env, {})
  a.restart = app_restart(d, t.restart, envs_ok and a.environments or nil, st.cron_parse)
  a.windows = app_windows(d, t.windows, envs_ok and a.environments or nil)
  a.approvals = app_approvals(d, t.approvals, envs_ok and a.environments or nil)
  a.promote = app_promote(d, t.promote, envs_ok and a.environments or nil)
  a.rollout = app_rollout(d, t, st)
  a.limits = app_limits(d, t)
  a.timeout_ms, a.deploy_timeout_set, a.build_timeout_set = app_timeouts(d, t)
  return a
end

-- 'application "Shop/API"' is refused before its body is looked at.
local function bad_app_name(name)
  local ns, app = name:match("^([^/]*)/([^/]*)$")
  if not (ns and is_label(ns) and is_label(app)) then
    return 'name must be "namespace/application", each part lowercase letters, digits and "-" (like "shop/api")'
  end
end

-- What the exec gateway needs from every application.
local function check_exec(st)
  if st.policy.gateway.kind ~= "exec" then return end
  for _, entry in ipairs(st.app_order) do
    local a = st.policy.applications[entry.name]
    for _, key in ipairs({ "build", "deploy", "health" }) do
      if not a[key] then entry.decl:fail(key, 'required by gateway "exec"') end
    end
    if next(a.restart) and not a.restart_cmd then
      entry.decl:fail("restart_command", 'required by gateway "exec" for restart schedules')
    end
    local r = a.rollout and a.rollout.strategy and a.rollout or st.policy.rollout
    if r.strategy ~= "all" and not a.weight then
      entry.decl:fail("weight", 'required by gateway "exec" for a "' .. r.strategy .. '" rollout (it sets ' ..
        "the new release's share of traffic)")
    end
  end
end

-- A deploy command must give up before the pipeline's deploy timeout, or
-- the pipeline fails while the command still runs.
local function check_deploy_timeouts(st)
  local limit = st.policy.deploy.timeout_ms
  for _, entry in ipairs(st.app_order) do
    local a = st.policy.applications[entry.name]
    if not a.deploy_timeout_set then
      a.timeout_ms.deploy = math.min(a.timeout_ms.deploy, limit)
    elseif a.timeout_ms.deploy > limit then
      entry.decl:fail("timeouts.deploy", duration.format(a.timeout_ms.deploy) .. " is longer than deploy.timeout "
        .. duration.format(limit) .. " (the pipeline would fail first)")
    end
    a.deploy_timeout_set = nil
    -- A one-command build runs as long as the pipeline may build.
    if not a.build_timeout_set then a.timeout_ms.build = st.policy.build.timeout_ms end
    a.build_timeout_set = nil
  end
end

M.bad_app_name, M.check_exec, M.check_deploy_timeouts = bad_app_name, check_exec, check_deploy_timeouts

return M
