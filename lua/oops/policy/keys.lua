-- oops.policy.keys: every name of the policy language, written once: the
-- keys each declaration's table accepts, the hooks a file may assign and the
-- placeholders an argv may carry. The block files read them from here, and
-- keys() lists them all for the manuals' check.
local M = {}

-- Globals a file may assign: functions the engine calls.
M.HOOKS = { "on_build_lost", "on_transition" }

-- Placeholders an argv may carry, filled in by the exec gateway. {trigger}:
-- "release" or "rollback" (a rollback's deploy goes to the stable release of
-- a canary application, whose releases deploy beside it).
local PIPELINE_PLACEHOLDERS = { "application", "artifact", "environment", "id", "namespace", "trigger" }
-- Build commands also get the pipeline's source: {source} (its JSON) and
-- {source.KEY} (a top-level field; "source.*" stands for every KEY).
local BUILD_PLACEHOLDERS = { "application", "artifact", "environment", "id", "namespace", "source", "source.*",
  "trigger" }
-- An external build's status and cancel commands also get {job}, the handle
-- its submit printed.
local JOB_PLACEHOLDERS = { "application", "artifact", "environment", "id", "job", "namespace", "source", "source.*",
  "trigger" }
local RESTART_PLACEHOLDERS = { "application", "environment", "namespace" }
-- The weight command (a canary's share of traffic) also gets {weight}, a
-- whole number from 0 to 100.
local WEIGHT_PLACEHOLDERS = { "application", "artifact", "environment", "id", "namespace", "trigger", "weight" }

-- The keys each declaration's table accepts (Decl:only refuses any other), by
-- where they are written: "alert.cpu" is the table under alert's `cpu`. The
-- block files' builders read them from here; M.keys() lists them.
local APP_KEYS = { "approvals", "build", "deploy", "env", "environments", "health", "limits", "promote", "restart",
  "restart_command", "rollout", "timeouts", "weight", "windows" }
local GATEWAY_KEYS = { simulated = { "build", "deploy", "rollout" }, exec = { "workdir" } }
local ALERT_METRIC_KEYS = { "percent", "sustained" }
local KEYS = {
  scan = { "interval", "max_new", "parallel" },
  build = { "timeout" },
  deploy = { "concurrency", "timeout", "timezone" },
  rollout = { "analysis", "max", "on_failure", "pause", "steps", "strategy", "timeout" },
  freeze = { "environments", "from", "to" },
  locks = { "session_timeout", "validate_every" },
  restarts = { "grace", "timezone" },
  alert = { "cpu", "enabled", "every", "interval", "memory", "probe" },
  ["alert.cpu"] = ALERT_METRIC_KEYS,
  ["alert.memory"] = ALERT_METRIC_KEYS,
  ["alert.probe"] = { "prometheus", "scrape_interval", "token" },
  notify = { "applications", "ca", "command", "environments", "events", "format", "log", "page", "retry",
    "slack", "teams", "webhook" },
  ["notify.retry"] = { "initial", "max" },
  retention = { "audit", "events", "logs", "outbox", "pipelines", "restarts" },
  analysis = { "count", "failure_limit", "inconclusive", "interval", "prometheus", "query", "success", "token" },
  application = APP_KEYS,
  ["application.build"] = { "cancel", "status", "submit" },
  ["application.limits"] = { "cpu", "memory" },
  ["application.rollout"] = { "analysis", "on_failure", "pause", "steps", "strategy" },
  ["application.timeouts"] = { "build", "cancel", "deploy", "health", "restart", "status", "submit", "weight" },
}

-- Every key of the policy language, for documentation checks
-- (tests/integration/manuals.sh): a fresh list of { block, key } where block
-- is a declaration ("scan", 'gateway "exec"') and key a dotted path in it
-- ("cpu.percent"), plus the hooks ({ "hook", name }) and placeholders
-- ({ "placeholder", "{source.KEY}" }).
function M.keys()
  local out = {}
  for path, keys in pairs(KEYS) do
    local block, prefix = path:match("^([^.]*)%.?(.*)$")
    for _, k in ipairs(keys) do
      out[#out + 1] = { block, prefix == "" and k or (prefix .. "." .. k) }
    end
  end
  for kind, keys in pairs(GATEWAY_KEYS) do
    for _, k in ipairs(keys) do out[#out + 1] = { 'gateway "' .. kind .. '"', k } end
  end
  for _, h in ipairs(M.HOOKS) do out[#out + 1] = { "hook", h } end
  local listed = {}
  for _, list in ipairs({ JOB_PLACEHOLDERS, WEIGHT_PLACEHOLDERS }) do
    for _, p in ipairs(list) do
      if not listed[p] then out[#out + 1] = { "placeholder", "{" .. p:gsub("%.%*", ".KEY") .. "}" } end
      listed[p] = true
    end
  end
  table.sort(out, function(a, b) return a[1] .. " " .. a[2] < b[1] .. " " .. b[2] end)
  return out
end

M.KEYS, M.APP_KEYS, M.GATEWAY_KEYS = KEYS, APP_KEYS, GATEWAY_KEYS
M.PIPELINE_PLACEHOLDERS, M.BUILD_PLACEHOLDERS = PIPELINE_PLACEHOLDERS, BUILD_PLACEHOLDERS
M.JOB_PLACEHOLDERS, M.RESTART_PLACEHOLDERS = JOB_PLACEHOLDERS, RESTART_PLACEHOLDERS
M.WEIGHT_PLACEHOLDERS = WEIGHT_PLACEHOLDERS

return M
