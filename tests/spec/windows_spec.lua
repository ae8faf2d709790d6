-- oops.windows (deploy windows and freezes) and the civil-time bindings it
-- stands on (oops.cron.civil, oops.cron.epoch). Run through the real binary:
-- the time zones are the system's (tzdata). The 2026 changes used here, as
-- `zdump -v -c 2026,2027 ZONE` prints them:
--   Europe/Paris      Mar 29 01:00 UT: 02:00 CET  -> 03:00 CEST
--                     Oct 25 01:00 UT: 03:00 CEST -> 02:00 CET
--   America/New_York  Mar  8 07:00 UT: 02:00 EST  -> 03:00 EDT
--                     Nov  1 06:00 UT: 02:00 EDT  -> 01:00 EST
--   Australia/Sydney  Apr  4 16:00 UT: 03:00 AEDT -> 02:00 AEST (Apr 5 local)
--                     Oct  3 16:00 UT: 02:00 AEST -> 03:00 AEDT (Oct 4 local)
local oops = require("oops")
local policy = require("oops.policy")
local w = require("oops.windows")

-- An epoch from a UTC date and time, by plain arithmetic (not the code under test).
local function utc(y, m, d, h, mi, s)
  if m <= 2 then y = y - 1 end
  local era = (y >= 0 and y or y - 399) // 400
  local yoe = y - era * 400
  local doy = (153 * (m + (m > 2 and -3 or 9)) + 2) // 5 + d - 1
  local days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
  return days * 86400 + (h or 0) * 3600 + (mi or 0) * 60 + (s or 0)
end

local function spec(text) return assert(w.parse_window(text)) end
local function specs(...)
  local out = {}
  for i, t in ipairs({ ... }) do out[i] = spec(t) end
  return out
end

local function days_of(...)
  local d = {}
  for _, i in ipairs({ ... }) do d[i] = true end
  return d
end

local PARIS, NY, SYDNEY = "Europe/Paris", "America/New_York", "Australia/Sydney"

describe("the arithmetic of this spec", function()
  it("agrees with date(1) and zdump", function()
    assert.are.equal(0, utc(1970, 1, 1))
    assert.are.equal(1774746000, utc(2026, 3, 29, 1, 0, 0)) -- date -u -d 2026-03-29T01:00Z +%s
    assert.are.equal(1792888200, utc(2026, 10, 25, 0, 30, 0))
  end)
end)

describe("oops.cron.civil", function()
  it("gives the wall clock, weekday (1 = Monday), DST flag and zone abbreviation", function()
    assert.are.same({ year = 2026, month = 3, day = 29, hour = 3, min = 0, sec = 0, wday = 7, isdst = true,
      zone = "CEST" }, oops.cron.civil(utc(2026, 3, 29, 1, 0, 0), PARIS))
    assert.are.same({ year = 2026, month = 3, day = 29, hour = 1, min = 59, sec = 59, wday = 7, isdst = false,
      zone = "CET" }, oops.cron.civil(utc(2026, 3, 29, 0, 59, 59), PARIS))
    assert.are.same({ year = 2027, month = 1, day = 1, hour = 0, min = 0, sec = 0, wday = 5, isdst = false,
      zone = "UTC" }, oops.cron.civil(utc(2027, 1, 1), "UTC"))
    assert.are.equal(4, oops.cron.civil(0, "UTC").wday) -- 1970-01-01 was a Thursday
    local c = oops.cron.civil(utc(2026, 4, 4, 15, 30), SYDNEY)
    assert.are.same({ 5, 2, 30, true, "AEDT" }, { c.day, c.hour, c.min, c.isdst, c.zone })
  end)
end)

