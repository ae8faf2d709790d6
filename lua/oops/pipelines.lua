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
local watch = require("oops.watch")
local share = require("oops.share")

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

-- What a scan's tick returns when it took a full share of new pipelines and
-- more were free: the engine ticks it again at once (engine.lua).
M.MORE = "more"

-- Has a scan of this server had more to take than it took (M.MORE) within
-- BACKLOG_MS? Other work of the server (the notifier) gives way meanwhile.
M.BACKLOG_MS = 2000
local more_at
function M.backlog() return more_at ~= nil and oops.now_ms() - more_at < M.BACKLOG_MS end

-- Rows a scan reads per page (oops.store.list's limit): a tick holds one page
-- of candidates, plus the steps running and the new pipelines it takes.
M.PAGE = 500

-- The most new pipelines a server takes per tick when the policy does not say
-- (the spec's hand-made policies): the policy language's default.
local DEFAULT_MAX_NEW = require("oops.policy").DEFAULTS.scan.max_new
local DEFAULT_PARALLEL = require("oops.policy").DEFAULTS.scan.parallel

-- Servers alive now: those whose name lock (held for the life of their lock
-- session) is taken. A SIGKILLed server drops out the moment its session does.
-- With this server's rank among them, by name (share.lua's ring).
local LIVE_SQL = "SELECT COUNT(*) AS n, COALESCE(SUM(name < ?), 0) AS r FROM server " ..
  "WHERE IS_USED_LOCK(CONCAT(?, name)) IS NOT NULL"
local function live_servers()
  local rows = oops.db.exec(LIVE_SQL, oops.server_name(), SERVER_PREFIX)
  local row = rows and rows[1] or {}
  return math.max(tonumber(row.n) or 1, 1), tonumber(row.r) or 0
end

-- Per scan: the free pipelines this server left to others at its last tick
-- (share.pick's `waited`; at most one free answer's ids).
local waited = {}

-- The live servers of the last tick that took new pipelines: a tick asks
-- for max_new x this many free ones first, and asks again only when more
-- servers are alive now and the answer was full.
local live_hint = 1

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
-- environments (policy/values.lua's is_label).
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
--     take it for an option) nor holding control characters;
--   - with the exec gateway, no command of the application may expand to an
--     argument that starts with "-" where the policy's argument does not,
--     nor put a control character into one, whatever field fills it: the
--     source's values ({source.KEY}) included (exec/argv.lua's M.refusal names
--     the command, the argument and the field).
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
  if pol and pol.gateway and pol.gateway.kind == "exec" then
    return require("oops.gateways.exec").refusal(a, p)
  end
  return nil
end

-- Fail (or, waiting for a manual release, refuse the release of) a pipeline
-- the engine must not act for; no gateway call is made for it.
local function refuse(p, why, scan)
  log.warn("refused: " .. why, { scan = scan, pipeline = p.id })
  if p.status == "BUILD_SUCCEEDED" and not p.manual then
    -- An automatic release held before its deploy (issue 26) has no request
    -- to clear: it would be refused again every tick. It ends (the seed's
    -- table has no BUILD_SUCCEEDED -> ERROR): STOPPED, saying why.
    M.transition(p, "BUILD_SUCCEEDED", "STOPPED", msg.refused .. why, scan)
    return
  end
  if p.status == "BUILD_SUCCEEDED" then
    oops.db.exec("UPDATE pipeline SET deploy_requested_at = NULL, message = ? " ..
      "WHERE id = ? AND status = 'BUILD_SUCCEEDED'", msg.refused .. why, p.id)
    return
  end
  M.transition(p, p.status, "ERROR", msg.refused .. why, scan)
end

-- A copy of v[i..j].
local function slice(v, i, j) return table.move(v, i, j, 1, {}) end

