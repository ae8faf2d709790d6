-- The alert scan's probe, chosen by the policy's alert { probe = ... }:
--   "simulated"                  → oops.probes.simulated (sim_metric)
--   { prometheus = "http://..." } → oops.probes.prometheus (HTTP API)
-- Either way: probe(target) → the pods above the threshold for the window
-- (sorted, distinct), or nil, err.
local M = {}

M.kinds = { simulated = "oops.probes.simulated", prometheus = "oops.probes.prometheus" }

-- A probe function for the policy's alert block.
function M.for_alert(alert)
  local cfg = alert.probe
  local mod = M.kinds[cfg.kind]
  if not mod then error("unknown alert probe kind " .. tostring(cfg.kind)) end
  local probe = require(mod).probe
  return function(target) return probe(target, cfg) end
end

return M
