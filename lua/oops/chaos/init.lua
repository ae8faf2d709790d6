-- oopsctl chaos: a seeded, randomized fault campaign (issue 25).
--
-- One seed gives one plan (lua/oops/chaos/plan.lua): the nemesis' faults and
-- the workload's actions at their offsets. The campaign starts a throwaway
-- MariaDB and K real oopsd servers on the simulated gateway (with --policies,
-- the operator's policy under oopsd --simulate: nothing real is run or told),
-- a webhook receiver of its own, and plays the plan; then it undoes every
-- fault, lets things settle, and checks the history the database holds and
-- the receiver logged (lua/oops/chaos/history.lua) — also every 10 s while it
-- runs. Prints each planned fault at the start, each violation with the
-- pipeline's events and the faults around it, and ends with one line:
--   chaos: seed N, F faults (kinds: kill, freeze, ...), P pipelines, V violations
-- The campaign's own log (what took effect when, every action) is chaos.log
-- in its work directory, kept with --keep DIR (and after a violation).
local oops = require("oops")
local lfs = require("lfs")
local json = require("oops.json")
local files = require("oops.scenario.files")
local scenario = require("oops.scenario")
local plan_mod = require("oops.chaos.plan")
local history = require("oops.chaos.history")

local M = {}

M.CHECK_EVERY_S = 10
M.SETTLE_CAP_S = 600 -- the longest the end may take, progress or not
M.MAX_ACTIONS = 16 -- workload actions in flight at once; more are skipped

-- The campaign's default policy: short bounds, so that everything a fault
-- leaves behind ends within the settle time. RECEIVER is replaced; APPS are
-- the --targets applications (M.policy).
M.TARGETS = 40
M.POLICY = [[
scan     { interval = "500ms" }
locks    { validate_every = "1s" }
build    { timeout = "2m" }
deploy   { timeout = "20s", concurrency = { prod = 6 } }
rollout  { timeout = "15s", max = "30s", on_failure = "rollback" }
restarts { timezone = "UTC", grace = "10s" }
alert    { interval = "1s", cpu = { percent = 50, sustained = "0s" }, memory = { percent = 50, sustained = "0s" },
           every = "5s", probe = "simulated" }
notify   { webhook = "RECEIVER", retry = { initial = "500ms", max = "3s" } }
gateway "simulated" { build = "3s", deploy = "1s", rollout = "4s" }
]]

-- Canaries (issue 38): every other application's releases go through these
-- steps. With a Prometheus, an analysis of the canary track's error ratio
-- (the simulated traffic, lua/oops/scenario/traffic.lua) between the
-- weights: a "-bad" artifact (5 % errors) fails it and is aborted. An
-- inconclusive measurement (no traffic seen: a database or Prometheus
-- fault) fails too: paused, it would wait for an operator the campaign
-- does not play. Without a Prometheus, weights and timed pauses only.
M.ANALYSIS_QUERY = [[sum(rate(http_requests_total{app="{application}",env="{environment}",track="canary",
  code="500"}[4s])) / sum(rate(http_requests_total{app="{application}",env="{environment}",track="canary"}[4s]))]]
M.CANARY_STEPS = '{ { weight = 20 }, { pause = "1s" }, { analysis = "errors" }, { weight = 100 } }'
M.CANARY_STEPS_PLAIN = '{ { weight = 20 }, { pause = "1s" }, { weight = 50 }, { pause = "1s" }, { weight = 100 } }'
M.BAD_ERROR_RATE = 0.05

-- The policy's text for n targets: ceil(n/2) applications chaos/appNN with
-- prod and staging (the last with prod alone when n is odd); the first
-- three have limits (alerts), app01's prod and app02's staging restart
-- every minute; every even one is a canary. prom: the analysis' Prometheus
-- URL, or nil (canaries without analyses).
function M.policy(n, receiver, prom)
  local out = { (M.POLICY:gsub("RECEIVER", receiver)) }
  if prom then
    out[#out + 1] = ('analysis "errors" { prometheus = %q, query = %q, success = function(v) return v < 0.01 end,\n' ..
      '  interval = "3s", count = 2, inconclusive = "fail" }'):format(prom, M.ANALYSIS_QUERY)
  end
  local apps = (n + 1) // 2
  local width = math.max(2, #tostring(apps))
  for i = 1, apps do
    local envs = (i == apps and n % 2 == 1) and '{ "prod" }' or '{ "prod", "staging" }'
    local extra = {}
    if i <= 3 then extra[#extra + 1] = 'limits = { cpu = "1", memory = "1Gi" }' end
    if i == 1 then extra[#extra + 1] = 'restart = { prod = "* * * * *" }' end
    if i == 2 and n >= 4 then extra[#extra + 1] = 'restart = { staging = "* * * * *" }' end
    if i % 3 == 1 and envs:find("staging", 1, true) then
      extra[#extra + 1] = "approvals = { prod = 2 }" -- (issue 39) approved by the workload's persons
      -- (issue 39) what goes live in staging is promoted to prod 2 s later
      extra[#extra + 1] = 'promote = { staging = { to = "prod", after = "2s" } }'
    end
    if i % 2 == 0 then
      extra[#extra + 1] = ('rollout = { strategy = "canary", steps = %s }'):format(prom and M.CANARY_STEPS
        or M.CANARY_STEPS_PLAIN)
    end
    out[#out + 1] = ('application "chaos/app%0' .. width .. 'd" { environments = %s%s }'):format(i, envs,
      #extra > 0 and (",\n  " .. table.concat(extra, ",\n  ")) or "")
  end
  return table.concat(out, "\n") .. "\n"
end

local function sleep(s) if s > 0 then oops.sleep(math.floor(s * 1000)) end end

---------------------------------------------------------------- the campaign's state

local C -- { o, t0, log, env, servers = {name → s}, state = {name → "up"|...}, ... }

local function elapsed() return oops.now_ms() / 1000 - C.t0 end

local function say(line)
  io.write(line, "\n")
  io.flush()
end

local function log(fmt, ...)
  C.log:write(("+%7.2fs "):format(elapsed()), fmt:format(...), "\n")
  C.log:flush()
end

local function up_count()
  local n = 0
  for _, st in pairs(C.state) do if st == "up" then n = n + 1 end end
  return n
end

---------------------------------------------------------------- the nemesis

local nemesis = {}
local survivors

local function write_clock(s, offset)
  if s.clock_file then files.write(s.clock_file, ("%+ds\n"):format(offset)) end
end

function nemesis.kill(f, s)
  s:kill("KILL")
  C.state[f.target] = "down"
  sleep(f.hold)
  s:start()
  C.state[f.target] = "up"
end

function nemesis.freeze(f, s)
  s:freeze()
  C.state[f.target] = "frozen"
  sleep(f.hold)
  s:thaw()
  C.state[f.target] = "up"
end

function nemesis.cut(_, s) s:cut() end

function nemesis.partition(f, s)
  s:partition()
  C.state[f.target] = "partitioned"
  sleep(f.hold)
  s:heal()
  C.state[f.target] = "up"
end

function nemesis.clock(f, s)
  scenario.record_fault("clock", f.target)
  write_clock(s, f.arg)
  sleep(f.hold)
  write_clock(s, 0)
end

function nemesis.hup_broken(f, s)
  scenario.record_fault("hup_broken", f.target)
  C.state[f.target] = "reloading"
  local fine, line = s:reload { ["zz-chaos-broken.lua"] = "scan { interval = 'not a duration' } (\n" }
  if fine then log("VIOLATION? %s reloaded a broken policy", f.target) end
  log("%s refused the broken policy: %s", f.target, tostring(line))
  sleep(f.hold)
  fine, line = s:reload { ["zz-chaos-broken.lua"] = false }
  if not fine then log("%s refused its good policy again: %s", f.target, tostring(line)) end
  C.state[f.target] = "up"
end

function nemesis.hup_changed(f, s)
  scenario.record_fault("hup_changed", f.target)
  C.state[f.target] = "reloading"
  local change
  if C.own_policy then
    change = { ["scenario.lua"] = C.policy_text:gsub('interval = "500ms"', ('interval = "%s"'):format(f.arg), 1) }
  else -- the operator's policy: a change that changes nothing they wrote
    change = { ["zz-chaos-changed.lua"] = ("-- reloaded by oopsctl chaos at +%.1fs\n"):format(f.at) }
  end
  local fine, line = s:reload(change)
  if not fine then log("%s refused a changed policy: %s", f.target, tostring(line)) end
  C.state[f.target] = "up"
end

function nemesis.db_restart(f)
  C.db_busy = true
  local fine, err = pcall(C.env.restart_database, { down = f.hold })
  C.db_busy = false
  if not fine then log("db_restart failed: %s", tostring(err)) end
end

function nemesis.slow_db(f)
  C.db_busy = true
  for _, s in ipairs(C.order) do if C.state[s.name] ~= "down" then scenario.record_fault("slow_db", s.name) end end
  C.db.proc:kill(19)
  C.db_stopped = true
  sleep(f.hold)
  C.db.proc:kill(18)
  C.db_stopped = false
  C.db_busy = false
end

-- The sessions that outlived the faults recorded from index `first` on:
-- still holding their server's name lock in the database a second after the
-- fault was undone, they lost no lock (a slow database, a short freeze), so
-- the history checker does not expect their server to have let go.
local NAMES = oops.locks.names
survivors = function(first)
  sleep(1)
  local list = scenario.faults()
  for i = first, #list do
    local f = list[i]
    if f.server and f.session then
      local ok, rows = pcall(scenario.sql, "SELECT IS_USED_LOCK(?) AS c", NAMES.server_prefix .. f.server)
      if ok and rows[1] and tonumber(rows[1].c) == f.session then
        f.survived = true
        log("%s's session %d outlived the %s", f.server, f.session, f.kind)
      end
    end
  end
end

local SERVER_DOWN = { kill = true, freeze = true, partition = true }

-- Why fault f cannot take effect now, or nil.
local function blocked(f)
  if f.kind == "partition" and not C.netns then return "network namespaces unavailable" end
  if f.kind == "clock" and not C.faketime then return "libfaketime not installed" end
  if (f.kind == "db_restart" or f.kind == "slow_db") and C.db_busy then return "the database is already faulted" end
  if C.db_busy and f.target then return "the database is faulted" end
  if f.target and C.state[f.target] ~= "up" then return f.target .. " is " .. C.state[f.target] end
  if SERVER_DOWN[f.kind] and up_count() < 2 then return "it is the last server up" end
end

local function run_fault(f)
  local why = blocked(f)
  if why then
    log("skipped %s: %s", plan_mod.line(f), why)
    C.skipped[#C.skipped + 1] = f
    return
  end
  log("took effect: %s", plan_mod.line(f))
  C.done[#C.done + 1] = f
  local s = f.target and C.servers[f.target]
  local first = #scenario.faults() + 1
  local fine, err = pcall(nemesis[f.kind], f, s)
  if not fine then log("fault %s failed: %s", plan_mod.line(f), tostring(err)) end
  survivors(first)
end

---------------------------------------------------------------- the workload

local work = {}

-- The nth newest pipeline of target t in one of the statuses (and manual
-- when asked), or nil.
local function nth(t, statuses, n, extra)
  local ns, app = t.app:match("^(.-)/(.*)$")
  local marks = ("?,"):rep(#statuses):sub(1, -2)
  local params = { ns, app, t.env }
  for _, st in ipairs(statuses) do params[#params + 1] = st end
  params[#params + 1] = n
  local rows = scenario.sql(("SELECT id, status FROM pipeline WHERE namespace = ? AND application = ? " ..
    "AND environment = ? AND status IN (%s)%s ORDER BY created_at DESC LIMIT ?"):format(marks, extra or ""),
    table.unpack(params))
  return rows[math.min(n, #rows)]
end

local function ctl(...) return C.env.oopsctl(...) end

-- A create beside an unfinished pipeline is refused (exit 3): the rule at work.
local function create(a, manual)
  -- An artifact (from the plan alone), so that rollbacks, the operator's and
  -- the automatic ones, have something to redeploy.
  local artifact = ("registry/%s:%d"):format((a.target.app:gsub("/", "-")), math.floor(a.at * 1000))
  -- A bad canary (the plan's quarter): 5 % errors, which its analysis must
  -- catch; named so the checker knows (bad_canary_promoted). Without a
  -- Prometheus there is no analysis to catch it: none is bad.
  if a.arg and a.arg.bad and C.prom then
    artifact = artifact .. "-bad"
    C.env.artifact_traffic(artifact, { error_rate = M.BAD_ERROR_RATE })
  end
  local fine, err = pcall(C.env.create, { app = a.target.app, env = a.target.env, manual = manual,
    artifact = artifact })
  if not fine and not tostring(err):find("unfinished pipeline already exists", 1, true) then error(err, 0) end
  if not fine then C.refused = C.refused + 1 end
end
function work.create(a) create(a, false) end
function work.create_manual(a) create(a, true) end
function work.rollback(a)
  local p, rc, err = C.env.rollback { app = a.target.app, env = a.target.env }
  if not p then
    log("rollback %s %s: exit %s %s", a.target.app, a.target.env, tostring(rc), (tostring(err):gsub("\n", " ")))
  end
end

function work.release(a)
  local p = nth(a.target, { "BUILD_SUCCEEDED" }, a.arg.nth, " AND deploy_requested_at IS NULL")
  if p then ctl("deploy", p.id) end
end

-- An approval (issue 39) by the plan's person of the nth newest release of
-- its target still before its deploy; refused for a target that asks none?
-- No: oopsctl cannot know the policy, so it is recorded either way.
function work.approve(a)
  local p = nth(a.target, { "INITIALIZED", "RUNNING", "BUILD_SUCCEEDED" }, a.arg.nth, " AND trigger_type <> 'rollback'")
  if p then C.env.oopsctl_as(a.arg.person, "approve", p.id, "--reason", "chaos") end
end

-- Every release still waiting for approvals gets them (the end: nothing
-- else would release it).
local function approve_waiting()
  for _, r in ipairs(scenario.sql("SELECT id FROM pipeline WHERE hold = 'approval' AND status IN " ..
      "('BUILD_SUCCEEDED', 'INITIALIZED') LIMIT 200")) do -- (a promotion waits INITIALIZED)
    for _, person in ipairs(plan_mod.APPROVERS) do C.env.oopsctl_as(person, "approve", r.id, "--reason", "the end") end
  end
end

function work.stop(a)
  local p = nth(a.target, { "INITIALIZED", "RUNNING", "BUILD_SUCCEEDED", "DEPLOYING", "ROLLING_OUT" }, a.arg.nth)
  if not p or C.stopped[p.id] then return end
  C.stopped[p.id] = true
  local at = tonumber(scenario.sql("SELECT UNIX_TIMESTAMP(NOW(6)) AS t")[1].t)
  local rc, _, err = ctl("stop", p.id, "--expect", p.status)
  local said = rc == 0 and "stopped" or (tostring(err):find("changed concurrently", 1, true) and "changed" or "other")
  C.stops[#C.stops + 1] = { pipeline = p.id, at = at, said = said }
  log("stop %s (read %s): %s", p.id, p.status, said)
end

local function job(a, statuses, kind, sql)
  local p = nth(a.target, statuses, a.arg.nth)
  if p then scenario.sql(sql, p.id, kind) end
end
function work.build_fail(a)
  job(a, { "RUNNING" }, "build", "UPDATE sim_job SET outcome = 'failed' WHERE pipeline_id = ? AND kind = ?")
end
function work.build_missing(a)
  job(a, { "RUNNING" }, "build", "DELETE FROM sim_job WHERE pipeline_id = ? AND kind = ?")
end
function work.rollout_fail(a)
  job(a, { "ROLLING_OUT" }, "rollout",
    "UPDATE sim_job SET outcome = 'ImagePullBackOff (chaos)' WHERE pipeline_id = ? AND kind = ?")
end

function work.deploy_fail(a)
  local target = a.target.app .. "/" .. a.target.env
  C.env.fault(target, "deploy", "simulated deploy failure (chaos)")
  sleep(a.arg.seconds)
  C.env.clear_fault(target, "deploy")
end

function work.metric(a)
  local ns, app = a.target.app:match("^(.-)/(.*)$")
  -- Above any threshold, or below every one.
  local value = a.arg.high and 1e15 or 0
  scenario.sql("INSERT INTO sim_metric (namespace, application, environment, metric, pod, value) " ..
    "VALUES (?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value)",
    ns, app, a.target.env, a.arg.metric, a.arg.pod, value)
end

function work.receiver_500(a)
  files.write(C.receiver.fail, "chaos\n")
  sleep(a.arg.seconds)
  os.remove(C.receiver.fail)
end

function work.receiver_hang(a)
  C.receiver.proc:kill(19)
  sleep(a.arg.seconds)
  C.receiver.proc:kill(18)
end

local function run_work(a)
  if C.in_flight >= M.MAX_ACTIONS or (C.db_stopped and a.kind ~= "receiver_500" and a.kind ~= "receiver_hang") then
    C.work_skipped = C.work_skipped + 1
    return
  end
  C.in_flight = C.in_flight + 1
  local fine, err = pcall(work[a.kind], a)
  C.in_flight = C.in_flight - 1
  C.work_done[a.kind] = (C.work_done[a.kind] or 0) + 1
  if not fine then log("%s %s %s: %s", a.kind, a.target.app, a.target.env, tostring(err):gsub("\n", " ")) end
end

---------------------------------------------------------------- checking

local function deliveries()
  local out = {}
  local f = io.open(C.receiver.log, "r")
  if not f then return out end
  for line in f:lines() do
    local d = json.decode(line)
    if type(d) == "table" then out[#out + 1] = { id = d.id, status = tonumber(d.status) or 0, body = d.body } end
  end
  f:close()
  return out
end

-- What the policy asks of releases (issue 26): its deploy slots, and the
-- targets whose failed releases it rolls back.
local function release_rules()
  local p, rolls = C.policy, {}
  for name, a in pairs(p.applications or {}) do
    local ns, app = name:match("^(.-)/(.*)$")
    if require("oops.release").on_failure(p, { namespace = ns, application = app }) == "rollback" then
      for _, env in ipairs(a.environments or {}) do rolls[name .. "/" .. env] = true end
    end
  end
  return p.deploy and p.deploy.concurrency or {}, rolls
end

-- The canary plan of application "NS/APP" under policy p (nil: none).
local function plan_of(p, name)
  return require("oops.policy.canary").plan(p, { namespace = name:match("^(.-)/"), application = name:match("/(.*)$") })
end

-- What the policy asks of canaries (issue 38): its analyses' limits, and
-- each target's weight steps.
local function canary_rules()
  local p, analyses, steps = C.policy, nil, {}
  for name, a in pairs(p.analyses or {}) do
    analyses = analyses or {}
    analyses[name] = { failure_limit = a.failure_limit, inconclusive = a.inconclusive }
  end
  for name, a in pairs(p.applications or {}) do
    local plan = plan_of(p, name)
    if plan then
      local k = 0
      for _, s in ipairs(plan) do if s.weight then k = k + 1 end end
      for _, env in ipairs(a.environments or {}) do steps[name .. "/" .. env] = k end
    end
  end
  return analyses, steps
end

-- What the policy asks of approvals (issue 39): { [target] = N }; and of
-- promotions: { [source target] = { to, after_s } }.
local function approval_rules()
  local need, promote = {}, {}
  for name, a in pairs(C.policy.applications or {}) do
    for env, n in pairs(a.approvals or {}) do need[name .. "/" .. env] = n end
    for env, r in pairs(a.promote or {}) do promote[name .. "/" .. env] = { to = r.to, after_s = r.after_ms / 1000 } end
  end
  return need, promote
end

local function load(final)
  local slots, rolls = release_rules()
  local analyses, weight_steps = canary_rules()
  local need, promote = approval_rules()
  return history.load(scenario.sql, { final = final, faults = scenario.faults(), stops = C.stops,
    deliveries = deliveries(), slots = slots, rolls_back = rolls, analyses = analyses, weight_steps = weight_steps,
    approvals_needed = need, promote_rules = promote })
end

-- Check now; print the violations not printed before. Returns the history
-- and every violation.
local function check(final)
  local h = load(final)
  local vs = history.check(h)
  for _, v in ipairs(vs) do
    local key = v.rule .. " " .. (v.pipeline or "") .. " " .. v.what
    if not C.printed[key] then
      C.printed[key] = true
      local lines = history.explain(h, v, C.t0_db)
      for _, l in ipairs(lines) do say(l) end
      for _, l in ipairs(lines) do log("%s", l) end
    end
  end
  return h, vs
end

---------------------------------------------------------------- the end

-- Every fault undone (the fault tasks undo their own; this is for a task an
-- error cut short), then wait until nothing is left to finish or `bound`.
local function heal_all()
  if C.db_stopped then C.db.proc:kill(18) end
  C.receiver.proc:kill(18)
  os.remove(C.receiver.fail)
  for _, s in ipairs(C.order) do
    write_clock(s, 0)
    if C.state[s.name] == "frozen" then s:thaw() end
    if C.state[s.name] == "partitioned" then pcall(s.heal, s) end
    if not s:alive() then pcall(s.start, s) end
    C.state[s.name] = "up"
  end
end

-- What is left before the end: pipelines to finish, notifications to
-- deliver, restarts to end (0: settled).
local function unsettled()
  local r = scenario.sql([[SELECT
      (SELECT COUNT(*) FROM pipeline WHERE status IN ('INITIALIZED','RUNNING','DEPLOYING','ROLLING_OUT')
         OR (status = 'BUILD_SUCCEEDED' AND (deploy_mode = 'auto' OR deploy_requested_at IS NOT NULL))) AS busy,
      (SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL) AS undelivered,
      (SELECT COUNT(*) FROM restart_run WHERE finished_at IS NULL) AS restarting]])[1]
  return tonumber(r.busy) + tonumber(r.undelivered) + tonumber(r.restarting)
end

-- How long the end may go without progress: the policy's longest bound on
-- a status (a pipeline whose driver died mid-deploy waits for the deploy
-- timeout), plus margin for the takeover and the notifier's retries. A
-- queue (releases waiting for a deploy slot behind canaries) drains in
-- waves: each time less is left, the wait starts over, up to SETTLE_CAP_S.
local function settle_bound()
  local p = C.policy
  local b = math.max(p.deploy.timeout_ms, p.rollout.max_ms or p.rollout.timeout_ms, p.rollout.timeout_ms)
  return b / 1000 + 30
end

-- What the notifier's routes say at the end, printed when something was
-- never delivered (a CI failure shows where it stuck): who leads the
-- notifier, and each route's state and queue.
local function notifier_report()
  local ok, err = pcall(function()
    local lead = scenario.sql("SELECT IS_USED_LOCK(?) AS s", NAMES.leaders.notify)[1].s
    local held = "nobody"
    if lead then
      held = "session " .. tostring(lead)
      for name in pairs(C.servers) do
        local s = scenario.sql("SELECT IS_USED_LOCK(?) AS s", NAMES.server_prefix .. name)[1].s
        if s == lead then held = held .. " (" .. name .. ")" end
      end
    end
    say("notifier: its leader lock held by " .. held)
    for _, r in ipairs(scenario.sql([[SELECT r.route_key, r.failures,
        TIMESTAMPDIFF(MICROSECOND, NOW(6), r.retry_at) / 1e6 AS retry_in, r.removed_at IS NOT NULL AS removed,
        LEFT(r.last_error, 200) AS last_error,
        (SELECT COUNT(*) FROM notify_pending n WHERE n.route_key = r.route_key) AS queued,
        (SELECT MAX(attempts) FROM notify_pending n WHERE n.route_key = r.route_key) AS attempts
      FROM notify_route r ORDER BY r.route_key LIMIT 20]])) do
      say(("notifier: route %s: %s queued (most attempts %s), %s failures, retry in %ss%s, last error: %s"):format(
        r.route_key, tostring(r.queued), tostring(r.attempts or 0), tostring(r.failures), tostring(r.retry_in or "-"),
        r.removed == 1 and ", removed" or "", tostring(r.last_error or "-")))
    end
    local u = scenario.sql("SELECT COUNT(*) AS n FROM outbox WHERE routed = 0")[1].n
    say("notifier: " .. tostring(u) .. " outbox rows not routed")
  end)
  if not ok then say("notifier: its state not read: " .. tostring(err)) end
end

-- The canaries of the campaign in one line: how many began their steps,
-- were promoted, aborted; the bad ones (and how many of those were aborted).
local function canary_line()
  local fine, r = pcall(scenario.sql, [[SELECT COUNT(*) AS n,
      COALESCE(SUM(status = 'SUCCEEDED'), 0) AS promoted,
      COALESCE(SUM(status = 'ERROR' AND message LIKE 'Canary aborted%'), 0) AS aborted,
      COALESCE(SUM(artifact LIKE '%-bad'), 0) AS bad,
      COALESCE(SUM(artifact LIKE '%-bad' AND status = 'ERROR' AND message LIKE 'Canary aborted%'), 0) AS bad_aborted,
      (SELECT COUNT(*) FROM canary_measurement) AS measured
    FROM pipeline WHERE step > 0]])
  if not fine or not r[1] then return "canaries: not counted: " .. tostring(r) end
  r = r[1]
  return ("canaries: %d began their steps (%s): %d promoted, %d aborted; %d bad, %d of them aborted; " ..
    "%d measurements"):format(tonumber(r.n), C.prom and "analyses against Prometheus" or "no analyses",
    tonumber(r.promoted), tonumber(r.aborted), tonumber(r.bad), tonumber(r.bad_aborted), tonumber(r.measured))
end

-- The approvals of the campaign in one line (issue 39): given, refused or
-- given again (audit outcomes), and how many releases waited for them.
local function approval_line()
  local fine, r = pcall(scenario.sql, [[SELECT
      (SELECT COUNT(*) FROM pipeline_event WHERE event_type = 'APPROVED') AS given,
      (SELECT COUNT(*) FROM operator_action WHERE action = 'approve' AND outcome <> 'done') AS not_counted,
      (SELECT COUNT(DISTINCT pipeline_id) FROM pipeline_event WHERE event_type = 'APPROVED') AS releases]])
  if not fine or not r[1] then return "approvals: not counted: " .. tostring(r) end
  r = r[1]
  local promoted = scenario.sql("SELECT COUNT(*) AS n, COALESCE(SUM(status = 'SUCCEEDED'), 0) AS live FROM pipeline " ..
    "WHERE trigger_type = 'promotion'")[1]
  return ("approvals: %d given to %d releases, %d refused or given again; promotions: %d made, %d live"):format(
    tonumber(r.given), tonumber(r.releases), tonumber(r.not_counted), tonumber(promoted.n), tonumber(promoted.live))
end

local function kinds(list)
  local seen, out = {}, {}
  for _, f in ipairs(list) do
    if not seen[f.kind] then seen[f.kind] = true; out[#out + 1] = f.kind end
  end
  return out
end

---------------------------------------------------------------- running one

local function targets_of(policy)
  local list = {}
  local names = {}
  for name in pairs(policy.applications) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local envs = {}
    for _, e in ipairs(policy.applications[name].environments or {}) do envs[#envs + 1] = e end
    table.sort(envs)
    local app = policy.applications[name]
    -- (canary only in the campaign's own policy: its bad artifacts are for
    -- its own analysis)
    local canary = C.own_policy and plan_of(policy, name) ~= nil
    for _, e in ipairs(envs) do
      list[#list + 1] = { app = name, env = e, canary = canary or nil, alerts = app.limits ~= nil or nil }
    end
  end
  return list
end

-- Each server's environment: its wall clock read from a file of its own
-- (libfaketime, re-read every second), so a clock fault moves it alone.
local function server_envs(k)
  if not scenario.faketime_env {} then return nil end
  local envs = {}
  for i = 1, k do
    local file = C.dir .. "/clock-s" .. i
    files.write(file, "+0s\n")
    envs[i] = scenario.faketime_env { FAKETIME_TIMESTAMP_FILE = file, FAKETIME_CACHE_DURATION = "1" }
  end
  return envs
end

local function start_receiver(host)
  local r = { log = C.dir .. "/receiver.log", port = C.dir .. "/receiver.port", fail = C.dir .. "/receiver.fail" }
  local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$")
  r.proc = assert(oops.proc.start { argv = { C.o.oopsd, "lua", here .. "/receiver.lua", host, r.log, r.port, r.fail },
    inherit_env = true, on_output = function(_, data) C.log:write("receiver: ", data) end })
  local deadline = oops.now_ms() + 15000
  while not lfs.attributes(r.port) do
    if oops.now_ms() > deadline then error("the webhook receiver did not start within 15 s") end
    sleep(0.05)
  end
  local port, secret = files.read(r.port):match("^(%d+) (%x+)\n")
  r.url = ("http://%s:%d/hook/%s"):format(host, tonumber(port), secret)
  return r
end

-- The canaries' Prometheus and the simulated traffic it scrapes, where the
-- servers reach them (the namespaces' hub, as the receiver); without one,
-- the canaries run without analyses, and the campaign says so.
local function start_prometheus()
  local fine, prom = pcall(C.env.prometheus, { host = scenario.hub() or "127.0.0.1" })
  if fine then
    C.prom = prom
    log("prometheus: %s", prom.prom.plain)
  else
    say("chaos: no Prometheus (" .. tostring(prom):gsub("\n.*", "") .. "): canaries run without analyses")
    log("no prometheus: %s", tostring(prom))
  end
end

-- The policy the servers run and the servers themselves.
local function start_servers()
  local o = C.o
  local opts = { count = o.servers, envs = server_envs(o.servers), netns = C.netns or nil }
  C.faketime = opts.envs ~= nil
  if o.policies then
    opts.policies = o.policies
    -- --simulate's URL in the environment, not in argv (ps): its secret is ours.
    if opts.envs then
      for _, e in ipairs(opts.envs) do e.OOPS_SIMULATE = C.receiver.url end
    else
      opts.env = { OOPS_SIMULATE = C.receiver.url }
    end
  else
    C.policy_text = M.policy(C.o.targets, C.receiver.url, C.prom and C.prom.url)
    opts.policy = C.policy_text
  end
  C.order = C.env.servers(opts)
  C.servers, C.state = {}, {}
  for i, s in ipairs(C.order) do
    C.servers[s.name] = s
    C.state[s.name] = "up"
    s.clock_file = opts.envs and opts.envs[i].FAKETIME_TIMESTAMP_FILE
  end
end

-- The policy as the servers will load it (with_prom: its canaries'
-- analyses; the URLs are stand-ins).
local function load_policy(with_prom)
  local policy = require("oops.policy")
  if not C.o.policies then
    local dir = C.dir .. "/policy-check"
    lfs.mkdir(dir)
    files.write(dir .. "/chaos.lua", M.policy(C.o.targets, "http://127.0.0.1:1/hook",
      with_prom and "http://oops:x@127.0.0.1:1" or nil))
    return assert(policy.load_dir(dir, { cron_parse = oops.cron.parse }))
  end
  local p, errs = policy.load_dir(C.o.policies, { cron_parse = oops.cron.parse, simulate = "http://127.0.0.1:1/hook" })
  if not p then error({ input = C.o.policies .. ": the policy does not load:\n" .. table.concat(errs, "\n") }) end
  return p
end

local function play(plan)
  local t0 = oops.now_ms()
  local jobs = {}
  local function at(offset, fn, item)
    jobs[#jobs + 1] = { at = offset, fn = fn, item = item }
  end
  for _, f in ipairs(plan.faults) do at(f.at, run_fault, f) end
  for _, a in ipairs(plan.work) do at(a.at, run_work, a) end
  table.sort(jobs, function(a, b) return a.at < b.at end)
  local next_check = M.CHECK_EVERY_S
  local pool = require("oops.tasks").pool("chaos", 64)
  for _, j in ipairs(jobs) do
    local wait = j.at - (oops.now_ms() - t0) / 1000
    while wait > 0 do
      local step = math.min(wait, 0.5)
      sleep(step)
      wait = wait - step
      if (oops.now_ms() - t0) / 1000 >= next_check then
        next_check = next_check + M.CHECK_EVERY_S
        if not C.db_busy then pcall(check, false) end
      end
    end
    pool:run(function() j.fn(j.item) end)
  end
  pool:wait()
end

function M.run(o)
  C = { o = o, printed = {}, stops = {}, stopped = {}, done = {}, skipped = {}, work_done = {},
    work_skipped = 0, in_flight = 0, refused = 0, dir = o.work, t0 = oops.now_ms() / 1000 }
  C.log = assert(io.open(C.dir .. "/chaos.log", "a"))
  C.own_policy = not o.policies
  C.policy = load_policy(true)
  local targets = targets_of(C.policy)
  if #targets == 0 then error({ input = "the policy declares no application: nothing to create" }) end
  local names = {}
  for i = 1, o.servers do names[i] = "s" .. i end
  local plan = plan_mod.make { seed = o.seed, duration_s = o.duration_s, servers = names, targets = targets }
  say(("chaos: seed %d, %gs, %d servers, %d targets, %d faults and %d actions planned"):format(o.seed,
    o.duration_s, o.servers, #targets, #plan.faults, #plan.work))
  for _, f in ipairs(plan.faults) do say(plan_mod.line(f)) end
  for _, f in ipairs(plan.faults) do log("planned: %s", plan_mod.line(f)) end
  if o.dry_run then return 0 end

  local extra = scenario.netns_options()
  C.netns = extra ~= nil
  local db, derr = require("oops.scenario.mariadb").start { dir = C.dir .. "/mariadb",
    bind = extra and extra.bind, clients = extra and extra.clients }
  if not db then error({ input = "cannot start a database of its own: " .. tostring(derr) }) end
  C.db = db
  C.env = assert(scenario.begin(C.db.url, o.oopsd, o.oopsctl, C.dir, C.dir))
  -- Calls from tasks on a pool: one that waits for a stopped database
  -- (slow_db) holds its task, never the campaign (which must SIGCONT it).
  assert(oops.db.pool(4))
  scenario.use_database(C.db)
  scenario.set_note(function(text) log("%s", text) end) -- what took effect: the campaign's log
  C.t0_db = tonumber(scenario.sql("SELECT UNIX_TIMESTAMP(NOW(6)) AS t")[1].t)
  C.receiver = start_receiver(scenario.hub() or "127.0.0.1")
  if C.own_policy then
    start_prometheus()
    if not C.prom then C.policy = load_policy(false) end
  end
  start_servers()
  log("started: %d servers%s%s", o.servers, C.netns and ", each in a network namespace" or "",
    C.faketime and ", clocks under libfaketime" or "")
  C.t0 = oops.now_ms() / 1000
  play(plan)
  heal_all()
  -- Calm: every pod's usage back down, so the alerts resolve and stop
  -- repeating, and what is left to deliver runs out.
  pcall(scenario.sql, "UPDATE sim_metric SET value = 0")
  local bound = settle_bound()
  log("the nemesis stopped; settling (up to %.0fs without progress, %ds in all)", bound, M.SETTLE_CAP_S)
  local cap = oops.now_ms() + M.SETTLE_CAP_S * 1000
  local deadline, least = math.min(cap, oops.now_ms() + bound * 1000), math.huge
  local approved_at = 0
  while oops.now_ms() < deadline do
    if oops.now_ms() - approved_at >= 2000 then
      approve_waiting()
      approved_at = oops.now_ms()
    end
    local left = unsettled()
    if left == 0 then break end
    if left < least then -- progress: the wait for the rest starts over
      least = left
      deadline = math.min(cap, oops.now_ms() + bound * 1000)
    end
    sleep(0.5)
  end
  local h, vs = check(true)
  for _, v in ipairs(vs) do
    if v.rule == "undelivered" then
      notifier_report()
      break
    end
  end
  local n, rollbacks = 0, 0
  for _, p in pairs(h.pipelines) do
    n = n + 1
    if p.rollback_of then rollbacks = rollbacks + 1 end
  end
  local waited = scenario.sql("SELECT COUNT(DISTINCT e.pipeline_id) AS n FROM pipeline_event e " ..
    "JOIN pipeline p ON p.id = e.pipeline_id WHERE p.deploy_mode = 'auto' AND e.to_status = 'BUILD_SUCCEEDED'")
  local k = kinds(C.done)
  local counts = {}
  for _, kind in ipairs(k) do
    local c = 0
    for _, f in ipairs(C.done) do if f.kind == kind then c = c + 1 end end
    counts[#counts + 1] = kind .. " " .. c
  end
  say(("faults by kind: %s; %d planned faults skipped; actions: %d made, %d creates refused beside an " ..
    "unfinished pipeline, %d skipped; %d automatic rollbacks, %d releases held before their deploy"):format(
    #counts > 0 and table.concat(counts, ", ") or "none", #C.skipped, #plan.work - C.work_skipped, C.refused,
    C.work_skipped, rollbacks, tonumber(waited and waited[1] and waited[1].n) or 0))
  say(canary_line())
  say(approval_line())
  local summary = ("chaos: seed %d, %d faults (kinds: %s), %d pipelines, %d violations"):format(o.seed, #C.done,
    #k > 0 and table.concat(k, ", ") or "none", n, #vs)
  log("%s", summary)
  if #C.skipped > 0 then log("skipped faults: %d", #C.skipped) end
  C.summary, C.violations = summary, #vs
  return #vs
end

-- Stop the servers, the receiver and the database (also after an error).
function M.cleanup()
  if not C then return end
  pcall(scenario.cleanup)
  if C.receiver and C.receiver.proc then
    C.receiver.proc:kill(18)
    C.receiver.proc:kill(9)
  end
  if C.db then pcall(function() C.db:stop() end) end
  pcall(scenario.netns_cleanup)
  if C.log then C.log:close() end
end

function M.summary() return C and C.summary end

return M
