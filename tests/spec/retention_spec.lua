-- The retention scan (lua/oops/scans/retention.lua) on the real test database
-- (OOPS_TEST_DB): rows backdated with SQL, the real scan run in a task, and
-- exactly what was deleted and what was kept read back from the tables.
local oops = require("oops")
local scan = require("oops.scans.retention")

local DAY_MS = 86400000
local TABLES = { "outbox", "pipeline_event", "pipeline_log", "exec_job", "sim_job", "sim_call", "canary_measurement",
  "restart_run", "pipeline" }

local connect = require("support.db").connect
local function need_db()
  connect()
  for _, t in ipairs(TABLES) do assert(oops.db.exec("DELETE FROM " .. t)) end
  scan.reset()
  scan.last_tick = nil
  scan.BATCH, scan.PIPELINES_PER_BATCH, scan.MAX_BATCHES = 500, 50, 20
end

local function days(n) return n * DAY_MS end

-- A policy holding only what the scan reads.
local function pol(r)
  local out = {}
  for _, kind in ipairs({ "pipelines", "events", "logs", "outbox", "restarts", "audit" }) do
    local v = r[kind]
    if v == nil then v = "forever" end
    out[kind .. "_ms"] = v ~= "forever" and days(v)
  end
  return { retention = out }
end

local function sql(q, ...)
  local res, err = oops.db.exec(q, ...)
  assert(res, err)
  return res
end

local function count(q, ...) return tonumber(sql("SELECT COUNT(*) AS n " .. q, ...)[1].n) end

local seq = 0
-- A pipeline `age` days in `status`, with `events` events (each announced in
-- the outbox, delivered unless `undelivered`), `logs` log rows, an exec_job,
-- a sim_job and a sim_call. Returns its id.
local function pipeline(status, age, opts)
  opts = opts or {}
  seq = seq + 1
  local id = ("ret%09d"):format(seq)
  local app = opts.app or ("app" .. seq)
  sql("INSERT INTO pipeline (id, namespace, application, environment, status, created_at, status_changed_at) " ..
    "VALUES (?, 'spec', ?, 'prod', ?, NOW(6) - INTERVAL ? HOUR, NOW(6) - INTERVAL ? HOUR)",
    id, app, status, age * 24 + 1, age * 24)
  for i = 1, opts.events or 2 do
    local ev = sql("INSERT INTO pipeline_event (pipeline_id, event_type, to_status, server, created_at) " ..
      "VALUES (?, 'CREATED', ?, 'spec', NOW(6) - INTERVAL ? HOUR)", id, status, age * 24).insert_id
    local undelivered = opts.undelivered and i == 1
    sql("INSERT INTO outbox (event_id, kind, ref_id, created_at, delivered_at) " ..
      "VALUES (?, 'pipeline', ?, NOW(6) - INTERVAL ? HOUR, IF(?, NULL, NOW(6) - INTERVAL ? HOUR))",
      ("pipeline:%s:%d"):format(id, i), ev, age * 24, undelivered, age * 24)
  end
  for _ = 1, opts.logs or 1 do
    sql("INSERT INTO pipeline_log (pipeline_id, step, server, argv, created_at) " ..
      "VALUES (?, 'build', 'spec', '[\"true\"]', NOW(6) - INTERVAL ? HOUR)", id, age * 24)
  end
  sql("INSERT INTO exec_job (pipeline_id, kind, server, state) VALUES (?, 'build', 'spec', 'done')", id)
  sql("INSERT INTO sim_job (pipeline_id, kind) VALUES (?, 'build')", id)
  sql("INSERT INTO sim_call (pipeline_id, target, action, server, created_at) " ..
    "VALUES (?, 'spec/x/prod', 'build', 'spec', NOW(6) - INTERVAL ? HOUR)", id, age * 24)
  sql("INSERT INTO canary_measurement (pipeline_id, step, n, analysis, verdict) VALUES (?, 2, 1, 'errors', 'pass')", id)
  return id
end

-- Rows of each table that belong to pipeline id (outbox: through its events).
local function rows_of(id)
  return {
    pipeline = count("FROM pipeline WHERE id = ?", id),
    pipeline_event = count("FROM pipeline_event WHERE pipeline_id = ?", id),
    pipeline_log = count("FROM pipeline_log WHERE pipeline_id = ?", id),
    exec_job = count("FROM exec_job WHERE pipeline_id = ?", id),
    sim_job = count("FROM sim_job WHERE pipeline_id = ?", id),
    sim_call = count("FROM sim_call WHERE pipeline_id = ?", id),
    canary_measurement = count("FROM canary_measurement WHERE pipeline_id = ?", id),
    outbox = count("FROM outbox WHERE event_id LIKE ?", "pipeline:" .. id .. ":%"),
  }
end

