-- The watcher (issue 24): what an idle server asks the database, and how it
-- hears at once that another server is gone.
--
-- One statement per scan interval, on the server's own connection
-- (oops.db.own), does both:
--   SELECT GET_LOCK('oops:server:NEXT', T) AS won, <what there is to do>
-- It waits up to T (until just before the next scan tick) for the name lock
-- of the next live server in name order (a ring over the live servers), so
-- the database wakes this server the moment that server's lock session ends
-- (kill, crash, cut, or a freeze past its session timeout); then, in the
-- same statement, it reads whether the scans have anything to do: free
-- pipelines for the build and the rollout scans, notifications due, who
-- holds each leader lock, and the next live server to watch. An idle tick
-- sends nothing else: the scans read that answer instead of the database.
--
-- A wait is only as good as its timing: a watched server whose session ends
-- and comes back (a cut, a database that reaped it) while its watcher is not
-- waiting (resting, or its scans ticking, between two waits) has its name
-- lock again before the watcher asks, and the wait would then sit on the new
-- session for a whole interval. So every answer also says which lock session
-- holds the next server's name lock, and the next wait is made only while that
-- is still the same session: IF(IS_USED_LOCK(name) <=> seen, GET_LOCK(...), -1).
-- A changed session (or none) answers at once, and the watcher takes over as
-- if its wait had won.
--
-- The connection that waits holds no lock (the lock session never waits: its
-- GET_LOCKs all have timeout 0), so no two servers' waits can make a cycle
-- (MariaDB and MySQL 8 detect deadlocks among user locks and fail one wait);
-- a wait that wins the dead server's name lock releases it at once. The own
-- connection is parked only after it rested REST_MS: a call made meanwhile
-- finds it free at the tick boundary (the wait ends just before the scans
-- tick), and one made during a wait takes a pool connection.
local oops = require("oops")
local log = require("oops.log")

local M = {}

M.REST_MS = 100       -- the own connection rests this long before it is parked
M.EARLY_MS = 3        -- a wait ends this long before the scans' tick
M.SCANS_WAIT_MS = 1000 -- no park while scans tick, for up to this long after an answer
M.ORPHANS_EVERY_MS = 60000 -- builds left running by a dead driver: looked for this often (and at a takeover)
M.TAKEOVER_MS = 2000  -- after a takeover, the scans take every free pipeline (not a fair share) this long
M.RECHECK_MS = 2100   -- and the build and rollout scans look once more this long after it (see recheck)

local NAMES = oops.locks.names
local SERVER = NAMES.server_prefix
local PIPELINE = NAMES.pipeline_prefix

