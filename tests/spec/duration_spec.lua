-- oops.duration: "500ms", "5s", "10m", "2h", "1h30m" -> milliseconds.
local duration = require("oops.duration")

local HINT = "not a duration (use e.g. 500ms, 5s, 10m, 2h)"

describe("duration.parse", function()
  local good = {
    ["500ms"] = 500, ["5s"] = 5000, ["10m"] = 600000, ["2h"] = 7200000, ["1d"] = 86400000,
    ["0s"] = 0, ["0ms"] = 0, ["1h30m"] = 5400000, ["1m30s"] = 90000, ["1s500ms"] = 1500,
    ["90s"] = 90000, ["1d2h3m4s5ms"] = 93784005, ["007s"] = 7000,
  }
  for text, ms in pairs(good) do
    it(("reads %q as %d ms"):format(text, ms), function()
      assert.are.equal(ms, duration.parse(text))
      assert.are.equal("integer", math.type(duration.parse(text)))
    end)
  end

  local bad = {
    { "5x", '"5x": ' .. HINT },
    { "5", '"5": ' .. HINT },           -- a bare number: seconds or minutes?
    { "", '"": ' .. HINT },
    { "5 s", '"5 s": ' .. HINT },
    { "5S", '"5S": ' .. HINT },
    { "-1m", '"-1m": ' .. HINT },
    { "1.5m", '"1.5m": ' .. HINT },
    { "1m1h", '"1m1h": ' .. HINT },     -- units must go from large to small
    { "5m5m", '"5m5m": ' .. HINT },     -- each unit once
    { "s", '"s": ' .. HINT },
    { "10m ", '"10m ": ' .. HINT },
    { "1\n", '"1\\n": ' .. HINT },
    { 5, "5: " .. HINT },               -- a Lua number is refused the same way
    { 1.5, "1.5: " .. HINT },
    { true, "true: " .. HINT },
    { nil, "nil: " .. HINT },
    { "99999999999999h", '"99999999999999h": too large' },
    { "36600000000d", '"36600000000d": too large' },
    -- found by fuzz_lua_values: n * 86400000 wrapped around int64 to a negative duration
    { "999999999999d", '"999999999999d": too large' },
    { "999999999999h999999999999m", '"999999999999h999999999999m": too large' },
    { "36599d23h59m59s999ms1", '"36599d23h59m59s999ms1": ' .. HINT },
  }
  for _, case in ipairs(bad) do
    it("refuses " .. duration.show(case[1]) .. " with: " .. case[2], function()
      local ms, err = duration.parse(case[1])
      assert.is_nil(ms)
      assert.are.equal(case[2], err)
    end)
  end
end)

describe("duration.format", function()
  it("writes the shortest exact form", function()
    assert.are.equal("0s", duration.format(0))
    assert.are.equal("500ms", duration.format(500))
    assert.are.equal("1h30m", duration.format(5400000))
    assert.are.equal("1d1h1m1s1ms", duration.format(90061001))
  end)

  it("round-trips through parse", function()
    for _, ms in ipairs({ 1, 999, 1000, 61000, 3600000, 86400001 }) do
      assert.are.equal(ms, duration.parse(duration.format(ms)))
    end
  end)

  it("raises on a caller's mistake", function()
    assert.has_error(function() duration.format(-1) end)
    assert.has_error(function() duration.format(1.5) end)
    assert.has_error(function() duration.format("5s") end)
  end)
end)
