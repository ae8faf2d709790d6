-- Notification messages (REFERENCE.md sections 8 and 10): levels, titles,
-- facts, advice, human units, and the alert payload the alert scan writes.
-- The delivery itself (outbox, retries, leader, crash) is in
-- tests/integration/notify.sh, against real servers and MariaDB.
local notify = require("oops.notification")
local cjson = require("cjson")

local function facts_of(m)
  local t = {}
  for _, f in ipairs(m.facts) do t[f.name] = f.value end
  return t
end

local function names_of(m)
  local t = {}
  for i, f in ipairs(m.facts) do t[i] = f.name end
  return t
end

local function event(over)
  local r = {
    event_id = "pipeline-event-42", event_type = "SUCCEEDED", pipeline_id = "abc123def456",
    namespace = "shop", application = "api", environment = "prod", deploy_mode = "auto",
    trigger_type = "release", artifact = "registry/shop-api:1.2.3", server = "s1",
    message = "The application was released successfully.", event_at = "2026-08-01 12:00:05.123456",
    source = '{"git": "https://git.example/shop/api.git", "branch": "main"}',
  }
  -- false stands for NULL (a column the row does not have)
  for k, v in pairs(over or {}) do r[k] = v or nil end
  return r
end

local function alert(over)
  local t = {
    edge = "FIRING", namespace = "shop", application = "api", environment = "prod", metric = "cpu",
    percent = 95, threshold = 1900, limit = 2000, pods = { "api-0", "api-1" },
    since = "2026-08-01 12:00:00.000000", time = "2026-08-01 12:10:00.000000",
  }
  for k, v in pairs(over or {}) do t[k] = v end
  return t
end

-- Through the real path: the alert scan's payload, as JSON text, read back.
local function alert_message(over, created_at)
  return notify.alert_message("alert-x", notify.alert_payload(alert(over)), created_at)
end

describe("a pipeline event's message", function()
  it("has the level of REFERENCE.md section 10 for each event type", function()
    local want = {
      CREATED = "info", BUILDING = "info", BUILD_SUCCEEDED = "warning", DEPLOYING = "info",
      ROLLING_OUT = "info", SUCCEEDED = "success", FAILED = "error", STOPPED = "neutral",
    }
    for type, level in pairs(want) do
      local m = notify.pipeline_message(event { event_type = type })
      assert.are.equal(level, m.level, type)
      assert.are.equal(type, m.type)
    end
  end)

  it("is titled with the application, environment and event", function()
    local m = notify.pipeline_message(event())
    assert.are.equal("shop/api prod: SUCCEEDED", m.title)
    assert.are.equal("pipeline", m.kind)
    assert.are.equal("pipeline-event-42", m.id)
  end)

  it("carries the facts in display order, with the event's message as detail", function()
    local m = notify.pipeline_message(event())
    assert.are.same({ "application", "environment", "mode", "trigger", "pipeline", "artifact", "branch",
      "server", "time", "detail" }, names_of(m))
    assert.are.same({
      application = "shop/api", environment = "prod", mode = "auto", trigger = "release",
      pipeline = "abc123def456", artifact = "registry/shop-api:1.2.3", branch = "main", server = "s1",
      time = "2026-08-01 12:00:05 UTC", detail = "The application was released successfully.",
    }, facts_of(m))
  end)

  it("leaves out facts it does not have (no artifact yet, no branch, no message)", function()
    local m = notify.pipeline_message(event {
      artifact = false, source = false, message = false, event_type = "CREATED",
    })
    assert.are.same({ "application", "environment", "mode", "trigger", "pipeline", "server", "time" }, names_of(m))
    m = notify.pipeline_message(event { source = "not json" })
    assert.is_nil(facts_of(m).branch)
  end)

  it("names the operator and the reason of an operator's event (issue 27)", function()
    local m = notify.pipeline_message(event { event_type = "STOPPED", actor = "alice@page", reason = "wrong branch",
      message = "Stopped by alice@page: wrong branch" })
    assert.are.same({ "application", "environment", "mode", "trigger", "pipeline", "artifact", "branch",
      "server", "actor", "reason", "time", "detail" }, names_of(m))
    assert.are.equal("alice@page", facts_of(m).actor)
    assert.are.equal("wrong branch", facts_of(m).reason)
  end)

  it("has its time in RFC 3339 UTC, microseconds kept", function()
    assert.are.equal("2026-08-01T12:00:05.123456Z", notify.pipeline_message(event()).time)
  end)

  it("advises the manual release after BUILD_SUCCEEDED and the log after FAILED, nothing otherwise", function()
    assert.are.equal("Manual release: run `oopsctl deploy abc123def456` to deploy it.",
      notify.pipeline_message(event { event_type = "BUILD_SUCCEEDED", deploy_mode = "manual" }).advice)
    -- An automatic release waits there only when a window, freeze or slot holds it.
    assert.are.equal("It deploys when allowed; `oopsctl deploy abc123def456 --override --reason TEXT` " ..
      "releases it from a window or freeze now.",
      notify.pipeline_message(event { event_type = "BUILD_SUCCEEDED" }).advice)
    assert.are.equal("See what it ran: `oopsctl logs abc123def456`.",
      notify.pipeline_message(event { event_type = "FAILED" }).advice)
    for _, type in ipairs({ "CREATED", "BUILDING", "DEPLOYING", "ROLLING_OUT", "SUCCEEDED", "STOPPED" }) do
      assert.is_nil(notify.pipeline_message(event { event_type = type }).advice, type)
    end
  end)

  it("is nil and why when the join found no event", function()
    local m, why = notify.pipeline_message({ event_id = "pipeline-event-9" })
    assert.is_nil(m)
    assert.are.equal("pipeline event or pipeline not found", why)
  end)

  it("raises when not given a row", function()
    assert.has_error(function() notify.pipeline_message("x") end, "notify.pipeline_message: expects a row table")
  end)
end)

