-- Entry point of `oopsctl scenario FILE` (oopsctl runs: oopsd lua <this> FILE).
-- OOPS_DB, OOPSD and OOPSCTL come from oopsctl's environment. Without OOPS_DB
-- (no --db) the scenario runs on a throwaway MariaDB of its own, started in
-- its work directory (lua/oops/scenario/mariadb.lua) and removed at the end,
-- also when the scenario fails or errors.
local lfs = require("lfs")
local oops = require("oops")
local path = arg[1]
if not path then
  io.stderr:write("usage: oopsctl [--db URL] scenario FILE\n")
  os.exit(1)
end
if not lfs.attributes(path) then
  io.stderr:write("oopsctl scenario: " .. path .. ": no such file\n")
  os.exit(1)
end
local url = os.getenv("OOPS_DB")
if url == "" then url = nil end


-- A private directory for the servers' policies and logs (and the database's
-- data when it is our own), under $TMPDIR when set.
local work, parent = require("oops.scenario.files").workdir("oops-scenario")
if not work then
  io.stderr:write("oopsctl scenario: cannot create a work directory under " .. parent .. "\n")
  os.exit(1)
end

local scenario = require("oops.scenario")
local db
if not url then
  local ran, started, err = pcall(oops.wait, function()
    -- A scenario may need more of its database (M.database_options: extra
    -- addresses to listen on and to accept the oops user from; it runs `ip`).
    local extra = scenario.database_options and scenario.database_options(path) or {}
    return require("oops.scenario.mariadb").start {
      dir = work .. "/mariadb", bind = extra.bind, clients = extra.clients }
  end)
  if not ran or not started then
    io.stderr:write("oopsctl scenario: cannot start a database of its own: " ..
      tostring(ran and err or started) .. " (files kept in " .. work .. ")\n")
    pcall(oops.wait, scenario.netns_cleanup)
    os.exit(2)
  end
  db, url = started, started.url
end

local ran, rc = pcall(scenario.main, path, url, os.getenv("OOPSD"),
  os.getenv("OOPSCTL"), work, db)
if not ran then
  io.stderr:write("oopsctl scenario: " .. tostring(rc) .. "\n")
  rc = 1
end

if db then
  -- Keep the database's own log next to the servers' when the run failed.
  if rc ~= 0 then os.rename(db.dir .. "/error.log", work .. "/mariadb-error.log") end
  local stopped, done, err = pcall(oops.wait, function() return db:stop() end)
  if not stopped or not done then
    io.stderr:write("oopsctl scenario: stopping its database: " ..
      tostring(stopped and err or done) .. "\n")
    if rc == 0 then rc = 1 end
  end
end
-- Network namespaces and the hub address (lua/oops/scenario/netns.lua) of a run that
-- never reached its cleanup.
pcall(oops.wait, scenario.netns_cleanup)

if rc == 0 then
  require("oops.scenario.files").remove_tree(work)
else
  io.stderr:write("oopsctl scenario: server logs are kept in " .. work .. "\n")
end
os.exit(rc)
