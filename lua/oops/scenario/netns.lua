-- oops.scenario.netns: Linux network namespaces for scenarios — a server in a
-- namespace of its own, joined to the root namespace by a veth pair, whose
-- link a scenario cuts (a partition) and heals.
--
--   local N = require("oops.scenario.netns")
--   local fine, why = N.available()      -- true, or nil + the reason (not root,
--                                        -- `ip` missing, namespaces refused)
--   local ns = assert(N.create())        -- or N.create("name")
--   ns.name, ns.host_addr, ns.addr       -- root side and inside of a private /30
--   ns:argv({ "/path/oopsd", ... })      -- { "ip", "netns", "exec", NAME, "/path/oopsd", ... }
--   ns:cut()  ns:heal()  ns:destroy()    -- true, or nil + message
--   local hub = assert(N.hub())          -- "10.213.0.X": see below
--   N.CLIENTS                            -- "10.213.0.0/255.255.0.0": every inside address
--
-- The /30 is picked at random from 10.213.1.0 - 10.213.255.255, avoiding
-- addresses already on this host. Inside, loopback is up and the only other
-- interface is the veth end; the root side's address (ns.host_addr) reaches
-- the root namespace.
--
-- The hub: a service that must be reachable from namespaces made later (a
-- database started before the scenario decides how many namespaces it wants)
-- listens on the hub address, one /32 in 10.213.0.0/24 on the root
-- namespace's loopback (label lo:oopsd<pid>), made once per process by
-- N.hub() and removed by N.remove_hub(). Every namespace made while a hub
-- exists routes it through its veth, so cutting the link cuts the hub too.
-- Its clients connect from their inside addresses, all within N.CLIENTS.
--
-- cut() sets both ends of the veth down. Packets are dropped silently, like a
-- real partition: an established TCP connection gets no reset and just hangs
-- (its reads time out, its retransmits are lost), while a new connect() from
-- inside fails at once with "Network is unreachable" (the route to the /30
-- goes with the link). heal() sets both ends up again; the routes come back
-- with the link, and a connection the peer closed meanwhile then sees the
-- peer's FIN or a reset.
--
-- Everything runs `ip` (iproute2) as argv through oops.proc.run, so these
-- calls must be made from a task, as root. Automatic names are
-- "oopsd-<pid>-<n>"; create() also removes such namespaces left behind by a
-- process that no longer exists (a run killed before its cleanup).
-- Failures name the command and its stderr:
--   `ip link add ovab12cdh type veth peer name ovab12cdn netns x` failed: RTNETLINK answers: Operation not permitted
local oops = require("oops")
local read_file = require("oops.scenario.files").read

local N = {}

local NS = {}
NS.__index = NS

local TIMEOUT_MS = 10000

N.CLIENTS = "10.213.0.0/255.255.0.0"

local function show(argv) return "`" .. table.concat(argv, " ") .. "`" end

local function last_line(s)
  s = (s or ""):gsub("%s+$", "")
  return s:match("([^\n]*)$")
end

-- Run argv: true, nil, its stdout; or nil, a one-line message naming the
-- command, its stderr.
local function run(argv)
  local r, err = oops.proc.run { argv = argv, timeout_ms = TIMEOUT_MS }
  if not r then return nil, show(argv) .. " failed: " .. tostring(err), "" end
  if r.ok then return true, nil, r.stdout end
  local why = last_line(r.stderr)
  if why == "" then why = last_line(r.stdout) end
  if r.timed_out then why = "no answer within " .. TIMEOUT_MS // 1000 .. " s"
  elseif r.signal ~= 0 then why = "killed by signal " .. r.signal
  elseif why == "" then why = "exit status " .. r.status end
  return nil, show(argv) .. " failed: " .. why, r.stderr
end

local function my_pid()
  local stat = read_file("/proc/self/stat")
  return stat and tonumber(stat:match("^(%d+)")) or 0
end

local function my_uid()
  local status = read_file("/proc/self/status")
  return status and tonumber(status:match("\nUid:%s*(%d+)"))
end

