-- The simulated gateway: a cluster that lives in the database (sim_job), so
-- every server sees the same one, and that records every call it receives in
-- sim_call (pipeline_id, target, action, server, created_at) so tests can
-- count side effects. Its contract is fixed (DESIGN.md, "Policies"):
--   gateway "simulated" { build = "2s", deploy = "0s", rollout = "1s" }
-- makes every build take `build`, every deploy `deploy`, every rollout
-- complete `rollout` after the deploy. Deleting a sim_job row makes that job
-- missing; setting its outcome makes it fail:
--   build rows:   outcome 'failed' → failed, 'pending' → exists without a status
--   rollout rows: outcome = a failure reason (e.g. "ImagePullBackOff (api-0)")
-- Faults, for tests and scenarios: a sim_job row whose pipeline_id is the
-- target 'ns/app/env' and whose kind is one of fail_build_submit,
-- fail_build_status, fail_deploy, fail_rollout_health, fail_restart,
-- fail_probe makes that call fail with the row's outcome as the error text
-- (a gateway error), for every pipeline of that target, until deleted.
-- Canary weights (issue 38): set_weight records "weight:N" in sim_call and
-- the target's traffic split in sim_traffic (which lua/oops/scenario/traffic.lua
-- serves to a real Prometheus as per-track request counters); weight(p)
-- reads it back. Faults: fail_set_weight; slow_set_weight (outcome =
-- milliseconds slept after the split is applied: a driver killed then has
-- set the weight without knowing it).
local oops = require("oops")

local M = {}

-- Every statement this gateway sends goes through exec, which counts it, so
-- bench/run can tell the engine's round trips from the simulator's.
oops.metrics.describe("oops_sim_statements_total", "counter",
  "statements sent by the simulated gateway (a stand-in for a real one; bench/run subtracts them)")

local function exec(sql, ...)
  oops.metrics.inc("oops_sim_statements_total")
  return oops.db.exec(sql, ...)
end

-- Its rows go through oops.db.insert: the same row from many pipelines at
-- once is one statement (counted by the binding in
-- oops_db_insert_statements_total, per table).
local SIM_JOB_UPSERT = "ON DUPLICATE KEY UPDATE started_at = VALUES(started_at), " ..
  "ready_at = VALUES(ready_at), outcome = NULL, server = VALUES(server)"

local function target(p) return p.namespace .. "/" .. p.application .. "/" .. p.environment end

local function record(pipeline_id, tgt, action)
  return oops.db.insert("INSERT INTO sim_call (pipeline_id, target, action, server)", "(?, ?, ?, ?)", "",
    pipeline_id, tgt, action, oops.server_name())
end

-- The injected error for this target and call, or nil. A point read that
-- other pipelines' calls meanwhile share (oops.db.lookup).
local function fault(tgt, call)
  local rows = oops.db.lookup("SELECT pipeline_id, outcome FROM sim_job WHERE kind = 'fail_" .. call ..
    "' AND pipeline_id IN (?)", tgt)
  return rows and rows[1] and (rows[1].outcome or "simulated failure") or nil
end

-- A job's row (nil when missing) and the outcome of a fault injected for
-- this status call (nil when none, or when it has no outcome), or nil, nil, err.
local function job_and_fault(p, kind, call, cols)
  local rows, err = oops.db.lookup("SELECT pipeline_id, outcome, NOW(6) >= ready_at AS ready" .. (cols or "") ..
    " FROM sim_job WHERE kind = '" .. kind .. "' AND pipeline_id IN (?)", p.id)
  if not rows then return nil, nil, err end
  local faults, ferr = oops.db.lookup("SELECT pipeline_id, outcome FROM sim_job WHERE kind = 'fail_" .. call ..
    "' AND pipeline_id IN (?)", target(p))
  if not faults then return nil, nil, ferr end
  return rows[1], faults[1] and faults[1].outcome
end

