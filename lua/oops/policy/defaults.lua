-- oops.policy.defaults: every default of the policy language, written once:
-- as an operator writes it (DEFAULTS), in milliseconds as the policy holds
-- them (D), and a fresh policy holding them all (defaults()).
local duration = require("oops.duration")

local M = {}

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
  -- strategy: how a release takes the traffic: "all" at once (a canary
  -- or blue_green plan only when the policy writes one).
  rollout = { timeout = "5m", max = "30m", on_failure = "fail", strategy = "all" },
  -- An analysis measures every `interval`, `count` times; more than
  -- `failure_limit` failed measurements fail it; an inconclusive one pauses
  -- the rollout for an operator (or counts as failed: "fail").
  analysis = { interval = "30s", count = 3, failure_limit = 0, inconclusive = "pause" },
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
  application = { timeouts = { deploy = "5m", health = "30s", restart = "1m", weight = "5m",
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
  analysis_interval = ms(M.DEFAULTS.analysis.interval),
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
    rollout = { timeout_ms = D.rollout_timeout, max_ms = D.rollout_max, on_failure = M.DEFAULTS.rollout.on_failure,
      strategy = M.DEFAULTS.rollout.strategy },
    analyses = {},
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

M.D = D

return M
