-- oopsd.lua: how this server schedules its work.
--
-- Every server in the fleet should load the same policy files. Edit, then
-- check with `oopsd --check --policies DIR`, then reload with SIGHUP: the new
-- policy takes over between two scans only if every file loads cleanly;
-- otherwise the old one stays and the error shows in the log and /healthz.
--
-- Durations are written with their unit: 500ms, 5s, 10m, 2h (or 1h30m).
-- Leaving a declaration out gives the default shown in its comment.

-- How often each scan (builds, rollouts, the lock sweep) looks at the
-- pipelines. Default 5s. Shorter makes pipelines move faster at the cost of
-- more queries per server; at least 100ms.
-- `max_new`: the most new pipelines (ones no server drives yet) this server
-- takes per tick, its fair share of them bounded so: default 500 (1 to
-- 65535). A flood of new pipelines is taken over several ticks, oldest
-- first, in bounded memory.
-- `parallel`: the most pipelines a scan steps side by side: default 128 (1
-- to 1024). Their database calls are sent together, so more means fewer
-- statements; fewer means fewer gateway commands running at once.
scan { interval = "5s", max_new = 500, parallel = 128 }

-- How long a build may run (or its gateway keep failing to say how it is
-- doing) before the pipeline is failed and the build stopped. Default 2h.
--   build { timeout = "2h" }

-- How long a pipeline may stay DEPLOYING before it is failed. Default 10m.
-- This is what frees a pipeline whose server died mid-deploy, so keep it
-- above your slowest deploy command (an application's timeouts.deploy may
-- not exceed it).
-- `timezone`: the zone the applications' deploy windows (apps.lua) and the
-- freezes below are read in, the same on every server whatever its host's
-- TZ: default UTC.
-- `concurrency`: the most pipelines of one environment deploying at once,
-- like { prod = 2 } (1 to 100 each): default none (no bound).
deploy { timeout = "10m" }

-- Freezes: no deploy to their environments (every one when none is listed)
-- from `from` until `to`, local times in deploy.timezone; `to` is required,
-- at most 400 days after `from`. Several may be declared, each named once.
--   freeze "year-end" { from = "2026-12-20 00:00", to = "2027-01-04 08:00", environments = { "prod" } }

-- How long a rollout may stay not-ready before the pipeline is failed.
-- Default 5m. Raise it for applications whose pods take long to warm up.
-- `max` bounds the whole rollout however its readiness flaps (ready, then
-- not, then ready...), on the database's clock from the moment the pipeline
-- became ROLLING_OUT: default 30m (at least the timeout).
-- `on_failure`: what a failed rollout does, "fail" or "rollback" (to the
-- live release); an application may say otherwise (apps.lua): default fail.
-- `strategy`: how a release takes the traffic: "all" at once (the default),
-- "canary" (a growing share, step by step: `steps` of weights, pauses and
-- analyses; the last weight 100) or "blue_green" (beside the live release
-- with no traffic, an `analysis` and/or a `pause`, then all of it). An
-- analysis is a Prometheus query measured `count` times, every `interval`
-- (oopsd.policy(5), "analysis"):
--   rollout { strategy = "canary", steps = { { weight = 10 }, { analysis = "errors" },
--     { weight = 50 }, { pause = "10m" }, { weight = 100 } } }
--   analysis "errors" { prometheus = "http://127.0.0.1:9090",
--     query = [[sum(rate(http_requests_total{app="{application}",code=~"5.."}[1m]))
--       / sum(rate(http_requests_total{app="{application}"}[1m]))]],
--     success = function(v) return v < 0.01 end, count = 4, failure_limit = 1 }
rollout { timeout = "5m", max = "30m" }

-- How often the idle lock session is checked against the database. Default
-- 30s. If the session is gone, every lock is gone: this server stops
-- driving pipelines until it reconnects. The database also reaps a vanished
-- server's session after three of these intervals, so a shorter interval
-- hands a dead server's pipelines over sooner; at least 1s.
-- `session_timeout` overrides that reaping bound (at least twice
-- validate_every): how long a frozen or cut-off server's locks outlive its
-- silence. "server" leaves the database's own wait_timeout (8 hours by
-- default): its pipelines then wait that long. Default: 3 × validate_every.
--   locks { validate_every = "30s", session_timeout = "2m" }
locks { validate_every = "30s" }

-- Where builds, deploys and restarts happen.
--   "simulated": a simulated cluster kept in the database (the demo and the
--                test scenarios use it): every build takes `build`, every
--                deploy `deploy`, every rollout completes after `rollout`.
--                Defaults 2s, 0s, 1s.
--   "exec":      runs each application's build/deploy/health/restart_command
--                (see apps.lua); `workdir` sets where relative commands run
--                (default: the directory of these policy files; a relative workdir is taken from there).
--     gateway "exec" { workdir = "/srv/deploy" }
gateway "simulated" { build = "2s", deploy = "0s", rollout = "1s" }

-- Where pipeline events and alerts go. Several routes may be given, in one
-- notify block or several:
--   notify { webhook = "http://127.0.0.1:9000/hook" }   -- POST, JSON body
--   notify { command = { "/usr/local/bin/page", "--team", "shop" } }
--   notify { log = true }                               -- oopsd's own log
-- Delivery is retried from `initial` up to `max` between attempts (defaults
-- 1s and 1m) until the receiver accepts; each message carries a stable id
-- so a receiver can drop duplicates. Default when no route is named: log.
notify { log = true, retry = { initial = "1s", max = "1m" } }

-- Resource alerts (off unless declared). Declaring the block turns them on;
-- thresholds are a percentage of each application's limits (apps.lua), and
-- must hold for `sustained` before an alert fires; a firing alert repeats
-- every `every`. Defaults: cpu 95% for 10m, memory 90% for 5m, every 30m.
--   alert {
--     cpu    = { percent = 95, sustained = "10m" },
--     memory = { percent = 90, sustained = "5m" },
--     every  = "30m",
--     probe  = { prometheus = "http://127.0.0.1:9090", scrape_interval = "30s" },
--   }

-- Scheduled restarts (the schedules themselves are in apps.lua). Cron is
-- read in `timezone`, the same on every server whatever its host's TZ (so
-- a leader change never moves a restart); `grace` is how late a restart may
-- still fire after its minute (e.g. while the restart leader changes hands).
-- Whether one is due is judged on the database's clock. Defaults: UTC, 2m.
--   restarts { timezone = "Europe/Paris", grace = "2m" }

-- History kept (durations, or "forever"): a finished pipeline with all of
-- it after `pipelines`; finished pipelines' events and command logs after
-- `events` and `logs`; delivered notifications after `outbox`; finished
-- restart runs after `restarts`. One server deletes older rows every minute,
-- in small batches; nothing of an unfinished pipeline, no undelivered
-- notification, nor the live (newest SUCCEEDED) release is ever deleted.
-- Defaults: pipelines 180d, events 180d, logs 30d, outbox 30d, restarts 90d.
--   retention { pipelines = "365d", logs = "7d", outbox = "forever" }

-- Hooks are plain functions the engine calls; known ones:
--   on_build_lost(pipeline)  -- a RUNNING pipeline's build job has vanished
--   on_transition(pipeline)  -- after each status change this server makes
