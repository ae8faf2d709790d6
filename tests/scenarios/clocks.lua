-- ci: normal pass (scripts/test.sh runs each scenario in one pass; these even out the two)
-- Servers whose clocks disagree with the database's (libfaketime: one runs
-- 7 s ahead, one 7 s behind) fire a minute cron on the database's minute:
-- every occurrence once, none missed, across a leader change, with a grace
-- (20 s) shorter than the minute a server judging by its own clock would
-- lose. Whether an occurrence is due, late or missed, and when the scan
-- wakes, follow the database's clock (leader.lua measures the offset).
local ahead, why = skewed_clock(7)
if not ahead then
  skip(why)
  return
end

local all = servers { count = 2, envs = { ahead, skewed_clock(-7) }, policy = [[
scan     { interval = "500ms" }
locks    { validate_every = "1s" }
restarts { grace = "20s" }
gateway "simulated" {}
application "shop/api" { environments = { "prod" }, restart = { prod = "* * * * *" } }
]] }

-- The servers really are skewed: their log lines carry their own clock.
local db_now = function() return tonumber(sql("SELECT UNIX_TIMESTAMP(NOW(6)) AS t")[1].t) end
local started = db_now()
local function epoch_of(ts) -- "2026-12-01T01:50:07.383Z" → seconds (UTC, whatever this host's TZ)
  local y, mo, d, h, mi, sec = ts:match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):([%d.]+)Z$")
  y, mo = tonumber(y), tonumber(mo)
  if mo <= 2 then y, mo = y - 1, mo + 12 end
  local days = 365 * y + y // 4 - y // 100 + y // 400 + (153 * (mo - 3) + 2) // 5 + tonumber(d) - 719469
  return days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(sec)
end
for i, want in ipairs({ 7, -7 }) do
  local ts = all[i]:log():match('ts=(%S+) level=info server=s' .. i .. ' msg="started:')
  local skew = ts and (epoch_of(ts) - started) or 0
  expect(math.abs(skew - want) < 3, ("s%d's clock runs %+ds from the database's"):format(i, want),
    ("measured %+.1fs"):format(skew))
end
local function fired(after)
  return sql("SELECT UNIX_TIMESTAMP(occurrence) AS o, fired_by, outcome, " ..
    "TIMESTAMPDIFF(MICROSECOND, occurrence, fired_at) / 1e6 AS late FROM restart_run " ..
    "WHERE UNIX_TIMESTAMP(occurrence) > ? ORDER BY occurrence", after)
end

local first
expect(wait_until("the first minute's restart", function()
  first = fired(started)[1]
  return first ~= nil and first.outcome ~= nil
end, 75), "the first occurrence was handled")
if not (first and first.outcome) then return end
local leader = first.fired_by
note(("first occurrence: %s by %s, %.2fs after its minute"):format(
  tostring(first.outcome), leader, tonumber(first.late) or -1))
server(leader):kill("KILL")

local second
expect(wait_until("the next minute's restart, by the other server", function()
  second = fired(first.o)[1]
  return second ~= nil and second.outcome ~= nil
end, 75), "the second occurrence was handled")
if not (second and second.outcome) then return end
note(("second occurrence: %s by %s, %.2fs after its minute"):format(
  tostring(second.outcome), tostring(second.fired_by), tonumber(second.late) or -1))

for i, r in ipairs({ first, second }) do
  expect(r.outcome == "ok", ("occurrence %d fired, not missed (grace 20s)"):format(i), r.outcome)
end
expect(second.fired_by ~= leader, "the second fired after the leader change", second.fired_by)
expect(second.o - first.o == 60, "consecutive minutes, none skipped", tostring(second.o - first.o))
local calls = sql("SELECT COUNT(*) AS n FROM sim_call WHERE action = 'restart'")[1].n
local runs = sql("SELECT COUNT(*) AS n FROM restart_run WHERE outcome = 'ok'")[1].n
expect(calls == runs, "each fired occurrence made one restart call", ("%d calls, %d fired"):format(calls, runs))
for _, s in ipairs(all) do if not s:alive() then s:start() end end
