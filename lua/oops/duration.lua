-- oops.duration: durations written the way operators say them.
--
--   parse("500ms") -> 500     parse("5s") -> 5000     parse("1h30m") -> 5400000
--   parse("5x")    -> nil, '"5x": not a duration (use e.g. 500ms, 5s, 10m, 2h)'
--
-- A duration is one or more <whole number><unit> parts, units from largest to
-- smallest, each at most once: d, h, m, s, ms. A bare number is refused: "5"
-- could be seconds or minutes, and guessing wrong is how timeouts go bad.
-- Every failure message starts with the value as written, so a caller only
-- has to prefix what it was parsing ("scan.interval: ").
local M = {}

local UNITS = { -- name -> milliseconds, rank (larger units first)
  d = { ms = 86400000, rank = 1 },
  h = { ms = 3600000, rank = 2 },
  m = { ms = 60000, rank = 3 },
  s = { ms = 1000, rank = 4 },
  ms = { ms = 1, rank = 5 },
}

-- Past this a duration is surely a typo, and it stays far from integer overflow.
local MAX_MS = 366 * 86400000 * 100

local HINT = "not a duration (use e.g. 500ms, 5s, 10m, 2h)"

-- How a value is shown in a message: strings quoted, anything else as is.
-- A long string shows only its start and its length: a message never
-- quotes more than a short prefix of what it was given (an environment
-- variable's value, a file's content).
local SHOW_MAX = 40
local function show(v)
  if type(v) == "string" then
    local s = #v > SHOW_MAX and v:sub(1, SHOW_MAX - 8) or v
    s = (string.format("%q", s):gsub("\\\n", "\\n"))
    if #v > SHOW_MAX then s = s .. ("... (%d bytes)"):format(#v) end
    return s
  end
  return tostring(v)
end
M.show = show

-- Sum the parts of `s`, or nil when it is not made only of well-ordered parts.
local function sum_parts(s)
  local total, pos, last_rank = 0, 1, 0
  while pos <= #s do
    local digits, unit, next_pos = s:match("^(%d+)(%a+)()", pos)
    local u = unit and UNITS[unit]
    if not u or u.rank <= last_rank then return nil end
    local n = math.tointeger(tonumber(digits))
    -- Checked before multiplying: 999999999999d would wrap around int64.
    if not n or #digits > 12 or n > MAX_MS // u.ms then return nil, "too large" end
    total = total + n * u.ms
    if total > MAX_MS then return nil, "too large" end
    last_rank, pos = u.rank, next_pos
  end
  return total
end

-- Parse a duration string into milliseconds: ms | nil, err.
function M.parse(s)
  if type(s) ~= "string" or s == "" then return nil, show(s) .. ": " .. HINT end
  local ms, why = sum_parts(s)
  if why or (ms and ms > MAX_MS) then return nil, show(s) .. ": too large" end
  if not ms then return nil, show(s) .. ": " .. HINT end
  return ms
end

-- Format milliseconds back into the shortest exact form: 5400000 -> "1h30m".
function M.format(ms)
  assert(math.type(ms) == "integer" and ms >= 0, "duration.format: expects a whole number of ms >= 0")
  if ms == 0 then return "0s" end
  local out = {}
  for _, name in ipairs({ "d", "h", "m", "s", "ms" }) do
    local unit = UNITS[name].ms
    if ms >= unit then
      out[#out + 1] = (ms // unit) .. name
      ms = ms % unit
    end
  end
  return table.concat(out)
end

return M
