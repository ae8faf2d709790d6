-- The one multi-server workload two integration tests run as a scenario
-- (tests/integration/explain.sh: the statements it makes; grants.sh: that the
-- run-time grants suffice). Two servers connected as `run_db` (the runner
-- keeps its own account): pipelines auto and manual through a driver's
-- SIGKILL, a second release, a stop, an alert episode, scheduled restarts,
-- webhook notifications; release safety (issue 26): prod's one deploy slot,
-- a failed release rolled back automatically, a release a freeze holds until
-- an operator overrides it; canaries (issue 38): one promoted by an operator,
-- one aborted by its analysis; promotion (issue 39): one by the promote scan,
-- one by `oopsctl promote-now` that waits for an approval. Run from a
-- scenario with the scenario's functions
-- in scope:
--   local all = assert(loadfile(ROOT .. "/tests/lib/workload.lua", "t", _ENV))(run_db)
-- Returns the servers, still running.
local run_db = assert(..., "workload.lua: the run-time account's URL")
local hook = receiver()
-- A freeze of qa from an hour ago to a week ahead (the database's clock is
-- this host's: the runner's MariaDB).
local function minute(t) return os.date("!%Y-%m-%d %H:%M", t) end
local now = os.time()
local all = servers { count = 2, db = run_db, policy = ([[
scan     { interval = "300ms" }
locks    { validate_every = "1s" }
restarts { timezone = "UTC", grace = "10s" }
gateway  "simulated" { build = "1500ms", deploy = "0s", rollout = "300ms" }
alert    { interval = "1s", cpu = { percent = 50, sustained = "0s" }, every = "2s", probe = "simulated" }
notify   { webhook = "%s", retry = { initial = "200ms", max = "1s" } }
deploy   { concurrency = { prod = 1 } }
rollout  { on_failure = "rollback" }
freeze "workload" { from = "%s", to = "%s", environments = { "qa" } }
application "shop/api" {
  environments = { "prod" }, limits = { cpu = "1" }, restart = { prod = "*/2 * * * * *" },
}
application "shop/web" { environments = { "prod", "staging", "qa" } }
-- canaries (issue 38): one paused until an operator promotes it, one whose
-- analysis finds no Prometheus (inconclusive, counted as failed: aborted)
application "shop/canary" { environments = { "prod" }, rollout = { strategy = "canary", steps = {
  { weight = 20 }, { pause = true }, { weight = 100 } } } }
application "shop/blind" { environments = { "prod" }, rollout = { strategy = "canary", steps = {
  { weight = 10 }, { analysis = "nowhere" }, { weight = 100 } } } }
analysis "nowhere" { prometheus = "http://127.0.0.1:9", query = 'up{job="{application}"}',
  success = function(v) return v == 1 end, interval = "1s", count = 1, inconclusive = "fail" }
-- promotion (issue 39): one by the promote scan at once, one by an operator
-- before its hour is up, which waits for an approval
application "shop/promo" { environments = { "staging", "live" }, promote = { staging = { to = "live" } } }
application "shop/gate" { environments = { "staging", "live" }, promote = { staging = { to = "live", after = "1h" } },
  approvals = { live = 1 } }
]]):format(hook.url, minute(now - 3600), minute(now + 7 * 86400)) }

