-- oops.formats.json: the body every webhook received before formats existed
-- (oops.notification encode), byte for byte, so a receiver written against
-- it keeps working: id, kind, type, level, title, facts, advice, time.
local notify = require("oops.notification")

local M = {}

function M.render(m, _)
  return notify.encode(m), "application/json", {}
end

return M
