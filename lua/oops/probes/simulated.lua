-- The simulated probe: a pod fires when its row in sim_metric (its current
-- usage, in millicores or bytes) is above the target's threshold. Like every
-- call into the simulated cluster it is recorded in sim_call (action
-- 'probe', target "ns/app/env", the calling server), and a sim_job row
-- (pipeline_id 'ns/app/env', kind 'fail_probe') makes it fail with that
-- row's outcome as the error text. There is no time series here, so the
-- sustained window does not apply: the table holds what is sustained.
local oops = require("oops")

local M = {}

local function where(t) return t.namespace .. "/" .. t.application .. "/" .. t.environment end

-- target: { namespace, application, environment, metric, threshold }.
-- The firing pods (sorted), or nil, err.
function M.probe(t)
  local tgt = where(t)
  local ok, err = oops.db.exec(
    "INSERT INTO sim_call (pipeline_id, target, action, server) VALUES (NULL, ?, 'probe', ?)",
    tgt, oops.server_name())
  if not ok then return nil, err end
  -- One statement for the injected fault and the pods above the threshold.
  local rows, perr = oops.db.exec(
    "SELECT (SELECT f.outcome FROM sim_job f WHERE f.pipeline_id = ? AND f.kind = 'fail_probe') AS fault, " ..
    "(SELECT COUNT(*) FROM sim_job f WHERE f.pipeline_id = ? AND f.kind = 'fail_probe') AS faulted, " ..
    "m.pod FROM (SELECT 1) one LEFT JOIN sim_metric m ON m.namespace = ? AND m.application = ? " ..
    "AND m.environment = ? AND m.metric = ? AND m.value > ? ORDER BY m.pod",
    tgt, tgt, t.namespace, t.application, t.environment, t.metric, t.threshold)
  if not rows then return nil, perr end
  if rows[1].faulted > 0 then return nil, rows[1].fault or "simulated failure" end
  local pods = {}
  for _, r in ipairs(rows) do
    if r.pod then pods[#pods + 1] = r.pod end
  end
  return pods
end

return M
