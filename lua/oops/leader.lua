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

-- Does this server lead `name` now? Takes the lock when it is free.
function M.hold(name, scan)
  if oops.locks.holds(name) then return true end
  local got = oops.locks.acquire(name)
  if got then log.info("leading: took " .. name, { scan = scan }) end
  return got == true
end

-- Milliseconds from now to the next multiple of period_ms on the wall clock
-- (plus a little, so a tick never lands just before the boundary).
function M.until_next(period_ms)
  local now = oops.time() * 1000
  return math.floor(period_ms - (now % period_ms)) + 5
end

return M