describe("oops.cron.epoch", function()
  local function at(y, m, d, h, mi, tz)
    return { oops.cron.epoch({ year = y, month = m, day = d, hour = h, min = mi }, tz) }
  end

  it("gives one epoch (twice) for an ordinary wall-clock time", function()
    assert.are.same({ utc(2026, 12, 20), utc(2026, 12, 20) }, at(2026, 12, 20, 0, 0, "UTC"))
    assert.are.same({ utc(2026, 7, 1, 7), utc(2026, 7, 1, 7) }, at(2026, 7, 1, 9, 0, PARIS))
    assert.are.same({ utc(2027, 1, 4, 7), utc(2027, 1, 4, 7) }, at(2027, 1, 4, 8, 0, PARIS))
  end)

  it("gives both occurrences, earliest first, in a fall-back overlap", function()
    assert.are.same({ utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30) }, at(2026, 10, 25, 2, 30, PARIS))
    assert.are.same({ utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30) }, at(2026, 11, 1, 1, 30, NY))
    assert.are.same({ utc(2026, 4, 4, 15, 30), utc(2026, 4, 4, 16, 30) }, at(2026, 4, 5, 2, 30, SYDNEY))
  end)

  it("gives the gap's end for a time a spring-forward skips", function()
    assert.are.same({ utc(2026, 3, 29, 1), utc(2026, 3, 29, 1) }, at(2026, 3, 29, 2, 30, PARIS))
    assert.are.same({ utc(2026, 3, 29, 1), utc(2026, 3, 29, 1) }, at(2026, 3, 29, 2, 0, PARIS))
    assert.are.same({ utc(2026, 3, 8, 7), utc(2026, 3, 8, 7) }, at(2026, 3, 8, 2, 59, NY))
    assert.are.same({ utc(2026, 10, 3, 16), utc(2026, 10, 3, 16) }, at(2026, 10, 4, 2, 30, SYDNEY))
    -- the minutes either side are ordinary
    assert.are.same({ utc(2026, 3, 29, 0, 59), utc(2026, 3, 29, 0, 59) }, at(2026, 3, 29, 1, 59, PARIS))
    assert.are.same({ utc(2026, 3, 29, 1), utc(2026, 3, 29, 1) }, at(2026, 3, 29, 3, 0, PARIS))
  end)

  it("raises for a field out of range or a date that does not exist", function()
    assert.has_error(function() oops.cron.epoch({ year = 2026, month = 2, day = 29, hour = 0, min = 0 }, "UTC") end,
      "oops.cron.epoch: day must be a whole number from 1 to 28")
    assert.has_error(function() oops.cron.epoch({ year = 2026, month = 13, day = 1, hour = 0, min = 0 }) end,
      "oops.cron.epoch: month must be a whole number from 1 to 12")
    assert.has_error(function() oops.cron.epoch({ year = 2026, month = 1, day = 1, hour = 24, min = 0 }) end,
      "oops.cron.epoch: hour must be a whole number from 0 to 23")
    assert.has_error(function() oops.cron.epoch({ year = 2026, month = 1, day = 1, hour = 0 }) end,
      "oops.cron.epoch: min must be a whole number from 0 to 59")
    assert.has_error(function() oops.cron.epoch("2026-01-01 00:00") end)
    assert.are.same({ utc(2028, 2, 29), utc(2028, 2, 29) },
      { oops.cron.epoch({ year = 2028, month = 2, day = 29, hour = 0, min = 0 }, "UTC") })
  end)

  it("leaves the process's time zone as it was", function()
    local before = os.getenv("TZ")
    oops.cron.civil(0, SYDNEY)
    oops.cron.epoch({ year = 2026, month = 1, day = 1, hour = 0, min = 0 }, NY)
    assert.are.equal(before, os.getenv("TZ"))
  end)
end)

