-- oops.windows: deploy windows and freezes, read on the local wall clock of
-- deploy.timezone (the same on every server, whatever its host's TZ).
--
--   local w = require("oops.windows")
--   w.parse_window("Mon-Fri 09:00-17:00") -> { text = ..., days = { true, ... }, start = 540, stop = 1020 }
--   w.parse_local("2026-12-20 00:00")     -> { year = 2026, month = 12, day = 20, hour = 0, min = 0 }
--   w.in_window(specs, epoch, tz)         -> boolean
--   w.next_open(specs, epoch, tz)         -> epoch | nil
--   w.frozen(policy, env, epoch)          -> freeze | nil
--   w.hold(policy, pipeline, epoch)       -> nil | { kind = "freeze" | "window", message = ..., until_epoch = ... }
--
-- A window is days and a time range: "Mon-Fri 09:00-17:00", "Sat,Sun
-- 10:00-12:00", "Fri-Mon 22:00-24:00" (a range may wrap round the week),
-- "Mon-Wed,Fri 08:00-09:30", "daily 06:00-07:00". It holds the wall-clock
-- minutes [start, stop) of each of its days; it never crosses midnight
-- (write two windows). Days are 1 = Mon .. 7 = Sun.
--
-- Pure but for the time zone arithmetic, which comes from oops.cron (civil,
-- epoch: src/runtime/oops_cron.c); the parsers work without it.
local show = require("oops.duration").show

local M = {}

M.DAYS = { "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun" }
local DAY_INDEX = {}
for i, d in ipairs(M.DAYS) do DAY_INDEX[d] = i end

-- next_open looks this many days ahead at most: a weekly window opens within 7.
M.LOOKAHEAD_DAYS = 8

local LIKE = 'like "Mon-Fri 09:00-17:00"'

local function cron()
  local oops = package.loaded["oops"]
  if oops == nil then
    local ok, mod = pcall(require, "oops")
    oops = ok and mod or nil
  end
  if type(oops) ~= "table" or type(oops.cron) ~= "table" or type(oops.cron.civil) ~= "function" then
    error("oops.windows: time zones need oops.cron (run inside oopsd)", 3)
  end
  return oops.cron
end

------------------------------------------------------------------ calendar

local function is_leap(y) return (y % 4 == 0 and y % 100 ~= 0) or y % 400 == 0 end

local MONTH_DAYS = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 }
local function days_in_month(y, m)
  if m == 2 and is_leap(y) then return 29 end
  return MONTH_DAYS[m]
end

-- Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
-- days_from_civil): UTC arithmetic without os.time, which reads the server's
-- time zone. Also the notifier's (notification.lua, epoch_of).
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = (y >= 0 and y or y - 399) // 400
  local yoe = y - era * 400
  local doy = (153 * (m + (m > 2 and -3 or 9)) + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  return era * 146097 + doe - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = (z >= 0 and z or z - 146096) // 146097
  local doe = z - era * 146097
  local yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
  local doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
  local mp = (5 * doy + 2) // 153
  local d = doy - (153 * mp + 2) // 5 + 1
  local m = mp < 10 and mp + 3 or mp - 9
  return yoe + era * 400 + (m <= 2 and 1 or 0), m, d
end

-- 1 = Monday .. 7 = Sunday (day 0, 1970-01-01, was a Thursday).
local function weekday(days) return (days + 3) % 7 + 1 end

-- A local wall clock as seconds, comparable across days.
local function wall(c) return days_from_civil(c.year, c.month, c.day) * 86400 + c.hour * 3600 + c.min * 60 + c.sec end

------------------------------------------------------------------- parsing

-- "Mon-Fri", "Sat,Sun", "Mon-Wed,Fri", "Fri-Mon", "daily" -> { [1..7] = true }
local function parse_days(text)
  local days = {}
  if text == "daily" then
    for i = 1, 7 do days[i] = true end
    return days
  end
  for item in (text .. ","):gmatch("([^,]*),") do
    local a, b = item:match("^([^-]*)%-(.*)$")
    a, b = a or item, b or item
    for _, name in ipairs({ a, b }) do
      if not DAY_INDEX[name] then
        return nil, "unknown day " .. show(name) .. " (days are Mon, Tue, Wed, Thu, Fri, Sat, Sun; ranges " ..
          "like Mon-Fri, lists like Sat,Sun, or daily)"
      end
    end
    local i, last = DAY_INDEX[a], DAY_INDEX[b]
    while true do
      if days[i] then return nil, M.DAYS[i] .. " is listed twice" end
      days[i] = true
      if i == last then break end
      i = i % 7 + 1
    end
  end
  return days
end

-- "09:00" -> 540; "24:00" -> 1440 (an end only: a start there leaves no room).
local function parse_time(text, what)
  local h, m = text:match("^(%d%d):(%d%d)$")
  if not h then return nil, what .. " " .. show(text) .. " is not HH:MM" end
  h, m = tonumber(h), tonumber(m)
  if m > 59 or h > 24 or (h == 24 and m > 0) then
    return nil, what .. " " .. text .. " out of range 00:00-24:00"
  end
  return h * 60 + m
end

-- A window's text -> { text, days = { [1..7] = true }, start, stop } (minutes
-- of the day, [start, stop)), or nil and why, starting with the text.
function M.parse_window(text)
  if type(text) ~= "string" then
    return nil, "must be a string " .. LIKE .. ", not " .. (type(text) == "nil" and "nil" or ("a " .. type(text)))
  end
  local days_text, range = text:match("^%s*(%S+)%s+(%S+)%s*$")
  local from, to = (range or ""):match("^([^-]+)%-([^-]+)$")
  if not from then return nil, show(text) .. ": not a window " .. LIKE .. " (days, then HH:MM-HH:MM)" end
  local days, why = parse_days(days_text)
  if not days then return nil, show(text) .. ": " .. why end
  local start, stop
  start, why = parse_time(from, "start")
  if not start then return nil, show(text) .. ": " .. why end
  stop, why = parse_time(to, "end")
  if not stop then return nil, show(text) .. ": " .. why end
  if stop <= start then
    return nil, show(text) .. ": a window whose end is before its start (a window never crosses midnight: " ..
      "write two, like \"Fri 22:00-24:00\" and \"Sat 00:00-02:00\")"
  end
  return { text = text, days = days, start = start, stop = stop }
end

-- "YYYY-MM-DD HH:MM" -> { year, month, day, hour, min }, or nil and why,
-- starting with the text. Only real dates: 2028-02-29, never 2026-02-29.
function M.parse_local(text)
  local like = 'a local time like "2026-12-20 00:00" (YYYY-MM-DD HH:MM)'
  if type(text) ~= "string" then return nil, show(text) .. ": must be " .. like end
  local y, mo, d, h, mi = text:match("^(%d%d%d%d)%-(%d%d)%-(%d%d) (%d%d):(%d%d)$")
  if not y then return nil, show(text) .. ": not " .. like end
  y, mo, d, h, mi = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi)
  if y < 1 then return nil, show(text) .. ": year 0 out of range 1-9999" end
  if mo < 1 or mo > 12 then return nil, show(text) .. ": month " .. mo .. " out of range 1-12" end
  local n = days_in_month(y, mo)
  if d < 1 or d > n then
    return nil, ("%s: day %d out of range 1-%d (%04d-%02d has %d days)"):format(show(text), d, n, y, mo, n)
  end
  if h > 23 then return nil, show(text) .. ": hour " .. h .. " out of range 0-23" end
  if mi > 59 then return nil, show(text) .. ": minute " .. mi .. " out of range 0-59" end
  return { year = y, month = mo, day = d, hour = h, min = mi }
end

---------------------------------------------------------------- membership