local ps = {
  create { app = "shop/api", env = "prod", artifact = "registry/api:1" },
  create { app = "shop/web", env = "prod", artifact = "registry/web:1" },
}
local manual = create { app = "shop/web", env = "staging", artifact = "registry/web:2", manual = true }
for _, p in ipairs(ps) do expect(p:wait("RUNNING", 20), p.app .. " runs") end
local victim = ps[1]:driver()
expect(victim ~= nil, "the first pipeline has a driver", tostring(victim))
server(victim):kill("KILL")
for _, p in ipairs(ps) do expect(p:wait("SUCCEEDED", 40), p.app .. "/" .. p.env .. " succeeds") end
server(victim):start()
expect(manual:wait("BUILD_SUCCEEDED", 30), "the manual pipeline's build succeeds")
manual:deploy()
expect(manual:wait("SUCCEEDED", 30), "... and, released, it succeeds")
local again = create { app = "shop/api", env = "prod", artifact = "registry/api:2" }
expect(again:wait("SUCCEEDED", 30), "a second release of shop/api succeeds")
local broken = create { app = "shop/api", env = "prod", artifact = "registry/api:3" }
expect(broken:wait("ROLLING_OUT", 30), "a third release of shop/api rolls out")
fail_rollout(broken, "CrashLoopBackOff (workload)")
expect(broken:wait("ERROR", 30), "... fails")
wait_until("... and is rolled back automatically", function()
  local r = sql("SELECT status FROM pipeline WHERE rollback_of = ?", broken.id)[1]
  return r and r.status == "SUCCEEDED"
end, 30)
local frozen = create { app = "shop/web", env = "qa", artifact = "registry/web:4" }
expect(frozen:wait("BUILD_SUCCEEDED", 30), "a release inside a freeze waits after its build")
local orc, _, oerr = oopsctl("deploy", frozen.id, "--override", "--reason", "workload override")
expect(orc == 0, "oopsctl deploy --override releases it", oerr)
expect(frozen:wait("SUCCEEDED", 30), "... and it deploys")
local stopped = create { app = "shop/web", env = "prod", artifact = "registry/web:3" }
expect(stopped:wait("RUNNING", 20), "another pipeline runs")
stopped:stop()
expect(stopped:wait("STOPPED", 20), "... and is stopped")

local canary = create { app = "shop/canary", env = "prod", artifact = "registry/canary:1" }
wait_until("a canary waits for an operator", function() return canary:row().paused == "operator" end, 40)
local prc, _, perr = oopsctl("promote", canary.id, "--reason", "workload promote")
expect(prc == 0, "oopsctl promote", perr)
expect(canary:wait("SUCCEEDED", 30), "... and the canary finishes")
local blind = create { app = "shop/blind", env = "prod", artifact = "registry/blind:1" }
expect(blind:wait("ERROR", 40), "a canary whose analysis cannot measure is aborted", blind:message())

local promo = create { app = "shop/promo", env = "staging", artifact = "registry/promo:1" }
expect(promo:wait("SUCCEEDED", 30), "a staging release goes live")
wait_until("... and is promoted to live, where it goes live", function()
  local r = sql("SELECT status FROM pipeline WHERE promoted_from = ?", promo.id)[1]
  return r and r.status == "SUCCEEDED"
end, 40)
local gate = create { app = "shop/gate", env = "staging", artifact = "registry/gate:1" }
expect(gate:wait("SUCCEEDED", 30), "another staging release goes live")
local grc, gout, gerr = oopsctl("promote-now", gate.id, "--to", "live", "--reason", "workload promote-now")
expect(grc == 0, "oopsctl promote-now", gerr)
local promoted = (gout or ""):match("%S+")
wait_until("... its promotion waits for an approval", function()
  local r = promoted and sql("SELECT hold FROM pipeline WHERE id = ?", promoted)[1]
  return r and r.hold == "approval"
end, 30)
grc, _, gerr = oopsctl_as("approver", "approve", promoted or "?", "--reason", "workload approval")
expect(grc == 0, "... approved by another person", gerr)
wait_until("... it goes live", function()
  return sql("SELECT status FROM pipeline WHERE id = ?", promoted or "?")[1].status == "SUCCEEDED"
end, 30)

local function usage(value)
  sql("INSERT INTO sim_metric (namespace, application, environment, metric, pod, value) " ..
    "VALUES ('shop', 'api', 'prod', 'cpu', 'api-0', ?) ON DUPLICATE KEY UPDATE value = VALUES(value)", value)
end
local function edges(edge)
  return sql("SELECT COUNT(*) AS n FROM outbox WHERE kind = 'alert' AND payload LIKE ?", '%"' .. edge .. '"%')[1].n
end
usage(900)
wait_until("a CPU alert fires", function() return edges("FIRING") == 1 end, 30)
usage(100)
wait_until("... and resolves", function() return edges("RESOLVED") == 1 end, 30)
wait_until("scheduled restarts fire", function()
  return sql("SELECT COUNT(*) AS n FROM restart_run WHERE outcome = 'ok'")[1].n >= 2
end, 30)
return all
