-- oops.scenario.receiver: a webhook receiver for scenarios and specs, on
-- oops.http.serve. Point a policy's `notify { webhook = r.url }` at it, make
-- it fail on purpose, and check at the end what reached it:
--
--   local r = assert(require("oops.scenario.receiver").start{ fail_first = 2 })
--   -- policy: notify { webhook = r.url }
--   r:fail(true)   -- answer 500 to every request until r:fail(false)
--   r:fail(3)      -- answer 500 to the next 3 requests, then 200 again
--   r:deliveries() -- every POST to r.url, in arrival order:
--                  --   { id =, status =, server =, body =, at = }
--   r:ids()        -- set of event ids answered 2xx: ids()[id] == true
--   r:close()
--
-- A delivery's id is the X-Oops-Event-Id header, else the JSON body's "id"
-- (nil when neither is there); server is the X-Oops-Server header (nil when
-- absent); status is what the receiver answered; at is oops.time() on
-- arrival. Only POSTs to the hook path count: another method is answered
-- 405, another path 404, and neither is recorded.
--
-- The server answers while the loop runs, i.e. while the scenario waits (a
-- task's oops.sleep, oops.wait). It is closed by r:close(), or when the
-- receiver is garbage collected (keep a reference) or the state closes.
local oops = require("oops")
local json = require("oops.json")

local M = {}

local Receiver = {}
Receiver.__index = Receiver

local function count_arg(v, what)
  if math.type(v) ~= "integer" or v < 0 then
    error(what .. " must be a whole number >= 0, got " .. tostring(v), 3)
  end
  return v
end

-- The event id of a webhook request: header first, then the body's "id".
local function event_id(req)
  local id = req.headers["x-oops-event-id"]
  if id and id ~= "" then return id end
  local t = json.decode(req.body)
  if type(t) == "table" and type(t.id) == "string" and t.id ~= "" then return t.id end
  return nil
end

-- Whether this request is to be failed (and counts it down).
function Receiver:_failing()
  if self._fail_always then return true end
  if self._fail_left > 0 then
    self._fail_left = self._fail_left - 1
    return true
  end
  return false
end

function Receiver:_answer(req)
  if req.path ~= self.path then return 404, "not the hook path: POST to " .. self.path .. "\n" end
  if req.method ~= "POST" then return 405, "POST only\n" end
  local status, body = 200, "ok\n"
  if self:_failing() then status, body = 500, "failing on purpose (receiver:fail)\n" end
  local list = self._deliveries
  list[#list + 1] = {
    id = event_id(req), status = status, server = req.headers["x-oops-server"],
    body = req.body, at = oops.time(),
  }
  return status, body
end

--- Start a receiver. opts: fail_first (answer 500 to the first n POSTs,
--- default 0), listen (default "127.0.0.1:0"), path (default "/hook").
--- Raises on a bad option; returns nil, msg when it cannot listen.
function M.start(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("receiver.start takes a table of options", 2) end
  local path = opts.path or "/hook"
  if type(path) ~= "string" or path:sub(1, 1) ~= "/" then
    error("path must be a string starting with /, got " .. tostring(path), 2)
  end
  local r = setmetatable({
    path = path,
    _fail_always = false,
    _fail_left = count_arg(opts.fail_first or 0, "fail_first"),
    _deliveries = {},
  }, Receiver)
  -- The handler refers to r and r to the server: a cycle through the
  -- server's user value, which the collector can still free.
  local srv, err = oops.http.serve {
    listen = opts.listen or "127.0.0.1:0",
    handler = function(req) return r:_answer(req) end,
  }
  if not srv then return nil, err end
  r.server = srv
  r.port = srv:port()
  r.url = srv:url() .. path
  return r
end

--- fail(true): answer 500 to every request until fail(false); fail(false):
--- answer 200 again (also forgets a count); fail(n): answer 500 to the next n
--- requests (n = 0 forgets a count), then 200.
function Receiver:fail(v)
  if v == true or v == false then
    self._fail_always = v
    if not v then self._fail_left = 0 end
  else
    self._fail_always = false
    self._fail_left = count_arg(v, "receiver:fail's argument (true, false or a count)")
  end
end

--- Every recorded delivery attempt, oldest first (a copy).
function Receiver:deliveries()
  local out = {}
  for i, d in ipairs(self._deliveries) do
    out[i] = { id = d.id, status = d.status, server = d.server, body = d.body, at = d.at }
  end
  return out
end

--- The set of event ids answered 2xx at least once: { [id] = true }.
function Receiver:ids()
  local set = {}
  for _, d in ipairs(self._deliveries) do
    if d.id and d.status >= 200 and d.status <= 299 then set[d.id] = true end
  end
  return set
end

--- Stop listening (idempotent). The deliveries stay readable.
function Receiver:close()
  if self.server then self.server:close() end
end

return M
