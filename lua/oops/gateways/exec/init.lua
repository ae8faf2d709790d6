-- The exec gateway as an object: a Gateway per policy, the state it keeps
-- per pipeline (handed to the next one at a reload), the processes it runs
-- and how it stops them; M.new binds gateway.lua's interface to it.
--
-- The exec gateway runs each application's build, deploy, health and
-- restart commands from the policy as child processes on the loop (argv
-- only, never a shell), each with its timeout (DESIGN.md, "The engine").
--
--   application "shop/api" {
--     build   = { "./build.sh", "TAG={artifact}" },  deploy = { ... },
--     health  = { ... },  restart_command = { ... },
--     timeouts = { build = "30m", deploy = "5m", health = "30s", restart = "1m" },
--   }
--
-- or, for a build that must outlive the server that started it (see
-- exec/external_builds.lua):
--     build = { submit = { "./ci", "submit", "{id}", "{source.ref}" },
--               status = { "./ci", "status", "{job}" },
--               cancel = { "./ci", "cancel", "{job}" } },
--
-- The gateway's other parts, one concept a file:
--   exec/argv.lua             placeholders: every argv built from a pipeline's
--                             fields, refused where a field would be an option
--   exec/apps.lua             an application of the policy: found by name, its
--                             timeouts, working directory and environment
--   exec/logs.lua             what a command run leaves: its output, the line
--                             naming its end, its pipeline_log row
--   exec/builds.lua           build_submit, build_status, exec_job, and the
--                             one-command build run here in the background
--   exec/external_builds.lua  external builds: submit, status, cancel
--   exec/deploys.lua          deploys, health checks and restarts
-- require("oops.gateways.exec") is this module: new, Gateway, the tunables
-- (OUTPUT_CAP, KILL_GRACE_MS, MEMO_CAP) and, from the files above,
-- substitute, refusal, check_handle, values, argv_json, status_verdict and
-- health_verdict.
--
-- Stopping: build_stop (the sweep, for a STOPPED pipeline) sends SIGTERM to
-- the process group of every command this server runs for the pipeline
-- (build, deploy, health), SIGKILL after KILL_GRACE_MS. At shutdown stop()
-- sends SIGTERM to every build and waits for them within oopsd's drain.
local oops = require("oops")
local log = require("oops.log")
local apps = require("oops.gateways.exec.apps")
local placeholders = require("oops.gateways.exec.argv")
local logs = require("oops.gateways.exec.logs")
local working_dir, env_for = apps.working_dir, apps.env_for
local tail = logs.tail
local job_row = require("oops.gateways.exec.builds").job_row

local M = {}

-- Output kept per command run, from its end.
M.OUTPUT_CAP = 64 * 1024
-- After SIGTERM, a stopped pipeline's processes get this long before SIGKILL.
M.KILL_GRACE_MS = 5000

local SIGTERM, SIGKILL = 15, 9

M.substitute, M.refusal, M.check_handle = placeholders.substitute, placeholders.refusal, placeholders.check_handle
M.values = placeholders.values
M.argv_json = logs.argv_json
M.status_verdict = require("oops.gateways.exec.external_builds").status_verdict
M.health_verdict = require("oops.gateways.exec.deploys").health_verdict

-- Past this many entries, a memo (below) drops those of pipelines this
-- server no longer holds, and all of them if that leaves more than half.
M.MEMO_CAP = 10000

local PIPELINE_LOCK = oops.locks.names.pipeline_prefix
local function held(id) return oops.locks.holds(PIPELINE_LOCK .. id) end

-- What was logged last per pipeline (status_seen, health): only there to
-- keep the log small (a verdict is logged when it changes), so losing an
-- entry costs one more log row. An entry goes when its build or rollout
-- ends in any way (verdict, stop, release), when its pipeline's lock is no
-- longer held (Gateway:prune, every rollout tick: let go, swept, lost with
-- the lock session, taken by another server), and past M.MEMO_CAP entries.
local Memo = {}
Memo.__index = Memo

local function memo() return setmetatable({ n = 0, t = {} }, Memo) end

function Memo:get(id) return self.t[id] end

function Memo:del(id)
  if self.t[id] ~= nil then self.t[id], self.n = nil, self.n - 1 end
end

function Memo:prune(keep)
  for id in pairs(self.t) do
    if not keep(id) then self:del(id) end
  end
end

