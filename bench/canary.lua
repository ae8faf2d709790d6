-- needs: own database
-- bench/run's canary section (issue 38), run as `oopsctl scenario
-- bench/canary.lua` (a scenario, so the end checks still prove nothing
-- happened twice; nothing here asserts a time: the figures go to a JSON file):
--   1. BENCH_CANARIES (500) canaries at once on three servers, each
--      { weight 10, analysis "errors" (2 measurements, 3 s apart), weight 100 }
--      against a real Prometheus; then as many plain releases (strategy
--      "all"), the same way: the wall time, the measurements, and the
--      engine's statements per canary and per plain release (the
--      difference is what the canary costs, the simulated gateway's own
--      statements apart);
--   2. BENCH_BAD (5) bad canaries (5 % errors) whose analysis measures every
--      5 s: the time from the analysis step's start (the bad traffic already
--      flowing at weight 10) to weight 0 applied, on the database's clock,
--      against the bound "one interval + one scan tick".
--   BENCH_OUT  where the JSON goes
local json = require("oops.json")
local C = dofile(here("common.lua"))

local N = tonumber(os.getenv("BENCH_CANARIES") or "") or 500
local BAD = tonumber(os.getenv("BENCH_BAD") or "") or 5
local OUT = os.getenv("BENCH_OUT")
local TICK_S, BAD_INTERVAL_S = 0.5, 5

local prom = prometheus()
local QUERY = [[sum(rate(http_requests_total{app="{application}",env="{environment}",track="canary",code="500"}[4s]))
  / sum(rate(http_requests_total{app="{application}",env="{environment}",track="canary"}[4s]))]]

-- Every canary application declared (the global plan stays "all", so the
-- plain releases of part 1 roll out at once).
local apps = {}
for i = 1, N do
  apps[i] = ('application "canary/app%d" { environments = { "prod" }, rollout = { strategy = "canary", ' ..
    'steps = { { weight = 10 }, { analysis = "errors" }, { weight = 100 } } } }'):format(i)
  apps[N + i] = ('application "plain/web%d" { environments = { "prod" } }'):format(i)
end
local list = servers { count = 3, listen = "127.0.0.1:0", policy = ([[
scan    { interval = "500ms", max_new = 500 }
locks   { validate_every = "1s" }
rollout { timeout = "5m", max = "30m" }
gateway "simulated" { build = "0s", deploy = "0s", rollout = "0s" }
analysis "errors" { prometheus = %q, query = %q, success = function(v) return v < 0.01 end,
  interval = "3s", count = 2 }
analysis "fast" { prometheus = %q, query = %q, success = function(v) return v < 0.01 end,
  interval = "%ds", count = 3 }
application "bad/web" { environments = { "prod" }, rollout = { strategy = "canary", steps = {
  { weight = 10 }, { analysis = "fast" }, { weight = 100 } } } }
]]):format(prom.url, QUERY, prom.url, QUERY, BAD_INTERVAL_S) .. table.concat(apps, "\n") .. "\n" }

local function snapshot()
  local out = {}
  for i, s in ipairs(list) do out[i] = C.metrics(s) end
  return out
end
local function engine_statements(before, after)
  local diffs = {}
  for i = 1, #list do diffs[i] = { before = before[i], after = after[i] } end
  local d = C.delta(diffs)
  local sim = C.sum(d, "oops_sim_statements_total")
    + C.sum(d, "oops_db_insert_statements_total", { table = "sim_call" })
    + C.sum(d, "oops_db_insert_statements_total", { table = "sim_job" })
    + C.sum(d, "oops_db_lookup_statements_total", { table = "sim_job" })
  return C.sum(d, "oops_db_round_trips_total") - sim + C.sum(d, "oops_lock_acquire_statements_total")
end
local function db_now() return tonumber(sql("SELECT UNIX_TIMESTAMP(NOW(6)) AS t")[1].t) end
local function wait_done(ns, n, seconds)
  wait_until(("%d %s pipelines SUCCEEDED"):format(n, ns), function()
    return sql("SELECT COUNT(*) AS n FROM pipeline WHERE namespace = ? AND status = 'SUCCEEDED'", ns)[1].n >= n
  end, seconds)
  -- and their locks let go (the sweep's statement counts too)
  wait_until(ns .. ": every lock released", function()
    return sql("SELECT COUNT(*) AS n FROM pipeline WHERE namespace = ? AND IS_USED_LOCK(CONCAT(?, id)) IS NOT NULL",
      ns, oops.locks.names.pipeline_prefix)[1].n == 0
  end, 60)
end

local doc = { canaries = N, servers = #list }

-- 1. N canaries, then N plain releases.
local before = snapshot()
local t0 = db_now()
C.insert_pipelines(N, { prefix = "c", namespace = "canary", app = "app" })
wait_done("canary", N, 900)
doc.canary_wall_s = tonumber(sql("SELECT UNIX_TIMESTAMP(MAX(status_changed_at)) AS t FROM pipeline " ..
  "WHERE namespace = 'canary'")[1].t) - t0
local mid = snapshot()
doc.canary_statements = engine_statements(before, mid) / N
doc.measurements = sql("SELECT COUNT(*) AS n FROM canary_measurement m JOIN pipeline p ON p.id = m.pipeline_id " ..
  "WHERE p.namespace = 'canary'")[1].n
doc.measurements_passed = sql("SELECT COUNT(*) AS n FROM canary_measurement WHERE verdict = 'pass'")[1].n
doc.weights_applied = sql("SELECT COUNT(*) AS n FROM sim_call WHERE action LIKE 'weight:%'")[1].n
local t1 = db_now()
C.insert_pipelines(N, { prefix = "p", namespace = "plain", app = "web", first = 1 })
wait_done("plain", N, 900)
doc.plain_wall_s = tonumber(sql("SELECT UNIX_TIMESTAMP(MAX(status_changed_at)) AS t FROM pipeline " ..
  "WHERE namespace = 'plain'")[1].t) - t1
doc.plain_statements = engine_statements(mid, snapshot()) / N

-- 2. Bad canaries: time from the analysis step's start to weight 0.
for i = 1, BAD do artifact_traffic("bad-" .. i, { error_rate = 0.05 }) end
local bad = {}
for i = 1, BAD do
  sql("DELETE FROM pipeline WHERE namespace = 'bad' AND status IN ('ERROR', 'SUCCEEDED')")
  bad[i] = create { app = "bad/web", env = "prod", artifact = "bad-" .. i }
  expect(bad[i]:wait("ERROR", 120), "bad canary " .. i .. " aborted", bad[i]:message())
end
doc.bad = {}
for i, p in ipairs(bad) do
  local r = sql("SELECT UNIX_TIMESTAMP(e.created_at) AS began FROM pipeline_event e WHERE e.pipeline_id = ? " ..
    "AND e.event_type = 'CANARY_STEP' AND e.message LIKE 'step 1/3: weight 10%' ORDER BY e.id LIMIT 1", p.id)[1]
  local w = sql("SELECT UNIX_TIMESTAMP(created_at) AS at FROM sim_call WHERE pipeline_id = ? AND action = 'weight:0'",
    p.id)[1]
  doc.bad[i] = r and w and (tonumber(w.at) - tonumber(r.began)) or nil
  expect(doc.bad[i] ~= nil, "bad canary " .. i .. ": its weight went back to 0", p:weights())
end
doc.bad_interval_s, doc.tick_s = BAD_INTERVAL_S, TICK_S
if OUT then require("oops.scenario.files").write(OUT, json.encode(doc) .. "\n") end
note(json.encode(doc))
