-- Canary releases (issue 38) against a real Prometheus (Debian's, on
-- loopback, basic auth) scraping the simulated gateway's traffic: a good
-- release goes 10 -> 50 -> 100 with each weight set once; a bad one (5 %
-- errors) is aborted at its first analysis, its traffic sent back to stable
-- once, and rolled back; a pause waits for an operator's promote; an
-- operator's abort; a canary with no traffic is inconclusive, never a pass:
-- paused (the default) or failed (inconclusive = "fail"). Two servers.
-- (SIGKILLs and a database restart: canary_kills.lua.)
local prom = prometheus()

local QUERY = [[sum(rate(http_requests_total{app="{application}",env="{environment}",track="canary",code="500"}[4s]))
  / sum(rate(http_requests_total{app="{application}",env="{environment}",track="canary"}[4s]))]]

servers { count = 2, policy = ([[
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
rollout { timeout = "60s", on_failure = "rollback" }
gateway "simulated" { build = "200ms", deploy = "0s", rollout = "300ms" }
analysis "errors" { prometheus = %q, query = %q, success = function(v) return v < 0.01 end,
  interval = "3s", count = 2 }
analysis "strict" { prometheus = %q, query = %q, success = function(v) return v < 0.01 end,
  interval = "2s", count = 2, inconclusive = "fail" }
application "shop/web" { environments = { "prod" }, rollout = { strategy = "canary", steps = {
  { weight = 10 }, { analysis = "errors" }, { weight = 50 }, { pause = "1s" }, { weight = 100 } } } }
application "shop/api" { environments = { "prod" }, rollout = { strategy = "canary", steps = {
  { weight = 20 }, { pause = true }, { weight = 100 } } } }
application "shop/idle" { environments = { "prod" }, rollout = { strategy = "canary", steps = {
  { weight = 10 }, { analysis = "errors" }, { weight = 100 } } } }
application "shop/strict" { environments = { "prod" }, rollout = { strategy = "canary", on_failure = "fail",
  steps = { { weight = 10 }, { analysis = "strict" }, { weight = 100 } } } }
application "shop/plain" { environments = { "prod" } }
]]):format(prom.url, QUERY, prom.url, QUERY) }

local function events(p, type_)
  return sql("SELECT message, actor, reason FROM pipeline_event WHERE pipeline_id = ? AND event_type = ? ORDER BY id",
    p.id, type_)
end
local function measured(p)
  return sql("SELECT step, n, verdict FROM canary_measurement WHERE pipeline_id = ? ORDER BY step, n", p.id)
end