describe("an alert edge's message", function()
  it("FIRING on CPU: exceeded threshold, a warning, with throttling advice", function()
    local m = alert_message()
    assert.are.equal("resource alert | CPU exceeded threshold", m.title)
    assert.are.equal("warning", m.level)
    assert.are.equal("FIRING", m.type)
    assert.are.equal("alert", m.kind)
    assert.are.equal("alert-x", m.id)
    assert.matches("throttled", m.advice)
  end)

  it("FIRING on memory: an error, with OOM kill advice", function()
    local m = alert_message { metric = "memory", percent = 90, threshold = 3865470566, limit = 4294967296 }
    assert.are.equal("resource alert | memory exceeded threshold", m.title)
    assert.are.equal("error", m.level)
    assert.matches("OOM kill", m.advice)
  end)

  it("REPEAT: still over limit, same level and advice", function()
    local m = alert_message { edge = "REPEAT" }
    assert.are.equal("resource alert | CPU still over limit", m.title)
    assert.are.equal("warning", m.level)
    assert.matches("throttled", m.advice)
    m = alert_message { edge = "REPEAT", metric = "memory", threshold = 1, limit = 2 }
    assert.are.equal("error", m.level)
  end)

  it("RESOLVED: recovered, a success, no advice, telling how long it lasted", function()
    local m = alert_message { edge = "RESOLVED", duration_s = 750, pods = {} }
    assert.are.equal("resource alert | CPU recovered", m.title)
    assert.are.equal("success", m.level)
    assert.is_nil(m.advice)
    assert.are.equal("12m 30s", facts_of(m).lasted)
    assert.is_nil(facts_of(m).pods) -- no pods over the threshold any more
  end)

  it("RESOLVED without duration_s: the time from since to time", function()
    local m = alert_message { edge = "RESOLVED", since = "2026-08-01 11:55:00", time = "2026-08-01 13:00:30.5" }
    assert.are.equal("1h 5m", facts_of(m).lasted)
    m = alert_message { edge = "RESOLVED", since = "2026-02-28 23:59:00", time = "2026-03-01 00:01:15" }
    assert.are.equal("2m 15s", facts_of(m).lasted)
  end)

  it("carries the facts of REFERENCE.md section 8, in order", function()
    local m = alert_message()
    assert.are.same({ "application", "environment", "metric", "threshold", "pods", "start time", "time" }, names_of(m))
    assert.are.same({
      application = "shop/api", environment = "prod", metric = "cpu", threshold = "95% (1900m / 2000m)",
      pods = "api-0, api-1", ["start time"] = "2026-08-01 12:00:00 UTC", time = "2026-08-01 12:10:00 UTC",
    }, facts_of(m))
    assert.are.equal("2026-08-01T12:10:00.000000Z", m.time)
  end)

  it("shows the threshold with human units", function()
    local m = alert_message { metric = "memory", percent = 90, threshold = 3865470566, limit = 4294967296 }
    assert.are.equal("90% (3.6Gi / 4Gi)", facts_of(m).threshold)
    m = alert_message { metric = "memory", percent = 80, threshold = 429496729, limit = 536870912 }
    assert.are.equal("80% (409.6Mi / 512Mi)", facts_of(m).threshold)
    m = alert_message { percent = 50, threshold = 250, limit = 500 }
    assert.are.equal("50% (250m / 500m)", facts_of(m).threshold)
  end)

  it("names the first 10 pods, then how many more", function()
    local pods = {}
    for i = 1, 15 do pods[i] = "api-" .. (i - 1) end
    assert.are.equal("api-0, api-1, api-2, api-3, api-4, api-5, api-6, api-7, api-8, api-9 and 5 more pods",
      facts_of(alert_message { pods = pods }).pods)
    pods[12] = nil; pods[13] = nil; pods[14] = nil; pods[15] = nil
    assert.matches("api%-9 and 1 more pod$", facts_of(alert_message { pods = pods }).pods)
    pods[11] = nil
    assert.matches("api%-9$", facts_of(alert_message { pods = pods }).pods)
  end)

  it("takes the outbox row's created_at when the payload has no time", function()
    local t = alert()
    t.time = nil
    local m = notify.alert_message("alert-x", notify.alert_payload(t), "2026-08-01 12:20:00.250000")
    assert.are.equal("2026-08-01 12:20:00 UTC", facts_of(m).time)
    assert.are.equal("2026-08-01T12:20:00.250000Z", m.time)
  end)

  it("reads a target gone from the policy: no quantities, no start time", function()
    local m = notify.alert_message("alert-x", '{"edge":"RESOLVED","namespace":"shop","application":"api",'
      .. '"environment":"prod","metric":"memory","percent":90,"threshold":null,"limit":null,"pods":[],'
      .. '"since":null,"time":"2026-08-01 12:10:00","duration_s":65}')
    local f = facts_of(m)
    assert.are.equal("90%", f.threshold)
    assert.is_nil(f["start time"])
    assert.are.equal("1m 5s", f.lasted)
    m = notify.alert_message("alert-x", '{"edge":"RESOLVED","namespace":"shop","application":"api",'
      .. '"environment":"prod","metric":"cpu","percent":null,"threshold":null,"limit":null}')
    assert.is_nil(facts_of(m).threshold)
    assert.is_nil(facts_of(m).pods)
  end)

  it("reads what the alert scan writes (oops.scans.alert.payload)", function()
    local payload = require("oops.scans.alert").payload("REPEAT",
      { namespace = "shop", application = "api", environment = "prod", metric = "memory",
        percent = 90, threshold = 3865470566, limit = 4294967296 },
      { "api-0" }, "2026-08-01 12:00:00.000000", "2026-08-01 12:30:00.000000")
    local m = assert(notify.alert_message("alert-shop/api/prod/memory-2", payload))
    assert.are.equal("resource alert | memory still over limit", m.title)
    assert.are.same({
      application = "shop/api", environment = "prod", metric = "memory", threshold = "90% (3.6Gi / 4Gi)",
      pods = "api-0", ["start time"] = "2026-08-01 12:00:00 UTC", time = "2026-08-01 12:30:00 UTC",
    }, facts_of(m))
  end)

  it("is nil and why for a malformed payload (never a raise: it comes from the database)", function()
    local m, why = notify.alert_message("alert-x", "{not json")
    assert.is_nil(m)
    assert.matches("^alert payload: not JSON", why)
    m, why = notify.alert_message("alert-x", '{"edge":"BOOM"}')
    assert.is_nil(m)
    assert.are.equal("alert payload: edge: BOOM (want FIRING, REPEAT or RESOLVED)", why)
    m, why = notify.alert_message("alert-x", cjson.encode(alert { threshold = "lots" }))
    assert.is_nil(m)
    assert.are.equal("alert payload: threshold: not a number", why)
  end)
end)

