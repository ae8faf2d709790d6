-- The history checker of oopsctl chaos: what the campaign proves, from the
-- database the servers wrote and the receiver's log only (never from what a
-- server says of itself). M.load reads a history; M.check is pure (made-up
-- histories test it: tests/spec/chaos_history_spec.lua).
--
-- A history:
--   now        epoch seconds on the database's clock when it was read
--   final      true after the nemesis and the workload stopped and things
--              settled: the rules about reaching an end apply too
--   events     { { id, pipeline, target, from, to, server, session, at } } by id
--              (from nil: the pipeline's creation)
--   pipelines  { [id] = { id, target, status, auto, requested, trigger, artifact, rollback_of,
--              promoted_from } }
--   slots      { [environment] = N }  the policy's deploy slots (deploy.concurrency)
--   rolls_back { [target] = true }  targets whose policy rolls a failed release back
--   calls      { { pipeline, target, action, server } }  (sim_call)
--   jobs       { { pipeline, running } }  build jobs of the simulated cluster
--   restarts   { { target, occurrence, missed, finished, age } }
--   outbox     { { event_id, kind, payload (decoded or nil), delivered, undeliverable, age } }
--              age: seconds since it was made (nil: long ago); what is younger
--              than M.IN_FLIGHT_S at the end may still be on its way
--   alert_states { { key, firing } }  key "ns/app/env metric"
--   deliveries { { id, status, body } }  the receiver's log
--   faults     { { at, kind, server, session, survived } }  as they took effect;
--              survived: that session still held the server's name lock in
--              the database after the fault was undone (it lost no lock)
--   stops      { { pipeline, at, said = "stopped" | "changed" | "other" } }
-- Canaries (issue 38), each optional:
--   canary_events { { id, pipeline, type, message, at } }  CANARY_* events by id
--              (from = to = ROLLING_OUT: not in events)
--   measurements { { pipeline, step, n, analysis, verdict, at } }  canary_measurement
--   analyses   { [name] = { failure_limit, inconclusive } }  the policy's; nil:
--              the canaries ran no analysis (no "-bad" artifact is expected
--              to be caught)
--   weight_steps { [target] = N }  the weight steps of its canary plan
-- (pipelines also carry `message`; a weight the gateway applied is a call
-- "weight:N" in calls)
-- Approvals and promotions (issue 39), optional:
--   approvals_needed { [target] = N }  the policy's approvals = { ENV = N }
--   approvals  { { id, pipeline, person, at } }  APPROVED events by id
--   creators   { [pipeline] = person }  who created it (none: a tool), or
--              promoted it by promote-now
--   promote_rules { [target] = { to, after_s } }  the policy's promote = {...}
--   (pipelines also carry `promoted_from`)
--
-- M.check(h) → violations { { rule, pipeline, what, at } } (at: when, for the
-- faults around it); M.explain(h, v) → lines.
local M = {}

local UNFINISHED = { INITIALIZED = true, RUNNING = true, DEPLOYING = true, ROLLING_OUT = true }
local TERMINAL = { SUCCEEDED = true, ERROR = true, STOPPED = true }
-- Faults after which a live server may still believe in locks it lost.
M.LOSES_LOCKS = { kill = true, freeze = true, cut = true, partition = true, db_restart = true,
  slow_db = true }

-- At the end, a notification or a restart claim this young may still be
-- in flight (alerts repeat, restarts fire every minute: the system never
-- falls quite silent): only older ones must have ended.
M.IN_FLIGHT_S = 10
local function old(x) return (x.age or math.huge) > M.IN_FLIGHT_S end

local rules = {}

local function add(out, rule, pipeline, what, at)
  out[#out + 1] = { rule = rule, pipeline = pipeline, what = what, at = at }
end

-- Events (h.events, h.canary_events) by pipeline, in their order.
local function by_pipeline(list)
  local t = {}
  for _, e in ipairs(list or {}) do
    local l = t[e.pipeline]
    if not l then l = {}; t[e.pipeline] = l end
    l[#l + 1] = e
  end
  return t
end

local function is_ctl(server) return server and server:match("^oopsctl@") ~= nil end

-- No pipeline left a status twice, and none left a terminal one.
function rules.statuses(_, out, ev)
  for id, list in pairs(ev) do
    local left = {}
    for _, e in ipairs(list) do
      if e.from then
        if left[e.from] then
          add(out, "status_twice", id, ("left %s twice (%s -> %s by %s)"):format(e.from, e.from, e.to, e.server), e.at)
        end
        left[e.from] = true
        if TERMINAL[e.from] then
          add(out, "terminal_left", id, ("left the terminal %s (-> %s by %s)"):format(e.from, e.to, e.server), e.at)
        end
      end
    end
  end
end

-- Each build submitted once, each deploy made once.
function rules.side_effects(h, out)
  local n = {}
  for _, c in ipairs(h.calls or {}) do
    if c.pipeline and (c.action == "build_submit" or c.action == "deploy") then
      local k = c.pipeline .. " " .. c.action
      n[k] = (n[k] or 0) + 1
      if n[k] == 2 then add(out, "side_effect_twice", c.pipeline, c.action .. " made twice") end
    end
  end
end

-- After a fault on X at t: once another server transitioned a pipeline
-- (at or after t), X makes no transition of it with the session it had.
-- A database restart starts connection ids over: a session number seen
-- after one is another session. So a restart ends what a fault before it can
-- be blamed for, and is no such fault itself (its sessions are all gone; the
-- fence in the transition's UPDATE is what keeps their servers out).
local function restarts_between(h, from, to)
  for _, f in ipairs(h.faults or {}) do
    if f.kind == "db_restart" and f.at > from and f.at <= to then return true end
  end
  return false
end

function rules.lost_locks(h, out, ev)
  for _, f in ipairs(h.faults or {}) do
    if M.LOSES_LOCKS[f.kind] and f.kind ~= "db_restart" and f.server and not f.survived then
      for id, list in pairs(ev) do
        local taken_by
        for _, e in ipairs(list) do
          if e.at >= f.at then
            -- (a creation is no takeover: a server's failing transaction
            -- creates the automatic rollback, which any server may drive)
            if e.server ~= f.server and not is_ctl(e.server) and e.from ~= nil then
              taken_by = taken_by or e.server
            elseif e.server == f.server and taken_by and (not f.session or e.session == f.session)
                and not restarts_between(h, f.at, e.at) then
              add(out, "lost_lock_transition", id, ("%s made %s -> %s after %s had taken it over (fault: %s at %.2f)")
                :format(f.server, tostring(e.from), e.to, taken_by, f.kind, f.at), e.at)
            end
          end
        end
      end
    end
  end
end

-- At most one unfinished pipeline per application and environment at every
-- instant: the spans in which each was INITIALIZED, RUNNING, DEPLOYING or
-- ROLLING_OUT never overlap. Measured in event ids, the database's own
-- order: a create that waited for the previous pipeline's commit (the
-- unique index) may carry an earlier NOW(6) than that pipeline's last
-- event, but never a smaller id.
function rules.one_unfinished(h, out, ev)
  local spans = {}
  for id, list in pairs(ev) do
    local start, start_at
    -- (an automatic release waiting in BUILD_SUCCEEDED, held, is unfinished too)
    local p = h.pipelines and h.pipelines[id]
    local held_open = p and p.auto
    local function open(st) return UNFINISHED[st] or (held_open and st == "BUILD_SUCCEEDED") end
    for _, e in ipairs(list) do
      if open(e.to) and not start then start, start_at = e.id, e.at end
      if not open(e.to) and start then
        spans[#spans + 1] = { target = e.target, id = id, from = start, to = e.id, at = start_at }
        start = nil
      end
    end
    if start then
      spans[#spans + 1] = { target = list[1].target, id = id, from = start, to = math.huge, at = start_at }
    end
  end
  table.sort(spans, function(a, b)
    if a.target ~= b.target then return a.target < b.target end
    return a.from < b.from
  end)
  local last = {}
  for _, s in ipairs(spans) do
    local l = last[s.target]
    if l and s.from < l.to then
      add(out, "one_unfinished", s.id, ("unfinished beside %s in %s from %.3f"):format(l.id, s.target, s.at), s.at)
    end
    if not l or s.to > l.to then last[s.target] = s end
  end
end

-- Deploy slots (issue 26): after every event, in the database's order, at
-- most N pipelines of an environment with N slots DEPLOYING or ROLLING_OUT.
local DEPLOYS = { DEPLOYING = true, ROLLING_OUT = true }
function rules.slots(h, out)
  if not h.slots or next(h.slots) == nil then return end
  local active, count = {}, {}
  for _, e in ipairs(h.events or {}) do
    local env = e.target and e.target:match("([^/]+)$")
    local n = env and h.slots[env]
    if n then
      active[env] = active[env] or {}
      local was, now = DEPLOYS[e.from or ""], DEPLOYS[e.to]
      if now and not was and not active[env][e.pipeline] then
        active[env][e.pipeline] = true
        count[env] = (count[env] or 0) + 1
        if count[env] > n then
          add(out, "slot_overlap", e.pipeline,
            ("%d deploying at once in %s, which has %d slots"):format(count[env], env, n), e.at)
        end
      elseif was and not now and active[env][e.pipeline] then
        active[env][e.pipeline] = nil
        count[env] = count[env] - 1
      end
    end
  end
end

-- Automatic rollbacks (issue 26): each follows a release that failed at or
-- after its deploy (and is made after that failure); at the end, every such
-- failure of a target whose policy rolls back, with a live release before
-- it, has exactly one.
function rules.rollbacks(h, out, ev)
  local failed_at, made = {}, {}
  for _, e in ipairs(h.events or {}) do
    if e.to == "ERROR" and DEPLOYS[e.from or ""] then failed_at[e.pipeline] = e end
  end
  for id, p in pairs(h.pipelines or {}) do
    if p.rollback_of then
      made[p.rollback_of] = (made[p.rollback_of] or 0) + 1
      local f, r = failed_at[p.rollback_of], (ev[id] or {})[1]
      local fp = h.pipelines[p.rollback_of]
      if not f or not fp or fp.trigger == "rollback" or (r and r.id < f.id) then
        add(out, "rollback_unexpected", id, "an automatic rollback of " .. p.rollback_of ..
          ", which did not fail at or after its deploy before it", r and r.at)
      end
    end
  end
  for id, n in pairs(made) do
    if n > 1 then add(out, "rollback_twice", id, n .. " automatic rollbacks of one failure", h.now) end
  end
  if not h.final or not h.rolls_back then return end
  local created = {} -- pipeline → its creation event
  for _, e in ipairs(h.events) do
    if e.from == nil and e.to == "INITIALIZED" and not created[e.pipeline] then created[e.pipeline] = e end
  end
  for id, f in pairs(failed_at) do
    local p = h.pipelines[id]
    if p and p.trigger ~= "rollback" and h.rolls_back[p.target] and not made[id] then
      -- A live release to return to, and no newer pipeline of the target
      -- when it failed (one created while it waited in BUILD_SUCCEEDED,
      -- which is not unfinished: the engine returns to nothing then).
      local live, newer = false, false
      local mine = created[id]
      for _, e in ipairs(h.events) do
        if e.id < f.id and e.to == "SUCCEEDED" and e.target == p.target then
          local l = h.pipelines[e.pipeline]
          live = live or (l and (l.artifact or "") ~= "")
        end
        if mine and e.target == p.target and e.pipeline ~= id and e == created[e.pipeline] and e.id > mine.id
          and e.id < f.id then
          newer = true
        end
      end
      if live and not newer then
        add(out, "rollback_missing", id, "failed after its deploy with a live release before it, and no rollback", f.at)
      end
    end
  end
end

-- Restarts: never more calls for a target than occurrences fired.
function rules.restarts(h, out)
  local calls, fired = {}, {}
  for _, c in ipairs(h.calls or {}) do
    if c.action == "restart" then calls[c.target] = (calls[c.target] or 0) + 1 end
  end
  for _, r in ipairs(h.restarts or {}) do
    if not r.missed then fired[r.target] = (fired[r.target] or 0) + 1 end
  end
  for target, n in pairs(calls) do
    if n > (fired[target] or 0) then
      add(out, "restart_twice", nil,
        ("%s: %d restart calls for %d occurrences fired"):format(target, n, fired[target] or 0))
    end
  end
  if h.final then
    for _, r in ipairs(h.restarts or {}) do
      if not r.finished and old(r) then
        add(out, "restart_unfinished", nil, ("%s %s: claimed, no outcome"):format(r.target, r.occurrence))
      end
    end
  end
end

-- Alerts: one FIRING and one RESOLVED per episode, alternating per target and
-- metric; the alert state agrees with the last edge announced (at the end).
function rules.alerts(h, out)
  local seen, last = {}, {}
  for _, o in ipairs(h.outbox or {}) do
    local d = o.payload
    if o.kind == "alert" and type(d) == "table" and (d.edge == "FIRING" or d.edge == "RESOLVED") then
      local key = ("%s/%s/%s %s"):format(d.namespace, d.application, d.environment, d.metric)
      local ep = ("%s since %s %s"):format(key, tostring(d.since), d.edge)
      if seen[ep] then add(out, "alert_twice", nil, ep .. " announced twice") end
      seen[ep] = true
      if last[key] == d.edge then add(out, "alert_twice", nil, key .. ": " .. d.edge .. " twice in a row") end
      last[key] = d.edge
    end
  end
  if not h.final then return end
  for _, s in ipairs(h.alert_states or {}) do
    if s.firing ~= (last[s.key] == "FIRING") then
      add(out, "alert_state", nil,
        ("%s: firing=%s, last announced %s"):format(s.key, tostring(s.firing), last[s.key] or "nothing"))
    end
  end
end

-- Notifications: each delivered (the outbox says so and the receiver got its
-- id answered 2xx), every delivery carries an id of the outbox, and every
-- delivery of one id carries the same body.
function rules.notifications(h, out)
  local known, body, got = {}, {}, {}
  for _, o in ipairs(h.outbox or {}) do known[o.event_id] = true end
  for _, d in ipairs(h.deliveries or {}) do
    if not d.id then
      add(out, "unstable_id", nil, "a delivery without an event id")
    elseif not known[d.id] then
      add(out, "unstable_id", nil, d.id .. ": delivered, but no such event in the outbox")
    else
      if body[d.id] and body[d.id] ~= d.body then
        add(out, "unstable_id", nil, d.id .. ": delivered with another body")
      end
      body[d.id] = body[d.id] or d.body
      if d.status >= 200 and d.status <= 299 then got[d.id] = true end
    end
  end
  if not h.final then return end
  for _, o in ipairs(h.outbox or {}) do
    if not o.delivered and old(o) then
      add(out, "undelivered", nil, o.event_id .. ": never delivered")
    elseif o.delivered and not o.undeliverable and h.deliveries and not got[o.event_id] then
      add(out, "undelivered", nil, o.event_id .. ": delivered says the outbox, but the receiver never answered it 2xx")
    end
  end
end

-- Stops: a stop that said it stopped the pipeline did (oopsctl's STOPPED
-- event), one that said "changed concurrently" did not: never both, never
-- neither.
function rules.stops(h, out, ev)
  for _, s in ipairs(h.stops or {}) do
    local stopped = false
    for _, e in ipairs(ev[s.pipeline] or {}) do
      if e.to == "STOPPED" and is_ctl(e.server) then stopped = true end
    end
    if s.said == "stopped" and not stopped then
      add(out, "stop_both", s.pipeline, "the stop said it stopped it, but no stop is in its history", s.at)
    elseif s.said == "changed" and stopped then
      add(out, "stop_both", s.pipeline, 'the stop said "changed concurrently", yet it was stopped', s.at)
    end
  end
end

-- At the end: every pipeline finished, and no build runs on for a stopped
-- or failed one.
function rules.ends(h, out)
  if not h.final then return end
  for id, p in pairs(h.pipelines or {}) do
    if UNFINISHED[p.status] or (p.status == "BUILD_SUCCEEDED" and (p.auto or p.requested)) then
      add(out, "stuck", id, "still " .. p.status .. " after the nemesis stopped and things settled", h.now)
    end
  end
  for _, j in ipairs(h.jobs or {}) do
    local p = h.pipelines and h.pipelines[j.pipeline]
    if j.running and p and (p.status == "STOPPED" or p.status == "ERROR") then
      add(out, "build_left_running", j.pipeline, "its build still runs, the pipeline is " .. p.status, h.now)
    end
  end
end

---------------------------------------------------------------- canaries (issue 38)

-- The weights the gateway applied for each pipeline, in order (sim_call).
local function weights_of(h)
  local w = {}
  for _, c in ipairs(h.calls or {}) do
    local n = c.pipeline and c.action and tonumber(c.action:match("^weight:(%-?%d+)$"))
    if n then
      w[c.pipeline] = w[c.pipeline] or {}
      table.insert(w[c.pipeline], n)
    end
  end
  return w
end

-- The step a CANARY_STEP event ends or acts in: "step K/N: ..." → K,
-- "promoted: ..." (after the last step) → math.huge, else nil; and whether
-- it is an abort's (weight 0, traffic back to stable).
local function event_step(e)
  local k = e.message and tonumber(e.message:match("^step (%d+)/%d+:"))
  if not k and e.message and e.message:match("^promoted:") then k = math.huge end
  return k, e.message and e.message:find("(aborting:", 1, true) ~= nil
end

-- Each weight applied once: never the same weight twice in a row for one
-- pipeline (a step's weight set again: its heir did not see it confirmed
-- nor asked the gateway), and never more weights than its plan's weight
-- steps plus the abort's 0 or the finish's 100.
function rules.weight_twice(h, out)
  for id, list in pairs(weights_of(h)) do
    for i = 2, #list do
      if list[i] == list[i - 1] then
        add(out, "weight_twice", id, ("weight %d applied twice in a row (weights %s)"):format(list[i],
          table.concat(list, ",")))
        break
      end
    end
    local p = h.pipelines and h.pipelines[id]
    local k = p and h.weight_steps and h.weight_steps[p.target]
    if k and #list > k + 1 then
      add(out, "weight_twice", id, ("%d weights applied (%s) for %d weight steps and an end"):format(#list,
        table.concat(list, ","), k))
    end
  end
end

-- A canary's weights only go up, but for the abort's final 0.
function rules.weight_order(h, out)
  for id, list in pairs(weights_of(h)) do
    local last = #list
    if list[last] == 0 then last = last - 1 end
    for i = 1, last do
      if list[i] == 0 or (i > 1 and list[i] < list[i - 1]) then
        add(out, "weight_order", id, ("weight %d after %s (weights %s)"):format(list[i], tostring(list[i - 1]),
          table.concat(list, ",")))
        break
      end
    end
  end
end

-- Whether a measurement's verdict counts as failed under analysis a.
local function failed(m, a)
  return m.verdict == "fail" or (m.verdict == "inconclusive" and a and a.inconclusive == "fail")
end

-- After a step's measurements failed more than its analysis' failure_limit,
-- the driver aborts: no CANARY_STEP event ends that step or a later one
-- otherwise (but the abort's), no promotion, no SUCCEEDED.
function rules.step_past_failed_analysis(h, out, ev)
  if not h.analyses then return end
  local count, over = {}, {}
  for _, m in ipairs(h.measurements or {}) do
    local a = h.analyses[m.analysis]
    local key = m.pipeline .. " " .. m.step
    if a and failed(m, a) then
      count[key] = (count[key] or 0) + 1
      if count[key] > a.failure_limit and not over[m.pipeline] then
        over[m.pipeline] = { step = m.step, analysis = m.analysis, n = m.n, limit = a.failure_limit }
      end
    end
  end
  local cev = by_pipeline(h.canary_events)
  for id, o in pairs(over) do
    local what = ("analysis %s failed %d times by measurement %d of step %d (limit %d)"):format(o.analysis,
      o.limit + 1, o.n, o.step, o.limit)
    local past
    for _, e in ipairs(cev[id] or {}) do
      local k, aborting = event_step(e)
      if not past and e.type == "CANARY_STEP" and k and k >= o.step and not aborting then past = e end
    end
    for _, e in ipairs(ev[id] or {}) do
      if not past and e.to == "SUCCEEDED" then past = { at = e.at, message = "-> SUCCEEDED" } end
    end
    if past then add(out, "step_past_failed_analysis", id, what .. ", yet: " .. past.message, past.at) end
  end
end

-- The measurements of each step are numbered 1..k without a gap (the PK
-- forbids two of one number), and none was recorded after its step ended:
-- after the first CANARY_STEP event of its pipeline at that step or later
-- (its end, its abort, the promotion), or after the pipeline finished.
function rules.measurements(h, out, ev)
  local steps, order = {}, {}
  for _, m in ipairs(h.measurements or {}) do
    local key = m.pipeline .. " " .. m.step
    if not steps[key] then
      steps[key] = {}
      order[#order + 1] = key
    end
    table.insert(steps[key], m)
  end
  local cev = by_pipeline(h.canary_events)
  for _, key in ipairs(order) do
    local list = steps[key]
    table.sort(list, function(a, b) return a.n < b.n end)
    local id, step = list[1].pipeline, list[1].step
    for i, m in ipairs(list) do
      if m.n ~= i then
        add(out, "measurement_twice", id, ("step %d: measurement %d where %d was due (a gap or a repeat)")
          :format(step, m.n, i), m.at)
        break
      end
    end
    local ended
    for _, e in ipairs(cev[id] or {}) do
      local k = event_step(e)
      if e.type == "CANARY_STEP" and k and k >= step then ended = ended or e end
    end
    for _, e in ipairs(ev[id] or {}) do
      if TERMINAL[e.to] and (not ended or e.at < ended.at) then ended = { at = e.at, message = "-> " .. e.to } end
    end
    for _, m in ipairs(list) do
      if ended and m.at and m.at > ended.at then
        add(out, "measurement_twice", id, ("step %d: measurement %d recorded %.3fs after its step ended (%s)")
          :format(step, m.n, m.at - ended.at, ended.message), m.at)
      end
    end
  end
end

-- An aborted canary sent its traffic back to stable: the last weight the
-- gateway applied for it is 0 (none at all: it never left stable).
function rules.canary_not_stable(h, out)
  local w = weights_of(h)
  for id, p in pairs(h.pipelines or {}) do
    local list = w[id]
    if p.status == "ERROR" and (p.message or ""):find("^Canary aborted") and list and list[#list] ~= 0 then
      add(out, "canary_not_stable", id, ("aborted, its last weight %d (weights %s)"):format(list[#list],
        table.concat(list, ",")), h.now)
    end
  end
end

-- A bad release (an artifact ending "-bad": 5 % errors) never passes its
-- analysis (failure_limit 0): none reaches SUCCEEDED where analyses ran.
function rules.bad_canary(h, out, ev)
  if not h.analyses then return end
  for id, p in pairs(h.pipelines or {}) do
    if (p.artifact or ""):match("%-bad$") and p.trigger ~= "rollback" then
      for _, e in ipairs(ev[id] or {}) do
        if e.to == "SUCCEEDED" then
          add(out, "bad_canary_promoted", id, p.artifact .. " (5 % errors) promoted past its analysis", e.at)
        end
      end
    end
  end
end

-- Who made pipeline id, for the two-person rule: its creator (who promoted
-- it, for a promotion), and those of the releases it was promoted from.
function M.makers(h, id)
  local out = {}
  for _ = 1, 8 do
    local p = h.pipelines and h.pipelines[id]
    local c = (h.creators or {})[id]
    if c then out[c] = true end
    if not (p and p.promoted_from) then break end
    id = p.promoted_from
  end
  return out
end

-- Approvals (issue 39): a person approves a pipeline once; a release of a
-- target whose policy asks for N approvals is deployed only after N persons
-- other than its creator (and whoever made the releases it was promoted
-- from) approved it.
function rules.approvals(h, out, ev)
  local seen, persons = {}, {}
  for _, a in ipairs(h.approvals or {}) do
    local key = a.pipeline .. " " .. a.person
    if seen[key] then
      add(out, "approval_twice", a.pipeline, a.person .. " approved it twice", a.at)
    end
    seen[key] = true
    persons[a.pipeline] = persons[a.pipeline] or {}
    table.insert(persons[a.pipeline], a)
  end
  for id, p in pairs(h.pipelines or {}) do
    local need = (h.approvals_needed or {})[p.target]
    if need and p.trigger ~= "rollback" then
      for _, e in ipairs(ev[id] or {}) do
        if e.to == "DEPLOYING" then
          local n, counted = 0, {}
          local makers = M.makers(h, id)
          for _, a in ipairs(persons[id] or {}) do
            if a.id < e.id and not makers[a.person] and not counted[a.person] then
              counted[a.person] = true
              n = n + 1
            end
          end
          if n < need then
            add(out, "deployed_unapproved", id, ("deployed with %d of the %d approvals %s needs"):format(n, need,
              p.target), e.at)
          end
          break
        end
      end
    end
  end
end

-- Promotions (issue 39): a release is promoted at most once; a promotion is
-- made only of a release that went live (a release or a promotion, never a
-- rollback), with its artifact, while nothing newer of its target had been
-- created, and (unless an operator made it: promote-now) not before the
-- policy's wait.
function rules.promotions(h, out, ev)
  local made, created = {}, {}
  for _, e in ipairs(h.events or {}) do
    if e.from == nil and e.to == "INITIALIZED" and not created[e.pipeline] then created[e.pipeline] = e end
  end
  for id, p in pairs(h.pipelines or {}) do
    local from = p.promoted_from and h.pipelines[p.promoted_from]
    if p.promoted_from then
      made[p.promoted_from] = (made[p.promoted_from] or 0) + 1
      local mine = created[id]
      local live
      for _, e in ipairs(from and ev[from.id] or {}) do
        if e.to == "SUCCEEDED" and mine and e.id < mine.id then live = e end
      end
      local why
      if not from or not live or from.trigger == "rollback" then
        why = "made of " .. p.promoted_from .. ", which was not a release live before it"
      elseif from.artifact ~= p.artifact or p.trigger ~= "promotion" then
        why = ("made of %s with another artifact or trigger (%s, %s)"):format(from.id, tostring(p.artifact),
          tostring(p.trigger))
      elseif mine and created[from.id] then
        local since = created[from.id].id
        for oid, o in pairs(h.pipelines) do
          local c = created[oid]
          if o.target == from.target and oid ~= from.id and c and c.id > since and c.id < mine.id then
            why = ("made of %s after %s, newer in %s, was created"):format(from.id, oid, from.target)
            break
          end
        end
        local rule = (h.promote_rules or {})[from.target]
        if not why and rule and not (h.creators or {})[id] and mine.at < live.at + rule.after_s - 0.5 then
          why = ("made %.1f s after %s went live, before its %g s wait"):format(mine.at - live.at, from.id,
            rule.after_s)
        end
      end
      if why then add(out, "promotion_unexpected", id, why, mine and mine.at) end
    end
  end
  for id, n in pairs(made) do
    if n > 1 then add(out, "promoted_twice", id, n .. " promotions of one release", h.now) end
  end
end

M.RULES = { "statuses", "side_effects", "lost_locks", "one_unfinished", "restarts", "alerts",
  "notifications", "stops", "ends", "slots", "rollbacks", "weight_twice", "weight_order",
  "step_past_failed_analysis", "measurements", "canary_not_stable", "bad_canary", "approvals", "promotions" }

function M.check(h)
  local out, ev = {}, by_pipeline(h.events)
  for _, name in ipairs(M.RULES) do rules[name](h, out, ev) end
  table.sort(out, function(a, b)
    if a.rule ~= b.rule then return a.rule < b.rule end
    return (a.pipeline or a.what) < (b.pipeline or b.what)
  end)
  return out
end

-- A violation with the pipeline's events and the faults around it (within
-- AROUND seconds of it, or of the pipeline's life), relative to t0.
M.AROUND = 15
function M.explain(h, v, t0)
  t0 = t0 or 0
  local lines = { ("violation: %s%s: %s"):format(v.rule, v.pipeline and (" " .. v.pipeline) or "", v.what) }
  local first, last = v.at, v.at
  local mine = {}
  for _, e in ipairs(h.events or {}) do
    if v.pipeline and e.pipeline == v.pipeline then mine[#mine + 1] = e end
  end
  for _, e in ipairs(h.canary_events or {}) do
    if v.pipeline and e.pipeline == v.pipeline then mine[#mine + 1] = e end
  end
  table.sort(mine, function(a, b)
    if a.at ~= b.at then return a.at < b.at end
    return a.id < b.id
  end)
  for _, e in ipairs(mine) do
    if e.type then -- a canary's event (ROLLING_OUT -> ROLLING_OUT)
      lines[#lines + 1] = ("  event +%.2fs %s: %s"):format(e.at - t0, e.type, tostring(e.message))
    else
      lines[#lines + 1] = ("  event +%.2fs %s -> %s by %s%s"):format(e.at - t0, tostring(e.from), e.to, e.server,
        e.session and (" (session " .. e.session .. ")") or "")
    end
    first, last = math.min(first or e.at, e.at), math.max(last or e.at, e.at)
  end
  for _, m in ipairs(h.measurements or {}) do
    if v.pipeline and m.pipeline == v.pipeline then
      lines[#lines + 1] = ("  measured +%.2fs step %d #%d %s: %s"):format((m.at or t0) - t0, m.step, m.n,
        tostring(m.analysis), m.verdict)
    end
  end
  local w = v.pipeline and weights_of(h)[v.pipeline]
  if w then lines[#lines + 1] = "  weights applied: " .. table.concat(w, ",") end
  for _, f in ipairs(h.faults or {}) do
    if first and f.at >= first - M.AROUND and f.at <= last + M.AROUND then
      lines[#lines + 1] = ("  fault +%.2fs %s%s"):format(f.at - t0, f.kind, f.server and (" " .. f.server) or "")
    end
  end
  return lines
end

---------------------------------------------------------------- reading one

-- The history in the database (sql(query, ...) → rows) and the receiver's
-- deliveries, faults and stops as the campaign recorded them.
function M.load(sql, o)
  local json = require("oops.json")
  local h = { now = tonumber(sql("SELECT UNIX_TIMESTAMP(NOW(6)) AS t")[1].t), final = o.final,
    faults = o.faults, stops = o.stops, deliveries = o.deliveries, pipelines = {} }
  h.slots, h.rolls_back = o.slots, o.rolls_back
  h.analyses, h.weight_steps = o.analyses, o.weight_steps
  for _, r in ipairs(sql("SELECT id, CONCAT(namespace, '/', application, '/', environment) AS target, status, " ..
      "deploy_mode, deploy_requested_at IS NOT NULL AS requested, trigger_type, artifact, rollback_of, " ..
      "promoted_from, LEFT(message, 200) AS message FROM pipeline")) do
    h.pipelines[r.id] = { id = r.id, target = r.target, status = r.status, auto = r.deploy_mode == "auto",
      requested = tonumber(r.requested) == 1, trigger = r.trigger_type, artifact = r.artifact,
      rollback_of = r.rollback_of, promoted_from = r.promoted_from, message = r.message }
  end
  h.events = {}
  for _, r in ipairs(sql("SELECT e.id, e.pipeline_id, e.from_status, e.to_status, e.server, e.lock_session, " ..
      "UNIX_TIMESTAMP(e.created_at) AS at, CONCAT(p.namespace, '/', p.application, '/', p.environment) AS target " ..
      "FROM pipeline_event e JOIN pipeline p ON p.id = e.pipeline_id " ..
      -- (an operator's override or deploy request is an event, not a transition)
      "WHERE e.from_status IS NULL OR e.from_status <> e.to_status ORDER BY e.id")) do
    h.events[#h.events + 1] = { id = r.id, pipeline = r.pipeline_id, target = r.target, from = r.from_status,
      to = r.to_status, server = r.server, session = tonumber(r.lock_session), at = tonumber(r.at) }
  end
  h.canary_events = {}
  for _, r in ipairs(sql("SELECT id, pipeline_id, event_type, LEFT(message, 300) AS message, " ..
      "UNIX_TIMESTAMP(created_at) AS at FROM pipeline_event WHERE event_type LIKE 'CANARY%' ORDER BY id")) do
    h.canary_events[#h.canary_events + 1] = { id = r.id, pipeline = r.pipeline_id, type = r.event_type,
      message = r.message, at = tonumber(r.at) }
  end
  h.approvals_needed, h.approvals, h.creators = o.approvals_needed, {}, {}
  h.promote_rules = o.promote_rules
  local function person(actor) return actor and (actor:match("^(.*)@[^@]*$") or actor) end
  for _, r in ipairs(sql("SELECT id, pipeline_id, event_type, actor, UNIX_TIMESTAMP(created_at) AS at " ..
      "FROM pipeline_event WHERE event_type IN ('APPROVED', 'CREATED') AND actor IS NOT NULL ORDER BY id")) do
    if r.event_type == "CREATED" then
      h.creators[r.pipeline_id] = person(r.actor)
    else
      h.approvals[#h.approvals + 1] = { id = tonumber(r.id), pipeline = r.pipeline_id, person = person(r.actor),
        at = tonumber(r.at) }
    end
  end
  h.measurements = {}
  for _, r in ipairs(sql("SELECT pipeline_id, step, n, analysis, verdict, UNIX_TIMESTAMP(measured_at) AS at " ..
      "FROM canary_measurement ORDER BY pipeline_id, step, n")) do
    h.measurements[#h.measurements + 1] = { pipeline = r.pipeline_id, step = tonumber(r.step), n = tonumber(r.n),
      analysis = r.analysis, verdict = r.verdict, at = tonumber(r.at) }
  end
  h.calls = {}
  for _, r in ipairs(sql("SELECT pipeline_id, target, action, server FROM sim_call " ..
      "WHERE action <> 'probe' ORDER BY id")) do
    h.calls[#h.calls + 1] = { pipeline = r.pipeline_id, target = r.target, action = r.action, server = r.server }
  end
  h.jobs = {}
  for _, r in ipairs(sql("SELECT pipeline_id, (outcome = 'pending' OR (outcome IS NULL AND NOW(6) < ready_at)) " ..
      "AS running FROM sim_job WHERE kind = 'build'")) do
    h.jobs[#h.jobs + 1] = { pipeline = r.pipeline_id, running = tonumber(r.running) == 1 }
  end
  h.restarts = {}
  for _, r in ipairs(sql("SELECT CONCAT(namespace, '/', application, '/', environment) AS target, occurrence, " ..
      "outcome, finished_at IS NOT NULL AS finished, " ..
      "TIMESTAMPDIFF(MICROSECOND, fired_at, NOW(6)) / 1e6 AS age FROM restart_run")) do
    h.restarts[#h.restarts + 1] = { target = r.target, occurrence = tostring(r.occurrence),
      missed = r.outcome == "missed", finished = tonumber(r.finished) == 1, age = tonumber(r.age) }
  end
  h.outbox = {}
  for _, r in ipairs(sql("SELECT event_id, kind, payload, delivered_at IS NOT NULL AS delivered, " ..
      "COALESCE(last_error LIKE 'undeliverable:%', 0) AS undeliverable, " ..
      "TIMESTAMPDIFF(MICROSECOND, created_at, NOW(6)) / 1e6 AS age FROM outbox ORDER BY id")) do
    local doc = json.decode(r.payload or "")
    h.outbox[#h.outbox + 1] = { event_id = r.event_id, kind = r.kind, payload = type(doc) == "table" and doc or nil,
      delivered = tonumber(r.delivered) == 1, undeliverable = tonumber(r.undeliverable) == 1, age = tonumber(r.age) }
  end
  h.alert_states = {}
  for _, r in ipairs(sql("SELECT namespace, application, environment, metric, firing FROM alert_state")) do
    h.alert_states[#h.alert_states + 1] = { key = ("%s/%s/%s %s"):format(r.namespace, r.application,
      r.environment, r.metric), firing = tonumber(r.firing) == 1 }
  end
  return h
end

return M
