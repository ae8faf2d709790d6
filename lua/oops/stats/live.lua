-- The delivery figures a server serves (issue 39): `/api/stats` for the fleet
-- page's panel and the oops_delivery_* gauges of `/metrics`.
--
-- One computation reads the last 90 days once (lua/oops/stats: a statement
-- for the clock, then pages of 1000 pipelines, each index-served and bounded,
-- folded into arrays: about 0.3 KB of heap per pipeline, 2.7 MB for 10,000)
-- and derives the 7d, 30d and 90d windows from those rows; its JSON (the
-- fleet's figures and a series per day; no per-target list: `oopsctl stats`
-- has it) is kept in memory. It is made again, in a task, when the page asks
-- (GET /api/stats) and the one kept is TTL_MS old, or /metrics is scraped
-- and it is SCRAPE_TTL_MS old (figures over days need no fresher gauges);
-- the answer is the one kept meanwhile (202 before the first). A server
-- nobody looks at or scrapes sends nothing for it. At most one computation
-- runs at a time; a failure is logged once per failing spell and the last
-- figures are kept (their age says how old).
--
-- Gauges, labels bounded (window: 7d, 30d, 90d; stat: median, p90):
--   oops_delivery_deployments_per_day{window}
--   oops_delivery_lead_time_seconds{window, stat}
--   oops_delivery_change_failure_ratio{window}
--   oops_delivery_time_to_restore_seconds{window}  (median)
-- A figure with no data (no release in the window) is NaN.
local oops = require("oops")
local json = require("oops.json")
local log = require("oops.log")
local stats = require("oops.stats")

local M = {}

M.TTL_MS = 60000 -- the page's figures are at most this old (and the page asks no more often)
M.SCRAPE_TTL_MS = 300000 -- a scrape of /metrics computes them again only when older than this

local st = { json = nil, at = nil, running = false, error = nil, computed = 0 }

local NAN = 0 / 0
local function value(v) return (v == nil or v == json.null) and NAN or v end

for name, help in pairs({
  oops_delivery_deployments_per_day = "releases that went live per day over the window (the fleet)",
  oops_delivery_lead_time_seconds = "lead time from commit (else creation) to live over the window: median, p90",
  oops_delivery_change_failure_ratio = "deployments that failed or were rolled back over deployments, over the window",
  oops_delivery_time_to_restore_seconds = "median time from a failed deployment to the next live release of its target",
}) do
  oops.metrics.describe(name, "gauge", help)
end

local function gauges(w, f)
  local l = { window = w }
  oops.metrics.set("oops_delivery_deployments_per_day", l, f.per_day)
  oops.metrics.set("oops_delivery_lead_time_seconds", { window = w, stat = "median" }, value(f.lead_time.median_s))
  oops.metrics.set("oops_delivery_lead_time_seconds", { window = w, stat = "p90" }, value(f.lead_time.p90_s))
  oops.metrics.set("oops_delivery_change_failure_ratio", l, value(f.change_failure.rate))
  oops.metrics.set("oops_delivery_time_to_restore_seconds", l, value(f.restore.median_s))
end

local function compute()
  local longest = stats.parse_window(stats.WINDOWS[#stats.WINDOWS])
  local data, err = stats.read(oops.db.exec, longest)
  if not data then error(tostring(err), 0) end
  local windows = {}
  for _, w in ipairs(stats.WINDOWS) do
    local f = stats.figures(data, stats.parse_window(w))
    gauges(w, f.fleet)
    f.targets_n, f.targets = #f.targets, nil
    windows[w] = f
  end
  return json.encode({ windows = windows, order = json.array(stats.WINDOWS) })
end

-- One computation, in a task: the rows of 90 days, every window, the gauges.
function M.compute()
  local ok, res = pcall(compute)
  st.running = false
  if not ok then
    local why = tostring(res)
    if st.error == nil then log.warn("delivery figures: reading the history failed: " .. why, { scan = "web" }) end
    st.error = why
    return
  end
  st.json, st.at, st.error, st.computed = res, oops.now_ms(), nil, st.computed + 1
end

local function refresh(now, ttl)
  if (st.at == nil or now - st.at >= ttl) and not st.running then
    st.running = true
    oops.task("delivery figures", M.compute)
  end
end

-- Before /metrics is rendered (engine.metrics_scraped). On the loop.
function M.scraped(now) refresh(now, M.SCRAPE_TTL_MS) end

-- GET /api/stats -> status, JSON text. On the loop: never waits.
function M.http(now)
  refresh(now, M.TTL_MS)
  if not st.json then
    return st.error and 503 or 202, json.encode({ pending = st.error == nil, error = st.error or json.null })
  end
  local head = json.encode({ age_s = (now - st.at) / 1000, error = st.error or json.null })
  return 200, head:sub(1, -2) .. "," .. st.json:sub(2)
end

function M.state() return st end

return M
