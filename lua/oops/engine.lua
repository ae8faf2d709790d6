-- The engine: the scans, run by tasks at the running policy's cadence.
-- The C daemon calls load (start and SIGHUP), start and stop; everything
-- else happens in scan tasks.
--
-- A reload swaps the running policy atomically between ticks: each tick reads
-- `current` once at its start and uses that policy to its end, so a scan never
-- sees half of one policy and half of another. A changed cadence applies
-- from the next tick.
local oops = require("oops")
local log = require("oops.log")
local policy = require("oops.policy")
local gateway = require("oops.gateway")
local hooks = require("oops.hooks")
local web = require("oops.web")
local watch = require("oops.watch")

local M = {}

local current        -- { policy = p, gateway = gw }
local running = false

-- Scans: name → module with run(policy, gateway) and the interval it wants.
-- The restart scan ticks at the start of every minute, or of every second when
-- a schedule has a seconds field; the alert scan at the start of every minute;
-- the notifier every second (its retries are scheduled in the outbox); the
-- gauges of shared state (stats) every 15 s; retention (deleting expired
-- history, one leader) every minute, every ten after a tick that found
-- nothing; promotion (one leader) when the first candidate is due, at most
-- every 10 s while the policy has a promotion, else every minute reading
-- nothing. All but promotion on the database's clock, so that the
-- server's own connection is free for them when the watcher's wait ends
-- (lua/oops/watch.lua): an idle server needs no second work connection.
local leader = require("oops.leader")
M.scans = {
  { mod = "oops.scans.build", rate = true, interval = function(p) return p.scan.interval_ms end },
  { mod = "oops.scans.rollout", rate = true, interval = function(p) return p.scan.interval_ms end },
  { mod = "oops.scans.restart", interval = function(p)
      return leader.until_next(require("oops.scans.restart").needs_seconds(p) and 1000 or 60000)
    end },
  { mod = "oops.scans.alert", interval = function(p)
      local every = p.alert.interval_ms -- a whole minute: aligned to the clock's minutes
      return every == 60000 and leader.until_next(60000) or every
    end },
  { mod = "oops.scans.notify", interval = function() return 1000 end },
  { mod = "oops.scans.stats",
    interval = function() return leader.until_next(require("oops.scans.stats").INTERVAL_MS) end },
  { mod = "oops.scans.retention",
    interval = function() return leader.until_next(require("oops.scans.retention").interval_ms()) end },
  { mod = "oops.scans.promote", interval = function() return require("oops.scans.promote").interval_ms() end },
}

function M.policy() return current and current.policy end
function M.gateway() return current and current.gateway end

-- Load and validate every policy file in dir; when apply, make it the
-- running policy; simulate: oopsd --simulate's webhook URL (policy/init.lua).
-- true | false, {errors}.
local said_simulated = false
function M.load(dir, apply, simulate)
  local p, errs = policy.load_dir(dir, { cron_parse = oops.cron.parse, simulate = simulate })
  if not p then return false, errs end
  if apply and p.simulated and not said_simulated then
    said_simulated = true
    log.warn("simulating (--simulate): the simulated gateway and alert probe, every notification " ..
      "a webhook to " .. require("oops.url").show(simulate) .. "; nothing real is run")
  end
  local ok, gw = pcall(gateway.new, p, current and current.gateway)
  if not ok then return false, { tostring(gw) } end
  if apply then
    current = { policy = p, gateway = gw }
    hooks.set(p.hooks)
    oops.locks.set_validate_interval(p.locks.validate_every_ms, p.locks.session_timeout)
  end
  return true
end

local function labels(name) return { scan = name } end

-- Tick durations as a Prometheus histogram, so a median or a p99 can be read
-- from /metrics (bench/run does): oops_scan_duration_seconds_bucket{scan, le}
-- counts the ticks that took at most `le` seconds (cumulative; le="+Inf"
-- counts them all); oops_scan_duration_seconds_sum and _count the rest.
M.DURATION_BUCKETS = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60 }
oops.metrics.describe("oops_scan_duration_seconds", "histogram", "scan tick durations")
local bucket_labels = {} -- scan name → label tables, one per bucket and +Inf (made once)

