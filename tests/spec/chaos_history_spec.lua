-- oops.chaos.history: the checker of a chaos campaign, on made-up histories.
-- One clean history (pipelines of two targets, a takeover after a kill, two
-- stops, an alert episode, a restart, notifications retried) passes; each
-- history derived from it that breaks one rule is reported under exactly that
-- rule (and pipeline), and nothing else; the rules about reaching an end wait
-- for a final history; M.explain shows the pipeline's events and the faults
-- around them.
local history = require("oops.chaos.history")

local T1, T2, CTL = "chaos/a1/prod", "chaos/a2/prod", "oopsctl@host"

---------------------------------------------------------------- building histories

-- Events are kept by id in the order of their moments (ties: the order they
-- were added), as the database numbers them.
local function renumber(h)
  table.sort(h.events, function(a, b)
    if a.at ~= b.at then return a.at < b.at end
    return a.seq < b.seq
  end)
  for i, e in ipairs(h.events) do e.id = i end
end

local seq = 0
local function event(h, pipeline, target, from, to, server, session, at)
  seq = seq + 1
  local e = { pipeline = pipeline, target = target, from = from, to = to, server = server, session = session,
    at = at, seq = seq }
  h.events[#h.events + 1] = e
  renumber(h)
  return e
end

-- A pipeline's events: steps = { { to, server, session, at }, ... }, the
-- first one its creation.
local function life(h, id, target, steps)
  local from
  for _, s in ipairs(steps) do
    event(h, id, target, from, s[1], s[2], s[3], s[4])
    from = s[1]
  end
end

-- The event of pipeline id that entered status to.
local function find(h, id, to)
  for _, e in ipairs(h.events) do
    if e.pipeline == id and e.to == to then return e end
  end
  error("no event " .. id .. " -> " .. to)
end

local function pipeline(h, id, target, status, auto, requested)
  h.pipelines[id] = { id = id, target = target, status = status, auto = auto, requested = requested or false }
end

local function call(h, id, target, action, server)
  h.calls[#h.calls + 1] = { pipeline = id, target = target, action = action, server = server }
end

-- An outbox row the outbox says delivered, and the receiver's answers to
-- its tries (each with the same body).
local function notice(h, event_id, kind, payload, ...)
  h.outbox[#h.outbox + 1] = { event_id = event_id, kind = kind, payload = payload, delivered = true,
    undeliverable = false }
  for _, status in ipairs({ ... }) do
    h.deliveries[#h.deliveries + 1] = { id = event_id, status = status, body = "body of " .. event_id }
  end
  return h.outbox[#h.outbox]
end

local function alert(app, metric, edge, since)
  return { namespace = "chaos", application = app, environment = "prod", metric = metric, edge = edge,
    since = since }
end

local function clean()
  local h = { now = 60, final = true, events = {}, pipelines = {}, calls = {}, jobs = {}, restarts = {},
    outbox = {}, alert_states = {}, deliveries = {}, faults = {}, stops = {} }
  -- p1, automatic, in T1: s1 (session 1) deploys it and is killed at 16; s2
  -- takes it over at 20 and finishes it; s1 never touches it again.
  life(h, "p1", T1, { { "INITIALIZED", "s1", 1, 10 }, { "RUNNING", "s1", 1, 11 }, { "BUILD_SUCCEEDED", "s1", 1, 14 },
    { "DEPLOYING", "s1", 1, 15 }, { "ROLLING_OUT", "s2", 4, 20 }, { "SUCCEEDED", "s2", 4, 22 } })
  -- p2, automatic, in T1: created the moment p1 ended, by s1 back with a new
  -- session; stopped by oopsctl, and the stop said so.
  life(h, "p2", T1, { { "INITIALIZED", "s1", 2, 22 }, { "RUNNING", "s2", 4, 23 }, { "STOPPED", CTL, nil, 24 } })
  -- p3, manual, in T2: built, waits, released at 30; a stop at 30 came too
  -- late and said "changed concurrently".
  life(h, "p3", T2, { { "INITIALIZED", "s3", 7, 12 }, { "RUNNING", "s3", 7, 13 }, { "BUILD_SUCCEEDED", "s3", 7, 17 },
    { "DEPLOYING", "s3", 7, 30 }, { "ROLLING_OUT", "s3", 7, 32 }, { "SUCCEEDED", "s3", 7, 34 } })
  -- p4, manual, in T2: built, waits for a release nobody asked for.
  life(h, "p4", T2, { { "INITIALIZED", "s2", 4, 35 }, { "RUNNING", "s2", 4, 36 }, { "BUILD_SUCCEEDED", "s2", 4, 38 } })
  -- p5, automatic, in T2, while p4 waits: its build fails.
  life(h, "p5", T2, { { "INITIALIZED", "s3", 7, 40 }, { "RUNNING", "s3", 7, 41 }, { "ERROR", "s3", 7, 42 } })

  pipeline(h, "p1", T1, "SUCCEEDED", true)
  pipeline(h, "p2", T1, "STOPPED", true)
  pipeline(h, "p3", T2, "SUCCEEDED", false, true)
  pipeline(h, "p4", T2, "BUILD_SUCCEEDED", false, false)
  pipeline(h, "p5", T2, "ERROR", true)

  call(h, "p1", T1, "build_submit", "s1")
  call(h, "p3", T2, "build_submit", "s3")
  call(h, "p1", T1, "deploy", "s1")
  call(h, "p2", T1, "build_submit", "s1")
  call(h, "p3", T2, "deploy", "s3")
  call(h, "p4", T2, "build_submit", "s2")
  call(h, "p5", T2, "build_submit", "s3")
  call(h, nil, T1, "restart", "s2")
  for _, id in ipairs({ "p1", "p2", "p3", "p4", "p5" }) do h.jobs[#h.jobs + 1] = { pipeline = id, running = false } end

  -- T1's restart fired once and was made once; T2's was missed (no call).
  h.restarts = { { target = T1, occurrence = "1700000000", missed = false, finished = true },
    { target = T2, occurrence = "1700000060", missed = true, finished = true } }

  notice(h, "e-p1-SUCCEEDED", "pipeline", nil, 200)
  notice(h, "e-p2-STOPPED", "pipeline", nil, 500, 200) -- retried: one id, one body
  notice(h, "e-p3-SUCCEEDED", "pipeline", nil, 200)
  notice(h, "e-p5-ERROR", "pipeline", nil, 200)
  -- refused for good by the receiver: delivered (given up on), not 2xx
  notice(h, "e-p4-BUILD_SUCCEEDED", "pipeline", nil, 410).undeliverable = true
  -- a1's CPU fired, repeated and resolved; a2's memory fires still
  notice(h, "alert-a1-cpu-1", "alert", alert("a1", "cpu", "FIRING", "100"), 200)
  notice(h, "alert-a1-cpu-2", "alert", alert("a1", "cpu", "REPEAT", "100"), 200)
  notice(h, "alert-a1-cpu-3", "alert", alert("a1", "cpu", "RESOLVED", "100"), 200)
  notice(h, "alert-a2-memory-1", "alert", alert("a2", "memory", "FIRING", "130"), 200)
  h.alert_states = { { key = "chaos/a1/prod cpu", firing = false }, { key = "chaos/a2/prod memory", firing = true } }

  h.faults = { { at = 16, kind = "kill", server = "s1", session = 1 },
    { at = 25, kind = "clock", server = "s3", session = 7 },
    { at = 45, kind = "db_restart" } }
  h.stops = { { pipeline = "p2", at = 24, said = "stopped" }, { pipeline = "p3", at = 30, said = "changed" } }
  return h
end

-- "rule pipeline" for each violation, in the checker's order.
local function reported(h)
  local t = {}
  for _, v in ipairs(history.check(h)) do t[#t + 1] = v.rule .. (v.pipeline and (" " .. v.pipeline) or "") end
  return t
end

local function not_final(h)
  h.final = false
  return h
end

---------------------------------------------------------------- the clean history

describe("chaos history: a clean history", function()
  it("has no violation once final", function()
    assert.are.same({}, history.check(clean()))
  end)

  it("has none before the end either", function()
    assert.are.same({}, history.check(not_final(clean())))
  end)

  it("is checked from what it holds: an empty history passes", function()
    assert.are.same({}, history.check({ events = {} }))
    assert.are.same({}, history.check({ final = true, now = 1, events = {}, pipelines = {} }))
  end)
end)

---------------------------------------------------------------- statuses

describe("chaos history: statuses", function()
  it("status_twice: a pipeline left BUILD_SUCCEEDED twice", function()
    local h = clean()
    event(h, "p4", T2, "BUILD_SUCCEEDED", "STOPPED", CTL, nil, 50)
    event(h, "p4", T2, "BUILD_SUCCEEDED", "STOPPED", CTL, nil, 51)
    h.pipelines.p4.status = "STOPPED"
    assert.are.same({ "status_twice p4" }, reported(h))
  end)

  it("status_twice alone: RUNNING left twice", function()
    local h = clean()
    event(h, "p5", T2, "RUNNING", "STOPPED", CTL, nil, 42.5)
    assert.are.same({ "status_twice p5" }, reported(h))
  end)

  it("terminal_left: an ERROR pipeline moved on", function()
    local h = clean()
    event(h, "p5", T2, "ERROR", "SUCCEEDED", "s3", 7, 43)
    h.pipelines.p5.status = "SUCCEEDED"
    assert.are.same({ "terminal_left p5" }, reported(h))
  end)
end)

---------------------------------------------------------------- side effects

describe("chaos history: side effects", function()
  it("side_effect_twice: a second deploy of p3", function()
    local h = clean()
    call(h, "p3", T2, "deploy", "s2")
    assert.are.same({ "side_effect_twice p3" }, reported(h))
  end)

  it("side_effect_twice: a second build submitted for p1", function()
    local h = clean()
    call(h, "p1", T1, "build_submit", "s2")
    assert.are.same({ "side_effect_twice p1" }, reported(h))
  end)
end)

---------------------------------------------------------------- lost locks

describe("chaos history: lost locks", function()
  it("lost_lock_transition: the killed server, with its old session, after the takeover", function()
    local h = clean()
    local e = find(h, "p1", "SUCCEEDED")
    e.server, e.session = "s1", 1
    assert.are.same({ "lost_lock_transition p1" }, reported(h))
  end)

  it("slow_db, freeze, cut and partition lose locks too, as recorded: one fault per server, with its session",
    function()
    for _, kind in ipairs({ "slow_db", "freeze", "cut", "partition" }) do
      local h = clean()
      h.faults[1].kind = kind
      local e = find(h, "p1", "SUCCEEDED")
      e.server, e.session = "s1", 1
      assert.are.same({ "lost_lock_transition p1" }, reported(h))
    end
  end)

  it("a creation by another server is no takeover: the faulted server may drive what another created", function()
    -- (s2's failing transaction creates an automatic rollback; s1, whose
    -- fault at 16 lost nothing of it, claims and drives it with session 1)
    local function with(steps)
      local h = clean()
      h.faults[1].kind = "slow_db"
      life(h, "r1", "chaos/a4/prod", steps)
      pipeline(h, "r1", "chaos/a4/prod", "ERROR", true)
      h.pipelines.r1.trigger = "rollback"
      return h
    end
    assert.are.same({}, reported(with { { "INITIALIZED", "s2", 4, 17 }, { "DEPLOYING", "s1", 1, 18 },
      { "ERROR", "s1", 1, 19 } }))
    -- but a transition by s2 is one
    assert.are.same({ "lost_lock_transition r1" }, reported(with { { "INITIALIZED", "s2", 4, 17 },
      { "DEPLOYING", "s2", 4, 17.5 }, { "ERROR", "s1", 1, 19 } }))
  end)

  it("a session that outlived its fault (survived) lost nothing: its later transitions are fine", function()
    local h = clean()
    h.faults[1].survived = true
    local e = find(h, "p1", "SUCCEEDED")
    e.server, e.session = "s1", 1
    assert.are.same({}, reported(h))
  end)

  it("after a database restart a session number is another session's: not blamed on an earlier fault", function()
    local h = clean()
    h.faults[#h.faults + 1] = { at = 17, kind = "db_restart", server = "s1", session = 1 }
    local e = find(h, "p1", "SUCCEEDED")
    e.server, e.session = "s1", 1
    assert.is_true(e.at > 17)
    assert.are.same({}, reported(h))
  end)

  it("a fault without a session: any later transition of the server counts", function()
    local h = clean()
    h.faults[1].session = nil
    local e = find(h, "p1", "SUCCEEDED")
    e.server, e.session = "s1", 3
    assert.are.same({ "lost_lock_transition p1" }, reported(h))
  end)

  it("is fine: the faulted server with a new session after the takeover", function()
    local h = clean()
    local e = find(h, "p1", "SUCCEEDED")
    e.server, e.session = "s1", 2
    assert.are.same({}, reported(h))
  end)

  it("is fine: the faulted server's transition before anyone else took over", function()
    local h = clean()
    local e = find(h, "p1", "ROLLING_OUT")
    e.server, e.session, e.at = "s1", 1, 17 -- after the kill at 16, before s2 acts at 22
    renumber(h)
    assert.are.same({}, reported(h))
  end)

  it("is fine: a fault that loses no locks (the clock) is no fault here", function()
    local h = clean()
    h.faults[2].at = 10 -- s3's clock jumps before p3 starts
    local e = find(h, "p3", "BUILD_SUCCEEDED")
    e.server, e.session = "s2", 4
    assert.are.same({}, reported(h))
    h.faults[2].kind = "partition" -- the control: the same, cut from the network
    assert.are.same({ "lost_lock_transition p3", "lost_lock_transition p3", "lost_lock_transition p3" },
      reported(h))
  end)

  -- p3 is frozen on s3 (session 7) at 18; the release at 30 is oopsctl's, then
  -- s3 goes on with session 7.
  local function frozen_p3(released_by)
    local h = clean()
    h.faults[#h.faults + 1] = { at = 18, kind = "freeze", server = "s3", session = 7 }
    local e = find(h, "p3", "DEPLOYING")
    e.server, e.session = released_by, nil
    if released_by ~= CTL then e.session = 4 end
    return h
  end

  it("is fine: oopsctl@host's events never count as a takeover", function()
    assert.are.same({}, reported(frozen_p3(CTL)))
  end)

  it("but another server's do (the control: every later s3 transition is reported)", function()
    assert.are.same({ "lost_lock_transition p3", "lost_lock_transition p3" }, reported(frozen_p3("s2")))
  end)
end)

---------------------------------------------------------------- one unfinished

describe("chaos history: one unfinished pipeline per target", function()
  it("is fine: spans that touch exactly (one ends at t, the next starts at t)", function()
    local h = { events = {} }
    life(h, "a", T1, { { "INITIALIZED", "s1", 1, 1 }, { "RUNNING", "s1", 1, 2 }, { "ERROR", "s1", 1, 5 } })
    life(h, "b", T1, { { "INITIALIZED", "s1", 1, 5 }, { "RUNNING", "s1", 1, 6 }, { "ERROR", "s1", 1, 7 } })
    assert.are.same({}, reported(h))
    -- the clean history holds one too: p1 SUCCEEDED at 22, p2 INITIALIZED at 22
    assert.are.equal(find(clean(), "p1", "SUCCEEDED").at, find(clean(), "p2", "INITIALIZED").at)
  end)

  it("one_unfinished: p2 created while p1 still rolls out", function()
    local h = clean()
    find(h, "p2", "INITIALIZED").at = 21
    renumber(h)
    assert.are.same({ "one_unfinished p2" }, reported(h))
  end)

  it("one_unfinished: a pipeline never finished, then another of its target", function()
    local h = { events = {} }
    life(h, "a", T1, { { "INITIALIZED", "s1", 1, 1 }, { "RUNNING", "s1", 1, 2 } })
    life(h, "b", T1, { { "INITIALIZED", "s2", 1, 100 } })
    life(h, "c", T2, { { "INITIALIZED", "s2", 1, 50 } }) -- another target: beside them, fine
    assert.are.same({ "one_unfinished b" }, reported(h))
  end)

  it("is fine: a manual pipeline waiting in BUILD_SUCCEEDED (p5 runs while p4 waits)", function()
    local h = clean()
    assert.is_true(find(h, "p5", "INITIALIZED").at > find(h, "p4", "BUILD_SUCCEEDED").at)
    assert.are.same({}, reported(h))
  end)

  it("one_unfinished: but its later DEPLOYING counts (p4 released while p5 runs)", function()
    local h = clean()
    event(h, "p4", T2, "BUILD_SUCCEEDED", "DEPLOYING", "s2", 4, 41)
    event(h, "p4", T2, "DEPLOYING", "ROLLING_OUT", "s2", 4, 43)
    event(h, "p4", T2, "ROLLING_OUT", "SUCCEEDED", "s2", 4, 44)
    pipeline(h, "p4", T2, "SUCCEEDED", false, true)
    assert.are.same({ "one_unfinished p4" }, reported(h))
  end)
end)

---------------------------------------------------------------- restarts

describe("chaos history: restarts", function()
  it("restart_twice: two calls for T1's one occurrence", function()
    local h = clean()
    call(h, nil, T1, "restart", "s3")
    assert.are.same({ "restart_twice" }, reported(h))
    assert.are.equal(T1 .. ": 2 restart calls for 1 occurrences fired", history.check(h)[1].what)
  end)

  it("restart_twice: a call for T2, whose occurrence was missed", function()
    local h = clean()
    call(h, nil, T2, "restart", "s3")
    assert.are.same({ "restart_twice" }, reported(h))
  end)

  it("is fine at the end: a restart claimed moments ago, still running (restarts fire every minute)", function()
    local h = clean()
    h.restarts[#h.restarts + 1] = { target = T1, occurrence = "2026-01-01 00:09:00", missed = false,
      finished = false, age = 2 }
    h.calls[#h.calls + 1] = { target = T1, action = "restart", server = "s3" }
    assert.are.same({}, reported(h))
  end)

  it("restart_unfinished: claimed, no outcome (final only)", function()
    local h = clean()
    h.restarts[1].finished = false
    assert.are.same({ "restart_unfinished" }, reported(h))
    assert.are.same({}, reported(not_final(h)))
  end)
end)

---------------------------------------------------------------- alerts

describe("chaos history: alerts", function()
  it("alert_twice: one episode's FIRING announced twice (two rows)", function()
    local h = clean()
    notice(h, "alert-a2-memory-2", "alert", alert("a2", "memory", "FIRING", "130"), 200)
    assert.are.same({ "alert_twice", "alert_twice" }, reported(h)) -- announced twice, and twice in a row
  end)

  it("alert_twice: FIRING twice in a row (another since, no RESOLVED between)", function()
    local h = clean()
    notice(h, "alert-a2-memory-2", "alert", alert("a2", "memory", "FIRING", "150"), 200)
    assert.are.same({ "alert_twice" }, reported(h))
    assert.are.equal("chaos/a2/prod memory: FIRING twice in a row", history.check(h)[1].what)
  end)

  it("alert_twice is not final-only", function()
    local h = clean()
    notice(h, "alert-a1-cpu-4", "alert", alert("a1", "cpu", "RESOLVED", "100"), 200)
    assert.are.same({ "alert_twice", "alert_twice" }, reported(not_final(h)))
  end)

  it("alert_state: the state says not firing, the last edge FIRING (final only)", function()
    local h = clean()
    h.alert_states[2].firing = false
    assert.are.same({ "alert_state" }, reported(h))
    assert.are.same({}, reported(not_final(h)))
  end)

  it("alert_state: firing with nothing announced", function()
    local h = clean()
    h.alert_states[#h.alert_states + 1] = { key = "chaos/a1/prod memory", firing = true }
    assert.are.same({ "alert_state" }, reported(h))
    assert.are.equal("chaos/a1/prod memory: firing=true, last announced nothing", history.check(h)[1].what)
  end)
end)

---------------------------------------------------------------- notifications

describe("chaos history: notifications", function()
  it("unstable_id: a delivery without an event id", function()
    local h = clean()
    h.deliveries[#h.deliveries + 1] = { status = 200, body = "{}" }
    assert.are.same({ "unstable_id" }, reported(h))
    assert.are.same({ "unstable_id" }, reported(not_final(h)))
  end)

  it("unstable_id: a delivery with an id the outbox never had", function()
    local h = clean()
    h.deliveries[#h.deliveries + 1] = { id = "e-nowhere", status = 200, body = "{}" }
    assert.are.same({ "unstable_id" }, reported(h))
  end)

  it("unstable_id: a retry with another body", function()
    local h = clean()
    h.deliveries[#h.deliveries + 1] = { id = "e-p1-SUCCEEDED", status = 200, body = "another body" }
    assert.are.same({ "unstable_id" }, reported(h))
  end)

  it("undelivered: the outbox never delivered it (final only)", function()
    local h = clean()
    h.outbox[1].delivered = false
    for i = #h.deliveries, 1, -1 do
      if h.deliveries[i].id == h.outbox[1].event_id then table.remove(h.deliveries, i) end
    end
    assert.are.same({ "undelivered" }, reported(h))
    assert.are.same({}, reported(not_final(h)))
  end)

  it("is fine at the end: a notification made moments ago, still on its way (alerts repeat)", function()
    local h = clean()
    h.outbox[1].delivered = false
    for i = #h.deliveries, 1, -1 do
      if h.deliveries[i].id == h.outbox[1].event_id then table.remove(h.deliveries, i) end
    end
    h.outbox[1].age = history.IN_FLIGHT_S - 1
    assert.are.same({}, reported(h))
    h.outbox[1].age = history.IN_FLIGHT_S + 1
    assert.are.same({ "undelivered" }, reported(h))
  end)

  it("undelivered: delivered says the outbox, but the receiver never answered 2xx", function()
    local h = clean()
    for _, d in ipairs(h.deliveries) do
      if d.id == "e-p2-STOPPED" then d.status = 503 end
    end
    assert.are.same({ "undelivered" }, reported(h))
    assert.are.same({}, reported(not_final(h)))
  end)

  it("is fine: no receiver log at all (only the outbox is asked)", function()
    local h = clean()
    h.deliveries = nil
    assert.are.same({}, reported(h))
  end)
end)

---------------------------------------------------------------- stops

describe("chaos history: stops", function()
  it("stop_both: the stop said it stopped p3, which was never stopped", function()
    local h = clean()
    h.stops[2].said = "stopped"
    assert.are.same({ "stop_both p3" }, reported(h))
  end)

  it("stop_both: said stopped, but the STOPPED is a server's, not oopsctl's", function()
    local h = clean()
    find(h, "p2", "STOPPED").server = "s2"
    assert.are.same({ "stop_both p2" }, reported(h))
  end)

  it('stop_both: the stop said "changed concurrently", yet oopsctl stopped p2', function()
    local h = clean()
    h.stops[1].said = "changed"
    assert.are.same({ "stop_both p2" }, reported(h))
  end)

  it('is fine: a stop that said something else ("other")', function()
    local h = clean()
    h.stops[1].said, h.stops[2].said = "other", "other"
    assert.are.same({}, reported(h))
  end)
end)

---------------------------------------------------------------- the end

describe("chaos history: at the end", function()
  -- p6, automatic, in T1: built at 33, never deployed
  local function with_p6(status)
    local h = clean()
    life(h, "p6", T1, { { "INITIALIZED", "s2", 4, 30 }, { "RUNNING", "s2", 4, 31 } })
    if status == "BUILD_SUCCEEDED" then event(h, "p6", T1, "RUNNING", "BUILD_SUCCEEDED", "s2", 4, 33) end
    pipeline(h, "p6", T1, status, true)
    call(h, "p6", T1, "build_submit", "s2")
    return h
  end

  it("stuck: an automatic pipeline left in BUILD_SUCCEEDED (final only)", function()
    local h = with_p6("BUILD_SUCCEEDED")
    assert.are.same({ "stuck p6" }, reported(h))
    assert.are.same({}, reported(not_final(h)))
  end)

  it("stuck: a pipeline left RUNNING", function()
    local h = with_p6("RUNNING")
    assert.are.same({ "stuck p6" }, reported(h))
    assert.are.same({}, reported(not_final(h)))
  end)

  it("stuck: a manual pipeline in BUILD_SUCCEEDED whose release was requested", function()
    local h = clean()
    h.pipelines.p4.requested = true
    assert.are.same({ "stuck p4" }, reported(h))
    assert.are.same({}, reported(not_final(h)))
  end)

  it("is fine: a manual pipeline in BUILD_SUCCEEDED nobody released", function()
    local h = clean()
    assert.are.same({ status = "BUILD_SUCCEEDED", auto = false, requested = false },
      { status = h.pipelines.p4.status, auto = h.pipelines.p4.auto, requested = h.pipelines.p4.requested })
    assert.are.same({}, reported(h))
  end)

  it("build_left_running: the build of a stopped pipeline runs on (final only)", function()
    local h = clean()
    h.jobs[2].running = true -- p2's
    assert.are.same({ "build_left_running p2" }, reported(h))
    assert.are.same({}, reported(not_final(h)))
  end)

  it("build_left_running: and of a failed one", function()
    local h = clean()
    h.jobs[5].running = true -- p5's
    assert.are.same({ "build_left_running p5" }, reported(h))
  end)

  it("the final-only rules all at once: none before the end, each at the end", function()
    local h = with_p6("BUILD_SUCCEEDED")
    h.restarts[1].finished = false
    h.outbox[1].delivered = false
    h.alert_states[1].firing = true
    h.jobs[2].running = true
    assert.are.same({}, reported(not_final(h)))
    h.final = true
    assert.are.same({ "alert_state", "build_left_running p2", "restart_unfinished", "stuck p6", "undelivered" },
      reported(h))
  end)
end)

---------------------------------------------------------------- explain

describe("chaos history: explain", function()
  local function lost_p1()
    local h = clean()
    local e = find(h, "p1", "SUCCEEDED")
    e.server, e.session = "s1", 1
    return h, history.check(h)[1]
  end

  local function matching(lines, pattern)
    local t = {}
    for _, l in ipairs(lines) do
      if l:match(pattern) then t[#t + 1] = l end
    end
    return t
  end

  it("names the violation, then the pipeline's events, relative to t0", function()
    local h, v = lost_p1()
    local lines = history.explain(h, v, 10)
    assert.truthy(lines[1]:find("^violation: lost_lock_transition p1: s1 made ROLLING_OUT %-> SUCCEEDED"))
    assert.are.same({
      "  event +0.00s nil -> INITIALIZED by s1 (session 1)",
      "  event +1.00s INITIALIZED -> RUNNING by s1 (session 1)",
      "  event +4.00s RUNNING -> BUILD_SUCCEEDED by s1 (session 1)",
      "  event +5.00s BUILD_SUCCEEDED -> DEPLOYING by s1 (session 1)",
      "  event +10.00s DEPLOYING -> ROLLING_OUT by s2 (session 4)",
      "  event +12.00s ROLLING_OUT -> SUCCEEDED by s1 (session 1)",
    }, matching(lines, "^  event "))
  end)

  it("and the faults within M.AROUND seconds of the pipeline's life", function()
    local h = clean()
    event(h, "p5", T2, "ERROR", "SUCCEEDED", "s3", 7, 43) -- p5 lives from 40 to 43
    local v = history.check(h)[1]
    assert.are.equal("terminal_left", v.rule)
    h.faults[#h.faults + 1] = { at = 43 + history.AROUND, kind = "cut", server = "s2" }
    h.faults[#h.faults + 1] = { at = 43 + history.AROUND + 0.5, kind = "cut", server = "s3" }
    h.faults[#h.faults + 1] = { at = 40 - history.AROUND - 0.5, kind = "slow_db" }
    local lines = history.explain(h, v, 10)
    -- the clock at 25 (40 - 15), db_restart at 45, the cut at 58 (43 + 15); not the kill at 16, nor the two
    -- just outside
    assert.are.same({ "  fault +15.00s clock s3", "  fault +35.00s db_restart", "  fault +48.00s cut s2" },
      matching(lines, "^  fault "))
    assert.are.equal(1 + 4 + 3, #lines)
  end)

  it("t0 defaults to 0; events of other pipelines are left out", function()
    local h, v = lost_p1()
    local lines = history.explain(h, v)
    assert.are.equal("  event +10.00s nil -> INITIALIZED by s1 (session 1)", lines[2])
    assert.are.same({}, matching(lines, "p2"))
    assert.are.equal(6, #matching(lines, "^  event "))
  end)

  it("a violation of no pipeline: one line", function()
    local h = clean()
    call(h, nil, T1, "restart", "s3")
    assert.are.same({ "violation: restart_twice: " .. T1 .. ": 2 restart calls for 1 occurrences fired" },
      history.explain(h, history.check(h)[1], 0))
  end)

  it("an event without a session says none", function()
    local h = clean()
    h.stops[1].said = "changed"
    local lines = history.explain(h, history.check(h)[1], 0)
    assert.are.equal(1, lines[1]:find("violation: stop_both p2: ", 1, true))
    assert.are.equal("  event +24.00s RUNNING -> STOPPED by oopsctl@host", lines[4])
  end)
end)

---------------------------------------------------------------- release safety (issue 26)

local T3 = "chaos/a3/prod"

-- The clean history and, in T3, a live release L, a release F failing in
-- its rollout and F's automatic rollback R; prod has one deploy slot and T3
-- rolls failures back.
local function released()
  local h = clean()
  h.now, h.slots, h.rolls_back = 70, { prod = 1 }, { [T3] = true }
  life(h, "L", T3, { { "INITIALIZED", "s1", 2, 50 }, { "RUNNING", "s1", 2, 51 }, { "DEPLOYING", "s1", 2, 52 },
    { "ROLLING_OUT", "s1", 2, 53 }, { "SUCCEEDED", "s1", 2, 54 } })
  life(h, "F", T3, { { "INITIALIZED", "s2", 4, 55 }, { "RUNNING", "s2", 4, 56 }, { "DEPLOYING", "s2", 4, 57 },
    { "ROLLING_OUT", "s2", 4, 58 }, { "ERROR", "s3", 7, 59 } })
  life(h, "R", T3, { { "INITIALIZED", "s3", 7, 59 }, { "DEPLOYING", "s3", 7, 60 }, { "ROLLING_OUT", "s3", 7, 61 },
    { "SUCCEEDED", "s3", 7, 62 } })
  pipeline(h, "L", T3, "SUCCEEDED", true)
  pipeline(h, "F", T3, "ERROR", true)
  pipeline(h, "R", T3, "SUCCEEDED", true)
  h.pipelines.L.trigger, h.pipelines.L.artifact = "release", "v1"
  h.pipelines.F.trigger, h.pipelines.F.artifact = "release", "v2"
  h.pipelines.R.trigger, h.pipelines.R.artifact, h.pipelines.R.rollback_of = "rollback", "v1", "F"
  for _, id in ipairs({ "L", "F" }) do call(h, id, T3, "build_submit", "s1") end
  for _, id in ipairs({ "L", "F", "R" }) do call(h, id, T3, "deploy", "s1") end
  return h
end

describe("chaos history: release safety", function()
  it("a failed release rolled back once, one deploy at a time: no violation", function()
    assert.are.same({}, history.check(released()))
  end)

  it("slot_overlap: two prod pipelines deploying at once with one slot", function()
    local h = released()
    -- p5 (T2) deploys while F does: its build failed in clean(); rewrite it.
    h.events = {}
    local keep = released().events
    for _, e in ipairs(keep) do if e.pipeline ~= "p5" then h.events[#h.events + 1] = e end end
    life(h, "p5", T2, { { "INITIALIZED", "s3", 7, 40 }, { "RUNNING", "s3", 7, 41 }, { "DEPLOYING", "s3", 7, 57.5 },
      { "ERROR", "s3", 7, 57.8 } })
    assert.are.same({ "slot_overlap p5" }, reported(h))
  end)

  it("slot_overlap is not reported without a bound", function()
    local h = released()
    h.slots = nil
    life(h, "X", "chaos/a4/prod", { { "INITIALIZED", "s1", 2, 57.1 }, { "DEPLOYING", "s1", 2, 57.2 },
      { "ERROR", "s1", 2, 57.3 } })
    pipeline(h, "X", "chaos/a4/prod", "ERROR", true)
    h.pipelines.X.trigger = "rollback"
    assert.are.same({}, history.check(h))
  end)

  it("rollback_missing: a failure after the deploy with a live release, and no rollback (at the end)", function()
    local h = released()
    h.pipelines.R.rollback_of = nil
    assert.are.same({ "rollback_missing F" }, reported(h))
    assert.are.same({}, history.check(not_final(h)))
  end)

  it("no rollback is missing where a newer pipeline of the target was created before the failure", function()
    -- F, a manual release, waits in BUILD_SUCCEEDED (not unfinished) while
    -- M is created; then F is released and fails: the engine returns to
    -- nothing then (a newer pipeline exists). M created after the failure
    -- changes nothing.
    local function with_m(m_at)
      local h = released()
      local keep = h.events
      h.events = {}
      for _, e in ipairs(keep) do if e.pipeline ~= "F" and e.pipeline ~= "R" then h.events[#h.events + 1] = e end end
      h.pipelines.R = nil
      local calls = h.calls
      h.calls = {}
      for _, c in ipairs(calls) do if c.pipeline ~= "R" then h.calls[#h.calls + 1] = c end end
      local f = { { "INITIALIZED", "s2", 4, 55 }, { "RUNNING", "s2", 4, 55.1 }, { "BUILD_SUCCEEDED", "s2", 4, 55.2 },
        { "DEPLOYING", "s2", 4, 57 }, { "ROLLING_OUT", "s2", 4, 58 }, { "ERROR", "s3", 7, 59 } }
      local m = { { "INITIALIZED", "s1", 2, m_at }, { "RUNNING", "s1", 2, m_at + 0.1 },
        { "BUILD_SUCCEEDED", "s1", 2, m_at + 0.2 } }
      if m_at < 59 then
        life(h, "F", T3, { f[1], f[2], f[3] })
        life(h, "M", T3, m)
        life(h, "F", T3, { f[4], f[5], f[6] })
      else
        life(h, "F", T3, f)
        life(h, "M", T3, m)
      end
      pipeline(h, "F", T3, "ERROR", false, true)
      h.pipelines.F.trigger, h.pipelines.F.artifact = "release", "v2"
      pipeline(h, "M", T3, "BUILD_SUCCEEDED", false)
      h.pipelines.M.trigger, h.pipelines.M.artifact = "release", "v3"
      return h
    end
    assert.are.same({}, reported(with_m(55.5)))
    assert.are.same({ "rollback_missing F" }, reported(with_m(65)))
  end)

  it("no rollback is missing where the policy fails, or nothing was live", function()
    local h = released()
    h.pipelines.R.rollback_of = nil
    h.rolls_back = {}
    assert.are.same({}, history.check(h))
    h = released()
    h.pipelines.R.rollback_of = nil
    h.pipelines.L.artifact = nil
    assert.are.same({}, history.check(h))
  end)

  it("rollback_twice: two rollbacks of one failure", function()
    local h = released()
    life(h, "R2", T3, { { "INITIALIZED", "s1", 2, 63 }, { "DEPLOYING", "s1", 2, 63.5 }, { "ERROR", "s1", 2, 64 } })
    pipeline(h, "R2", T3, "ERROR", true)
    h.pipelines.R2.trigger, h.pipelines.R2.rollback_of = "rollback", "F"
    call(h, "R2", T3, "deploy", "s1")
    assert.are.same({ "rollback_twice F" }, reported(h))
  end)

  it("rollback_unexpected: of a build failure, and made before the failure", function()
    local h = released()
    h.pipelines.R.rollback_of = "p5" -- p5 failed its build (RUNNING -> ERROR)
    assert.are.same({ "rollback_missing F", "rollback_unexpected R" }, reported(h))
    h = released()
    for _, e in ipairs(h.events) do
      if e.pipeline == "R" and e.to == "INITIALIZED" then e.at, e.seq = 58.5, 0 end
    end
    renumber(h)
    -- (made while F was unfinished: two unfinished at once, too)
    assert.are.same({ "one_unfinished R", "rollback_unexpected R" }, reported(h))
  end)

  it("one_unfinished: an automatic release held in BUILD_SUCCEEDED is unfinished", function()
    local h = released()
    life(h, "H", T3, { { "INITIALIZED", "s1", 2, 63 }, { "RUNNING", "s1", 2, 64 }, { "BUILD_SUCCEEDED", "s1", 2, 65 } })
    life(h, "N", T3, { { "INITIALIZED", "s2", 4, 66 }, { "RUNNING", "s2", 4, 67 }, { "ERROR", "s2", 4, 68 } })
    pipeline(h, "H", T3, "BUILD_SUCCEEDED", false) -- manual: waits, finished for the rule
    pipeline(h, "N", T3, "ERROR", true)
    h.pipelines.N.trigger, h.pipelines.H.trigger = "release", "release"
    assert.are.same({}, history.check(not_final(h)))
    h.pipelines.H.auto = true -- held: unfinished
    assert.are.same({ "one_unfinished N" }, reported(not_final(h)))
  end)
end)

---------------------------------------------------------------- canaries (issue 38)

local T4 = "chaos/a4/prod"

-- The clean history and, in T4, two canaries of steps { weight 20, pause,
-- analysis "errors" (failure_limit 0, inconclusive = "fail"), weight 100 }:
-- G (good) measured twice, passed, promoted; B (bad) failed its first
-- measurement and was aborted, its traffic back to stable.
local canary_seq = 1000
local function cevent(h, id, at, message, type_)
  canary_seq = canary_seq + 1
  h.canary_events[#h.canary_events + 1] = { id = canary_seq, pipeline = id, type = type_ or "CANARY_STEP",
    message = message, at = at }
end

local function measured(h, id, step, n, verdict, at)
  h.measurements[#h.measurements + 1] = { pipeline = id, step = step, n = n, analysis = "errors",
    verdict = verdict, at = at }
end

local function canaries()
  local h = clean()
  h.now, h.canary_events, h.measurements = 100, {}, {}
  h.analyses = { errors = { failure_limit = 0, inconclusive = "fail" } }
  h.weight_steps = { [T4] = 2 }
  life(h, "G", T4, { { "INITIALIZED", "s1", 2, 70 }, { "RUNNING", "s1", 2, 71 }, { "BUILD_SUCCEEDED", "s1", 2, 72 },
    { "DEPLOYING", "s1", 2, 73 }, { "ROLLING_OUT", "s1", 2, 74 }, { "SUCCEEDED", "s1", 2, 82 } })
  cevent(h, "G", 74.5, "canary of 4 steps begins")
  cevent(h, "G", 75, "step 1/4: weight 20")
  cevent(h, "G", 76, "step 2/4: pause of 1s over")
  measured(h, "G", 3, 1, "pass", 78)
  measured(h, "G", 3, 2, "pass", 80)
  cevent(h, "G", 80.5, "step 3/4: analysis errors: 2/2 passed")
  cevent(h, "G", 81, "step 4/4: weight 100")
  life(h, "B", T4, { { "INITIALIZED", "s2", 4, 83 }, { "RUNNING", "s2", 4, 84 }, { "BUILD_SUCCEEDED", "s2", 4, 85 },
    { "DEPLOYING", "s2", 4, 86 }, { "ROLLING_OUT", "s2", 4, 87 }, { "ERROR", "s2", 4, 92 } })
  cevent(h, "B", 87.5, "canary of 4 steps begins")
  cevent(h, "B", 88, "step 1/4: weight 20")
  cevent(h, "B", 89, "step 2/4: pause of 1s over")
  measured(h, "B", 3, 1, "fail", 91)
  cevent(h, "B", 91.5, "step 3/4: weight 0, traffic back to stable (aborting: analysis errors failed: " ..
    "1 of 1 measurements failed (limit 0))")
  pipeline(h, "G", T4, "SUCCEEDED", true)
  pipeline(h, "B", T4, "ERROR", true)
  h.pipelines.G.trigger, h.pipelines.G.artifact = "release", "reg/a4:1"
  h.pipelines.B.trigger, h.pipelines.B.artifact = "release", "reg/a4:2-bad"
  h.pipelines.B.message = "Canary aborted: analysis errors failed: 1 of 1 measurements failed (limit 0)."
  for _, id in ipairs({ "G", "B" }) do
    call(h, id, T4, "build_submit", "s1")
    call(h, id, T4, "deploy", "s1")
  end
  call(h, "G", T4, "weight:20", "s1")
  call(h, "G", T4, "weight:100", "s1")
  call(h, "B", T4, "weight:20", "s2")
  call(h, "B", T4, "weight:0", "s2")
  return h
end

-- Pipeline id's weight calls replaced by these weights.
local function weights(h, id, list)
  local keep = {}
  for _, c in ipairs(h.calls) do
    if not (c.pipeline == id and c.action:match("^weight:")) then keep[#keep + 1] = c end
  end
  h.calls = keep
  for _, w in ipairs(list) do call(h, id, T4, "weight:" .. w, "s1") end
  return h
end

describe("chaos history: canaries", function()
  it("a good canary promoted and a bad one aborted: no violation, before the end and at it", function()
    assert.are.same({}, history.check(canaries()))
    assert.are.same({}, history.check(not_final(canaries())))
  end)

  it("weight_twice: a step's weight applied twice in a row", function()
    assert.are.same({ "weight_twice G" }, reported(weights(canaries(), "G", { 20, 20, 100 })))
  end)

  it("weight_twice: more weights than the plan's weight steps and an end", function()
    assert.are.same({ "weight_twice G" }, reported(weights(canaries(), "G", { 20, 50, 100, 0 })))
    local h = weights(canaries(), "G", { 20, 50, 100, 0 })
    h.weight_steps = nil -- the plan unknown: only the repeats count
    assert.are.same({}, history.check(h))
  end)

  it("weight_order: a weight going down", function()
    assert.are.same({ "weight_order G" }, reported(weights(canaries(), "G", { 100, 20 })))
  end)

  it("weight_order: a 0 that is not the last weight", function()
    assert.are.same({ "weight_order G" }, reported(weights(canaries(), "G", { 20, 0, 100 })))
  end)

  it("step_past_failed_analysis: the bad canary's analysis step ended as passed, not aborted", function()
    local h = canaries()
    cevent(h, "B", 91.2, "step 3/4: analysis errors: 0/1 passed")
    assert.are.same({ "step_past_failed_analysis B" }, reported(h))
  end)

  it("step_past_failed_analysis: an inconclusive counted as failed (inconclusive = \"fail\")", function()
    local h = canaries()
    h.measurements[1].verdict = "inconclusive"
    assert.are.same({ "step_past_failed_analysis G" }, reported(h))
    h.analyses.errors.inconclusive = "pause" -- not a failure there
    assert.are.same({}, history.check(h))
  end)

  it("measurement_twice: a gap in a step's measurements", function()
    local h = canaries()
    h.measurements[2].n = 3
    assert.are.same({ "measurement_twice G" }, reported(h))
  end)

  it("measurement_twice: a measurement recorded after its step ended", function()
    local h = canaries()
    h.measurements[2].at = 80.7
    assert.are.same({ "measurement_twice G" }, reported(h))
    h = canaries()
    measured(h, "B", 3, 2, "fail", 91.8) -- after the abort's event
    assert.are.same({ "measurement_twice B" }, reported(h))
  end)

  it("canary_not_stable: an aborted canary whose last weight is not 0", function()
    assert.are.same({ "canary_not_stable B" }, reported(weights(canaries(), "B", { 20 })))
    -- one aborted before any weight was applied never left stable
    assert.are.same({}, history.check(weights(canaries(), "B", {})))
  end)

  it("bad_canary_promoted: a -bad artifact reached SUCCEEDED, where analyses ran", function()
    local h = canaries()
    h.pipelines.G.artifact = "reg/a4:1-bad"
    assert.are.same({ "bad_canary_promoted G" }, reported(h))
    h.analyses = nil -- canaries without analyses: nothing was there to catch it
    assert.are.same({}, history.check(h))
  end)

  it("explain shows a canary's events, its measurements and its weights", function()
    local h = weights(canaries(), "B", { 20 })
    local v = history.check(h)[1]
    local lines = history.explain(h, v, 0)
    local text = table.concat(lines, "\n")
    assert.truthy(text:find("event +88.00s CANARY_STEP: step 1/4: weight 20", 1, true), text)
    assert.truthy(text:find("event +92.00s ROLLING_OUT -> ERROR by s2", 1, true), text)
    assert.truthy(text:find("measured +91.00s step 3 #1 errors: fail", 1, true), text)
    assert.truthy(text:find("weights applied: 20", 1, true), text)
  end)
end)

describe("chaos history: approvals (issue 39)", function()
  -- p1 (T1) deploys at 15; T1 asks for two approvals. ann and ben approve
  -- before (ids just below the DEPLOYING event's), carol created it.
  local function approved(list)
    local h = clean()
    h.approvals_needed = { [T1] = 2 }
    h.pipelines.p1.trigger = "release"
    h.creators = { p1 = "carol" }
    local dep = find(h, "p1", "DEPLOYING")
    h.approvals = {}
    for i, a in ipairs(list) do
      h.approvals[i] = { id = dep.id + a[2] + i / 100, pipeline = "p1", person = a[1], at = 14 }
    end
    return h
  end

  it("two persons other than its creator approved before the deploy: no violation", function()
    assert.are.same({}, history.check(approved { { "ann", -1 }, { "ben", -1 } }))
  end)

  it("deployed_unapproved: too few approvals before the deploy", function()
    assert.are.same({ "deployed_unapproved p1" }, reported(approved { { "ann", -1 } }))
    -- one given after the deploy does not count
    assert.are.same({ "deployed_unapproved p1" }, reported(approved { { "ann", -1 }, { "ben", 1 } }))
    -- nor the creator's
    assert.are.same({ "deployed_unapproved p1" }, reported(approved { { "ann", -1 }, { "carol", -1 } }))
  end)

  it("approval_twice: a person counted twice (and once only toward the need)", function()
    assert.are.same({ "approval_twice p1", "deployed_unapproved p1" },
      reported(approved { { "ann", -1 }, { "ann", -1 } }))
  end)

  it("neither rule applies where the policy asks for none, nor to a rollback", function()
    local h = approved {}
    h.approvals_needed = nil
    assert.are.same({}, history.check(h))
    h = approved {}
    h.pipelines.p1.trigger = "rollback"
    assert.are.same({}, history.check(h))
  end)
end)

describe("chaos history: promotions (issue 39)", function()
  local LIVE = "chaos/a2/live"
  -- p3 (T2) went live at 34; q1 promotes it to live at 34.5 (before p4, newer
  -- in T2, was created at 35), deploys and goes live.
  local function promoted(at)
    local h = clean()
    life(h, "q1", LIVE, { { "INITIALIZED", "s2", 4, at or 34.5 }, { "DEPLOYING", "s2", 4, 36 },
      { "ROLLING_OUT", "s2", 4, 37 }, { "SUCCEEDED", "s2", 4, 38 } })
    pipeline(h, "q1", LIVE, "SUCCEEDED", true)
    h.pipelines.q1.trigger, h.pipelines.q1.promoted_from = "promotion", "p3"
    h.pipelines.p3.trigger = "release"
    call(h, "q1", LIVE, "deploy", "s2")
    notice(h, "e-q1-SUCCEEDED", "pipeline", nil, 200)
    return h
  end

  it("a release promoted once, after it went live and before anything newer: no violation", function()
    assert.are.same({}, history.check(promoted()))
  end)

  it("promoted_twice: two promotions of one release", function()
    local h = promoted()
    life(h, "q2", "chaos/a2/next", { { "INITIALIZED", "s3", 7, 34.6 } })
    pipeline(h, "q2", "chaos/a2/next", "INITIALIZED", true)
    h.pipelines.q2.trigger, h.pipelines.q2.promoted_from = "promotion", "p3"
    h.final = false
    assert.are.same({ "promoted_twice p3" }, reported(h))
  end)

  it("promotion_unexpected: of a release not live yet, after a newer one, of a rollback, another artifact",
    function()
      assert.are.same({ "promotion_unexpected q1" }, reported(promoted(33)))   -- p3 not live before 34
      assert.are.same({ "promotion_unexpected q1" }, reported(promoted(35.5))) -- p4 created at 35
      local h = promoted()
      h.pipelines.p3.trigger = "rollback"
      assert.are.same({ "promotion_unexpected q1" }, reported(h))
      h = promoted()
      h.pipelines.q1.artifact = "other"
      assert.are.same({ "promotion_unexpected q1" }, reported(h))
    end)

  it("promotion_unexpected: made by the engine before the policy's wait; an operator's may skip it", function()
    local h = promoted()
    h.promote_rules = { [T2] = { to = "live", after_s = 10 } }
    assert.are.same({ "promotion_unexpected q1" }, reported(h))
    h.creators = { q1 = "dave" } -- promote-now
    assert.are.same({}, history.check(h))
    h.promote_rules = { [T2] = { to = "live", after_s = 0.4 } }
    h.creators = nil
    assert.are.same({}, history.check(h))
  end)

  it("approvals: whoever created the release a promotion came from does not count", function()
    local h = promoted()
    h.approvals_needed = { [LIVE] = 1 }
    h.creators = { p3 = "carol" }
    local dep = find(h, "q1", "DEPLOYING")
    h.approvals = { { id = dep.id - 0.5, pipeline = "q1", person = "carol", at = 35 } }
    assert.are.same({ "deployed_unapproved q1" }, reported(h))
    h.approvals[1].person = "ann"
    assert.are.same({}, history.check(h))
  end)
end)
