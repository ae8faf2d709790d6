-- The exec gateway: each application's build, deploy, health and restart
-- commands from the policy, run as child processes on the loop (argv only,
-- never a shell), each with its timeout (DESIGN.md, "The engine").
--
--   application "shop/api" {
--     build   = { "./build.sh", "TAG={artifact}" },  deploy = { ... },
--     health  = { ... },  restart_command = { ... },
--     timeouts = { build = "30m", deploy = "5m", health = "30s", restart = "1m" },
--   }
--
-- or, for a build that must outlive the server that started it (see
-- "External builds" below):
--     build = { submit = { "./ci", "submit", "{id}", "{source.ref}" },
--               status = { "./ci", "status", "{job}" },
--               cancel = { "./ci", "cancel", "{job}" } },
--
-- Placeholders {id} (the pipeline id; {pipeline} also works) {namespace}
-- {application} {environment} {artifact} are replaced inside arguments by
-- plain text substitution; the values are never rescanned, so a field
-- holding "$(touch x)" or "{id}" reaches the command as that literal text
-- (but see "Pipeline fields in argv" below for what is refused).
-- Build commands also get {source} (the pipeline's --source JSON) and
-- {source.KEY} (a top-level string or integer of it); a KEY the source lacks
-- fails the step before anything runs. Unknown ones stay as written.
-- restart_command gets {namespace} {application} {environment}; {id} and
-- {artifact} are empty there.
--
-- Working directory: the gateway's `workdir` when set (a relative one is
-- taken from the policy directory), else the policy directory (the directory
-- of the policy files), else oops.policy_dir, else oopsd's own. So "./build.sh"
-- in a policy means the script next to the policy files.
--
-- Environment: what a command gets is stated once, in AGENTS.md ("The
-- environment a child process gets"; for operators oopsd.policy(5), COMMANDS'
-- ENVIRONMENT). This gateway passes the application's `env` and the OOPS_*
-- pipeline variables (env_for below) on top of oops.proc's allow-list.
--
-- Pipeline fields in argv: a placeholder never expands to an argument
-- starting with "-" unless the policy's own text starts it so, nor puts a
-- control character into one (oopsd.policy(5) promises it). M.substitute,
-- which builds every argv this gateway runs, refuses such an argument
-- (nothing runs; the step fails with kind "invalid"); M.refusal runs the
-- same expansion for every command of the application before each step
-- (pipelines.refusal), so a pipeline whose fields would do it — a source
-- value "--upload-pack=...", say — fails at once, naming the field; a job
-- handle is checked when submit prints it (M.check_handle). The engine
-- also constrains the fields themselves: namespace, application and
-- environment lowercase DNS labels declared by the policy, the id
-- [a-z0-9], the artifact not starting with "-".
--
-- One-command builds run in the background (build_submit returns at once).
-- Such a build process belongs to this server: exec_job records (pipeline,
-- 'build', mode 'local', server, state), and a row still 'running' that this
-- server's memory does not know (its server died or restarted) reads as
-- "missing" — the build scan then fails the pipeline at once (the seed's
-- rule). That is the documented limit of the one-command form; external
-- builds (three commands, mode 'external') have none: any server polls the
-- job by the handle recorded in exec_job. Deploys and health
-- checks wait in the calling task. Output (stdout and stderr interleaved,
-- the last OUTPUT_CAP bytes) goes to pipeline_log, one row per command run.
--
-- Health exit codes: 0 complete, 1 not ready yet (the rollout timeout
-- applies), 2 the workload is missing, anything else (or a signal, or the
-- timeout) a failure named by the last line of its output. Health runs are
-- logged only when the verdict changes, so a long rollout stays small.
--
-- Stopping: build_stop (the sweep, for a STOPPED pipeline) sends SIGTERM to
-- the process group of every command this server runs for the pipeline
-- (build, deploy, health), SIGKILL after KILL_GRACE_MS. At shutdown stop()
-- sends SIGTERM to every build and waits for them within oopsd's drain.
local oops = require("oops")
local log = require("oops.log")
local duration = require("oops.duration")
local json = require("oops.json")
local policy_defaults = require("oops.policy")
local show = duration.show

local M = {}

-- Output kept per command run, from its end.
M.OUTPUT_CAP = 64 * 1024
-- After SIGTERM, a stopped pipeline's processes get this long before SIGKILL.
M.KILL_GRACE_MS = 5000