-- Drive a scan's pipelines, reading only what it drives (issue 15: a tick's
-- cost follows what this server holds and takes, not how many pipelines
-- are active or finished):
--   o.scan, o.pol, o.handlers (status -> step(p)), o.statuses (its statuses);
--   o.wanted(p): is a held row of those statuses a candidate (default: all);
--   o.free: { statuses = {...}, deploy_requested = bool }, the statuses in
--     which a pipeline nobody holds is taken (oops.store.free);
--   o.held: ids of the pipelines this server holds (default: its locks now);
--     the rollout passes the snapshot its sweep compares against;
--   o.seen(p): called for every held row listed in o.statuses (the sweep).
-- 1. The pipelines held, read by id a page of ids at a time, and stepped as
--    their page is read.
-- 2. The new ones: its fair share of the free ones, ceil(free / live
--    servers) but at most the policy's scan.max_new, those that fall to it
--    on the ring of live servers first, others' only once they waited a tick
--    (share.lua: servers do not race for the same rows; the oldest go
--    first), in ONE GET_LOCK statement, then read again under their lock
--    and stepped. The free ones
--    are asked for by one statement that stops after live x max_new of them,
--    so it never counts or reads the rest.
-- Steps run side by side (tasks.pool, at most the policy's scan.parallel);
-- returns when all are done, so a tick never overlaps the next. true and
-- whether more free pipelines wait than this tick took (a full share), or
-- nil, err when reading failed; with the lock session down nothing more is
-- driven (logged) and it returns true.
function M.stream(o)
  local scan, pol = o.scan, o.pol
  local max_new = pol and pol.scan and pol.scan.max_new or DEFAULT_MAX_NEW
  local wanted = o.wanted or function() return true end
  local me = oops.locks.connection_id()
  local pool = tasks.pool(scan .. " step", pol and pol.scan and pol.scan.parallel or DEFAULT_PARALLEL)
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
  local function fail(err)
    pool:wait()
    return nil, err
  end
  local held = o.held
  if not held then
    held = {}
    for _, name in ipairs(oops.locks.held()) do
      local id = M.lock_id(name)
      if id then held[#held + 1] = id end
    end
  end
  local down, more = false, false
  for i = 1, #held, M.PAGE do
    local page, err = oops.store.list { ids = slice(held, i, math.min(i + M.PAGE - 1, #held)),
                                        statuses = o.statuses, lock_owner = true }
    if not page then return fail(err) end
    if not oops.locks.is_up() then down = true end
    for _, p in ipairs(page) do
      if o.seen then o.seen(p) end
      if not down and wanted(p) then
        if whose(p, me) == "mine" then
          step(p)
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
  end
  if not down and not oops.locks.is_up() then down = true end
  if down then
    log.warn("lock session down: driving nothing", { scan = scan })
    pool:wait()
    return true
  end
  -- An idle tick reads nothing: the watcher's answer said no pipeline is free
  -- for this scan (lua/oops/watch.lua).
  if o.free and not watch.skip_free(scan) then
    local function free_ids(n)
      return oops.store.free { statuses = o.free.statuses, deploy_requested = o.free.deploy_requested,
                               limit = math.min(n, 65535) }
    end
    local limit = max_new * live_hint
    local free, statuses = free_ids(limit)
    if not free then return fail(statuses) end
    if #free == 0 then waited[scan] = nil end
    if #free > 0 then
      local live, rank = live_servers()
      if live > live_hint and #free == limit then
        limit = max_new * live
        free, statuses = free_ids(limit)
        if not free then return fail(statuses) end
      end
      live_hint = live
      -- Its own on the ring of live servers first, others' only once they
      -- waited a tick (share.lua); right after a takeover every free one
      -- (the gone server's pipelines, held again in milliseconds).
      local pick, fair
      pick, waited[scan], fair = share.pick {
        free = free, statuses = statuses, live = live, rank = rank, max_new = max_new,
        all = watch.taking_over(), waited = waited[scan],
      }
      -- A full share (max_new; on the ring its own may be a few short of
      -- it), and the answer was full (more may be free than it says) or held
      -- more than this server took: tick again at once.
      more = fair == max_new and (#free == limit or #free > #pick)
      if more then more_at = oops.now_ms() end
      free = pick
      local share_n = #pick
      local names = {}
      for k = 1, share_n do names[k] = M.lock_name(free[k]) end
      local got, sent = oops.locks.acquire_many(names) -- sent: statements, or why it failed
      if not got then
        log.warn("lock session down: driving nothing new (" .. tostring(sent) .. ")", { scan = scan })
      else
        -- The bench reads these: one statement per scan, whatever the number of
        -- pipelines (acquire_many says how many it sent).
        oops.metrics.inc("oops_lock_acquire_statements_total", { scan = scan }, sent)
        oops.metrics.inc("oops_lock_acquire_batches_total", { scan = scan })
        local won = {}
        for k = 1, share_n do
          if got[names[k]] then won[#won + 1] = free[k] end
        end
        -- Read again under the lock: what is stepped is what the row says
        -- now (a pipeline stopped meanwhile is not listed, and the sweep
        -- lets its lock go).
        for i = 1, #won, M.PAGE do
          local page, lerr = oops.store.list { ids = slice(won, i, math.min(i + M.PAGE - 1, #won)),
                                               statuses = o.statuses, lock_owner = true }
          if not page then return fail(lerr) end
          for _, p in ipairs(page) do
            if wanted(p) and whose(p, me) == "mine" then
              log.info("driving", { pipeline = p.id, app = p.app, env = p.environment })
              step(p)
            end
          end
        end
      end
    end
  end
  pool:wait()
  return true, more
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
-- lock is gone); nil, err, code on a database error. With `extra` (a deploy
-- slot, an automatic rollback: oops.store.transition) the second value is
-- what happened beside it (oops.TransitionDone).
function M.transition(p, from, to, message, scan, extra)
  if not M.held(p) then
    log.warn("lock lost mid-step: leaving the pipeline alone", { scan = scan, pipeline = p.id })
    return false
  end
  local won, err, code = oops.store.transition(p.id, from, to, message, extra)
  if won == nil then
    log.error("transition " .. from .. " -> " .. to .. " failed: " .. tostring(err),
      { scan = scan, pipeline = p.id })
    return nil, err, code
  end
  local done = type(err) == "table" and err or nil
  if won then
    watch.hint("outbox") -- its event is in the outbox: the notifier looks at its next tick
    p.status = to
    log.info(from .. " -> " .. to, { scan = scan, pipeline = p.id, app = p.app, env = p.environment })
    if done and done.rollback then
      log.info("automatic rollback " .. done.rollback .. " created", { scan = scan, pipeline = p.id })
    elseif extra and extra.rollback then
      log.info("no automatic rollback: no SUCCEEDED release to return to, or a newer pipeline exists",
        { scan = scan, pipeline = p.id })
    end
    hooks.call("on_transition", p, from, to)
  elseif not (done and done.no_slot) then
    log.info("claim " .. from .. " -> " .. to .. " lost: the status changed meanwhile",
      { scan = scan, pipeline = p.id })
  end
  return won, done
end

-- A transition that must follow an act already done (the artifact applied):
-- left undone by a passing database error, nothing would ever make it (a
-- DEPLOYING pipeline waits for the deploy timeout). So a database error is
-- tried again, RETRIES times over about two seconds, while the lock is ours;
-- a retry that finds the status already `to` means the first try committed
-- and only its answer was lost. Returns like M.transition.
M.RETRIES, M.RETRY_FIRST_MS = 3, 250
function M.transition_after(p, from, to, message, scan, extra)
  local won, err, code = M.transition(p, from, to, message, scan, extra)
  local wait = M.RETRY_FIRST_MS
  for _ = 1, M.RETRIES do
    if won ~= nil or code == "exists" then break end
    oops.sleep(wait)
    wait = wait * 2
    won, err, code = M.transition(p, from, to, message, scan, extra)
    if won == false and M.held(p) then
      local now = oops.store.get(p.id)
      if now and now.status == to then
        p.status = to
        log.info(from .. " -> " .. to .. ": made by the try whose answer was lost", { scan = scan, pipeline = p.id })
        return true
      end
    end
  end
  return won, err, code
end

return M