function Memo:set(id, v)
  if v == nil then return self:del(id) end
  if self.t[id] == nil then
    if self.n >= M.MEMO_CAP then
      self:prune(held)
      if self.n > M.MEMO_CAP // 2 then self.t, self.n = {}, 0 end
    end
    self.n = self.n + 1
  end
  self.t[id] = v
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

-- SIGTERM now, SIGKILL after the grace if it is still there.
local function terminate(handle, what)
  handle:kill(SIGTERM)
  oops.task("exec kill " .. what, function()
    oops.sleep(M.KILL_GRACE_MS) -- returns at once when oopsd is stopping
    if handle:running() then handle:kill(SIGKILL) end
  end)
end

------------------------------------------------------------ the gateway
--
-- A Gateway is the exec gateway of one policy: `policy`, `cwd` (where its
-- commands run), and the state below, which outlives a policy reload — the
-- new gateway takes over these very tables (a build started before the
-- reload records its end in them):
--   builds[id] = { handle, run = { argv, result?, output? }, stopped?, shutdown?, logged? }
--                (until its end is recorded in exec_job, or its process has
--                ended and the pipeline is no longer held: Gateway:prune)
--   procs[id][step] = handle of a deploy/health command being waited for
--                (while it is waited for)
--   submitting[id] = true while this server runs an external build's submit
--   health = Memo: the last health verdict logged
--   status_seen = Memo: the last external status verdict logged
--   stopping.waiter = the task of Gateway:stop, waiting for the builds it
--                sent SIGTERM (while it waits)
local Gateway = {}
Gateway.__index = Gateway
M.Gateway = Gateway

local CARRIED = { "builds", "procs", "submitting", "health", "status_seen", "stopping" }

local function new_state()
  return { builds = {}, procs = {}, submitting = {}, health = memo(), status_seen = memo(), stopping = {} }
end