local SIGTERM, SIGKILL = 15, 9

------------------------------------------------------------------- helpers

-- How a placeholder's value is named in a refusal.
local function field_of(name)
  local key = name:match("^source%.(.+)$")
  if key then return "its source's " .. show(key) end
  if name == "job" then return "its job handle" end
  if name == "pipeline" then return "its id" end
  return "its " .. name
end

-- The value of placeholder `name`: text, nil (unknown: stays as written),
-- or false, why (a {source.KEY} that cannot be filled).
local function value_of(name, values)
  local key = name:match("^source%.(.+)$")
  if not key then
    local v = values[name]
    if v == nil then return nil end
    return tostring(v)
  end
  local src = values.source_fields
  local v = type(src) == "table" and src[key] or nil
  if type(v) == "string" then return v end
  if math.tointeger(v) then return tostring(math.tointeger(v)) end -- JSON 7 (decoded as 7.0)
  return false, src == nil and "the pipeline has no source" or
    (v == nil and ("its source has no %q"):format(key) or ("its source's %q is not a string"):format(key))
end

-- Argument i of an argv, expanded: text, or nil, why, kind, name ("invalid":
-- a value holds a control character, or the expansion starts with "-" where
-- the argument as written does not; "missing": a {source.KEY} the source
-- lacks; name: the placeholder refused). A refusal names the placeholder
-- that put the "-" first: the one whose value starts the expansion, else
-- the empty one before a "-" of the policy's own text ("{artifact}-x" with
-- no artifact).
local function expand(i, arg, values)
  local parts, pos = {}, 1
  local first, lead, lead_value -- placeholders at the start: the first, the first not empty
  local empty = true            -- nothing expanded yet
  while true do
    local s, e, name = arg:find(policy_defaults.PLACEHOLDER, pos)
    local lit = arg:sub(pos, (s or #arg + 1) - 1)
    if lit ~= "" then empty = false end
    parts[#parts + 1] = lit
    if not s then break end
    local v, why = value_of(name, values)
    if v == false then return nil, ("argument %d: {%s}: %s"):format(i, name, why), "missing", name end
    if v == nil then
      v = arg:sub(s, e) -- unknown: stays as written, the policy's own text
    elseif v:find("%c") then
      return nil, ("argument %d: {%s}: %s holds a control character"):format(i, name, field_of(name)), "invalid",
        name
    elseif empty then
      first = first or name
      if v ~= "" then lead, lead_value = name, v end
    end
    if v ~= "" then empty = false end
    parts[#parts + 1] = v
    pos = e + 1
  end
  local out = table.concat(parts)
  if out:sub(1, 1) ~= "-" or arg:sub(1, 1) == "-" then return out end
  if lead then
    return nil, ('argument %d: {%s}: %s %s would start the argument with "-" (a command would take it ' ..
      "for an option)"):format(i, lead, field_of(lead), show(lead_value)), "invalid", lead
  end
  return nil, ('argument %d: {%s}: %s is empty, so the argument would start with the "-" after it ' ..
    "(a command would take it for an option)"):format(i, first, field_of(first)), "invalid", first
end

-- Replace {name} (and {source.KEY}) inside each argument; the replacement
-- text is used as is (never re-read as a pattern or rescanned). Returns the
-- new argv, or nil, why, kind, name when it must not run (expand: kind
-- "invalid" when a value would start an argument with "-" that the
-- policy's own text does not start with "-", or holds a control
-- character; "missing" when a {source.KEY} names a key the pipeline's
-- source does not have). Other unknown names stay as written. Every argv
-- the gateway runs is built here: this is what makes oopsd.policy(5)'s
-- promise true whatever a field holds.
function M.substitute(argv, values)
  local out = {}
  for i, arg in ipairs(argv) do
    local a, why, kind, name = expand(i, arg, values)
    if not a then return nil, why, kind, name end
    out[i] = a
  end
  return out
end

-- The pipeline's source (JSON text, `oopsctl create --source`): its
-- top-level object, or nil when there is none (or it is not an object).
local function source_fields(p)
  if type(p.source) ~= "string" or p.source == "" then return nil end
  local v = json.decode(p.source)
  return type(v) == "table" and v or nil
end

local function pipeline_values(p)
  return {
    id = p.id, pipeline = p.id, namespace = p.namespace, application = p.application,
    environment = p.environment, artifact = p.artifact or "",
    source = p.source or "", source_fields = source_fields(p),
  }
end

-- The commands of application a that run for a pipeline, with their names:
-- { {"build.submit", argv}, ... }.
local function pipeline_commands(a)
  local list = {}
  local b = a.build
  if b and b.external then
    for _, cmd in ipairs({ "submit", "status", "cancel" }) do list[#list + 1] = { "build." .. cmd, b[cmd] } end
  elseif b then
    list[#list + 1] = { "build", b }
  end
  if a.deploy then list[#list + 1] = { "deploy", a.deploy } end
  if a.health then list[#list + 1] = { "health", a.health } end
  return list
end

-- Why application a's commands must not run for pipeline p, or nil: each
-- command the pipeline can run is expanded with its fields as the step
-- would, and one that M.substitute refuses (a value that would start an
-- argument with "-", or holds a control character) refuses the pipeline
-- before any step (pipelines.refusal). {job} is not known yet and stays as
-- written (the handle is checked when submit prints it: M.check_handle). A
-- {source.KEY} the source lacks is not a refusal here: the build step
-- fails for it, naming the placeholder.
function M.refusal(a, p)
  local values
  for _, c in ipairs(pipeline_commands(a)) do
    values = values or pipeline_values(p)
    local argv, why, kind = M.substitute(c[2], values)
    if not argv and kind == "invalid" then return c[1] .. " " .. why end
  end
  return nil
end

-- Why a job handle must not be used, or nil: build.status and build.cancel
-- (of the external build `b`) are expanded with it and the other values as
-- they would be, and one refused for {job} refuses it (the other fields are
-- pipelines.refusal's, checked before the build was submitted).
function M.check_handle(b, values, handle)
  local with = setmetatable({ job = handle }, { __index = values })
  for _, cmd in ipairs({ "status", "cancel" }) do
    for i, arg in ipairs(b[cmd]) do
      local a, why, kind, name = expand(i, arg, with)
      if not a and kind == "invalid" and name == "job" then return "build." .. cmd .. " " .. why end
    end
  end
  return nil
end

-- Text the database accepts as utf8mb4: each invalid byte becomes "?".
local function clean_utf8(s)
  local out, i = {}, 1
  while true do
    local ok, bad = utf8.len(s, i)
    if ok then
      out[#out + 1] = s:sub(i)
      return table.concat(out)
    end
    out[#out + 1] = s:sub(i, bad - 1)
    out[#out + 1] = "?"
    i = bad + 1
  end
end

-- The argv as a JSON array (pipeline_log.argv, printed by `oopsctl logs`);
-- arguments that are not UTF-8 are cleaned first (the column is utf8mb4).
function M.argv_json(argv)
  local list = json.array()
  for i, a in ipairs(argv) do list[i] = clean_utf8(a) end
  return json.encode(list)
end

-- The last non-empty line of s, trimmed and bounded, or nil.
local function last_line(s)
  if not s then return nil end
  local line
  for l in s:gmatch("[^\r\n]+") do
    if l:match("%S") then line = l end
  end
  if not line then return nil end
  line = line:match("^%s*(.-)%s*$")
  if #line > 300 then line = line:sub(1, 297) .. "..." end
  return clean_utf8(line)
end

-- A tail buffer: keeps the last `cap` bytes of what is added.
local Tail = {}
Tail.__index = Tail

local function tail(cap) return setmetatable({ cap = cap, chunks = {}, size = 0 }, Tail) end

function Tail:add(data)
  self.chunks[#self.chunks + 1] = data
  self.size = self.size + #data
  if self.size > 2 * self.cap then
    local s = table.concat(self.chunks)
    s = s:sub(-self.cap)
    self.chunks, self.size = { s }, #s
  end
end

function Tail:text()
  local s = table.concat(self.chunks)
  if #s > self.cap then s = s:sub(-self.cap) end
  return s
end

local function fmt_ms(ms) return duration.format(math.tointeger(ms) or math.floor(ms)) end

-- One line naming how a command ended: "exited 3", "timed out after 30s".
local function outcome(r, timeout_ms)
  if r.timed_out then return "timed out after " .. fmt_ms(timeout_ms) end
  if r.signal ~= 0 then return "killed by signal " .. r.signal end
  return "exited " .. r.status
end

-- "deploy command exited 4: kubectl: connection refused"
local function describe(step, r, timeout_ms)
  local text = step .. " command " .. outcome(r, timeout_ms)
  if r.timed_out or r.signal ~= 0 then return text end
  local line = last_line(r.stderr) or last_line(r.stdout)
  return line and (text .. ": " .. line) or text
end

-------------------------------------------------------------- the database

local function append_log(pipeline_id, step, argv, result, exit_status, duration_ms, output)
  local ok, err = oops.db.exec(
    "INSERT INTO pipeline_log (pipeline_id, step, server, argv, exit_status, result, duration_ms, output) " ..
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    pipeline_id, step, oops.server_name(), M.argv_json(argv), exit_status,
    clean_utf8(result:sub(1, 200)), duration_ms, clean_utf8(output or ""))
  if not ok then
    log.warn("exec: writing the " .. step .. " log failed: " .. tostring(err), { pipeline = pipeline_id })
  end
  return ok, err
end

-- Log one finished command run (r nil: it could not be started, err says why).
local function log_run(pipeline_id, step, run)
  local r = run.result
  if not r then
    return append_log(pipeline_id, step, run.argv, "not started: " .. tostring(run.err), nil, nil, "")
  end
  local status = (r.signal == 0 and not r.timed_out) and r.status or nil
  local result = run.note and (outcome(r, run.timeout_ms) .. " (" .. run.note .. ")") or outcome(r, run.timeout_ms)
  return append_log(pipeline_id, step, run.argv, result, status, run.duration_ms, run.output)
end

local function job_row(pipeline_id)
  local rows, err = oops.db.exec(
    "SELECT mode, state, server, handle, cancel_state, " ..
    "TIMESTAMPDIFF(MICROSECOND, started_at, NOW(6)) DIV 1000 AS age_ms " ..
    "FROM exec_job WHERE pipeline_id = ? AND kind = 'build'", pipeline_id)
  if not rows then return nil, err end
  return rows[1] or false
end

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

-- A one-command build that could not start (or was refused) on server me.
local function local_job_failed(pipeline_id, me)
  oops.db.exec("UPDATE exec_job SET state = 'failed', finished_at = NOW(6) " ..
    "WHERE pipeline_id = ? AND kind = 'build' AND server = ?", pipeline_id, me)
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

------------------------------------------------------ the gateway's parts

-- The application's config from the policy, or nil, err. The error (a
-- caller's mistake) is raised at the scan that called the gateway: every
-- caller of app_of is a method the interface calls directly (or one it
-- tail-calls), so that scan is level 3.
local function app_of(policy, app)
  if type(app) ~= "string" then error("exec gateway: the application must be \"ns/name\"", 3) end
  local a = policy.applications and policy.applications[app]
  if not a then return nil, "application " .. tostring(app) .. " is not in the policy" end
  return a
end

-- Pipeline p's application, "ns/name".
local function app_name(p) return p.app or (p.namespace .. "/" .. p.application) end

local function timeout_of(a, step)
  -- The loader fills every step's timeout; the default is for a bare table.
  return (a.timeout_ms and a.timeout_ms[step]) or policy_defaults.app_timeout_default(step)
end

local function dirname(path) return path:match("^(.*)/[^/]*$") or "." end

-- Where commands run (see the header).
local function working_dir(cfg, policy)
  local dir = policy.files and policy.files[1] and dirname(policy.files[1]) or oops.policy_dir
  local workdir = cfg and cfg.options and cfg.options.workdir
  if workdir then
    if workdir:sub(1, 1) == "/" or not dir then return workdir end
    return dir .. "/" .. workdir
  end
  return dir
end

local function env_for(values, step, app_env)
  local env = {}
  for k, v in pairs(app_env or {}) do env[k] = v end
  env.OOPS_PIPELINE, env.OOPS_NAMESPACE = values.pipeline or "", values.namespace or ""
  env.OOPS_APPLICATION, env.OOPS_ENVIRONMENT = values.application or "", values.environment or ""
  env.OOPS_ARTIFACT, env.OOPS_STEP, env.OOPS_SERVER = values.artifact or "", step, oops.server_name()
  return env
end

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
  "deploy", "rollout_health", "restart", "stop" }

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

---------------------------------------------------------- local builds

-- Record a finished build: its log first (so "see the pipeline log" finds
-- it), then its state, unless it was stopped or abandoned at shutdown.
-- The entry stays in memory until the state is written (build_status
-- retries): true when it is written.
function Gateway:finish_build(id, job)
  local run = job.run
  if not job.logged then
    if job.shutdown then run.note = "oopsd on " .. oops.server_name() .. " shut down"
    elseif job.stopped then run.note = "the pipeline was stopped" end
    log_run(id, "build", run)
    job.logged = true
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
  local argv, why, kind = M.substitute(a.build, values)
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
    if job.run.result and not held(id) then
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

------------------------------------------------------- external builds
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

local function ext_values(p, handle)
  local values = pipeline_values(p)
  values.job = handle
  return values
end

-- Run one of the three commands and wait: the finished run, or nil, why,
-- kind (a placeholder could not be filled, or was refused: nothing ran;
-- kind "invalid" for a refusal, as M.substitute says).
function Gateway:ext_run(p, a, cmd, handle)
  local values = ext_values(p, handle)
  local argv, why, kind = M.substitute(a.build[cmd], values)
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
  local bad = handle and M.check_handle(a.build, ext_values(p, handle), handle)
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

---------------------------------------------------- deploys and health

function Gateway:deploy(p)
  local a, aerr = app_of(self.policy, app_name(p))
  if not a then return nil, aerr end
  if not a.deploy then return true end
  local values = pipeline_values(p)
  local argv, why, kind = M.substitute(a.deploy, values)
  if not argv then return nil, "deploy " .. why, kind == "invalid" and "invalid" or nil end
  local run = self:run_wait(argv, values, "deploy", timeout_of(a, "deploy"))
  log_run(p.id, "deploy", run)
  if not run.result then return nil, run.err end
  if run.result.ok then return true end
  return nil, describe("deploy", run.result, run.timeout_ms)
end

-- The verdict of one health run: kind (for the log) and what the scan gets.
-- Exit 0 complete, 1 not ready, 2 missing; anything else (another code, a
-- signal, the timeout, not started) a failure.
function M.health_verdict(run)
  local r = run.result
  if not r then return "failure", { failure = tostring(run.err) } end
  if r.timed_out or r.signal ~= 0 then
    return "failure", { failure = "health command " .. outcome(r, run.timeout_ms) }
  end
  if r.status == 0 then return "complete", { complete = true } end
  if r.status == 1 then return "not ready", {} end
  if r.status == 2 then return "missing", { missing = true } end
  return "failure", { failure = last_line(r.stderr) or last_line(r.stdout) or ("health command exited " .. r.status) }
end

function Gateway:rollout_health(p)
  local a, aerr = app_of(self.policy, app_name(p))
  if not a then return nil, aerr end
  if not a.health then return { complete = true } end
  local values = pipeline_values(p)
  local argv, why, refused = M.substitute(a.health, values)
  if not argv then
    self.health:del(p.id)
    return nil, "health " .. why, refused == "invalid" and "invalid" or nil
  end
  local run = self:run_wait(argv, values, "health", timeout_of(a, "health"))
  local kind, verdict = M.health_verdict(run)
  -- Log a change or a failure only: a rollout polled every scan stays small.
  if kind == "failure" or self.health:get(p.id) ~= kind then log_run(p.id, "health", run) end
  self.health:set(p.id, (kind == "not ready") and kind or nil)
  return verdict
end

function Gateway:restart(app, env)
  local a, aerr = app_of(self.policy, app)
  if not a then return nil, aerr end
  local argv = a.restart_cmd or a.restart_command
  if not argv then return nil, "application " .. app .. " has no restart_command" end
  local ns, name = app:match("^(.-)/(.*)$")
  local values = { namespace = ns, application = name, environment = env,
    id = "", pipeline = "", artifact = "" }
  local why
  argv, why = M.substitute(argv, values)
  if not argv then return nil, "restart_command " .. why end
  local run = self:run_wait(argv, values, "restart", timeout_of(a, "restart"))
  if not run.result then return nil, run.err end
  if run.result.ok then
    log.info("restart command " .. outcome(run.result, run.timeout_ms), { app = app, env = env })
    return true
  end
  return nil, describe("restart", run.result, run.timeout_ms)
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

return M
