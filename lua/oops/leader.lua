-- Sticky leadership for the restart, alert and notify scans: the leader lock
-- is taken on the first tick and kept until the server stops or its lock
-- session is lost (the registry then forgets every lock). Releasing after each
-- tick would let another server's tick in the same minute fire the same
-- restart again.
local oops = require("oops")
local log = require("oops.log")

local M = {}

-- The leader lock of a scan: oops:leader:SCAN, from the binding
-- (oops.locks.names.leaders, src/lock_names.h). Raises for a scan not listed
-- there (OOPS_LEADER_SCANS): `oopsctl locks` shows exactly those, so a new
-- leader scan is added to that one list and nowhere else.
function M.lock(scan)
  local name = oops.locks.names.leaders[scan]
  if not name then
    error(("no leader lock for scan %q: add it to OOPS_LEADER_SCANS in src/lock_names.h"):format(
      tostring(scan)), 2)
  end
  return name
end

-- Does this server lead `name` now? Takes the lock when it is free. A server
-- that does not lead asks only when the watcher's answer says the lock may be
-- free (lua/oops/watch.lua): an idle follower sends nothing for it.
function M.hold(name, scan)
  if oops.locks.holds(name) then return true end
  if not require("oops.watch").leader_may_be_free(scan) then return false end
  local got = oops.locks.acquire(name)
  if got then log.info("leading: took " .. name, { scan = scan }) end
  return got == true
end

-- The database's clock minus this server's (seconds), as last measured by
-- M.db_now. Schedules are judged on the database's clock; this lets a
-- server whose own clock runs ahead or behind wake when the database's
-- minute starts, not its own.
M.offset_s = 0

-- The database's time now (seconds, fractional), measuring the offset on
-- the way (the binding reads this server's clock just before and after the
-- statement's round trip; the midpoint stands for the moment the database
-- read its clock — a wait for a free connection does not count).
function M.db_now()
  local now, err, mid = oops.db.now()
  if not now then return nil, err, mid end
  M.offset_s = now - mid
  return now
end

-- Does the database say our lock session holds `name` right now (one
-- statement)? The held set in memory can be stale: a server frozen past its
-- session timeout still believes it until its validation runs. true | false
-- (also with the lock session down) | nil, err when the query failed.
function M.owned(name)
  local me = oops.locks.connection_id()
  if me == 0 then return false end
  local rows, err = oops.db.exec("SELECT IS_USED_LOCK(?) AS owner", name)
  if not rows then return nil, err end
  return rows[1] ~= nil and rows[1].owner == me
end

-- Milliseconds from now to the next multiple of period_ms on the database's
-- clock (this server's clock plus the measured offset), plus a little, so a
-- tick never lands just before the boundary.
function M.until_next(period_ms)
  local now = (oops.time() + M.offset_s) * 1000
  return math.floor(period_ms - (now % period_ms)) + 5
end

return M
