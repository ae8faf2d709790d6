-- The exec gateway's external builds: three commands, submit, status and
-- cancel (AGENTS.md, "External builds").
--
-- build = { submit = {...}, status = {...}, cancel = {...} }: the build
-- runs elsewhere and any server can ask about it. exec_job holds what
-- every server needs (mode 'external'):
--   state    submitting → running (handle known) → succeeded | failed |
--            missing | stopped; 'submitting' while submit runs;
--   handle   the job handle submit printed (its last output line);
--   submits  how many times submit was started (1, or more only through
--            on_build_lost = "resubmit" after the job went missing);
--   cancel_state, cancel_server, cancels: the one cancel claim.
-- Submitting: one row per pipeline (its primary key), so a second submit
-- for the same pipeline finds the row and runs nothing. A server that died
-- while its submit ran leaves 'submitting': after the submit timeout (and
-- 5 s) any driver reads the job as missing — whether it started is unknown.
-- Cancelling: one conditional UPDATE claims it; the winner runs cancel once
-- and records how it ended; a failed cancel is logged, not retried.
-- SIGTERM of oopsd never cancels: the next driver polls the same job.
--
-- M.Gateway holds this file's methods; exec/init.lua puts them into its
-- Gateway.
local oops = require("oops")
local log = require("oops.log")
local apps = require("oops.gateways.exec.apps")
local placeholders = require("oops.gateways.exec.argv")
local logs = require("oops.gateways.exec.logs")
local app_of, app_name, timeout_of = apps.app_of, apps.app_name, apps.timeout_of
local substitute, check_handle = placeholders.substitute, placeholders.check_handle
local pipeline_values = placeholders.values
local log_run, describe = logs.log_run, logs.describe

local M = {}
local Gateway = {}
M.Gateway = Gateway

-- Move an external build's row from one state to another (a conditional
-- UPDATE: true when this call moved it).
local function job_move(pipeline_id, from, to, exit_status)
  local r, err = oops.db.exec(
    "UPDATE exec_job SET state = ?, exit_status = COALESCE(?, exit_status), " ..
    "finished_at = CASE WHEN ? IN ('succeeded', 'failed', 'missing') THEN NOW(6) ELSE finished_at END " ..
    "WHERE pipeline_id = ? AND kind = 'build' AND state = ?", to, exit_status, to, pipeline_id, from)
  if not r then return nil, err end
  return r.affected == 1
end

-- The job handle: the last non-empty line of submit's standard output, at
-- most 255 bytes of printable text; nil, why otherwise.
local function handle_of(stdout)
  local line
  for l in (stdout or ""):gmatch("[^\r\n]+") do
    if l:match("%S") then line = l end
  end
  if not line then return nil, "it printed no job handle (the last line of its output)" end
  line = line:match("^%s*(.-)%s*$")
  if #line > 255 then return nil, "its job handle (last output line) is longer than 255 bytes" end
  if line:find("[%c\127]") then return nil, "its job handle (last output line) holds a control character" end
  if not utf8.len(line) then return nil, "its job handle (last output line) is not UTF-8" end
  return line
end

local function ext_values(p, handle)
  local values = pipeline_values(p)
  values.job = handle
  return values
end

-- Run one of the three commands and wait: the finished run, or nil, why,
-- kind (a placeholder could not be filled, or was refused: nothing ran;
-- kind "invalid" for a refusal, as substitute says).
function Gateway:ext_run(p, a, cmd, handle)
  local values = ext_values(p, handle)
  local argv, why, kind = substitute(a.build[cmd], values)
  if not argv then return nil, "build." .. cmd .. " " .. why, kind == "invalid" and "invalid" or nil end
  return self:run_wait(argv, values, "build", timeout_of(a, cmd))
end

