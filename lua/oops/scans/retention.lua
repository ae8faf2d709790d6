-- The retention scan (issue 14, "History"): deletes history older than the
-- policy's `retention` block, so the tables do not grow for ever.
--
--   * One leader: the sticky lock oops:leader:retention. Two would only race
--     for the same rows, but one is enough and keeps the row locks few.
--   * Small batches: every DELETE touches at most BATCH rows (ORDER BY ...
--     LIMIT), a kind makes at most MAX_BATCHES rounds per tick, and no
--     transaction spans statements, so each statement's row locks are few and
--     short. What a tick leaves is taken by the next one.
--   * Ages on the database's clock (NOW(6)), never this host's.
--   * Never deleted: an unfinished pipeline or anything of one (the status is
--     tested in the same statement as the age); an undelivered outbox row, nor
--     the event and the pipeline it announces (the notifier reads them); the
--     newest SUCCEEDED pipeline of each target (the live release, and what a
--     rollback and `oopsctl history` start from); an unfinished restart claim.
--   * A pipeline goes last, after its children (the delivered outbox rows of
--     its events, events, logs, exec_job, sim_job, sim_call, canary_measurement): a tick stopped
--     half way leaves the pipeline, found again next tick, never an orphan.
--
-- Kinds (policy.retention.KIND_ms, false = "forever"):
--   pipelines  finished pipelines past it in their final status, with all of them
--   events     the events of finished pipelines past it (pipelines kept longer)
--   logs       the command logs of finished pipelines past it
--   outbox     outbox rows delivered longer ago than it
--   restarts   finished restart_run rows, and sim_call rows of no pipeline
--   audit      operator_action rows (the operators' audit log) older than it
--
-- /metrics: oops_retention_deleted_total{table} rows deleted, per table.
local oops = require("oops")
local log = require("oops.log")
local leader = require("oops.leader")

local M = { name = "retention" }
local SCAN = "retention"
local LOCK = leader.lock(SCAN)
M.LOCK = LOCK

M.INTERVAL_MS = 60000
-- After a tick that deleted nothing, the next comes this much later (an idle
-- fleet's leader sends its dozen DELETEs every ten minutes, not every minute;
-- retention windows are days, issue 24).
M.IDLE_INTERVAL_MS = 600000
local idle = false -- the last tick deleted nothing

-- The wait before the next tick (the engine aligns it to the clock).
function M.interval_ms() return idle and M.IDLE_INTERVAL_MS or M.INTERVAL_MS end
M.BATCH = 500              -- rows per DELETE statement
M.PIPELINES_PER_BATCH = 50 -- pipelines whose children one round deletes
M.MAX_BATCHES = 20         -- rounds per kind per tick
-- The events and logs candidates walk finished pipelines from a cursor (so
-- pipelines already stripped of their logs are not read again every tick);
-- a pipeline held back by an undelivered notification is behind the cursor
-- once delivered, so the cursor starts over this often.
M.RESTART_CURSOR_MS = 3600000

M.TABLES = { "pipeline", "pipeline_event", "pipeline_log", "outbox", "exec_job", "sim_job", "sim_call",
  "canary_measurement", "restart_run", "operator_action" }
M.FINISHED = { "SUCCEEDED", "ERROR", "STOPPED" }

oops.metrics.describe("oops_retention_deleted_total", "counter",
  "rows deleted by the retention scan (policy retention), per table")

-- What the last tick did, for tests: statements run, rows deleted per table.
M.last_tick = nil

local function placeholders(n) return ("?, "):rep(n - 1) .. "?" end

local AGE = "p.status_changed_at < NOW(6) - INTERVAL ? MICROSECOND"
-- An undelivered outbox row announcing one of p's events: p is kept.
local HELD = "EXISTS (SELECT 1 FROM outbox o JOIN pipeline_event he ON he.id = o.ref_id " ..
  "WHERE o.delivered_at IS NULL AND o.kind = 'pipeline' AND he.pipeline_id = p.id)"
-- p succeeded last of its target: the live release (pipeline_store's
-- current release; on a tie of status_changed_at, all of them are kept).
local LIVE = "(p.status = 'SUCCEEDED' AND NOT EXISTS (SELECT 1 FROM pipeline q WHERE " ..
  "q.namespace = p.namespace AND q.application = p.application AND q.environment = p.environment " ..
  "AND q.status = 'SUCCEEDED' AND q.status_changed_at > p.status_changed_at))"
local AFTER = " AND (p.status_changed_at > ? OR (p.status_changed_at = ? AND p.id > ?))"

-- Candidate pipelines of a kind: finished, past the age, and (pipelines)
-- neither held nor live, (events) not held with events left, (logs) with logs
-- left. Events and logs walk from a cursor: pipelines kept longer than their
-- events would otherwise be read again every tick.
local CANDIDATES = {
  pipelines = " AND NOT " .. HELD .. " AND NOT " .. LIVE,
  events = " AND NOT " .. HELD .. " AND EXISTS (SELECT 1 FROM pipeline_event x WHERE x.pipeline_id = p.id)",
  logs = " AND EXISTS (SELECT 1 FROM pipeline_log x WHERE x.pipeline_id = p.id)",
}
local CURSOR = { events = true, logs = true }

local cursors = {} -- kind -> { at = status_changed_at text, id = id } while this server leads
local cursor_since -- oops.now_ms() when the cursors last started over

local Tick = {}
Tick.__index = Tick

local function new_tick()
  local t = setmetatable({ statements = 0, deleted = {} }, Tick)
  for _, name in ipairs(M.TABLES) do t.deleted[name] = 0 end
  return t
end

-- Run one DELETE; count its rows. Raises on a database error (the tick is
-- logged and counted failed; the next one carries on).
function Tick:delete(table_name, sql, ...)
  local res, err = oops.db.exec(sql, ...)
  if not res then error(("deleting from %s: %s"):format(table_name, tostring(err)), 0) end
  self.statements = self.statements + 1
  local n = res.affected or 0
  if n > 0 then
    self.deleted[table_name] = self.deleted[table_name] + n
    oops.metrics.inc("oops_retention_deleted_total", { table = table_name }, n)
  end
  return n
end

-- Repeat a DELETE ... LIMIT BATCH until it deletes fewer than BATCH rows.
-- false when stopped for shutdown.
function Tick:drain(table_name, sql, ...)
  while self:delete(table_name, sql .. " LIMIT ?", ...) >= M.BATCH do
    if oops.stopping() then return false end
  end
  return true
end

-- The values of several lists, as one list (for binding).
local function join(...)
  local out = {}
  for _, list in ipairs({ ... }) do table.move(list, 1, #list, #out + 1, out) end
  return out
end

-- One query per finished status, each read in the order of the index
-- (status, status_changed_at) and stopped by its LIMIT, merged here: one query
-- with `status IN (...)` made MariaDB sort every expired pipeline before its
-- LIMIT (seconds with half a million of them, the loop blocked meanwhile).
local function candidates(kind, keep_ms, limit)
  local c = cursors[kind]
  local sql = "SELECT p.id, p.status_changed_at FROM pipeline p WHERE p.status = ? AND " .. AGE ..
    CANDIDATES[kind] .. (c and AFTER or "") ..
    " ORDER BY p.status_changed_at, p.id LIMIT ?"
  local rows = {}
  for _, status in ipairs(M.FINISHED) do
    local a = join({ status, keep_ms * 1000 }, c and { c.at, c.at, c.id } or {}, { limit })
    local part, err = oops.db.exec(sql, table.unpack(a))
    if not part then error(("reading expired pipelines (%s): %s"):format(kind, tostring(err)), 0) end
    table.move(part, 1, #part, #rows + 1, rows)
  end
  table.sort(rows, function(x, y)
    if x.status_changed_at ~= y.status_changed_at then return x.status_changed_at < y.status_changed_at end
    return x.id < y.id
  end)
  for i = #rows, limit + 1, -1 do rows[i] = nil end
  if #rows > 0 and CURSOR[kind] then cursors[kind] = { at = rows[#rows].status_changed_at, id = rows[#rows].id } end
  local ids = {}
  for i, r in ipairs(rows) do ids[i] = r.id end
  return ids
end

-- The delivered outbox rows announcing events of these pipelines: before the
-- events, so no outbox row ever points at a deleted event. Undelivered ones
-- are never deleted (their pipelines are not candidates).
function Tick:outbox_of(ids)
  local rows, err = oops.db.exec("SELECT id FROM pipeline_event WHERE pipeline_id IN (" ..
    placeholders(#ids) .. ")", table.unpack(ids))
  if not rows then error("reading events: " .. tostring(err), 0) end
  for first = 1, #rows, M.BATCH do
    local evs = {}
    for i = first, math.min(#rows, first + M.BATCH - 1) do evs[#evs + 1] = rows[i].id end
    self:delete("outbox", "DELETE FROM outbox WHERE kind = 'pipeline' AND delivered_at IS NOT NULL " ..
      "AND ref_id IN (" .. placeholders(#evs) .. ")", table.unpack(evs))
  end
end

function Tick:children(ids, tables)
  local list = placeholders(#ids)
  for _, t in ipairs(tables) do
    local order = ({ pipeline_event = "pipeline_id, id", pipeline_log = "pipeline_id, id",
      exec_job = "pipeline_id, kind", sim_job = "pipeline_id, kind", sim_call = "id",
      canary_measurement = "pipeline_id, step, n" })[t]
    if not self:drain(t, "DELETE FROM " .. t .. " WHERE pipeline_id IN (" .. list .. ") ORDER BY " .. order,
      table.unpack(join(ids, { M.BATCH }))) then
      return false
    end
  end
  return true
end

-- One kind keyed by pipelines: rounds of candidates, their rows deleted.
function Tick:pipelines(kind, keep_ms)
  for _ = 1, M.MAX_BATCHES do
    local ids = candidates(kind, keep_ms, M.PIPELINES_PER_BATCH)
    if #ids == 0 then return end
    if kind == "pipelines" then
      self:outbox_of(ids)
      if not self:children(ids, { "pipeline_event", "pipeline_log", "exec_job", "sim_job", "sim_call",
        "canary_measurement" }) then
        return
      end
      self:delete("pipeline", "DELETE FROM pipeline WHERE id IN (" .. placeholders(#ids) .. ") AND status IN (" ..
        placeholders(#M.FINISHED) .. ")", table.unpack(join(ids, M.FINISHED)))
    elseif kind == "events" then
      self:outbox_of(ids)
      if not self:children(ids, { "pipeline_event" }) then return end
    else
      if not self:children(ids, { "pipeline_log" }) then return end
    end
    if #ids < M.PIPELINES_PER_BATCH or oops.stopping() then return end
  end
end

-- A kind that is one table: rounds of DELETE ... ORDER BY ... LIMIT.
function Tick:rows(table_name, sql, ...)
  for _ = 1, M.MAX_BATCHES do
    if self:delete(table_name, sql .. " LIMIT ?", ...) < M.BATCH or oops.stopping() then return end
  end
end

function M.run(pol)
  if not leader.hold(LOCK, SCAN) then
    cursors, cursor_since = {}, nil
    return
  end
  local r = pol.retention
  if not r then return end
  if not cursor_since or oops.now_ms() - cursor_since >= M.RESTART_CURSOR_MS then
    cursors, cursor_since = {}, oops.now_ms()
  end
  local t = new_tick()
  M.last_tick = t
  if not M.counted then -- every table shown from the start, so rate() sees the first deletion
    for _, name in ipairs(M.TABLES) do oops.metrics.inc("oops_retention_deleted_total", { table = name }, 0) end
    M.counted = true
  end
  if r.pipelines_ms then t:pipelines("pipelines", r.pipelines_ms) end
  if r.events_ms then t:pipelines("events", r.events_ms) end
  if r.logs_ms then t:pipelines("logs", r.logs_ms) end
  if r.outbox_ms then
    t:rows("outbox", "DELETE FROM outbox WHERE delivered_at IS NOT NULL AND " ..
      "delivered_at < NOW(6) - INTERVAL ? MICROSECOND ORDER BY delivered_at", r.outbox_ms * 1000, M.BATCH)
  end
  if r.restarts_ms then
    t:rows("restart_run", "DELETE FROM restart_run WHERE finished_at IS NOT NULL AND " ..
      "finished_at < NOW(6) - INTERVAL ? MICROSECOND ORDER BY finished_at", r.restarts_ms * 1000, M.BATCH)
    t:rows("sim_call", "DELETE FROM sim_call WHERE pipeline_id IS NULL AND " ..
      "created_at < NOW(6) - INTERVAL ? MICROSECOND ORDER BY created_at", r.restarts_ms * 1000, M.BATCH)
  end
  if r.audit_ms then
    t:rows("operator_action", "DELETE FROM operator_action WHERE " ..
      "created_at < NOW(6) - INTERVAL ? MICROSECOND ORDER BY created_at", r.audit_ms * 1000, M.BATCH)
  end
  local parts = {}
  for _, name in ipairs(M.TABLES) do
    if t.deleted[name] > 0 then parts[#parts + 1] = name .. "=" .. t.deleted[name] end
  end
  if #parts > 0 then
    log.info("retention: deleted " .. table.concat(parts, " "), { scan = SCAN, statements = t.statements })
  end
  idle = #parts == 0
end

-- Forget the cursors (tests: rows inserted behind them).
function M.reset() cursors, cursor_since = {}, nil end

return M
