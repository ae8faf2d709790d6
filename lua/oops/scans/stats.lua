-- Gauges of the shared state, for monitoring (contrib/prometheus/oopsd.rules.yml
-- alerts on them). Every server reads the same numbers from the database, so
-- a rule takes their max and still works with any server down:
--
--   oops_pipelines{status}                  unfinished pipelines in each status
--   oops_pipeline_oldest_seconds{status}    how long the oldest of them has been
--                                           in that status (0: none), on the
--                                           database's clock
--   oops_pipeline_timeout_seconds{status}   the running policy's bound on that
--                                           status: build.timeout (RUNNING),
--                                           deploy.timeout (DEPLOYING), rollout.max
--                                           (ROLLING_OUT); past it plus a scan, a
--                                           driven pipeline has been failed
--   oops_notifications_pending              outbox rows not yet delivered to every route
--   oops_notifications_oldest_pending_seconds  age of the oldest of them (0: none)
--   oops_leader{scan}                       1 while this server holds that scan's
--                                           leader lock (restart, alert, notify)
--
-- One statement per tick (two indexed reads), on every server whose /metrics
-- is read.
local oops = require("oops")

local M = { name = "stats" }

M.INTERVAL_MS = 15000
-- The statuses a pipeline is not finished in (BUILD_SUCCEEDED: a manual
-- pipeline waiting for `oopsctl deploy`, as long as its operator likes).
M.STATUSES = { "INITIALIZED", "RUNNING", "BUILD_SUCCEEDED", "DEPLOYING", "ROLLING_OUT" }

local HELP = {
  { "oops_pipelines", "unfinished pipelines by status (the whole database)" },
  { "oops_pipeline_oldest_seconds", "time the oldest pipeline in each status has spent in it (0: none)" },
  { "oops_pipeline_timeout_seconds", "the policy's bound on a status: build.timeout, deploy.timeout, rollout.max" },
  { "oops_notifications_pending", "outbox rows not yet delivered to every route" },
  { "oops_notifications_oldest_pending_seconds", "age of the oldest undelivered outbox row (0: none)" },
  { "oops_leader", "1 while this server holds the scan's leader lock" },
}
for _, h in ipairs(HELP) do oops.metrics.describe(h[1], "gauge", h[2]) end

-- One statement a tick: the counts by status, then the outbox's as the row
-- whose status is '' (UNION ALL: each part read by its own index).
local COUNTS = "SELECT status, COUNT(*) AS n,"
  .. " TIMESTAMPDIFF(MICROSECOND, MIN(status_changed_at), NOW(6)) AS age_us"
  .. " FROM pipeline WHERE status IN (?, ?, ?, ?, ?) GROUP BY status"
  .. " UNION ALL SELECT '' AS status, COUNT(*) AS n,"
  .. " TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) AS age_us"
  .. " FROM outbox WHERE delivered_at IS NULL"

local function seconds(us) return math.max(0, (us or 0) / 1e6) end

-- The database is read only while someone reads /metrics (within READ_MS):
-- an unmonitored server sends nothing for these gauges (issue 24). Outside
-- the daemon (specs, tools) it always reads. The first read of /metrics
-- shows the gauges of the last time someone read them (or none yet).
M.READ_MS = 120000

function M.run(pol)
  for scan, lock in pairs(oops.locks.names.leaders) do
    oops.metrics.set("oops_leader", { scan = scan }, oops.locks.holds(lock) and 1 or 0)
  end
  local ago = oops.metrics.read_ago_ms()
  if not ago or ago > M.READ_MS then return end
  local rows, err = oops.db.exec(COUNTS, table.unpack(M.STATUSES))
  if not rows then error("reading pipeline and outbox counts: " .. tostring(err)) end
  local by = {}
  for _, r in ipairs(rows) do by[r.status] = r end
  for _, status in ipairs(M.STATUSES) do
    local r = by[status]
    oops.metrics.set("oops_pipelines", { status = status }, r and r.n or 0)
    oops.metrics.set("oops_pipeline_oldest_seconds", { status = status }, seconds(r and r.age_us))
  end
  oops.metrics.set("oops_pipeline_timeout_seconds", { status = "RUNNING" }, pol.build.timeout_ms / 1000)
  oops.metrics.set("oops_pipeline_timeout_seconds", { status = "DEPLOYING" }, pol.deploy.timeout_ms / 1000)
  oops.metrics.set("oops_pipeline_timeout_seconds", { status = "ROLLING_OUT" }, pol.rollout.max_ms / 1000)
  local out = by[""] or { n = 0 }
  oops.metrics.set("oops_notifications_pending", nil, out.n)
  oops.metrics.set("oops_notifications_oldest_pending_seconds", nil, seconds(out.age_us))
end

return M