-- What the engine calls (gateway.lua's interface, with a dot: gw.deploy(p)):
-- M.new binds each to its Gateway.
local INTERFACE = { "build_submit", "build_status", "build_stop", "build_orphans", "release", "prune", "memory",
  "deploy", "rollout_health", "set_weight", "restart", "stop" }

-- The gateway for `policy`: the interface's functions, `kind`, and `exec`,
-- its Gateway (whose methods tests call directly). `previous`, the gateway
-- this one replaces (any kind), hands its state over when it is an exec one.
function M.new(cfg, policy, previous)
  if type(policy) ~= "table" then error("exec gateway: expects the policy table", 2) end
  local state = previous and previous.exec or new_state()
  local self = setmetatable({ policy = policy, cwd = working_dir(cfg, policy) }, Gateway)
  for _, k in ipairs(CARRIED) do self[k] = state[k] end
  local gw = { kind = "exec", exec = self }
  for _, name in ipairs(INTERFACE) do
    -- A tail call: errors a method raises at level 3 (app_of) still name the scan.
    local method = Gateway[name]
    gw[name] = function(...) return method(self, ...) end
  end
  return gw
end

------------------------------------------------------------- processes

-- Start argv in the background: handle | nil, err; and the run. on_exit(run)
-- runs as a task.
function Gateway:start(argv, values, step, timeout_ms, on_exit)
  local run = { argv = argv, timeout_ms = timeout_ms, started = oops.now_ms() }
  local out = tail(M.OUTPUT_CAP)
  local a = self.policy.applications[(values.namespace or "") .. "/" .. (values.application or "")]
  local handle, err = oops.proc.start {
    argv = argv, cwd = self.cwd, env = env_for(values, step, a and a.env), timeout_ms = timeout_ms,
    max_output = M.OUTPUT_CAP,
    on_output = function(_, data) out:add(data) end,
    on_exit = function(r)
      run.result, run.output = r, out:text()
      run.duration_ms = oops.now_ms() - run.started
      on_exit(run)
    end,
  }
  if not handle then
    run.err = err
    return nil, err, run
  end
  return handle, nil, run
end

-- Run argv and wait in this task; tracked under procs[id][step] so a stop
-- can kill it. The finished run ({argv, result?, err?, output}) always.
function Gateway:run_wait(argv, values, step, timeout_ms)
  local me = oops.current()
  if not me then error("exec gateway: " .. step .. " must be called from a task", 3) end
  local done, waiting
  local handle, _, run = self:start(argv, values, step, timeout_ms, function()
    done = true
    if waiting then oops.wake(me) end
  end)
  if not handle then return run end
  local id, procs = values.pipeline, self.procs
  if id ~= "" then
    procs[id] = procs[id] or {}
    procs[id][step] = handle
  end
  if not done then
    waiting = true
    oops.suspend()
  end
  if id ~= "" and procs[id] then
    procs[id][step] = nil
    if next(procs[id]) == nil then procs[id] = nil end
  end
  return run
end

-- SIGTERM (SIGKILL after the grace) every deploy or health command this
-- server waits for on pipeline p; `why` follows "<step> stopped" in the log.
function Gateway:stop_commands(p, why)
  for step, handle in pairs(self.procs[p.id] or {}) do
    terminate(handle, p.id .. " " .. step)
    log.info(step .. " stopped" .. why .. ": process group " .. handle:pid() .. " sent SIGTERM", { pipeline = p.id })
  end
end

-- Forget the verdicts logged last for pipeline id.
function Gateway:forget(id)
  self.health:del(id)
  self.status_seen:del(id)
end

------------------------------------------------ stopping, forgetting

-- Kill every process of the pipeline this server runs (build, deploy,
-- health), and mark its build stopped.
function Gateway:build_stop(p)
  local job = self.builds[p.id]
  if job and job.handle and not job.run.result then
    job.stopped = true
    terminate(job.handle, p.id)
    log.info("build stopped: process group " .. job.handle:pid() .. " sent SIGTERM", { pipeline = p.id })
  end
  self:stop_commands(p, "")
  self:forget(p.id)
  local row, rerr = job_row(p.id)
  if row == nil then return nil, rerr end
  if row and row.mode == "external" then return self:external_stop(p, row) end
  local ok, err = oops.db.exec(
    "UPDATE exec_job SET state = 'stopped', finished_at = COALESCE(finished_at, NOW(6)) " ..
    "WHERE pipeline_id = ? AND kind = 'build' AND mode = 'local' AND state = 'running'", p.id)
  if not ok then return nil, err end
  return true
end

-- The pipeline is finished (ERROR, or SUCCEEDED): stop the commands this
-- server still runs for it (a deploy or health check that outlived a
-- timeout) before its lock is released.
function Gateway:release(p)
  self:stop_commands(p, " (the pipeline is " .. tostring(p.status) .. ")")
  self:forget(p.id)
  return true
end

-- Forget what this server remembers of pipelines whose lock it no longer
-- holds (the rollout scan calls it every tick): the memos, and builds
-- whose process has ended (their end recorded once more, else left to
-- the next driver, which reads the build as missing). A build still
-- running stays: its process is this server's to stop.
function Gateway:prune()
  self.health:prune(held)
  self.status_seen:prune(held)
  for id, job in pairs(self.builds) do
    if job.run.result and not job.finishing and not held(id) then -- (one being written is left to its writer)
      if not self:finish_build(id, job) and self.builds[id] == job then
        log.warn("exec: the build's end could not be recorded; forgotten (its pipeline is no longer held)",
          { pipeline = id })
        self.builds[id] = nil
      end
    end
  end
end

-- How many entries each per-pipeline table holds (tests: they stay bounded).
function Gateway:memory()
  return { builds = count(self.builds), procs = count(self.procs), submitting = count(self.submitting),
    health = self.health.n, status_seen = self.status_seen.n }
end

-- Whether a build Gateway:stop sent SIGTERM has not ended yet.
local function shutting_down(builds)
  for _, job in pairs(builds) do
    if job.shutdown then return true end
  end
  return false
end

-- oopsd is stopping: SIGTERM every build, then wait (in a task, which the
-- daemon's drain waits for, bounded) until they have exited and been
-- logged. Their exec_job rows stay 'running': the next driver finds no such
-- process and fails the pipeline as "build job missing".
function Gateway:stop()
  local n = 0
  for id, job in pairs(self.builds) do
    if job.handle and not job.run.result then
      job.shutdown = true
      job.handle:kill(SIGTERM)
      n = n + 1
      log.info("stopping: build process group " .. job.handle:pid() .. " sent SIGTERM", { pipeline = id })
    end
  end
  if n == 0 then return end
  oops.task("exec shutdown", function()
    self.stopping.waiter = oops.current()
    while shutting_down(self.builds) do oops.suspend() end
    self.stopping.waiter = nil
  end)
end

-- The methods of the other files (builds, external builds, deploys and
-- health) join these, each name once.
for _, part in ipairs({ "builds", "external_builds", "deploys" }) do
  for name, method in pairs(require("oops.gateways.exec." .. part).Gateway) do
    assert(Gateway[name] == nil, name)
    Gateway[name] = method
  end
end

return M
