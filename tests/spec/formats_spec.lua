-- The webhook formats (lua/oops/formats/): each renders a pipeline event's
-- and an alert edge's message, built through oops.notification from rows
-- like the notifier's, and each body is checked field by field against the
-- shape its module documents. Sending them is the notifier's (tests/integration).
local notify = require("oops.notification")
local formats = require("oops.formats")
local json = require("oops.json")

local PAGE = { page = "https://oops.example", server = "s2" }
local NO_PAGE = { server = "s2" }
local LINK = "https://oops.example/#pipeline=abc123def456"

local function event(over)
  local r = {
    event_id = "pipeline-event-42", event_type = "SUCCEEDED", pipeline_id = "abc123def456",
    namespace = "shop", application = "api", environment = "prod", deploy_mode = "auto",
    trigger_type = "release", artifact = "registry/shop-api:1.2.3", server = "s1",
    message = "The application was released successfully.", event_at = "2026-08-01 12:00:05.123456",
    source = '{"git": "https://git.example/shop/api.git", "branch": "main"}',
  }
  -- false stands for NULL (a column the row does not have)
  for k, v in pairs(over or {}) do r[k] = v or nil end
  return assert(notify.pipeline_message(r))
end

-- An operator's event: it has an actor and a reason (issue 27).
local function stopped(over)
  local o = { event_type = "STOPPED", actor = "alice@page", reason = "wrong branch",
    message = "Stopped by alice@page: wrong branch" }
  for k, v in pairs(over or {}) do o[k] = v end
  return event(o)
end

local function alert(over, created_at)
  local t = {
    edge = "FIRING", namespace = "shop", application = "api", environment = "prod", metric = "cpu",
    percent = 95, threshold = 1900, limit = 2000, pods = { "api-0", "api-1" },
    since = "2026-08-01 12:00:00.000000", time = "2026-08-01 12:10:00.000000",
  }
  for k, v in pairs(over or {}) do t[k] = v or nil end
  return assert(notify.alert_message("alert-shop/api/prod/cpu-3", notify.alert_payload(t), created_at))
end

local function render(name, m, ctx)
  local body, content_type, headers = assert(formats.get(name)).render(m, ctx)
  assert.are.equal("string", type(body))
  assert.are.equal("table", type(headers))
  return body, content_type, headers
end

local function decoded(name, m, ctx)
  return assert(json.decode((render(name, m, ctx))))
end

