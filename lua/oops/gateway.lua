-- The gateway the scans talk to, built from the running policy. The same
-- engine drives a cluster, shell commands or the simulator through one
-- interface (DESIGN.md, "The engine"):
--   build_submit(p) → true | nil, err        build_status(p) → "running" | "succeeded" |
--   build_stop(p)   → true | nil, err          "failed" | "pending" | "missing" | nil, err
--   deploy(p)       → true | nil, err        rollout_health(p) → {missing} | {failure=} |
--   restart(app, env) → true | nil, err        {complete} | {not_ready_for=s} | nil, err
--   probe(target)   → {pods} | nil, err
-- A failure may carry a third value, "invalid": the gateway refused to run
-- a command for it (an argument that would be taken for an option:
-- exec/argv.lua's M.substitute). The scans fail the pipeline at once with
-- messages.refused, rather than asking again.
-- Optional:
--   build_orphans(limit) → { pipeline id... } | nil, err: STOPPED or ERROR
--     pipelines whose build still runs (their driver died before stopping
--     it); the rollout scan takes each one's lock and calls build_stop.
--   release(p) → true: p is finished (ERROR, SUCCEEDED); stop whatever this
--     server still runs for it, before its lock is released.
--   prune(): forget what the gateway keeps per pipeline for pipelines whose
--     lock this server no longer holds (the rollout scan, every tick).
--   set_weight(p, weight) → true | nil, err: a canary's share of the
--     traffic, 0-100 (issue 38: lua/oops/canary.lua); idempotent.
--   weight(p) → integer | nil, err: the share p's release gets now (0 when
--     the split names another release), for an heir deciding whether a
--     weight was set; a gateway that cannot say has none.
local M = {}

local kinds = {
  simulated = "oops.gateways.simulated",
  exec = "oops.gateways.exec",
}

-- A new gateway for policy p; the previous one (if any) is handed over so a
-- gateway that keeps state (exec's running processes) survives a reload.
function M.new(p, previous)
  local mod = kinds[p.gateway.kind]
  if not mod then error("gateway \"" .. tostring(p.gateway.kind) .. "\" is not available") end
  return require(mod).new(p.gateway, p, previous)
end

return M
