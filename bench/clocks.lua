-- needs: own database
-- bench: restarts on the database's minute when the servers' clocks disagree
-- with it. Run as `oopsctl scenario bench/clocks.lua` (its own MariaDB);
-- nothing here asserts a time: the lateness of every occurrence goes to the
-- JSON in BENCH_OUT (default: printed as a note).
--
--   BENCH_MINUTES  how many minute occurrences to measure (default 4)
--   BENCH_SKEW     seconds the servers' clocks are off (default 7): one server
--                  runs that far ahead, one that far behind, one on time
--
-- Three servers under libfaketime, ten applications with a minute cron
-- ("* * * * *", five fields: the restart scan wakes at minute boundaries),
-- grace 20s. After each minute the restart leader is SIGKILLed (and started
-- again a minute later), so every minute after the first is fired by a
-- leader that just took over, whichever clock it has. Lateness = fired_at - occurrence, on the database's clock.
local json = require("oops.json")
local MINUTES = tonumber(os.getenv("BENCH_MINUTES") or "") or 4
local SKEW = tonumber(os.getenv("BENCH_SKEW") or "") or 7
local OUT = os.getenv("BENCH_OUT")

local ahead, why = skewed_clock(SKEW)
if not ahead then
  skip(why)
  return
end

local apps = {}
for i = 1, 10 do
  apps[#apps + 1] = ('application "bench/a%d" { environments = { "prod" }, restart = { prod = "* * * * *" } }')
    :format(i)
end
servers { count = 3, envs = { ahead, skewed_clock(-SKEW), skewed_clock(0) }, policy = [[
scan     { interval = "500ms" }
locks    { validate_every = "1s" }
restarts { grace = "20s" }
gateway "simulated" {}
]] .. table.concat(apps, "\n") .. "\n" }

local start = tonumber(sql("SELECT UNIX_TIMESTAMP(NOW()) AS t")[1].t)
local first_minute = (start // 60 + 1) * 60
local late, missed, by, down = {}, 0, {}, nil
for m = 0, MINUTES - 1 do
  local occ = first_minute + 60 * m
  wait_until("minute " .. m .. " handled for every application", function()
    return sql("SELECT COUNT(*) AS n FROM restart_run WHERE UNIX_TIMESTAMP(occurrence) = ? AND outcome IS NOT NULL",
      occ)[1].n == #apps
  end, 90)
  local rows = sql("SELECT fired_by, outcome, TIMESTAMPDIFF(MICROSECOND, occurrence, fired_at) / 1e6 AS late " ..
    "FROM restart_run WHERE UNIX_TIMESTAMP(occurrence) = ?", occ)
  for _, r in ipairs(rows) do
    if r.outcome == "missed" then missed = missed + 1 else late[#late + 1] = tonumber(r.late) end
    by[r.fired_by] = (by[r.fired_by] or 0) + 1
  end
  -- The server killed a minute ago comes back; this minute's leader goes
  -- down until the next minute is fired (by another server, another clock).
  if down then server(down):start(); down = nil end
  local leader = rows[1] and rows[1].fired_by
  if leader and m < MINUTES - 1 then
    server(leader):kill("KILL")
    down = leader
  end
end
table.sort(late)
local function q(p) return late[math.max(1, math.ceil(p * #late))] end
local doc = { case = "clocks", skew_s = SKEW, minutes = MINUTES, applications = #apps, fired = #late,
  missed = missed, late_p50_s = q(0.5), late_p90_s = q(0.9), late_max_s = late[#late], fired_by = by }
if OUT then require("oops.scenario.files").write(OUT, json.encode(doc) .. "\n") end
note(json.encode(doc))
expect(missed == 0, "no occurrence missed", missed .. " missed")
