-- The restart scan (REFERENCE.md section 7, DESIGN.md "Restart scan and
-- alert scan"): scheduled restarts, each occurrence fired exactly once across
-- servers.
--
--   * One leader: the sticky lock oops:leader:restart, taken on the first
--     tick and kept until the server stops or loses its lock session.
--     Releasing it after each tick would let another server's tick in the
--     same minute fire the same restart again.
--   * Claim, then fire: an occurrence is inserted into restart_run first; only
--     the inserter fires it. Two leaders (a frozen one waking up after its
--     session was reaped) therefore fire an occurrence once.
--   * Late, not never: an occurrence missed while no server led (a failover
--     across the minute) fires late when it is at most `grace` old; older
--     ones are recorded as missed.
--   * A claim outlives its claimer: the firing is marked started before the
--     gateway is called. A leader finds claims left unfinished by a server
--     that is gone: unstarted ones it takes over and fires late (within
--     grace), started ones it closes as "unknown" -- never fired twice.
--   * Restarts run side by side, detached from the tick: one slow or
--     unreachable target delays no other, nor the next tick.
local oops = require("oops")
local log = require("oops.log")
local leader = require("oops.leader")

local M = { name = "restart" }
local SCAN = "restart"
local LOCK = leader.lock(SCAN)
M.LOCK = LOCK
-- How far back a new leader looks for occurrences it must fire late or record
-- as missed, and how many it records as missed per target (a "* * * * * *"
-- schedule has 3,600 occurrences an hour).
local LOOKBACK_S = 3600
local MAX_MISSED = 100

local last_checked -- epoch second this server has handled up to, while it leads
local last_recovered -- when this leader last looked for claims left by a server that is gone
local RECOVER_EVERY_S = 60

-- Does any schedule have a seconds field? Then the scan ticks every second.
function M.needs_seconds(p)
  for _, a in pairs(p.applications) do
    for _, r in pairs(a.restart or {}) do
      if r.expr and r.expr:has_seconds() then return true end
    end
  end
  return false
end

local function schedules(p)
  local list = {}
  for name, a in pairs(p.applications) do
    for env, r in pairs(a.restart or {}) do
      if r.expr then
        list[#list + 1] = { app = name, namespace = a.namespace, application = a.application,
          environment = env, expr = r.expr, cron = r.cron }
      end
    end
  end
  table.sort(list, function(x, y) return x.app .. "/" .. x.environment < y.app .. "/" .. y.environment end)
  return list
end

-- Where the previous leader stopped looking (epoch seconds), or nil.
local function watermark()
  local rows = oops.db.exec("SELECT UNIX_TIMESTAMP(checked_up_to) AS t FROM restart_watermark WHERE id = 1")
  return rows and rows[1] and math.floor(tonumber(rows[1].t)) or nil
end

-- Forward only: a frozen leader waking up must not move it back.
local function advance(now)
  oops.db.exec("INSERT INTO restart_watermark (id, checked_up_to, server) VALUES (1, FROM_UNIXTIME(?), ?) " ..
    "ON DUPLICATE KEY UPDATE server = IF(FROM_UNIXTIME(?) > checked_up_to, VALUES(server), server), " ..
    "checked_up_to = GREATEST(checked_up_to, FROM_UNIXTIME(?)), updated_at = NOW(6)",
    now, oops.server_name(), now, now)
end

-- Insert the claim. true: ours to fire; false: another leader has it.
local function claim(s, t, outcome)
  local ok, err, code = oops.db.exec(
    "INSERT INTO restart_run (namespace, application, environment, occurrence, fired_by, outcome, finished_at) " ..
    "VALUES (?, ?, ?, FROM_UNIXTIME(?), ?, ?, IF(? IS NULL, NULL, NOW(6)))",
    s.namespace, s.application, s.environment, t, oops.server_name(), outcome, outcome)
  if ok then return true end
  if code ~= "exists" then -- not a duplicate: the database is in trouble; try again next tick
    error("claiming " .. s.app .. "/" .. s.environment .. ": " .. tostring(err))
  end
  return false
end

local KEY = "namespace = ? AND application = ? AND environment = ? AND occurrence = FROM_UNIXTIME(?)"

-- Occurrences this process is firing now ("ns/app/env@t"): a claim under our
-- own name that is not here was left by an earlier life of this server.
local inflight = {}

local function key_of(s, t) return s.namespace .. "/" .. s.application .. "/" .. s.environment .. "@" .. t end

-- Fire a claimed occurrence, detached from the tick. The firing is marked
-- started (conditionally: only while the claim is still ours and unstarted)
-- before the gateway is called, so a leader taking over after we died knows
-- whether the call may have gone out.
local function fire(s, t, gw)
  local when = os.date("!%Y-%m-%d %H:%M:%S", t)
  local k = key_of(s, t)
  inflight[k] = true
  oops.task("restart " .. s.app .. "/" .. s.environment, function()
    local started, err = oops.db.exec("UPDATE restart_run SET started_at = NOW(6) WHERE " .. KEY ..
      " AND fired_by = ? AND started_at IS NULL AND finished_at IS NULL",
      s.namespace, s.application, s.environment, t, oops.server_name())
    if not started or started.affected ~= 1 then
      inflight[k] = nil
      if started then
        log.info(("not restarting %s %s (%s UTC): another leader took the occurrence over"):format(
          s.app, s.environment, when), { scan = SCAN })
      else
        log.warn(("not restarting %s %s (%s UTC): marking it started failed: %s"):format(
          s.app, s.environment, when, tostring(err)), { scan = SCAN })
      end
      return
    end
    local ok, rerr = gw.restart(s.app, s.environment)
    local outcome = ok and "ok" or tostring(rerr)
    -- Ours even when a leader that thought us dead wrote "unknown: ..." meanwhile.
    oops.db.exec("UPDATE restart_run SET outcome = ?, finished_at = NOW(6) WHERE " .. KEY ..
      " AND fired_by = ? AND (finished_at IS NULL OR outcome LIKE 'unknown:%')",
      outcome, s.namespace, s.application, s.environment, t, oops.server_name())
    inflight[k] = nil
    oops.metrics.inc("oops_restarts_total", { result = ok and "ok" or "failed" })
    if ok then
      log.info("restarted " .. s.app .. " " .. s.environment .. " (" .. when .. " UTC)", { scan = SCAN })
    else
      log.warn("restart of " .. s.app .. " " .. s.environment .. " failed: " .. outcome, { scan = SCAN })
    end
  end)
end

-- Claims left unfinished by a server that is gone (or by an earlier life of
-- this one). Unstarted ones are taken over and fired late (or recorded missed
-- past the grace); started ones may have reached the gateway, so they are
-- closed as unknown rather than fired twice.
local function recover(now, p, gw, list)
  local rows = oops.db.exec("SELECT namespace, application, environment, UNIX_TIMESTAMP(occurrence) AS t, " ..
    "fired_by, started_at IS NOT NULL AS started FROM restart_run WHERE finished_at IS NULL " ..
    "ORDER BY occurrence LIMIT 1000")
  if not rows then return end
  local me, alive = oops.server_name(), {}
  local grace_s = p.restarts.grace_ms / 1000
  local by_target = {}
  for _, s in ipairs(list) do by_target[s.namespace .. "/" .. s.application .. "/" .. s.environment] = s end
  for _, r in ipairs(rows) do
    local t = math.floor(tonumber(r.t))
    local s = by_target[r.namespace .. "/" .. r.application .. "/" .. r.environment] or
      { app = r.namespace .. "/" .. r.application, namespace = r.namespace, application = r.application,
        environment = r.environment }
    local gone
    if t > now then
      gone = false -- not due yet: nobody can have claimed it honestly; leave it be
    elseif r.fired_by == me then
      gone = not inflight[key_of(s, t)]
    else
      if alive[r.fired_by] == nil then
        local l = oops.db.exec("SELECT IS_USED_LOCK(CONCAT(?, ?)) AS c", oops.locks.names.server_prefix, r.fired_by)
        alive[r.fired_by] = not l or l[1].c ~= nil -- cannot tell: leave it for the next look
      end
      gone = not alive[r.fired_by]
    end
    if gone then
      local when = os.date("!%Y-%m-%d %H:%M:%S", t)
      if tonumber(r.started) == 1 then
        local done = oops.db.exec("UPDATE restart_run SET outcome = ?, finished_at = NOW(6) WHERE " .. KEY ..
          " AND fired_by = ? AND started_at IS NOT NULL AND finished_at IS NULL",
          ("unknown: %s stopped while restarting; not fired again"):format(r.fired_by),
          r.namespace, r.application, r.environment, t, r.fired_by)
        if done and done.affected == 1 then
          oops.metrics.inc("oops_restarts_total", { result = "unknown" })
          log.warn(("restart of %s %s (%s UTC) has no outcome: %s stopped during the call; not firing it again"):format(
            s.app, r.environment, when, r.fired_by), { scan = SCAN })
        end
      else
        local late = now - t <= grace_s and s.expr ~= nil
        local took = oops.db.exec("UPDATE restart_run SET fired_by = ?, fired_at = NOW(6), outcome = ?, " ..
          "finished_at = IF(? IS NULL, NULL, NOW(6)) WHERE " .. KEY ..
          " AND fired_by = ? AND started_at IS NULL AND finished_at IS NULL",
          me, (not late) and "missed" or nil, (not late) and "missed" or nil,
          r.namespace, r.application, r.environment, t, r.fired_by)
        if took and took.affected == 1 then
          if late then
            log.info(("firing %s %s late: %s claimed its %s UTC occurrence and stopped before firing it"):format(
              s.app, r.environment, r.fired_by, when), { scan = SCAN })
            fire(s, t, gw)
          else
            oops.metrics.inc("oops_restarts_total", { result = "missed" })
            log.warn(("restart of %s %s (%s UTC) was missed: %s claimed it and stopped before firing it"):format(
              s.app, r.environment, when, r.fired_by), { scan = SCAN })
          end
        end
      end
    end
  end
end

local function handle(s, from, now, p, gw)
  local tz = p.restarts.timezone
  local grace_s = p.restarts.grace_ms / 1000
  local missed = 0
  local t = s.expr:next(from - 1, tz)
  while t and t <= now do
    if now - t <= grace_s then
      if claim(s, t) then
        if now - t >= 1 then
          log.info(("firing %s %s late: its occurrence was %ds ago (grace %ds)"):format(
            s.app, s.environment, now - t, grace_s), { scan = SCAN })
        end
        fire(s, t, gw)
      end
    elseif missed < MAX_MISSED then
      if claim(s, t, "missed") then
        missed = missed + 1
        oops.metrics.inc("oops_restarts_total", { result = "missed" })
      end
    end
    t = s.expr:next(t, tz)
  end
  if missed > 0 then
    log.warn(("%d restart(s) of %s %s were missed (older than grace, while no server led)"):format(
      missed, s.app, s.environment), { scan = SCAN })
  end
end

function M.run(p, gw)
  -- Every server measures the database's clock each tick, leader or not, so
  -- it wakes at the database's minute and a new leader's first tick is on time.
  local now_f, err = leader.db_now() -- the database's clock: every leader agrees on what is due
  if not now_f then error("reading the database's time: " .. tostring(err)) end
  if not leader.hold(LOCK, SCAN) then
    last_checked = nil -- when we lead again, look back from what is recorded
    last_recovered = nil
    return
  end
  local now = math.floor(now_f)
  local from = last_checked and last_checked + 1
  if not from then
    -- A new leader carries on where the previous one stopped looking (bounded);
    -- the very first leader starts now: nothing was due before anyone looked.
    local w = watermark()
    from = w and math.max(w + 1, now - LOOKBACK_S) or now
  end
  local list = schedules(p)
  if not last_recovered or now - last_recovered >= RECOVER_EVERY_S then
    recover(now, p, gw, list)
    last_recovered = now
  end
  for _, s in ipairs(list) do handle(s, from, now, p, gw) end
  advance(now)
  last_checked = now
end

return M
