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

-- Rows a scan reads per page (oops.store.list's limit): a tick holds one page
-- of candidates, plus the steps running and the new pipelines it takes.
M.PAGE = 500

-- The most new pipelines a server takes per tick when the policy does not say
-- (the spec's hand-made policies): the policy language's default.
local DEFAULT_MAX_NEW = require("oops.policy").DEFAULTS.scan.max_new

-- Servers alive now: those whose name lock (held for the life of their lock
-- session) is taken. A SIGKILLed server drops out the moment its session does.
local LIVE_SQL = "SELECT COUNT(*) FROM server WHERE IS_USED_LOCK(CONCAT(?, name)) IS NOT NULL"
local function live_servers()
  local rows = oops.db.exec("SELECT (" .. LIVE_SQL .. ") AS n", SERVER_PREFIX)
  local n = rows and rows[1] and rows[1].n or 1
  return math.max(n, 1)
end

-- Live servers and free candidates (no session holds their lock) in one
-- statement, for a listing longer than a page. `where` is the scan's own
-- constant condition on top of the statuses (no value in it).
local function live_and_free(statuses, where)
  local marks = ("?, "):rep(#statuses):sub(1, -3)
  local sql = "SELECT (" .. LIVE_SQL .. ") AS live, (SELECT COUNT(*) FROM pipeline WHERE status IN (" .. marks ..
    ")" .. (where and (" AND " .. where) or "") .. " AND IS_USED_LOCK(CONCAT(?, id)) IS NULL) AS free"
  local args = { SERVER_PREFIX }
  for _, st in ipairs(statuses) do args[#args + 1] = st end
  args[#args + 1] = PIPELINE_PREFIX
  local rows, err = oops.db.exec(sql, table.unpack(args))
  if not rows then return nil, err end
  return math.max(rows[1].live or 1, 1), rows[1].free or 0
end

-- Ours (held, and the row says our session holds it), free (nobody holds
-- it), or nil (another server's, or ours by our books but not the
-- database's: see M.stream).
local function whose(p, me)
  if oops.locks.holds(M.lock_name(p.id)) then
    return p.lock_owner == me and "mine" or nil
  end
  if not p.lock_owner then return "free" end
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

-- Drive a scan's candidates a page at a time, so a tick holds one page of
-- rows however many pipelines wait:
--   o.scan, o.pol, o.handlers (status -> step(p)), o.statuses (listed);
--   o.wanted(p): is this listed row a candidate (default: every row);
--   o.where: the same as o.wanted, as a constant SQL condition (for the count);
--   o.seen(p): called for every listed row (the rollout's sweep).
-- The pipelines this server holds are stepped as their page is read; of the
-- free ones it takes its fair share, ceil(free / live servers) but at most
-- the policy's scan.max_new, in ONE GET_LOCK statement once every page is
-- read, chosen at random among the oldest (live servers x share) free ones
-- (other servers' ticks take the others: fewer collisions; the oldest go
-- first). Pipelines held by another server are not asked for at all. Steps
-- run side by side (tasks.pool, bounded); returns when all are done, so a
-- tick never overlaps the next. true, or nil, err when listing failed; with
-- the lock session down nothing more is driven (logged) and it returns true.
function M.stream(o)
  local scan, pol = o.scan, o.pol
  local max_new = pol and pol.scan and pol.scan.max_new or DEFAULT_MAX_NEW
  local wanted = o.wanted or function() return true end
  local me = oops.locks.connection_id()
  local pool = tasks.pool(scan .. " step")
  local function step(p)
    local fn = o.handlers[p.status]
    if not fn then return end
    local why = M.refusal(pol, p)
    if why then
      pool:run(function() refuse(p, why, scan) end)
    else
      pool:run(function() fn(p) end)
    end
  end
  local share, window -- known once the first page is read
  local seen_free, chosen = 0, {}
  local after, first, down = nil, true, false
  repeat
    local page, err = oops.store.list { statuses = o.statuses, lock_owner = true, limit = M.PAGE, after = after }
    if not page then
      pool:wait()
      return nil, err
    end
    after = page[#page]
    if first then
      first = false
      local free, live = 0, 1
      if #page < M.PAGE then -- the whole listing: count here
        for _, p in ipairs(page) do
          if wanted(p) and whose(p, me) == "free" then free = free + 1 end
        end
        if free > 0 then live = live_servers() end
      else
        local l, f = live_and_free(o.statuses, o.where)
        if not l then
          pool:wait()
          return nil, f
        end
        live, free = l, f
      end
      share = math.min(math.ceil(free / live), max_new)
      window = math.min(free, live * share)
    end
    if not oops.locks.is_up() then down = true end
    for _, p in ipairs(page) do
      if o.seen then o.seen(p) end
      if not down and wanted(p) then
        local w = whose(p, me)
        if w == "mine" then
          step(p)
        elseif w == "free" then
          -- A random `share` of the first `window` free ones (reservoir).
          seen_free = seen_free + 1
          if seen_free <= window then
            if #chosen < share then
              chosen[#chosen + 1] = p
            else
              local j = math.random(seen_free)
              if j <= share then chosen[j] = p end
            end
          end
        elseif oops.locks.holds(M.lock_name(p.id)) then
          -- The query read the lock's owner: when it is not our session, our
          -- session is gone (cut, or frozen past its timeout) and we do not
          -- know yet. Leave the pipeline alone; the validation takes the
          -- session down.
          log.warn(("not ours any more: the database says its lock is %s, not our session %s"):format(
            p.lock_owner and ("held by session " .. p.lock_owner) or "free", tostring(me)),
            { scan = scan, pipeline = p.id })
        end
      end
    end
  until #page < M.PAGE
  if down then
    log.warn("lock session down: driving nothing", { scan = scan })
  elseif #chosen > 0 then
    local names = {}
    for i, p in ipairs(chosen) do names[i] = M.lock_name(p.id) end
    local got, sent = oops.locks.acquire_many(names) -- sent: statements, or why it failed
    if not got then
      log.warn("lock session down: driving nothing new (" .. tostring(sent) .. ")", { scan = scan })
    else
      -- The bench reads these: one statement per scan, whatever the number of
      -- pipelines (acquire_many says how many it sent).
      oops.metrics.inc("oops_lock_acquire_statements_total", { scan = scan }, sent)
      oops.metrics.inc("oops_lock_acquire_batches_total", { scan = scan })
      for i, p in ipairs(chosen) do
        if got[names[i]] then
          log.info("driving", { pipeline = p.id, app = p.app, env = p.environment })
          step(p)
        end
      end
    end
  end
  pool:wait()
  return true
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
