-- Entry point of `oopsctl stats` (oopsctl runs: oopsd lua <this> ARGS).
--   oopsctl [--db URL] stats [--app NS/APP] [--env ENV] [--since 7d|30d|90d] [--json]
-- The four delivery figures (lua/oops/stats/) over the last --since days
-- (default 30d, whole days up to 90d), per target and in all (the fleet, or
-- the targets --app and --env select). oopsctl has checked the flags'
-- shape (so --db never reaches this argv) and passes them as --json,
-- --app=X, --env=X, --since=X; OOPS_DB is the database URL. Exit codes as
-- oopsctl's: 0 ok, 1 bad input (a flag, no database URL, a schema to
-- migrate), 2 the database unreachable.
local oops = require("oops")
local stats = require("oops.stats")
local json = require("oops.json")

local USAGE = "usage: oopsctl [--db URL] stats [--app NS/APP] [--env ENV] [--since 7d|30d|90d] [--json]"
local LABEL = "^[a-z0-9][a-z0-9%-]*$" -- a DNS label (at most 63 characters, checked apart)

local function say(msg) io.stderr:write("oopsctl: stats: ", msg, "\n") end
local function bad(msg, usage)
  say(msg)
  if usage then io.stderr:write(USAGE, "\n") end
  os.exit(1)
end

local function label(s) return #s <= 63 and s:match(LABEL) and s:sub(-1) ~= "-" end

local o = require("oops.cli").parse(arg, { values = { ["--app"] = "app", ["--env"] = "env", ["--since"] = "since" },
  switches = { ["--json"] = "json" }, usage = USAGE, bad = bad })
local window_s, err = stats.parse_window(o.since or "30d")
if not window_s then bad("--since " .. err) end
local ns, app
if o.app then
  ns, app = o.app:match("^([^/]+)/([^/]+)$")
  if not (ns and label(ns) and label(app)) then
    bad(("--app %q: expected NAMESPACE/APPLICATION, each a lowercase DNS label"):format(o.app:sub(1, 64)))
  end
end
if o.env and not label(o.env) then
  bad(("--env %q: expected a lowercase DNS label"):format(o.env:sub(1, 64)))
end

local url = os.getenv("OOPS_DB")
if not url or url == "" then bad("no database: pass --db URL or set OOPS_DB") end
local called, connected, name
called, connected, err, name = pcall(oops.connect, { db = url, locks = false })
if not called then bad(tostring(connected)) end -- a malformed URL
if not connected then
  say(tostring(err))
  os.exit((name == "unreachable" or name == "gone") and 2 or 1)
end

local data
data, err, name = stats.read(oops.db.exec, window_s)
if not data then
  if name == "unreachable" or name == "gone" then
    say("database connection lost: " .. tostring(err))
    os.exit(2)
  end
  bad("reading the history: " .. tostring(err) .. (name == "not_found" and " (run `oopsctl migrate` first)" or ""))
end
local want
if ns or o.env then
  want = function(t)
    local tns, tapp, tenv = t:match("^([^/]+)/([^/]+)/([^/]+)$")
    return (not ns or (tns == ns and tapp == app)) and (not o.env or tenv == o.env)
  end
end
local f = stats.figures(data, window_s, want)
if o.json then
  f.app, f.env = o.app or json.null, o.env or json.null
  io.write(json.encode(f), "\n")
else
  local scope = (o.app and o.env) and (o.app .. "/" .. o.env) or o.app or (o.env and ("*/" .. o.env)) or nil
  io.write(stats.text(f, scope and ("all of " .. scope) or "fleet"))
end
os.exit(0)
