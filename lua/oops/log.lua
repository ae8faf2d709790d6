-- Logging for the engine: one key=value line per event (the C side writes it).
--   log.info("claimed", { scan = "build", pipeline = id })
local oops = require("oops")

local M = {}
for _, level in ipairs({ "debug", "info", "warn", "error" }) do
  M[level] = function(msg, fields) oops.log(level, msg, fields) end
end
-- Log an error raised under xpcall(fn, debug.traceback): the message on the
-- line, its traceback in a field of its own.
function M.failure(what, err, fields)
  local text = tostring(err)
  local first, tb = text:match("^(.-)\n(stack traceback:.*)$")
  fields = fields or {}
  fields.traceback = tb
  oops.log("error", what .. " failed: " .. (first or text), fields)
end

return M
