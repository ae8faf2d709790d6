-- Resource alerts on three servers (REFERENCE.md §8, §12.8): one leader
-- probes; an alert goes FIRING → REPEAT → RESOLVED with exactly one outbox
-- row each; a probe error changes nothing; a frozen leader that wakes up
-- announces nothing twice; a target removed from the policy while firing is
-- resolved once. The simulated probe reads sim_metric: a pod fires when its
-- value is above limit × percent / 100 (here 1 CPU × 50% = 500 millicores).
local names = require("oops").locks.names
local cjson = require("cjson")

local POLICY = [[
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "1s", deploy = "0s", rollout = "300ms" }
alert   { interval = "1s", cpu = { percent = 50, sustained = "0s" }, every = "3s", probe = "simulated" }
application "shop/api" { environments = { "prod" }, limits = { cpu = "1", memory = "1Gi" } }
]]
local OLD = [[
application "shop/old" { environments = { "prod" }, limits = { cpu = "1" } }
]]

local all = servers { count = 3, policy = POLICY .. OLD }

local function usage(app, pod, value)
  sql("INSERT INTO sim_metric (namespace, application, environment, metric, pod, value) " ..
    "VALUES ('shop', ?, 'prod', 'cpu', ?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value)", app, pod, value)
end

-- The alert outbox rows of one target (the scenario's alert_edges).
local edges, count = alert_edges, alert_count

local function state(key)
  local ns, app, env, metric = key:match("^(.-)/(.-)/(.-)/(.-)$")
  return sql("SELECT firing, version, pods FROM alert_state WHERE namespace = ? AND application = ? " ..
    "AND environment = ? AND metric = ?", ns, app, env, metric)[1]
end

local function leader()
  local rows = sql("SELECT s.name FROM server s WHERE s.lock_connection_id = IS_USED_LOCK(?)", names.leaders.alert)
  return rows[1] and rows[1].name
end

local function probers()
  local list = {}
  for _, r in ipairs(sql("SELECT DISTINCT server FROM sim_call WHERE action = 'probe' ORDER BY server")) do
    list[#list + 1] = r.server
  end
  return list
end

-- Edges of one target alternate as episodes do: FIRING (REPEAT)* RESOLVED ...
local function well_formed(key)
  local firing = false
  for i, e in ipairs(edges(key)) do
    -- FIRING starts an episode; REPEAT and RESOLVED belong to one.
    if (e.edge == "FIRING") == firing then
      return false, ("edge %d: %s while %s"):format(i, e.edge, firing and "firing" or "not firing")
    end
    firing = e.edge ~= "RESOLVED"
  end
  return true
end

local API = "shop/api/prod/cpu"

-- 1. One leader probes.
wait_until("a server leads the alert scan", function() return leader() ~= nil end, 20)
local first = leader()
wait_until("the leader probes", function() return #probers() > 0 end, 10)
expect(#probers() == 1 and probers()[1] == first, "only the leader probes", table.concat(probers(), ","))

-- 2. FIRING, once.
usage("api", "api-0", 900)
usage("api", "api-1", 100)
wait_until("pods over the threshold fire an alert", function() return count(API, "FIRING") >= 1 end, 10)
expect(count(API, "FIRING") == 1, "... announced exactly once", count(API, "FIRING"))
local fired = edges(API)[1]
expect(fired.threshold == 500 and fired.limit == 1000 and fired.percent == 50,
  "the FIRING payload names threshold 500m of limit 1000m at 50%", cjson.encode(fired))
expect(#fired.pods == 1 and fired.pods[1] == "api-0", "... and only the pod over it", cjson.encode(fired.pods))
expect(fired.since == fired.time and fired.duration_s == nil, "... starting now, without a duration")
local st = state(API)
expect(st.firing == 1 and st.pods == '["api-0"]', "alert_state: firing, with its pods", cjson.encode(st))
expect(#edges("shop/api/prod/memory") == 0, "memory under its threshold: no alert")

-- 3. REPEAT after `every`, once.
wait_until("still over after `every` (3s): a repeat", function() return count(API, "REPEAT") >= 1 end, 10)
expect(count(API, "REPEAT") == 1 and count(API, "FIRING") == 1, "... announced exactly once",
  cjson.encode(edges(API)))
local repeated = edges(API)[2]
expect(repeated.edge == "REPEAT" and repeated.since == fired.since, "the repeat carries the episode's start",
  cjson.encode(repeated))

-- 4. A probe error changes nothing: no RESOLVED although the pods are back
-- under, no REPEAT although `every` elapses.
fault("shop/api/prod", "probe", "metrics backend unavailable")
usage("api", "api-0", 10)
local before = state(API)
sleep(4.5)
local during = state(API)
expect(during.firing == 1 and during.version == before.version, "a probe error leaves the state alone",
  cjson.encode(during))
expect(#edges(API) == 2, "... and announces nothing", cjson.encode(edges(API)))
expect(server(first):log():find("alert probe failed, state unchanged: metrics backend unavailable", 1, true),
  "... but the leader logs it")

-- 5. RESOLVED, once, with the episode's duration.
clear_fault("shop/api/prod", "probe")
wait_until("pods back under: resolved", function() return count(API, "RESOLVED") >= 1 end, 10)
sleep(2)
local list = edges(API)
expect(#list == 3 and list[3].edge == "RESOLVED", "each edge announced exactly once: FIRING, REPEAT, RESOLVED",
  cjson.encode(list))
expect(list[3].duration_s and list[3].duration_s >= 7 and list[3].since == fired.since,
  "RESOLVED tells how long the episode lasted", cjson.encode(list[3]))
expect(state(API).firing == 0, "alert_state: not firing")
expect(#probers() == 1, "one leader all along (sticky lock)", table.concat(probers(), ","))

-- 6. The leader freezes (SIGSTOP): its lock session is reaped, another server
-- leads; woken up (SIGCONT), the old leader announces nothing twice.
server(first):kill("STOP")
usage("api", "api-0", 900)
local heir
wait_until("another server leads once the frozen leader's session is gone", function()
  heir = leader()
  return heir ~= nil and heir ~= first
end, 30)
wait_until("the new leader fires the new episode", function() return count(API, "FIRING") == 2 end, 10)
server(first):kill("CONT")
sleep(3)
usage("api", "api-0", 10)
wait_until("... and resolves it", function() return count(API, "RESOLVED") == 2 end, 10)
sleep(2)
local ok, why = well_formed(API)
expect(ok, "no edge announced twice across the leader change", why)
expect(count(API, "FIRING") == 2 and count(API, "RESOLVED") == 2, "two episodes, two FIRING, two RESOLVED",
  cjson.encode(edges(API)))

-- 7. A target removed from the policy while firing is resolved, once.
local OLDKEY = "shop/old/prod/cpu"
usage("old", "old-0", 900)
wait_until("shop/old fires", function() return count(OLDKEY, "FIRING") == 1 end, 10)
for _, s in ipairs(all) do
  local reloaded, err = s:reload(POLICY)
  expect(reloaded, s.name .. " reloads the policy without shop/old", err)
end
wait_until("removed from the policy while firing: resolved", function() return count(OLDKEY, "RESOLVED") == 1 end, 10)
sleep(2.5)
local old = edges(OLDKEY)
expect(#old == 2 and old[2].edge == "RESOLVED", "... once, and never fired again (no longer a target)",
  cjson.encode(old))
expect(old[2].threshold == cjson.null and old[2].limit == cjson.null and #old[2].pods == 1,
  "the RESOLVED payload of a removed target: no threshold, the last firing pods", cjson.encode(old[2]))
expect(state(OLDKEY).firing == 0, "alert_state of the removed target: not firing")