local function contains(spec, c)
  local m = c.hour * 60 + c.min
  return spec.days[c.wday] == true and m >= spec.start and m < spec.stop
end

-- Epochs may be fractional (the database's clock carried on by the
-- monotonic one): the wall clock is read at the whole second.
local floor = math.floor

-- Does any window hold the local wall clock (in tz) at epoch?
function M.in_window(specs, epoch, tz)
  local c = cron().civil(floor(epoch), tz)
  for _, s in ipairs(specs) do
    if contains(s, c) then return true end
  end
  return false
end

-- The instant on local date `days` (since 1970-01-01) at which the UTC offset
-- changes, or nil when the day is 24 hours long. Where the clocks go back,
-- the wall clock may land inside a window that it was past a moment before.
local function transition_on(cr, days, tz)
  local y, m, d = civil_from_days(days)
  local s0 = cr.epoch({ year = y, month = m, day = d, hour = 0, min = 0 }, tz)
  y, m, d = civil_from_days(days + 1)
  local s1 = cr.epoch({ year = y, month = m, day = d, hour = 0, min = 0 }, tz)
  if not (s0 and s1) or s1 - s0 == 86400 then return nil end
  local function offset(t) return wall(cr.civil(t, tz)) - t end
  local lo, hi, off0 = s0, s1, offset(s0)
  if offset(hi) == off0 then return nil end
  while hi - lo > 1 do
    local mid = lo + (hi - lo) // 2
    if offset(mid) == off0 then lo = mid else hi = mid end
  end
  return hi
end

