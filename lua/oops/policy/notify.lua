-- oops.policy.notify: the notify block: its routes (webhook, slack, teams,
-- command, log) with their filters, format and CA file, the retry and the
-- fleet page's URL; declarations that add up across files.
local duration = require("oops.duration")
local D = require("oops.policy.defaults").D
local KEYS = require("oops.policy.keys").KEYS
local values = require("oops.policy.values")

local show = duration.show
local dur, boolean, url, page_url, argv = values.dur, values.boolean, values.url, values.page_url, values.argv
local is_list, environments = values.is_list, values.environments

local M = { build = {} }
local build = M.build

local function notify_retry(d, t)
  local r = d:sub(t, "retry", KEYS["notify.retry"])
  local out = {
    initial_ms = d:field(r, "initial", dur(1), D.retry_initial, "retry.initial"),
    max_ms = d:field(r, "max", dur(1), D.retry_max, "retry.max"),
  }
  if out.initial_ms > out.max_ms then
    d:fail("retry", "initial " .. duration.format(out.initial_ms) .. " is longer than max "
      .. duration.format(out.max_ms))
  end
  return out
end

-- The event names a route's `events` filter knows (issue 28): the statuses
-- a pipeline moves to, the pipeline event types, "alert" (every alert edge)
-- and the edges themselves. Scheduled restarts are not announced.
M.NOTIFY_EVENTS = { "APPROVED", "BUILD_SUCCEEDED", "BUILDING", "CANARY_ABORT", "CANARY_PAUSED", "CANARY_PROMOTE",
  "CANARY_STEP", "CREATED", "DEPLOYING", "DEPLOY_REQUESTED", "ERROR", "FAILED", "FIRING", "INITIALIZED", "OVERRIDE",
  "REJECTED", "REPEAT", "RESOLVED", "ROLLING_OUT", "RUNNING", "STOPPED", "SUCCEEDED", "alert" }
local NOTIFY_EVENT = {}
for _, n in ipairs(M.NOTIFY_EVENTS) do NOTIFY_EVENT[n] = true end

local function event_names(v)
  local like = 'must be a list of event names like {"ERROR", "SUCCEEDED", "alert"}'
  if type(v) ~= "table" or not is_list(v) or #v == 0 then return nil, like end
  local set = {}
  for _, n in ipairs(v) do
    if n == "restart" then
      return nil, '"restart": scheduled restarts are not announced (known: '
        .. table.concat(M.NOTIFY_EVENTS, ", ") .. ")"
    end
    if not NOTIFY_EVENT[n] then
      return nil, show(n) .. ": not an event name (known: " .. table.concat(M.NOTIFY_EVENTS, ", ") .. ")"
    end
    set[n] = true
  end
  return set
end

-- applications = { "shop/*", "pay/api" }: NS/APP, "*" any run of a name's
-- characters; kept as anchored Lua patterns.
local function app_patterns(v)
  local like = 'must be a list of applications like {"shop/*", "pay/api"}'
  if type(v) ~= "table" or not is_list(v) or #v == 0 then return nil, like end
  local out = {}
  for i, a in ipairs(v) do
    if type(a) ~= "string" or #a > 127 or not a:match("^[a-z0-9*-]+/[a-z0-9*-]+$") then
      return nil, show(a) .. ': must be NS/APP of lowercase letters, digits, "-" and "*"'
    end
    out[i] = "^" .. a:gsub("%-", "%%-"):gsub("%*", "[a-z0-9-]*") .. "$"
  end
  return out
end

local function env_set(v)
  local list, why = environments(v)
  if not list then return nil, why end
  local set = {}
  for _, e in ipairs(list) do set[e] = true end
  return set
end

local function ca_file(v)
  if type(v) ~= "string" or not v:match("^/") or #v > 1024 or v:find("[%c]") then
    return nil, show(v) .. ": must be an absolute path of a PEM file"
  end
  return v
end

-- A block's filters, shared by its routes; nil when it has none.
local function notify_filter(d, t)
  local f = {
    events = d:field(t, "events", event_names, nil),
    environments = d:field(t, "environments", env_set, nil),
    applications = d:field(t, "applications", app_patterns, nil),
  }
  return (f.events or f.environments or f.applications) and f or nil
end

-- Routes in a fixed order (webhook, slack, teams, command, log), each with
-- the block's filters, format (webhook) and CA file (https receivers); the
-- retry and the page if set (each once in the whole policy).
function build.notify(d, t, _, st)
  d:only(nil, t, KEYS.notify)
  local n = { routes = {}, names_routes = false }
  local filter, ca = notify_filter(d, t), d:field(t, "ca", ca_file, nil)
  local format = d:field(t, "format", function(v)
    if v == "json" or v == "cloudevents" then return v end
    return nil, show(v) .. ': must be "json" or "cloudevents"'
  end, nil)
  if format and t.webhook == nil then d:fail("format", "goes with webhook = URL") end
  for _, kind in ipairs({ "webhook", "slack", "teams" }) do
    if t[kind] ~= nil then
      n.routes[#n.routes + 1] = { kind = kind, url = d:field(t, kind, url, nil), filter = filter, ca = ca,
        format = kind == "webhook" and (format or "json") or kind }
    end
  end
  if t.command ~= nil then
    n.routes[#n.routes + 1] = { kind = "command", argv = d:field(t, "command", argv(nil), nil), filter = filter }
  end
  if t.log ~= nil and d:field(t, "log", boolean, false) then
    n.routes[#n.routes + 1] = { kind = "log", filter = filter }
  end
  n.names_routes = #n.routes > 0 or t.log ~= nil
  if t.retry ~= nil then
    if st.retry_at then
      d:fail("retry", "already set at " .. st.retry_at)
    else
      st.retry_at, n.retry = d.where, notify_retry(d, t)
    end
  end
  if t.page ~= nil then
    if st.page_at then
      d:fail("page", "already set at " .. st.page_at)
    else
      st.page_at, n.page = d.where, d:field(t, "page", page_url, nil)
    end
  end
  if not n.names_routes and t.retry == nil and t.page == nil then
    d:fail(nil, 'names no route (use webhook = "http://...", slack = URL, teams = URL, command = {...} or log = true)')
  end
  return n
end

-- Notify declarations add up; no route named anywhere means log only.
local function merge_notify(st)
  local n = st.policy.notify
  local routes, named = {}, false
  for _, v in ipairs(st.notifies) do
    named = named or v.names_routes
    for _, r in ipairs(v.routes) do routes[#routes + 1] = r end
    n.retry = v.retry or n.retry
    n.page = v.page or n.page
  end
  if named then n.routes = routes end
end

M.merge_notify = merge_notify

return M
