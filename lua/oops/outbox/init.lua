-- oopsctl outbox: the notification backlog, per route of the policy.
--
-- What waits in the outbox table (src/schema.c) for each route the policy
-- names (routes keyed as the notifier keys them: oops.scans.notify
-- route_key), read in two kinds of bounded statements:
--
--   groups  the undelivered rows counted by delivered_routes (which routes
--           already took them): at most SCAN_MAX rows read (a derived table
--           with a LIMIT, on ix_outbox_pending), at most GROUPS_MAX groups;
--           past either the counts are lower bounds ("capped").
--   head    a route's first pending rows (not delivered, not in its
--           delivered_routes), oldest first, on ix_outbox_delivered
--           (delivered_at, created_at): read in index order, no sort, it
--           stops at its LIMIT, or after SCAN_MAX rows examined (MariaDB's
--           LIMIT ROWS EXAMINED: rows the route already took, waiting for
--           another route, are skipped one by one; past the bound the head
--           is "not within the rows read"). The notifier goes in id order; the ids of
--           rows written at the same moment by concurrent transactions may
--           be out of created_at order, so the first ROWS rows are sorted
--           by id here and the head is the lowest id among them.
--
-- A webhook (slack, teams) is named by its scheme and host only
-- (oops.url.show): its userinfo, path or query may hold the secret. Row
-- contents (event ids, errors) are outside input: last_error is masked again
-- (anything like a URL, userinfo), bounded, and escaped for the terminal.
local duration = require("oops.duration")
local json = require("oops.json")
local shown_url = require("oops.url").show

local M = {}

M.SCAN_MAX = 100000 -- undelivered rows the counts read at most
M.GROUPS_MAX = 1000 -- distinct delivered_routes values
M.ROWS = 20 -- rows listed with --route (and read per route for its head)
M.ERROR_MAX = 300 -- characters of a last error shown

M.SQL = {
  groups = "SELECT delivered_routes, COUNT(*) AS n, SUM(attempts > 0) AS failing,"
    .. " TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) AS age_us"
    .. " FROM (SELECT delivered_routes, attempts, created_at FROM outbox"
    .. " WHERE delivered_at IS NULL LIMIT ?) AS pending"
    .. " GROUP BY delivered_routes ORDER BY NULL LIMIT ?",
}
local ROW_COLUMNS = "SELECT id, event_id, kind, attempts, next_attempt_at, (next_attempt_at <= NOW(6)) AS due,"
  .. " TIMESTAMPDIFF(MICROSECOND, NOW(6), next_attempt_at) AS wait_us,"
  .. " TIMESTAMPDIFF(MICROSECOND, created_at, NOW(6)) AS age_us, LEFT(last_error, 1000) AS last_error"
  .. " FROM outbox WHERE delivered_at IS NULL"
M.SQL.head = ROW_COLUMNS .. " AND FIND_IN_SET(?, COALESCE(delivered_routes, '')) = 0"
  .. " ORDER BY created_at, id LIMIT ? ROWS EXAMINED ?"
M.SQL.head_any = ROW_COLUMNS .. " ORDER BY created_at, id LIMIT ?"

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

local function set_of(text)
  local set = {}
  for k in (text or ""):gmatch("[^,]+") do set[k] = true end
  return set
end

-- The counts: { groups = {{routes = set, n, failing, age_us}}, capped }.
-- exec is oops.db.exec; nil, err, name on a database error.
function M.read_groups(exec)
  local rows, err, name = exec(M.SQL.groups, M.SCAN_MAX, M.GROUPS_MAX)
  if not rows then return nil, err, name end
  local out, read = { groups = {} }, 0
  for _, r in ipairs(rows) do
    out.groups[#out.groups + 1] = { routes = set_of(r.delivered_routes), n = num(r.n),
      failing = num(r.failing), age_us = num(r.age_us) }
    read = read + num(r.n)
  end
  out.capped = read >= M.SCAN_MAX or #rows >= M.GROUPS_MAX
  return out
end

local function row_of(r)
  return {
    id = num(r.id), event_id = r.event_id, kind = r.kind, attempts = num(r.attempts),
    next_attempt_at = r.next_attempt_at and r.next_attempt_at:sub(1, 19), due = num(r.due) == 1,
    wait_s = math.max(0, num(r.wait_us) / 1e6), age_s = math.max(0, num(r.age_us) / 1e6),
    last_error = M.mask_error(r.last_error),
  }