local function tag()
  return ("%06x"):format(math.random(0, 0xffffff))
end

---------------------------------------------------------------- availability

local probed -- { true } or { nil, reason }: probing once per process is enough

-- Whether namespaces with a veth pair can be made here: true, or nil and the
-- reason. Creates and removes a probe namespace the first time.
function N.available()
  if probed then return probed[1], probed[2] end
  local function verdict(fine, why) probed = { fine, why } return fine, why end
  local r = oops.proc.run { argv = { "ip", "-V" }, timeout_ms = TIMEOUT_MS }
  if not r or not r.ok then
    return verdict(nil, "`ip` (iproute2) is not installed")
  end
  local uid = my_uid()
  if uid ~= 0 then
    return verdict(nil, ("not root (uid %s): creating network namespaces needs root"):format(tostring(uid)))
  end
  local t = tag()
  local name, veth = "oopsd-probe-" .. t, "ov" .. t
  local steps = {
    { "ip", "netns", "add", name },
    { "ip", "link", "add", veth .. "h", "type", "veth", "peer", "name", veth .. "n", "netns", name },
    { "ip", "netns", "exec", name, "ip", "link", "set", "dev", "lo", "up" },
  }
  local fine, why = true, nil
  for _, argv in ipairs(steps) do
    fine, why = run(argv)
    if not fine then break end
  end
  run { "ip", "link", "del", veth .. "h" }
  run { "ip", "netns", "del", name }
  if not fine then return verdict(nil, why) end
  return verdict(true)
end

---------------------------------------------------------------- creating one

local seq = 0

local function gone(pid) return not read_file("/proc/" .. pid .. "/stat") end

