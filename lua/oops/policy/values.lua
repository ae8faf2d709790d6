-- oops.policy.values: the value checks of the policy language. Each check
-- takes a value as written and returns what the policy stores, or nil and
-- why (starting with the value, where showing it helps): durations,
-- percentages, whole numbers, booleans, URLs, argv lists and their
-- placeholders, labels, environments, time zones. With the small table
-- helpers the block files build their messages with.
local duration = require("oops.duration")

local show = duration.show
local shown_url = require("oops.url").show

local M = {}

------------------------------------------------------------- small helpers

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return show(a) < show(b) end)
  return keys
end

local function set_of(list)
  local s = {}
  for _, v in ipairs(list) do s[v] = true end
  return s
end

-- A plain sequence 1..n with no other keys (an empty table counts).
local function is_list(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n == #t
end

-- "a type" for messages: "a string", "a number", "a table", "nil".
local function a_type(v)
  local t = type(v)
  if t == "nil" then return "nil" end
  return (t:match("^[aeiou]") and "an " or "a ") .. t
end

-------------------------------------------------------------- value checks
-- Each check takes a value as written and returns what the policy stores,
-- or nil and why (starting with the value, where showing it helps).

local function dur(min_ms)
  return function(v)
    local n, why = duration.parse(v)
    if not n then return nil, why end
    if n < min_ms then
      if min_ms == 1 then return nil, show(v) .. ": must be more than zero" end
      return nil, show(v) .. ": must be at least " .. duration.format(min_ms)
    end
    return n
  end
end

local function percent(v)
  local n = math.type(v) and math.tointeger(v)
  if not n or n < 1 or n > 100 then return nil, show(v) .. ": must be a whole number from 1 to 100" end
  return n
end

-- A whole number from lo to hi.
local function whole(lo, hi)
  return function(v)
    local n = math.type(v) and math.tointeger(v)
    if not n or n < lo or n > hi then
      return nil, ("%s: must be a whole number from %d to %d"):format(show(v), lo, hi)
    end
    return n
  end
end

local function boolean(v)
  if type(v) ~= "boolean" then return nil, show(v) .. ": must be true or false" end
  return v
end

local function url(v)
  if type(v) ~= "string" or not v:match("^https?://[^%s]+$") then
    -- Never quoted whole: a secret may sit in its userinfo, path or query, and
    -- the message reaches logs, /healthz and /status (oops.url).
    return nil, (type(v) == "string" and show(shown_url(v)) or show(v)) .. ": must be an http:// or https:// URL"
  end
  return v
end

-- The fleet page's URL (notify.page): a URL, with no "@" before its fragment.
-- The link is copied into every Slack and Teams button and the CloudEvents
-- source, so a user:password@ in it would reach every receiver; an "@" in the
-- path or query cannot be told from a password holding an unencoded "/".
local function page_url(v)
  local u, why = url(v)
  if not u then return nil, why end
  if u:gsub("#.*$", ""):find("@", 1, true) then
    return nil, show(shown_url(u)) .. ": must not hold a user or password (the page's link is sent to every " ..
      "receiver); give the page's address alone"
  end
  return u
end

local function nonempty(v)
  if type(v) ~= "string" or v == "" then return nil, show(v) .. ": must be a non-empty string" end
  return v
end

-- A positive quantity from oops.quantity (a zero limit would alert forever).
local function positive(parse)
  return function(v)
    local n, why = parse(v)
    if not n then return nil, why end
    if n == 0 then return nil, show(v) .. ": must be more than zero" end
    return n
  end
end

local ARGV_LIKE = 'must be an argv list of strings like {"make", "image"}'

-- The placeholders of an argument: {name} or {name.KEY} (M.PLACEHOLDER,
-- the exec gateway substitutes with the same pattern).
M.PLACEHOLDER = "{([%a_][%w_]*%.?[%w_%-]*)}"

-- Why argument `i` of an argv is wrong, or nil. `placeholders` nil: any text.
local function bad_argument(i, arg, placeholders)
  if type(arg) ~= "string" then return "argument " .. i .. " is " .. a_type(arg) .. ", not a string" end
  if i == 1 and arg == "" then return "argument 1 (the program) is empty" end
  if not placeholders then return nil end
  local known = set_of(placeholders)
  for name in arg:gmatch(M.PLACEHOLDER) do
    local head = name:match("^([%a_][%w_]*)%.")
    if not (known[name] or (head and known[head .. ".*"] and #name > #head + 1)) then
      return "argument " .. i .. ": " .. show(arg) .. ": unknown placeholder {" .. name .. "} (known: {"
        .. table.concat(placeholders, "}, {"):gsub("%.%*", ".KEY") .. "})"
    end
  end
end

-- An argv list: copied, never a shell string.
local function argv(placeholders)
  return function(v)
    if type(v) == "string" then
      return nil, ARGV_LIKE .. ", not a string (commands never run through a shell)"
    end
    if type(v) ~= "table" then return nil, ARGV_LIKE .. ", not " .. a_type(v) end
    if not is_list(v) then return nil, ARGV_LIKE .. " (it has named keys)" end
    if #v == 0 then return nil, "must be a non-empty argv list of strings like {\"make\", \"image\"}" end
    local out = {}
    for i, arg in ipairs(v) do
      local why = bad_argument(i, arg, placeholders)
      if why then return nil, why end
      out[i] = arg
    end
    return out
  end
end

-- A name as used in app names and environments (a DNS label, as Kubernetes wants).
local function is_label(s)
  if type(s) ~= "string" or #s > 63 then return false end
  return s:match("^[a-z0-9]$") ~= nil or s:match("^[a-z0-9][a-z0-9-]*[a-z0-9]$") ~= nil
end

local function environments(v)
  local like = 'must be a list of environment names like {"staging", "prod"}'
  if type(v) ~= "table" or not is_list(v) or #v == 0 then return nil, like end
  local out, seen = {}, {}
  for i, env in ipairs(v) do
    if type(env) ~= "string" or not is_label(env) then
      return nil, show(env) .. ': must be lowercase letters, digits and "-" (like "prod")'
    end
    if seen[env] then return nil, show(env) .. " is listed twice" end
    seen[env], out[i] = true, env
  end
  return out
end

-- "Europe/Paris", "America/Argentina/Buenos_Aires", "UTC", "Etc/GMT+2".
local function is_zone_name(v)
  if type(v) ~= "string" or v == "" then return false end
  for part in (v .. "/"):gmatch("([^/]*)/") do
    if not part:match("^[%w_][%w_+%-]*$") then return false end
  end
  return true
end

local function timezone(v)
  if not is_zone_name(v) then
    return nil, show(v) .. ': not a time zone name (like "Europe/Paris" or "UTC")'
  end
  -- Where the system has a zone database, a misspelt zone is caught now,
  -- rather than silently running restarts in UTC.
  local probe = io.open("/usr/share/zoneinfo/UTC", "rb")
  if probe then
    probe:close()
    local f = io.open("/usr/share/zoneinfo/" .. v, "rb")
    if not f then return nil, show(v) .. ": unknown time zone (not in /usr/share/zoneinfo)" end
    f:close()
  end
  return v
end

M.sorted_keys, M.set_of, M.is_list, M.a_type = sorted_keys, set_of, is_list, a_type
M.dur, M.percent, M.whole, M.boolean, M.positive = dur, percent, whole, boolean, positive
M.url, M.page_url, M.nonempty, M.argv = url, page_url, nonempty, argv
M.is_label, M.environments, M.timezone = is_label, environments, timezone

return M