describe("notify.alert_payload (what the alert scan writes)", function()
  it("is JSON holding exactly the contract's fields", function()
    local t = cjson.decode(notify.alert_payload(alert { edge = "RESOLVED", duration_s = 600 }))
    assert.are.same({ "api-0", "api-1" }, t.pods)
    assert.are.equal("RESOLVED", t.edge)
    assert.are.equal(600, t.duration_s)
    assert.are.equal(1900, t.threshold)
    assert.is_nil(notify.alert_payload(alert()):find("\\/", 1, true))
  end)

  it("raises on a missing or mistyped field", function()
    local function bad(over, want)
      assert.has_error(function() notify.alert_payload(alert(over)) end, want)
    end
    bad({ edge = "FIRED" }, "notify.alert_payload: edge must be FIRING, REPEAT or RESOLVED")
    bad({ metric = "disk" }, "notify.alert_payload: metric must be cpu or memory")
    bad({ threshold = "1900m" }, "notify.alert_payload: threshold must be a number, not string")
    bad({ since = false }, "notify.alert_payload: since must be a UTC time string, not boolean")
    bad({ pods = { "a", 3 } }, "notify.alert_payload: pods[2] must be a string")
    bad({ since = "yesterday" },
      'notify.alert_payload: since must look like "2026-08-01 12:00:00.000000" (UTC), not "yesterday"')
  end)

  it("writes null for what a target gone from the policy lacks, [] for no pods", function()
    local t = alert { edge = "RESOLVED", pods = {} }
    t.threshold, t.limit, t.percent, t.since = nil, nil, nil, nil
    local text = notify.alert_payload(t)
    assert.truthy(text:find('"pods":[]', 1, true))
    local j = cjson.decode(text)
    assert.are.equal(cjson.null, j.threshold)
    assert.are.equal(cjson.null, j.since)
  end)
end)

