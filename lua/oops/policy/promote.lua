-- oops.policy.promote: an application's promotions as the policy states them
-- (issue 39). lua/oops/promote.lua makes them.
--
--   application "shop/api" { environments = { "dev", "staging", "prod" },
--     promote = { dev = { to = "staging" }, staging = { to = "prod", after = "30m" } } }
--
-- A release live in `dev` is released to `staging`, one live in `staging`
-- for 30 minutes to `prod`: a chain. Each environment promotes to one other
-- at most; `after` (default "0s") is how long it must have been live first.
-- A cycle (staging → prod → staging) is refused: it would promote for ever.
local duration = require("oops.duration")
local values = require("oops.policy.values")

local show = duration.show
local sorted_keys, set_of, a_type = values.sorted_keys, values.set_of, values.a_type

local M = {}

-- The longest wait a promotion may have (a typo like "30d" for "30m" still
-- loads; a year does not).
M.MAX_AFTER_MS = 90 * 86400 * 1000
local SHAPE = '{ staging = { to = "prod", after = "30m" } }'

local function listing(envs) return " (" .. table.concat(envs, ", ") .. ")" end

-- One environment's rule { to =, after = }: { to, after_ms }, or nil (failed).
local function rule(d, r, path, from, envs, listed)
  if type(r) ~= "table" then
    d:fail(path, 'must be a table like { to = "prod", after = "30m" }, not ' .. a_type(r))
    return nil
  end
  local fine = true
  for _, k in ipairs(sorted_keys(r)) do
    if k ~= "to" and k ~= "after" then
      d:fail(path .. "." .. tostring(k), "is not a key of a promotion (to, after)")
      fine = false
    end
  end
  local to = r.to
  if to == nil then
    d:fail(path .. ".to", "required: the environment it promotes to")
    return nil
  elseif envs and not listed[to] then
    d:fail(path .. ".to", show(to) .. " is not one of its environments" .. listing(envs))
    return nil
  elseif to == from then
    d:fail(path .. ".to", "must be another environment than " .. show(from))
    return nil
  end
  local after = 0
  if r.after ~= nil then
    local n, why = duration.parse(r.after)
    if not n then
      d:fail(path .. ".after", why)
      return nil
    elseif n > M.MAX_AFTER_MS then
      d:fail(path .. ".after", show(r.after) .. ": must be at most " .. duration.format(M.MAX_AFTER_MS))
      return nil
    end
    after = n
  end
  return fine and { to = to, after_ms = after } or nil
end

-- promote = { FROM = { to = ENV, after = DURATION } }: { [from] = { to,
-- after_ms } }, {} when none.
function M.app_promote(d, v, envs)
  local out = {}
  if v == nil then return out end
  if type(v) ~= "table" or #v > 0 then
    d:fail("promote", "must be a table like " .. SHAPE ..
      (type(v) ~= "table" and (", not " .. a_type(v)) or " (keyed by environment)"))
    return out
  end
  local listed = set_of(envs or {})
  for _, from in ipairs(sorted_keys(v)) do
    local path = "promote." .. tostring(from)
    if envs and not listed[from] then
      d:fail(path, show(from) .. " is not one of its environments" .. listing(envs))
    else
      out[from] = rule(d, v[from], path, from, envs, listed)
    end
  end
  for _, from in ipairs(sorted_keys(out)) do
    local seen, path, at = { [from] = true }, { from }, out[from].to
    while out[at] do
      path[#path + 1] = at
      if seen[at] then
        d:fail("promote", "a cycle: " .. table.concat(path, " → ") .. " would promote for ever")
        return {}
      end
      seen[at] = true
      at = out[at].to
    end
  end
  return out
end

return M