describe("windows.parse_window", function()
  it("reads days, ranges (also wrapping), lists and daily, and [start, end) in minutes", function()
    assert.are.same({ text = "Mon-Fri 09:00-17:00", days = days_of(1, 2, 3, 4, 5), start = 540, stop = 1020 },
      spec("Mon-Fri 09:00-17:00"))
    assert.are.same(days_of(6, 7), spec("Sat,Sun 10:00-12:00").days)
    assert.are.same({ text = "Fri-Mon 22:00-24:00", days = days_of(5, 6, 7, 1), start = 1320, stop = 1440 },
      spec("Fri-Mon 22:00-24:00"))
    assert.are.same(days_of(1, 2, 3, 5), spec("Mon-Wed,Fri 08:00-09:30").days)
    assert.are.same({ text = "daily 00:00-24:00", days = days_of(1, 2, 3, 4, 5, 6, 7), start = 0, stop = 1440 },
      spec("daily 00:00-24:00"))
    assert.are.same({ days = days_of(7), start = 0, stop = 1 }, (function()
      local s = spec("Sun 00:00-00:01")
      return { days = s.days, start = s.start, stop = s.stop }
    end)())
    assert.are.same(days_of(3), spec("Wed-Wed 10:00-11:00").days)
    assert.are.equal(540, spec("  Mon   09:00-10:00 ").start)
  end)

  it("refuses each bad form, saying why", function()
    local BAD = {
      { 42, 'must be a string like "Mon-Fri 09:00-17:00", not a number' },
      { "Mon-Fri", '"Mon-Fri": not a window like "Mon-Fri 09:00-17:00" (days, then HH:MM-HH:MM)' },
      { "Mon 09:00-10:00 extra", '"Mon 09:00-10:00 extra": not a window like "Mon-Fri 09:00-17:00" ' ..
        "(days, then HH:MM-HH:MM)" },
      { "Mon 09:00", '"Mon 09:00": not a window like "Mon-Fri 09:00-17:00" (days, then HH:MM-HH:MM)' },
      { "Mon-Fry 09:00-17:00", '"Mon-Fry 09:00-17:00": unknown day "Fry" (days are Mon, Tue, Wed, Thu, Fri, ' ..
        "Sat, Sun; ranges like Mon-Fri, lists like Sat,Sun, or daily)" },
      { "mon 09:00-17:00", '"mon 09:00-17:00": unknown day "mon" (days are Mon, Tue, Wed, Thu, Fri, ' ..
        "Sat, Sun; ranges like Mon-Fri, lists like Sat,Sun, or daily)" },
      { "Mon,,Tue 09:00-10:00", '"Mon,,Tue 09:00-10:00": unknown day "" (days are Mon, Tue, Wed, Thu, Fri, ' ..
        "Sat, Sun; ranges like Mon-Fri, lists like Sat,Sun, or daily)" },
      { "Mon-Wed,Tue 09:00-10:00", '"Mon-Wed,Tue 09:00-10:00": Tue is listed twice' },
      { "Mon 9:00-17:00", '"Mon 9:00-17:00": start "9:00" is not HH:MM' },
      { "Mon 09:00-5pm", '"Mon 09:00-5pm": end "5pm" is not HH:MM' },
      { "Mon 09:00-25:00", '"Mon 09:00-25:00": end 25:00 out of range 00:00-24:00' },
      { "Mon 09:60-10:00", '"Mon 09:60-10:00": start 09:60 out of range 00:00-24:00' },
      { "Mon 09:00-24:01", '"Mon 09:00-24:01": end 24:01 out of range 00:00-24:00' },
    }
    for _, case in ipairs(BAD) do
      assert.are.same({ nil, case[2] }, { w.parse_window(case[1]) }, tostring(case[1]))
    end
  end)

  it('refuses a window whose end is not after its start ("a window whose end is before its start")', function()
    for _, text in ipairs({ "Mon 17:00-09:00", "Mon 09:00-09:00", "Mon 24:00-24:00", "Fri 22:00-02:00" }) do
      local s, why = w.parse_window(text)
      assert.is_nil(s)
      assert.are.equal(('%q: a window whose end is before its start (a window never crosses midnight: ' ..
        'write two, like "Fri 22:00-24:00" and "Sat 00:00-02:00")'):format(text), why)
    end
  end)
end)

