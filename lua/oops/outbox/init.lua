-- oopsctl outbox: the notification backlog, per route of the policy.
--
-- Each route of the notifier has a queue of its own (issue 37, src/schema.c
-- v14): its notify_pending rows (one per event it still has to deliver, each
-- with its own attempts, retry time and last error), in id order, and its
-- state in notify_route (failed rounds in a row, when it may try again, the
-- last error of a failed round). Routes are keyed as the notifier keys them
-- (oops.scans.notify route_key). Every statement is index-served and bounded:
--
--   total     the undelivered outbox rows counted (a derived table with a
--             LIMIT, on ix_outbox_pending), each with whether some queue
--             failed it (a point read of ix_notify_pending_outbox), and the
--             rows waiting to be routed (ix_outbox_unrouted); at most SCAN_MAX
--             rows each, past it the count is a lower bound ("capped", ">=").
--   head_any  the oldest undelivered row (ix_outbox_delivered, in index
--             order), and head_queues: the queue rows holding it.
--   counts    a route's queue counted, failing rows (attempts > 0) too: its
--             primary key range, at most SCAN_MAX rows.
--   rows      a route's first rows (its head first), the outbox row joined
--             by its primary key: in primary key order, no sort.
--   state     the route's notify_route row (its primary key).
--
-- A webhook (slack, teams) is named by its scheme and host only
-- (oops.url.show): its userinfo, path or query may hold the secret. Row
-- contents (event ids, errors) are outside input: every last error is masked
-- again (anything like a URL, userinfo), bounded, and escaped for the terminal.
local duration = require("oops.duration")
local json = require("oops.json")
local shown_url = require("oops.url").show

local M = {}

