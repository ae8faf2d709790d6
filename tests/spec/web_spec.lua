-- lua/oops/web.lua's rate limits of pipeline detail reads (issue 22): token
-- buckets per client address and overall, a bounded table of clients.
local web = require("oops.web")

describe("web.limiter", function()
  local function new(o)
    return web.limiter({ rate = o.rate or 2, burst = o.burst or 3, rate_all = o.rate_all or 100,
      burst_all = o.burst_all or 100, clients = o.clients or 4 })
  end

  it("lets a client read its burst, then at its rate", function()
    local L = new({})
    for i = 1, 3 do assert.is_true(L.take("a", 0), "read " .. i) end
    local ok, wait = L.take("a", 0)
    assert.is_false(ok)
    assert.are.equal(500, wait) -- 2 per second: the next token in 500 ms
    assert.is_false(L.take("a", 499))
    assert.is_true(L.take("a", 500))
    assert.is_false(L.take("a", 500))
    -- idle for long: back to the burst, never more
    for i = 1, 3 do assert.is_true(L.take("a", 60000), "after idling, read " .. i) end
    assert.is_false(L.take("a", 60000))
  end)

  it("keeps clients apart, under a limit for all", function()
    local L = new({ burst_all = 5, rate_all = 1 })
    for _ = 1, 3 do assert.is_true(L.take("a", 0)) end
    assert.is_false(L.take("a", 0))
    assert.is_true(L.take("b", 0)) -- another client has its own bucket
    assert.is_true(L.take("b", 0))
    local ok, wait = L.take("c", 0) -- the overall bucket is empty
    assert.is_false(ok)
    assert.are.equal(1000, wait)
    assert.is_true(L.take("c", 1000))
  end)

  it("a refusal takes no token", function()
    local L = new({ burst = 1, burst_all = 2, rate_all = 1 })
    assert.is_true(L.take("a", 0))
    for _ = 1, 10 do assert.is_false(L.take("a", 0)) end -- refused: the overall bucket keeps its token
    assert.is_true(L.take("b", 0))
  end)

  it("keeps at most `clients` clients, evicting the least recently seen", function()
    local L = new({ clients = 4, burst = 1 })
    for i = 1, 4 do assert.is_true(L.take("c" .. i, i)) end
    assert.is_false(L.take("c1", 10)) -- c1 is seen again: c2 is now the oldest
    assert.is_true(L.take("c5", 11))
    assert.are.equal(4, L.n)
    assert.is_nil(L.clients.c2)
    assert.is_not_nil(L.clients.c1)
    for i = 6, 1000 do L.take("c" .. i, i) end
    assert.are.equal(4, L.n)
    local n = 0
    for _ in pairs(L.clients) do n = n + 1 end
    assert.are.equal(4, n)
  end)
end)

describe("web.unknown_driver", function()
  it("says that no live server holds the lock, with the session", function()
    assert.are.equal("lock session 42, not a live server's", web.unknown_driver(42))
  end)
end)

describe("web.route_backlog", function()
  local hook = { kind = "webhook", url = "http://user:secret@hooks.example:8443/path?token=s3cr3t" }

  it("shows a route's own queue and state, a webhook by its scheme and host only", function()
    local r = web.route_backlog({ n = "5", failing = "2", age_us = "7200000000", failures = "4",
      retry_us = "300000000", route_error = "down: http://user:secret@hooks.example:8443/path?token=s3cr3t",
      row_error = "HTTP 500" }, hook)
    assert.are.same({ kind = "webhook", where = "http://hooks.example:8443/***", pending = 5, failing = 2,
      oldest_s = 7200, capped = false, failures = 4, retry_in_s = 300,
      last_error = "down: http://hooks.example:8443/***" }, r)
  end)

  it("takes the first failing row's error while the route does not back off", function()
    local r = web.route_backlog({ n = "3", failing = "1", age_us = "1000000", failures = "0",
      route_error = "an error of long ago", row_error = "user:pw@host refused" }, { kind = "log" })
    assert.are.equal("log", r.where)
    assert.are.equal("***@host refused", r.last_error)
    assert.is_nil(r.retry_in_s)
  end)

  it("reads an empty queue of a route never registered as nothing pending", function()
    local r = web.route_backlog({ n = "0" }, { kind = "command", argv = { "/usr/bin/notify", "x" } })
    assert.are.same({ kind = "command", where = "/usr/bin/notify", pending = 0, failing = 0, oldest_s = 0,
      capped = false, failures = 0 }, r)
  end)

  it("says when a count reached its bound", function()
    assert.is_true(web.route_backlog({ n = tostring(web.ROUTE_SCAN) }, { kind = "log" }).capped)
  end)
end)