describe("windows.parse_local", function()
  it("reads YYYY-MM-DD HH:MM, real dates only", function()
    assert.are.same({ year = 2026, month = 12, day = 20, hour = 0, min = 0 }, w.parse_local("2026-12-20 00:00"))
    assert.are.same({ year = 2028, month = 2, day = 29, hour = 23, min = 59 }, w.parse_local("2028-02-29 23:59"))
    assert.are.same({ year = 2000, month = 2, day = 29, hour = 12, min = 0 }, w.parse_local("2000-02-29 12:00"))
  end)

  it("refuses each bad form, saying why", function()
    local like = 'a local time like "2026-12-20 00:00" (YYYY-MM-DD HH:MM)'
    local BAD = {
      { 20261220, "20261220: must be " .. like },
      { "2026-12-20", '"2026-12-20": not ' .. like },
      { "2026-12-20T00:00", '"2026-12-20T00:00": not ' .. like },
      { "2026-12-20 0:00", '"2026-12-20 0:00": not ' .. like },
      { "2026-13-01 00:00", '"2026-13-01 00:00": month 13 out of range 1-12' },
      { "2026-00-10 00:00", '"2026-00-10 00:00": month 0 out of range 1-12' },
      { "2026-02-29 00:00", '"2026-02-29 00:00": day 29 out of range 1-28 (2026-02 has 28 days)' },
      { "2100-02-29 00:00", '"2100-02-29 00:00": day 29 out of range 1-28 (2100-02 has 28 days)' },
      { "2026-04-31 00:00", '"2026-04-31 00:00": day 31 out of range 1-30 (2026-04 has 30 days)' },
      { "2026-12-00 00:00", '"2026-12-00 00:00": day 0 out of range 1-31 (2026-12 has 31 days)' },
      { "2026-12-20 24:00", '"2026-12-20 24:00": hour 24 out of range 0-23' },
      { "2026-12-20 23:60", '"2026-12-20 23:60": minute 60 out of range 0-59' },
      { "0000-01-01 00:00", '"0000-01-01 00:00": year 0 out of range 1-9999' },
    }
    for _, case in ipairs(BAD) do
      assert.are.same({ nil, case[2] }, { w.parse_local(case[1]) }, tostring(case[1]))
    end
  end)
end)

describe("windows.in_window", function()
  local office = specs("Mon-Fri 09:00-17:00", "Sat 10:00-12:00")

  it("holds [start, end) of the local wall clock, on the window's days", function()
    assert.is_true(w.in_window(office, utc(2026, 12, 7, 9), "UTC")) -- Mon 09:00
    assert.is_true(w.in_window(office, utc(2026, 12, 7, 16, 59, 59), "UTC"))
    assert.is_false(w.in_window(office, utc(2026, 12, 7, 17), "UTC"))
    assert.is_false(w.in_window(office, utc(2026, 12, 7, 8, 59, 59), "UTC"))
    assert.is_true(w.in_window(office, utc(2026, 12, 12, 11), "UTC")) -- Sat
    assert.is_false(w.in_window(office, utc(2026, 12, 13, 11), "UTC")) -- Sun
    assert.is_false(w.in_window({}, utc(2026, 12, 7, 10), "UTC"))
  end)

  it("reads the zone's wall clock, not UTC", function()
    -- Mon 2026-12-07 08:30 UTC is 09:30 in Paris (CET)
    assert.is_true(w.in_window(office, utc(2026, 12, 7, 8, 30), PARIS))
    assert.is_false(w.in_window(office, utc(2026, 12, 7, 8, 30), "UTC"))
    -- in summer Paris is 2 hours ahead: 07:00 UTC is 09:00 CEST
    assert.is_true(w.in_window(office, utc(2026, 7, 6, 7), PARIS))
    assert.is_false(w.in_window(office, utc(2026, 7, 6, 6, 59), PARIS))
  end)

  it("holds a window in a repeated hour during both of its occurrences (New York, Nov 1)", function()
    local s = specs("Sun 01:00-02:00")
    assert.is_false(w.in_window(s, utc(2026, 11, 1, 4, 59, 59), NY)) -- 00:59:59 EDT
    assert.is_true(w.in_window(s, utc(2026, 11, 1, 5), NY))           -- 01:00 EDT
    assert.is_true(w.in_window(s, utc(2026, 11, 1, 5, 59, 59), NY))   -- 01:59:59 EDT
    assert.is_true(w.in_window(s, utc(2026, 11, 1, 6), NY))           -- 01:00 EST
    assert.is_true(w.in_window(s, utc(2026, 11, 1, 6, 59, 59), NY))   -- 01:59:59 EST
    assert.is_false(w.in_window(s, utc(2026, 11, 1, 7), NY))          -- 02:00 EST
  end)

  it("holds a window a spring-forward cuts short for the part that exists (Paris, Mar 29)", function()
    local s = specs("Sun 01:30-03:30")
    assert.is_true(w.in_window(s, utc(2026, 3, 29, 0, 59, 59), PARIS)) -- 01:59:59 CET
    assert.is_true(w.in_window(s, utc(2026, 3, 29, 1), PARIS))         -- 03:00 CEST
    assert.is_false(w.in_window(s, utc(2026, 3, 29, 1, 30), PARIS))    -- 03:30 CEST
  end)
end)

