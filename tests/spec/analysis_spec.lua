-- A canary's measurement (issue 38, lua/oops/analysis.lua): what an instant
-- query's answer is worth. One value judged by the policy's success function
-- is a pass or a fail; anything else — an error, no series, several, NaN,
-- an infinity, a success function that raises or runs away — is
-- inconclusive, never a pass. (Against a real Prometheus:
-- tests/scenarios/canary.lua.)
local cjson = require("cjson")
local analysis = require("oops.analysis")

local function vector(...)
  local result = {}
  for i, v in ipairs { ... } do result[i] = { metric = { n = tostring(i) }, value = { 1700000000.1, v } } end
  return cjson.encode { status = "success", data = { resultType = "vector", result = result } }
end

describe("analysis.parse", function()
  it("reads the one value of a vector", function()
    assert.are.equal(0.05, analysis.parse(vector("0.05")))
  end)

  it("reads a scalar", function()
    local body = cjson.encode { status = "success", data = { resultType = "scalar", result = { 1.5, "2" } } }
    assert.are.equal(2, analysis.parse(body))
  end)

  it("calls no series no data", function()
    local v, why = analysis.parse(cjson.encode { status = "success", data = { resultType = "vector", result = {} } })
    assert.is_nil(v)
    assert.matches("no data", why)
  end)

  it("refuses several series", function()
    local v, why = analysis.parse(vector("0.1", "0.2"))
    assert.is_nil(v)
    assert.matches("2 series", why)
  end)

  it("calls NaN and infinities inconclusive (a ratio over no traffic)", function()
    for _, s in ipairs { "NaN", "+Inf", "-Inf" } do
      local v, why = analysis.parse(vector(s))
      assert.is_nil(v, s)
      assert.is_string(why)
    end
  end)

  it("says Prometheus' own error", function()
    local body = cjson.encode { status = "error", errorType = "bad_data", error = "parse error at char 3" }
    local v, why = analysis.parse(body, 400)
    assert.is_nil(v)
    assert.matches("HTTP 400 bad_data: parse error at char 3", why, 1, true)
  end)

  it("refuses what is not JSON, a matrix, a malformed value", function()
    assert.is_nil((analysis.parse("<html>", 200)))
    assert.is_nil((analysis.parse(cjson.encode { status = "success", data = { resultType = "matrix", result = {} } })))
    assert.is_nil((analysis.parse(vector("fast"))))
    assert.is_nil((analysis.parse(cjson.encode { status = "success", data = { resultType = "vector",
      result = { { metric = {}, value = "0.1" } } } })))
  end)
end)

describe("analysis.judge", function()
  local oops = require("oops")
  it("passes and fails by the success function, in the sandbox", function()
    oops.wait(function()
      local a = { success = function(v) return v < 0.01 end }
      assert.are.equal("pass", analysis.judge(a, 0.001))
      assert.are.equal("fail", analysis.judge(a, 0.05))
    end)
  end)

  it("calls a function that raises or runs away inconclusive", function()
    oops.wait(function()
      local v, why = analysis.judge({ success = function() error("boom") end }, 1)
      assert.is_nil(v)
      assert.matches("success raised: .*boom", why)
      v = analysis.judge({ success = function() while true do end end }, 1)
      assert.is_nil(v)
    end)
  end)
end)

describe("analysis.request", function()
  it("asks an instant query with the bearer token, the query encoded", function()
    local r = analysis.request({ prometheus = "http://u:p@127.0.0.1:9090/" }, 'a{b="c d"}', "t0k")
    assert.are.equal("http://u:p@127.0.0.1:9090/api/v1/query?query=a%7Bb%3D%22c%20d%22%7D", r.url)
    assert.are.equal("Bearer t0k", r.headers.Authorization)
    assert.is_true(r.timeout_ms > 0)
  end)
end)