M.SCAN_MAX = 100000 -- rows a count reads at most (a route's queue, the undelivered, the unrouted)
M.ROWS = 20 -- rows listed with --route
M.HEAD_QUEUES = 100 -- queue rows read for the oldest undelivered row (one per route holding it)
M.ERROR_MAX = 300 -- characters of a last error shown

local AGE = "TIMESTAMPDIFF(MICROSECOND, %s, NOW(6))"
local WAIT = "TIMESTAMPDIFF(MICROSECOND, NOW(6), %s)"

M.SQL = {
  total = "SELECT COUNT(*) AS n, SUM(t.failing) AS failing FROM (SELECT o.id,"
    .. " EXISTS (SELECT 1 FROM notify_pending f FORCE INDEX (ix_notify_pending_outbox)"
    .. " WHERE f.outbox_id = o.id AND f.attempts > 0) AS failing"
    .. " FROM outbox o WHERE o.delivered_at IS NULL LIMIT ?) AS t",
  unrouted = "SELECT COUNT(*) AS n FROM (SELECT id FROM outbox WHERE routed = 0 LIMIT ?) AS t",
  head_any = "SELECT id, event_id, kind, routed, " .. AGE:format("created_at") .. " AS age_us"
    .. " FROM outbox WHERE delivered_at IS NULL ORDER BY created_at, id LIMIT 1",
  head_queues = "SELECT attempts, next_attempt_at, (next_attempt_at <= NOW(6)) AS due, "
    .. WAIT:format("next_attempt_at") .. " AS wait_us, LEFT(last_error, 1000) AS last_error"
    .. " FROM notify_pending WHERE outbox_id = ? LIMIT ?",
  counts = "SELECT COUNT(*) AS n, SUM(attempts > 0) AS failing"
    .. " FROM (SELECT attempts FROM notify_pending WHERE route_key = ? LIMIT ?) AS t",
  rows = "SELECT n.outbox_id AS id, o.event_id, o.kind, n.attempts, n.next_attempt_at,"
    .. " (n.next_attempt_at <= NOW(6)) AS due, " .. WAIT:format("n.next_attempt_at") .. " AS wait_us, "
    .. AGE:format("o.created_at") .. " AS age_us, LEFT(n.last_error, 1000) AS last_error"
    .. " FROM notify_pending n LEFT JOIN outbox o ON o.id = n.outbox_id"
    .. " WHERE n.route_key = ? ORDER BY n.outbox_id LIMIT ?",
  state = "SELECT failures, retry_at, (retry_at > NOW(6)) AS backing_off, " .. WAIT:format("retry_at")
    .. " AS wait_us, LEFT(last_error, 1000) AS last_error, (removed_at IS NOT NULL) AS removed"
    .. " FROM notify_route WHERE route_key = ?",
}

------------------------------------------------------------------ text

-- One UTF-8 sequence at i: its length and code point, or nil (invalid:
-- overlong, surrogate, above U+10FFFF, cut).
local function utf8_at(s, i)
  local c = s:byte(i)
  local n, cp, min
  if c >= 0xc2 and c <= 0xdf then n, cp, min = 2, c & 0x1f, 0x80
  elseif c >= 0xe0 and c <= 0xef then n, cp, min = 3, c & 0x0f, 0x800
  elseif c >= 0xf0 and c <= 0xf4 then n, cp, min = 4, c & 0x07, 0x10000
  else return nil end
  for k = 1, n - 1 do
    local b = s:byte(i + k)
    if not b or b < 0x80 or b > 0xbf then return nil end
    cp = (cp << 6) | (b & 0x3f)
  end
  if cp < min or cp > 0x10ffff or (cp >= 0xd800 and cp <= 0xdfff) then return nil end
  return n, cp
end

local function hidden(cp)
  return (cp >= 0x80 and cp <= 0x9f) or cp == 0x061c or cp == 0x200e or cp == 0x200f
    or (cp >= 0x2028 and cp <= 0x202e) or (cp >= 0x2066 and cp <= 0x2069)
end

local C0 = { [10] = "\\n", [9] = "\\t", [13] = "\\r" }

-- What ctl_escape (src/ctl_args.c, CTL_TEXT_LINE) does, for the text output:
-- C0 controls and DEL as \xNN (\n, \t, \r), C1 and the invisible
-- bidirectional and line-separator controls as \uNNNN, bytes that are not
-- UTF-8 as \xNN. With bytes_only (for JSON, whose encoder escapes the
-- controls itself) only the bytes that are not UTF-8.
function M.escape(s, bytes_only)
  s = tostring(s)
  local out, i, from = {}, 1, 1
  while i <= #s do
    local c, esc, adv = s:byte(i), nil, 1
    if c < 0x80 then
      if not bytes_only and (c < 0x20 or c == 0x7f) then esc = C0[c] or ("\\x%02x"):format(c) end
    else
      local n, cp = utf8_at(s, i)
      if not n then esc = ("\\x%02x"):format(c)
      elseif hidden(cp) and not bytes_only then esc, adv = ("\\u%04x"):format(cp), n
      else adv = n end
    end
    if esc then
      out[#out + 1] = s:sub(from, i - 1)
      out[#out + 1] = esc
      from = i + adv
    end
    i = i + adv
  end
  out[#out + 1] = s:sub(from)
  return table.concat(out)
end

-- At most max characters (UTF-8 sequences; a byte that is not one counts
-- as one), the last three "..." when cut.
local function bounded(s, max)
  local i, n, cut = 1, 0, nil
  while i <= #s do
    if n == max - 3 then cut = i end
    if n == max then return s:sub(1, cut - 1) .. "..." end
    i, n = i + (utf8_at(s, i) or 1), n + 1
  end
  return s
end

-- A last error as others may read it: every URL as oops.url shows it
-- (scheme and host, "/***" for the rest; the host masked too when an '@'
-- follows), then any userinfo left ("name:secret@host", "//secret@host")
-- masked, then bounded. notify.lua masks the URLs it writes already: this is
-- the second line, for rows written by anything else.
function M.mask_error(s)
  if s == nil then return nil end
  s = tostring(s):sub(1, 4000)
  s = s:gsub("%a[%w+.%-]*://[^%s\"'<>]*", function(u)
    local body, tail = u:match("^(.-)([.,;:!?)%]]*)$")
    return shown_url(body) .. tail
  end)
  s = s:gsub("//[^%s/@]*@", "//***@")
  s = s:gsub("[^%s/@:]+:[^%s/@]*@", "***@")
  return bounded(s, M.ERROR_MAX)
end

-- A route as the fleet page names it: its kind, and where it sends (a URL's
-- scheme and host, a command's program).
function M.route_name(r)
  if r.url then
    local where = shown_url(r.url)
    return r.kind .. " " .. (where:gsub("/%*%*%*$", "")), where
  end
  if r.argv and r.argv[1] then return r.kind .. " " .. r.argv[1], r.argv[1] end
  return r.kind, r.kind
end

-- The routes of a loaded policy, each once (the notifier delivers a route
-- declared twice once: same key), in the policy's order.
function M.routes(pol, route_key)
  local out, seen = {}, {}
  for _, r in ipairs(pol.notify.routes) do
    local key = route_key(r)
    if not seen[key] then
      seen[key] = true
      local name, where = M.route_name(r)
      out[#out + 1] = { key = key, kind = r.kind, name = name, where = where }
    end
  end
  return out
end

-- The routes `want` picks: the name exactly (or with the page's "/***"), else
-- every route of that kind. Empty when none.
function M.pick(routes, want)
  want = want:match("^%s*(.-)%s*$")
  local exact, by_kind = {}, {}
  for _, r in ipairs(routes) do
    if r.name == want or r.kind .. " " .. r.where == want then exact[#exact + 1] = r end
    if r.kind == want then by_kind[#by_kind + 1] = r end
  end
  return #exact > 0 and exact or by_kind
end

------------------------------------------------------------------ reading

local function num(v) return math.tointeger(tonumber(v)) or tonumber(v) or 0 end
local function seconds(us) return math.max(0, num(us) / 1e6) end
local function stamp(v) return v and v:sub(1, 19) end

local function row_of(r)
  return {
    id = num(r.id), event_id = r.event_id, kind = r.kind, attempts = num(r.attempts),
    next_attempt_at = stamp(r.next_attempt_at), due = num(r.due) == 1,
    wait_s = seconds(r.wait_us), age_s = seconds(r.age_us), last_error = M.mask_error(r.last_error),
  }
end

-- The whole backlog: the undelivered rows and the failing ones among them,
-- the rows waiting to be routed, the oldest undelivered row (its queue rows:
-- how many routes hold it; the most tried one's attempts, retry and error).
-- exec is oops.db.exec; nil, err, name on a database error.
function M.read_total(exec)
  local rows, err, name = exec(M.SQL.total, M.SCAN_MAX)
  if not rows then return nil, err, name end
  local t = { pending = num(rows[1] and rows[1].n), failing = num(rows[1] and rows[1].failing) }
  t.capped = t.pending >= M.SCAN_MAX
  rows, err, name = exec(M.SQL.unrouted, M.SCAN_MAX)
  if not rows then return nil, err, name end
  t.unrouted = num(rows[1] and rows[1].n)
  t.unrouted_capped = t.unrouted >= M.SCAN_MAX
  rows, err, name = exec(M.SQL.head_any)
  if not rows then return nil, err, name end
  t.oldest_s, t.head = 0, json.null
  local h = rows[1]
  if not h then return t end
  local queues
  queues, err, name = exec(M.SQL.head_queues, h.id, M.HEAD_QUEUES)
  if not queues then return nil, err, name end
  local most = { attempts = 0 }
  for _, q in ipairs(queues) do
    if num(q.attempts) > num(most.attempts) or not most.next_attempt_at then most = q end
  end
  most.id, most.event_id, most.kind, most.age_us = h.id, h.event_id, h.kind, h.age_us
  t.head = row_of(most)
  t.head.routed, t.head.queues = num(h.routed) == 1, #queues
  t.oldest_s = t.head.age_s
  return t
end

-- A route's queue: { pending, failing, capped }.
function M.read_counts(exec, key)
  local rows, err, name = exec(M.SQL.counts, key, M.SCAN_MAX)
  if not rows then return nil, err, name end
  local c = { pending = num(rows[1] and rows[1].n), failing = num(rows[1] and rows[1].failing) }
  c.capped = c.pending >= M.SCAN_MAX
  return c
end

-- A route's first rows (at most limit), its head first: { rows, oldest_s }
-- (the head's age).
function M.read_rows(exec, key, limit)
  local rows, err, name = exec(M.SQL.rows, key, limit)
  if not rows then return nil, err, name end
  local out = {}
  for i, r in ipairs(rows) do out[i] = row_of(r) end
  return { rows = out, oldest_s = out[1] and out[1].age_s or 0 }
end

-- A route's own state (notify_route): seen (the notifier's leader has
-- registered it), its failed rounds in a row, when it may try again, its
-- last error (masked), and whether a reload removed it (its queue being
-- released).
function M.read_state(exec, key)
  local rows, err, name = exec(M.SQL.state, key)
  if not rows then return nil, err, name end
  local r = rows[1]
  if not r then
    return { seen = false, failures = 0, retry_at = json.null, retry_in_s = json.null, backing_off = false,
      last_error = json.null, removing = false }
  end
  return { seen = true, failures = num(r.failures), retry_at = stamp(r.retry_at) or json.null,
    retry_in_s = r.retry_at and seconds(r.wait_us) or json.null, backing_off = num(r.backing_off) == 1,
    last_error = M.mask_error(r.last_error) or json.null, removing = num(r.removed) == 1 }
end

------------------------------------------------------------------ the report

-- The report as a table (what --json prints): opts.policy (the directory or
-- nil), opts.routes (M.routes, nil without a policy), opts.detail (true:
-- every route listed has its first ROWS rows). nil, err, name on a database
-- error.
function M.report(exec, opts)
  local total, err, name = M.read_total(exec)
  if not total then return nil, err, name end
  local out = { policy = opts.policy, capped = total.capped or total.unrouted_capped, total = total,
    routes = json.null }
  if not opts.routes then return out end
  out.routes = json.array()
  local limit = opts.detail and M.ROWS or 1
  for _, r in ipairs(opts.routes) do
    local c, rows, st
    c, err, name = M.read_counts(exec, r.key)
    if not c then return nil, err, name end
    rows, err, name = M.read_rows(exec, r.key, limit)
    if not rows then return nil, err, name end
    st, err, name = M.read_state(exec, r.key)
    if not st then return nil, err, name end
    local entry = { name = r.name, kind = r.kind, where = r.where, pending = c.pending, failing = c.failing,
      capped = c.capped, oldest_s = rows.oldest_s, head = rows.rows[1] or json.null, state = st }
    -- A head seen while the count missed it (written in between).
    if rows.rows[1] and entry.pending == 0 then entry.pending = #rows.rows end
    -- Fewer rows than counted and than asked for: rows gone in between.
    entry.rows_capped = #rows.rows < limit and #rows.rows < entry.pending
    if opts.detail then entry.rows = json.array(rows.rows) end
    out.capped = out.capped or c.capped
    out.routes[#out.routes + 1] = entry
  end
  return out
end

------------------------------------------------------------------ printing

local ROUTE = { "name", "kind", "where", "pending", "failing", "capped", "oldest_s", "head", "rows_capped", "state" }
local KEYS = {
  report = { "policy", "capped", "total", "routes" },
  total = { "pending", "failing", "capped", "unrouted", "unrouted_capped", "oldest_s", "head" },
  route = ROUTE,
  route_rows = { table.unpack(ROUTE) },
  state = { "seen", "failures", "retry_at", "retry_in_s", "backing_off", "last_error", "removing" },
  row = { "id", "event_id", "kind", "attempts", "next_attempt_at", "due", "wait_s", "age_s", "last_error" },
  head = { "id", "event_id", "kind", "routed", "queues", "attempts", "next_attempt_at", "due", "wait_s", "age_s",
    "last_error" },
}
KEYS.route_rows[#KEYS.route_rows + 1] = "rows"

local function clean_row(r, keys)
  if r == json.null then return r end
  if r.event_id then r.event_id = M.escape(r.event_id, true) end
  if r.kind then r.kind = M.escape(r.kind, true) end
  if r.last_error then r.last_error = M.escape(r.last_error, true) end
  return json.object(r, keys or KEYS.row)
end

function M.encode(rep)
  json.object(rep, KEYS.report)
  clean_row(rep.total.head, KEYS.head)
  json.object(rep.total, KEYS.total)
  if rep.routes ~= json.null then
    for _, r in ipairs(rep.routes) do
      clean_row(r.head)
      for _, row in ipairs(r.rows or {}) do clean_row(row) end
      if r.state.last_error ~= json.null then r.state.last_error = M.escape(r.state.last_error, true) end
      json.object(r.state, KEYS.state)
      json.object(r, r.rows and KEYS.route_rows or KEYS.route)
    end
  end
  return json.encode(rep)
end

-- 3725.2 -> "1h2m5s"
local function age(s) return duration.format(math.floor(s) * 1000) end

local function next_attempt(row)
  if row == json.null or not row.next_attempt_at then return "-" end
  if row.due then return "due" end
  return row.next_attempt_at .. " (in " .. age(row.wait_s) .. ")"
end

local function at_least(capped, n) return (capped and ">=" or "") .. n end
local function shown(s) return s and M.escape(s) or "-" end

local function text_summary(rep, w)
  local t = rep.total
  w(("total: %s undelivered (%s waiting to be routed), %s failing, oldest %s\n"):format(at_least(t.capped, t.pending),
    at_least(t.unrouted_capped, t.unrouted), at_least(t.capped, t.failing), t.head ~= json.null and age(t.oldest_s)
    or "-"))
  if rep.capped then
    w(("(a count stops at %d rows: \">=\" marks a count that reached it)\n"):format(M.SCAN_MAX))
  end
end

-- What a route's state says, or nil when there is nothing to say (seen,
-- not failing, not removed).
local function state_text(st)
  if not st.seen then return "not registered by the notifier yet (its leader runs another policy?)" end
  if st.removing then return "removed by a reload: its queue is being released" end
  if st.failures == 0 then return nil end
  local s = ("%d failed round%s in a row, "):format(st.failures, st.failures == 1 and "" or "s")
  if st.backing_off then
    return s .. ("backing off until %s (in %s)"):format(st.retry_at, age(st.retry_in_s))
  end
  return s .. "may try again now"
end

-- The table of routes, then the routes' state and each route's last error under it.
local function text_routes(rep, w)
  local width = #"ROUTE"
  for _, r in ipairs(rep.routes) do width = math.max(width, math.min(60, #M.escape(r.name))) end
  local fmt = "%-" .. width .. "s  %8s  %8s  %10s  %8s  %s\n"
  w(fmt:format("ROUTE", "PENDING", "FAILING", "OLDEST", "ATTEMPTS", "NEXT ATTEMPT"))
  local states, errors = {}, {}
  for _, r in ipairs(rep.routes) do
    local h = r.head
    w(fmt:format(M.escape(r.name), at_least(r.capped, r.pending), at_least(r.capped, r.failing),
      r.pending > 0 and age(r.oldest_s) or "-", h ~= json.null and h.attempts or "-", next_attempt(h)))
    local s = state_text(r.state)
    if s then states[#states + 1] = { r.name, s, r.state.failures > 0 and r.state.last_error } end
    if h ~= json.null and h.last_error then errors[#errors + 1] = { r.name, h.last_error } end
  end
  if #states > 0 then
    w("\nroute state:\n")
    for _, s in ipairs(states) do
      w("  " .. M.escape(s[1]) .. ": " .. s[2] .. "\n")
      if s[3] and s[3] ~= json.null then w("    last failed round: " .. M.escape(s[3]) .. "\n") end
    end
  end
  if #errors > 0 then
    w("\nlast errors (of each route's first pending row):\n")
    for _, e in ipairs(errors) do w("  " .. M.escape(e[1]) .. ": " .. M.escape(e[2]) .. "\n") end
  end
end

-- One route in detail, and its first rows.
local function text_detail(r, w)
  local h, st = r.head, r.state
  w("route:        " .. M.escape(r.name) .. "\n")
  w("state:        " .. (state_text(st) or "delivering") .. "\n")
  if st.failures > 0 and st.last_error ~= json.null then w("round error:  " .. M.escape(st.last_error) .. "\n") end
  w(("pending:      %s (%s failing)\n"):format(at_least(r.capped, r.pending), at_least(r.capped, r.failing)))
  w("oldest:       " .. (r.pending > 0 and age(r.oldest_s) or "-") .. "\n")
  if h == json.null then
    w("head:         - (nothing pending)\n")
    return
  end
  w(("head:         #%d %s, %d attempts, next attempt %s\n"):format(h.id, shown(h.event_id), h.attempts,
    next_attempt(h)))
  w("last error:   " .. shown(h.last_error) .. "\n\n")
  local fmt = "%-10s  %-32s  %-8s  %8s  %-32s  %s\n"
  w(fmt:format("ID", "EVENT", "KIND", "ATTEMPTS", "NEXT ATTEMPT", "LAST ERROR"))
  for _, row in ipairs(r.rows or {}) do
    w(fmt:format(row.id, shown(row.event_id), shown(row.kind), row.attempts, next_attempt(row), shown(row.last_error)))
  end
  if #(r.rows or {}) == M.ROWS and r.pending > M.ROWS then
    w(("... the first %d of %s\n"):format(M.ROWS, at_least(r.capped, r.pending)))
  end
end

-- The oldest undelivered row, without a policy.
local function text_first(h, w)
  local s = ("first:  #%d %s, %s old, "):format(h.id, shown(h.event_id), age(h.age_s))
  if not h.routed then
    s = s .. "waiting to be routed"
  elseif h.queues == 0 then
    s = s .. "in no route's queue (its delivery being recorded)"
  else
    s = s .. ("queued for %d route%s, %d attempts, next attempt %s"):format(h.queues, h.queues == 1 and "" or "s",
      h.attempts, next_attempt(h))
  end
  w(s .. "\n")
  w("last error: " .. shown(h.last_error) .. "\n")
end

function M.text(rep, detail)
  local parts = {}
  local function w(s) parts[#parts + 1] = s end
  if rep.routes == json.null then
    text_summary(rep, w)
    if rep.total.head ~= json.null then text_first(rep.total.head, w) end
  elseif detail then
    for i, r in ipairs(rep.routes) do
      if i > 1 then w("\n") end
      text_detail(r, w)
    end
  else
    text_routes(rep, w)
    w("\n")
    text_summary(rep, w)
  end
  return table.concat(parts)
end

return M