describe("windows.next_open", function()
  it("is now when inside, else the next start", function()
    local office = specs("Mon-Fri 09:00-17:00")
    local mon = utc(2026, 12, 7, 10)
    assert.are.equal(mon, w.next_open(office, mon, "UTC"))
    assert.are.equal(utc(2026, 12, 8, 9), w.next_open(office, utc(2026, 12, 7, 17), "UTC"))
    assert.are.equal(utc(2026, 12, 14, 9), w.next_open(office, utc(2026, 12, 11, 17), "UTC")) -- Fri -> Mon
    assert.are.equal(utc(2026, 12, 7, 9), w.next_open(office, utc(2026, 12, 7, 8, 59, 59), "UTC"))
    -- the earliest of several windows
    assert.are.equal(utc(2026, 12, 12, 10), w.next_open(specs("Mon 09:00-10:00", "Sat 10:00-12:00"),
      utc(2026, 12, 11, 12), "UTC"))
    -- a window ending at 24:00 runs into the next day's window without a gap
    local night = specs("Fri-Mon 22:00-24:00", "Sat-Mon 00:00-02:00")
    assert.is_true(w.in_window(night, utc(2026, 12, 11, 23, 59, 59), "UTC"))
    assert.is_true(w.in_window(night, utc(2026, 12, 12, 0), "UTC"))
    assert.are.equal(utc(2026, 12, 11, 22), w.next_open(night, utc(2026, 12, 10, 12), "UTC"))
  end)

  it("reads a weekly window within a week; nothing lies beyond 8 days", function()
    local s = specs("Mon 09:00-10:00")
    assert.are.equal(utc(2026, 12, 14, 9), w.next_open(s, utc(2026, 12, 7, 10), "UTC"))
    assert.is_nil(w.next_open({}, utc(2026, 12, 7, 10), "UTC"))
  end)

  it("opens a window starting in a spring-forward gap at the gap's end (Paris, Mar 29: 03:00 CEST)", function()
    local s = specs("Sun 02:30-04:00")
    assert.are.equal(utc(2026, 3, 29, 1), w.next_open(s, utc(2026, 3, 28, 23), PARIS))
    assert.are.same({ hour = 3, min = 0, zone = "CEST" }, (function()
      local c = oops.cron.civil(utc(2026, 3, 29, 1), PARIS)
      return { hour = c.hour, min = c.min, zone = c.zone }
    end)())
    -- a window wholly inside the gap does not happen that day: the next Sunday's
    assert.are.equal(utc(2026, 4, 5, 0), w.next_open(specs("Sun 02:00-02:30"), utc(2026, 3, 28, 23), PARIS))
  end)

  it("does the same in New York (Mar 8) and Sydney (Oct 4, the southern spring)", function()
    assert.are.equal(utc(2026, 3, 8, 7), w.next_open(specs("Sun 02:30-03:30"), utc(2026, 3, 8, 5), NY))
    assert.are.equal(utc(2026, 3, 15, 6, 30), w.next_open(specs("Sun 02:30-03:00"), utc(2026, 3, 8, 5), NY))
    assert.are.equal(utc(2026, 10, 3, 16), w.next_open(specs("Sun 02:30-03:30"), utc(2026, 10, 3, 14), SYDNEY))
  end)

  it("opens again in the second occurrence of a repeated hour", function()
    -- New York, Nov 1: 01:00-02:00 happens twice (EDT, then EST)
    local s = specs("Sun 01:00-01:30")
    assert.are.equal(utc(2026, 11, 1, 5), w.next_open(s, utc(2026, 11, 1, 4), NY))        -- 01:00 EDT
    assert.are.equal(utc(2026, 11, 1, 6), w.next_open(s, utc(2026, 11, 1, 5, 45), NY))    -- 01:00 EST
    assert.are.equal(utc(2026, 11, 8, 6), w.next_open(s, utc(2026, 11, 1, 6, 30), NY))    -- next Sunday, EST
    assert.are.equal(utc(2026, 11, 1, 5), w.next_open(specs("Sun 01:00-02:00"), utc(2026, 11, 1, 4), NY))
    -- Paris, Oct 25: the clocks go back from 03:00 CEST to 02:00 CET, landing
    -- inside a window that was over a moment before
    assert.are.equal(utc(2026, 10, 25, 1), w.next_open(specs("Sun 01:30-02:15"), utc(2026, 10, 25, 0, 20), PARIS))
    assert.are.equal(utc(2026, 10, 25, 1), w.next_open(specs("Sun 02:00-02:30"), utc(2026, 10, 25, 0, 45), PARIS))
    -- Sydney, Apr 5 (the southern autumn): 02:00-03:00 twice
    assert.are.equal(utc(2026, 4, 4, 16), w.next_open(specs("Sun 02:00-02:30"), utc(2026, 4, 4, 15, 45), SYDNEY))
  end)

  it("crosses the year end", function()
    local office = specs("Mon-Fri 09:00-17:00")
    assert.are.equal(utc(2027, 1, 1, 9), w.next_open(office, utc(2026, 12, 31, 17), "UTC")) -- Thu -> Fri
    assert.are.equal(utc(2027, 1, 4, 9), w.next_open(office, utc(2027, 1, 1, 18), "UTC"))   -- Fri -> Mon
    assert.are.equal(utc(2027, 1, 1, 8), w.next_open(office, utc(2026, 12, 31, 17), PARIS))
  end)
end)

