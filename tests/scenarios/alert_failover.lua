-- An alert episode across a SIGKILLed alert leader, notified through a
-- webhook that is down for a while and a SIGKILLed notify leader: the
-- episode is announced FIRING once and RESOLVED once, and every event
-- reaches the webhook at least once, with the same id on every attempt.
local names = require("oops").locks.names
local hook = receiver()
servers { count = 3, policy = ([[
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "500ms", deploy = "0s", rollout = "300ms" }
alert   { interval = "1s", cpu = { percent = 50, sustained = "0s" }, every = "2s", probe = "simulated" }
notify  { webhook = "%s", retry = { initial = "200ms", max = "1s" } }
application "shop/api" { environments = { "prod" }, limits = { cpu = "1", memory = "1Gi" } }
]]):format(hook.url) }

local KEY = "shop/api/prod/cpu"
local function usage(value)
  sql("INSERT INTO sim_metric (namespace, application, environment, metric, pod, value) " ..
    "VALUES ('shop', 'api', 'prod', 'cpu', 'api-0', ?) ON DUPLICATE KEY UPDATE value = VALUES(value)", value)
end
local function edges()
  local list = {}
  for i, e in ipairs(alert_edges(KEY)) do list[i] = e.edge end
  return list
end
local function count(edge) return alert_count(KEY, edge) end
local function leader(name)
  local r = sql("SELECT s.name FROM server s WHERE s.lock_connection_id = IS_USED_LOCK(?)", name)[1]
  return r and r.name
end

wait_until("a server leads the alert scan", function() return leader(names.leaders.alert) ~= nil end, 20)
usage(900)
wait_until("the episode fires", function() return count("FIRING") == 1 end, 10)
local first = leader(names.leaders.alert)

-- The webhook goes down; the alert leader is SIGKILLed mid-episode.
hook:fail(true)
server(first):kill("KILL")
wait_until("another server leads the alert scan", function()
  local l = leader(names.leaders.alert); return l ~= nil and l ~= first
end, 15)
wait_until("... and repeats the episode (every 2s)", function() return count("REPEAT") >= 2 end, 15)
expect(count("FIRING") == 1, "the episode is not announced FIRING again by the new leader",
  table.concat(edges(), " "))

-- A pipeline's events queue up behind the dead webhook too.
local p = create { app = "shop/api", env = "prod" }
expect(p:wait("SUCCEEDED", 20), "a pipeline runs meanwhile")

-- The notify leader is SIGKILLed with the webhook still down; then it is back.
local notifier = leader(names.leaders.notify)
if notifier and server(notifier):alive() then server(notifier):kill("KILL") end
sleep(1)
hook:fail(false)
usage(10)
wait_until("the episode resolves", function() return count("RESOLVED") == 1 end, 15)
expect(count("FIRING") == 1 and count("RESOLVED") == 1, "one FIRING, one RESOLVED across two kills",
  table.concat(edges(), " "))

-- Every event reached the webhook (also checked at the end), and a resend
-- carried the same id: the receiver saw ids more than once, never a new id
-- for an old event.
wait_until("the webhook got every event", function()
  local got = hook:ids()
  for _, r in ipairs(sql("SELECT event_id FROM outbox")) do if not got[r.event_id] then return false end end
  return true
end, 20)
local failed, ids = 0, {}
for _, d in ipairs(hook:deliveries()) do
  if d.status >= 500 then failed = failed + 1 end
  ids[d.id or "?"] = true
end
local outbox = sql("SELECT COUNT(*) AS n FROM outbox")[1].n
local distinct = 0
for _ in pairs(ids) do distinct = distinct + 1 end
expect(failed > 0, "deliveries failed while the webhook was down (and were retried)", failed .. " failed")
expect(distinct == outbox, "every delivery carried the id of an outbox event",
  ("%d distinct ids, %d outbox rows"):format(distinct, outbox))
