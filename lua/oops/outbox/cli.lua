-- Entry point of `oopsctl outbox` (oopsctl runs: oopsd lua <this> ARGS).
--   oopsctl [--db URL] outbox [--route NAME] [--json] [--policies DIR]
-- The notification backlog per route of the policy (--policies DIR, else
-- $OOPS_POLICIES; without one, the backlog as a whole): lua/oops/outbox/.
-- oopsctl has checked its flags (so --db never reaches this argv) and
-- passes them as --json, --route=NAME, --policies=DIR; OOPS_DB is the
-- database URL. Exit codes as oopsctl's: 0 ok, 1 bad input (a flag, an
-- unknown route, a policy that does not load, no database URL), 2 the
-- database unreachable.
local oops = require("oops")
local outbox = require("oops.outbox")

local USAGE = "usage: oopsctl [--db URL] outbox [--route NAME] [--json] [--policies DIR]"

local function say(msg) io.stderr:write("oopsctl: outbox: ", outbox.escape(msg), "\n") end
local function bad(msg, usage)
  say(msg)
  if usage then io.stderr:write(USAGE, "\n") end
  os.exit(1)
end

local function parse(argv)
  local o = require("oops.cli").parse(argv, { values = { ["--route"] = "route", ["--policies"] = "policies" },
    switches = { ["--json"] = "json" }, usage = USAGE, bad = bad })
  if not o.policies then
    local env = os.getenv("OOPS_POLICIES")
    if env and env ~= "" then o.policies = env end
  end
  return o
end

local o = parse(arg)

-- The policy first: bad input is said before the database is asked.
local routes
if o.policies then
  local pol, errs = require("oops.policy").load_dir(o.policies, { cron_parse = oops.cron.parse })
  if not pol then bad("the policies in " .. o.policies .. " did not load:\n" .. table.concat(errs, "\n")) end
  routes = outbox.routes(pol, require("oops.scans.notify").route_key)
  if o.route then
    local picked = outbox.pick(routes, o.route)
    if #picked == 0 then
      local names = {}
      for k, r in ipairs(routes) do names[k] = r.name end
      bad(("--route %q: no such route in the policies in %s (routes: %s)"):format(o.route:sub(1, 200), o.policies,
        table.concat(names, ", ")))
    end
    routes = picked
  end
elseif o.route then
  bad("--route needs the policy that names the routes: pass --policies DIR or set OOPS_POLICIES")
else
  say("no policy (pass --policies DIR or set OOPS_POLICIES): the backlog is shown without per-route attribution")
end

local url = os.getenv("OOPS_DB")
if not url or url == "" then bad("no database: pass --db URL or set OOPS_DB") end
local called, connected, err, name = pcall(oops.connect, { db = url, locks = false })
if not called then bad(tostring(connected)) end -- a malformed URL
if not connected then
  say(tostring(err))
  os.exit((name == "unreachable" or name == "gone") and 2 or 1)
end

local rep
rep, err, name = outbox.report(oops.db.exec, { policy = o.policies, routes = routes, detail = o.route ~= nil })
if not rep then
  if name == "unreachable" or name == "gone" then
    say("database connection lost: " .. tostring(err))
    os.exit(2)
  end
  bad("reading the outbox: " .. tostring(err) .. (name == "not_found" and " (run `oopsctl migrate` first)" or ""))
end
if o.json then
  io.write(outbox.encode(rep), "\n")
else
  io.write(outbox.text(rep, o.route ~= nil))
end
os.exit(0)
