-- The exec gateway's builds: build_submit and build_status, the exec_job
-- row every build keeps (an external one's commands are in
-- external_builds.lua), and the one-command build, which runs here.
--
-- One-command builds run in the background (build_submit returns at once).
-- Such a build process belongs to this server: exec_job records (pipeline,
-- 'build', mode 'local', server, state), and a row still 'running' that this
-- server's memory does not know (its server died or restarted) reads as
-- "missing" — the build scan then fails the pipeline at once (the seed's
-- rule). That is the documented limit of the one-command form; external
-- builds (three commands, mode 'external') have none: any server polls the
-- job by the handle recorded in exec_job.
--
-- M.Gateway holds this file's methods; exec/init.lua puts them into its
-- Gateway.
local oops = require("oops")
local log = require("oops.log")
local apps = require("oops.gateways.exec.apps")
local placeholders = require("oops.gateways.exec.argv")
local logs = require("oops.gateways.exec.logs")
local app_of, app_name, timeout_of = apps.app_of, apps.app_name, apps.timeout_of
local substitute, pipeline_values = placeholders.substitute, placeholders.values
local log_run, outcome = logs.log_run, logs.outcome

local M = {}
local Gateway = {}
M.Gateway = Gateway

-- Pipeline id's build row (exec_job): the row, false when there is none,
-- or nil, err.
local function job_row(pipeline_id)
  local rows, err = oops.db.exec(
    "SELECT mode, state, server, handle, cancel_state, " ..
    "TIMESTAMPDIFF(MICROSECOND, started_at, NOW(6)) DIV 1000 AS age_ms " ..
    "FROM exec_job WHERE pipeline_id = ? AND kind = 'build'", pipeline_id)
  if not rows then return nil, err end
  return rows[1] or false
end
M.job_row = job_row

-- A one-command build that could not start (or was refused) on server me.
local function local_job_failed(pipeline_id, me)
  oops.db.exec("UPDATE exec_job SET state = 'failed', finished_at = NOW(6) " ..
    "WHERE pipeline_id = ? AND kind = 'build' AND server = ?", pipeline_id, me)
end

-- Record a finished build: its log first (so "see the pipeline log" finds
-- it), then its state, unless it was stopped or abandoned at shutdown.
-- The entry stays in memory until the state is written (build_status
-- retries): true when it is written. Two callers may meet here — the exit
-- callback waiting on its INSERT while the build scan asks the status — so
-- one writes and the other sees "not yet" (false): one log row per run.
function Gateway:finish_build(id, job)
  if job.finishing then return false end
  job.finishing = true
  local done = self:write_build_end(id, job)
  job.finishing = nil
  return done
end

function Gateway:write_build_end(id, job)
  local run = job.run
  if not job.logged then
    if job.shutdown then run.note = "oopsd on " .. oops.server_name() .. " shut down"
    elseif job.stopped then run.note = "the pipeline was stopped" end
    job.logged = true
    log_run(id, "build", run)
  end
  if not (job.shutdown or job.stopped) then
    local st = run.result.ok and "succeeded" or "failed"
    local r = run.result
    local ok, err = oops.db.exec(
      "UPDATE exec_job SET state = ?, exit_status = ?, finished_at = NOW(6) " ..
      "WHERE pipeline_id = ? AND kind = 'build' AND server = ? AND state = 'running'",
      st, (r.signal == 0 and not r.timed_out) and r.status or nil, id, oops.server_name())
    if not ok then
      log.warn("exec: recording the build's end failed (retried): " .. tostring(err), { pipeline = id })
      return false
    end
    log.info("build " .. st .. ": " .. outcome(r, run.timeout_ms), { pipeline = id })
  end
  if self.builds[id] == job then self.builds[id] = nil end
  if job.shutdown and self.stopping.waiter then oops.wake(self.stopping.waiter) end
  return true
end

-- An application without a build command: its build trivially succeeded.
local function nothing_to_build(p, me)
  local ok, err = oops.db.exec(
    "INSERT INTO exec_job (pipeline_id, kind, server, state, exit_status, started_at, finished_at) " ..
    "VALUES (?, 'build', ?, 'succeeded', 0, NOW(6), NOW(6)) ON DUPLICATE KEY UPDATE " ..
    "server = VALUES(server), state = 'succeeded', exit_status = 0, started_at = NOW(6), finished_at = NOW(6)",
    p.id, me)
  if not ok then return nil, err end
  return true
end

-- A one-command build: its exec_job row first (the exit callback's
-- conditional UPDATE needs it), then its process, in the background.
function Gateway:local_submit(p, a, me)
  local ok, err = oops.db.exec(
    "INSERT INTO exec_job (pipeline_id, kind, mode, server, state, submits, started_at) " ..
    "VALUES (?, 'build', 'local', ?, 'running', 1, NOW(6)) ON DUPLICATE KEY UPDATE server = VALUES(server), " ..
    "mode = 'local', state = 'running', handle = NULL, submits = submits + 1, exit_status = NULL, " ..
    "started_at = NOW(6), finished_at = NULL",
    p.id, me)
  if not ok then return nil, err end
  local values = pipeline_values(p)
  local argv, why, kind = substitute(a.build, values)
  if not argv then
    local_job_failed(p.id, me)
    return nil, "build " .. why, kind == "invalid" and "invalid" or nil
  end
  local job = {}
  local handle, serr, run = self:start(argv, values, "build", timeout_of(a, "build"), function(r)
    job.run = r
    self:finish_build(p.id, job)
  end)
  job.run = run
  if not handle then
    log_run(p.id, "build", run)
    local_job_failed(p.id, me)
    return nil, serr
  end
  job.handle = handle
  self.builds[p.id] = job
  log.info("build started (pid " .. handle:pid() .. ")", { pipeline = p.id })
  return true
end

function Gateway:build_submit(p)
  local a, aerr = app_of(self.policy, app_name(p))
  if not a then return nil, aerr end
  if a.build and a.build.external then return self:external_submit(p, a) end
  local current = self.builds[p.id]
  if current and not current.run.result then return true end -- already running here
  local me = oops.server_name()
  if not a.build then return nothing_to_build(p, me) end
  return self:local_submit(p, a, me)
end

function Gateway:build_status(p)
  local job = self.builds[p.id]
  if job then
    if job.run.result then self:finish_build(p.id, job) end -- an earlier write failed: retry
    if self.builds[p.id] == job then return "running" end
  end
  local row, err = job_row(p.id)
  if row == nil then return nil, err end
  if not row then return "missing" end
  if row.mode == "external" then return self:external_status(p, row) end
  if row.state == "succeeded" or row.state == "failed" then return row.state end
  if row.state == "stopped" then return "failed" end
  -- 'running' without a process here: its server died or restarted.
  return "missing"
end

return M
