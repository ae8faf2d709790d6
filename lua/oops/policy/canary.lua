-- oops.policy.canary: progressive delivery as the policy states it (issue
-- 38): a rollout's strategy ("all", "canary", "blue_green") and its steps,
-- the analysis block (a Prometheus query measured a few times), the query's
-- placeholders and how they are filled in (fill), the cross-file check that
-- every analysis a plan names is declared, and the plan that applies to a
-- pipeline (plan). Pure: no oops binding, so the loader runs in plain Lua.
--
-- The normalized shapes (what the rollout driver reads):
--   rollout.strategy = "all" | "canary" | "blue_green"
--   rollout.steps    = nil for "all", else a list of { weight = N } |
--                      { pause_ms = N } | { pause = true } | { analysis = NAME },
--                      each with `line` (its declaration's line)
--   pol.analyses[NAME] = { name, prometheus, token, query, success, interval_ms,
--                          count, failure_limit, inconclusive, file, line }
local duration = require("oops.duration")
local defaults = require("oops.policy.defaults")
local KEYS = require("oops.policy.keys").KEYS
local values = require("oops.policy.values")

local show = duration.show
local D = defaults.D
local sorted_keys, is_list, a_type, is_label = values.sorted_keys, values.is_list, values.a_type, values.is_label
local dur, whole, url = values.dur, values.whole, values.url

local M = { build = {} }
local build = M.build

M.STRATEGIES = { "all", "canary", "blue_green" }
M.MAX_STEPS = 32
M.MAX_QUERY_BYTES = 4096
-- The placeholders of an analysis query, filled in as PromQL string contents.
M.QUERY_PLACEHOLDERS = { "application", "artifact", "environment", "id", "namespace" }
local QUERY_KNOWN = values.set_of(M.QUERY_PLACEHOLDERS)

local STEPS_LIKE = "{ { weight = 10 }, { pause = \"10m\" }, { weight = 100 } }"
local STEP_KINDS = { "analysis", "pause", "weight" }

-- The application a pipeline names (p.namespace, p.application), or nil.
-- oops.release finds it the same way.
function M.app_of(pol, p)
  return pol and pol.applications and pol.applications[tostring(p.namespace) .. "/" .. tostring(p.application)]
end

local function line_of(where)
  local file, line = tostring(where):match("^(.*):(%d+)$")
  if not file then return where, nil end
  return file, tonumber(line)
end

------------------------------------------------------------------- steps

local function strategy(v)
  for _, s in ipairs(M.STRATEGIES) do
    if v == s then return v end
  end
  return nil, show(v) .. ': must be "all", "canary" or "blue_green"'
end

-- pause = "10m" (a duration) or true (until an operator promotes).
local function pause(v)
  if v == true then return { pause = true } end
  local n, why = dur(1)(v)
  if not n then return nil, why .. " (or true: until an operator promotes)" end
  return { pause_ms = n }
end

local function analysis_name(v)
  if not is_label(v) then
    return nil, show(v) .. ': must be the name of an analysis (lowercase letters, digits and "-")'
  end
  return v
end

-- One step of a canary: a table with exactly one of weight, pause, analysis.
-- Returns the normalized step or nil (the failure reported).
local function one_step(d, s, path, line)
  if type(s) ~= "table" then
    d:fail(path, "must be a table with one of analysis, pause, weight (like { weight = 10 }), not " .. a_type(s))
    return nil
  end
  local errors = #d.st.errors
  d:only(path, s, STEP_KINDS)
  if #d.st.errors > errors then return nil end
  local keys = sorted_keys(s)
  if #keys ~= 1 then
    d:fail(path, "must have exactly one of analysis, pause, weight" ..
      (#keys > 1 and (" (it has " .. table.concat(keys, ", ") .. ")") or " (it is empty)"))
    return nil
  end
  local kind = keys[1]
  local out
  if kind == "weight" then
    local n = d:field(s, "weight", whole(0, 100), nil, path .. ".weight")
    out = n and { weight = n }
  elseif kind == "pause" then
    out = d:field(s, "pause", pause, nil, path .. ".pause")
  else
    local name = d:field(s, "analysis", analysis_name, nil, path .. ".analysis")
    out = name and { analysis = name }
  end
  if out then out.line = line end
  return out
end

-- The analyses a plan names, checked once every file is loaded (check_analyses).
local function refer(st, d, path, name)
  st.analysis_refs = st.analysis_refs or {}
  st.analysis_refs[#st.analysis_refs + 1] = { decl = d, path = path, name = name }
end

-- steps = { ... } of a canary: 1..MAX_STEPS steps, weights never
-- decreasing, the last weight 100.
local function canary_steps(d, v, prefix, st)
  local path = prefix .. "steps"
  local _, line = line_of(d.where)
  if type(v) ~= "table" or not is_list(v) or #v == 0 then
    d:fail(path, "must be a list of 1 to " .. M.MAX_STEPS .. " steps like " .. STEPS_LIKE ..
      (type(v) ~= "table" and (", not " .. a_type(v)) or ""))
    return nil
  end
  if #v > M.MAX_STEPS then
    d:fail(path, #v .. " steps: at most " .. M.MAX_STEPS)
    return nil
  end
  local out, ok, last_weight, last_at = {}, true, nil, nil
  for i, s in ipairs(v) do
    local at = path .. "[" .. i .. "]"
    local step = one_step(d, s, at, line)
    if not step then
      ok = false
    else
      if step.weight then
        if last_weight and step.weight < last_weight then
          d:fail(at .. ".weight", ("%d is less than the weight before it (%d, %s): weights never decrease")
            :format(step.weight, last_weight, last_at))
          ok = false
        end
        last_weight, last_at = step.weight, "steps[" .. i .. "]"
      elseif step.analysis then
        refer(st, d, at .. ".analysis", step.analysis)
      end
      out[i] = step
    end
  end
  if not ok then return nil end
  if last_weight ~= 100 then
    d:fail(path, "the last weight step must be 100: the release ends with all traffic")
    return nil
  end
  return out
end

-- blue_green: the new release beside the old one with no traffic, its
-- analysis, a pause (an operator's, when neither is given), then all traffic.
local function blue_green_steps(d, t, prefix, st)
  local _, line = line_of(d.where)
  local name = d:field(t, "analysis", analysis_name, nil, prefix .. "analysis")
  local p = d:field(t, "pause", pause, nil, prefix .. "pause")
  if name then refer(st, d, prefix .. "analysis", name) end
  local steps = { { weight = 0, line = line } }
  if name then steps[#steps + 1] = { analysis = name, line = line } end
  if p then
    p.line = line
    steps[#steps + 1] = p
  elseif t.pause == nil and t.analysis == nil then
    steps[#steps + 1] = { pause = true, line = line }
  end
  steps[#steps + 1] = { weight = 100, line = line }
  return steps
end

local ONLY_BLUE_GREEN = ": a canary names its analyses and pauses in its steps"

-- A rollout's plan: strategy and steps from table t, its keys named with
-- `prefix` ("" in the rollout block, "rollout." in an application). With
-- `default` nil, a missing strategy gives nil, nil (an application that
-- follows the global plan).
function M.rollout_plan(d, t, prefix, st, default)
  local s = d:field(t, "strategy", strategy, nil, prefix .. "strategy")
  local bad_strategy = t.strategy ~= nil and s == nil
  s = s or (not bad_strategy and default) or nil
  local shown = s and ('strategy is "' .. s .. '"') or "this rollout sets no strategy"
  if t.steps ~= nil and s ~= "canary" and not bad_strategy then
    d:fail(prefix .. "steps", 'only for strategy "canary" (' .. shown .. ")")
  end
  for _, key in ipairs({ "analysis", "pause" }) do
    if t[key] ~= nil and s ~= "blue_green" and not bad_strategy then
      d:fail(prefix .. key, 'only for strategy "blue_green" (' .. shown ..
        (s == "canary" and ONLY_BLUE_GREEN or "") .. ")")
    end
  end
  if s == "canary" then
    if t.steps == nil then
      d:fail(prefix .. "steps", 'required by strategy "canary", like steps = ' .. STEPS_LIKE)
      return s, nil
    end
    return s, canary_steps(d, t.steps, prefix, st)
  elseif s == "blue_green" then
    return s, blue_green_steps(d, t, prefix, st)
  end
  return s, nil
end

---------------------------------------------------------------- the query
-- PromQL's string literals: "..." and '...' (backslash escapes) and `...`
-- (raw); a # outside them starts a comment to the end of its line. A
-- placeholder is a brace around a bare identifier, {name}, with nothing
-- else inside (PromQL's own braces hold matchers: {app="x"}); the five
-- known names may appear only inside a double-quoted literal, which is
-- where fill() puts them, escaped as that literal's contents.

-- Calls visit(kind, text) for each piece of q in order: kind "code" (outside
-- any literal), "dq" (inside "..."), "sq" (inside '...' or `...`); the
-- quotes themselves are code. Returns nil, why for a literal never closed.
local function pieces(q, visit)
  local i, n = 1, #q
  while i <= n do
    local j = q:find("[\"'`#]", i)
    if not j then
      visit("code", q:sub(i))
      break
    end
    if q:sub(j, j) == "#" then -- a comment, to the end of its line: code
      local nl = q:find("\n", j, true) or #q
      visit("code", q:sub(i, nl))
      i = nl + 1
      goto continue
    end
    visit("code", q:sub(i, j))
    local quote, k = q:sub(j, j), j + 1
    while true do
      if k > n then return nil, "a string literal opened with " .. quote .. " is never closed" end
      local c = q:sub(k, k)
      if c == "\\" and quote ~= "`" then
        k = k + 2
      elseif c == quote then
        break
      else
        k = k + 1
      end
    end
    visit(quote == '"' and "dq" or "sq", q:sub(j + 1, k - 1))
    visit("code", quote)
    i = k + 1
    ::continue::
  end
  return true
end

-- The placeholders of text in order: fn(name) for each {name}, name a bare
-- identifier of at most 64 bytes; returns text with each one fn answered a
-- string for replaced. Scanned by hand, without a repeating pattern: a
-- declaration runs under the sandbox's backtracking bound, and a query is
-- up to 4096 bytes.
local function placeholders(text, fn)
  local out, i = {}, 1
  while true do
    local open = text:find("{", i, true)
    if not open then break end
    local close = text:find("}", open + 1, true)
    local next_open = text:find("{", open + 1, true)
    if not close then break end
    if next_open and next_open < close then
      out[#out + 1] = text:sub(i, next_open - 1)
      i = next_open
    else
      local name = text:sub(open + 1, close - 1)
      local is_name = #name <= 64 and name:match("^[%a_][%w_]*$")
      local with = is_name and fn(name) or nil
      out[#out + 1] = text:sub(i, open - 1) .. (with or text:sub(open, close))
      i = close + 1
    end
  end
  out[#out + 1] = text:sub(i)
  return table.concat(out)
end

local function known_list()
  return "{" .. table.concat(M.QUERY_PLACEHOLDERS, "}, {") .. "}"
end

-- The query as written: at most MAX_QUERY_BYTES, each placeholder known and
-- inside a double-quoted literal.
local function query(v)
  if type(v) ~= "string" or v == "" then return nil, show(v) .. ": must be a non-empty string (a PromQL query)" end
  if #v > M.MAX_QUERY_BYTES then return nil, #v .. " bytes: at most " .. M.MAX_QUERY_BYTES end
  local why
  local ok, unclosed = pieces(v, function(kind, text)
    placeholders(text, function(name)
      if why then return end
      if not QUERY_KNOWN[name] then
        why = "unknown placeholder {" .. name .. "} (known: " .. known_list() .. ")"
      elseif kind == "code" then
        why = "{" .. name .. "} outside a quoted string: placeholders are filled in as PromQL string contents"
      elseif kind == "sq" then
        why = "{" .. name .. "} inside a '...' or `...` string: only a double-quoted string may hold a " ..
          "placeholder (its escaping is the one filled in)"
      end
    end)
  end)
  if not ok then return nil, unclosed end
  if why then return nil, why end
  return v
end

-- A value as the contents of a PromQL double-quoted string.
local function escape(s)
  return (s:gsub('[%c\\"\127]', function(c)
    if c == "\\" then return "\\\\" end
    if c == '"' then return '\\"' end
    if c == "\n" then return "\\n" end
    return ("\\x%02x"):format(c:byte())
  end))
end
M.escape = escape

-- The query with each placeholder inside a double-quoted literal replaced by
-- p's field, escaped as that literal's contents. Anything else is left as
-- written. p: { application, environment, namespace, artifact, id }, each a
-- string (or a number); a missing one raises.
function M.fill(q, p)
  if type(q) ~= "string" then error("canary.fill: expects the query string", 2) end
  if type(p) ~= "table" then error("canary.fill: expects the pipeline's fields", 2) end
  local out = {}
  local ok, why = pieces(q, function(kind, text)
    if kind == "dq" then
      text = placeholders(text, function(name)
        if not QUERY_KNOWN[name] then return nil end
        local v = p[name]
        if type(v) ~= "string" and math.type(v) ~= "integer" then
          error("canary.fill: p." .. name .. " must be a string, not " .. a_type(v), 0)
        end
        return escape(tostring(v))
      end)
    end
    out[#out + 1] = text
  end)
  if not ok then error("canary.fill: " .. why, 2) end
  return table.concat(out)
end

------------------------------------------------------------- the analysis

local function success(v)
  if type(v) ~= "function" then
    return nil, "must be a function (value) -> boolean, like success = function(v) return v < 0.01 end, not " ..
      a_type(v)
  end
  return v
end

-- The bearer token's file: an absolute path, read when measuring.
local function token_file(v)
  if type(v) ~= "string" or v:sub(1, 1) ~= "/" or v:find("%z") or #v > 4096 then
    return nil, show(v) .. ': must be the absolute path of a file holding the bearer token (like ' ..
      '"/etc/oopsd/prometheus-token")'
  end
  return v
end

local function inconclusive(v)
  if v ~= "pause" and v ~= "fail" then return nil, show(v) .. ': must be "pause" or "fail"' end
  return v
end

-- analysis "NAME" { prometheus = URL, query = "...", success = function(v) ... end, ... }
function build.analysis(d, t, name, st)
  local failed = st.failed_analyses or {}
  st.failed_analyses = failed
  failed[name] = true -- until it passes
  if not is_label(name) then
    d:fail(nil, 'name must be lowercase letters, digits and "-" (like "errors")')
    return nil
  end
  d:only(nil, t, KEYS.analysis)
  local file, line = line_of(d.where)
  local a = { name = name, file = file, line = line }
  for _, key in ipairs({ "prometheus", "query", "success" }) do
    if t[key] == nil then
      d:fail(key, ({ prometheus = "required (the Prometheus base URL)",
        query = "required (a PromQL query whose value success judges)",
        success = "required, like success = function(v) return v < 0.01 end" })[key])
    end
  end
  a.prometheus = d:field(t, "prometheus", url, nil)
  a.token = d:field(t, "token", token_file, nil)
  a.query = d:field(t, "query", query, nil)
  a.success = d:field(t, "success", success, nil)
  a.interval_ms = d:field(t, "interval", dur(1000), D.analysis_interval)
  a.count = d:field(t, "count", whole(1, 100), defaults.DEFAULTS.analysis.count)
  a.failure_limit = d:field(t, "failure_limit", whole(0, 100), defaults.DEFAULTS.analysis.failure_limit)
  a.inconclusive = d:field(t, "inconclusive", inconclusive, defaults.DEFAULTS.analysis.inconclusive)
  if t.failure_limit ~= nil and a.failure_limit >= a.count then
    d:fail("failure_limit", ("%d is not below count %d: the analysis could never fail"):format(a.failure_limit,
      a.count))
  end
  if not (a.prometheus and a.query and a.success) then return nil end
  failed[name] = nil
  return a
end

------------------------------------------------------ once every file is loaded

-- Every analysis a plan names is declared in some file.
function M.check_analyses(st)
  local declared = st.policy.analyses
  local names = sorted_keys(declared)
  for _, ref in ipairs(st.analysis_refs or {}) do
    if not declared[ref.name] and not (st.failed_analyses or {})[ref.name] then
      ref.decl:fail(ref.path, show(ref.name) .. ": no such analysis (declared: " ..
        (#names > 0 and table.concat(names, ", ") or "none") .. ')')
    end
  end
end

--------------------------------------------------------------- the plan

-- The steps that apply to pipeline p (its application's own plan when that
-- sets a strategy, else the rollout declaration's), or nil for "all".
function M.plan(pol, p)
  local a = M.app_of(pol, p)
  local r = a and a.rollout and a.rollout.strategy and a.rollout or (pol and pol.rollout)
  if not r or r.strategy == nil or r.strategy == "all" then return nil end
  return r.steps
end

return M