-- Every string in a decoded body, keys included, for "does it say X anywhere".
local function strings(v, out)
  out = out or {}
  if type(v) == "string" then
    out[#out + 1] = v
  elseif type(v) == "table" then
    for k, x in pairs(v) do
      strings(k, out)
      strings(x, out)
    end
  end
  return out
end

local function says(body, text)
  for _, s in ipairs(strings(body)) do
    if s:find(text, 1, true) then return true end
  end
  return false
end

local function chars(s) return assert(utf8.len(s)) end

local function keys_of(t)
  local list = {}
  for k in pairs(t) do list[#list + 1] = k end
  table.sort(list)
  return list
end

local function blocks_of(payload, kind)
  local list = {}
  for _, b in ipairs(payload.blocks) do
    if b.type == kind then list[#list + 1] = b end
  end
  return list
end

-- Every mrkdwn text of a Slack payload: the top-level text and each block's.
local function mrkdwn_texts(p)
  local out = { p.text }
  local function walk(v)
    if type(v) ~= "table" then return end
    if v.type == "mrkdwn" then out[#out + 1] = v.text end
    for _, x in pairs(v) do walk(x) end
  end
  walk(p.blocks)
  return out
end

local function card_of(body)
  return body.attachments[1].content
end

local function element_of(card, kind)
  for _, e in ipairs(card.body) do
    if e.type == kind then return e end
  end
end

------------------------------------------------------------------ the registry

describe("formats.get", function()
  it("has the four formats, sorted", function()
    assert.are.same({ "cloudevents", "json", "slack", "teams" }, formats.NAMES)
    for _, name in ipairs(formats.NAMES) do
      assert.are.equal("function", type(formats.get(name).render), name)
    end
  end)

  it("is nil and why for another name, naming the formats", function()
    local f, why = formats.get("nope")
    assert.is_nil(f)
    assert.are.equal('unknown format "nope" (want cloudevents, json, slack or teams)', why)
    assert.is_nil((formats.get(nil)))
    assert.is_nil((formats.get("init")))
  end)
end)

------------------------------------------------------------------ the helpers

describe("the shared helpers", function()
  it("read a fact by name and say what a message is about", function()
    assert.are.equal("shop/api", formats.fact(event(), "application"))
    assert.is_nil(formats.fact(event(), "actor"))
    assert.are.equal("abc123def456", formats.subject(event()))
    assert.are.equal("shop/api/prod", formats.subject(alert()))
  end)

  it("link a pipeline event to its detail and an alert to the page, only with a page", function()
    assert.are.equal(LINK, formats.link(event(), PAGE))
    assert.are.equal(LINK, formats.link(event(), { page = "https://oops.example/" }))
    assert.are.equal("https://oops.example/oops/#pipeline=abc123def456",
      formats.link(event(), { page = "https://oops.example/oops#old" }))
    assert.are.equal("https://oops.example/", formats.link(alert(), PAGE))
    assert.is_nil(formats.link(event(), NO_PAGE))
    assert.is_nil(formats.link(event(), nil))
    -- not a page a button can open
    assert.is_nil(formats.link(event(), { page = "javascript:alert(1)" }))
    assert.is_nil(formats.link(event(), { page = "https://oops.example/a b" }))
    -- an id the page would ignore: the page itself
    assert.are.equal("https://oops.example/", formats.link(event { pipeline_id = "ABC" }, PAGE))
    assert.are.equal("https://oops.example/", formats.link(event { pipeline_id = ("a"):rep(25) }, PAGE))
  end)

  it("sum a message up on one line", function()
    assert.are.equal("shop/api prod: STOPPED · pipeline abc123def456 · by alice@page — "
      .. "Stopped by alice@page: wrong branch", formats.summary(stopped()))
    assert.are.equal("shop/api prod: resource alert | CPU exceeded threshold (FIRING) · at 95% (1900m / 2000m)"
      .. " · pods api-0, api-1", formats.summary(alert()))
    assert.are.equal("shop/api prod: FAILED · pipeline abc123def456 — line one line two",
      formats.summary(event { event_type = "FAILED", message = "line one\n  line two" }))
  end)

  it("cut text to a number of characters with an ellipsis, as valid UTF-8", function()
    assert.are.equal("short", formats.cut("short", 5))
    assert.are.equal("shor…", formats.cut("shorter", 5))
    assert.are.equal("ééé", formats.cut("ééé", 3))
    assert.are.equal("éé…", formats.cut("éééé", 3))
    assert.are.equal("a\u{FFFD}b", formats.cut("a\xffb", 10))
  end)
end)

------------------------------------------------------------------ json

describe("the json format", function()
  it("is today's body, unchanged", function()
    for _, m in ipairs({ event(), stopped(), alert() }) do
      for _, ctx in ipairs({ PAGE, NO_PAGE }) do
        local body, content_type, headers = render("json", m, ctx)
        assert.are.equal(notify.encode(m), body)
        assert.are.equal("application/json", content_type)
        assert.are.same({}, headers)
      end
    end
  end)
end)

------------------------------------------------------------------ cloudevents

describe("the cloudevents format", function()
  local ATTRS = { "data", "datacontenttype", "id", "source", "specversion", "subject", "time", "type" }

  it("is a structured-mode event with its content type and no headers", function()
    local _, content_type, headers = render("cloudevents", event(), PAGE)
    assert.are.equal("application/cloudevents+json; charset=utf-8", content_type)
    assert.are.same({}, headers)
  end)

  it("has the attributes of a pipeline event, with the json body as data", function()
    local m = event()
    local e = decoded("cloudevents", m, NO_PAGE)
    assert.are.same(ATTRS, keys_of(e))
    assert.are.equal("1.0", e.specversion)
    assert.are.equal("pipeline-event-42", e.id)
    assert.are.equal("/oopsd", e.source)
    assert.are.equal("dev.oopsd.pipeline.succeeded", e.type)
    assert.are.equal("abc123def456", e.subject)
    assert.are.equal("2026-08-01T12:00:05.123456Z", e.time)
    assert.are.equal("application/json", e.datacontenttype)
    assert.are.same(json.decode(notify.encode(m)), e.data)
    assert.are.equal("table", type(e.data), "data is an object, not a string")
  end)

  it("has the attributes of an alert edge", function()
    local e = decoded("cloudevents", alert { edge = "RESOLVED" }, NO_PAGE)
    assert.are.same(ATTRS, keys_of(e))
    assert.are.equal("alert-shop/api/prod/cpu-3", e.id)
    assert.are.equal("dev.oopsd.alert.resolved", e.type)
    assert.are.equal("shop/api/prod", e.subject)
    assert.are.equal("2026-08-01T12:10:00.000000Z", e.time)
    assert.are.same(json.decode(notify.encode(alert { edge = "RESOLVED" })), e.data)
  end)

  it("names every attribute as the spec allows and gives each a string", function()
    for _, m in ipairs({ event(), alert() }) do
      local e = decoded("cloudevents", m, PAGE)
      for k, v in pairs(e) do
        assert.matches("^[a-z0-9]+$", k)
        assert.is_true(#k <= 20, k)
        if k ~= "data" then
          assert.are.equal("string", type(v), k)
          assert.is_true(#v > 0, k)
        end
      end
    end
  end)

  it("takes the page as source and adds its link, the same from every server", function()
    local e = decoded("cloudevents", event(), PAGE)
    assert.are.equal("https://oops.example/", e.source)
    assert.are.equal(LINK, e.oopsdlink)
    assert.are.same(e, decoded("cloudevents", event(), { page = "https://oops.example", server = "s9" }))
    assert.are.equal("https://oops.example/", decoded("cloudevents", alert(), PAGE).oopsdlink)
    assert.is_nil(decoded("cloudevents", event(), NO_PAGE).oopsdlink)
  end)

  it("never sends a user or password of the page's URL to a receiver (issue 34)", function()
    local secret = "s3cr%2Ft"
    for _, page in ipairs {
      "https://alice:" .. secret .. "@oops.example/",
      "https://alice:" .. secret .. "@oops.example",
      "HTTPS://" .. secret .. "@oops.example:8443/oops?x=1",
      "https://a:b@c:" .. secret .. "@oops.example/",
      "https://alice:pa/" .. secret .. "@oops.example/",  -- a "/" left unencoded: no link at all
      "https://oops.example/?u=" .. secret .. "@x",
    } do
      local ctx = { page = page, server = "s1" }
      local bodies = {}
      for _, f in ipairs { "cloudevents", "slack", "teams" } do
        bodies[#bodies + 1] = formats.get(f).render(event(), ctx)
        bodies[#bodies + 1] = formats.get(f).render(alert(), ctx)
      end
      local link = formats.link(event(), ctx)
      assert.is_nil(tostring(link):find(secret, 1, true), page)
      for _, b in ipairs(bodies) do
        assert.is_nil(b:find(secret, 1, true), page)
        assert.is_nil(b:find("alice", 1, true), page)
      end
    end
    assert.are.equal("https://oops.example:8443/oops?x=1#pipeline=abc123def456",
      formats.link(event(), { page = "https://u:p@oops.example:8443/oops?x=1" }))
  end)

  it("types every event kind in lower case", function()
    assert.are.equal("dev.oopsd.pipeline.build_succeeded",
      decoded("cloudevents", event { event_type = "BUILD_SUCCEEDED" }, NO_PAGE).type)
    assert.are.equal("dev.oopsd.alert.firing", decoded("cloudevents", alert(), NO_PAGE).type)
  end)

  it("leaves time out, not null, when the message has none", function()
    local m = alert { time = false }
    assert.is_nil(m.time)
    local body = render("cloudevents", m, NO_PAGE)
    assert.is_nil(json.decode(body).time) -- absent: a null would decode as json.null
    assert.are.equal(json.null, json.decode(body).data.time)
  end)
end)

------------------------------------------------------------------ slack

describe("the slack format", function()
  it("has a fallback text, a header, a section with fields, a context and a button", function()
    local body, content_type, headers = render("slack", stopped(), PAGE)
    assert.are.equal("application/json", content_type)
    assert.are.same({}, headers)
    local p = assert(json.decode(body))
    assert.are.same({ "blocks", "text" }, keys_of(p))
    assert.are.equal("shop/api prod: STOPPED · pipeline abc123def456 · by alice@page — "
      .. "Stopped by alice@page: wrong branch", p.text)
    local types = {}
    for i, b in ipairs(p.blocks) do types[i] = b.type end
    assert.are.same({ "header", "section", "context", "actions" }, types)
    assert.are.same({ type = "plain_text", text = "shop/api prod: STOPPED" }, p.blocks[1].text)
    local s = p.blocks[2]
    assert.are.same({ type = "mrkdwn", text = "Stopped by alice@page: wrong branch" }, s.text)
    local fields = {}
    for i, f in ipairs(s.fields) do
      assert.are.equal("mrkdwn", f.type)
      fields[i] = f.text
    end
    assert.are.same({ "*application*\nshop/api", "*environment*\nprod", "*pipeline*\nabc123def456",
      "*event*\nSTOPPED", "*actor*\nalice@page", "*reason*\nwrong branch", "*mode*\nauto",
      "*trigger*\nrelease", "*artifact*\nregistry/shop-api:1.2.3", "*branch*\nmain" }, fields)
    assert.are.same({ { type = "mrkdwn", text = "2026-08-01 12:00:05 UTC · server s1 · pipeline-event-42" } },
      p.blocks[3].elements)
    local button = p.blocks[4].elements[1]
    assert.are.equal("button", button.type)
    assert.are.equal(LINK, button.url)
    assert.are.equal("plain_text", button.text.type)
    assert.is_true(chars(button.text.text) <= 75)
  end)

  it("shows an alert's edge, facts and advice, the sending server in the context", function()
    local p = decoded("slack", alert(), PAGE)
    assert.are.equal("shop/api prod: resource alert | CPU exceeded threshold (FIRING)", p.blocks[1].text.text)
    local s = blocks_of(p, "section")[1]
    assert.matches("throttled", s.text.text)
    assert.are.equal("*event*\nFIRING", s.fields[3].text)
    assert.are.equal("2026-08-01 12:10:00 UTC · server s2 · alert-shop/api/prod/cpu-3",
      blocks_of(p, "context")[1].elements[1].text)
    assert.are.equal("https://oops.example/", blocks_of(p, "actions")[1].elements[1].url)
  end)

  it("has no button and no URL without a page", function()
    for _, m in ipairs({ stopped(), alert() }) do
      local body = render("slack", m, NO_PAGE)
      assert.are.same({}, blocks_of(json.decode(body), "actions"))
      assert.is_nil(body:find('"url"', 1, true))
    end
  end)

  it("escapes &, < and > in every value, so a message makes no mention or link", function()
    local m = stopped { message = "ping <@U123> & <!here> > <https://evil|innocent>", actor = "<@U999>",
      reason = "a&b" }
    local p = decoded("slack", m, PAGE)
    local s = blocks_of(p, "section")[1]
    assert.are.equal("ping &lt;@U123&gt; &amp; &lt;!here&gt; &gt; &lt;https://evil|innocent&gt;", s.text.text)
    assert.are.equal("*actor*\n&lt;@U999&gt;", s.fields[5].text)
    assert.are.equal("*reason*\na&amp;b", s.fields[6].text)
    for _, text in ipairs(mrkdwn_texts(p)) do
      assert.is_nil(text:find("[<>]"), text)
      for amp in text:gmatch("&[^;]*;?") do
        assert.is_true(amp == "&amp;" or amp == "&lt;" or amp == "&gt;", amp)
      end
    end
    -- the plain_text header is not parsed by Slack: shown as it is
    assert.are.equal("shop/api prod: STOPPED", p.blocks[1].text.text)
  end)

  it("keeps every text within Slack's bounds, cut with an ellipsis", function()
    local long = ("é<&"):rep(5000)
    local m = stopped { message = long, application = ("a"):rep(300), artifact = ("x"):rep(5000) }
    local p = decoded("slack", m, PAGE)
    assert.is_true(chars(p.text) <= 3000)
    assert.matches("…$", p.text)
    local h = p.blocks[1].text.text
    assert.is_true(chars(h) <= 150)
    assert.matches("…$", h)
    local s = blocks_of(p, "section")[1]
    assert.is_true(chars(s.text.text) <= 3000)
    assert.matches("…$", s.text.text)
    assert.is_true(#s.fields <= 10)
    for _, f in ipairs(s.fields) do assert.is_true(chars(f.text) <= 2000) end
    -- a cut never leaves half an entity behind
    for _, text in ipairs(mrkdwn_texts(p)) do
      assert.is_nil(text:find("&[a-z]*…"), text)
      assert.is_nil(text:find("&[a-z]*$"), text)
    end
  end)

  it("puts facts beyond ten fields in the section text", function()
    local m = event()
    for i = 1, 6 do m.facts[#m.facts + 1] = { name = "extra" .. i, value = "v" .. i } end
    local s = blocks_of(decoded("slack", m, NO_PAGE), "section")[1]
    assert.are.equal(10, #s.fields)
    assert.matches("%*extra6%*\nv6", s.text.text)
  end)
end)

------------------------------------------------------------------ teams

describe("the teams format", function()
  it("is a message with one Adaptive Card attachment", function()
    local body, content_type, headers = render("teams", stopped(), PAGE)
    assert.are.equal("application/json", content_type)
    assert.are.same({}, headers)
    local t = assert(json.decode(body))
    assert.are.same({ "attachments", "type" }, keys_of(t))
    assert.are.equal("message", t.type)
    assert.are.equal(1, #t.attachments)
    local a = t.attachments[1]
    assert.are.equal("application/vnd.microsoft.card.adaptive", a.contentType)
    assert.are.equal(json.null, a.contentUrl)
    assert.truthy(body:find('"contentUrl":null', 1, true))
    local card = a.content
    assert.are.equal("AdaptiveCard", card.type)
    assert.are.equal("1.4", card.version)
    assert.are.equal("http://adaptivecards.io/schemas/adaptive-card.json", card["$schema"])
  end)

  it("has a title, the facts, the message and a link to the pipeline", function()
    local m = stopped()
    local card = card_of(decoded("teams", m, PAGE))
    assert.are.same({ type = "TextBlock", text = "shop/api prod: STOPPED", weight = "Bolder", size = "Medium",
      wrap = true }, card.body[1])
    local facts = assert(element_of(card, "FactSet")).facts
    local want = { { title = "event", value = "STOPPED" } }
    for _, f in ipairs(m.facts) do
      if f.name ~= "detail" then want[#want + 1] = { title = f.name, value = f.value } end
    end
    assert.are.same(want, facts)
    assert.are.same({ type = "TextBlock", text = "Stopped by alice@page: wrong branch", wrap = true }, card.body[3])
    assert.are.same({ { type = "Action.OpenUrl", title = "Open the pipeline", url = LINK } }, card.actions)
  end)

  it("shows an alert's advice, and opens the page", function()
    local card = card_of(decoded("teams", alert(), PAGE))
    assert.are.equal("shop/api prod: resource alert | CPU exceeded threshold (FIRING)", card.body[1].text)
    assert.are.same({ title = "event", value = "FIRING" }, element_of(card, "FactSet").facts[1])
    local advice = card.body[#card.body]
    assert.are.equal("TextBlock", advice.type)
    assert.matches("throttled", advice.text)
    assert.is_true(advice.wrap)
    assert.are.equal("https://oops.example/", card.actions[1].url)
  end)

  it("has no actions, not even null, without a page", function()
    for _, m in ipairs({ stopped(), alert() }) do
      local body = render("teams", m, NO_PAGE)
      assert.is_nil(card_of(json.decode(body)).actions)
      assert.is_nil(body:find('"actions"', 1, true))
    end
  end)

  it("makes no Markdown link of a value", function()
    local card = card_of(decoded("teams", stopped { message = "see [the log](https://evil.example)",
      reason = "[x](https://evil.example)" }, PAGE))
    for _, s in ipairs(strings(card.body)) do assert.is_nil(s:find("](", 1, true), s) end
    assert.matches("the log", card.body[3].text)
  end)

  it("keeps every text within its bound, cut with an ellipsis", function()
    local teams = formats.get("teams")
    local m = stopped { message = ("ü"):rep(10000), application = ("a"):rep(500), artifact = ("x"):rep(5000) }
    local card = card_of(decoded("teams", m, PAGE))
    assert.is_true(chars(card.body[1].text) <= teams.TITLE_MAX)
    assert.matches("…$", card.body[1].text)
    for _, f in ipairs(element_of(card, "FactSet").facts) do
      assert.is_true(chars(f.value) <= teams.FACT_VALUE_MAX, f.title)
    end
    assert.is_true(chars(card.body[3].text) <= teams.DETAIL_MAX)
    assert.matches("…$", card.body[3].text)
  end)
end)

------------------------------------------------------------------ what every format says

describe("every format", function()
  local cases = {
    { "a pipeline event", event, { "shop/api", "prod", "abc123def456", "SUCCEEDED",
      "The application was released successfully." } },
    { "an operator's event", stopped, { "shop/api", "prod", "abc123def456", "STOPPED",
      "Stopped by alice@page: wrong branch", "alice@page", "wrong branch" } },
    { "an alert edge", alert, { "shop/api", "prod", "FIRING", "CPU exceeded threshold", "throttled" } },
  }
  for _, name in ipairs(formats.NAMES) do
    for _, c in ipairs(cases) do
      it(name .. " names the application, environment, pipeline, event, message and actor of " .. c[1], function()
        local body = decoded(name, c[2](), NO_PAGE)
        for _, text in ipairs(c[3]) do assert.is_true(says(body, text), name .. " says " .. text) end
      end)
    end
    if name ~= "json" then -- json is today's body: it has no link
      it(name .. " links to the page only when given one", function()
        assert.is_true(says(decoded(name, event(), PAGE), LINK))
        assert.is_false(says(decoded(name, event(), NO_PAGE), "https://oops.example"))
      end)
    end
  end

  it("renders a message with no facts, advice or time", function()
    local m = { id = "pipeline-event-1", kind = "pipeline", type = "CREATED", level = "info", title = "x" }
    for _, name in ipairs(formats.NAMES) do
      assert.is_table(decoded(name, m, PAGE), name)
    end
    assert.truthy(render("cloudevents", m, NO_PAGE):find('"facts":[]', 1, true))
  end)
end)
