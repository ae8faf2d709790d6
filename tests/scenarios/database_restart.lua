-- needs: own database
-- The database restarts under three servers while twelve builds are in
-- flight: every server finds its lock session lost (every lock gone) and
-- drives nothing until it has reconnected; then they carry on. Nothing is
-- lost and nothing happens twice: every pipeline succeeds, with each status
-- left once, each build submitted once and each deploy made once.
local all = servers { count = 3, policy = [[
scan    { interval = "400ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "2s", deploy = "0s", rollout = "300ms" }
]] }

local ps = {}
for _, app in ipairs { "shop/api", "shop/web", "shop/worker", "billing/api", "billing/cron", "search/indexer" } do
  for _, env in ipairs { "prod", "staging" } do ps[#ps + 1] = create { app = app, env = env } end
end
local N = #ps

-- Restart only once every build is out (claimed RUNNING and its job made):
-- the builds then run on through the outage and finish while it lasts.
wait_until("all " .. N .. " builds are submitted", function()
  return sql("SELECT COUNT(*) AS n FROM sim_job WHERE kind = 'build'")[1].n == N
end, 30)
local before = sql("SELECT NOW(6) AS t")[1].t
local in_flight = sql("SELECT COUNT(*) AS n FROM pipeline WHERE status = 'RUNNING'")[1].n
note(("restarting the database with %d of %d pipelines RUNNING"):format(in_flight, N))

restart_database { down = 4 }
local up = sql("SELECT NOW(6) AS t")[1].t

-- A log line's time ("ts=2024-05-01T10:00:00.123Z") in the database's
-- DATETIME(6) text form, so the two compare as strings.
local function log_times(s, text)
  local out = {}
  for line in s:log():gmatch("[^\n]+") do
    if line:find(text, 1, true) then
      local ts = line:match("ts=(%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d+)Z")
      if ts then out[#out + 1] = (ts:gsub("T", " ")) end
    end
  end
  return out
end

local function first_after(list, t)
  for _, v in ipairs(list) do if v > t then return v end end
end

for _, s in ipairs(all) do
  wait_until(s.name .. " noticed its lock session was lost", function()
    return first_after(log_times(s, "lock session lost"), before) ~= nil
  end, 30)
  wait_until(s.name .. " reconnected its lock session", function()
    return first_after(log_times(s, "lock session reconnected"), before) ~= nil
  end, 60)
end

for _, s in ipairs(all) do
  note(("%s: lock session back at %s (the database answered again at %s)"):format(
    s.name, tostring(first_after(log_times(s, "lock session reconnected"), before)), up))
end

wait_until("every pipeline succeeds after the restart", function()
  return sql("SELECT COUNT(*) AS n FROM pipeline WHERE status = 'SUCCEEDED'")[1].n == N
end, 60)
local finished = sql("SELECT status, COUNT(*) AS n FROM pipeline GROUP BY status ORDER BY status")
local got = {}
for _, r in ipairs(finished) do got[#got + 1] = r.status .. "=" .. r.n end
expect(#finished == 1 and finished[1].status == "SUCCEEDED" and finished[1].n == N,
  "all " .. N .. " pipelines ended SUCCEEDED", table.concat(got, " "))

-- Fail closed: from the moment a server found its lock session lost until it
-- was back, it made no transition (its locks were gone: it must drive
-- nothing, even once the database answers again).
for _, s in ipairs(all) do
  local lost = first_after(log_times(s, "lock session lost"), before)
  local back = lost and first_after(log_times(s, "lock session reconnected"), lost)
  local early = back and sql("SELECT pipeline_id, from_status, to_status, created_at FROM pipeline_event " ..
    "WHERE server = ? AND created_at >= ? AND created_at < ? ORDER BY id", s.name, lost, back) or {}
  local lines = {}
  for _, e in ipairs(early) do
    lines[#lines + 1] = ("%s %s -> %s at %s"):format(e.pipeline_id, e.from_status, e.to_status, e.created_at)
  end
  expect(back ~= nil and #early == 0,
    s.name .. " made no transition while its lock session was down",
    back and table.concat(lines, "\n") or "no reconnection after the loss in its log")
end

-- No status left twice.
local twice = sql("SELECT pipeline_id, from_status, COUNT(*) AS n FROM pipeline_event " ..
  "WHERE from_status IS NOT NULL GROUP BY pipeline_id, from_status HAVING COUNT(*) > 1")
local lines = {}
for _, r in ipairs(twice) do lines[#lines + 1] = ("%s left %s %d times"):format(r.pipeline_id, r.from_status, r.n) end
expect(#twice == 0, "no pipeline left a status twice", table.concat(lines, "\n"))

-- Nothing lost: each pipeline's whole trail, in order, as on a quiet day.
local want = "CREATED BUILDING DEPLOYING ROLLING_OUT SUCCEEDED"
local whole, bad = 0, {}
for _, p in ipairs(ps) do
  local types = {}
  for _, e in ipairs(p:events()) do types[#types + 1] = e.event_type end
  local trail = table.concat(types, " ")
  if trail == want then whole = whole + 1 else bad[#bad + 1] = p.id .. ": " .. trail end
end
expect(whole == N, "every pipeline's events are " .. want, table.concat(bad, "\n"))

-- Each side effect once.
for _, action in ipairs { "build_submit", "deploy" } do
  local once, off = 0, {}
  for _, p in ipairs(ps) do
    local n = p:calls(action)
    if n == 1 then once = once + 1 else off[#off + 1] = ("%s %s: %d calls"):format(p.id, p.app, n) end
  end
  expect(once == N, ("each pipeline's %s happened exactly once"):format(action),
    table.concat(off, "\n"))
end
local stops = sql("SELECT COUNT(*) AS n FROM sim_call WHERE action = 'build_stop'")[1].n
expect(stops == 0, "no build was stopped", stops .. " build_stop call(s)")

for _, s in ipairs(all) do
  expect(s:alive(), s.name .. " is still running", s.exit and ("exited " .. tostring(s.exit.status)))
end

local moved = 0
for _, p in ipairs(ps) do if #p:drivers() > 1 then moved = moved + 1 end end
note(("%d of %d pipelines were carried on by another server after the restart"):format(moved, N))
