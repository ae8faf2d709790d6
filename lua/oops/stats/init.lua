-- The four delivery figures (DORA) from the pipelines' own history (issue 39):
-- `oopsctl stats`, the fleet page's panel and the oops_delivery_* gauges.
--
-- Over a window (the last N days, 1d to 90d), per target (namespace/
-- application/environment) and for the fleet (or the targets asked for):
--
--   deployment frequency  releases that went live (SUCCEEDED, trigger
--                         release or promotion: a promoted release is a
--                         change to its environment) in the window, per
--                         day. A rollback is not a change: it counts only
--                         as a restore (below).
--   lead time             from the source's commit time (`--source` with a
--                         "committed_at" key: RFC 3339, e.g.
--                         2026-12-01T10:00:00Z, or Unix seconds) when it
--                         gives one, else from the pipeline's creation, to
--                         live; median and p90 of the releases live in the
--                         window.
--   change failure rate   failed deployments over deployments (not over
--                         changes: fourkeys #351). A deployment is a release
--                         that went live or failed after its deploy began
--                         (ERROR from DEPLOYING or ROLLING_OUT); it failed
--                         if it ended so, or was rolled back (a pipeline's
--                         rollback_of names it). Each release counts once,
--                         by its id (fourkeys #213), on the day it ended.
--   time to restore       from a failure (the ERROR, or the rollback's
--                         creation) to the next release of that target
--                         live (a rollback or a fix): median over the
--                         window's failures; failures with nothing live
--                         since are counted as open, not timed.
--
-- Medians of an even count are the mean of the two middle values; p90 is the
-- nearest rank (the ceil(0.9 n)-th smallest).
--
-- Two statements, index-served and bounded whatever the history: the newest
-- SCAN_MAX pipelines SUCCEEDED (resp. ERROR) since the window's start, read in
-- ix_pipeline_status_changed order in a derived table with a LIMIT, each
-- joined by its primary key (its rollback by uq_pipeline_rollback_of, a
-- failure's last transition by ix_event_pipeline); plus the database's clock.
-- Past SCAN_MAX rows the figures are marked capped, with the time from which
-- they are whole. Targets are filtered here, not in SQL: one plan for all.
local duration = require("oops.duration")
local json = require("oops.json")

local M = {}

M.SCAN_MAX = 20000 -- pipelines read at most per status
M.PAGE = 1000 -- pipelines read a statement (a page's rows are tables until folded)
M.MAX_DAYS = 90 -- the longest window
M.WINDOWS = { "7d", "30d", "90d" } -- the page's and the gauges' windows
M.DAY = 86400

-- A page: the next PAGE pipelines of a status, newest first, after the
-- last one read (keyset on ix_pipeline_status_changed: status_changed_at, id).
local PAGE = " FROM (SELECT id FROM pipeline WHERE status = '%s' AND status_changed_at >= ?"
  .. " AND (status_changed_at < ? OR (status_changed_at = ? AND id < ?))"
  .. " ORDER BY status_changed_at DESC, id DESC LIMIT ?) AS t JOIN pipeline p ON p.id = t.id"
local ROLLED = "(SELECT UNIX_TIMESTAMP(r.created_at) FROM pipeline r WHERE r.rollback_of = p.id) AS rolled_back"
M.SQL = {
  now = "SELECT UNIX_TIMESTAMP(NOW(6)) AS now, NOW(6) - INTERVAL ? SECOND AS since",
  live = "SELECT p.id, p.status_changed_at AS changed, p.namespace, p.application, p.environment,"
    .. " p.trigger_type, UNIX_TIMESTAMP(p.created_at) AS created, UNIX_TIMESTAMP(p.status_changed_at) AS at,"
    .. " LEFT(JSON_VALUE(p.source, '$.committed_at'), 64) AS committed_at, " .. ROLLED
    .. PAGE:format("SUCCEEDED"),
  failed = "SELECT p.id, p.status_changed_at AS changed, p.namespace, p.application, p.environment,"
    .. " p.trigger_type, UNIX_TIMESTAMP(p.status_changed_at) AS at,"
    .. " (SELECT e.from_status FROM pipeline_event e WHERE e.pipeline_id = p.id AND e.to_status = 'ERROR'"
    .. " ORDER BY e.id DESC LIMIT 1) AS failed_from, " .. ROLLED
    .. PAGE:format("ERROR"),
}

------------------------------------------------------------------ input

-- A window as written ("7d", "30d", "2w" is not one): whole days, 1d to 90d.
-- -> seconds, or nil and why.
function M.parse_window(s)
  local ms, err = duration.parse(s)
  if not ms then return nil, err end
  if ms % (M.DAY * 1000) ~= 0 or ms < M.DAY * 1000 or ms > M.MAX_DAYS * M.DAY * 1000 then
    return nil, ("%s: a window is whole days from 1d to %dd"):format(duration.show(s), M.MAX_DAYS)
  end
  return ms // 1000
end

-- Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
local function days_from_civil(y, m, d)
  y = m <= 2 and y - 1 or y
  local era = (y >= 0 and y or y - 399) // 400
  local yoe = y - era * 400
  local doy = (153 * (m > 2 and m - 3 or m + 9) + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  return era * 146097 + doe - 719468
end

-- A commit time as a source gives it: RFC 3339 (2026-12-01T10:00:00Z,
-- 2026-12-01T11:00:00.5+01:00) or Unix seconds. -> seconds, or nil.
function M.parse_time(s)
  if type(s) ~= "string" or #s > 64 then return nil end
  if s:match("^%d+$") and #s <= 12 then return tonumber(s) end
  local y, mo, d, h, mi, sec, rest = s:match("^(%d%d%d%d)%-(%d%d)%-(%d%d)[Tt ](%d%d):(%d%d):(%d%d)(.*)$")
  if not y then return nil end
  y, mo, d, h, mi, sec = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi), tonumber(sec)
  if mo < 1 or mo > 12 or d < 1 or d > 31 or h > 23 or mi > 59 or sec > 60 then return nil end
  local frac, zone = rest:match("^(%.%d+)(.*)$")
  if not frac then frac, zone = "", rest end
  local off = 0
  if zone ~= "Z" and zone ~= "z" then
    local sign, oh, om = zone:match("^([+-])(%d%d):(%d%d)$")
    if not sign then return nil end
    off = (tonumber(oh) * 3600 + tonumber(om) * 60) * (sign == "+" and 1 or -1)
  end
  local t = days_from_civil(y, mo, d) * M.DAY + h * 3600 + mi * 60 + sec - off
  return frac ~= "" and t + tonumber("0" .. frac) or t
end

-- The time as UTC RFC 3339, to the second.
function M.iso(t)
  return t and os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(t)) or json.null
end

------------------------------------------------------------------ reading

-- Rows folded into arrays of numbers and interned strings (a pipeline costs
-- a few array slots, not a table): { n, t (target), trig, at, created (live)
-- or deployed (failed: after its deploy began, or rolled back), committed
-- (live: the parsed commit time, or false), rb (rolled back at, or false) }.
local function new_kind() return { n = 0, t = {}, trig = {}, at = {}, created = {}, committed = {}, rb = {} } end

-- Add rows (as the statements give them, or as a spec makes them) to a kind.
function M.add(kind, rows, failed)
  for _, r in ipairs(rows) do
    local i = kind.n + 1
    kind.n = i
    kind.t[i] = r.namespace .. "/" .. r.application .. "/" .. r.environment
    kind.trig[i] = r.trigger_type
    kind.at[i] = tonumber(r.at)
    kind.rb[i] = tonumber(r.rolled_back) or false
    if failed then
      kind.created[i] = r.failed_from == "DEPLOYING" or r.failed_from == "ROLLING_OUT" or kind.rb[i] ~= false
    else
      kind.created[i] = tonumber(r.created)
      kind.committed[i] = M.parse_time(r.committed_at) or false
    end
  end
  return kind
end

-- What M.figures reads, from rows already at hand (specs): now, live rows,
-- failed rows.
function M.collect(now, live, failed)
  return { now = now, capped = false, live = M.add(new_kind(), live), failed = M.add(new_kind(), failed or {}, true) }
end

-- The pipelines of the last `window_s` seconds, read PAGE rows a statement
-- (at most SCAN_MAX per status) and folded: { now =, live =, failed =,
-- capped = bool, whole_since = time from which nothing was cut }.
-- exec(sql, ...) -> rows, or nil, err, name.
function M.read(exec, window_s)
  local head, err, name = exec(M.SQL.now, window_s)
  if not head then return nil, err, name end
  local out = { now = tonumber(head[1].now), capped = false }
  for _, k in ipairs({ "live", "failed" }) do
    local kind = new_kind()
    local changed, id = "9999-12-31 23:59:59.999999", "" -- before the first row
    repeat
      local rows
      rows, err, name = exec(M.SQL[k], head[1].since, changed, changed, id, math.min(M.PAGE, M.SCAN_MAX - kind.n))
      if not rows then return nil, err, name end
      for _, r in ipairs(rows) do -- the page's last row, in index order
        if r.changed < changed or (r.changed == changed and r.id < id) then changed, id = r.changed, r.id end
      end
      M.add(kind, rows, k == "failed")
    until #rows < M.PAGE or kind.n >= M.SCAN_MAX
    if kind.n >= M.SCAN_MAX then
      out.capped = true
      local oldest = math.huge
      for i = 1, kind.n do oldest = math.min(oldest, kind.at[i]) end
      out.whole_since = math.max(out.whole_since or 0, oldest)
    end
    out[k] = kind
  end
  return out
end

------------------------------------------------------------------ figures

local function median(xs)
  local n = #xs
  if n == 0 then return json.null end
  table.sort(xs)
  if n % 2 == 1 then return xs[(n + 1) // 2] end
  return (xs[n // 2] + xs[n // 2 + 1]) / 2
end

local function p90(xs)
  if #xs == 0 then return json.null end
  table.sort(xs)
  return xs[math.ceil(0.9 * #xs)]
end

local function new_acc()
  return { live = 0, leads = {}, from_source = 0, deployed = 0, failures = 0, restores = {}, open = 0 }
end

local function summary(a, days)
  return {
    deployments = a.live,
    per_day = a.live / days,
    lead_time = { median_s = median(a.leads), p90_s = p90(a.leads), releases = #a.leads, from_source = a.from_source },
    change_failure = { failures = a.failures, deployments = a.deployed,
      rate = a.deployed > 0 and a.failures / a.deployed or json.null },
    restore = { median_s = median(a.restores), restored = #a.restores, open = a.open },
  }
end

-- The figures of `data` (M.read, M.collect) over the last `window_s`
-- seconds, for the targets `want(target)` accepts (nil: every one). ->
-- { fleet = summary, series = one entry per day (oldest first), targets =
-- a summary per target, in name order }.
function M.figures(data, window_s, want)
  local now = data.now
  local since, days = now - window_s, window_s // M.DAY
  local fleet, per, series = new_acc(), {}, {}
  for i = 1, days do series[i] = new_acc() end
  local function accs(t, at)
    if at < since or (want and not want(t)) then return nil end
    per[t] = per[t] or new_acc()
    return { fleet, per[t], series[math.min(days, math.floor((at - since) / M.DAY) + 1)] }
  end
  local lives, failures = {}, {} -- per target: live times (restores); failures: { t, at, accs }
  local L, F = data.live, data.failed
  for i = 1, L.n do
    local t, at = L.t[i], L.at[i]
    lives[t] = lives[t] or {}
    lives[t][#lives[t] + 1] = at
    local as = L.trig[i] ~= "rollback" and accs(t, at) -- a release or a promotion
    if as then
      local committed = L.committed[i]
      local from = (committed and committed <= at) and committed or L.created[i]
      for _, a in ipairs(as) do
        a.live, a.deployed = a.live + 1, a.deployed + 1
        a.leads[#a.leads + 1] = at - from
        if from == committed then a.from_source = a.from_source + 1 end
        if L.rb[i] then a.failures = a.failures + 1 end
      end
      if L.rb[i] then failures[#failures + 1] = { t = t, at = L.rb[i], as = as } end
    end
  end
  for i = 1, F.n do
    local as = F.created[i] and F.trig[i] ~= "rollback" and accs(F.t[i], F.at[i])
    if as then
      for _, a in ipairs(as) do a.deployed, a.failures = a.deployed + 1, a.failures + 1 end
      failures[#failures + 1] = { t = F.t[i], at = F.at[i], as = as }
    end
  end
  for _, l in pairs(lives) do table.sort(l) end
  for _, f in ipairs(failures) do
    local next_live
    for _, at in ipairs(lives[f.t] or {}) do
      if at > f.at then next_live = at; break end
    end
    for _, a in ipairs(f.as) do
      if next_live then a.restores[#a.restores + 1] = next_live - f.at else a.open = a.open + 1 end
    end
  end
  local out = { window_s = window_s, days = days, since = M.iso(since), now = M.iso(now),
    capped = data.capped, whole_since = data.capped and M.iso(data.whole_since) or json.null,
    fleet = summary(fleet, days), series = json.array(), targets = json.array() }
  for i, a in ipairs(series) do
    local s = summary(a, 1)
    s.day, s.from = i, M.iso(since + (i - 1) * M.DAY)
    out.series[i] = s
  end
  local names = {}
  for t in pairs(per) do names[#names + 1] = t end
  table.sort(names)
  for _, t in ipairs(names) do
    local s = summary(per[t], days)
    s.target = t
    out.targets[#out.targets + 1] = s
  end
  return out
end

------------------------------------------------------------------ printing

-- A duration in seconds as people read it: 45s, 12m, 3h 20m, 2d 4h.
function M.human(s)
  if s == nil or s == json.null then return "-" end
  s = math.floor(s + 0.5)
  if s < 60 then return s .. "s" end
  if s < 3600 then return ("%dm%s"):format(s // 60, s % 60 > 0 and (" %ds"):format(s % 60) or "") end
  local function part(n, unit) return n > 0 and (" %d%s"):format(n, unit) or "" end
  if s < M.DAY then return ("%dh%s"):format(s // 3600, part((s % 3600) // 60, "m")) end
  return ("%dd%s"):format(s // M.DAY, part((s % M.DAY) // 3600, "h"))
end

local function rate(cf)
  if cf.rate == json.null then return "-" end
  return ("%.1f%% (%d of %d)"):format(cf.rate * 100, cf.failures, cf.deployments)
end

local function line(name, s)
  return ("%-40s %6d %8.2f %10s %10s %18s %10s %4d\n"):format(name, s.deployments, s.per_day,
    M.human(s.lead_time.median_s), M.human(s.lead_time.p90_s), rate(s.change_failure), M.human(s.restore.median_s),
    s.restore.open)
end

function M.text(f, label)
  local out = { ("Delivery over the last %dd (%s to %s)%s\n"):format(f.days, f.since, f.now,
    f.capped and (", capped: whole since " .. f.whole_since) or "") }
  out[#out + 1] = ("%-40s %6s %8s %10s %10s %18s %10s %4s\n"):format("TARGET", "LIVE", "PER DAY", "LEAD MED",
    "LEAD P90", "CHANGE FAILURE", "RESTORE", "OPEN")
  for _, s in ipairs(f.targets) do out[#out + 1] = line(s.target, s) end
  out[#out + 1] = line(label, f.fleet)
  return table.concat(out)
end

return M
