-- oops.quantity: resource quantities with explicit units (REFERENCE.md §8).
--
--   cpu("500m") -> 500 millicores    cpu("2") -> 2000    cpu("0.5") -> 500
--   memory("512Mi") -> 536870912     memory("1G") -> 1000000000
--
-- The original stored memory as a bare MiB count and parsed it as bytes
-- elsewhere (REFERENCE.md §12.7), so memory always needs a unit, and a Lua
-- number is refused for both: units are explicit and parsed one way, here.
-- Arithmetic is on integers (whole and fraction digits apart), so "0.1" is
-- exactly 100 millicores, never 99.99999. Failure messages start with the
-- value as written, like oops.duration's.
local M = {}

local show = require("oops.duration").show

local MEMORY_UNITS = {
  Ki = 1 << 10, Mi = 1 << 20, Gi = 1 << 30, Ti = 1 << 40,
  k = 1000, M = 1000000, G = 1000000000, T = 1000000000000,
}

local MEMORY_HINT = "(e.g. 512Mi, 4Gi, 1G)"
local CPU_HINT = "(e.g. 500m, 2, 0.5)"
-- Digit limits keep every product below 2^63: whole * 1000 for CPU, and
-- fraction (< 10^6 < 2^20) times the largest memory unit (2^40).
local MAX_WHOLE, MAX_FRAC = 15, 6
local MAX_BYTES = 1 << 53

-- Split "12.50" into whole 12, fraction 5 and its scale 10; nil if not a
-- plain non-negative decimal (or, "too fine", with more than 6 decimals).
local function decimal(s)
  local whole, frac = s:match("^(%d+)(%.?%d*)$")
  if not whole or frac == "." or #whole > MAX_WHOLE then return nil end
  frac = frac:sub(2):gsub("0+$", "")
  if #frac > MAX_FRAC then return nil, "too fine" end
  return math.tointeger(tonumber(whole)), math.tointeger(tonumber(frac ~= "" and frac or "0")),
    math.tointeger(10 ^ #frac)
end

-- value * mult as an exact integer, or nil when the fraction does not divide.
local function scaled(whole, frac, scale, mult)
  local part = frac * mult
  if part % scale ~= 0 then return nil end
  return whole * mult + part // scale
end

-- Parse a CPU quantity into millicores: millicores | nil, err.
function M.cpu(s)
  if type(s) ~= "string" then
    return nil, show(s) .. ': must be a string (e.g. "500m", "2", "0.5"), not a ' .. type(s)
  end
  local number, milli = s:match("^([%d.]+)(m?)$")
  local whole, frac, scale = decimal(number or "")
  if frac == "too fine" then return nil, show(s) .. ": finer than a millicore (1m)" end
  if not whole then return nil, show(s) .. ": not a CPU quantity " .. CPU_HINT end
  local mc = scaled(whole, frac, scale, milli == "m" and 1 or 1000)
  if not mc then return nil, show(s) .. ": finer than a millicore (1m)" end
  return mc
end

-- Parse a memory quantity into bytes: bytes | nil, err.
function M.memory(s)
  if type(s) ~= "string" then
    return nil, show(s) .. ": needs a unit " .. MEMORY_HINT
  end
  local number, unit = s:match("^([%d.]+)(%a*)$")
  local whole, frac, scale = decimal(number or "")
  if frac == "too fine" then return nil, show(s) .. ": too many decimal places" end
  if not whole then return nil, show(s) .. ": not a memory quantity " .. MEMORY_HINT end
  if unit == "" then return nil, show(s) .. ": needs a unit " .. MEMORY_HINT end
  if unit == "m" then
    -- Kubernetes reads "m" as thousandths of a byte: surely a typo here.
    return nil, show(s) .. ': unit "m" means thousandths; did you mean Mi or M?'
  end
  local mult = MEMORY_UNITS[unit]
  if not mult then
    return nil, show(s) .. ': unknown unit "' .. unit .. '" (use Ki, Mi, Gi, Ti or k, M, G, T)'
  end
  if whole >= MAX_BYTES // mult then return nil, show(s) .. ": too large" end
  local bytes = scaled(whole, frac, scale, mult)
  if not bytes then return nil, show(s) .. ": not a whole number of bytes" end
  return bytes
end

return M