local ALL = { pipeline = 1, pipeline_event = 2, pipeline_log = 1, exec_job = 1, sim_job = 1, sim_call = 1,
  canary_measurement = 1, outbox = 2 }
local NONE = { pipeline = 0, pipeline_event = 0, pipeline_log = 0, exec_job = 0, sim_job = 0, sim_call = 0,
  canary_measurement = 0, outbox = 0 }

local function metric(t) return oops.metrics.get("oops_retention_deleted_total", { table = t }) or 0 end

-- One tick of the real scan, in a task (it yields nothing, but is a task's code).
local function tick(p)
  local before = {}
  for _, t in ipairs(scan.TABLES) do before[t] = metric(t) end
  oops.wait(scan.run, p)
  local delta = {}
  for _, t in ipairs(scan.TABLES) do delta[t] = metric(t) - before[t] end
  return scan.last_tick, delta
end

describe("the retention scan (needs OOPS_TEST_DB)", function()
  before_each(need_db)
  after_each(function() oops.locks.release_all() end)

  it("deletes an expired finished pipeline with all of it, keeps every one it must", function()
    local newer = pipeline("SUCCEEDED", 1, { app = "live" })
    local old = pipeline("SUCCEEDED", 20, { app = "live" })          -- superseded: goes
    local errored = pipeline("ERROR", 20)                            -- goes
    local held = pipeline("STOPPED", 20, { undelivered = true })     -- an undelivered notification
    local running = pipeline("RUNNING", 20)                          -- unfinished
    local waiting = pipeline("BUILD_SUCCEEDED", 20)                  -- unfinished (manual)
    local live = pipeline("SUCCEEDED", 20)                           -- its target's live release
    local recent = pipeline("STOPPED", 5)
    local t, delta = tick(pol { pipelines = 10 })
    assert.are.same(NONE, rows_of(old))
    assert.are.same(NONE, rows_of(errored))
    for _, id in ipairs({ newer, held, running, waiting, live, recent }) do
      assert.are.same(ALL, rows_of(id), id)
    end
    assert.are.equal(6, count("FROM pipeline"))
    local want = { pipeline = 2, pipeline_event = 4, pipeline_log = 2, outbox = 4, exec_job = 2, sim_job = 2,
      sim_call = 2, canary_measurement = 2, restart_run = 0, operator_action = 0 }
    assert.are.same(want, t.deleted)
    assert.are.same(want, delta)
    assert.is_true(oops.locks.holds(scan.LOCK))
    -- The notification delivered: the pipeline goes on a later tick.
    sql("UPDATE outbox SET delivered_at = NOW(6) - INTERVAL 15 DAY WHERE delivered_at IS NULL")
    tick(pol { pipelines = 10 })
    assert.are.same(NONE, rows_of(held))
    assert.are.equal(5, count("FROM pipeline"))
  end)

  it("deletes events and logs of finished pipelines kept longer, never of an unfinished one", function()
    local a = pipeline("SUCCEEDED", 20, { logs = 3 })
    local b = pipeline("ERROR", 7, { logs = 3 })
    local c = pipeline("STOPPED", 1, { logs = 3 })
    local held = pipeline("STOPPED", 20, { undelivered = true })
    local running = pipeline("ROLLING_OUT", 20, { app = "r" })
    local t = tick(pol { events = 10, logs = 5 })
    local function is(id, ev, lg, ob)
      local r = rows_of(id)
      assert.are.same({ 1, ev, lg, ob, 1, 1, 1 },
        { r.pipeline, r.pipeline_event, r.pipeline_log, r.outbox, r.exec_job, r.sim_job, r.sim_call }, id)
    end
    is(a, 0, 0, 0)
    is(b, 2, 0, 2)
    is(c, 2, 3, 2)
    is(held, 2, 0, 2) -- its logs go; its events wait for their notification
    is(running, 2, 1, 2)
    assert.are.equal(2, t.deleted.pipeline_event)
    assert.are.equal(7, t.deleted.pipeline_log)
    assert.are.equal(2, t.deleted.outbox)
    assert.are.equal(0, t.deleted.pipeline)
  end)

  it("deletes delivered outbox rows, finished restart runs and pipeline-less simulated calls", function()
    sql("INSERT INTO outbox (event_id, kind, payload, created_at, delivered_at) VALUES " ..
      "('alert:old', 'alert', '{}', NOW(6) - INTERVAL 41 DAY, NOW(6) - INTERVAL 40 DAY), " ..
      "('alert:new', 'alert', '{}', NOW(6) - INTERVAL 2 DAY, NOW(6) - INTERVAL 1 DAY), " ..
      "('alert:pending', 'alert', '{}', NOW(6) - INTERVAL 41 DAY, NULL)")
    sql("INSERT INTO restart_run (namespace, application, environment, occurrence, fired_by, fired_at, outcome, " ..
      "finished_at) VALUES " ..
      "('spec', 'a', 'prod', NOW() - INTERVAL 100 DAY, 'spec', NOW(6) - INTERVAL 100 DAY, 'ok', " ..
      "NOW(6) - INTERVAL 100 DAY), " ..
      "('spec', 'a', 'prod', NOW() - INTERVAL 1 DAY, 'spec', NOW(6) - INTERVAL 1 DAY, 'ok', " ..
      "NOW(6) - INTERVAL 1 DAY), " ..
      "('spec', 'b', 'prod', NOW() - INTERVAL 100 DAY, 'spec', NOW(6) - INTERVAL 100 DAY, NULL, NULL)")
    sql("INSERT INTO sim_call (pipeline_id, target, action, server, created_at) VALUES " ..
      "(NULL, 'spec/a/prod', 'restart', 'spec', NOW(6) - INTERVAL 100 DAY), " ..
      "(NULL, 'spec/a/prod', 'restart', 'spec', NOW(6) - INTERVAL 1 DAY)")
    local t, delta = tick(pol { outbox = 30, restarts = 90 })
    assert.are.same({ { event_id = "alert:new" }, { event_id = "alert:pending" } },
      sql("SELECT event_id FROM outbox ORDER BY event_id"))
    assert.are.same({ { application = "a" }, { application = "b" } },
      sql("SELECT application FROM restart_run ORDER BY application"))
    assert.are.equal(1, count("FROM sim_call"))
    assert.are.same({ outbox = 1, restart_run = 1, sim_call = 1 },
      { outbox = t.deleted.outbox, restart_run = t.deleted.restart_run, sim_call = t.deleted.sim_call })
    assert.are.same({ 1, 1, 1 }, { delta.outbox, delta.restart_run, delta.sim_call })
  end)

  it("deletes the operators' audit rows older than audit, and only those", function()
    sql("DELETE FROM operator_action WHERE via = 'spec'")
    sql("INSERT INTO operator_action (created_at, actor, action, outcome, via) VALUES " ..
      "(NOW(6) - INTERVAL 400 DAY, 'old@host', 'stop', 'done', 'spec'), " ..
      "(NOW(6) - INTERVAL 10 DAY, 'new@host', 'stop', 'done', 'spec')")
    local t = tick(pol { audit = 365 })
    assert.are.same({ { actor = "new@host" } }, sql("SELECT actor FROM operator_action WHERE via = 'spec'"))
    assert.are.equal(1, t.deleted.operator_action)
    tick(pol { audit = "forever" })
    assert.are.equal(1, count("FROM operator_action WHERE via = 'spec'"))
  end)

  it('deletes nothing of a kind set to "forever"', function()
    local old = pipeline("SUCCEEDED", 400, { app = "f" })
    pipeline("SUCCEEDED", 1, { app = "f" })
    sql("INSERT INTO restart_run (namespace, application, environment, occurrence, fired_by, outcome, " ..
      "finished_at) VALUES ('spec', 'a', 'prod', NOW() - INTERVAL 400 DAY, 'spec', 'ok', NOW(6) - INTERVAL 400 DAY)")
    local t = tick(pol {})
    assert.are.equal(0, t.statements)
    assert.are.same(ALL, rows_of(old))
    assert.are.equal(1, count("FROM restart_run"))
  end)

  it("works in bounded batches: a few rows per statement, a few rounds per tick", function()
    scan.BATCH, scan.PIPELINES_PER_BATCH, scan.MAX_BATCHES = 2, 2, 2
    for _ = 1, 7 do pipeline("ERROR", 20, { logs = 5 }) end
    local t = tick(pol { pipelines = 10 })
    -- Two rounds of two pipelines; each round's 10 logs take 6 statements of at most 2 rows.
    assert.are.equal(4, t.deleted.pipeline)
    assert.are.equal(20, t.deleted.pipeline_log)
    assert.are.equal(3, count("FROM pipeline"))
    assert.is_true(t.statements >= 2 * 6, tostring(t.statements))
    t = tick(pol { pipelines = 10 })
    assert.are.equal(3, t.deleted.pipeline)
    assert.are.equal(0, count("FROM pipeline"))
    assert.are.equal(0, count("FROM pipeline_log") + count("FROM pipeline_event") + count("FROM outbox"))
  end)

  it("does nothing while another server leads it", function()
    local old = pipeline("ERROR", 20)
    oops.locks.release_all()
    -- Another session holds the leader lock.
    local other = assert(oops.db.exec("SELECT GET_LOCK(?, 0) AS got", scan.LOCK))
    assert.are.equal(1, tonumber(other[1].got))
    assert.is_nil((tick(pol { pipelines = 10 })))
    assert.are.same(ALL, rows_of(old))
    sql("SELECT RELEASE_LOCK(?)", scan.LOCK)
  end)
end)
