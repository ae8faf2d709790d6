-- The Prometheus probe: one instant query per target through the HTTP API
-- (GET <url>/api/v1/query?query=...), with the queries of REFERENCE.md §8:
--
--   cpu:    min_over_time((sum by (pod) (rate(container_cpu_usage_seconds_total{SEL}[2i])) * 1000)[W:i]) > thr
--   memory: min_over_time((sum by (pod) (container_memory_working_set_bytes{SEL}))[W:i]) > thr
--   SEL = namespace="ns",pod=~"app-[0-9]+",container!="",container!="POD"
--   i = the scrape interval, W = max(2i, the sustained window)
--
-- min_over_time over the window keeps only pods above the threshold for the
-- whole window; the firing pods are the distinct `pod` labels of the result.
-- Query building and response parsing are pure functions (specced in
-- tests/spec/alert_spec.lua); only M.probe talks to the network.
local json = require("oops.json")

local M = {}

M.TIMEOUT_MS = 10000

-- A Prometheus duration: "30s" for whole seconds (as REFERENCE writes them),
-- "1500ms" otherwise.
function M.duration(ms)
  if ms % 1000 == 0 then return string.format("%ds", ms // 1000) end
  return string.format("%dms", ms)
end

-- A PromQL string literal's content. Names are DNS labels (checked by the
-- policy loader), so this never changes one; it keeps a bad name from ever
-- becoming a different query. The regex needs no escaping for the same reason.
local function quoted(s) return (s:gsub("[\\\"]", "\\%0")) end

function M.selector(namespace, application)
  return string.format('namespace="%s",pod=~"%s-[0-9]+",container!="",container!="POD"',
    quoted(namespace), quoted(application))
end

-- The query text for a target { namespace, application, metric, threshold,
-- sustained_ms } and a scrape interval in ms.
function M.query(t, scrape_interval_ms)
  local i = scrape_interval_ms
  local window = math.max(2 * i, t.sustained_ms or 0)
  local sel = M.selector(t.namespace, t.application)
  if t.metric == "cpu" then
    return string.format(
      "min_over_time((sum by (pod) (rate(container_cpu_usage_seconds_total{%s}[%s])) * 1000)[%s:%s]) > %d",
      sel, M.duration(2 * i), M.duration(window), M.duration(i), t.threshold)
  elseif t.metric == "memory" then
    return string.format(
      "min_over_time((sum by (pod) (container_memory_working_set_bytes{%s}))[%s:%s]) > %d",
      sel, M.duration(window), M.duration(i), t.threshold)
  end
  error("prometheus probe: unknown metric " .. tostring(t.metric))
end

-- RFC 3986 percent-encoding of everything but the unreserved characters.
function M.encode(s)
  return (s:gsub("[^%w%-%._~]", function(c) return string.format("%%%02X", c:byte()) end))
end

-- The oops.http.request options for a target under cfg { url,
-- scrape_interval_ms, token }.
function M.request(t, cfg)
  local base = cfg.url:gsub("/+$", "")
  local headers = {}
  if cfg.token then headers.Authorization = "Bearer " .. cfg.token end
  return {
    url = base .. "/api/v1/query?query=" .. M.encode(M.query(t, cfg.scrape_interval_ms)),
    method = "GET",
    headers = headers,
    timeout_ms = M.TIMEOUT_MS,
    -- the operator's URL, as the policy wrote it (userinfo included); it is
    -- masked wherever it is shown (oops.url)
    allow_userinfo = true,
  }
end

local function decode(body)
  local doc = json.decode(body or "")
  if type(doc) ~= "table" then return nil end
  return doc
end

-- Why a non-success answer failed: Prometheus says so in errorType/error.
local function reason(doc, http_status)
  local parts = { "prometheus:" }
  if http_status and http_status ~= 200 then parts[#parts + 1] = "HTTP " .. http_status end
  if doc and type(doc.errorType) == "string" then parts[#parts + 1] = doc.errorType .. ":" end
  if doc and type(doc.error) == "string" then
    parts[#parts + 1] = doc.error
  elseif doc then
    parts[#parts + 1] = "status " .. tostring(doc.status)
  end
  return table.concat(parts, " ")
end

-- The firing pods (distinct, sorted) from a response body, or nil, err.
-- http_status defaults to 200; any other status is an error.
function M.parse(body, http_status)
  local doc = decode(body)
  if http_status and http_status ~= 200 then return nil, reason(doc, http_status) end
  if not doc then return nil, "prometheus: malformed response (not a JSON object)" end
  if doc.status ~= "success" then return nil, reason(doc) end
  local result = type(doc.data) == "table" and doc.data.result
  if type(result) ~= "table" then return nil, "prometheus: malformed response (no data.result)" end
  local seen, pods = {}, {}
  for _, sample in ipairs(result) do
    local pod = type(sample) == "table" and type(sample.metric) == "table" and sample.metric.pod
    if type(pod) == "string" and not seen[pod] then
      seen[pod] = true
      pods[#pods + 1] = pod
    end
  end
  table.sort(pods)
  return pods
end

-- Probe one target (waits: call from a task). pods | nil, err.
function M.probe(t, cfg)
  local oops = require("oops")
  local resp, err = oops.http.request(M.request(t, cfg))
  if not resp then return nil, "prometheus: " .. tostring(err) end
  return M.parse(resp.body, resp.status)
end

return M