-- Claim the submission of pipeline id's external build for server me: true
-- when submit is to run here, false when it was submitted before (or is
-- being), nil, err.
local function claim_submission(id, me)
  local r, err, name = oops.db.exec(
    "INSERT INTO exec_job (pipeline_id, kind, mode, server, state, submits, started_at) " ..
    "VALUES (?, 'build', 'external', ?, 'submitting', 1, NOW(6))", id, me)
  if r then return true end
  if name ~= "exists" then return nil, err end
  -- Submitted before (or being): only a job that went missing is
  -- submitted again (on_build_lost = "resubmit").
  local moved, merr = oops.db.exec(
    "UPDATE exec_job SET state = 'submitting', server = ?, handle = NULL, submits = submits + 1, " ..
    "exit_status = NULL, cancel_state = NULL, started_at = NOW(6), finished_at = NULL " ..
    "WHERE pipeline_id = ? AND kind = 'build' AND mode = 'external' AND state = 'missing'", me, id)
  if not moved then return nil, merr end
  return moved.affected == 1
end

-- The job handle a submit run printed: handle, or nil, why (why nil when
-- the run did not succeed: submit_failure names that).
local function submitted_handle(p, a, run)
  if not (run.result and run.result.ok) then return nil end
  local handle, herr = handle_of(run.result.stdout or run.output)
  local bad = handle and check_handle(a.build, ext_values(p, handle), handle)
  if bad then
    return nil, "printed a job handle that is refused (status and cancel are never run with it): " .. bad
  end
  return handle, herr
end

