-- The specs' one way to the test database (OOPS_TEST_DB, set by tests/run.sh):
-- connect the runtime once for every spec file (they share one Lua state) and
-- migrate. require("support.db").connect() in a spec's before_each.
local oops = require("oops")

local M = {}
local connected = false

function M.connect()
  local url = os.getenv("OOPS_TEST_DB")
  assert(url and url ~= "",
    "OOPS_TEST_DB is not set: run the specs through tests/run.sh (bash tests/run.sh build spec), "
      .. "which starts a throwaway MariaDB and sets it")
  if connected then return end
  local ok, res, err = pcall(oops.connect, { db = url, name = "spec" })
  if not ok and not tostring(res):find("already connected", 1, true) then error(res, 0) end
  assert(not ok or res, "cannot connect to OOPS_TEST_DB: " .. tostring(err))
  assert(oops.migrate())
  connected = true
end

return M
