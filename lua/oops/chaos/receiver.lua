-- The webhook receiver of oopsctl chaos, a process of its own so that the
-- campaign can make it hang for real (SIGSTOP: connections wait in the
-- kernel's backlog until SIGCONT). Every POST to /hook/SECRET is answered
-- 200, or 500 while the file FAIL exists, and logged to LOG as one JSON line
-- { id, status, server, body } (flushed at once); "PORT SECRET\n" goes to
-- PORTFILE (in the campaign's private directory) once it listens. SECRET is
-- 128 random bits made here: another local user, who can reach a loopback
-- port but not the campaign's files, cannot post a delivery that would
-- change the verdict (any other path: 404, nothing logged).
--   oopsd lua receiver.lua LISTEN_HOST LOG PORTFILE FAIL
local oops = require("oops")
local json = require("oops.json")
local host, log_path, port_path, fail_path = arg[1], arg[2], arg[3], arg[4]
assert(host and log_path and port_path and fail_path, "usage: receiver.lua HOST LOG PORTFILE FAIL")

local log = assert(io.open(log_path, "a"))
local MAX_BODY = 65536

local function failing()
  local f = io.open(fail_path, "r")
  if f then f:close() return true end
  return false
end

-- 128 random bits, as hex.
local function secret()
  local f = assert(io.open("/dev/urandom", "rb"))
  local bytes = assert(f:read(16))
  f:close()
  return (bytes:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end
local hook = "/hook/" .. secret()

local srv = assert(oops.http.serve {
  listen = host .. ":0",
  handler = function(req)
    if req.path ~= hook then return 404, "not the hook path\n" end
    if req.method ~= "POST" then return 405, "POST only\n" end
    local status = failing() and 500 or 200
    local id = req.headers["x-oops-event-id"]
    log:write(json.encode { id = id ~= "" and id or nil, status = status, server = req.headers["x-oops-server"],
      body = req.body:sub(1, MAX_BODY) }, "\n")
    log:flush()
    return status, status == 200 and "ok\n" or "failing on purpose (chaos)\n"
  end,
})
local f = assert(io.open(port_path .. ".tmp", "w"))
f:write(srv:port(), " ", hook:sub(7), "\n")
f:close()
assert(os.rename(port_path .. ".tmp", port_path))
-- Serve until killed: the loop answers while this task sleeps.
oops.wait(function()
  while true do oops.sleep(3600 * 1000) end
end)