-- A policy through the real loader (the freezes' epochs need it).
local path
local function load_text(text)
  path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return policy.load_files({ path })
end
after_each(function()
  if path then os.remove(path) end
  path = nil
end)

describe("freezes", function()
  it("are read in deploy.timezone, from its earliest to its latest occurrence, [from, to)", function()
    local p = assert(load_text('freeze "year-end" { from = "2026-12-20 00:00", to = "2027-01-04 08:00", ' ..
      'environments = { "prod" } }\n'))
    local f = p.freezes[1]
    assert.are.same({ name = "year-end", from = utc(2026, 12, 20), to = utc(2027, 1, 4, 8),
      from_text = "2026-12-20 00:00", to_text = "2027-01-04 08:00", environments = { prod = true },
      where = path .. ":1" }, f)
    assert.are.equal(f, w.frozen(p, "prod", utc(2026, 12, 31, 23, 59, 59)))
    assert.are.equal(f, w.frozen(p, "prod", utc(2027, 1, 1)))
    assert.are.equal(f, w.frozen(p, "prod", utc(2026, 12, 20)))
    assert.are.equal(f, w.frozen(p, "prod", utc(2027, 1, 4, 7, 59, 59)))
    assert.is_nil(w.frozen(p, "prod", utc(2027, 1, 4, 8)))
    assert.is_nil(w.frozen(p, "prod", utc(2026, 12, 19, 23, 59, 59)))
    assert.is_nil(w.frozen(p, "staging", utc(2027, 1, 1)))
  end)

  it("cover the whole of an hour that occurs twice at either end", function()
    -- New York, Nov 1 2026: 01:30 occurs at 05:30 and 06:30 UTC
    local p = assert(load_text('deploy { timezone = "America/New_York" }\n' ..
      'freeze "night" { from = "2026-11-01 01:30", to = "2026-11-01 01:45" }\n'))
    assert.are.same({ utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 45) }, { p.freezes[1].from, p.freezes[1].to })
    assert.is_nil(p.freezes[1].environments)
    assert.truthy(w.frozen(p, "anything", utc(2026, 11, 1, 6, 0)))
    -- a bound in a spring-forward gap is the gap's end
    p = assert(load_text('deploy { timezone = "America/New_York" }\n' ..
      'freeze "spring" { from = "2026-03-08 02:15", to = "2026-03-08 04:00" }\n'))
    assert.are.same({ utc(2026, 3, 8, 7), utc(2026, 3, 8, 8) }, { p.freezes[1].from, p.freezes[1].to })
    -- a freeze wholly inside the gap lasts no time: refused
    local errs
    p, errs = load_text('deploy { timezone = "America/New_York" }\n' ..
      'freeze "spring" { from = "2026-03-08 02:15", to = "2026-03-08 02:45" }\n')
    assert.is_nil(p)
    assert.are.same({ path .. ':2: freeze "spring": to: "2026-03-08 02:45" is not after from "2026-03-08 02:15" ' ..
      "(in America/New_York the clocks skip from one to the other)" }, errs)
  end)

  it("follow a deploy.timezone declared in a later file, sorted by from", function()
    local a, b = os.tmpname(), os.tmpname()
    local fa = assert(io.open(a, "w"))
    fa:write('freeze "b" { from = "2026-12-24 00:00", to = "2026-12-27 00:00" }\n' ..
      'freeze "a" { from = "2026-12-01 00:00", to = "2026-12-02 00:00" }\n')
    fa:close()
    local fb = assert(io.open(b, "w"))
    fb:write('deploy { timezone = "Europe/Paris" }\n')
    fb:close()
    local p, errs = policy.load_files({ a, b })
    os.remove(a)
    os.remove(b)
    assert(p, table.concat(errs or {}, "\n"))
    assert.are.same({ "a", "b" }, { p.freezes[1].name, p.freezes[2].name })
    assert.are.equal(utc(2026, 12, 23, 23), p.freezes[2].from)
  end)
end)

