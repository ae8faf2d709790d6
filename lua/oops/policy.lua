-- oops.policy: loads the operators' policy files into plain data.
--
--   local p, errs = policy.load_dir("policies", { cron_parse = oops.cron.parse })
--   local p, errs = policy.load_files({ "policies/oopsd.lua" }, opts)
--
-- Either the whole policy (defaults filled in) or nil and EVERY error of EVERY
-- file, each as "file:line: what: why", so an operator fixes them in one pass.
--
-- Each file runs in its own sandbox: reads see only the policy language and a
-- safe part of the standard library, unknown names are errors, the only
-- globals a file may assign are the hooks, and a file that runs too long is
-- stopped. The declaration functions live out here, so they may use `debug`
-- to find the line each declaration was written on.
local duration = require("oops.duration")
local quantity = require("oops.quantity")
local windows = require("oops.windows")

local show = duration.show
local shown_url = require("oops.url").show

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
-- scan.max_new at most: MariaDB's limit of placeholders in one statement,
-- so a tick's GET_LOCK stays one statement.
M.MAX_NEW_LIMIT = 65535
-- scan.parallel at most: each step is a task with its pipeline's row.
M.PARALLEL_LIMIT = 1024

-- Globals a file may assign: functions the engine calls.
M.HOOKS = { "on_build_lost", "on_transition" }
local HOOK_SET = {}
for _, h in ipairs(M.HOOKS) do HOOK_SET[h] = true end

-- Placeholders an argv may carry, filled in by the exec gateway.
local PIPELINE_PLACEHOLDERS = { "application", "artifact", "environment", "id", "namespace" }
-- Build commands also get the pipeline's source: {source} (its JSON) and
-- {source.KEY} (a top-level field; "source.*" stands for every KEY).
local BUILD_PLACEHOLDERS = { "application", "artifact", "environment", "id", "namespace", "source", "source.*" }
-- An external build's status and cancel commands also get {job}, the handle
-- its submit printed.
local JOB_PLACEHOLDERS = { "application", "artifact", "environment", "id", "job", "namespace", "source", "source.*" }
local RESTART_PLACEHOLDERS = { "application", "environment", "namespace" }

-- Shown when a declaration is written the wrong way round.
local EXAMPLES = {
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
}

-- A freeze lasts at most this long; windows per application and environment.
M.MAX_FREEZE_DAYS = 400
M.MAX_WINDOWS = 32

-------------------------------------------------------------------- defaults

