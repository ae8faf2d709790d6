-- oops.formats.slack: a Slack incoming-webhook payload (Block Kit):
--
--   { "text": the one-line summary (the notification and fallback text),
--     "blocks": [
--       header   (plain_text) the headline
--       section  mrkdwn text: the event's message and the advice;
--                fields: application, environment, pipeline, event, actor,
--                reason, then the other facts, at most 10
--       context  time · server · event id
--       actions  a button to the page (only with ctx.page) ] }
--
-- Every value that comes from data is escaped as Slack documents for mrkdwn
-- (& < > as &amp; &lt; &gt;), so a message cannot make a link, a mention or
-- a channel ping (<@U123>, <!here>); the header is plain_text, which Slack
-- does not parse. Bounds are Slack's own (characters): text and section text
-- 3000, header 150, 10 fields of 2000 each, a button's URL 3000, cut with
-- "…" so Slack shows the message instead of refusing it (invalid_blocks).
local json = require("oops.json")
local formats = require("oops.formats")

local M = {}

M.TEXT_MAX = 3000
M.HEADER_MAX = 150
M.FIELDS_MAX = 10
M.FIELD_MAX = 2000
M.URL_MAX = 3000
-- Ours, tighter than Slack's, so the message stays readable: a field is a
-- value, not a log.
local FIELD_VALUE_MAX = 500
local DETAIL_MAX = 2000
local ADVICE_MAX = 700
local CONTEXT_PART_MAX = 200

local ESCAPES = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;" }

function M.escape(s)
  return (tostring(s):gsub("[&<>]", ESCAPES))
end

-- Escaped text cut to max characters. Cutting after escaping counts what
-- Slack counts; an entity the cut broke ("&am…") is dropped whole, so no
-- stray "&" is left to start one.
local function bounded(escaped, max)
  local c = formats.cut(escaped, max)
  if c ~= escaped then c = c:gsub("&%a*" .. formats.ELLIPSIS .. "$", formats.ELLIPSIS) end
  return c
end

local function mrkdwn(s, max)
  return bounded(M.escape(formats.utf8(s)), max)
end

local function text_object(kind, text)
  return json.object({ type = kind, text = text }, { "type", "text" })
end

local function block(t)
  return json.object(t, { "type" })
end

-- The facts as fields: the ones every format names first, the event type
-- among them, then the rest in display order. detail, time and server are
-- shown elsewhere (the section text, the context). What does not fit in
-- Slack's 10 goes back to the caller, for the section text.
local FIRST = { "application", "environment", "pipeline", "event", "actor", "reason" }
local ELSEWHERE = { detail = true, time = true, server = true }

local function fields_of(m)
  local list, used = {}, {}
  for _, name in ipairs(FIRST) do
    local v = name == "event" and m.type or formats.fact(m, name)
    if v then list[#list + 1], used[name] = { name, v }, true end
  end
  for _, f in ipairs(m.facts or {}) do
    if not used[f.name] and not ELSEWHERE[f.name] then
      list[#list + 1], used[f.name] = { f.name, f.value }, true
    end
  end
  local fields, rest = json.array(), {}
  for i, nv in ipairs(list) do
    local text = "*" .. mrkdwn(nv[1], 100) .. "*\n" .. mrkdwn(nv[2], FIELD_VALUE_MAX)
    if i <= M.FIELDS_MAX then
      fields[#fields + 1] = text_object("mrkdwn", text)
    else
      rest[#rest + 1] = text
    end
  end
  return fields, rest
end

local function section(m)
  local fields, rest = fields_of(m)
  local parts = {}
  local detail = formats.fact(m, "detail")
  if detail then parts[#parts + 1] = mrkdwn(detail, DETAIL_MAX) end
  if m.advice then parts[#parts + 1] = mrkdwn(m.advice, ADVICE_MAX) end
  for _, r in ipairs(rest) do parts[#parts + 1] = r end
  local s = block({ type = "section", fields = fields })
  -- Slack refuses an empty text; with fields it may be left out.
  if #parts > 0 then s.text = text_object("mrkdwn", bounded(table.concat(parts, "\n\n"), M.TEXT_MAX)) end
  return s
end

local function context(m, ctx)
  local parts = {}
  local time = formats.fact(m, "time") or m.time
  if time then parts[#parts + 1] = mrkdwn(time, CONTEXT_PART_MAX) end
  local server = formats.fact(m, "server") or (type(ctx) == "table" and ctx.server) or nil
  if server then parts[#parts + 1] = "server " .. mrkdwn(server, CONTEXT_PART_MAX) end
  if m.id then parts[#parts + 1] = mrkdwn(m.id, CONTEXT_PART_MAX) end
  if #parts == 0 then return nil end
  return block({ type = "context", elements = json.array({ text_object("mrkdwn", table.concat(parts, " · ")) }) })
end

-- A URL button; no interactivity is needed for one (Slack opens the URL).
local function actions(m, ctx)
  local link = formats.link(m, ctx)
  if not link or #link > M.URL_MAX then return nil end
  local label = link:find("#pipeline=", 1, true) and "Open the pipeline" or "Open the fleet page"
  return block({ type = "actions", elements = json.array({
    json.object({ type = "button", text = text_object("plain_text", label), url = link, action_id = "oopsd-open" },
      { "type", "text", "url" }),
  }) })
end

function M.render(m, ctx)
  local blocks = json.array({
    block({ type = "header", text = text_object("plain_text", formats.cut(formats.headline(m), M.HEADER_MAX)) }),
    section(m),
  })
  blocks[#blocks + 1] = context(m, ctx)
  blocks[#blocks + 1] = actions(m, ctx)
  local payload = json.object({ text = mrkdwn(formats.summary(m), M.TEXT_MAX), blocks = blocks }, { "text", "blocks" })
  return json.encode(payload), "application/json", {}
end

return M
