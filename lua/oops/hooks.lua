-- Calling the operator's hook functions (policy files) in the policy
-- sandbox (oops.sandbox.run): a memory cap, a wall-clock deadline that
-- holds inside Lua's pattern functions too, and an instruction budget
-- (policy.HOOK_LIMITS). A broken or runaway hook fails that step's hook
-- call (logged with its file and line and a traceback), never the server.
local oops = require("oops")
local log = require("oops.log")
local policy = require("oops.policy")

local M = {}
local current = {}

function M.set(hooks) current = hooks or {} end

-- The hook's results, or nil when it is absent or failed.
function M.call(name, ...)
  local fn = current[name]
  if not fn then return nil end
  local res = table.pack(oops.sandbox.run(fn, policy.HOOK_LIMITS, ...))
  if not res[1] then
    local msg, kind, traceback = res[2], res[3], res[4]
    if kind == "yield" then
      log.error("hook " .. name .. " yielded; hooks must not wait")
    else
      log.error("hook " .. name .. " failed: " .. tostring(msg), { traceback = traceback })
    end
    return nil
  end
  return table.unpack(res, 2, res.n)
end

return M
