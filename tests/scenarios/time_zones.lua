-- ci: normal pass (scripts/test.sh runs each scenario in one pass; these even out the two)
-- Servers in different time zones (TZ=Asia/Kolkata, +05:30, and
-- TZ=America/New_York, -05:00/-04:00) agree on every restart: cron is read
-- in the policy's zone (restarts.timezone, default UTC), never the host's.
-- Two one-shot schedules a few seconds ahead, written in UTC hours and
-- minutes, each fire once at their instant, across a leader change. Read in
-- either host's zone they would be hours away and nothing would fire.
local zoneinfo = io.open("/usr/share/zoneinfo/Asia/Kolkata")
if not zoneinfo then
  skip("no time zone database (apt-get install tzdata)")
  return
end
zoneinfo:close()

local now = tonumber(sql("SELECT UNIX_TIMESTAMP(NOW()) AS t")[1].t)
local t1, t2 = now + 15, now + 35
local function cron_at(t) -- "S M H D Mon *" of instant t, in UTC
  local d = os.date("!*t", t)
  return ("%d %d %d %d %d *"):format(d.sec, d.min, d.hour, d.day, d.month)
end
local all = servers { count = 2, envs = { { TZ = "Asia/Kolkata" }, { TZ = "America/New_York" } },
  policy = ([[
scan     { interval = "500ms" }
locks    { validate_every = "1s" }
restarts { grace = "10s" }
gateway "simulated" {}
application "shop/a" { environments = { "prod" }, restart = { prod = %q } }
application "shop/b" { environments = { "prod" }, restart = { prod = %q } }
]]):format(cron_at(t1), cron_at(t2)) }

local function run_of(app, t)
  return sql("SELECT fired_by, outcome FROM restart_run WHERE application = ? AND UNIX_TIMESTAMP(occurrence) = ?",
    app, t)[1]
end
local a
expect(wait_until("shop/a's restart at its instant", function()
  a = run_of("a", t1)
  return a ~= nil and a.outcome ~= nil
end, 40), "the first schedule fired", a and a.outcome)
local leader = a and a.fired_by
if leader then server(leader):kill("KILL") end
local b
expect(wait_until("shop/b's restart at its instant, by the other server", function()
  b = run_of("b", t2)
  return b ~= nil and b.outcome ~= nil
end, 50), "the second schedule fired", b and b.outcome)
expect(a and a.outcome == "ok" and b and b.outcome == "ok", "both fired (not missed)",
  tostring(a and a.outcome) .. ", " .. tostring(b and b.outcome))
expect(b and leader and b.fired_by ~= leader, "the second after the leader change",
  tostring(b and b.fired_by) .. " after " .. tostring(leader))
local runs = sql("SELECT COUNT(*) AS n FROM restart_run")[1].n
local calls = sql("SELECT COUNT(*) AS n FROM sim_call WHERE action = 'restart'")[1].n
expect(runs == 2 and calls == 2, "exactly the two occurrences, each one call",
  ("%d runs, %d calls"):format(runs, calls))
for _, s in ipairs(all) do if not s:alive() then s:start() end end
