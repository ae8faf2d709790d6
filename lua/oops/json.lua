-- oops.json: the one JSON module, over lua-cjson, configured once.
--
--   json.decode(text)            -> value | nil, "why"   (never raises)
--   json.encode(value)           -> text                 (raises on a value JSON cannot hold)
--   json.array(t)                -> t, marked: encoded as an array even when empty
--   json.object(t, keys)         -> t, marked: its keys encoded in this order first
--   json.null                    -> JSON null (as decoded; also encodes as null)
--
-- What it settles for every caller:
--   - "/" is written as "/" (lua-cjson 2.1.0 writes "\/"; it has no option);
--   - an empty list stays a list when marked with json.array (lua-cjson
--     writes every empty table as {});
--   - output is byte-stable: object keys in the order given by json.object,
--     then the rest sorted (lua-cjson follows the table's hash order, which
--     differs between runs), so the same value is the same bytes on every
--     server (webhook resends, outbox payloads);
--   - decoding is bounded in depth (a hostile document costs an error).
-- Strings and numbers are encoded by lua-cjson itself (escaping, precision);
-- bytes that are not UTF-8 pass through as they are.
local cjson = require("cjson").new() -- our own instance: settings never leak
cjson.decode_max_depth(64)
cjson.encode_max_depth(64)

local M = {}

M.null = cjson.null

local ARRAY = { __name = "oops.json.array" }
local ORDER = setmetatable({}, { __mode = "k" }) -- table -> its key order

function M.array(t)
  t = t or {}
  if type(t) ~= "table" then error("json.array: expects a table", 2) end
  return setmetatable(t, ARRAY)
end

function M.object(t, keys)
  if type(t) ~= "table" or type(keys) ~= "table" then error("json.object: expects a table and a key list", 2) end
  ORDER[t] = keys
  return t
end

function M.decode(text)
  if type(text) ~= "string" then return nil, "not JSON text: " .. type(text) end
  local ok, v = pcall(cjson.decode, text)
  if not ok then return nil, tostring(v) end
  return v
end

local function scalar(v)
  -- Every "/" in lua-cjson's output comes from its "\/" escape (a literal
  -- "/" is never written), so dropping the backslash before each one is
  -- exact, also after an escaped backslash ("\\\/" -> "\\/").
  return (cjson.encode(v):gsub("\\/", "/"))
end

-- A sequence 1..n with no other keys (n >= 1).
local function is_sequence(t)
  local n = #t
  if n == 0 then return false end
  local count = 0
  for _ in pairs(t) do count = count + 1 end
  return count == n
end

local encode_value

local function encode_table(t, out, depth)
  if depth > 64 then error("json.encode: nested deeper than 64", 0) end
  if getmetatable(t) == ARRAY or is_sequence(t) then
    out[#out + 1] = "["
    for i = 1, #t do
      if i > 1 then out[#out + 1] = "," end
      encode_value(t[i], out, depth + 1)
    end
    out[#out + 1] = "]"
    return
  end
  local keys, seen = {}, {}
  for _, k in ipairs(ORDER[t] or {}) do
    keys[#keys + 1], seen[k] = k, true
  end
  -- The rest sorted by their text; a number key is written as its text (a
  -- sparse list becomes an object, as lua-cjson does).
  local rest = {}
  for k in pairs(t) do
    local kt = type(k)
    if kt ~= "string" and kt ~= "number" then
      error("json.encode: an object key must be a string or a number, not " .. kt, 0)
    end
    if not seen[k] then rest[#rest + 1] = k end
  end
  table.sort(rest, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(rest) do keys[#keys + 1] = k end
  out[#out + 1] = "{"
  for i, k in ipairs(keys) do
    if i > 1 then out[#out + 1] = "," end
    out[#out + 1] = scalar(tostring(k))
    out[#out + 1] = ":"
    encode_value(t[k], out, depth + 1)
  end
  out[#out + 1] = "}"
end

encode_value = function(v, out, depth)
  local ty = type(v)
  if v == nil or v == M.null then
    out[#out + 1] = "null"
  elseif ty == "table" then
    encode_table(v, out, depth)
  elseif ty == "string" or ty == "number" or ty == "boolean" then
    local ok, text = pcall(scalar, v)
    if not ok then error("json.encode: " .. tostring(text), 0) end
    out[#out + 1] = text
  else
    error("json.encode: cannot encode a " .. ty, 0)
  end
end

function M.encode(v)
  local out = {}
  local ok, err = pcall(encode_value, v, out, 0)
  if not ok then error(err, 2) end
  return table.concat(out)
end

return M
