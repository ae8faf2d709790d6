-- What the build and rollout scans share: lock names, taking a fair share of
-- the free pipelines in one batched statement, and transitions that respect
-- the lock (rule 1) and the database's verdict (rule 2).
local oops = require("oops")
local log = require("oops.log")
local hooks = require("oops.hooks")
local tasks = require("oops.tasks")
local msg = require("oops.messages")
local show = require("oops.duration").show
local leader = require("oops.leader")

local M = {}

-- Lock names from the binding (oops.locks.names, src/lock_names.h).
local PIPELINE_PREFIX = oops.locks.names.pipeline_prefix
local SERVER_PREFIX = oops.locks.names.server_prefix

function M.lock_name(id) return PIPELINE_PREFIX .. id end
-- The pipeline id of a lock name, nil for another lock.
function M.lock_id(name)
  if name:sub(1, #PIPELINE_PREFIX) == PIPELINE_PREFIX and #name > #PIPELINE_PREFIX then
    return name:sub(#PIPELINE_PREFIX + 1)
  end
end

-- Servers alive now: those whose name lock (held for the life of their lock
-- session) is taken. A SIGKILLed server drops out the moment its session does.
local function live_servers()
  local rows = oops.db.exec(
    "SELECT COUNT(*) AS n FROM server WHERE IS_USED_LOCK(CONCAT(?, name)) IS NOT NULL", SERVER_PREFIX)
  local n = rows and rows[1] and rows[1].n or 1
  return math.max(n, 1)
end

local function shuffle(t)
  for i = #t, 2, -1 do
    local j = math.random(i)
    t[i], t[j] = t[j], t[i]
  end
end

-- The candidates this server drives after this call: those it already holds,
-- plus a fair share of the free ones (so that several servers drive), taken
-- in one GET_LOCK statement. Pipelines held by another server are not asked
-- for at all. nil, err when the lock session is down (fail closed).
function M.take(candidates, scan)
  local mine, free = {}, {}
  local me = oops.locks.connection_id()
  for _, p in ipairs(candidates) do
    if oops.locks.holds(M.lock_name(p.id)) then
      -- The query read the lock's owner: when it is not our session, our
      -- session is gone (cut, or frozen past its timeout) and we do not know
      -- yet. Leave the pipeline alone; the validation takes the session down.
      if p.lock_owner == me then
        mine[#mine + 1] = p
      else
        log.warn(("not ours any more: the database says its lock is %s, not our session %s"):format(
          p.lock_owner and ("held by session " .. p.lock_owner) or "free", tostring(me)),
          { scan = scan, pipeline = p.id })
      end
    elseif not p.lock_owner then
      free[#free + 1] = p
    end
  end
  if #free == 0 then return mine end
  local share = math.ceil(#free / live_servers())
  shuffle(free)
  local names = {}
  for i = 1, share do names[i] = M.lock_name(free[i].id) end
  local before = oops.locks.statements()
  local got, err = oops.locks.acquire_many(names)
  if not got then return nil, err end
  -- The bench reads these: one statement per scan, whatever the number of pipelines.
  oops.metrics.inc("oops_lock_acquire_statements_total", { scan = scan }, oops.locks.statements() - before)
  oops.metrics.inc("oops_lock_acquire_batches_total", { scan = scan })
  for i = 1, share do
    if got[names[i]] then
      mine[#mine + 1] = free[i]
      log.info("driving", { pipeline = free[i].id, app = free[i].app, env = free[i].environment })
    end
  end
  return mine
end

-- A lowercase DNS label, the policy's rule for namespaces, applications and
-- environments (policy.lua's is_label).
local function is_label(s)
  return type(s) == "string" and #s <= 63 and (s:match("^[a-z0-9]$") or s:match("^[a-z0-9][a-z0-9-]*[a-z0-9]$")) ~= nil
end

local function listed(list, v)
  for _, x in ipairs(list or {}) do if x == v then return true end end
  return false
end

-- Why the engine must not act for this pipeline, or nil. The engine is the
-- guarantee, whoever wrote the row (oopsctl, another tool, SQL by hand):
--   - its application must be declared by the running policy, and its
--     environment be one of that application's environments (the simulated
--     gateway with no application declared at all simulates any, for demos
--     and tests: it runs no command);
--   - every field that can reach a command's argv must be what it claims:
--     namespace, application, environment lowercase DNS labels, the id
--     [a-z0-9], and the artifact neither starting with "-" (a command would
--     take it for an option) nor holding control characters.
function M.refusal(pol, p)
  local app = tostring(p.namespace) .. "/" .. tostring(p.application)
  for _, f in ipairs({ "namespace", "application", "environment" }) do
    if not is_label(p[f]) then
      return ("its %s %s is not a lowercase DNS label"):format(f, show(p[f]))
    end
  end
  if type(p.id) ~= "string" or not p.id:match("^[a-z0-9]+$") or #p.id > 64 then
    return "its id " .. show(p.id) .. " is not [a-z0-9]"
  end
  local artifact = p.artifact or ""
  if artifact:sub(1, 1) == "-" then
    return "its artifact " .. show(artifact) .. ' starts with "-" (a command would take it for an option)'
  end
  if artifact:find("%c") then return "its artifact holds a control character" end
  if #artifact > 1024 then return "its artifact is longer than 1024 bytes" end
  local apps = pol and pol.applications or {}
  if pol and pol.gateway and pol.gateway.kind == "simulated" and next(apps) == nil then return nil end
  local a = apps[app]
  if not a then return "application " .. app .. " is not declared by the running policy" end
  if not listed(a.environments, p.environment) then
    return ("environment %s is not one of %s's environments (%s)"):format(
      show(p.environment), app, table.concat(a.environments or {}, ", "))
  end
  return nil
end

-- Fail (or, waiting for a manual release, refuse the release of) a pipeline
-- the engine must not act for; no gateway call is made for it.
local function refuse(p, why, scan)
  log.warn("refused: " .. why, { scan = scan, pipeline = p.id })
  if p.status == "BUILD_SUCCEEDED" then
    oops.db.exec("UPDATE pipeline SET deploy_requested_at = NULL, message = ? " ..
      "WHERE id = ? AND status = 'BUILD_SUCCEEDED'", msg.refused .. why, p.id)
    return
  end
  M.transition(p, p.status, "ERROR", msg.refused .. why, scan)
end

-- Take the candidates' locks (one batch) and run the step handlers[status](p)
-- of every pipeline held, each in its own task, so a slow gateway call for one
-- application delays no other; returns when all are done, so a tick never
-- overlaps the next. With the lock session down nothing is driven. A pipeline
-- the policy does not cover (M.refusal) is failed instead of stepped.
function M.drive(candidates, scan, handlers, pol)
  local mine, err = M.take(candidates, scan)
  if not mine then
    log.warn("lock session down: driving nothing (" .. tostring(err) .. ")", { scan = scan })
    return
  end
  local steps = {}
  for _, p in ipairs(mine) do
    local step = handlers[p.status]
    local why = step and M.refusal(pol, p)
    if why then
      steps[#steps + 1] = function() refuse(p, why, scan) end
    elseif step then
      steps[#steps + 1] = function() step(p) end
    end
  end
  tasks.all(steps, scan .. " step")
end

-- Still ours? A lock lost mid-step (session gone) means: touch nothing more.
function M.held(p)
  return oops.locks.holds(M.lock_name(p.id))
end

-- Held, and the database agrees now: the lock's owner is our lock session
-- (one statement). For actions no transition fences, like submitting a
-- build again.
function M.verified(p)
  return M.held(p) and leader.owned(M.lock_name(p.id)) == true
end

-- The conditional transition, only while we hold the lock. true when this
-- call made it; false when someone else changed the status first (or the
-- lock is gone); nil, err, code on a database error.
function M.transition(p, from, to, message, scan)
  if not M.held(p) then
    log.warn("lock lost mid-step: leaving the pipeline alone", { scan = scan, pipeline = p.id })
    return false
  end
  local won, err, code = oops.store.transition(p.id, from, to, message)
  if won == nil then
    log.error("transition " .. from .. " -> " .. to .. " failed: " .. tostring(err),
      { scan = scan, pipeline = p.id })
    return nil, err, code
  end
  if won then
    p.status = to
    log.info(from .. " -> " .. to, { scan = scan, pipeline = p.id, app = p.app, env = p.environment })
    hooks.call("on_transition", p, from, to)
  else
    log.info("claim " .. from .. " -> " .. to .. " lost: the status changed meanwhile",
      { scan = scan, pipeline = p.id })
  end
  return won
end

return M