describe("windows.hold", function()
  local function pol(tz, windows_text, freezes)
    local ws = {}
    for env, list in pairs(windows_text or {}) do ws[env] = specs(table.unpack(list)) end
    return { deploy = { timezone = tz }, freezes = freezes or {},
      applications = { ["shop/api"] = { windows = ws } } }
  end
  local P = { namespace = "shop", application = "api", environment = "prod" }

  it("is nil inside a window, for an environment without windows, or an unknown application", function()
    local p = pol("UTC", { prod = { "Mon-Fri 09:00-17:00" } })
    assert.is_nil(w.hold(p, P, utc(2026, 12, 7, 10)))
    assert.is_nil(w.hold(p, { namespace = "shop", application = "api", environment = "staging" },
      utc(2026, 12, 7, 20)))
    assert.is_nil(w.hold(p, { namespace = "shop", application = "web", environment = "prod" }, utc(2026, 12, 7, 20)))
  end)

  it("names the window that opens first, and when, in deploy.timezone", function()
    local p = pol("UTC", { prod = { "Mon-Fri 09:00-17:00", "Sat 10:00-12:00" } })
    assert.are.same({ kind = "window", window = "Mon-Fri 09:00-17:00", until_epoch = utc(2026, 12, 8, 9),
      message = "Waiting for the deploy window Mon-Fri 09:00-17:00, opens Tue 09:00 UTC." },
      w.hold(p, P, utc(2026, 12, 7, 17)))
    assert.are.same({ kind = "window", window = "Sat 10:00-12:00", until_epoch = utc(2026, 12, 12, 10),
      message = "Waiting for the deploy window Sat 10:00-12:00, opens Sat 10:00 UTC." },
      w.hold(p, P, utc(2026, 12, 11, 18)))
    assert.are.equal("Waiting for the deploy window Mon-Fri 09:00-17:00, opens Mon 09:00 UTC.",
      w.hold(p, P, utc(2026, 12, 12, 12)).message)
    assert.are.equal("Waiting for the deploy window Mon-Fri 09:00-17:00, opens Mon 09:00 CET.",
      w.hold(pol(PARIS, { prod = { "Mon-Fri 09:00-17:00" } }), P, utc(2026, 12, 12, 12)).message)
    assert.are.equal("Waiting for the deploy window Sun 02:30-04:00, opens Sun 03:00 CEST.",
      w.hold(pol(PARIS, { prod = { "Sun 02:30-04:00" } }), P, utc(2026, 3, 28, 23)).message)
  end)

  it("adds the date when the opening is 7 or more local days away", function()
    local p = pol("UTC", { prod = { "Mon 09:00-10:00" } })
    assert.are.same({ kind = "window", window = "Mon 09:00-10:00", until_epoch = utc(2026, 12, 14, 9),
      message = "Waiting for the deploy window Mon 09:00-10:00, opens 2026-12-14 Mon 09:00 UTC." },
      w.hold(p, P, utc(2026, 12, 7, 10, 30)))
    assert.are.equal("Waiting for the deploy window Mon 09:00-10:00, opens Mon 09:00 UTC.",
      w.hold(p, P, utc(2026, 12, 8, 0)).message)
  end)

  it("takes a fractional epoch (the database's clock carried on by the monotonic one)", function()
    local p = pol("UTC", { prod = { "Mon-Fri 09:00-17:00" } })
    assert.is_nil(w.hold(p, P, utc(2026, 12, 7, 16, 59, 59) + 0.5))
    assert.are.same({ kind = "window", window = "Mon-Fri 09:00-17:00", until_epoch = utc(2026, 12, 8, 9),
      message = "Waiting for the deploy window Mon-Fri 09:00-17:00, opens Tue 09:00 UTC." },
      w.hold(p, P, utc(2026, 12, 7, 17) + 0.25))
    assert.are.equal(utc(2026, 12, 7, 9), w.next_open(p.applications["shop/api"].windows.prod,
      utc(2026, 12, 7, 8, 59, 59) + 0.999, "UTC"))
  end)

  it("crosses the year end", function()
    local p = pol("UTC", { prod = { "Mon-Fri 09:00-17:00" } })
    assert.are.same({ kind = "window", window = "Mon-Fri 09:00-17:00", until_epoch = utc(2027, 1, 1, 9),
      message = "Waiting for the deploy window Mon-Fri 09:00-17:00, opens Fri 09:00 UTC." },
      w.hold(p, P, utc(2026, 12, 31, 17)))
  end)

  it("waits for a freeze first, whatever the windows", function()
    local freeze = { name = "year-end", from = utc(2026, 12, 20), to = utc(2027, 1, 4, 8),
      environments = { prod = true } }
    local p = pol("UTC", { prod = { "Mon-Fri 09:00-17:00" } }, { freeze })
    assert.are.same({ kind = "freeze", freeze = "year-end", until_epoch = utc(2027, 1, 4, 8),
      message = "Waiting for the freeze year-end to end: 2027-01-04 08:00 UTC." },
      w.hold(p, P, utc(2026, 12, 31, 10)))
    assert.is_nil(w.hold(p, P, utc(2027, 1, 4, 9)))
    -- after the freeze, outside the windows: the window's hold
    assert.are.equal("Waiting for the deploy window Mon-Fri 09:00-17:00, opens Tue 09:00 UTC.",
      w.hold(p, P, utc(2027, 1, 4, 17)).message)
    -- staging has no freeze and no windows
    assert.is_nil(w.hold(p, { namespace = "shop", application = "api", environment = "staging" },
      utc(2026, 12, 31, 10)))
  end)

  it("writes a freeze's end in deploy.timezone, through the loader", function()
    local p = assert(load_text('deploy { timezone = "Europe/Paris" }\n' ..
      'freeze "year-end" { from = "2026-12-20 00:00", to = "2027-01-04 08:00" }\n' ..
      'application "shop/api" { environments = { "prod" }, windows = { prod = { "Mon-Fri 09:00-17:00" } } }\n'))
    assert.are.same({ kind = "freeze", freeze = "year-end", until_epoch = utc(2027, 1, 4, 7),
      message = "Waiting for the freeze year-end to end: 2027-01-04 08:00 CET." },
      w.hold(p, P, utc(2027, 1, 1, 12)))
    assert.is_nil(w.hold(p, P, utc(2027, 1, 4, 8)))  -- 09:00 CET, Monday
    assert.are.equal("Waiting for the deploy window Mon-Fri 09:00-17:00, opens Mon 09:00 CET.",
      w.hold(p, P, utc(2027, 1, 4, 7, 30)).message)
  end)
end)

describe("windows.describe", function()
  it("writes a weekday and time, a date and time, or all three, with the zone's abbreviation", function()
    local t = utc(2026, 10, 25, 0, 30)
    assert.are.equal("Sun 02:30 CEST", w.describe(t, PARIS))
    assert.are.equal("Sun 02:30 CET", w.describe(t + 3600, PARIS))
    assert.are.equal("2026-10-25 02:30 CEST", w.describe(t, PARIS, "date"))
    assert.are.equal("2026-10-25 Sun 00:30 UTC", w.describe(t, "UTC", "full"))
  end)
end)