-- The first instant >= epoch at which in_window(specs, ., tz) holds: epoch
-- itself when inside, else the earliest of the candidates that are inside:
-- each occurrence of a window's start (both, in a fall-back overlap; in a
-- spring-forward gap the gap's end, so a window from 02:30 on a day whose
-- clocks jump 02:00 -> 03:00 opens at 03:00 if it is still open then) and
-- each change of the UTC offset (a clock going back may land inside a
-- window). At most LOOKAHEAD_DAYS ahead; nil when nothing opens by then.
function M.next_open(specs, epoch, tz)
  local cr = cron()
  if M.in_window(specs, epoch, tz) then return epoch end
  local limit = epoch + M.LOOKAHEAD_DAYS * 86400
  local now = cr.civil(floor(epoch), tz)
  local today = days_from_civil(now.year, now.month, now.day)
  local best
  local function consider(t)
    if t and t >= epoch and t <= limit and (not best or t < best) and M.in_window(specs, t, tz) then best = t end
  end
  for days = today, today + M.LOOKAHEAD_DAYS do
    local y, m, d = civil_from_days(days)
    local wd = weekday(days)
    for _, s in ipairs(specs) do
      if s.days[wd] then
        local first, last = cr.epoch({ year = y, month = m, day = d, hour = s.start // 60, min = s.start % 60 }, tz)
        consider(first)
        consider(last)
      end
    end
    consider(transition_on(cr, days, tz))
    -- A later date's openings come later (the wall clock only goes back
    -- within a day's repeated hour).
    if best then return best end
  end
  return best
end

------------------------------------------------------------------ freezes

-- The first freeze (pol.freezes is sorted by from) covering epoch for env:
-- from <= epoch < to, and env one of its environments (none: every one).
function M.frozen(pol, env, epoch)
  for _, f in ipairs(pol.freezes or {}) do
    if (not f.environments or f.environments[env]) and f.from <= epoch and epoch < f.to then return f end
  end
  return nil
end

-------------------------------------------------------------------- holds

-- An epoch as its local time in tz: "Mon 09:00 CET" (form nil or "day"),
-- "2027-01-04 08:00 CET" ("date"), "2026-12-07 Mon 09:00 CET" ("full").
-- The zone is its abbreviation then (the zone's name when the C library has
-- none), so an hour that occurs twice is told apart.
function M.describe(epoch, tz, form)
  local c = cron().civil(floor(epoch), tz)
  local zone = c.zone ~= "" and c.zone or (tz ~= nil and tz ~= "" and tz or "local")
  local date = ("%04d-%02d-%02d"):format(c.year, c.month, c.day)
  local time = ("%02d:%02d"):format(c.hour, c.min)
  local day = M.DAYS[c.wday]
  if form == "date" then return date .. " " .. time .. " " .. zone end
  if form == "full" then return date .. " " .. day .. " " .. time .. " " .. zone end
  return day .. " " .. time .. " " .. zone
end

-- How far (in local calendar days) `later` is after `now`.
local function days_between(now, later, tz)
  local cr = cron()
  local a, b = cr.civil(floor(now), tz), cr.civil(floor(later), tz)
  return days_from_civil(b.year, b.month, b.day) - days_from_civil(a.year, a.month, a.day)
end

-- Why pipeline p ({ namespace, application, environment }) may not deploy
-- at epoch, or nil when it may:
--   a freeze covering its environment (it wins over any window):
--     { kind = "freeze", freeze = NAME, until_epoch = TO,
--       message = "Waiting for the freeze NAME to end: 2027-01-04 08:00 UTC." }
--   its application's windows for that environment all closed:
--     { kind = "window", window = TEXT, until_epoch = OPENING,
--       message = "Waiting for the deploy window Mon-Fri 09:00-17:00, opens Mon 09:00 UTC." }
-- The window named is the one that opens first (the first written, on a
-- tie). Its opening is written as weekday, time and zone when it is less
-- than 7 local calendar days away (today is 0), else with its date first:
-- "opens 2026-12-14 Mon 09:00 UTC". Times are in pol.deploy.timezone.
function M.hold(pol, p, epoch)
  local tz = pol.deploy and pol.deploy.timezone or "UTC"
  local f = M.frozen(pol, p.environment, epoch)
  if f then
    return { kind = "freeze", freeze = f.name, until_epoch = f.to,
      message = ("Waiting for the freeze %s to end: %s."):format(f.name, M.describe(f.to, tz, "date")) }
  end
  local app = (pol.applications or {})[tostring(p.namespace) .. "/" .. tostring(p.application)]
  local specs = app and app.windows and app.windows[p.environment]
  if not specs or #specs == 0 or M.in_window(specs, epoch, tz) then return nil end
  local best, which
  for _, s in ipairs(specs) do
    local t = M.next_open({ s }, epoch, tz)
    if t and (not best or t < best) then best, which = t, s end
  end
  if not best then
    local texts = {}
    for i, s in ipairs(specs) do texts[i] = s.text end
    return { kind = "window", message = ("Waiting for the deploy window %s, which opens in none of the next %d days.")
      :format(table.concat(texts, ", "), M.LOOKAHEAD_DAYS) }
  end
  local form = days_between(epoch, best, tz) < 7 and "day" or "full"
  return { kind = "window", window = which.text, until_epoch = best,
    message = ("Waiting for the deploy window %s, opens %s."):format(which.text, M.describe(best, tz, form)) }
end

-- The epochs of a local time (parse_local's table) in tz: earliest and
-- latest (oops.cron.epoch). Without oops.cron (plain Lua), UTC only.
function M.epochs(t, tz)
  local oops = package.loaded["oops"]
  if oops == nil then
    local ok, mod = pcall(require, "oops")
    oops = ok and mod or nil
  end
  if type(oops) == "table" and type(oops.cron) == "table" and type(oops.cron.epoch) == "function" then
    return oops.cron.epoch(t, tz)
  end
  if tz == nil or tz == "" or tz == "UTC" then
    local e = days_from_civil(t.year, t.month, t.day) * 86400 + t.hour * 3600 + t.min * 60
    return e, e
  end
  return nil, nil
end

M.days_from_civil = days_from_civil

return M
