-- Cron through the binding the policy loader and the restart scan use
-- (REFERENCE.md section 7). The parser's full edge cases are also covered in
-- C (tests/unit/test_cron.c); these check the same promises from Lua.
local cron = require("oops").cron

-- Epoch seconds of a UTC time "YYYY-MM-DD HH:MM:SS".
local function utc(s)
  local y, mo, d, h, mi, se = s:match("^(%d+)-(%d+)-(%d+) (%d+):(%d+):(%d+)$")
  local days = 0
  local function leap(yy) return (yy % 4 == 0 and yy % 100 ~= 0) or yy % 400 == 0 end
  for yy = 1970, tonumber(y) - 1 do days = days + (leap(yy) and 366 or 365) end
  local mdays = { 31, leap(tonumber(y)) and 29 or 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 }
  for m = 1, tonumber(mo) - 1 do days = days + mdays[m] end
  days = days + tonumber(d) - 1
  return ((days * 24 + tonumber(h)) * 60 + tonumber(mi)) * 60 + tonumber(se)
end

local function matches(expr, when)
  local c = assert(cron.parse(expr))
  return c:matches(utc(when), "UTC")
end

local function invalid(expr)
  local c, err = cron.parse(expr)
  assert.is_nil(c)
  return err
end

describe("cron (REFERENCE.md section 7)", function()
  it('"0 3 * * *" is valid and matches 03:00, not 03:01', function()
    assert.is_true(matches("0 3 * * *", "2026-11-30 03:00:00"))
    assert.is_false(matches("0 3 * * *", "2026-11-30 03:01:00"))
  end)

  it('"99 * * *" and "" are invalid, saying why', function()
    assert.are.equal("expected 5 or 6 fields, got 4", invalid("99 * * *"))
    assert.are.equal("empty expression", invalid(""))
    assert.are.equal("minute 61 out of range 0-59", invalid("61 * * * *"))
  end)

  it("ranges, lists and the three kinds of step", function()
    assert.is_true(matches("10-20 * * * *", "2026-11-30 01:15:00"))
    assert.is_false(matches("10-20 * * * *", "2026-11-30 01:21:00"))
    assert.is_true(matches("5,35 * * * *", "2026-11-30 01:35:00"))
    assert.is_true(matches("*/15 * * * *", "2026-11-30 01:45:00"))
    assert.is_false(matches("*/15 * * * *", "2026-11-30 01:50:00"))
    assert.is_true(matches("10-30/10 * * * *", "2026-11-30 01:30:00"))
    assert.is_false(matches("10-30/10 * * * *", "2026-11-30 01:40:00"))
    assert.is_true(matches("50/5 * * * *", "2026-11-30 01:55:00"))
    assert.is_false(matches("50/5 * * * *", "2026-11-30 01:05:00"))
  end)

  it("month and day names, case-insensitive, in ranges too", function()
    assert.is_true(matches("0 0 * NOV mon", "2026-11-30 00:00:00")) -- a Monday in November
    assert.is_true(matches("0 0 * * Mon-Fri", "2026-11-30 00:00:00"))
    assert.is_false(matches("0 0 * * sat,sun", "2026-11-30 00:00:00"))
    assert.is_true(matches("0 0 * jan-dec ?", "2026-11-30 00:00:00"))
  end)

  it("day-of-week 0 and 7 are both Sunday", function()
    assert.is_true(matches("0 0 * * 0", "2026-11-29 00:00:00"))
    assert.is_true(matches("0 0 * * 7", "2026-11-29 00:00:00"))
    assert.is_false(matches("0 0 * * 7", "2026-11-30 00:00:00"))
  end)

  it("day-of-month and day-of-week are ANDed", function()
    -- Friday the 13th: 2026-11-13 is a Friday; 2026-11-20 is a Friday, not the 13th.
    assert.is_true(matches("0 0 13 * FRI", "2026-11-13 00:00:00"))
    assert.is_false(matches("0 0 13 * FRI", "2026-11-20 00:00:00"))
    assert.is_false(matches("0 0 13 * FRI", "2027-01-13 00:00:00")) -- a Wednesday
  end)

  it("a 6-field cron has seconds first; with non-zero seconds it never matches a whole minute", function()
    assert.is_true(matches("*/10 * * * * *", "2026-11-30 01:02:20"))
    assert.is_false(matches("*/10 * * * * *", "2026-11-30 01:02:21"))
    assert.is_false(matches("30 0 3 * * *", "2026-11-30 03:00:00"))
    assert.is_true(matches("30 0 3 * * *", "2026-11-30 03:00:30"))
    assert.is_true(assert(cron.parse("*/10 * * * * *")):has_seconds())
    assert.is_false(assert(cron.parse("0 3 * * *")):has_seconds())
  end)

  it("a 5-field cron fires only at second 0", function()
    assert.is_false(matches("0 3 * * *", "2026-11-30 03:00:01"))
  end)

  it("the macros", function()
    assert.is_true(matches("@daily", "2026-11-30 00:00:00"))
    assert.is_true(matches("@midnight", "2026-11-30 00:00:00"))
    assert.is_true(matches("@hourly", "2026-11-30 07:00:00"))
    assert.is_true(matches("@weekly", "2026-11-29 00:00:00"))
    assert.is_true(matches("@monthly", "2026-12-01 00:00:00"))
    assert.is_true(matches("@yearly", "2027-01-01 00:00:00"))
    assert.is_true(matches("@annually", "2027-01-01 00:00:00"))
    assert.are.equal("unknown macro @sometimes", invalid("@sometimes"))
  end)

  it("errors name the field and the value", function()
    assert.are.equal("hour 24 out of range 0-23", invalid("0 24 * * *"))
    assert.are.equal("month range 12-3 is reversed", invalid("0 0 1 12-3 *"))
    assert.are.equal("hour step 0 must be at least 1", invalid("0 */0 * * *"))
    assert.matches('day%-of%-week "FOO"', invalid("0 0 * * FOO"))
  end)

  it("next occurrence, in the time zone asked for", function()
    local c = assert(cron.parse("0 3 * * *"))
    assert.are.equal(utc("2026-12-01 03:00:00"), c:next(utc("2026-11-30 03:00:00"), "UTC"))
    -- 03:00 in Paris (UTC+1 in winter) is 02:00 UTC.
    assert.are.equal(utc("2026-12-01 02:00:00"), c:next(utc("2026-11-30 03:00:00"), "Europe/Paris"))
    assert.is_nil(assert(cron.parse("0 0 30 2 *")):next(utc("2026-01-01 00:00:00"), "UTC"))
  end)
end)