describe("the JSON sent to webhooks and commands", function()
  it("has id, kind, type, level, title, facts, advice and time", function()
    local text = notify.encode(notify.pipeline_message(event { event_type = "FAILED" }))
    local j = cjson.decode(text)
    assert.are.equal("pipeline-event-42", j.id)
    assert.are.equal("pipeline", j.kind)
    assert.are.equal("FAILED", j.type)
    assert.are.equal("error", j.level)
    assert.are.equal("shop/api prod: FAILED", j.title)
    assert.are.same({ name = "application", value = "shop/api" }, j.facts[1])
    assert.are.equal("See what it ran: `oopsctl logs abc123def456`.", j.advice)
    assert.are.equal("2026-08-01T12:00:05.123456Z", j.time)
    assert.truthy(text:find('"shop/api prod: FAILED"', 1, true), "slashes are not escaped")
  end)

  it("writes its keys in a fixed order: a resend is the same bytes from any server", function()
    local m = { id = "pipeline-event-1", kind = "pipeline", type = "CREATED", level = "info",
      title = "shop/api prod: CREATED", facts = { { name = "application", value = "shop/api" } },
      time = "2026-08-01T12:00:00.000000Z" }
    assert.are.equal('{"id":"pipeline-event-1","kind":"pipeline","type":"CREATED","level":"info",'
      .. '"title":"shop/api prod: CREATED","facts":[{"name":"application","value":"shop/api"}],'
      .. '"advice":null,"time":"2026-08-01T12:00:00.000000Z"}', notify.encode(m))
  end)

  it("writes advice as null when there is none, and stays one line", function()
    local text = notify.encode(notify.pipeline_message(event { message = "two\nlines" }))
    assert.are.equal(cjson.null, cjson.decode(text).advice)
    assert.is_nil(text:find("\n", 1, true))
  end)

  it("keeps a backslash before a slash intact", function()
    local text = notify.encode(notify.pipeline_message(event { message = [[C:\/dir/x]] }))
    local j = cjson.decode(text)
    assert.are.equal([[C:\/dir/x]], j.facts[#j.facts].value)
  end)
end)

describe("human units and durations", function()
  it("writes CPU in millicores", function()
    assert.are.equal("1900m", notify.cpu(1900))
    assert.are.equal("2000m", notify.cpu(2000))
    assert.are.equal("100m", notify.cpu(100.0))
  end)

  it("writes memory in the largest binary unit, one decimal at most", function()
    assert.are.equal("512", notify.bytes(512))
    assert.are.equal("1.5Ki", notify.bytes(1536))
    assert.are.equal("512Mi", notify.bytes(536870912))
    assert.are.equal("4Gi", notify.bytes(4294967296))
    assert.are.equal("3.6Gi", notify.bytes(3865470566))
    assert.are.equal("2Ti", notify.bytes(2 * (1 << 40)))
    assert.are.equal("1000", notify.bytes(1000))
  end)

  it("writes durations in their two largest units", function()
    assert.are.equal("0s", notify.duration_text(0))
    assert.are.equal("45s", notify.duration_text(45))
    assert.are.equal("12m 30s", notify.duration_text(750))
    assert.are.equal("10m", notify.duration_text(600))
    assert.are.equal("1h 5m", notify.duration_text(3930))
    assert.are.equal("1h", notify.duration_text(3605))
    assert.are.equal("1d 1h", notify.duration_text(90061))
    assert.are.equal("2s", notify.duration_text(1.6))
  end)

  it("reads UTC times without the server's time zone", function()
    assert.are.equal(0, notify.epoch("1970-01-01 00:00:00"))
    assert.are.equal(951868800, notify.epoch("2000-03-01 00:00:00"))
    assert.are.equal(1785585600.5, notify.epoch("2026-08-01T12:00:00.5Z"))
    assert.is_nil(notify.epoch("yesterday"))
  end)
end)

describe("the notifier's pure parts", function()
  local scan = require("oops.scans.notify")

  it("backs off initial * 2^attempts, at most max", function()
    local retry = { initial_ms = 200, max_ms = 1000 }
    assert.are.equal(200, scan.backoff_ms(retry, 0))
    assert.are.equal(400, scan.backoff_ms(retry, 1))
    assert.are.equal(800, scan.backoff_ms(retry, 2))
    assert.are.equal(1000, scan.backoff_ms(retry, 3))
    assert.are.equal(1000, scan.backoff_ms(retry, 100))
  end)

  it("names a route by what it is, never with a comma", function()
    assert.are.equal("log", scan.route_key({ kind = "log" }))
    local a = scan.route_key({ kind = "webhook", url = "http://127.0.0.1:9000/hook" })
    assert.matches("^webhook:%x+$", a)
    assert.are.equal(a, scan.route_key({ kind = "webhook", url = "http://127.0.0.1:9000/hook" }))
    assert.are_not.equal(a, scan.route_key({ kind = "webhook", url = "http://127.0.0.1:9001/hook" }))
    assert.matches("^command:%x+$", scan.route_key({ kind = "command", argv = { "page", "--team", "a,b" } }))
  end)
end)