end

-- A route's (key) or, without a key, the whole backlog's first rows: their
-- oldest age and the rows in id order (rows[1] the head).
function M.read_rows(exec, key, limit)
  local rows, err, name
  if key then rows, err, name = exec(M.SQL.head, key, limit, M.SCAN_MAX)
  else rows, err, name = exec(M.SQL.head_any, limit) end
  if not rows then return nil, err, name end
  local out, oldest = {}, 0
  for i, r in ipairs(rows) do
    out[i] = row_of(r)
    oldest = math.max(oldest, out[i].age_s)
  end
  table.sort(out, function(a, b) return a.id < b.id end)
  return { rows = out, oldest_s = oldest }
end

-- A route's counts from the groups: the rows whose delivered_routes lack
-- its key.
function M.count(groups, key)
  local c = { pending = 0, failing = 0, oldest_s = 0 }
  for _, g in ipairs(groups) do
    if not key or not g.routes[key] then
      c.pending = c.pending + g.n
      c.failing = c.failing + g.failing
      c.oldest_s = math.max(c.oldest_s, g.age_us / 1e6)
    end
  end
  return c
end

------------------------------------------------------------------ the report

-- The report as a table (what --json prints): opts.policy (the directory or
-- nil), opts.routes (M.routes, nil without a policy), opts.detail (true:
-- every route listed has its first ROWS rows). nil, err, name on a database
-- error.
function M.report(exec, opts)
  local g, err, name = M.read_groups(exec)
  if not g then return nil, err, name end
  local total = M.count(g.groups, nil)
  local first
  first, err, name = M.read_rows(exec, nil, 1)
  if not first then return nil, err, name end
  total.oldest_s = math.max(total.oldest_s, first.oldest_s)
  local out = { policy = opts.policy, capped = g.capped, total = total, routes = json.null }
  total.head = first.rows[1] or json.null
  if not opts.routes then return out end
  out.routes = json.array()
  for _, r in ipairs(opts.routes) do
    local c = M.count(g.groups, r.key)
    local rows
    rows, err, name = M.read_rows(exec, r.key, M.ROWS)
    if not rows then return nil, err, name end
    local entry = { name = r.name, kind = r.kind, where = r.where, pending = c.pending, failing = c.failing,
      oldest_s = math.max(c.oldest_s, rows.oldest_s), head = rows.rows[1] or json.null }
    -- A head seen while the counts missed it (written in between, or capped).
    if rows.rows[1] and entry.pending == 0 then entry.pending = #rows.rows end
    -- Fewer rows than counted and than asked for: the read stopped at its bound.
    entry.rows_capped = #rows.rows < M.ROWS and #rows.rows < entry.pending
    if opts.detail then entry.rows = json.array(rows.rows) end
    out.routes[#out.routes + 1] = entry
  end
  return out
end

------------------------------------------------------------------ printing

local KEYS = {
  report = { "policy", "capped", "total", "routes" },
  total = { "pending", "failing", "oldest_s", "head" },
  route = { "name", "kind", "where", "pending", "failing", "oldest_s", "head", "rows_capped" },
  route_rows = { "name", "kind", "where", "pending", "failing", "oldest_s", "head", "rows_capped", "rows" },
  row = { "id", "event_id", "kind", "attempts", "next_attempt_at", "due", "wait_s", "age_s", "last_error" },
}

local function clean_row(r)
  if r == json.null then return r end
  r.event_id, r.kind = M.escape(r.event_id, true), M.escape(r.kind, true)
  if r.last_error then r.last_error = M.escape(r.last_error, true) end
  return json.object(r, KEYS.row)
end

function M.encode(rep)
  json.object(rep, KEYS.report)
  clean_row(rep.total.head)
  json.object(rep.total, KEYS.total)
  if rep.routes ~= json.null then
    for _, r in ipairs(rep.routes) do
      clean_row(r.head)
      for _, row in ipairs(r.rows or {}) do clean_row(row) end
      json.object(r, r.rows and KEYS.route_rows or KEYS.route)
    end
  end
  return json.encode(rep)
end

-- 3725.2 -> "1h2m5s"
local function age(s) return duration.format(math.floor(s) * 1000) end

local function next_attempt(row)
  if row == json.null then return "-" end
  if row.due then return "due" end
  return row.next_attempt_at .. " (in " .. age(row.wait_s) .. ")"
end

local function at_least(rep, n) return (rep.capped and ">=" or "") .. n end

local function text_summary(rep, w)
  local t = rep.total
  w(("total: %s undelivered, %s failing, oldest %s\n"):format(at_least(rep, t.pending), at_least(rep, t.failing),
    t.pending > 0 and age(t.oldest_s) or "-"))
  if rep.capped then
    w(("(counts read the first %d undelivered rows only)\n"):format(M.SCAN_MAX))
  end
end

-- The table of routes, then each route's last error under it.
local function text_routes(rep, w)
  local width = #"ROUTE"
  for _, r in ipairs(rep.routes) do width = math.max(width, math.min(60, #M.escape(r.name))) end
  local fmt = "%-" .. width .. "s  %8s  %8s  %10s  %8s  %s\n"
  w(fmt:format("ROUTE", "PENDING", "FAILING", "OLDEST", "ATTEMPTS", "NEXT ATTEMPT"))
  local errors = {}
  for _, r in ipairs(rep.routes) do
    local h = r.head
    w(fmt:format(M.escape(r.name), at_least(rep, r.pending), at_least(rep, r.failing),
      r.pending > 0 and age(r.oldest_s) or "-", h ~= json.null and h.attempts or "-", next_attempt(h)))
    if h ~= json.null and h.last_error then errors[#errors + 1] = { r.name, h.last_error } end
  end
  if #errors > 0 then
    w("\nlast errors (of each route's first pending row):\n")
    for _, e in ipairs(errors) do w("  " .. M.escape(e[1]) .. ": " .. M.escape(e[2]) .. "\n") end
  end
end

-- One route in detail, and its first rows.
local function text_detail(rep, r, w)
  local h = r.head
  w("route:        " .. M.escape(r.name) .. "\n")
  w(("pending:      %s (%s failing)\n"):format(at_least(rep, r.pending), at_least(rep, r.failing)))
  w("oldest:       " .. (r.pending > 0 and age(r.oldest_s) or "-") .. "\n")
  if h == json.null then
    w("head:         - " .. (r.rows_capped and ("(not within the first %d undelivered rows read)"):format(M.SCAN_MAX)
      or "(nothing pending)") .. "\n")
    return
  end
  w(("head:         #%d %s, %d attempts, next attempt %s\n"):format(h.id, M.escape(h.event_id), h.attempts,
    next_attempt(h)))
  w("last error:   " .. (h.last_error and M.escape(h.last_error) or "-") .. "\n\n")
  local fmt = "%-10s  %-32s  %-8s  %8s  %-32s  %s\n"
  w(fmt:format("ID", "EVENT", "KIND", "ATTEMPTS", "NEXT ATTEMPT", "LAST ERROR"))
  for _, row in ipairs(r.rows or {}) do
    w(fmt:format(row.id, M.escape(row.event_id), M.escape(row.kind), row.attempts, next_attempt(row),
      row.last_error and M.escape(row.last_error) or "-"))
  end
  if #(r.rows or {}) == M.ROWS and r.pending > M.ROWS then
    w(("... the first %d of %s\n"):format(M.ROWS, at_least(rep, r.pending)))
  elseif r.rows_capped then
    w(("... and more, past the first %d undelivered rows read\n"):format(M.SCAN_MAX))
  end
end

function M.text(rep, detail)
  local parts = {}
  local function w(s) parts[#parts + 1] = s end
  if rep.routes == json.null then
    text_summary(rep, w)
    local h = rep.total.head
    if h ~= json.null then
      w(("first:  #%d %s, %d attempts, next attempt %s\n"):format(h.id, M.escape(h.event_id), h.attempts,
        next_attempt(h)))
      w("last error: " .. (h.last_error and M.escape(h.last_error) or "-") .. "\n")
    end
  elseif detail then
    for i, r in ipairs(rep.routes) do
      if i > 1 then w("\n") end
      text_detail(rep, r, w)
    end
  else
    text_routes(rep, w)
    w("\n")
    text_summary(rep, w)
  end
  return table.concat(parts)
end

return M
