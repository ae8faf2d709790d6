-- Resource alerts (REFERENCE.md §8): the Prometheus queries and their
-- answers, the targets a policy makes, the decision table, the outbox
-- payload, and — against OOPS_TEST_DB — the scan's conditional writes:
-- FIRING → REPEAT → RESOLVED with exactly one outbox row each, two leaders
-- reading the same state announcing one edge, a probe error changing
-- nothing, a target gone from the policy resolved. (With several real
-- servers: tests/scenarios/alerts.lua.)
local oops = require("oops")
local cjson = require("cjson")
local policy = require("oops.policy")
local prom = require("oops.probes.prometheus")
local alert = require("oops.scans.alert")

local SEL = 'namespace="shop",pod=~"api-[0-9]+",container!="",container!="POD"'

local function target(over)
  local t = { namespace = "shop", application = "api", environment = "prod", metric = "cpu",
    threshold = 1900, limit = 2000, percent = 95, sustained_ms = 600000 }
  for k, v in pairs(over or {}) do t[k] = v end
  return t
end

describe("the Prometheus probe's queries", function()
  it("CPU: rate over 2i, min over W = the sustained window, step i", function()
    assert.are.equal(
      "min_over_time((sum by (pod) (rate(container_cpu_usage_seconds_total{" .. SEL .. "}[60s])) * 1000)"
        .. "[600s:30s]) > 1900",
      prom.query(target(), 30000))
  end)

  it("memory: working set, min over W", function()
    assert.are.equal(
      "min_over_time((sum by (pod) (container_memory_working_set_bytes{" .. SEL .. "}))[300s:30s]) > 3865470566",
      prom.query(target { metric = "memory", threshold = 3865470566, sustained_ms = 300000 }, 30000))
  end)

  it("W is at least 2i (a short or zero sustained window)", function()
    assert.are.equal(
      "min_over_time((sum by (pod) (container_memory_working_set_bytes{" .. SEL .. "}))[60s:30s]) > 10",
      prom.query(target { metric = "memory", threshold = 10, sustained_ms = 0 }, 30000))
    assert.are.equal(
      "min_over_time((sum by (pod) (rate(container_cpu_usage_seconds_total{" .. SEL .. "}[20s])) * 1000)"
        .. "[20s:10s]) > 1900",
      prom.query(target { sustained_ms = 15000 }, 10000))
  end)

  it("a scrape interval that is not whole seconds is written in ms", function()
    assert.are.equal("1500ms", prom.duration(1500))
    assert.are.equal("3s", prom.duration(3000))
    assert.truthy(prom.query(target { sustained_ms = 0 }, 1500):find("[3s])) * 1000)[3s:1500ms]) > 1900", 1, true))
  end)

  it("the selector names the namespace and the application's pods", function()
    assert.are.equal('namespace="web",pod=~"front-end-[0-9]+",container!="",container!="POD"',
      prom.selector("web", "front-end"))
  end)

  it("GETs <url>/api/v1/query with the query percent-encoded, and the token as a bearer", function()
    local cfg = { url = "http://prom.example:9090/", scrape_interval_ms = 30000, token = "s3cret" }
    local req = prom.request(target(), cfg)
    assert.are.equal("GET", req.method)
    assert.are.equal("http://prom.example:9090/api/v1/query?query=" .. prom.encode(prom.query(target(), 30000)),
      req.url)
    assert.are.same({ Authorization = "Bearer s3cret" }, req.headers)
    assert.truthy(req.url:find("?query=min_over_time%28%28sum%20by%20%28pod%29", 1, true))
    -- Only unreserved characters stay as they are ("~" is one).
    assert.is_nil(req.url:find('[{}"= %[%]()*>]', #"http://prom.example:9090/api/v1/query?query=" + 1))
  end)

  it("sends no Authorization header without a token", function()
    local req = prom.request(target(), { url = "http://prom:9090", scrape_interval_ms = 30000 })
    assert.are.same({}, req.headers)
    assert.truthy(req.url:find("^http://prom:9090/api/v1/query%?query="))
  end)
end)

describe("the Prometheus probe's answers", function()
  local function vector(pods)
    local result = {}
    for _, p in ipairs(pods) do
      result[#result + 1] = { metric = { pod = p }, value = { 1754000000, "2000" } }
    end
    return cjson.encode({ status = "success", data = { resultType = "vector", result = result } })
  end

  it("success: the pods of the result, sorted", function()
    assert.are.same({ "api-0", "api-2" }, prom.parse(vector { "api-2", "api-0" }))
  end)

  it("a pod listed twice counts once", function()
    assert.are.same({ "api-0", "api-1" }, prom.parse(vector { "api-1", "api-0", "api-1" }))
  end)

  it("an empty result: no pod fires (not an error)", function()
    local pods, err = prom.parse('{"status":"success","data":{"resultType":"vector","result":[]}}')
    assert.is_nil(err)
    assert.are.same({}, pods)
  end)

  it("status other than success is an error naming Prometheus's reason", function()
    local pods, err = prom.parse('{"status":"error","errorType":"bad_data","error":"parse error at char 3"}')
    assert.is_nil(pods)
    assert.are.equal("prometheus: bad_data: parse error at char 3", err)
  end)

  it("an HTTP error status is an error, even with a body", function()
    local pods, err = prom.parse('{"status":"error","errorType":"unavailable","error":"overloaded"}', 503)
    assert.is_nil(pods)
    assert.are.equal("prometheus: HTTP 503 unavailable: overloaded", err)
    pods, err = prom.parse("<html>bad gateway</html>", 502)
    assert.is_nil(pods)
    assert.are.equal("prometheus: HTTP 502", err)
  end)

  it("malformed JSON, an empty body, or no data.result is an error", function()
    for _, body in ipairs({ "{not json", "", '"success"', '{"status":"success"}',
      '{"status":"success","data":{"result":"x"}}' }) do
      local pods, err = prom.parse(body)
      assert.is_nil(pods, body)
      assert.truthy(err:find("^prometheus: malformed response"), body)
    end
    local pods, err = prom.parse("[]")
    assert.is_nil(pods)
    assert.are.equal("prometheus: status nil", err)
  end)

  it("no answer (connection refused) is an error", function()
    local pods, err = oops.wait(prom.probe, target(), { url = "http://127.0.0.1:9", scrape_interval_ms = 30000 })
    assert.is_nil(pods)
    assert.truthy(err:find("^prometheus: "), err)
  end)

  it("samples without a pod label are skipped", function()
    local body = '{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"9"]},'
      .. '{"metric":{"pod":"api-3"},"value":[1,"9"]}]}}'
    assert.are.same({ "api-3" }, prom.parse(body))
  end)
end)

------------------------------------------------------------------- targets

local function load_policy(text)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  local p, errs = policy.load_files({ path }, { no_cron = true, cron_parse = function() return {} end })
  os.remove(path)
  assert(p, table.concat(errs or {}, "\n"))
  return p
end

describe("alert targets", function()
  local p = load_policy([[
alert { cpu = { percent = 95 }, memory = { percent = 90 } }
application "shop/api"   { environments = { "staging", "prod" }, limits = { cpu = "2", memory = "4Gi" } }
application "shop/cron"  { environments = { "prod" }, limits = { cpu = "500m" } }
application "shop/plain" { environments = { "prod" } }
]])
  local targets = alert.targets(p)

  it("only applications with limits, one target per environment and limited metric", function()
    local keys = {}
    for _, t in ipairs(targets) do keys[#keys + 1] = alert.key(t) end
    assert.are.same({ "shop/api/staging/cpu", "shop/api/staging/memory", "shop/api/prod/cpu",
      "shop/api/prod/memory", "shop/cron/prod/cpu" }, keys)
  end)

  it("threshold = limit × percent / 100, as integers", function()
    local cpu, mem = targets[3], targets[4]
    assert.are.same({ 2000, 95, 1900 }, { cpu.limit, cpu.percent, cpu.threshold })
    assert.are.same({ 4294967296, 90, 3865470566 }, { mem.limit, mem.percent, mem.threshold })
    assert.are.equal("integer", math.type(cpu.threshold))
    assert.are.equal("integer", math.type(mem.threshold))
    assert.are.same({ 500, 475 }, { targets[5].limit, targets[5].threshold })
  end)

  it("carries the metric's sustained window (defaults from REFERENCE §8)", function()
    assert.are.equal(600000, targets[3].sustained_ms)
    assert.are.equal(300000, targets[4].sustained_ms)
  end)

  it("none without applications", function()
    assert.are.same({}, alert.targets(load_policy("alert {}")))
  end)
end)

------------------------------------------------------------ decision table

describe("the decision table (REFERENCE §8)", function()
  local EVERY = 1800000
  local none = nil
  local quiet = { firing = false, notified_age_ms = 10 }
  local firing_old = { firing = true, notified_age_ms = EVERY }
  local firing_new = { firing = true, notified_age_ms = EVERY - 1 }
  local pods = { "api-0" }

  it("probe error, any prior state: nothing", function()
    for _, prior in ipairs({ quiet, firing_old, firing_new }) do
      assert.is_nil(alert.decide(prior, nil, EVERY))
    end
    assert.is_nil(alert.decide(none, nil, EVERY))
  end)

  it("pods found, no state or not firing: FIRING", function()
    assert.are.equal("FIRING", alert.decide(none, pods, EVERY))
    assert.are.equal("FIRING", alert.decide(quiet, pods, EVERY))
  end)

  it("pods found, firing, last notified at least the repeat interval ago: REPEAT", function()
    assert.are.equal("REPEAT", alert.decide(firing_old, pods, EVERY))
    assert.are.equal("REPEAT", alert.decide({ firing = true, notified_age_ms = EVERY * 3 }, pods, EVERY))
  end)

  it("pods found, firing, within the interval: nothing", function()
    assert.is_nil(alert.decide(firing_new, pods, EVERY))
    assert.is_nil(alert.decide({ firing = true, notified_age_ms = 0 }, pods, EVERY))
  end)

  it("no pods, firing: RESOLVED", function()
    assert.are.equal("RESOLVED", alert.decide(firing_old, {}, EVERY))
    assert.are.equal("RESOLVED", alert.decide(firing_new, {}, EVERY))
  end)

  it("no pods, not firing (or no state): nothing", function()
    assert.is_nil(alert.decide(quiet, {}, EVERY))
    assert.is_nil(alert.decide(none, {}, EVERY))
  end)
end)

------------------------------------------------------------------- payload

describe("the alert payload", function()
  it("FIRING: the facts, times in whole UTC seconds, no duration", function()
    local doc = cjson.decode(alert.payload("FIRING", target(), { "api-0", "api-1" },
      "2026-08-01 10:15:00.123456", "2026-08-01 10:15:00.123456"))
    assert.are.same({ edge = "FIRING", namespace = "shop", application = "api", environment = "prod",
      metric = "cpu", percent = 95, threshold = 1900, limit = 2000, pods = { "api-0", "api-1" },
      since = "2026-08-01 10:15:00", time = "2026-08-01 10:15:00" }, doc)
  end)

  it("RESOLVED: with duration_s; an empty pod list stays a list", function()
    local text = alert.payload("RESOLVED", target { metric = "memory", threshold = 3865470566, limit = 4294967296,
      percent = 90 }, {}, "2026-08-01 10:15:00.5", "2026-08-01 10:45:30.9", 1830)
    assert.truthy(text:find('"pods":[]', 1, true))
    local doc = cjson.decode(text)
    assert.are.same({ "RESOLVED", 1830, 3865470566, "2026-08-01 10:15:00", "2026-08-01 10:45:30" },
      { doc.edge, doc.duration_s, doc.threshold, doc.since, doc.time })
  end)

  it("a target gone from the policy: threshold and limit are null", function()
    local text = alert.payload("RESOLVED", { namespace = "shop", application = "old", environment = "prod",
      metric = "cpu", percent = 95 }, { "old-0" }, "2026-08-01 10:15:00", "2026-08-01 10:16:00", 60)
    assert.truthy(text:find('"threshold":null', 1, true))
    assert.truthy(text:find('"limit":null', 1, true))
  end)

  it("event ids: stable per edge, unique per version, within the column", function()
    assert.are.equal("alert-shop/api/prod/cpu-7", alert.event_id(target(), 7))
    local long = target { namespace = ("n"):rep(63), application = ("a"):rep(63), environment = ("e"):rep(63) }
    local id = alert.event_id(long, 12345678901)
    assert.is_true(#id <= 160)
    assert.are.equal(id, alert.event_id(long, 12345678901))
    assert.are_not.equal(id, alert.event_id(target { namespace = ("n"):rep(63), application = ("a"):rep(63),
      environment = ("e"):rep(62) .. "f" }, 12345678901))
  end)
end)

------------------------------------------------------------------ database

local need_db = require("support.db").connect

local function sql(q, ...)
  local rows, err = oops.db.exec(q, ...)
  assert(rows, tostring(err) .. " in " .. q)
  return rows
end

-- A namespace of this run's own, so other specs' rows never get in the way.
local NS = string.format("al%x%x", os.time(), math.random(0, 0xffffff))

local function db_policy(apps)
  local p = policy.defaults()
  p.alert.enabled = true
  p.alert.cpu.percent = 50
  p.alert.every_ms = 60000
  for _, name in ipairs(apps or { "api" }) do
    p.applications[NS .. "/" .. name] = { namespace = NS, application = name, environments = { "prod" },
      limits = { cpu_millicores = 1000 } }
  end
  return p
end

local function run(p) oops.wait(function() alert.run(p, nil) end) end

local function usage(app, pod, value)
  sql("INSERT INTO sim_metric (namespace, application, environment, metric, pod, value) " ..
    "VALUES (?, ?, 'prod', 'cpu', ?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value)", NS, app, pod, value)
end

local function edges(app)
  local rows = sql("SELECT event_id, payload FROM outbox WHERE kind = 'alert' AND event_id LIKE ? ORDER BY id",
    "alert-" .. NS .. "/" .. app .. "/%")
  local list = {}
  for _, r in ipairs(rows) do list[#list + 1] = cjson.decode(r.payload) end
  return list, rows
end

local function state(app)
  return sql("SELECT firing, version, pods FROM alert_state WHERE namespace = ? AND application = ? " ..
    "AND environment = 'prod' AND metric = 'cpu'", NS, app)[1]
end

describe("the alert scan (needs OOPS_TEST_DB)", function()
  before_each(need_db)
  after_each(function()
    sql("DELETE FROM sim_metric WHERE namespace = ?", NS)
    sql("DELETE FROM sim_job WHERE pipeline_id LIKE ?", NS .. "/%")
    sql("DELETE FROM alert_state WHERE namespace = ?", NS)
    sql("DELETE FROM outbox WHERE event_id LIKE ?", "alert-" .. NS .. "/%")
    oops.locks.release(alert.LOCK)
  end)

  it("goes FIRING → REPEAT → RESOLVED with exactly one notification each", function()
    local p = db_policy()
    usage("api", "api-0", 900)
    usage("api", "api-1", 100)
    run(p)
    local list, rows = edges("api")
    assert.are.equal(1, #list)
    assert.are.same({ "FIRING", { "api-0" }, 500, 1000, 50 },
      { list[1].edge, list[1].pods, list[1].threshold, list[1].limit, list[1].percent })
    assert.are.equal("alert-" .. NS .. "/api/prod/cpu-1", rows[1].event_id)
    assert.are.equal(list[1].since, list[1].time)
    assert.are.same({ 1, 1 }, { state("api").firing, state("api").version })

    run(p) -- still over, within the repeat interval: nothing
    assert.are.equal(1, #edges("api"))

    sql("UPDATE alert_state SET last_notified_at = NOW(6) - INTERVAL 61 SECOND WHERE namespace = ?", NS)
    usage("api", "api-1", 800)
    run(p)
    list = edges("api")
    assert.are.equal(2, #list)
    assert.are.same({ "REPEAT", { "api-0", "api-1" } }, { list[2].edge, list[2].pods })
    assert.are.equal(list[1].since, list[2].since)
    run(p)
    assert.are.equal(2, #edges("api"))

    usage("api", "api-0", 10)
    usage("api", "api-1", 10)
    run(p)
    list = edges("api")
    assert.are.equal(3, #list)
    assert.are.same({ "RESOLVED", { "api-0", "api-1" }, list[1].since }, { list[3].edge, list[3].pods, list[3].since })
    assert.are.equal("number", type(list[3].duration_s))
    assert.is_nil(list[1].duration_s)
    assert.are.same({ 0, 3 }, { state("api").firing, state("api").version })
    run(p)
    assert.are.equal(3, #edges("api"))
  end)

  it("two leaders deciding from the same read announce one edge", function()
    local t = alert.targets(db_policy())[1]
    local now = sql("SELECT NOW(6) AS now")[1].now
    assert.is_true(oops.locks.acquire(alert.LOCK)) -- announcing is fenced by the leader lock
    -- Both saw no state: the second INSERT meets the first's row.
    assert.are.equal("made", alert.announce("FIRING", t, nil, { "api-0" }, now))
    assert.are.equal("lost", alert.announce("FIRING", t, nil, { "api-0" }, now))
    -- Both saw version 1 firing: the second UPDATE matches no row.
    local prior = { firing = true, version = 1, firing_since = now, pods = { "api-0" }, firing_for_s = 5 }
    assert.are.equal("made", alert.announce("RESOLVED", t, prior, {}, now))
    assert.are.equal("lost", alert.announce("RESOLVED", t, prior, {}, now))
    local list = edges("api")
    assert.are.same({ "FIRING", "RESOLVED" }, { list[1].edge, list[2].edge })
    assert.are.equal(2, #list)
    assert.are.same({ 0, 2 }, { state("api").firing, state("api").version })
  end)

  it("a leader whose lock the database gives to another session announces nothing", function()
    local t = alert.targets(db_policy())[1]
    local now = sql("SELECT NOW(6) AS now")[1].now
    -- Our held set still says we lead, but the lock is another session's
    -- (the work connection stands in for the new leader's lock session).
    oops.locks.release(alert.LOCK)
    assert.are.equal(1, sql("SELECT GET_LOCK(?, 0) AS g", alert.LOCK)[1].g)
    local ok, res = pcall(alert.announce, "FIRING", t, nil, { "api-0" }, now)
    sql("SELECT RELEASE_LOCK(?) AS r", alert.LOCK)
    assert.is_true(ok, tostring(res))
    assert.are.equal("lost", res)
    assert.are.equal(0, #edges("api"))
    assert.is_nil(state("api"))
  end)

  it("a probe error changes nothing", function()
    local p = db_policy()
    usage("api", "api-0", 900)
    run(p)
    assert.are.equal(1, #edges("api"))
    sql("INSERT INTO sim_job (pipeline_id, kind, outcome) VALUES (?, 'fail_probe', 'metrics unavailable')",
      NS .. "/api/prod")
    usage("api", "api-0", 10)
    sql("UPDATE alert_state SET last_notified_at = NOW(6) - INTERVAL 1 HOUR WHERE namespace = ?", NS)
    run(p)
    assert.are.equal(1, #edges("api"))
    assert.are.same({ 1, 1 }, { state("api").firing, state("api").version })
    sql("DELETE FROM sim_job WHERE pipeline_id = ?", NS .. "/api/prod")
    run(p)
    assert.are.equal("RESOLVED", edges("api")[2].edge)
  end)

  it("resolves a firing target that left the policy, once", function()
    usage("api", "api-0", 900)
    usage("old", "old-0", 900)
    run(db_policy { "api", "old" })
    assert.are.equal(1, #edges("old"))
    local p = db_policy { "api" }
    run(p)
    local list = edges("old")
    assert.are.equal(2, #list)
    assert.are.same({ "RESOLVED", { "old-0" }, 50 }, { list[2].edge, list[2].pods, list[2].percent })
    assert.are.equal(cjson.null, list[2].threshold)
    assert.are.equal(0, state("old").firing)
    run(p)
    assert.are.equal(2, #edges("old"))
    assert.are.equal(1, #edges("api"))
  end)

  it("does nothing when alerts are disabled", function()
    local p = db_policy()
    p.alert.enabled = false
    usage("api", "api-0", 900)
    run(p)
    assert.are.equal(0, #edges("api"))
    assert.is_false(oops.locks.holds(alert.LOCK))
  end)
end)
