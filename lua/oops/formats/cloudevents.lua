-- oops.formats.cloudevents: a CloudEvents 1.0 event in structured mode (the
-- whole event is the JSON body; binary mode's ce-* headers are not used):
--
--   { "specversion": "1.0", "id": m.id, "source": PAGE or "/oopsd",
--     "type": "dev.oopsd.pipeline.succeeded" | "dev.oopsd.alert.firing" | ...,
--     "subject": the pipeline id | "NS/APP/ENV", "time": m.time,
--     "datacontenttype": "application/json", "data": the json format's object,
--     "oopsdlink": the page's link (only with ctx.page) }
--
-- id and source together name the event: consumers may take two events with
-- the same pair as duplicates. m.id is the same from every server (the outbox
-- event id), so the source must be too: the fleet page's URL when the policy
-- gives one, else "/oopsd" -- never the sending server's name, which changes
-- when another server becomes the notifier and resends.
-- One extension attribute, with ctx.page only: oopsdlink, the page's link
-- for this event (PAGE#pipeline=ID opens the pipeline). The sending server
-- is in the X-Oops-Server header, not in the event.
local json = require("oops.json")
local notify = require("oops.notification")
local formats = require("oops.formats")

local M = {}

M.CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"
M.TYPE_PREFIX = "dev.oopsd."
M.SOURCE = "/oopsd"

local KEYS = { "specversion", "id", "source", "type", "subject", "time", "datacontenttype", "oopsdlink", "data" }

-- "dev.oopsd.pipeline.build_succeeded": kind and event type, lower case.
function M.event_type(m)
  return M.TYPE_PREFIX .. tostring(m.kind) .. "." .. tostring(m.type):lower()
end

-- An optional attribute is left out rather than sent empty (the spec wants
-- a non-empty string when present).
local function present(s)
  if type(s) == "string" and s ~= "" then return s end
  return nil
end

function M.render(m, ctx)
  -- data is the json format's body decoded, so the two never differ: the
  -- same keys, the same values, facts an array even when empty.
  local data = json.decode(notify.encode(m))
  if type(data.facts) == "table" then json.array(data.facts) end
  json.object(data, { "id", "kind", "type", "level", "title", "facts", "advice", "time" })
  for _, f in ipairs(data.facts or {}) do json.object(f, { "name", "value" }) end
  local event = formats.object({
    specversion = "1.0",
    id = m.id,
    source = formats.page(ctx) or M.SOURCE,
    type = M.event_type(m),
    subject = present(formats.subject(m)),
    time = present(m.time),
    datacontenttype = "application/json",
    oopsdlink = formats.link(m, ctx),
    data = data,
  }, KEYS)
  return json.encode(event), M.CONTENT_TYPE, {}
end

return M
