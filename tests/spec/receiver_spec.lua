-- lua/oops/scenario/receiver.lua, the webhook receiver scenarios use, through the
-- real binary: requests shaped like the notify scan's webhooks (POST, JSON
-- body with "id", X-Oops-Event-Id and X-Oops-Server headers) are sent with
-- oops.http.request.
local oops = require("oops")
local receiver = require("oops.scenario.receiver")

local function raises(text, fn, ...)
  local ok, err = pcall(fn, ...)
  assert(not ok, "expected an error containing '" .. text .. "', but the call returned")
  err = tostring(err)
  assert(err:find(text, 1, true), "expected an error containing '" .. text .. "', got: " .. err)
  return err
end

-- One webhook like lua/oops/scans/notify.lua sends; header = false leaves
-- out X-Oops-Event-Id (the id is then only in the body).
local function deliver(url, id, opts)
  opts = opts or {}
  local headers = { ["Content-Type"] = "application/json", ["X-Oops-Server"] = opts.server or "s1" }
  if opts.header ~= false then headers["X-Oops-Event-Id"] = id end
  local body = opts.body or ('{"id":"' .. id .. '","kind":"pipeline","type":"SUCCEEDED"}')
  local res, err = oops.wait(function()
    return oops.http.request { url = url, method = opts.method or "POST", body = body, headers = headers,
                               timeout_ms = 10000 }
  end)
  assert(res, err)
  return res.status, res.body
end

local function statuses(r)
  local out = {}
  for i, d in ipairs(r:deliveries()) do out[i] = d.status end
  return out
end

local function count(set)
  local n = 0
  for _ in pairs(set) do n = n + 1 end
  return n
end

describe("oops.scenario.receiver", function()
  it("records each delivery with its id, status, server, body and time", function()
    local r = assert(receiver.start())
    assert.truthy(r.url:match("^http://127%.0%.0%.1:%d+/hook$"), r.url)
    assert.are.equal(r.port, tonumber(r.url:match(":(%d+)/")))
    local before = oops.time()
    assert.are.equal(200, (deliver(r.url, "pipeline-event-1", { server = "s2" })))
    local after = oops.time()
    r:close()
    local d = r:deliveries()
    assert.are.equal(1, #d)
    assert.are.equal("pipeline-event-1", d[1].id)
    assert.are.equal(200, d[1].status)
    assert.are.equal("s2", d[1].server)
    assert.are.equal('{"id":"pipeline-event-1","kind":"pipeline","type":"SUCCEEDED"}', d[1].body)
    assert.is_true(d[1].at >= before and d[1].at <= after, "at " .. d[1].at)
    assert.are.same({ ["pipeline-event-1"] = true }, r:ids())
  end)

  it("takes the id from the JSON body when the header is missing, nil when neither has one", function()
    local r = assert(receiver.start())
    deliver(r.url, "alert-x-1", { header = false })
    deliver(r.url, "ignored", { header = false, body = "not json" })
    deliver(r.url, "ignored", { header = false, body = '{"kind":"pipeline"}' })
    r:close()
    local d = r:deliveries()
    assert.are.equal(3, #d)
    assert.are.equal("alert-x-1", d[1].id)
    assert.is_nil(d[2].id)
    assert.is_nil(d[3].id)
    assert.are.same({ ["alert-x-1"] = true }, r:ids())
  end)

  it("fail_first answers 500 to the first n deliveries, then 200", function()
    local r = assert(receiver.start { fail_first = 2 })
    local got = {}
    for i = 1, 4 do got[i] = deliver(r.url, "e" .. i) end
    r:close()
    assert.are.same({ 500, 500, 200, 200 }, got)
    assert.are.same({ 500, 500, 200, 200 }, statuses(r))
    assert.are.same({ e3 = true, e4 = true }, r:ids())
  end)

  it("fail(true) fails every delivery until fail(false); a retried id counts once delivered", function()
    local r = assert(receiver.start())
    deliver(r.url, "a")
    r:fail(true)
    local status, body = deliver(r.url, "b")
    deliver(r.url, "b")
    deliver(r.url, "c")
    r:fail(false)
    deliver(r.url, "b")
    deliver(r.url, "b") -- a resend after success: still one id
    r:close()
    assert.are.equal(500, status)
    assert.truthy(body:find("on purpose", 1, true), body)
    assert.are.same({ 200, 500, 500, 500, 200, 200 }, statuses(r))
    assert.are.same({ a = true, b = true }, r:ids())
    assert.are.equal(2, count(r:ids()))
  end)

  it("fail(n) fails the next n deliveries; fail(false) forgets a count", function()
    local r = assert(receiver.start())
    r:fail(1)
    deliver(r.url, "x")
    deliver(r.url, "y")
    r:fail(5)
    r:fail(false)
    deliver(r.url, "z")
    r:fail(2)
    r:fail(0)
    deliver(r.url, "w")
    r:close()
    assert.are.same({ 500, 200, 200, 200 }, statuses(r))
    assert.are.same({ y = true, z = true, w = true }, r:ids())
  end)

  it("records only POSTs to the hook path", function()
    local r = assert(receiver.start { path = "/notify" })
    assert.truthy(r.url:match("/notify$"), r.url)
    local base = r.url:gsub("/notify$", "")
    assert.are.equal(404, (deliver(base .. "/hook", "p")))
    assert.are.equal(405, (deliver(r.url, "g", { method = "GET", body = "" })))
    assert.are.equal(200, (deliver(r.url, "ok")))
    r:close()
    assert.are.same({ 200 }, statuses(r))
    assert.are.same({ ok = true }, r:ids())
  end)

  it("deliveries() is a copy", function()
    local r = assert(receiver.start())
    deliver(r.url, "k")
    r:close()
    local d = r:deliveries()
    d[1].status = 999
    d[2] = { id = "fake", status = 200 }
    assert.are.same({ 200 }, statuses(r))
    assert.are.same({ k = true }, r:ids())
  end)

  it("close stops listening and is idempotent", function()
    local r = assert(receiver.start())
    r:close()
    r:close()
    local res, err = oops.wait(function()
      return oops.http.request { url = r.url, method = "POST", body = "{}", timeout_ms = 10000 }
    end)
    assert.is_nil(res)
    assert.is_string(err)
    assert.are.equal(0, #r:deliveries())
  end)

  it("returns nil and the reason when it cannot listen, raises on bad options", function()
    local r = assert(receiver.start())
    local again, err = receiver.start { listen = "127.0.0.1:" .. r.port }
    r:close()
    assert.is_nil(again)
    assert.truthy(err:find("Address already in use", 1, true), err)
    raises("fail_first must be a whole number >= 0", receiver.start, { fail_first = -1 })
    raises("fail_first must be a whole number >= 0", receiver.start, { fail_first = "2" })
    raises("path must be a string starting with /", receiver.start, { path = "hook" })
    local r2 = assert(receiver.start())
    raises("true, false or a count", r2.fail, r2, "yes")
    raises("true, false or a count", r2.fail, r2, 1.5)
    r2:close()
  end)
end)
