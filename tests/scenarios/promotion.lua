-- ci: normal pass (scripts/test.sh runs each scenario in one pass; these even out the two)
-- Promotion (issue 39): a release live in one environment is released to the
-- next once it has been live there for `after` (promote = { FROM = { to =,
-- after = } }), as trigger `promotion` naming the release it came from,
-- with no build, exactly once whatever dies when: the database refuses a
-- second row for one release (pipeline.promoted_from is unique).
--   1. A chain dev → staging → prod. The promote leader is SIGKILLed while
--      the staging release waits to be promoted, and the prod release's
--      driver while it rolls out: each promotion made once, deployed once.
--   2. A newer staging release before the wait ends: the older one is never
--      promoted, the newer one is.
--   3. promote-now: three operators at once skip the wait; one promotion,
--      the others told it was made, everything in the audit log. A release
--      that is not the newest, a rollback, no reason: refused.
--   4. Into a freeze: the promotion waits INITIALIZED, held; an override
--      releases it.
--   5. Approvals: the promoted release waits for one; the person who created
--      the release it came from does not count (two-person rule).
local function db_now() return tonumber(sql("SELECT UNIX_TIMESTAMP(NOW(6)) AS t")[1].t) end
local function minute(t) return os.date("!%Y-%m-%d %H:%M", math.floor(t)) end
local now = math.floor(db_now())
local frozen_until = math.floor(now / 60) * 60 + 3600
release_rules { freezes = { { name = "no-live", from = now - 3600, to = frozen_until,
  environments = { live = true } } } }
servers { count = 3, policy = ([[
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
deploy  { timeout = "5s" }
gateway "simulated" { build = "300ms", deploy = "0s", rollout = "500ms" }
freeze "no-live" { from = "%s", to = "%s", environments = { "live" } }
application "shop/api" { environments = { "dev", "staging", "prod" },
  promote = { dev = { to = "staging" }, staging = { to = "prod", after = "5s" } } }
application "shop/web" { environments = { "staging", "prod" }, promote = { staging = { to = "prod", after = "4s" } } }
application "shop/frz" { environments = { "test", "live" }, promote = { test = { to = "live" } } }
application "shop/apr" { environments = { "staging", "prod" }, promote = { staging = { to = "prod" } },
  approvals = { prod = 1 } }
]]):format(minute(now - 3600), minute(frozen_until)) }

-- The promotions made from release `from`: their rows.
local function promotions(from)
  return sql("SELECT id, environment, status, trigger_type, artifact, source, message FROM pipeline " ..
    "WHERE promoted_from = ?", from.id)
end
-- The promotion of `from`, once there is one (a pipeline object), or nil.
local function promoted(from, seconds)
  local row
  wait_until("a release promoted from " .. from.env .. " (" .. from.id .. ")", function()
    row = promotions(from)[1]
    return row ~= nil
  end, seconds or 20)
  return row and setmetatable({ id = row.id, app = from.app, env = row.environment }, getmetatable(from))
end
local function leader_of_promote()
  local rows = sql("SELECT s.name FROM server s WHERE s.lock_connection_id = IS_USED_LOCK(?)",
    oops.locks.names.leaders.promote)
  return rows[1] and rows[1].name
end

-- 1. dev → staging → prod, kills on the way.
local dev = create { app = "shop/api", env = "dev", artifact = "api-1", source = '{"commit":"c0ffee"}' }
expect(dev:wait("SUCCEEDED", 30), "the dev release went live", dev:message())
local staging = promoted(dev)
expect(staging ~= nil, "dev promotes to staging at once (after 0)")
if not staging then return end
local row = staging:row()
expect(row.trigger_type == "promotion" and row.promoted_from == dev.id and row.artifact == "api-1" and
  row.source == '{"commit":"c0ffee"}', "... as trigger promotion naming the dev release, its artifact and source",
  ("%s %s %s %s"):format(row.trigger_type, tostring(row.promoted_from), tostring(row.artifact), tostring(row.source)))