function M.new(cfg)
  local gw = { kind = "simulated" }
  local build_us = (cfg.build_ms or 2000) * 1000
  local deploy_ms = cfg.deploy_ms or 0
  local rollout_us = (cfg.rollout_ms or 1000) * 1000

  function gw.build_submit(p)
    local ok, err = record(p.id, target(p), "build_submit")
    if not ok then return nil, err end
    local f = fault(target(p), "build_submit")
    if f then return nil, f end
    ok, err = oops.db.insert("INSERT INTO sim_job (pipeline_id, kind, started_at, ready_at, outcome, server)",
      "(?, 'build', NOW(6), NOW(6) + INTERVAL ? MICROSECOND, NULL, ?)", SIM_JOB_UPSERT,
      p.id, build_us, oops.server_name())
    if not ok then return nil, err end
    return true
  end

  function gw.build_status(p)
    local job, fault_outcome, err = job_and_fault(p, "build", "build_status")
    if err then return nil, err end
    if fault_outcome then return nil, fault_outcome end
    if not job then return "missing" end
    if job.outcome == "pending" then return "pending" end
    if job.outcome == "failed" then return "failed" end
    if job.outcome == "stopped" then return "failed" end
    if job.ready == 1 then return "succeeded" end
    return "running"
  end

  function gw.build_stop(p)
    local ok, err = record(p.id, target(p), "build_stop")
    if not ok then return nil, err end
    ok, err = exec(
      "UPDATE sim_job SET outcome = 'stopped' WHERE pipeline_id = ? AND kind = 'build'", p.id)
    if not ok then return nil, err end
    return true
  end

  -- Builds still running for a STOPPED or ERROR pipeline (their driver died
  -- before stopping them): the rollout scan stops them (scans/rollout.lua).
  function gw.build_orphans(limit)
    local rows, err = exec(
      "SELECT j.pipeline_id AS id FROM sim_job j JOIN pipeline p ON p.id = j.pipeline_id " ..
      "WHERE j.kind = 'build' AND p.status IN ('STOPPED', 'ERROR') " ..
      "AND (j.outcome = 'pending' OR (j.outcome IS NULL AND NOW(6) < j.ready_at)) " ..
      "ORDER BY j.pipeline_id LIMIT ?", limit or 100)
    if not rows then return nil, err end
    local ids = {}
    for i, r in ipairs(rows) do ids[i] = r.id end
    return ids
  end

  function gw.deploy(p)
    local ok, err = record(p.id, target(p), "deploy")
    if not ok then return nil, err end
    local f = fault(target(p), "deploy")
    if f then return nil, f end
    if deploy_ms > 0 then oops.sleep(deploy_ms) end
    ok, err = oops.db.insert("INSERT INTO sim_job (pipeline_id, kind, started_at, ready_at, outcome, server)",
      "(?, 'rollout', NOW(6), NOW(6) + INTERVAL ? MICROSECOND, NULL, ?)", SIM_JOB_UPSERT,
      p.id, rollout_us, oops.server_name())
    if not ok then return nil, err end
    return true
  end

  function gw.rollout_health(p)
    local job, fault_outcome, err = job_and_fault(p, "rollout", "rollout_health",
      ", TIMESTAMPDIFF(MICROSECOND, started_at, NOW(6)) / 1e6 AS age")
    if err then return nil, err end
    if fault_outcome then return nil, fault_outcome end
    if not job then return { missing = true } end
    if job.outcome then return { failure = job.outcome } end
    if job.ready == 1 then return { complete = true } end
    return { not_ready_for = job.age }
  end

  function gw.set_weight(p, weight)
    local tgt = target(p)
    local f = fault(tgt, "set_weight")
    if f then return nil, f end
    -- Recorded when applied (a failed call changes no split).
    local ok, err = record(p.id, tgt, "weight:" .. weight)
    if not ok then return nil, err end
    -- The split applies to this release's artifact; at 100 it is the
    -- stable one from now on.
    ok, err = exec("INSERT INTO sim_traffic (namespace, application, environment, weight, canary_artifact, " ..
      "stable_artifact) VALUES (?, ?, ?, ?, ?, IF(? = 100, ?, NULL)) ON DUPLICATE KEY UPDATE " ..
      "weight = VALUES(weight), canary_artifact = VALUES(canary_artifact), " ..
      "stable_artifact = IF(VALUES(weight) = 100, VALUES(canary_artifact), stable_artifact)",
      p.namespace, p.application, p.environment, weight, p.artifact, weight, p.artifact)
    if not ok then return nil, err end
    local slow = fault(tgt, "slow_set_weight")
    if slow and tonumber(slow) then oops.sleep(math.floor(tonumber(slow))) end
    return true
  end

  -- The weight this release's artifact gets now: 0 when the split names
  -- another artifact (or none).
  function gw.weight(p)
    local rows, err = exec("SELECT weight, canary_artifact FROM sim_traffic WHERE namespace = ? AND " ..
      "application = ? AND environment = ?", p.namespace, p.application, p.environment)
    if not rows then return nil, err end
    local r = rows[1]
    if not r or r.canary_artifact ~= p.artifact then return 0 end
    return r.weight
  end

  function gw.restart(app, env)
    local tgt = app .. "/" .. env
    local ok, err = record(nil, tgt, "restart")
    if not ok then return nil, err end
    local f = fault(tgt, "restart")
    if f then return nil, f end
    -- A slow target, for tests: kind 'slow_restart', outcome = milliseconds.
    local slow = exec("SELECT outcome FROM sim_job WHERE pipeline_id = ? AND kind = 'slow_restart'", tgt)
    if slow and slow[1] and tonumber(slow[1].outcome) then oops.sleep(math.floor(tonumber(slow[1].outcome))) end
    return true
  end

  -- Firing pods for a target { namespace, application, environment, metric,
  -- threshold }: the one simulated probe, shared with the alert scan.
  function gw.probe(t) return require("oops.probes.simulated").probe(t) end

  return gw
end

return M
