-- Entry point of `oopsctl chaos` (oopsctl runs: oopsd lua <this> ARGS).
--   oopsctl chaos --seed N --duration D [--servers K] [--targets N] [--policies DIR] [--keep DIR] [--dry-run]
-- --targets: how many applications and environments the campaign's own
-- policy declares (default 40; not with --policies, whose are the operator's).
-- --dry-run prints the plan (the faults, one line each) and starts nothing.
-- Exit 0: no violation; 1: violations (or the campaign could not run to its
-- end); 2: bad input, or its database could not be started (said in one line).
local lfs = require("lfs")
local oops = require("oops")
local duration = require("oops.duration")

local USAGE = "usage: oopsctl chaos --seed N --duration D [--servers K] [--targets N] [--policies DIR] [--keep DIR] " ..
  "[--dry-run]"

local function bad(msg)
  io.stderr:write("oopsctl chaos: ", msg, "\n", USAGE, "\n")
  os.exit(2)
end

local function parse(argv)
  local o = require("oops.cli").parse(argv, { values = { ["--seed"] = "seed", ["--duration"] = "duration",
    ["--servers"] = "servers", ["--targets"] = "targets", ["--policies"] = "policies", ["--keep"] = "keep" },
    switches = { ["--dry-run"] = "dry_run" }, usage = USAGE, bad = bad })
  o.servers = o.servers or "4"
  if not o.seed then bad("--seed is required (a whole number: the same seed replays the same campaign)") end
  local seed = math.tointeger(tonumber(o.seed))
  if not seed or seed < 0 or not o.seed:match("^%d+$") then
    bad(("--seed %q: a whole number >= 0"):format(o.seed:sub(1, 64)))
  end
  o.seed = seed
  if not o.duration then bad("--duration is required (like 2m or 90s)") end
  local ms = duration.parse(o.duration)
  if not ms or ms < 10000 or ms > 24 * 3600 * 1000 then
    bad(("--duration %q: a duration from 10s to 24h, like 2m or 90s"):format(o.duration:sub(1, 64)))
  end
  o.duration_s = ms / 1000
  local k = math.tointeger(tonumber(o.servers))
  if not k or k < 2 or k > 16 then bad(("--servers %q: 2 to 16"):format(tostring(o.servers):sub(1, 64))) end
  o.servers = k
  if o.targets then
    if o.policies then bad("--targets: the campaign's own policy only (--policies declares its own applications)") end
    local n = math.tointeger(tonumber(o.targets))
    if not n or n < 2 or n > 400 or not o.targets:match("^%d+$") then
      bad(("--targets %q: 2 to 400"):format(o.targets:sub(1, 64)))
    end
    o.targets = n
  else
    o.targets = require("oops.chaos").TARGETS
  end
  local function absolute(p) return p:sub(1, 1) == "/" and p or lfs.currentdir() .. "/" .. p end
  if o.policies then
    o.policies = absolute(o.policies)
    if lfs.attributes(o.policies, "mode") ~= "directory" then
      bad("--policies " .. o.policies .. ": not a directory")
    end
  end
  if o.keep then
    o.keep = absolute(o.keep)
    local mode = lfs.attributes(o.keep, "mode")
    if mode and mode ~= "directory" then bad("--keep " .. o.keep .. ": not a directory") end
    if not mode and not lfs.mkdir(o.keep) then bad("--keep " .. o.keep .. ": cannot create it") end
  end
  return o
end

local o = parse(arg)
o.oopsd, o.oopsctl = os.getenv("OOPSD"), os.getenv("OOPSCTL")
local work
if o.keep then
  -- The work directory inside DIR (several campaigns may keep theirs there).
  work = o.keep .. ("/chaos-seed%d-%d"):format(o.seed, os.time())
  -- Private (0700): its policy, logs and the receiver's secret are nobody else's.
  local made, why = oops.fs.mkdir_private(work)
  if not made then bad("--keep: cannot create " .. tostring(why)) end
else
  local parent
  work, parent = require("oops.scenario.files").workdir("oops-chaos")
  if not work then
    io.stderr:write("oopsctl chaos: cannot create a work directory under " .. tostring(parent) .. "\n")
    os.exit(2)
  end
end
o.work = work

local chaos = require("oops.chaos")
local ran, res = pcall(oops.wait, function()
  local fine, r = xpcall(chaos.run, function(e)
    if type(e) == "table" then return e end
    return debug.traceback(tostring(e))
  end, o)
  chaos.cleanup()
  if not fine then error(r, 0) end
  return r
end)
local rc
if not ran then
  if type(res) == "table" and res.input then
    io.stderr:write("oopsctl chaos: ", res.input, "\n")
    rc = 2
  else
    io.stderr:write("oopsctl chaos: the campaign did not run to its end: ", tostring(res), "\n")
    rc = 1
  end
else
  rc = res == 0 and 0 or 1
end
if rc == 0 and not o.keep then
  require("oops.scenario.files").remove_tree(work)
else
  io.stderr:write("oopsctl chaos: the campaign's files (chaos.log, servers' logs, receiver.log) are in ",
    work, "\n")
end
-- The summary last, after anything said on stderr: one line ends the run.
local summary = chaos.summary()
if summary and not o.dry_run then
  io.stderr:flush()
  io.write(summary, "\n")
end
os.exit(rc)
