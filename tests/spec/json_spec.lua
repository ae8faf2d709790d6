-- oops.json: the one JSON module (over lua-cjson) every part of oopsd uses.
local json = require("oops.json")

describe("oops.json", function()
  it("writes '/' as '/', also after an escaped backslash, and decodes it back exactly", function()
    for _, s in ipairs({ "shop/api", "a\\/b", "\\", "/\\/", "http://x/y?z=/" }) do
      local text = json.encode(s)
      assert.is_nil(text:find("\\/", 1, true) and not s:find("\\", 1, true) and text or nil)
      assert.are.equal(s, json.decode(text))
    end
    assert.are.equal('"shop/api"', json.encode("shop/api"))
  end)

  it("keeps an empty list a list when marked, and an empty table an object otherwise", function()
    assert.are.equal('{"pods":[]}', json.encode({ pods = json.array() }))
    assert.are.equal("{}", json.encode({}))
    assert.are.equal('[1,2,3]', json.encode({ 1, 2, 3 }))
    assert.are.equal('["a"]', json.encode(json.array({ "a" })))
    -- a sparse list: an object keyed by the numbers' text, as lua-cjson writes one
    assert.are.equal('{"1":"a","3":"c"}', json.encode({ [1] = "a", [3] = "c" }))
  end)

  it("writes keys in the given order first, the rest sorted: the same value, the same bytes", function()
    local t = json.object({ z = 1, id = "x", a = 2, kind = "k", m = json.null }, { "id", "kind", "missing" })
    assert.are.equal('{"id":"x","kind":"k","missing":null,"a":2,"m":null,"z":1}', json.encode(t))
    -- Unordered objects come out sorted, whatever order the table was filled in.
    local a, b = {}, {}
    for i = 1, 50 do a["k" .. i] = i end
    for i = 50, 1, -1 do b["k" .. i] = i end
    assert.are.equal(json.encode(a), json.encode(b))
  end)

  it("escapes control characters and keeps other bytes as they are", function()
    assert.are.equal('"a\\nb\\u001b]0;x\\u0007"', json.encode("a\nb\27]0;x\7"))
    assert.are.equal('"caf\195\169"', json.encode("caf\195\169"))
  end)

  it("decodes, bounded in depth, and never raises", function()
    assert.are.same({ a = { 1, 2 }, b = "c" }, json.decode('{"a":[1,2],"b":"c"}'))
    assert.are.equal(json.null, json.decode("null"))
    local v, err = json.decode("{nope")
    assert.is_nil(v)
    assert.is_string(err)
    v, err = json.decode(("["):rep(100000) .. ("]"):rep(100000))
    assert.is_nil(v)
    assert.matches("too many nested", err)
    assert.is_nil((json.decode(nil)))
  end)

  it("raises on what JSON cannot hold", function()
    assert.has_error(function() json.encode(function() end) end)
    assert.has_error(function() json.encode({ [true] = 1 }) end)
    assert.has_error(function() json.encode(0 / 0) end)
    local deep = {}
    local cur = deep
    for _ = 1, 100 do cur.x = {}; cur = cur.x end
    assert.has_error(function() json.encode(deep) end)
  end)
end)
