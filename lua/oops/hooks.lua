-- Calling the operator's hook functions (policy files): under pcall with a
-- traceback and an instruction budget, so a broken hook fails that step's
-- hook call (logged with its file and line), never the server.
local log = require("oops.log")

local M = {}
local current = {}

local BUDGET = 10000000 -- instructions per call

function M.set(hooks) current = hooks or {} end

-- The hook's results, or nil when it is absent or failed.
function M.call(name, ...)
  local fn = current[name]
  if not fn then return nil end
  local co = coroutine.create(fn)
  debug.sethook(co, function() error("runaway hook: more than " .. BUDGET .. " instructions", 2) end, "", BUDGET)
  local res = table.pack(coroutine.resume(co, ...))
  if not res[1] then
    log.error("hook " .. name .. " failed: " .. tostring(res[2]),
      { traceback = debug.traceback(co) })
    return nil
  end
  if coroutine.status(co) ~= "dead" then
    log.error("hook " .. name .. " yielded; hooks must not wait")
    return nil
  end
  return table.unpack(res, 2, res.n)
end

return M