-- Namespaces named "oopsd-<pid>-<n>" and hub addresses labelled
-- lo:oopsd<pid> whose pid is gone were left behind by a run killed before
-- its cleanup: remove them (a namespace's veth pair goes with it).
local function remove_stale()
  local fine, _, out = run { "ip", "netns", "list" }
  if fine then
    for line in out:gmatch("[^\n]+") do
      local name, pid = line:match("^(oopsd%-(%d+)%-%S+)")
      if name and gone(pid) then run { "ip", "netns", "del", name } end
    end
  end
  fine, _, out = run { "ip", "-4", "-o", "addr", "show", "dev", "lo" }
  if fine then
    for line in out:gmatch("[^\n]+") do
      local addr, pid = line:match("inet (10%.213%.0%.%d+)/32 .*lo:oopsd(%d+)")
      if addr and gone(pid) then run { "ip", "addr", "del", addr .. "/32", "dev", "lo" } end
    end
  end
end

-- A free /30 in 10.213.0.0/16: its first address (root side) and second (inside).
local function pick_block()
  local fine, err, out = run { "ip", "-4", "-o", "addr", "show" }
  if not fine then return nil, err end
  local used = {}
  for a, b in out:gmatch("inet 10%.213%.(%d+)%.(%d+)") do
    used[tonumber(a) * 64 + tonumber(b) // 4] = true
  end
  for _ = 1, 200 do
    local k = math.random(64, 16382) -- 10.213.0.0/24 is for hubs
    if not used[k] then
      local net = ("10.213.%d."):format(k // 64)
      local last = (k % 64) * 4
      return net .. (last + 1), net .. (last + 2)
    end
  end
  return nil, "no free /30 in 10.213.0.0/16"
end

local hub -- the hub address once made

-- The hub address (made the first time): a string, or nil + message.
function N.hub()
  if hub then return hub end
  remove_stale()
  local fine, err, out = run { "ip", "-4", "-o", "addr", "show" }
  if not fine then return nil, err end
  local used = {}
  for x in out:gmatch("inet 10%.213%.0%.(%d+)") do used[tonumber(x)] = true end
  local addr
  for _ = 1, 200 do
    local x = math.random(1, 254)
    if not used[x] then addr = "10.213.0." .. x break end
  end
  if not addr then return nil, "no free hub address in 10.213.0.0/24" end
  fine, err = run { "ip", "addr", "add", addr .. "/32", "dev", "lo", "label", "lo:oopsd" .. my_pid() }
  if not fine then return nil, err end
  hub = addr
  return hub
end

-- Remove the hub address (nothing when there is none).
function N.remove_hub()
  if not hub then return true end
  local fine, err, stderr = run { "ip", "addr", "del", hub .. "/32", "dev", "lo" }
  if not fine and not (stderr or ""):find("Cannot assign", 1, true) then return nil, err end
  hub = nil
  return true
end

-- Create a namespace (name given, or "oopsd-<pid>-<n>") joined to the root
-- namespace by a veth pair with a private /30. The ns object, or nil + message.
function N.create(name)
  if name ~= nil and (type(name) ~= "string" or not name:match("^[%w_.%-]+$") or #name > 64) then
    error(("netns.create: name %q must be 1-64 letters, digits, '_', '.' or '-'"):format(tostring(name)), 2)
  end
  remove_stale()
  if not name then
    seq = seq + 1
    name = ("oopsd-%d-%d"):format(my_pid(), seq)
  end
  local host_addr, addr = pick_block()
  if not host_addr then return nil, addr end
  local t = tag()
  local ns = setmetatable({ name = name, host_addr = host_addr, addr = addr,
    host_veth = "ov" .. t .. "h", veth = "ov" .. t .. "n", is_cut = false }, NS)
  local fine, err = run { "ip", "netns", "add", name }
  if not fine then return nil, err end
  local steps = {
    { "ip", "link", "add", ns.host_veth, "type", "veth", "peer", "name", ns.veth, "netns", name },
    { "ip", "addr", "add", host_addr .. "/30", "dev", ns.host_veth },
    { "ip", "link", "set", "dev", ns.host_veth, "up" },
    { "ip", "-n", name, "addr", "add", addr .. "/30", "dev", ns.veth },
    { "ip", "-n", name, "link", "set", "dev", ns.veth, "up" },
    { "ip", "-n", name, "link", "set", "dev", "lo", "up" },
  }
  if hub then
    ns.hub = hub
    steps[#steps + 1] = { "ip", "-n", name, "route", "replace", hub .. "/32", "via", host_addr }
  end
  for _, argv in ipairs(steps) do
    fine, err = run(argv)
    if not fine then
      ns:destroy()
      return nil, err
    end
  end
  return ns
end

---------------------------------------------------------------- using one

-- argv run inside the namespace.
function NS:argv(argv)
  assert(type(argv) == "table" and #argv > 0, "ns:argv: argv must be a non-empty list of strings")
  local out = { "ip", "netns", "exec", self.name }
  for _, a in ipairs(argv) do out[#out + 1] = a end
  return out
end

-- Cut the link: both veth ends down, packets dropped silently.
function NS:cut()
  local fine, err = run { "ip", "-n", self.name, "link", "set", "dev", self.veth, "down" }
  if fine then fine, err = run { "ip", "link", "set", "dev", self.host_veth, "down" } end
  if not fine then return nil, err end
  self.is_cut = true
  return true
end

-- Heal the link: both ends up again.
function NS:heal()
  local fine, err = run { "ip", "link", "set", "dev", self.host_veth, "up" }
  if fine then fine, err = run { "ip", "-n", self.name, "link", "set", "dev", self.veth, "up" } end
  -- The route to the hub went with the link.
  if fine and self.hub then
    fine, err = run { "ip", "-n", self.name, "route", "replace", self.hub .. "/32", "via", self.host_addr }
  end
  if not fine then return nil, err end
  self.is_cut = false
  return true
end

-- Remove the veth pair and the namespace; a second call does nothing. A
-- process still inside keeps the namespace alive (unnamed) until it exits.
function NS:destroy()
  if self.destroyed then return true end
  local fine, err, stderr = run { "ip", "link", "del", self.host_veth }
  if not fine and not (stderr or ""):find("Cannot find device", 1, true) then return nil, err end
  fine, err, stderr = run { "ip", "netns", "del", self.name }
  if not fine and not (stderr or ""):find("No such file", 1, true) then return nil, err end
  self.destroyed = true
  return true
end

return N