-- The good release: every step once, measured twice, all traffic at the end.
local good = create { app = "shop/web", env = "prod", artifact = "v1" }
expect(good:wait("SUCCEEDED", 60), "a good canary is promoted step by step", good:message())
expect(good:weights() == "10,50,100", "each weight set once, in order", good:weights())
local m = measured(good)
expect(#m == 2 and m[1].verdict == "pass" and m[2].verdict == "pass" and m[1].n == 1 and m[2].n == 2,
  "its analysis measured twice, both passed", #m .. " measurements")
expect(#events(good, "CANARY_STEP") >= 5, "each step has its event", #events(good, "CANARY_STEP") .. " events")
local row = good:row()
expect(row.weight == 100, "its confirmed weight is 100", tostring(row.weight))

-- A plain application is not a canary: no weight at all.
local plain = create { app = "shop/plain", env = "prod", artifact = "p1" }
expect(plain:wait("SUCCEEDED", 30), "an application without a strategy rolls out at once")
expect(plain:weights() == "", "... and sets no weight", plain:weights())

-- The bad release: 5 % errors, aborted at its first analysis.
artifact_traffic("v2-bad", { error_rate = 0.05 })
local bad = create { app = "shop/web", env = "prod", artifact = "v2-bad" }
expect(bad:wait("ERROR", 60), "a canary with 5 % errors is aborted", bad:message())
expect(bad:message():find("Canary aborted: analysis errors failed", 1, true), "its message says why", bad:message())
expect(bad:weights() == "10,0", "its traffic went to 10, then back to stable once", bad:weights())
m = measured(bad)
expect(#m == 1 and m[1].verdict == "fail", "aborted at its first failed measurement (failure_limit 0)",
  #m .. " measurements")
local rb
wait_until("the aborted release is rolled back to v1", function()
  rb = sql("SELECT status, artifact FROM pipeline WHERE rollback_of = ?", bad.id)[1]
  return rb and rb.status == "SUCCEEDED"
end, 60)
expect(rb and rb.artifact == "v1", "the rollback redeploys v1", rb and rb.artifact)

-- A pause until an operator: paused, one event; promoted by oopsctl.
local api = create { app = "shop/api", env = "prod", artifact = "a1" }
wait_until("the canary waits for an operator", function() return api:row().paused == "operator" end, 60)
sleep(1)
expect(#events(api, "CANARY_PAUSED") == 1, "one pause event", #events(api, "CANARY_PAUSED"))
expect(api:status() == "ROLLING_OUT", "still rolling out while paused")
local st, _, err = oopsctl("promote", api.id, "--reason", "metrics look fine")
expect(st == 0, "oopsctl promote", err)
expect(api:wait("SUCCEEDED", 60), "the promoted canary finishes", api:message())
expect(api:weights() == "20,100", "its weights: 20, 100", api:weights())
local pe = events(api, "CANARY_PROMOTE")[1]
expect(pe and pe.reason == "metrics look fine" and pe.actor, "the promotion is recorded with actor and reason",
  pe and pe.actor)
local audit = sql("SELECT action, outcome, reason FROM operator_action WHERE pipeline_id = ? AND action = 'promote'",
  api.id)
expect(#audit == 1 and audit[1].outcome == "done" and audit[1].reason == "metrics look fine", "and in the audit log",
  #audit .. " rows")

-- An operator's abort during the pause: weight 0 first, then ERROR.
local api2 = create { app = "shop/api", env = "prod", artifact = "a2" }
wait_until("the second canary waits", function() return api2:row().paused == "operator" end, 60)
st, _, err = oopsctl("abort", api2.id, "--reason", "wrong config")
expect(st == 0, "oopsctl abort", err)
expect(api2:wait("ERROR", 60), "the aborted canary fails", api2:message())
expect(api2:weights() == "20,0", "its traffic returned to stable once", api2:weights())
local ae = events(api2, "CANARY_ABORT")[1]
expect(ae and ae.reason == "wrong config", "the abort is recorded with its reason", ae and ae.reason)
st = oopsctl("promote", api2.id, "--reason", "too late")
expect(st == 1, "promoting a failed pipeline is refused (exit 1)", tostring(st))

-- No traffic: inconclusive, never a pass. Paused by default...
artifact_traffic("i1", { rps = 0 })
local idle = create { app = "shop/idle", env = "prod", artifact = "i1" }
wait_until("a canary without traffic pauses as inconclusive", function()
  return idle:row().paused == "inconclusive"
end, 60)
m = measured(idle)
expect(#m == 1 and m[1].verdict == "inconclusive", "its measurement is inconclusive", #m .. " measurements")
local pause = events(idle, "CANARY_PAUSED")[1]
expect(pause and pause.message:find("inconclusive", 1, true), "the pause says so", pause and pause.message)
sleep(4)
expect(idle:status() == "ROLLING_OUT" and #measured(idle) == 1, "it stays paused, measuring no more")
st, _, err = oopsctl("promote", idle.id, "--full", "--reason", "no traffic at night; shipping")
expect(st == 0, "oopsctl promote --full", err)
expect(idle:wait("SUCCEEDED", 60), "promoted fully, it finishes", idle:message())
expect(idle:weights() == "10,100", "straight to 100", idle:weights())

-- ... or a failed measurement where the analysis says inconclusive = "fail".
artifact_traffic("s1", { rps = 0 })
local strict = create { app = "shop/strict", env = "prod", artifact = "s1" }
expect(strict:wait("ERROR", 60), "inconclusive counted as failed: aborted", strict:message())
expect(strict:weights() == "10,0", "its traffic returned to stable", strict:weights())
