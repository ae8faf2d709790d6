-- Which of the free pipelines a server takes at a tick (issue 36): the
-- servers share new work without racing for it.
--
-- Every live server has a rank, its place among the live servers' names in
-- order (0 .. live - 1), and every pipeline id a slot on that ring, a hash of
-- the id modulo the live count. A server takes first the free pipelines whose
-- slot is its rank: two servers that agree on who is alive never ask for the
-- same pipeline, so no GET_LOCK is lost and no statement spent on one.
-- Before, each took a random share of all the free ones, and the more servers
-- the more of them raced for the same rows: statements per pipeline rose from
-- 7.2 at 50 servers to 15.0 at 200 (bench/README.md, issue 24).
--
-- The others' new pipelines are taken only once they have waited: free at
-- this server's previous tick too (their slot's server is gone, not yet
-- counted, or slow). Those are picked at random, like before, since every
-- server sees them. So a pipeline whose server does not come waits at most
-- one tick more of another server's. A free pipeline past its start
-- (RUNNING, DEPLOYING, ROLLING_OUT: its driver is gone) is nobody's on the
-- ring: any server takes it at once, so a takeover never waits for a ring
-- slot; and right after a takeover (watch.taking_over) a server takes every
-- free one at once, as before.
--
-- Pure functions over ids and numbers: spec/share_spec.lua drives them.
local M = {}

-- The ring slot of a pipeline id: 32-bit FNV-1a of its bytes, modulo live.
-- Every server computes the same one.
function M.slot(id, live)
  local h = 2166136261
  for i = 1, #id do h = ((h ~ id:byte(i)) * 16777619) & 0xffffffff end
  return h % live
end

-- New work, shared on the ring: a pipeline not started yet, or built and
-- waiting for its deploy (a release requested or automatic).
M.NEW = { INITIALIZED = true, BUILD_SUCCEEDED = true }

-- o: free (ids, oldest first), statuses (each one's, or nil: all new),
-- live (>= 1), rank (this server's, 0-based),
-- max_new, all (take any: a takeover), waited (set of ids free at this
-- server's previous tick, or nil), random (function(m, n), default
-- math.random). Returns the ids to ask locks for (at most the fair share,
-- ceil(#free / live), and max_new), the set to pass as `waited` next tick
-- (the free ones this server left to others, bounded by #free), and that
-- fair share (what a full tick would have taken).
function M.pick(o)
  local free, live, max_new = o.free, math.max(o.live or 1, 1), o.max_new
  local random = o.random or math.random
  local picked, left = {}, {}
  if o.all then
    for k = 1, math.min(#free, max_new) do picked[k] = free[k] end
    return picked, left, math.min(#free, max_new)
  end
  local share = math.min(math.ceil(#free / live), max_new)
  local rank = o.rank or 0
  if rank >= live then live = rank + 1 end -- not counted live yet: a ring with us on it
  local others = {}
  local statuses = o.statuses
  for i, id in ipairs(free) do
    if live == 1 or M.slot(id, live) == rank then
      if #picked < share then picked[#picked + 1] = id end
    elseif statuses and not M.NEW[statuses[i]] then
      others[#others + 1] = id -- a gone driver's: anyone's, at once
    else
      left[id] = true
      if o.waited and o.waited[id] then others[#others + 1] = id end
    end
  end
  -- Room left: gone drivers' and the others' that waited a tick, a random few.
  local room = math.min(share - #picked, #others)
  for k = 1, room do
    local j = random(k, #others)
    others[k], others[j] = others[j], others[k]
    picked[#picked + 1] = others[k]
    left[others[k]] = nil
  end
  return picked, left, share
end

return M