function M.observe_duration(name, seconds)
  local ls = bucket_labels[name]
  if not ls then
    ls = {}
    for i, le in ipairs(M.DURATION_BUCKETS) do ls[i] = { scan = name, le = ("%g"):format(le) } end
    ls[#ls + 1] = { scan = name, le = "+Inf" }
    bucket_labels[name] = ls
    for _, l in ipairs(ls) do oops.metrics.inc("oops_scan_duration_seconds_bucket", l, 0) end -- every bucket shown
  end
  oops.metrics.observe("oops_scan_duration_seconds", labels(name), seconds)
  for i = #ls, 1, -1 do
    local le = M.DURATION_BUCKETS[i]
    if le and seconds > le then break end
    oops.metrics.inc("oops_scan_duration_seconds_bucket", ls[i])
  end
end

-- How long to sleep after a tick. A `rate` scan (build, rollout) ticks at the
-- multiples of its interval on the database's clock (db_ms: the database's
-- time now in ms; default this server's clock plus the measured offset), 5 ms
-- after the watcher's answer (lua/oops/watch.lua ends its wait just before):
-- so a tick reads a fresh answer, and a build finishing just after a tick is
-- seen one interval later, not one interval plus the tick's duration. It rests
-- at least a tenth of the interval when a tick ran long. The others compute
-- their own (aligned to the clock).
function M.pause(def, pol, _t0, _now, db_ms)
  local interval = def.interval(pol)
  if not def.rate then return interval end
  db_ms = db_ms or (oops.time() + leader.offset_s) * 1000
  local ms = math.floor(interval - (db_ms % interval)) + 5
  if ms < interval // 10 then ms = ms + interval end
  return ms
end

-- A scan's run returns pipelines.MORE when it left work it could take at
-- once (it took its whole share of new pipelines, scan.max_new, and more were
-- free): its next tick starts as soon as this one ends, not at the next
-- multiple of its interval. Under a backlog a server drives at the speed of
-- its ticks, not of its cadence; a tick's work stays bounded by max_new, and
-- an idle or merely busy server (nothing left to take) keeps its cadence.
M.MORE = require("oops.pipelines").MORE

-- Scans inside a tick now: the watcher parks the server's own connection
-- only once they are done (their calls need it), or a while after its answer.
local ticking = 0

-- Sleep ms, or less when the watcher wakes this scan (something to do for it);
-- not at all when it woke the scan during its tick. false once the daemon stops.
-- The watcher's wake interrupts the scan's own sleep (its timer stopped with
-- it): a nap once slept in a task of its own and a wake left that task and
-- its timer behind until the full pause ended (hundreds at a time while the
-- watcher woke a leader scan each round).
local function nap(name, ms)
  if watch.woken(name) then return not oops.stopping() end
  local me = oops.current()
  watch.on_wake(name, function() oops.interrupt(me) end)
  local slept = oops.sleep(ms)
  watch.on_wake(name, nil)
  return slept
end

-- One scan's life: tick, sleep until the next, tick again. Never overlaps
-- itself (one task per scan); an error in a tick is caught, logged with its
-- traceback, counted, and the next tick runs.
local function loop(def)
  local scan = require(def.mod)
  local name = scan.name
  oops.metrics.inc("oops_scan_errors_total", labels(name), 0) -- shown from the start, so rate() sees the first
  while running do
    local cur = current
    local t0 = oops.now_ms()
    local more = false
    if oops.locks.is_up() then
      ticking = ticking + 1
      local ok, err = xpcall(scan.run, debug.traceback, cur.policy, cur.gateway)
      ticking = ticking - 1
      more = ok and err == M.MORE
      oops.metrics.inc("oops_scan_runs_total", labels(name))
      M.observe_duration(name, (oops.now_ms() - t0) / 1000)
      if not ok then
        oops.metrics.inc("oops_scan_errors_total", labels(name))
        log.failure("scan", err, { scan = name })
      end
    end
    local pause = more and 0 or M.pause(def, current.policy, t0, oops.now_ms())
    if more then oops.metrics.inc("oops_scan_backlog_ticks_total", labels(name)) end
    if not nap(name, pause) then break end
  end
end

function M.start()
  running = true
  for _, def in ipairs(M.scans) do
    oops.task("scan " .. def.mod:match("[^.]+$"), loop, def)
  end
  -- The idle server's one statement a tick, and takeovers: until M.stop.
  oops.task("watch", watch.run, M.policy, function() return running end, function() return ticking end)
  web.start(M.policy) -- the fleet page's refresher: idle until the page is asked for
end

-- The fleet page's JSON (`/api/...`), for the daemon's HTTP handler: memory
-- only, never waits (lua/oops/web.lua). `client`: the client's address (the
-- rate limits of pipeline reads). -> status, JSON text
function M.http(path, client) return web.http(path, client) end
-- Before each /metrics: the delivery gauges are refreshed in a task when stale.
function M.metrics_scraped() require("oops.stats.live").scraped(oops.now_ms()) end
-- An operator's action from the page (web.post): answered now, or later by
-- oops.http_answer(ticket, status, json).
function M.http_post(path, body, actor, ticket) return web.post(path, body, actor, ticket, oops.http_answer) end

-- SIGTERM: start no new tick; in-flight ticks finish (the daemon waits, bounded).
function M.stop()
  running = false
  local gw = current and current.gateway
  if gw and gw.stop then gw.stop() end
end

return M
