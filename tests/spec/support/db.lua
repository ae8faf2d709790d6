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

-- The environment a child process (oopsd lua, oopsctl) needs for the test
-- database: the URL carries no password (issue 34), and oops.proc hands no
-- OOPS_DB* variable to a child, so the password goes as systemd hands it, a
-- credential: the directory of tests/lib/mariadb.sh's db-password file.
function M.child_env()
  local file = assert(os.getenv("OOPS_DB_PASSWORD_FILE"), "OOPS_DB_PASSWORD_FILE is not set")
  local dir, name = file:match("^(.*)/([^/]+)$")
  assert(name == "db-password", "the password file is not named db-password: " .. file)
  return { CREDENTIALS_DIRECTORY = dir }
end

return M
