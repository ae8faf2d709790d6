-- Running steps side by side: one slow gateway call (a slow cluster, a hung
-- command) delays no other pipeline or restart, and the caller still waits
-- for all of them, so a scan tick never overlaps the next.
local oops = require("oops")
local log = require("oops.log")

local M = {}

-- Run each fn() in its own task and wait for all. An error in one is logged
-- (with its traceback) and does not stop the others. Returns the number that
-- failed. Must be called from a task.
function M.all(fns, what)
  if #fns == 0 then return 0 end
  local me = oops.current()
  assert(me, "tasks.all must be called from a task")
  local left, failed = #fns, 0
  for i, fn in ipairs(fns) do
    oops.task((what or "step") .. " " .. i, function()
      local ok, err = xpcall(fn, debug.traceback)
      if not ok then
        failed = failed + 1
        log.failure(what or "step", err)
      end
      left = left - 1
      if left == 0 then oops.wake(me) end
    end)
  end
  if left > 0 then oops.suspend() end
  return failed
end

return M
