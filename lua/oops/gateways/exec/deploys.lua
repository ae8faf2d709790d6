-- The exec gateway's deploys, health checks and restarts: commands the
-- calling scan waits for (Gateway:run_wait). Deploy and health runs go to
-- pipeline_log; a restart_command runs for no pipeline (oopsd's log says it
-- succeeded).
--
-- Health exit codes: 0 complete, 1 not ready yet (the rollout timeout
-- applies), 2 the workload is missing, anything else (or a signal, or the
-- timeout) a failure named by the last line of its output. Health runs are
-- logged only when the verdict changes, so a long rollout stays small.
--
-- M.Gateway holds this file's methods; exec/init.lua puts them into its
-- Gateway.
local log = require("oops.log")
local apps = require("oops.gateways.exec.apps")
local placeholders = require("oops.gateways.exec.argv")
local logs = require("oops.gateways.exec.logs")
local app_of, app_name, timeout_of = apps.app_of, apps.app_name, apps.timeout_of
local substitute, pipeline_values = placeholders.substitute, placeholders.values
local log_run, outcome, describe, last_line = logs.log_run, logs.outcome, logs.describe, logs.last_line

local M = {}
local Gateway = {}
M.Gateway = Gateway

function Gateway:deploy(p)
  local a, aerr = app_of(self.policy, app_name(p))
  if not a then return nil, aerr end
  if not a.deploy then return true end
  local values = pipeline_values(p)
  local argv, why, kind = substitute(a.deploy, values)
  if not argv then return nil, "deploy " .. why, kind == "invalid" and "invalid" or nil end
  local run = self:run_wait(argv, values, "deploy", timeout_of(a, "deploy"))
  log_run(p.id, "deploy", run)
  if not run.result then return nil, run.err end
  if run.result.ok then return true end
  return nil, describe("deploy", run.result, run.timeout_ms)
end

-- A canary's weight (issue 38): the application's `weight` command with
-- {weight} (0-100). It must be idempotent: a driver's heir that cannot tell
-- whether the last run took effect runs it again (this gateway has no
-- weight() to ask; lua/oops/canary.lua). Logged to pipeline_log as "weight".
function Gateway:set_weight(p, weight)
  local a, aerr = app_of(self.policy, app_name(p))
  if not a then return nil, aerr end
  if not a.weight then return nil, "application " .. app_name(p) .. " has no weight command (a canary needs one)" end
  local values = pipeline_values(p)
  values.weight = tostring(math.tointeger(weight) or weight)
  local argv, why, kind = substitute(a.weight, values)
  if not argv then return nil, "weight " .. why, kind == "invalid" and "invalid" or nil end
  local run = self:run_wait(argv, values, "weight", timeout_of(a, "weight"))
  log_run(p.id, "weight", run)
  if not run.result then return nil, run.err end
  if run.result.ok then return true end
  return nil, describe("weight", run.result, run.timeout_ms)
end

-- The verdict of one health run: kind (for the log) and what the scan gets.
-- Exit 0 complete, 1 not ready, 2 missing; anything else (another code, a
-- signal, the timeout, not started) a failure.
function M.health_verdict(run)
  local r = run.result
  if not r then return "failure", { failure = tostring(run.err) } end
  if r.timed_out or r.signal ~= 0 then
    return "failure", { failure = "health command " .. outcome(r, run.timeout_ms) }
  end
  if r.status == 0 then return "complete", { complete = true } end
  if r.status == 1 then return "not ready", {} end
  if r.status == 2 then return "missing", { missing = true } end
  return "failure", { failure = last_line(r.stderr) or last_line(r.stdout) or ("health command exited " .. r.status) }
end

function Gateway:rollout_health(p)
  local a, aerr = app_of(self.policy, app_name(p))
  if not a then return nil, aerr end
  if not a.health then return { complete = true } end
  local values = pipeline_values(p)
  local argv, why, refused = substitute(a.health, values)
  if not argv then
    self.health:del(p.id)
    return nil, "health " .. why, refused == "invalid" and "invalid" or nil
  end
  local run = self:run_wait(argv, values, "health", timeout_of(a, "health"))
  local kind, verdict = M.health_verdict(run)
  -- Log a change or a failure only: a rollout polled every scan stays small.
  if kind == "failure" or self.health:get(p.id) ~= kind then log_run(p.id, "health", run) end
  self.health:set(p.id, (kind == "not ready") and kind or nil)
  return verdict
end

function Gateway:restart(app, env)
  local a, aerr = app_of(self.policy, app)
  if not a then return nil, aerr end
  local argv = a.restart_cmd or a.restart_command
  if not argv then return nil, "application " .. app .. " has no restart_command" end
  local ns, name = app:match("^(.-)/(.*)$")
  local values = { namespace = ns, application = name, environment = env,
    id = "", pipeline = "", artifact = "" }
  local why
  argv, why = substitute(argv, values)
  if not argv then return nil, "restart_command " .. why end
  local run = self:run_wait(argv, values, "restart", timeout_of(a, "restart"))
  if not run.result then return nil, run.err end
  if run.result.ok then
    log.info("restart command " .. outcome(run.result, run.timeout_ms), { app = app, env = env })
    return true
  end
  return nil, describe("restart", run.result, run.timeout_ms)
end

return M
