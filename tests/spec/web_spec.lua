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
