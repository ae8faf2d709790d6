-- The simulated gateway's traffic as a real Prometheus sees it (issue 38):
-- request counters per target and track, from the split the simulated
-- gateway keeps in sim_traffic (weight, canary and stable artifact) and the
-- per-artifact rates a test sets in sim_artifact (error_rate 0..1, rps;
-- 20 requests a second and no errors when unset), served on loopback
-- behind a bearer token for a Prometheus to scrape:
--   http_requests_total{namespace, app, env, track="canary"|"stable", code="200"|"500"}
-- Every series exists from the first scrape after its target appears (an
-- error counter at 0 included), so a ratio over a canary with no traffic is
-- NaN (inconclusive), never a missing series. Counts grow by rps × share ×
-- elapsed time at each refresh (every 250 ms), errors exactly error_rate of
-- them: the ratio a query computes is the rate the test set. While the
-- database cannot be read, the last split read goes on.
-- It also serves the pods' use that the alert scan's Prometheus probe asks
-- for (lua/oops/probes/prometheus.lua), as set by t:set_pod(namespace, pod,
-- { cpu = MILLICORES, memory = BYTES }) (at most MAX_PODS pods):
--   container_cpu_usage_seconds_total{namespace, pod, container="app"}  (a counter)
--   container_memory_working_set_bytes{namespace, pod, container="app"}
-- Runs in the scenario runner's own process (a task refreshes; the loop
-- answers scrapes). Tools only: scenarios, oopsctl chaos, bench.
local oops = require("oops")

local M = {}

M.REFRESH_MS = 250
local READ = "SELECT t.namespace, t.application, t.environment, t.weight, " ..
  "COALESCE(c.error_rate, 0) AS cer, COALESCE(c.rps, 20) AS crps, " ..
  "COALESCE(s.error_rate, 0) AS ser, COALESCE(s.rps, 20) AS srps " ..
  "FROM sim_traffic t LEFT JOIN sim_artifact c ON c.artifact = t.canary_artifact " ..
  "LEFT JOIN sim_artifact s ON s.artifact = t.stable_artifact ORDER BY 1, 2, 3 LIMIT 10000"

M.MAX_PODS = 1000
local function quoted(s) return (tostring(s):gsub("[\\\"]", "\\%0"):gsub("\n", "\\n")) end

local Traffic = {}
Traffic.__index = Traffic

function Traffic:refresh()
  local rows = oops.db.exec(READ)
  local now = oops.now_ms()
  local dt = (now - self.last) / 1000
  self.last = now
  -- The database away (a restart): the traffic goes on with the last split
  -- read, as an application's does.
  rows = rows or self.rows or {}
  self.rows = rows
  for _, pod in ipairs(self.pods) do pod.cpu_s = pod.cpu_s + pod.cpu / 1000 * dt end
  for _, r in ipairs(rows) do
    local key = r.namespace .. "/" .. r.application .. "/" .. r.environment
    local c = self.counters[key]
    if not c then
      c = { labels = ('namespace="%s",app="%s",env="%s"'):format(quoted(r.namespace), quoted(r.application),
        quoted(r.environment)), canary = { 0, 0 }, stable = { 0, 0 } }
      self.counters[key] = c
      self.order[#self.order + 1] = key
    else
      local w = r.weight / 100
      local canary, stable = r.crps * w * dt, r.srps * (1 - w) * dt
      c.canary[1] = c.canary[1] + canary * (1 - r.cer)
      c.canary[2] = c.canary[2] + canary * r.cer
      c.stable[1] = c.stable[1] + stable * (1 - r.ser)
      c.stable[2] = c.stable[2] + stable * r.ser
    end
  end
end

function Traffic:render()
  local out = { "# HELP http_requests_total requests served, by track and status (simulated)",
    "# TYPE http_requests_total counter" }
  for _, key in ipairs(self.order) do
    local c = self.counters[key]
    for _, track in ipairs { "canary", "stable" } do
      out[#out + 1] = ('http_requests_total{%s,track="%s",code="200"} %.6f'):format(c.labels, track, c[track][1])
      out[#out + 1] = ('http_requests_total{%s,track="%s",code="500"} %.6f'):format(c.labels, track, c[track][2])
    end
  end
  if #self.pods > 0 then
    out[#out + 1] = "# TYPE container_cpu_usage_seconds_total counter"
    for _, pod in ipairs(self.pods) do
      out[#out + 1] = ("container_cpu_usage_seconds_total{%s} %.6f"):format(pod.labels, pod.cpu_s)
    end
    out[#out + 1] = "# TYPE container_memory_working_set_bytes gauge"
    for _, pod in ipairs(self.pods) do
      out[#out + 1] = ("container_memory_working_set_bytes{%s} %d"):format(pod.labels, pod.memory)
    end
  end
  return table.concat(out, "\n") .. "\n"
end

-- A pod's use from now on: { cpu = millicores (the rate its CPU counter
-- grows at), memory = bytes }; a field left out keeps its value (0 at first).
function Traffic:set_pod(namespace, pod, use)
  local key = namespace .. "/" .. pod
  local p = self.pods[key]
  if not p then
    assert(#self.pods < M.MAX_PODS, "traffic: at most " .. M.MAX_PODS .. " pods")
    p = { labels = ('namespace="%s",pod="%s",container="app"'):format(quoted(namespace), quoted(pod)),
      cpu = 0, cpu_s = 0, memory = 0 }
    self.pods[key] = p
    self.pods[#self.pods + 1] = p
  end
  self:refresh() -- what was used at the old rate is counted at it
  p.cpu = use.cpu or p.cpu
  p.memory = math.floor(use.memory or p.memory)
end

-- start{ token = SECRET [, host = "127.0.0.1"] }: the exporter, or nil, err.
-- t.url is where to scrape (/metrics), t:stop() ends it.
function M.start(opts)
  assert(type(opts) == "table" and type(opts.token) == "string" and #opts.token >= 16, "traffic.start{token}")
  local t = setmetatable({ counters = {}, order = {}, pods = {}, last = oops.now_ms(), running = true }, Traffic)
  local want = "Bearer " .. opts.token
  local srv, err = oops.http.serve {
    listen = (opts.host or "127.0.0.1") .. ":0",
    max_body = 1024,
    handler = function(req)
      if req.headers.authorization ~= want then return 401, "a bearer token is needed\n" end
      if req.path ~= "/metrics" then return 404, "only /metrics\n" end
      return 200, t:render(), "text/plain; version=0.0.4"
    end,
  }
  if not srv then return nil, err end
  t.srv = srv
  t.address = (opts.host or "127.0.0.1") .. ":" .. srv:port()
  t.url = "http://" .. t.address .. "/metrics"
  t:refresh()
  oops.task("simulated traffic", function()
    while t.running do
      oops.sleep(M.REFRESH_MS)
      if t.running then t:refresh() end
    end
  end)
  return t
end

function Traffic:stop()
  self.running = false
  if self.srv then self.srv:close() end
  self.srv = nil
end

return M