-- Every default of the policy language, written as an operator writes it.
-- The loader fills omitted values from here (M.defaults), the engine reads
-- the loaded policy, and tests/spec/policy_spec.lua checks that the comments
-- of the shipped policies/ state these same values: a default is written
-- once.
M.DEFAULTS = {
  -- max_new: the most new (free) pipelines one server takes per build or
  -- rollout tick (its fair share is never more), which bounds a tick's
  -- working set and its GET_LOCK statement; chosen from bench/run's
  -- footprint and scale cases at 10,000 pipelines. parallel: the most steps
  -- (one pipeline's work of a tick) a scan runs side by side; their database
  -- calls meet in batches (a transition, a gateway's row), so more at once
  -- means fewer, larger statements: 128 from bench/run's scale case (32 took
  -- 1.6 times as long at 10,000 pipelines, 64 1.2 times).
  scan = { interval = "5s", max_new = 500, parallel = 128 },
  -- A RUNNING pipeline whose build neither finishes nor fails (or whose
  -- gateway keeps erroring) is failed after this; the original's build jobs
  -- had a 2-hour deadline.
  build = { timeout = "2h" },
  -- timezone: the zone deploy windows and freezes are read in, the same on
  -- every server; concurrency: the most pipelines per environment deploying
  -- at once (an environment not listed: no bound).
  deploy = { timeout = "10m", timezone = "UTC", concurrency = {} },
  -- timeout: how long a rollout may stay not ready; max: how long it may
  -- stay ROLLING_OUT at all (a workload whose readiness flaps), on the
  -- database's clock; on_failure: what a failed rollout does ("fail", or
  -- "rollback" to the live release).
  rollout = { timeout = "5m", max = "30m", on_failure = "fail" },
  locks = { validate_every = "30s" },
  gateway = { simulated = { build = "2s", deploy = "0s", rollout = "1s" } },
  -- Cron is read in this zone on every server, whatever the host's TZ, so a
  -- fleet whose hosts' zones differ agrees on every occurrence.
  restarts = { grace = "2m", timezone = "UTC" },
  alert = {
    cpu = { percent = 95, sustained = "10m" },
    memory = { percent = 90, sustained = "5m" },
    every = "30m",
    -- how often the alert scan probes: every minute, at its start
    interval = "1m",
    probe = { scrape_interval = "30s" },
  },
  notify = { retry = { initial = "1s", max = "1m" } },
  -- How long finished history is kept (a duration, or "forever"), on the
  -- database's clock: a finished pipeline (and all of it) after `pipelines`
  -- in its final status; the events and the command logs of finished
  -- pipelines after `events` and `logs`; delivered notifications after
  -- `outbox`; finished restart runs after `restarts`; the operators' audit
  -- log (operator_action) after `audit`.
  retention = { pipelines = "180d", events = "180d", logs = "30d", outbox = "30d", restarts = "90d",
    audit = "365d" },
  -- per-application command timeouts when `timeouts` leaves one out (a
  -- one-command build's default is build.timeout; submit, status and cancel
  -- are an external build's three commands)
  application = { timeouts = { deploy = "5m", health = "30s", restart = "1m",
    submit = "1m", status = "30s", cancel = "1m" } },
}

local function ms(text) return assert(duration.parse(text)) end

-- M.DEFAULTS with every duration in milliseconds (how the policy holds them).
local D = {
  scan_interval = ms(M.DEFAULTS.scan.interval),
  build_timeout = ms(M.DEFAULTS.build.timeout),
  deploy_timeout = ms(M.DEFAULTS.deploy.timeout),
  rollout_timeout = ms(M.DEFAULTS.rollout.timeout),
  rollout_max = ms(M.DEFAULTS.rollout.max),
  validate_every = ms(M.DEFAULTS.locks.validate_every),
  sim = {
    build = ms(M.DEFAULTS.gateway.simulated.build),
    deploy = ms(M.DEFAULTS.gateway.simulated.deploy),
    rollout = ms(M.DEFAULTS.gateway.simulated.rollout),
  },
  grace = ms(M.DEFAULTS.restarts.grace),
  cpu = { percent = M.DEFAULTS.alert.cpu.percent, sustained_ms = ms(M.DEFAULTS.alert.cpu.sustained) },
  memory = { percent = M.DEFAULTS.alert.memory.percent, sustained_ms = ms(M.DEFAULTS.alert.memory.sustained) },
  alert_every = ms(M.DEFAULTS.alert.every),
  alert_interval = ms(M.DEFAULTS.alert.interval),
  scrape_interval = ms(M.DEFAULTS.alert.probe.scrape_interval),
  retry_initial = ms(M.DEFAULTS.notify.retry.initial),
  retry_max = ms(M.DEFAULTS.notify.retry.max),
  app_timeouts = {},
  retention = {},
}
for step, text in pairs(M.DEFAULTS.application.timeouts) do D.app_timeouts[step] = ms(text) end
for kind, text in pairs(M.DEFAULTS.retention) do D.retention[kind .. "_ms"] = ms(text) end

-- Per-application command timeouts (ms) when `timeouts` leaves one out.
function M.app_timeout_default(step)
  if step == "build" then return D.build_timeout end
  return D.app_timeouts[step]
end

-- A fresh policy holding every default (REFERENCE.md §8 for alerts).
function M.defaults()
  return {
    version_hash = nil,
    files = {},
    scan = { interval_ms = D.scan_interval, max_new = M.DEFAULTS.scan.max_new,
      parallel = M.DEFAULTS.scan.parallel },
    build = { timeout_ms = D.build_timeout },
    deploy = { timeout_ms = D.deploy_timeout, timezone = M.DEFAULTS.deploy.timezone, concurrency = {} },
    rollout = { timeout_ms = D.rollout_timeout, max_ms = D.rollout_max, on_failure = M.DEFAULTS.rollout.on_failure },
    locks = { validate_every_ms = D.validate_every },
    gateway = { kind = "simulated", build_ms = D.sim.build, deploy_ms = D.sim.deploy, rollout_ms = D.sim.rollout,
      options = {} },
    applications = {},
    freezes = {},
    restarts = { timezone = M.DEFAULTS.restarts.timezone, grace_ms = D.grace },
    alert = {
      enabled = false,
      cpu = { percent = D.cpu.percent, sustained_ms = D.cpu.sustained_ms },
      memory = { percent = D.memory.percent, sustained_ms = D.memory.sustained_ms },
      every_ms = D.alert_every,
      interval_ms = D.alert_interval,
      probe = { kind = "simulated", scrape_interval_ms = D.scrape_interval },
    },
    notify = { routes = { { kind = "log" } }, retry = { initial_ms = D.retry_initial, max_ms = D.retry_max } },
    retention = { pipelines_ms = D.retention.pipelines_ms, events_ms = D.retention.events_ms,
      logs_ms = D.retention.logs_ms, outbox_ms = D.retention.outbox_ms, restarts_ms = D.retention.restarts_ms,
      audit_ms = D.retention.audit_ms },
    hooks = {},
    sources = { applications = {}, hooks = {}, notify = {} },
  }
end

------------------------------------------------------------- small helpers

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return show(a) < show(b) end)
  return keys
