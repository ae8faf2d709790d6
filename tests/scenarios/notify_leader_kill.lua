-- The notify leader SIGKILLed in the middle of a batch (issue 28): 300
-- pipelines at once make 1,200 notifications, held back by a receiver that
-- fails until every pipeline finished (so the kill hits the notifier alone,
-- never a driver), then delivered 8 at a time and marked in batches; the
-- leader dies while it is sending them. Nothing is
-- lost (the end checks: every event reached the receiver and every outbox row
-- is delivered), a duplicate is only a resend of what the dead leader had
-- sent but not yet marked, under the same id with the same body, and the
-- events of each pipeline first reached the receiver in order.
local names = require("oops").locks.names
local hook = receiver()
servers { count = 3, policy = ([[
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "0s", deploy = "0s", rollout = "0s" }
notify  { webhook = "%s", retry = { initial = "200ms", max = "1s" } }
]]):format(hook.url) }

local function leader()
  local r = sql("SELECT s.name FROM server s WHERE s.lock_connection_id = IS_USED_LOCK(?)", names.leaders.notify)[1]
  return r and r.name
end
wait_until("a server leads the notifier", function() return leader() ~= nil end, 20)

local N = 300
hook:fail(true)
sql("INSERT INTO pipeline (id, namespace, application, environment, status) SELECT CONCAT('n', LPAD(seq, 11, '0'))," ..
  " 'flood', CONCAT('app', seq), 'prod', 'INITIALIZED' FROM seq_1_to_" .. N)
wait_until("every pipeline SUCCEEDED (their notifications held back)", function()
  return tonumber(sql("SELECT COUNT(*) AS n FROM pipeline WHERE status = 'SUCCEEDED'")[1].n) == N
end, 120)
local function delivered()
  local n = 0
  for _, d in ipairs(hook:deliveries()) do if d.status == 200 then n = n + 1 end end
  return n
end
hook:fail(false)
local victim
wait_until("the notifier is part way through the flood", function()
  if delivered() >= 100 then victim = leader() return true end
end, 60)
expect(victim ~= nil, "the leader is known when it is killed")
server(victim):kill("KILL")
local sent_before = delivered()
wait_until("another server leads the notifier", function()
  local l = leader()
  return l ~= nil and l ~= victim
end, 30)
server(victim):start()
if not wait_until("every notification delivered", function()
  return tonumber(sql("SELECT COUNT(*) AS n FROM outbox WHERE delivered_at IS NULL")[1].n) == 0
end, 120) then
  -- Where the rest wait: routed or not, queued or not, the route's clock.
  print("# leader now: " .. tostring(leader()))
  for _, r in ipairs(sql([[SELECT routed, delivered_at IS NULL AS open, COUNT(*) AS n, MIN(id) AS first
      FROM outbox GROUP BY routed, delivered_at IS NULL]])) do
    print(("# outbox routed=%s undelivered=%s: %s rows from id %s"):format(r.routed, r.open, r.n, r.first))
  end
  for _, r in ipairs(sql([[SELECT route_key, COUNT(*) AS n, SUM(attempts > 0) AS tried,
      TIMESTAMPDIFF(MICROSECOND, NOW(6), MIN(next_attempt_at)) / 1e6 AS due_in_s
      FROM notify_pending GROUP BY route_key]])) do
    print(("# queue %s: %s rows, %s tried, first due in %s s"):format(r.route_key, r.n, r.tried, r.due_in_s))
  end
  for _, r in ipairs(sql([[SELECT route_key, failures,
      TIMESTAMPDIFF(MICROSECOND, NOW(6), retry_at) / 1e6 AS retry_in_s, removed_at FROM notify_route]])) do
    print(("# route %s: failures %s, retry in %s s, removed %s")
      :format(r.route_key, r.failures, r.retry_in_s, r.removed_at))
  end
end

local first, dups, differ = {}, 0, 0
for _, d in ipairs(hook:deliveries()) do
  if d.status == 200 and d.id then
    if first[d.id] then
      dups = dups + 1
      if first[d.id] ~= d.body then differ = differ + 1 end
    else
      first[d.id] = d.body
    end
  end
end
local events = tonumber(sql("SELECT COUNT(*) AS n FROM outbox")[1].n)
expect(events == 4 * N, "four notifications per pipeline", tostring(events))
expect(differ == 0, "a resent notification is the same message, under the same id", differ .. " differ")
-- What the dead leader sent and had not marked is all that may come twice:
-- at most a batch of rounds' worth, never the whole flood.
expect(dups <= sent_before, "duplicates only of what the killed leader had sent",
  ("%d duplicates, %d delivered before the kill"):format(dups, sent_before))
print(("# %d events, %d delivered before the kill, %d received twice"):format(events, sent_before, dups))

-- Each pipeline's events first arrived in order.
local seen_at, pos = {}, 0
for _, d in ipairs(hook:deliveries()) do
  if d.status == 200 and d.id and not seen_at[d.id] then
    pos = pos + 1
    seen_at[d.id] = pos
  end
end
local out_of_order = 0
local last = {}
for _, r in ipairs(sql("SELECT pipeline_id, CONCAT('pipeline-event-', id) AS ev FROM pipeline_event ORDER BY id")) do
  local at = seen_at[r.ev]
  if at and last[r.pipeline_id] and at < last[r.pipeline_id] then out_of_order = out_of_order + 1 end
  if at then last[r.pipeline_id] = at end
end
expect(out_of_order == 0, "the events of each pipeline first arrived in order", out_of_order .. " out of order")
