-- An application of the policy as the exec gateway's methods read it: the
-- application found by name, each step's timeout, the directory its
-- commands run in and the environment they get.
--
-- Working directory: the gateway's `workdir` when set (a relative one is
-- taken from the policy directory), else the policy directory (the directory
-- of the policy files), else oops.policy_dir, else oopsd's own. So "./build.sh"
-- in a policy means the script next to the policy files.
--
-- Environment: what a command gets is stated once, in AGENTS.md ("The
-- environment a child process gets"; for operators oopsd.policy(5), COMMANDS'
-- ENVIRONMENT). This gateway passes the application's `env` and the OOPS_*
-- pipeline variables (env_for below) on top of oops.proc's allow-list.
local oops = require("oops")
local policy_defaults = require("oops.policy")

local M = {}

-- The application's config from the policy, or nil, err. The error (a
-- caller's mistake) is raised at the scan that called the gateway: every
-- caller of app_of is a method the interface calls directly (or one it
-- tail-calls), so that scan is level 3.
local function app_of(policy, app)
  if type(app) ~= "string" then error("exec gateway: the application must be \"ns/name\"", 3) end
  local a = policy.applications and policy.applications[app]
  if not a then return nil, "application " .. tostring(app) .. " is not in the policy" end
  return a
end

-- Pipeline p's application, "ns/name".
local function app_name(p) return p.app or (p.namespace .. "/" .. p.application) end

local function timeout_of(a, step)
  -- The loader fills every step's timeout; the default is for a bare table.
  return (a.timeout_ms and a.timeout_ms[step]) or policy_defaults.app_timeout_default(step)
end

local function dirname(path) return path:match("^(.*)/[^/]*$") or "." end

-- Where commands run (see the header).
local function working_dir(cfg, policy)
  local dir = policy.files and policy.files[1] and dirname(policy.files[1]) or oops.policy_dir
  local workdir = cfg and cfg.options and cfg.options.workdir
  if workdir then
    if workdir:sub(1, 1) == "/" or not dir then return workdir end
    return dir .. "/" .. workdir
  end
  return dir
end

local function env_for(values, step, app_env)
  local env = {}
  for k, v in pairs(app_env or {}) do env[k] = v end
  env.OOPS_PIPELINE, env.OOPS_NAMESPACE = values.pipeline or "", values.namespace or ""
  env.OOPS_APPLICATION, env.OOPS_ENVIRONMENT = values.application or "", values.environment or ""
  env.OOPS_ARTIFACT, env.OOPS_STEP, env.OOPS_SERVER = values.artifact or "", step, oops.server_name()
  return env
end

M.app_of, M.app_name, M.timeout_of, M.working_dir, M.env_for = app_of, app_name, timeout_of, working_dir, env_for

return M
