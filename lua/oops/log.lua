-- Logging for the engine: one key=value line per event (the C side writes it).
--   log.info("claimed", { scan = "build", pipeline = id })
local oops = require("oops")

local M = {}
for _, level in ipairs({ "debug", "info", "warn", "error" }) do
  M[level] = function(msg, fields) oops.log(level, msg, fields) end
end
return M