expect(staging:wait("SUCCEEDED", 30), "the staging promotion went live", staging:message())
expect(staging:calls("build_submit") == 0 and staging:calls("deploy") == 1, "... with no build, deployed once",
  staging:calls("build_submit") .. " builds, " .. staging:calls("deploy") .. " deploys")
local live_at = db_now()
local lead = leader_of_promote()
expect(lead ~= nil, "one server leads promotion")
sleep(2)
expect(#promotions(staging) == 0, "nothing reaches prod before the 5 s wait", #promotions(staging) .. " made")
server(lead):kill("KILL")
note("killed " .. lead .. ", the promote leader, while the staging release waits")
local prod = promoted(staging, 30)
expect(prod ~= nil, "another server took the lead and promoted it to prod")
if not prod then return end
local made_at = tonumber(sql("SELECT UNIX_TIMESTAMP(created_at) AS t FROM pipeline WHERE id = ?", prod.id)[1].t)
expect(made_at - live_at >= 4.9, "... not before its 5 s live in staging", ("%.2f s"):format(made_at - live_at))
server(lead):start()
-- Its rollout never ready by itself: its driver is killed while it rolls out.
expect(prod:wait("ROLLING_OUT", 30), "the prod promotion rolls out", prod:message())
sql("UPDATE sim_job SET ready_at = NOW(6) + INTERVAL 1 HOUR WHERE pipeline_id = ? AND kind = 'rollout'", prod.id)
wait_until("the prod promotion has a driver", function() return prod:driver() ~= nil end, 10)
local driver = prod:driver()
if driver then server(driver):kill("KILL") end
note("killed " .. tostring(driver) .. ", the prod promotion's driver, while it rolls out")
wait_until("another server drives the prod promotion", function()
  local d = prod:driver()
  return d ~= nil and d ~= driver
end, 20)
sql("UPDATE sim_job SET ready_at = NOW(6) WHERE pipeline_id = ? AND kind = 'rollout'", prod.id)
expect(prod:wait("SUCCEEDED", 30), "the prod promotion went live", prod:message())
if driver then server(driver):start() end
expect(#promotions(dev) == 1 and #promotions(staging) == 1, "each release was promoted once",
  #promotions(dev) .. " " .. #promotions(staging))
expect(prod:calls("deploy") == 1 and prod:calls("build_submit") == 0, "the prod promotion deployed once, no build",
  prod:calls("deploy") .. " deploys")
expect(#promotions(prod) == 0, "prod promotes nowhere")

-- 2. A newer staging release before the wait ends.
local w1 = create { app = "shop/web", env = "staging", artifact = "web-1" }
expect(w1:wait("SUCCEEDED", 30), "web-1 went live in staging", w1:message())
local w2 = create { app = "shop/web", env = "staging", artifact = "web-2" }
expect(w2:wait("SUCCEEDED", 30), "web-2 went live in staging before web-1's wait ended", w2:message())
local wp = promoted(w2, 20)
expect(wp ~= nil and wp:wait("SUCCEEDED", 30), "web-2 was promoted to prod")
expect(#promotions(w1) == 0, "web-1 never was: a newer release cancelled it", #promotions(w1) .. " made")

-- 3. promote-now: the wait skipped, three operators at once.
local w3 = create { app = "shop/web", env = "staging", artifact = "web-3" }
expect(w3:wait("SUCCEEDED", 30), "web-3 went live in staging", w3:message())
local answers, fns = {}, {}
for i, person in ipairs({ "alice", "bob", "dave" }) do
  fns[i] = function()
    answers[i] = { oopsctl_as(person, "promote-now", w3.id, "--to", "prod", "--reason", "hotfix " .. person) }
  end
end
require("oops.tasks").all(fns, "promote-now") -- (the scenario runs in a task)
local ids, made = {}, 0
for _, a in ipairs(answers) do
  ids[#ids + 1] = (a[2] or ""):match("%S+") or "?"
  if a[1] == 0 and not (a[3] or ""):find("promoted already", 1, true) then made = made + 1 end
end
local all_ok = answers[1][1] == 0 and answers[2][1] == 0 and answers[3][1] == 0
expect(all_ok and made == 1 and ids[1] == ids[2] and ids[2] == ids[3],
  "three promote-now at once: one made it, the others were told it was made, all name the same pipeline",
  table.concat(ids, " ") .. " / " .. made .. " made")
expect(#promotions(w3) == 1, "web-3 was promoted once", #promotions(w3) .. " made")
local p3 = promotions(w3)[1]
local ev = sql("SELECT actor, reason FROM pipeline_event WHERE pipeline_id = ? AND event_type = 'CREATED'", p3.id)[1]
expect(ev and ev.actor and ev.reason and ev.reason:find("hotfix", 1, true),
  "its creation names the operator and the reason", ev and (tostring(ev.actor) .. ": " .. tostring(ev.reason)))
local audit = sql("SELECT outcome, COUNT(*) AS n FROM operator_action WHERE action = 'promote-now' " ..
  "GROUP BY outcome ORDER BY outcome")
local by = {}
for _, r in ipairs(audit) do by[r.outcome] = tonumber(r.n) end
expect(by.done == 1 and by.already == 2, "the audit log has one promotion and two told it was made",
  ("done %s, already %s"):format(tostring(by.done), tostring(by.already)))
local rc, _, err = oopsctl("promote-now", w1.id, "--to", "prod", "--reason", "old one")
expect(rc == 3 and err:find("newer pipeline", 1, true), "promote-now of a release no longer the newest: exit 3",
  tostring(rc) .. " " .. tostring(err))
rc, _, err = oopsctl("promote-now", w3.id, "--to", "prod")
expect(rc == 1 and err:find("--reason", 1, true), "promote-now without a reason: exit 1", tostring(err))
expect(#promotions(w3) == 1 and #promotions(w1) == 0, "nothing more was made")

-- 4. Into a freeze: held INITIALIZED, an override releases it.
local t1 = create { app = "shop/frz", env = "test", artifact = "frz-1" }
expect(t1:wait("SUCCEEDED", 30), "frz-1 went live in test", t1:message())
local lv = promoted(t1, 20)
if not lv then return end
wait_until("the promotion into the freeze is held, saying so", function()
  local r = lv:row()
  return r.status == "INITIALIZED" and r.hold == "freeze" and (r.message or ""):find("freeze no-live", 1, true)
end, 15)
rc, _, err = oopsctl("deploy", lv.id, "--override", "--reason", "the fix must ship")
expect(rc == 0, "an override releases it", tostring(err))
expect(lv:wait("SUCCEEDED", 30), "... and it deploys inside the freeze", lv:message())

-- 5. Approvals: carol created the staging release, so her approval of its
-- promotion does not count; bob's does.
local s1 = create { app = "shop/apr", env = "staging", artifact = "apr-1", as = "carol" }
expect(s1:wait("SUCCEEDED", 30), "apr-1 went live in staging", s1:message())
local ap = promoted(s1, 20)
if not ap then return end
wait_until("the promotion waits for an approval", function() return ap:row().hold == "approval" end, 15)
rc, _, err = oopsctl_as("carol", "approve", ap.id, "--reason", "mine")
expect(rc == 1 and err:find("two-person rule", 1, true),
  "carol, who created the release it came from, cannot approve it", tostring(rc) .. " " .. tostring(err))
rc, _, err = oopsctl_as("bob", "approve", ap.id, "--reason", "checked")
expect(rc == 0, "bob approves it", tostring(err))
expect(ap:wait("SUCCEEDED", 30), "... and it deploys", ap:message())
