-- Entry point of `oopsctl scenario FILE` (oopsctl runs: oopsd lua <this> FILE).
-- OOPS_DB, OOPSD and OOPSCTL come from oopsctl's environment.
local lfs = require("lfs")
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
if not url or url == "" then
  io.stderr:write("oopsctl scenario: no database URL: pass --db mysql://user@host/db or set OOPS_DB\n")
  os.exit(1)
end
-- A private directory for the servers' policies and logs.
local work = os.tmpname()
os.remove(work)
assert(lfs.mkdir(work))
local rc = require("oops.scenario").main(path, url, os.getenv("OOPSD"), os.getenv("OOPSCTL"), work)
if rc == 0 then
  for name in lfs.dir(work) do
    if name ~= "." and name ~= ".." then
      local p = work .. "/" .. name
      if lfs.attributes(p, "mode") == "directory" then
        for f in lfs.dir(p) do if f ~= "." and f ~= ".." then os.remove(p .. "/" .. f) end end
      end
      os.remove(p)
    end
  end
  os.remove(work)
else
  io.stderr:write("oopsctl scenario: server logs are kept in " .. work .. "\n")
end
os.exit(rc)
