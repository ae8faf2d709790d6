-- oops.formats.teams: a message for a Microsoft Teams "workflows" webhook
-- (Power Automate, "When a Teams webhook request is received"; the old
-- Office 365 connectors took the same envelope), carrying one Adaptive Card:
--
--   { "type": "message", "attachments": [ {
--       "contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": null,
--       "content": { "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
--         "type": "AdaptiveCard", "version": "1.4",
--         "body": [ TextBlock the headline (Bolder, Medium, wrap),
--                   FactSet event + the facts but detail,
--                   TextBlock the event's message (wrap), TextBlock the advice (wrap, subtle) ],
--         "actions": [ Action.OpenUrl to the page ] } } ] }       (actions only with ctx.page)
--
-- Teams renders a Markdown subset in TextBlock text and in facts, links
-- ([title](url)) included, and has no escape for it. So that a value cannot
-- dress a link up as something else, "](" in data gets a zero-width space
-- between the two (the text reads the same; no link is made). Bold and
-- lists from data may still render: cosmetic. Bounds are ours (Teams takes
-- about 28 KB per message, these stay well under it even in 3-byte UTF-8).
local json = require("oops.json")
local formats = require("oops.formats")

local M = {}

M.CARD_TYPE = "application/vnd.microsoft.card.adaptive"
M.SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
M.VERSION = "1.4"
M.TITLE_MAX = 200
M.FACT_TITLE_MAX = 50
M.FACT_VALUE_MAX = 300
M.DETAIL_MAX = 2000
M.ADVICE_MAX = 1000

-- Text from data as a TextBlock or a fact shows it: cut, and no Markdown link.
function M.text(s, max)
  return formats.cut((tostring(s):gsub("%]%(", "]\u{200B}(")), max)
end

local function element(t)
  return formats.object(t, { "type", "text" })
end

local function text_block(text, extra)
  local t = element({ type = "TextBlock", text = text, wrap = true })
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

local function fact_set(m)
  local facts = json.array({
    json.object({ title = "event", value = M.text(m.type, M.FACT_VALUE_MAX) }, { "title", "value" }),
  })
  for _, f in ipairs(m.facts or {}) do
    if f.name ~= "detail" then
      facts[#facts + 1] = json.object({
        title = M.text(f.name, M.FACT_TITLE_MAX), value = M.text(f.value, M.FACT_VALUE_MAX),
      }, { "title", "value" })
    end
  end
  return json.object({ type = "FactSet", facts = facts }, { "type", "facts" })
end

function M.card(m, ctx)
  local body = json.array({
    text_block(M.text(formats.headline(m), M.TITLE_MAX), { weight = "Bolder", size = "Medium" }),
    fact_set(m),
  })
  local detail = formats.fact(m, "detail")
  if detail then body[#body + 1] = text_block(M.text(detail, M.DETAIL_MAX)) end
  if m.advice then body[#body + 1] = text_block(M.text(m.advice, M.ADVICE_MAX), { isSubtle = true }) end
  local card = { ["$schema"] = M.SCHEMA, type = "AdaptiveCard", version = M.VERSION, body = body }
  local link = formats.link(m, ctx)
  if link then
    local title = link:find("#pipeline=", 1, true) and "Open the pipeline" or "Open the fleet page"
    card.actions = json.array({
      json.object({ type = "Action.OpenUrl", title = title, url = link }, { "type", "title", "url" }),
    })
  end
  return formats.object(card, { "$schema", "type", "version", "body", "actions" })
end

function M.render(m, ctx)
  local message = json.object({
    type = "message",
    attachments = json.array({
      json.object({ contentType = M.CARD_TYPE, contentUrl = json.null, content = M.card(m, ctx) },
        { "contentType", "contentUrl", "content" }),
    }),
  }, { "type", "attachments" })
  return json.encode(message), "application/json", {}
end

return M
