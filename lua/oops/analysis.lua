-- One measurement of a canary's analysis (issue 38): the analysis' query,
-- its placeholders filled in as PromQL string contents, asked of a real
-- Prometheus as an instant query (GET <url>/api/v1/query?query=...), and
-- the one value it returns judged by the policy's success function in the
-- hook sandbox. The verdict is "pass", "fail" or "inconclusive":
-- inconclusive is anything that is not a value judged — Prometheus
-- unreachable or answering an error, no series (no data), several series,
-- NaN or an infinity (a ratio over no traffic), a success function that
-- raises or runs out of its limits. It is never a pass; what it does is the
-- analysis' `inconclusive` ("pause" or "fail"), decided by lua/oops/canary.lua.
-- M.parse and M.request are pure (tests/spec/analysis_spec.lua); M.measure
-- waits (call it from a task).
local json = require("oops.json")
local url = require("oops.url")
local encode = require("oops.probes.prometheus").encode

local M = {}

M.TIMEOUT_MS = 10000
M.MAX_DETAIL = 300

local function cut(s)
  s = tostring(s):gsub("[%c]", " ")
  if #s > M.MAX_DETAIL then s = s:sub(1, M.MAX_DETAIL - 3) .. "..." end
  return s
end

-- The oops.http.request options of an analysis `a` ({ prometheus })
-- asking `query` (its placeholders filled in), with the bearer token read
-- from its `token` file, if any.
function M.request(a, query, token)
  local headers = {}
  if token then headers.Authorization = "Bearer " .. token end
  return {
    url = a.prometheus:gsub("/+$", "") .. "/api/v1/query?query=" .. encode(query),
    method = "GET",
    headers = headers,
    timeout_ms = M.TIMEOUT_MS,
    allow_userinfo = true, -- the operator's URL as written; shown masked (oops.url)
  }
end

local function number_of(v)
  if type(v) ~= "string" and type(v) ~= "number" then return nil end
  local s = tostring(v)
  if s == "NaN" then return 0 / 0 end
  if s == "+Inf" or s == "Inf" then return math.huge end
  if s == "-Inf" then return -math.huge end
  return tonumber(s)
end

-- The value of an instant query's answer, or nil and why it is
-- inconclusive. http_status defaults to 200.
function M.parse(body, http_status)
  local doc = json.decode(body or "")
  if type(doc) ~= "table" then
    return nil, ("prometheus answered HTTP %s with no JSON"):format(tostring(http_status or 200))
  end
  if (http_status and http_status ~= 200) or doc.status ~= "success" then
    local http = http_status and http_status ~= 200 and ("HTTP " .. http_status .. " ") or ""
    return nil, ("prometheus: %s%s%s"):format(http,
      type(doc.errorType) == "string" and (doc.errorType .. ": ") or "",
      type(doc.error) == "string" and doc.error or ("status " .. tostring(doc.status)))
  end
  local data = type(doc.data) == "table" and doc.data or {}
  local v
  if data.resultType == "scalar" and type(data.result) == "table" then
    v = number_of(data.result[2])
  elseif data.resultType == "vector" and type(data.result) == "table" then
    local n = #data.result
    if n == 0 then return nil, "no data (the query returned no series)" end
    if n > 1 then return nil, ("%d series (the query must return one value)"):format(n) end
    local s = data.result[1]
    v = type(s) == "table" and type(s.value) == "table" and number_of(s.value[2])
  else
    return nil, "prometheus: a " .. tostring(data.resultType) .. " result (the query must return one value)"
  end
  if type(v) ~= "number" then return nil, "prometheus: malformed value" end
  if v ~= v then return nil, "NaN (no traffic to measure?)" end
  if v == math.huge or v == -math.huge then return nil, "an infinite value (no traffic to divide by?)" end
  return v
end

-- Judge value v with the analysis' success function, in the hook sandbox.
-- "pass" | "fail", or nil and why it could not say.
function M.judge(a, v)
  local oops = require("oops")
  local ok, res = oops.sandbox.run(a.success, require("oops.policy").HOOK_LIMITS, v)
  if not ok then return nil, "success raised: " .. cut(res) end
  return res and "pass" or "fail"
end

-- One measurement of analysis `a` for pipeline p: { verdict, value?, detail }.
function M.measure(a, p)
  local oops = require("oops")
  local query = require("oops.policy.canary").fill(a.query, p)
  local token, terr
  if a.token then
    token, terr = oops.fs.read_token(a.token)
    if not token then return { verdict = "inconclusive", detail = cut("token: " .. tostring(terr)) } end
  end
  local resp, err = oops.http.request(M.request(a, query, token))
  if not resp then
    return { verdict = "inconclusive", detail = cut("prometheus at " .. url.show(a.prometheus) ..
      " unreachable: " .. tostring(err)) }
  end
  local v, why = M.parse(resp.body, resp.status)
  if not v then return { verdict = "inconclusive", detail = cut(why) } end
  local verdict, jwhy = M.judge(a, v)
  if not verdict then return { verdict = "inconclusive", value = v, detail = jwhy } end
  return { verdict = verdict, value = v, detail = ("%.6g"):format(v) }
end

return M
