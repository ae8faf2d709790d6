-- Sticky leadership for the restart, alert and notify scans: the leader lock
-- is taken on the first tick and kept until the server stops or its lock
-- session is lost (the registry then forgets every lock). Releasing after each
-- tick would let another server's tick in the same minute fire the same
-- restart again.
local oops = require("oops")
local log = require("oops.log")

local M = {}

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
