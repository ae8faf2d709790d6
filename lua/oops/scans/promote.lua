-- The promote scan (issue 39): a release that went live in an environment
-- an application promotes from (policy: promote = { staging = { to =
-- "prod", after = "30m" } }, oops.policy.promote) is released to the next
-- one once it has been live there for `after`:
--
--   * One leader (the sticky lock oops:leader:promote) reads the candidates:
--     per rule, the newest pipeline of the source target (ix_pipeline_app),
--     whether it was promoted (uq_pipeline_promoted), whether an alert fires
--     on that target and when one last resolved (alert_state's key), in one
--     statement for up to PER_STATEMENT rules. Without a rule in the policy
--     nothing is read (the lock is held all the same: a free one would wake
--     the scan at every round of the watcher).
--   * A candidate is SUCCEEDED, a release or a promotion (never a rollback),
--     the newest pipeline of its target (a newer one, even unfinished, means
--     the promotion waits for it: a promotion not yet made is cancelled by a
--     newer release), live for `after` on the database's clock with no
--     alert firing on its target: none fires now, and none resolved within
--     `after` (the wait counts from the later of going live and the last
--     resolve), and not promoted yet.
--   * Made once by the database, not by this check: oops.store.promote is one
--     INSERT whose promoted_from is UNIQUE. Two leaders (one frozen past its
--     session, its heir), an operator's promote-now at the same moment, a
--     leader killed between its read and its INSERT: whoever comes second is
--     refused by the constraint and finds the promotion made.
--   * The promoted release is INITIALIZED, trigger 'promotion': the build
--     scan deploys its artifact with no build, and approvals, windows,
--     freezes and slots hold it like any release. An unfinished pipeline in
--     the destination makes it wait for the next tick.
--   * The next tick comes when the first candidate is due, at most
--     INTERVAL_MS after this one.
local oops = require("oops")
local log = require("oops.log")
local leader = require("oops.leader")
local duration = require("oops.duration")

local M = { name = "promote" }
local SCAN = "promote"
local LOCK = leader.lock(SCAN)
M.LOCK = LOCK

M.INTERVAL_MS = 10000      -- at most this long between two looks while a rule exists
M.IDLE_INTERVAL_MS = 60000 -- without a rule: a tick reads nothing
M.MIN_INTERVAL_MS = 250
M.PER_STATEMENT = 50       -- rules read by one statement

oops.metrics.describe("oops_promotions_total", "counter",
  "promotions this server made (policy promote, issue 39): each release promoted once by whoever came first")

local next_ms = M.IDLE_INTERVAL_MS
function M.interval_ms() return next_ms end

-- Why a candidate waits, by rule, as last logged: said once per change.
local said = {}

-- Every rule of the policy, in a fixed order: { ns, app, from, to, after_ms }.
function M.rules(pol)
  local out = {}
  for name, a in pairs(pol and pol.applications or {}) do
    for from, r in pairs(a.promote or {}) do
      out[#out + 1] = { key = name .. "/" .. from, ns = a.namespace, app = a.application, from = from, to = r.to,
        after_ms = r.after_ms }
    end
  end
  table.sort(out, function(x, y) return x.key < y.key end)
  return out
end

-- quiet_ms: since the later of its going live and the last time an alert on
-- its target resolved (a row not firing was last written by its RESOLVED
-- edge, at the database's time: last_notified_at), so an alert that fired
-- and resolved during the wait starts the wait again.
local PART = "(SELECT ? AS k, p.id, p.status, p.trigger_type, " ..
  "TIMESTAMPDIFF(MICROSECOND, p.status_changed_at, NOW(6)) DIV 1000 AS live_ms, " ..
  "TIMESTAMPDIFF(MICROSECOND, GREATEST(p.status_changed_at, COALESCE((SELECT MAX(a.last_notified_at) " ..
  "FROM alert_state a WHERE a.namespace = p.namespace AND a.application = p.application " ..
  "AND a.environment = p.environment AND a.firing = 0), p.status_changed_at)), NOW(6)) DIV 1000 AS quiet_ms, " ..
  "(SELECT q.id FROM pipeline q WHERE q.promoted_from = p.id) AS promoted, " ..
  "(SELECT COUNT(*) FROM alert_state a WHERE a.namespace = p.namespace AND a.application = p.application " ..
  "AND a.environment = p.environment AND a.firing = 1) AS firing " ..
  "FROM pipeline p WHERE p.namespace = ? AND p.application = ? AND p.environment = ? " ..
  "ORDER BY p.created_at DESC, p.id DESC LIMIT 1)"

-- The candidate rows of rules[i..j]: one statement.
function M.read(rules, i, j)
  local parts, args = {}, {}
  for k = i, j do
    local r = rules[k]
    parts[#parts + 1] = PART
    for _, v in ipairs({ k, r.ns, r.app, r.from }) do args[#args + 1] = v end
  end
  return oops.db.exec(table.concat(parts, " UNION ALL "), table.unpack(args))
end

local function say(r, text, fields)
  if said[r.key] == text then return end
  said[r.key] = text
  log.info(text, fields)
end

-- What a candidate row of rule r asks for: nil (nothing), or the ms until it is due (0: now).
function M.due(r, row)
  if row.status ~= "SUCCEEDED" or row.trigger_type == "rollback" or row.promoted then return nil end
  if tonumber(row.firing) > 0 then return nil, "firing" end
  return math.max(0, r.after_ms - tonumber(row.quiet_ms))
end

local function promote(r, row)
  local live, quiet = math.floor(tonumber(row.live_ms)), math.floor(tonumber(row.quiet_ms))
  local id, what, why = oops.store.promote { from = row.id, to = r.to,
    message = ("Promoted from %s: %s was live there for %s%s."):format(r.from, row.id, duration.format(live),
      quiet < live and (", the last " .. duration.format(quiet) .. " with no alert") or "") }
  local fields = { scan = SCAN, pipeline = row.id, app = r.ns .. "/" .. r.app, env = r.to }
  if id and what == "made" then
    oops.metrics.inc("oops_promotions_total")
    said[r.key] = nil
    log.info(("promoted %s from %s to %s: %s"):format(row.id, r.from, r.to, id), fields)
  elseif id == false and why == "exists" then
    say(r, "promotion waits: an unfinished pipeline in " .. r.to, fields)
  elseif id == nil then
    log.warn("promotion failed (next tick): " .. tostring(what), fields)
  end -- promoted by someone else, or no longer a candidate: nothing to do
  return id ~= nil
end

function M.run(pol)
  -- The lock is taken even without a rule, as every leader scan's: a free
  -- leader lock makes the watcher wake this scan at each of its rounds.
  if not leader.hold(LOCK, SCAN) then
    next_ms = M.IDLE_INTERVAL_MS -- (the watcher wakes this scan when the lock comes free)
    return
  end
  local rules = M.rules(pol)
  if #rules == 0 then
    next_ms = M.IDLE_INTERVAL_MS
    return
  end
  next_ms = M.INTERVAL_MS
  for i = 1, #rules, M.PER_STATEMENT do
    local rows, err = M.read(rules, i, math.min(i + M.PER_STATEMENT - 1, #rules))
    if not rows then error("reading promotion candidates: " .. tostring(err)) end
    for _, row in ipairs(rows) do
      local r = rules[tonumber(row.k)]
      local wait, why = M.due(r, row)
      if why == "firing" then
        say(r, "promotion of " .. row.id .. " waits: an alert fires on " .. r.ns .. "/" .. r.app .. " in " .. r.from,
          { scan = SCAN, pipeline = row.id })
      elseif wait == 0 then
        if not promote(r, row) then next_ms = math.min(next_ms, 1000) end
      elseif wait then
        next_ms = math.min(next_ms, wait + 5)
      end
    end
  end
  next_ms = math.max(next_ms, M.MIN_INTERVAL_MS)
end

return M