end

local function set_of(list)
  local s = {}
  for _, v in ipairs(list) do s[v] = true end
  return s
end

-- A plain sequence 1..n with no other keys (an empty table counts).
local function is_list(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n == #t
end

-- "a type" for messages: "a string", "a number", "a table", "nil".
local function a_type(v)
  local t = type(v)
  if t == "nil" then return "nil" end
  return (t:match("^[aeiou]") and "an " or "a ") .. t
end

-------------------------------------------------------------- value checks
-- Each check takes a value as written and returns what the policy stores,
-- or nil and why (starting with the value, where showing it helps).

local function dur(min_ms)
  return function(v)
    local n, why = duration.parse(v)
    if not n then return nil, why end
    if n < min_ms then
      if min_ms == 1 then return nil, show(v) .. ": must be more than zero" end
      return nil, show(v) .. ": must be at least " .. duration.format(min_ms)
    end
    return n
  end
end

local function percent(v)
  local n = math.type(v) and math.tointeger(v)
  if not n or n < 1 or n > 100 then return nil, show(v) .. ": must be a whole number from 1 to 100" end
  return n
end

-- A whole number from lo to hi.
local function whole(lo, hi)
  return function(v)
    local n = math.type(v) and math.tointeger(v)
    if not n or n < lo or n > hi then
      return nil, ("%s: must be a whole number from %d to %d"):format(show(v), lo, hi)
    end
    return n
  end
end

local function boolean(v)
  if type(v) ~= "boolean" then return nil, show(v) .. ": must be true or false" end
  return v
end

local function url(v)
  if type(v) ~= "string" or not v:match("^https?://[^%s]+$") then
    -- Never quoted whole: a secret may sit in its userinfo, path or query, and
    -- the message reaches logs, /healthz and /status (oops.url).
    return nil, (type(v) == "string" and show(shown_url(v)) or show(v)) .. ": must be an http:// or https:// URL"
  end
  return v
end

-- The fleet page's URL (notify.page): a URL, with no "@" before its fragment.
-- The link is copied into every Slack and Teams button and the CloudEvents
-- source, so a user:password@ in it would reach every receiver; an "@" in the
-- path or query cannot be told from a password holding an unencoded "/".
local function page_url(v)
  local u, why = url(v)
  if not u then return nil, why end
  if u:gsub("#.*$", ""):find("@", 1, true) then
    return nil, show(shown_url(u)) .. ": must not hold a user or password (the page's link is sent to every " ..
      "receiver); give the page's address alone"
  end
  return u
end

local function nonempty(v)
  if type(v) ~= "string" or v == "" then return nil, show(v) .. ": must be a non-empty string" end
  return v
end

-- A positive quantity from oops.quantity (a zero limit would alert forever).
local function positive(parse)
  return function(v)
    local n, why = parse(v)
    if not n then return nil, why end
    if n == 0 then return nil, show(v) .. ": must be more than zero" end
    return n
  end
end

local ARGV_LIKE = 'must be an argv list of strings like {"make", "image"}'

-- The placeholders of an argument: {name} or {name.KEY} (M.PLACEHOLDER,
-- the exec gateway substitutes with the same pattern).
M.PLACEHOLDER = "{([%a_][%w_]*%.?[%w_%-]*)}"

-- Why argument `i` of an argv is wrong, or nil. `placeholders` nil: any text.
local function bad_argument(i, arg, placeholders)
  if type(arg) ~= "string" then return "argument " .. i .. " is " .. a_type(arg) .. ", not a string" end
  if i == 1 and arg == "" then return "argument 1 (the program) is empty" end
  if not placeholders then return nil end
  local known = set_of(placeholders)
  for name in arg:gmatch(M.PLACEHOLDER) do
    local head = name:match("^([%a_][%w_]*)%.")
    if not (known[name] or (head and known[head .. ".*"] and #name > #head + 1)) then
      return "argument " .. i .. ": " .. show(arg) .. ": unknown placeholder {" .. name .. "} (known: {"
        .. table.concat(placeholders, "}, {"):gsub("%.%*", ".KEY") .. "})"
    end
  end
end

-- An argv list: copied, never a shell string.
local function argv(placeholders)
  return function(v)
    if type(v) == "string" then
      return nil, ARGV_LIKE .. ", not a string (commands never run through a shell)"
    end
    if type(v) ~= "table" then return nil, ARGV_LIKE .. ", not " .. a_type(v) end
    if not is_list(v) then return nil, ARGV_LIKE .. " (it has named keys)" end
    if #v == 0 then return nil, "must be a non-empty argv list of strings like {\"make\", \"image\"}" end
    local out = {}
    for i, arg in ipairs(v) do
      local why = bad_argument(i, arg, placeholders)
      if why then return nil, why end
      out[i] = arg
    end
    return out
  end
end

-- A name as used in app names and environments (a DNS label, as Kubernetes wants).
local function is_label(s)
  if type(s) ~= "string" or #s > 63 then return false end
  return s:match("^[a-z0-9]$") ~= nil or s:match("^[a-z0-9][a-z0-9-]*[a-z0-9]$") ~= nil
end

local function environments(v)
  local like = 'must be a list of environment names like {"staging", "prod"}'
  if type(v) ~= "table" or not is_list(v) or #v == 0 then return nil, like end
  local out, seen = {}, {}
  for i, env in ipairs(v) do
    if type(env) ~= "string" or not is_label(env) then
      return nil, show(env) .. ': must be lowercase letters, digits and "-" (like "prod")'
    end
    if seen[env] then return nil, show(env) .. " is listed twice" end
    seen[env], out[i] = true, env
  end
  return out
end

-- "Europe/Paris", "America/Argentina/Buenos_Aires", "UTC", "Etc/GMT+2".
local function is_zone_name(v)
  if type(v) ~= "string" or v == "" then return false end
  for part in (v .. "/"):gmatch("([^/]*)/") do
    if not part:match("^[%w_][%w_+%-]*$") then return false end
  end
  return true
end

local function timezone(v)
  if not is_zone_name(v) then
    return nil, show(v) .. ': not a time zone name (like "Europe/Paris" or "UTC")'
  end
  -- Where the system has a zone database, a misspelt zone is caught now,
  -- rather than silently running restarts in UTC.
  local probe = io.open("/usr/share/zoneinfo/UTC", "rb")
  if probe then
    probe:close()
    local f = io.open("/usr/share/zoneinfo/" .. v, "rb")
    if not f then return nil, show(v) .. ": unknown time zone (not in /usr/share/zoneinfo)" end
    f:close()
  end
  return v
end

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

-- The keys each declaration's table accepts (Decl:only refuses any other), by
-- where they are written: "alert.cpu" is the table under alert's `cpu`. The
-- builders below read them from here; M.keys() lists them.
local APP_KEYS = { "build", "deploy", "env", "environments", "health", "limits", "restart", "restart_command",
  "rollout", "timeouts", "windows" }
local GATEWAY_KEYS = { simulated = { "build", "deploy", "rollout" }, exec = { "workdir" } }
local ALERT_METRIC_KEYS = { "percent", "sustained" }
local KEYS = {
  scan = { "interval", "max_new", "parallel" },
  build = { "timeout" },
  deploy = { "concurrency", "timeout", "timezone" },
  rollout = { "max", "on_failure", "timeout" },
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
  application = APP_KEYS,
  ["application.build"] = { "cancel", "status", "submit" },
  ["application.limits"] = { "cpu", "memory" },
  ["application.rollout"] = { "on_failure" },
  ["application.timeouts"] = { "build", "cancel", "deploy", "health", "restart", "status", "submit" },
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
  for _, p in ipairs(JOB_PLACEHOLDERS) do
    out[#out + 1] = { "placeholder", "{" .. p:gsub("%.%*", ".KEY") .. "}" }
  end
  table.sort(out, function(a, b) return a[1] .. " " .. a[2] < b[1] .. " " .. b[2] end)
  return out
end

-- Each builder checks one declaration's body and returns what the policy
-- stores for it.
local build = {}

function build.scan(d, t)
  d:only(nil, t, KEYS.scan)
  -- Below 100ms every server would hammer the database for nothing.
  return { interval_ms = d:field(t, "interval", dur(100), D.scan_interval),
    max_new = d:field(t, "max_new", whole(1, M.MAX_NEW_LIMIT), M.DEFAULTS.scan.max_new),
    parallel = d:field(t, "parallel", whole(1, M.PARALLEL_LIMIT), M.DEFAULTS.scan.parallel) }
end

function build.build(d, t)
  d:only(nil, t, KEYS.build)
  return { timeout_ms = d:field(t, "timeout", dur(1), D.build_timeout) }
end

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

function build.deploy(d, t)
  d:only(nil, t, KEYS.deploy)
  return { timeout_ms = d:field(t, "timeout", dur(1), D.deploy_timeout),
    timezone = d:field(t, "timezone", timezone, M.DEFAULTS.deploy.timezone),
    concurrency = deploy_concurrency(d, t.concurrency) }
end

-- What a failed rollout does: "fail" (the pipeline fails) or "rollback".
local function on_failure(v)
  if v ~= "fail" and v ~= "rollback" then return nil, show(v) .. ': must be "fail" or "rollback"' end
  return v
end

function build.rollout(d, t)
  d:only(nil, t, KEYS.rollout)
  local r = { timeout_ms = d:field(t, "timeout", dur(1), D.rollout_timeout),
    on_failure = d:field(t, "on_failure", on_failure, M.DEFAULTS.rollout.on_failure) }
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
  return { timezone = d:field(t, "timezone", timezone, M.DEFAULTS.restarts.timezone),
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
  local g = M.defaults().gateway
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

local function alert_metric(d, t, name, default)
  local m = d:sub(t, name, KEYS["alert." .. name])
  return {
    percent = d:field(m, "percent", percent, default.percent, name .. ".percent"),
    sustained_ms = d:field(m, "sustained", dur(0), default.sustained_ms, name .. ".sustained"),
  }
end

local function alert_probe(d, v)
  local probe = { kind = "simulated", scrape_interval_ms = D.scrape_interval }
  if v == nil or v == "simulated" then return probe end
  if type(v) ~= "table" then
    d:fail("probe", show(v) .. ': must be "simulated" or { prometheus = "http://..." }')
    return probe
  end
  d:only("probe", v, KEYS["alert.probe"])
  if v.prometheus == nil then
    d:fail("probe.prometheus", "required (the Prometheus base URL)")
  end
  probe.kind = "prometheus"
  probe.url = d:field(v, "prometheus", url, nil, "probe.prometheus")
  probe.scrape_interval_ms = d:field(v, "scrape_interval", dur(1000), D.scrape_interval, "probe.scrape_interval")
  probe.token = d:field(v, "token", nonempty, nil, "probe.token")
  return probe
end

function build.alert(d, t)
  d:only(nil, t, KEYS.alert)
  local a = M.defaults().alert
  -- Writing an alert block means wanting alerts, unless it says enabled = false.
  a.enabled = d:field(t, "enabled", boolean, true)
  -- How often the alert scan probes: every minute (at its start) unless set
  -- shorter, which tests and scenarios do.
  a.interval_ms = d:field(t, "interval", dur(1000), a.interval_ms)
  a.cpu = alert_metric(d, t, "cpu", a.cpu)
  a.memory = alert_metric(d, t, "memory", a.memory)
  a.every_ms = d:field(t, "every", dur(1000), a.every_ms)
  a.probe = alert_probe(d, t.probe)
  return a
end

local function notify_retry(d, t)
  local r = d:sub(t, "retry", KEYS["notify.retry"])
  local out = {
    initial_ms = d:field(r, "initial", dur(1), D.retry_initial, "retry.initial"),
    max_ms = d:field(r, "max", dur(1), D.retry_max, "retry.max"),
  }
  if out.initial_ms > out.max_ms then
    d:fail("retry", "initial " .. duration.format(out.initial_ms) .. " is longer than max "
      .. duration.format(out.max_ms))
  end
  return out
end

-- The event names a route's `events` filter knows (issue 28): the statuses
-- a pipeline moves to, the pipeline event types, "alert" (every alert edge)
-- and the edges themselves. Scheduled restarts are not announced.
M.NOTIFY_EVENTS = { "BUILD_SUCCEEDED", "BUILDING", "CREATED", "DEPLOYING", "DEPLOY_REQUESTED", "ERROR", "FAILED",
  "FIRING", "INITIALIZED", "OVERRIDE", "REPEAT", "RESOLVED", "ROLLING_OUT", "RUNNING", "STOPPED", "SUCCEEDED",
  "alert" }
local NOTIFY_EVENT = {}
for _, n in ipairs(M.NOTIFY_EVENTS) do NOTIFY_EVENT[n] = true end

local function event_names(v)
  local like = 'must be a list of event names like {"ERROR", "SUCCEEDED", "alert"}'
  if type(v) ~= "table" or not is_list(v) or #v == 0 then return nil, like end
  local set = {}
  for _, n in ipairs(v) do
    if n == "restart" then
      return nil, '"restart": scheduled restarts are not announced (known: '
        .. table.concat(M.NOTIFY_EVENTS, ", ") .. ")"
    end
    if not NOTIFY_EVENT[n] then
      return nil, show(n) .. ": not an event name (known: " .. table.concat(M.NOTIFY_EVENTS, ", ") .. ")"
    end
    set[n] = true
  end
  return set
end

-- applications = { "shop/*", "pay/api" }: NS/APP, "*" any run of a name's
-- characters; kept as anchored Lua patterns.
local function app_patterns(v)
  local like = 'must be a list of applications like {"shop/*", "pay/api"}'
  if type(v) ~= "table" or not is_list(v) or #v == 0 then return nil, like end
  local out = {}
  for i, a in ipairs(v) do
    if type(a) ~= "string" or #a > 127 or not a:match("^[a-z0-9*-]+/[a-z0-9*-]+$") then
      return nil, show(a) .. ': must be NS/APP of lowercase letters, digits, "-" and "*"'
    end
    out[i] = "^" .. a:gsub("%-", "%%-"):gsub("%*", "[a-z0-9-]*") .. "$"
  end
  return out
end

local function env_set(v)
  local list, why = environments(v)
  if not list then return nil, why end
  local set = {}
  for _, e in ipairs(list) do set[e] = true end
  return set
end

local function ca_file(v)
  if type(v) ~= "string" or not v:match("^/") or #v > 1024 or v:find("[%c]") then
    return nil, show(v) .. ": must be an absolute path of a PEM file"
  end
  return v
end

-- A block's filters, shared by its routes; nil when it has none.
local function notify_filter(d, t)
  local f = {
    events = d:field(t, "events", event_names, nil),
    environments = d:field(t, "environments", env_set, nil),
    applications = d:field(t, "applications", app_patterns, nil),
  }
  return (f.events or f.environments or f.applications) and f or nil
end

-- Routes in a fixed order (webhook, slack, teams, command, log), each with
-- the block's filters, format (webhook) and CA file (https receivers); the
-- retry and the page if set (each once in the whole policy).
function build.notify(d, t, _, st)
  d:only(nil, t, KEYS.notify)
  local n = { routes = {}, names_routes = false }
  local filter, ca = notify_filter(d, t), d:field(t, "ca", ca_file, nil)
  local format = d:field(t, "format", function(v)
    if v == "json" or v == "cloudevents" then return v end
    return nil, show(v) .. ': must be "json" or "cloudevents"'
  end, nil)
  if format and t.webhook == nil then d:fail("format", "goes with webhook = URL") end
  for _, kind in ipairs({ "webhook", "slack", "teams" }) do
    if t[kind] ~= nil then
      n.routes[#n.routes + 1] = { kind = kind, url = d:field(t, kind, url, nil), filter = filter, ca = ca,
        format = kind == "webhook" and (format or "json") or kind }
    end
  end
  if t.command ~= nil then
    n.routes[#n.routes + 1] = { kind = "command", argv = d:field(t, "command", argv(nil), nil), filter = filter }
  end
  if t.log ~= nil and d:field(t, "log", boolean, false) then
    n.routes[#n.routes + 1] = { kind = "log", filter = filter }
  end
  n.names_routes = #n.routes > 0 or t.log ~= nil
  if t.retry ~= nil then
    if st.retry_at then
      d:fail("retry", "already set at " .. st.retry_at)
    else
      st.retry_at, n.retry = d.where, notify_retry(d, t)
    end
  end
  if t.page ~= nil then
    if st.page_at then
      d:fail("page", "already set at " .. st.page_at)
    else
      st.page_at, n.page = d.where, d:field(t, "page", page_url, nil)
    end
  end
  if not n.names_routes and t.retry == nil and t.page == nil then
    d:fail(nil, 'names no route (use webhook = "http://...", slack = URL, teams = URL, command = {...} or log = true)')
  end
  return n
end

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

-- rollout = { on_failure = "rollback" }: this application's own choice
-- (nil: rollout.on_failure).
local function app_rollout(d, t)
  if t.rollout == nil then return nil end
  local r = d:sub(t, "rollout", KEYS["application.rollout"])
  local v = d:field(r, "on_failure", on_failure, nil, "rollout.on_failure")
  return v and { on_failure = v } or nil
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
  a.restart_cmd = d:field(t, "restart_command", argv(RESTART_PLACEHOLDERS), nil)
  a.env = d:field(t, "env", app_env, {})
  a.restart = app_restart(d, t.restart, envs_ok and a.environments or nil, st.cron_parse)
  a.windows = app_windows(d, t.windows, envs_ok and a.environments or nil)
  a.rollout = app_rollout(d, t)
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

------------------------------------------------------------ the load state

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
  local key = SINGLE[kind] and kind or ((kind == "application" or kind == "freeze") and d.label)
  if key then
    if st.seen[key] then return d:fail(nil, "already declared at " .. st.seen[key]) end
    st.seen[key] = where
  end
  local value = build[kind](d, body, name, st)
  if value ~= nil then store(st, d, kind, name, value) end
end

------------------------------------------------------------- one file

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
  for _, kind in ipairs({ "gateway", "application", "freeze" }) do
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
  local hook_list = table.concat(M.HOOKS, ", ")
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

-- A policy file's text: a regular file (after symlinks) of at most
-- MAX_FILE_BYTES, opened without blocking (a FIFO named zz.lua or a link to
-- /dev/zero is an error naming the file, never a hang).
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

------------------------------------------------------- whole-policy checks

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

-- Notify declarations add up; no route named anywhere means log only.
local function merge_notify(st)
  local n = st.policy.notify
  local routes, named = {}, false
  for _, v in ipairs(st.notifies) do
    named = named or v.names_routes
    for _, r in ipairs(v.routes) do routes[#routes + 1] = r end
    n.retry = v.retry or n.retry
    n.page = v.page or n.page
  end
  if named then n.routes = routes end
end

-- --simulate URL (oopsctl chaos): the policy as written (applications,
-- timeouts, schedules, alert rules, hooks), but nothing real runs or hears
-- of it: the simulated gateway (its timings kept when the policy has it),
-- the simulated alert probe, and every notification a webhook to URL.
local function simulate(st, webhook)
  local p = st.policy
  local checked, why = url(webhook)
  if not checked then
    st.errors[#st.errors + 1] = "--simulate " .. why
    return
  end
  if p.gateway.kind ~= "simulated" then p.gateway = M.defaults().gateway end
  p.alert.probe = { kind = "simulated", scrape_interval_ms = D.scrape_interval }
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
    policy = M.defaults(), errors = {}, seen = {}, app_order = {}, notifies = {}, freeze_order = {},
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
