-- Whole-file reads and writes for the scenario runner and its throwaway
-- MariaDB (logs, policy files).
local M = {}

-- The file's text, or "" when it does not exist (yet).
function M.read(path)
  local f = io.open(path, "r")
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

-- Replace the file's text; raises when it cannot be written.
function M.write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

return M
