-- oops.policy.engine: the blocks that tune the engine, one table of settings
-- each: scan, build, deploy, rollout, locks, restarts, retention, and the
-- gateway pipelines are driven through (simulated or exec).
local duration = require("oops.duration")
local canary = require("oops.policy.canary")
local defaults = require("oops.policy.defaults")
local keys = require("oops.policy.keys")
local release = require("oops.policy.release")
local values = require("oops.policy.values")

local show = duration.show
local D = defaults.D
local KEYS, GATEWAY_KEYS = keys.KEYS, keys.GATEWAY_KEYS
local dur, whole, nonempty, timezone = values.dur, values.whole, values.nonempty, values.timezone
local deploy_concurrency, on_failure = release.concurrency, release.on_failure

local M = { build = {} }
local build = M.build

-- scan.max_new at most: MariaDB's limit of placeholders in one statement,
-- so a tick's GET_LOCK stays one statement.
M.MAX_NEW_LIMIT = 65535
-- scan.parallel at most: each step is a task with its pipeline's row.
M.PARALLEL_LIMIT = 1024

function build.scan(d, t)
  d:only(nil, t, KEYS.scan)
  -- Below 100ms every server would hammer the database for nothing.
  return { interval_ms = d:field(t, "interval", dur(100), D.scan_interval),
    max_new = d:field(t, "max_new", whole(1, M.MAX_NEW_LIMIT), defaults.DEFAULTS.scan.max_new),
    parallel = d:field(t, "parallel", whole(1, M.PARALLEL_LIMIT), defaults.DEFAULTS.scan.parallel) }
end

function build.build(d, t)
  d:only(nil, t, KEYS.build)
  return { timeout_ms = d:field(t, "timeout", dur(1), D.build_timeout) }
end

function build.deploy(d, t)
  d:only(nil, t, KEYS.deploy)
  return { timeout_ms = d:field(t, "timeout", dur(1), D.deploy_timeout),
    timezone = d:field(t, "timezone", timezone, defaults.DEFAULTS.deploy.timezone),
    concurrency = deploy_concurrency(d, t.concurrency) }
end

function build.rollout(d, t, _, st)
  d:only(nil, t, KEYS.rollout)
  local r = { timeout_ms = d:field(t, "timeout", dur(1), D.rollout_timeout),
    on_failure = d:field(t, "on_failure", on_failure, defaults.DEFAULTS.rollout.on_failure) }
  r.strategy, r.steps = canary.rollout_plan(d, t, "", st, defaults.DEFAULTS.rollout.strategy)
  r.strategy = r.strategy or defaults.DEFAULTS.rollout.strategy
  r.max_ms = d:field(t, "max", dur(1), math.max(D.rollout_max, r.timeout_ms))
  if t.max ~= nil and r.max_ms < r.timeout_ms then
    d:fail("max", show(t.max) .. " is shorter than timeout " .. duration.format(r.timeout_ms) ..
      " (max bounds the whole rollout, timeout the time not ready)")
  end
  return r
end

-- session_timeout: how long the database keeps a silent lock session (and
-- its locks) before reaping it — the bound on a frozen or cut-off server's
-- locks. Default (nil): 3 × validate_every, at least 3 s. A duration of at
-- least 2 × validate_every (so the validation keeps a living server's
-- session), in whole seconds (rounded up); or "server": leave the database
-- server's own wait_timeout (8 hours by default), for comparison.
local function session_timeout(every_ms)
  return function(v)
    if v == "server" then return v end
    local n, why = duration.parse(v)
    if not n then return nil, why .. ' (or "server": the database server\'s own wait_timeout)' end
    if n < 2 * every_ms then
      return nil, show(v) .. ": must be at least twice validate_every (" .. duration.format(2 * every_ms) ..
        "), or the validation cannot keep a living server's session"
    end
    return (n + 999) // 1000
  end
end

function build.locks(d, t)
  d:only(nil, t, KEYS.locks)
  local every = d:field(t, "validate_every", dur(1000), D.validate_every)
  return { validate_every_ms = every, session_timeout = d:field(t, "session_timeout", session_timeout(every), nil) }
end

function build.restarts(d, t)
  d:only(nil, t, KEYS.restarts)
  return { timezone = d:field(t, "timezone", timezone, defaults.DEFAULTS.restarts.timezone),
    grace_ms = d:field(t, "grace", dur(0), D.grace) }
end

-- retention: each kind a duration of at least an hour (less is surely a
-- typo, and would delete what an operator is still looking at), or
-- "forever" (stored as false: that kind is never deleted).
local RETENTION_MIN_MS = 3600000
local function keep_for(v)
  if v == "forever" then return false end
  local n, why = duration.parse(v)
  if not n then return nil, why .. ' (or "forever")' end
  if n < RETENTION_MIN_MS then
    return nil, show(v) .. ": must be at least " .. duration.format(RETENTION_MIN_MS) .. ' (or "forever")'
  end
  return n
end

function build.retention(d, t)
  d:only(nil, t, KEYS.retention)
  local r = {}
  for _, kind in ipairs(KEYS.retention) do
    r[kind .. "_ms"] = d:field(t, kind, keep_for, D.retention[kind .. "_ms"])
  end
  return r
end

function build.gateway(d, t, kind)
  if kind == "kubernetes" then
    d:fail(nil, 'not available in this build (use "simulated" or "exec")')
    return nil
  end
  if not GATEWAY_KEYS[kind] then
    d:fail(nil, "unknown gateway (known: exec, kubernetes, simulated)")
    return nil
  end
  d:only(nil, t, GATEWAY_KEYS[kind])
  local g = defaults.defaults().gateway
  g.kind = kind
  if kind == "simulated" then
    g.build_ms = d:field(t, "build", dur(0), g.build_ms)
    g.deploy_ms = d:field(t, "deploy", dur(0), g.deploy_ms)
    g.rollout_ms = d:field(t, "rollout", dur(0), g.rollout_ms)
  else
    -- Relative command paths ("./deploy.sh") resolve against workdir;
    -- without it, against the policy directory (the exec gateway decides).
    g.options.workdir = d:field(t, "workdir", nonempty, nil)
  end
  return g
end

return M