-- Why a submit run gave no handle (herr: submitted_handle's why).
local function submit_failure(p, run, herr)
  if not run.result then return "build submit command did not start: " .. tostring(run.err) end
  if not run.result.ok then return describe("build submit", run.result, run.timeout_ms) end
  log.error("build submit command " .. herr, { pipeline = p.id })
  return "build submit command " .. herr
end

-- The job is submitted: its handle goes into exec_job.
local function record_handle(p, handle, me)
  local ok, uerr = oops.db.exec(
    "UPDATE exec_job SET state = 'running', handle = ? " ..
    "WHERE pipeline_id = ? AND kind = 'build' AND state = 'submitting' AND server = ?", handle, p.id, me)
  if not ok then
    -- The job exists but its handle is not recorded: the next driver reads
    -- 'submitting' as missing after the submit timeout. Say so loudly.
    log.error("build submitted as " .. handle .. " but recording its handle failed: " .. tostring(uerr),
      { pipeline = p.id })
    return nil, "recording the job handle " .. handle .. " failed: " .. tostring(uerr)
  end
  log.info("build submitted: job " .. handle, { pipeline = p.id })
  return true
end

function Gateway:external_submit(p, a)
  local me = oops.server_name()
  local claimed, cerr = claim_submission(p.id, me)
  if claimed == nil then return nil, cerr end
  if not claimed then return true end -- already submitted: never twice
  self.submitting[p.id] = true
  local done, run, why, kind = pcall(self.ext_run, self, p, a, "submit")
  self.submitting[p.id] = nil
  if not done then error(run, 0) end
  if not run then
    job_move(p.id, "submitting", "failed")
    return nil, why, kind
  end
  log_run(p.id, "build", run)
  local handle, herr = submitted_handle(p, a, run)
  if not handle then
    job_move(p.id, "submitting", "failed")
    return nil, submit_failure(p, run, herr)
  end
  return record_handle(p, handle, me)
end

-- What build.status's exit means: 0 succeeded, 1 running, 2 missing, 3
-- failed; nil for anything else (another code, a signal, the timeout, or
-- no result: it did not start).
local STATUS_VERDICTS = { [0] = "succeeded", [1] = "running", [2] = "missing", [3] = "failed" }
function M.status_verdict(r)
  if r and r.signal == 0 and not r.timed_out then return STATUS_VERDICTS[r.status] end
  return nil
end

-- A job whose submit runs, or ran on a server that died while it did.
function Gateway:submitting_status(p, row, a)
  if self.submitting[p.id] then return "pending" end
  if (row.age_ms or 0) < timeout_of(a, "submit") + 5000 then return "pending" end
  log.warn("build submission interrupted (its server stopped while submit ran): reading the job as missing",
    { pipeline = p.id })
  local moved, merr = job_move(p.id, "submitting", "missing")
  if moved == nil then return nil, merr end
  return "missing"
end

-- Ask build.status about a running job.
function Gateway:poll_job(p, a, row)
  local run, why, kind = self:ext_run(p, a, "status", row.handle)
  if not run then
    self.status_seen:del(p.id)
    return nil, why, kind
  end
  local r = run.result
  local verdict = M.status_verdict(r)
  -- Log a change only: a build polled every scan for hours stays small.
  local seen = verdict or "error"
  if self.status_seen:get(p.id) ~= seen then log_run(p.id, "build", run) end
  self.status_seen:set(p.id, seen)
  if not verdict then
    if not r then return nil, "build status command did not start: " .. tostring(run.err) end
    return nil, describe("build status", r, run.timeout_ms)
  end
  if verdict == "running" then return "running" end
  self.status_seen:del(p.id)
  local moved, merr = job_move(p.id, "running", verdict, r.status)
  if moved == nil then return nil, merr end
  log.info("build " .. verdict .. " (job " .. tostring(row.handle) .. ")", { pipeline = p.id })
  return verdict
end

function Gateway:external_status(p, row)
  local a, aerr = app_of(self.policy, app_name(p))
  if not a then return nil, aerr end
  if row.state == "succeeded" or row.state == "failed" or row.state == "missing" then return row.state end
  if row.state == "stopped" then return "failed" end
  if row.state == "submitting" then return self:submitting_status(p, row, a) end
  if not (a.build and a.build.external) then
    return nil, "the build was submitted as an external job, but the policy no longer declares build.status"
  end
  return self:poll_job(p, a, row)
end

-- Record how the one cancel of pipeline id's job (claimed by server me) ended.
local function record_cancel(id, me, ok)
  oops.db.exec(
    "UPDATE exec_job SET cancel_state = ?, cancelled_at = NOW(6), " ..
    "state = CASE WHEN ? THEN 'stopped' ELSE state END, finished_at = COALESCE(finished_at, NOW(6)) " ..
    "WHERE pipeline_id = ? AND kind = 'build' AND cancel_server = ?",
    ok and "cancelled" or "failed", ok and true or false, id, me)
end

function Gateway:external_stop(p, row)
  if row.state ~= "running" or row.cancel_state then return true end -- nothing to cancel
  local me = oops.server_name()
  local claim, err = oops.db.exec(
    "UPDATE exec_job SET cancel_state = 'cancelling', cancel_server = ?, cancels = cancels + 1 " ..
    "WHERE pipeline_id = ? AND kind = 'build' AND mode = 'external' AND state = 'running' " ..
    "AND cancel_state IS NULL", me, p.id)
  if not claim then return nil, err end
  if claim.affected ~= 1 then return true end -- another server cancels it
  local a = app_of(self.policy, app_name(p))
  local run, why
  if a and a.build and a.build.external then
    run, why = self:ext_run(p, a, "cancel", row.handle)
  else
    why = "the policy no longer declares build.cancel for " .. tostring(p.namespace) .. "/" ..
      tostring(p.application)
  end
  if run then log_run(p.id, "build", run) end
  local ok = run and run.result and run.result.ok
  record_cancel(p.id, me, ok)
  if ok then
    log.info("build cancelled: job " .. tostring(row.handle), { pipeline = p.id })
  else
    local reason = why or (run.result and describe("build cancel", run.result, run.timeout_ms)) or
      ("build cancel command did not start: " .. tostring(run.err))
    -- Recorded and logged; not called again (one cancel per build).
    log.error("cancelling job " .. tostring(row.handle) .. " failed (not retried): " .. reason,
      { pipeline = p.id })
  end
  return true
end

-- Finished pipelines (STOPPED, ERROR) whose external build was never
-- cancelled: their driver died before it could. The rollout scan takes
-- each one's lock and calls build_stop; at most `limit` rows.
function Gateway.build_orphans(_, limit)
  local rows, err = oops.db.exec(
    "SELECT j.pipeline_id AS id FROM exec_job j JOIN pipeline p ON p.id = j.pipeline_id " ..
    "WHERE j.kind = 'build' AND j.mode = 'external' AND j.state = 'running' " ..
    "AND j.cancel_state IS NULL AND p.status IN ('STOPPED', 'ERROR') ORDER BY j.pipeline_id LIMIT ?",
    limit or 100)
  if not rows then return nil, err end
  local ids = {}
  for i, r in ipairs(rows) do ids[i] = r.id end
  return ids
end

return M
