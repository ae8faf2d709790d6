-- oops.formats: the bodies a webhook receiver reads, one module per format
-- (pure: no I/O, no clock). A notification message (oops.notification) goes
-- in, the request body comes out:
--
--   local fmt = formats.get("slack")
--   local body, content_type, headers = fmt.render(m, ctx)
--
-- ctx: { page = "https://oops.example/" or nil (the fleet page's base URL),
--        server = "s1" (this oopsd) }
-- headers: extra HTTP headers of the format, possibly empty; the sender adds
-- its own (Content-Type from content_type, X-Oops-Event-Id, ...).
--
--   json         today's body (oops.notification encode), unchanged
--   cloudevents  a CloudEvents 1.0 event in structured mode, data = the json body
--   slack        a Slack incoming-webhook payload: text + Block Kit blocks
--   teams        a Teams workflows (Power Automate) message with an Adaptive Card
--
-- The helpers below are what the templates share: a fact by name, the
-- headline and one-line summary, the link to the page, text cut to a bound.
local json = require("oops.json")

local M = {}

M.NAMES = { "cloudevents", "json", "slack", "teams" }
local KNOWN = {}
for _, n in ipairs(M.NAMES) do KNOWN[n] = true end

-- The module of a format, or nil, why. Required here rather than at load
-- time: the format modules require this one for the helpers.
function M.get(name)
  if not KNOWN[name] then
    return nil, "unknown format " .. string.format("%q", tostring(name)) .. " (want "
      .. table.concat(M.NAMES, ", ", 1, #M.NAMES - 1) .. " or " .. M.NAMES[#M.NAMES] .. ")"
  end
  return require("oops.formats." .. name)
end

------------------------------------------------------------------ JSON

-- json.object with the keys in this order, but only those the table has:
-- json.object writes a listed key that is absent as null, and receivers
-- refuse a null where they want an attribute left out (CloudEvents' optional
-- attributes, Adaptive Cards' actions).
function M.object(t, keys)
  local present = {}
  for _, k in ipairs(keys) do
    if t[k] ~= nil then present[#present + 1] = k end
  end
  return json.object(t, present)
end

------------------------------------------------------------------ facts

-- The value of a message's first fact of that name, or nil.
function M.fact(m, name)
  for _, f in ipairs(m.facts or {}) do
    if f.name == name then return f.value end
  end
  return nil
end

-- What the message is about: the pipeline id for a pipeline event,
-- "NS/APP/ENV" for an alert (the application fact is already "NS/APP").
function M.subject(m)
  if m.kind == "pipeline" then return M.fact(m, "pipeline") end
  local app, env = M.fact(m, "application"), M.fact(m, "environment")
  if app and env then return app .. "/" .. env end
  return app
end

-- The title as a heading that stands alone: a pipeline's title already names
-- the application, environment and event ("shop/api prod: SUCCEEDED"); an
-- alert's does not ("resource alert | CPU exceeded threshold"), so they are
-- put in front and the edge after it.
function M.headline(m)
  if m.kind == "alert" then
    local app, env = M.fact(m, "application") or "?", M.fact(m, "environment") or "?"
    return app .. " " .. env .. ": " .. tostring(m.title) .. " (" .. tostring(m.type) .. ")"
  end
  return tostring(m.title)
end

-- The facts a summary names after the headline, when the message has them.
local SUMMARY_FACTS = {
  { "pipeline", "pipeline " }, { "actor", "by " }, { "threshold", "at " }, { "pods", "pods " },
}

-- One line: the headline, the pipeline and who did it (or the alert's
-- threshold and pods), then the event's own message. Whitespace runs are one
-- space, so a multi-line message stays one line. Not cut: each format cuts
-- to its receiver's bound.
function M.summary(m)
  local parts = { M.headline(m) }
  for _, s in ipairs(SUMMARY_FACTS) do
    local v = M.fact(m, s[1])
    if v then parts[#parts + 1] = s[2] .. v end
  end
  local line = table.concat(parts, " · ")
  local detail = M.fact(m, "detail")
  if detail then line = line .. " — " .. detail end
  return (line:gsub("%s+", " "))
end

------------------------------------------------------------------ the link

-- What fleet.js opens from the hash: pipeline ids are [a-z0-9]{1,24}.
local function page_pipeline_id(id)
  return type(id) == "string" and #id <= 24 and id:match("^[a-z0-9]+$") ~= nil
end

-- The page's base URL as the formats use it, or nil: http(s) only, no
-- whitespace or control characters (it becomes a button's URL), any fragment
-- dropped (ours takes its place), a user and password dropped (the link goes
-- to every receiver; the policy refuses them too), no link at all when an "@"
-- is left in the path or query (it could be a password's end), and a "/" added
-- to a path without one so "https://host/oops" and "https://host/oops/" give
-- the same links.
function M.page(ctx)
  local page = type(ctx) == "table" and ctx.page or nil
  if type(page) ~= "string" then return nil end
  page = page:gsub("#.*$", "")
  local scheme, authority, rest = page:match("^([Hh][Tt][Tt][Pp][Ss]?://)([^/?]*)(.*)$")
  if not scheme then return nil end
  page = scheme .. authority:gsub("^.*@", "") .. rest
  if page:find("@", 1, true) then return nil end
  if not page:match("^[Hh][Tt][Tt][Pp][Ss]?://[^%s%c]+$") then return nil end
  if not page:find("?", 1, true) and page:sub(-1) ~= "/" then page = page .. "/" end
  return page
end

-- The link a format shows, or nil without ctx.page:
--   a pipeline event  PAGE#pipeline=ID (the page opens that pipeline's detail)
--   an alert          PAGE (the page has no view of one application to open
--                     from the hash; the fleet shows the alerts firing)
-- A pipeline id the page would ignore gets PAGE too.
function M.link(m, ctx)
  local page = M.page(ctx)
  if not page then return nil end
  local id = m.kind == "pipeline" and M.fact(m, "pipeline") or nil
  if page_pipeline_id(id) then return page .. "#pipeline=" .. id end
  return page
end

------------------------------------------------------------------ bounded text

-- The text as valid UTF-8: a byte that is not part of a valid sequence
-- becomes U+FFFD. The receivers count characters and refuse (or garble)
-- what is not UTF-8; the database column may hold anything a command wrote.
function M.utf8(s)
  s = tostring(s)
  if utf8.len(s) then return s end
  local out, i = {}, 1
  while i <= #s do
    local n, bad = utf8.len(s, i)
    if n then
      out[#out + 1] = s:sub(i)
      break
    end
    out[#out + 1] = s:sub(i, bad - 1)
    out[#out + 1] = "\u{FFFD}"
    i = bad + 1
  end
  return table.concat(out)
end

M.ELLIPSIS = "…"

-- The text in at most `max` characters (code points, as Slack and Teams
-- count them), valid UTF-8; a longer one is cut and ends with "…", so the
-- receiver shows most of it rather than refusing the whole message.
function M.cut(s, max)
  s = M.utf8(s)
  if utf8.len(s) <= max then return s end
  local head = s:sub(1, utf8.offset(s, max) - 1) -- the first max - 1 characters
  return head .. M.ELLIPSIS
end

return M
