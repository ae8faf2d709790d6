-- The engine: the scans, run by tasks at the running policy's cadence.
-- The C daemon calls load (start and SIGHUP), start, stop and
-- on_locks_reconnected; everything else happens in scan tasks.
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

local M = {}

local current        -- { policy = p, gateway = gw }
local running = false

-- Scans: name → module with run(policy, gateway) and the interval it wants.
-- The restart scan ticks at the start of every minute, or of every second when
-- a schedule has a seconds field; the alert scan at the start of every minute;
-- the notifier every second (its retries are scheduled in the outbox).
local leader = require("oops.leader")
M.scans = {
  { mod = "oops.scans.build", interval = function(p) return p.scan.interval_ms end },
  { mod = "oops.scans.rollout", interval = function(p) return p.scan.interval_ms end },
  { mod = "oops.scans.restart", interval = function(p)
      return leader.until_next(require("oops.scans.restart").needs_seconds(p) and 1000 or 60000)
    end },
  { mod = "oops.scans.alert", interval = function(p)
      local every = p.alert.interval_ms or 60000
      return every == 60000 and leader.until_next(60000) or every
    end },
  { mod = "oops.scans.notify", interval = function() return 1000 end },
}

function M.policy() return current and current.policy end
function M.gateway() return current and current.gateway end

-- Load and validate every policy file in dir; when apply, make it the
-- running policy. true | false, {errors}.
function M.load(dir, apply)
  local p, errs = policy.load_dir(dir, { cron_parse = oops.cron.parse })
  if not p then return false, errs end
  local ok, gw = pcall(gateway.new, p, current and current.gateway)
  if not ok then return false, { tostring(gw) } end
  if apply then
    current = { policy = p, gateway = gw }
    hooks.set(p.hooks)
    oops.locks.set_validate_interval(p.locks.validate_every_ms)
  end
  return true
end

local function labels(name) return { scan = name } end

-- One scan's life: tick, sleep the policy's interval, tick again. Never
-- overlaps itself (one task per scan); an error in a tick is caught, logged
-- with its traceback, counted, and the next tick runs.
local function loop(def)
  local scan = require(def.mod)
  local name = scan.name
  while running do
    local cur = current
    if oops.locks.is_up() then
      local t0 = oops.now_ms()
      local ok, err = xpcall(scan.run, debug.traceback, cur.policy, cur.gateway)
      oops.metrics.inc("oops_scan_runs_total", labels(name))
      oops.metrics.observe("oops_scan_duration_seconds", labels(name), (oops.now_ms() - t0) / 1000)
      if not ok then
        oops.metrics.inc("oops_scan_errors_total", labels(name))
        log.failure("scan", err, { scan = name })
      end
    end
    if not oops.sleep(def.interval(current.policy)) then break end
  end
end

function M.start()
  running = true
  for _, def in ipairs(M.scans) do
    oops.task("scan " .. def.mod:match("[^.]+$"), loop, def)
  end
end

-- SIGTERM: start no new tick; in-flight ticks finish (the daemon waits, bounded).
function M.stop()
  running = false
  local gw = current and current.gateway
  if gw and gw.stop then gw.stop() end
end

function M.on_locks_reconnected() end

return M
