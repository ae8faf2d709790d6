-- The promote scan's candidate read (lua/oops/scans/promote.lua) on the real
-- test database (OOPS_TEST_DB): how long a release has been live, and how long
-- with no alert on its target, both on the database's clock. The scan itself
-- with several servers is in tests/scenarios/promotion.lua.
local oops = require("oops")
local scan = require("oops.scans.promote")

local connect = require("support.db").connect

local function sql(q, ...) return assert(oops.db.exec(q, ...)) end

local n = 0
-- A SUCCEEDED release of a target of its own, live since `live_s` seconds ago.
local function live_release(live_s)
  n = n + 1
  local app = ("prom%d-%d"):format(os.time() % 100000, n)
  sql("INSERT INTO pipeline (id, namespace, application, environment, status, deploy_mode, trigger_type, " ..
    "artifact, created_at, status_changed_at) VALUES (?, 'spec', ?, 'staging', 'SUCCEEDED', 'auto', 'release', " ..
    "'spec/x:1', NOW(6) - INTERVAL ? SECOND, NOW(6) - INTERVAL ? SECOND)", "ps" .. os.time() % 100000 .. n, app,
    live_s + 60, live_s)
  return { key = "spec/" .. app .. "/staging", ns = "spec", app = app, from = "staging", to = "prod",
    after_ms = 1800000 }
end

-- An alert_state row of rule r's target: firing, or resolved `ago_s` seconds ago.
local function alert(r, metric, firing, ago_s)
  sql("INSERT INTO alert_state (namespace, application, environment, metric, firing, firing_since, " ..
    "last_notified_at, version) VALUES ('spec', ?, 'staging', ?, ?, NOW(6) - INTERVAL ? SECOND, " ..
    "NOW(6) - INTERVAL ? SECOND, 1)", r.app, metric, firing and 1 or 0, ago_s + 300, ago_s)
end

local function read(r)
  local rows = assert(scan.read({ r }, 1, 1))
  assert.are.equal(1, #rows)
  return rows[1]
end

local function near(want_ms, got, what)
  got = tonumber(got)
  assert.is_true(math.abs(got - want_ms) < 5000, ("%s: %d ms, expected about %d"):format(what, got, want_ms))
end

describe("the promote scan's candidates (needs OOPS_TEST_DB)", function()
  before_each(connect)

  it("with no alert on the target, quiet as long as live", function()
    local r = live_release(3600)
    local row = read(r)
    near(3600000, row.live_ms, "live")
    near(3600000, row.quiet_ms, "quiet")
    assert.are.equal(0, tonumber(row.firing))
    assert.are.equal(0, scan.due(r, row))
  end)

  it("an alert resolved during the wait starts it again from the resolve", function()
    local r = live_release(3600)
    alert(r, "cpu", false, 600) -- fired and resolved 10 minutes ago
    local row = read(r)
    near(3600000, row.live_ms, "live")
    near(600000, row.quiet_ms, "quiet")
    local wait = scan.due(r, row)
    assert.is_true(wait > 1190000 and wait < 1210000, "waits 20 more minutes: " .. tostring(wait))
  end)

  it("an alert resolved before the release went live changes nothing; the latest resolve counts", function()
    local r = live_release(3600)
    alert(r, "cpu", false, 7200)
    near(3600000, read(r).quiet_ms, "quiet, resolved before")
    alert(r, "memory", false, 60)
    near(60000, read(r).quiet_ms, "quiet, the newer of two resolves")
  end)

  it("an alert firing now holds it whatever the times", function()
    local r = live_release(3600)
    alert(r, "cpu", true, 3000)
    local row = read(r)
    assert.are.equal(1, tonumber(row.firing))
    assert.are.same({ nil, "firing" }, { scan.due(r, row) })
  end)
end)