-- The free sets the scans take from (pipelines.stream's o.free), by scan.
M.FREE = {
  build = { { "INITIALIZED" }, { "RUNNING" }, { "BUILD_SUCCEEDED", requested = true } },
  rollout = { { "DEPLOYING" }, { "ROLLING_OUT" } },
}

local answer    -- the last answer: see decode
local hints = {} -- local news the next tick must not skip: { outbox = true }
local wakers = {} -- scan name -> function that wakes its sleeping loop
local pending = {} -- scan name -> true: woken while it was ticking (run again at once)
local takeover_at -- oops.now_ms() of the last takeover
local last_orphans_ms

local function leader_scans()
  local scans = {}
  for scan in pairs(NAMES.leaders) do scans[#scans + 1] = scan end
  table.sort(scans)
  return scans
end
local LEADERS = leader_scans()

-- The statement and its parameters: wait on target's name lock for wait_s
-- (no wait without a target) while the lock session holding it is `seen`
-- (any, when seen is nil), then what there is to do. won: 1 the wait won the
-- lock, 0 it timed out, -1 the target's session was no longer `seen`.
function M.statement(me, target, wait_s, seen)
  local cols, params = {}, {}
  local function add(col, ...)
    cols[#cols + 1] = col
    for _, v in ipairs { ... } do params[#params + 1] = v end
  end
  if target and seen then
    add("IF(IS_USED_LOCK(?) <=> ?, GET_LOCK(?, ?), -1) AS won", SERVER .. target, seen, SERVER .. target, wait_s)
  elseif target then
    add("GET_LOCK(?, ?) AS won", SERVER .. target, wait_s)
  else
    add("0 AS won")
  end
  for _, scan in ipairs { "build", "rollout" } do
    local any = {}
    for _, f in ipairs(M.FREE[scan]) do
      any[#any + 1] = "EXISTS (SELECT 1 FROM pipeline WHERE status = ?" ..
        (f.requested and " AND (deploy_requested_at IS NOT NULL OR deploy_mode = 'auto')" or "") ..
        " AND IS_USED_LOCK(CONCAT(?, id)) IS NULL)"
      params[#params + 1] = f[1]
      params[#params + 1] = PIPELINE
    end
    add("(" .. table.concat(any, " OR ") .. ") AS " .. scan .. "_free")
  end
  add("EXISTS (SELECT 1 FROM outbox WHERE routed = 0) AS outbox_due") -- rows for the notifier to route
  for _, scan in ipairs(LEADERS) do add("IS_USED_LOCK(?) AS leader_" .. scan, NAMES.leaders[scan]) end
  -- Live: its name lock held by a session other than this one (a name lock
  -- this statement just won is a gone server's: not next). Each as "SESSION
  -- NAME": the next wait is made only while that session holds it.
  local live = "IS_USED_LOCK(CONCAT(?, name)) <> CONNECTION_ID() ORDER BY name LIMIT 1"
  local pick = "(SELECT CONCAT(IS_USED_LOCK(CONCAT(?, name)), ' ', name) FROM server WHERE name %s ? AND "
    .. live .. ")"
  add(pick:format(">") .. " AS after_me", SERVER, me, SERVER)
  add(pick:format("<") .. " AS first_live", SERVER, me, SERVER)
  return "SELECT " .. table.concat(cols, ", "), params
end

-- "SESSION NAME" -> { name =, session = }, or nil.
local function server_of(v)
  local session, name = tostring(v or ""):match("^(%d+) (.+)$")
  if not session then return nil end
  return { name = name, session = math.tointeger(tonumber(session)) }
end

-- The answer as the scans read it.
local function decode(row, now)
  local a = { at = now, won = row.won == 1, changed = row.won == -1, build = row.build_free == 1,
    rollout = row.rollout_free == 1, outbox = row.outbox_due == 1, leaders = {},
    next = server_of(row.after_me) or server_of(row.first_live) }
  for _, scan in ipairs(LEADERS) do a.leaders[scan] = row["leader_" .. scan] or false end
  return a
end
M.decode = decode

-- The last answer, or nil when it is older than two scan intervals (or there
-- is none: tools, specs, a server just started): then scans ask for themselves.
function M.fresh()
  if answer and oops.now_ms() - answer.at <= 2 * answer.interval then return answer end
  return nil
end

local rechecking = {} -- scan name -> true: its next tick reads its free pipelines whatever the answer said
local recheck_pending = false

-- May the scan skip reading its free pipelines? Only on a fresh answer that
-- found none, and not right after a takeover or at its recheck.
function M.skip_free(scan)
  if rechecking[scan] then
    rechecking[scan] = nil
    return false
  end
  local a = M.fresh()
  if not a or M.taking_over() then return false end
  if scan == "build" then return not a.build end
  if scan == "rollout" then return not a.rollout end
  return false
end

-- Right after a takeover: take every free pipeline, not a fair share.
function M.taking_over()
  return takeover_at ~= nil and oops.now_ms() - takeover_at <= M.TAKEOVER_MS
end

-- Could the leader lock of scan be free? False only when a fresh answer says
-- another session holds it (and no takeover just happened).
function M.leader_may_be_free(scan)
  local a = M.fresh()
  if not a or M.taking_over() then return true end
  local owner = a.leaders[scan]
  return owner == false or owner == oops.locks.connection_id()
end

-- Are notifications perhaps due? A fresh answer that found none and no local
-- news since: no.
function M.outbox_may_be_due()
  local a = M.fresh()
  if hints.outbox or not a then return true end
  return a.outbox
end

-- Local news: this server wrote an outbox row (a transition, an alert edge).
function M.hint(kind) hints[kind] = true end
function M.consume(kind) hints[kind] = nil end

-- The rollout scan's look for builds a dead driver left running: at a
-- takeover, else every ORPHANS_EVERY_MS (and always without an answer).
function M.orphans_due()
  local now = oops.now_ms()
  if not M.fresh() or M.taking_over() or not last_orphans_ms or now - last_orphans_ms >= M.ORPHANS_EVERY_MS then
    last_orphans_ms = now
    return true
  end
  return false
end

-- A scan's loop registers how to wake it while it sleeps; the watcher wakes
-- it when there is something for it (it runs at once rather than at its next
-- tick). A scan woken while it ticks (no waker then) runs again as soon as
-- that tick ends: M.woken, asked by its loop before it sleeps. A wake is never
-- lost, or a takeover found during a tick would wait for the next one.
function M.on_wake(scan, fn) wakers[scan] = fn end
local function wake(scan)
  if wakers[scan] then wakers[scan]() else pending[scan] = true end
end
function M.woken(scan)
  local was = pending[scan] == true
  pending[scan] = nil
  return was
end

-- Once more, after the takeover window: a gone server's locks are freed one
-- by one as the database ends its session (SIGKILL, a cut, a reaped freeze),
-- and the wake that came with its name lock may have found only some of its
-- pipelines free (watch_ring, "frozen", once in 60 runs beside CPU hogs).
-- The rest, past their start, are anyone's at once (share.lua): the scans
-- look again, outside the window so that new pipelines go by the ring. One
-- pending at a time.
local function recheck()
  if recheck_pending then return end
  recheck_pending = true
  oops.task("watch recheck", function()
    local slept = oops.sleep(M.RECHECK_MS)
    recheck_pending = false
    if not slept then return end -- stopping
    for _, scan in ipairs { "build", "rollout" } do
      rechecking[scan] = true
      wake(scan)
    end
  end)
end

local function act(a, target)
  if a.won or a.changed then
    -- The server we watched is gone: its name lock came to us (give it back:
    -- a restart of that server takes it), or another session holds it now
    -- (it was cut and came back between two waits). Take over now.
    if a.won then oops.db.own("SELECT RELEASE_LOCK(?) AS released", SERVER .. target.name) end
    takeover_at = oops.now_ms()
    oops.metrics.inc("oops_takeovers_total")
    log.info("taking over: " .. target.name .. " is gone (" .. (a.won and "its name lock came free" or
      "its lock session ended between two waits") .. ")", { scan = "watch" })
    for _, scan in ipairs { "build", "rollout" } do wake(scan) end
    for _, scan in ipairs(LEADERS) do wake(scan) end
    recheck()
    return
  end
  if a.build then wake("build") end
  if a.rollout then wake("rollout") end
  if a.outbox then wake("notify") end
  for _, scan in ipairs(LEADERS) do
    if a.leaders[scan] == false then wake(scan) end
  end
end

local function sleep(ms) return oops.sleep(math.max(0, math.floor(ms))) end

-- Until just before the next scan tick (the scans tick at multiples of their
-- interval on the database's clock, leader.until_next).
local function until_tick(interval)
  local ms = require("oops.leader").until_next(interval) - 5 - M.EARLY_MS
  if ms < 0 then ms = ms + interval end
  return ms
end

-- One round: rest, wait (or sleep), read, act. false when stopping.
-- ticking(): scans inside a tick (their calls want the own connection: it
-- is parked only once they are done, or SCANS_WAIT_MS after the answer).
local function round(pol, me, target, failures, ticking)
  local idle = oops.db.own_idle_ms()
  if idle < M.REST_MS then return sleep(M.REST_MS - idle), target end
  if target and ticking() > 0 and answer and oops.now_ms() - answer.at < M.SCANS_WAIT_MS then
    return sleep(M.REST_MS // 4), target
  end
  local wait_ms = until_tick(pol.scan.interval_ms)
  -- While the database refuses new connections, the own connection is the
  -- one the pool's calls wait for: no wait on it then (takeover at the tick).
  local waits = target and not oops.db.busy()
  if not waits and not sleep(wait_ms) then return false end
  local sql, params = M.statement(me, waits and target and target.name or nil, waits and wait_ms / 1000 or nil,
    waits and target and target.session or nil)
  local rows, err
  if waits then
    rows, err = oops.db.park(math.floor(wait_ms), sql, table.unpack(params))
  else
    rows, err = oops.db.own(sql, table.unpack(params))
  end
  if not rows then
    if oops.stopping() then return false end -- the daemon ended the wait (daemon.c, end_watch_wait)
    failures.n = failures.n + 1
    if failures.n == 1 or failures.n % 60 == 0 then
      log.warn("watching: " .. tostring(err), { scan = "watch" })
    end
    return sleep(math.min(pol.scan.interval_ms, 1000 * failures.n)), nil
  end
  failures.n = 0
  local a = decode(rows[1], oops.now_ms())
  a.interval = pol.scan.interval_ms
  answer = a
  act(a, target)
  oops.metrics.inc("oops_watch_statements_total")
  return true, a.next
end

-- The watcher's task: while going() (the engine runs) and the daemon does not stop.
function M.run(policy_of, going, ticking)
  ticking = ticking or function() return 0 end
  local me = oops.server_name()
  local target, failures = nil, { n = 0 }
  oops.metrics.inc("oops_takeovers_total", nil, 0)
  while going() and not oops.stopping() do
    local pol = policy_of()
    local more
    more, target = round(pol, me, target, failures, ticking)
    if more == false then break end
  end
end

oops.metrics.describe("oops_takeovers_total", "counter",
  "servers found gone by this server's watch (their name lock came free), taken over at once")
oops.metrics.describe("oops_watch_statements_total", "counter",
  "watch statements answered (each waits on the next live server's name lock, then reads what there is to do)")

return M
