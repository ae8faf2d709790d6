-- needs: own database
-- needs: network namespaces
-- A partition: one server runs in a network namespace of its own and its
-- link is cut while it drives builds. Nothing tells it or the database: the
-- database reaps its idle lock session after wait_timeout (3 × validate_every
-- = 3 s here), its pipeline locks are freed, the other servers take its
-- pipelines and finish them — no status left twice, no build submitted and no
-- deploy made twice. The cut server fails closed; once the link is back it
-- finds its lock session gone and reconnects.
-- Where network namespaces cannot be made (not root, no iproute2, a
-- container without the right), this scenario says so and is skipped.
local names = require("oops").locks.names
local N = require("oops.scenario.netns")
local available, why = N.available()
if not available then
  skip("network namespaces unavailable: " .. tostring(why))
  return
end

local policy = [[
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "6s", deploy = "0s", rollout = "300ms" }
]]
local SESSION_TIMEOUT = 3 -- seconds: 3 × validate_every (src/lock_registry.c)

local edge = servers { names = { "edge" }, netns = true, policy = policy }[1]
servers { names = { "s2", "s3" }, policy = policy }

local ps = {}
for i = 1, 9 do ps[i] = create { app = "shop/p" .. i, env = "prod" } end
for _, p in ipairs(ps) do expect(p:wait("RUNNING", 20), p.app .. " runs") end

-- Cut while edge drives builds (6 s each, so they are still running).
local mine
-- (On a loaded machine the two others may take all nine before edge's first
-- tick: then three more, up to three times, until edge drives one.)
local more = 0
wait_until("edge drives some of the builds", function()
  mine = {}
  for _, p in ipairs(ps) do
    if p:driver() == "edge" and p:status() == "RUNNING" then mine[#mine + 1] = p end
  end
  if #mine == 0 and more < 3 then
    local all_taken = true
    for _, p in ipairs(ps) do if p:status() ~= "RUNNING" or not p:driver() then all_taken = false end end
    if all_taken then
      more = more + 1
      for _ = 1, 3 do ps[#ps + 1] = create { app = "shop/p" .. (#ps + 1), env = "prod" } end
    end
  end
  return #mine > 0
end, 30)
local function db_now() return tonumber(sql("SELECT UNIX_TIMESTAMP(NOW(6)) AS t")[1].t) end
local session_before = sql("SELECT IS_USED_LOCK(?) AS c", names.server_prefix .. "edge")[1].c
local cut_at = db_now()
edge:partition()
note(("cut edge's link while it drove %d pipeline(s)"):format(#mine))

-- Its locks are freed when the database reaps its lock session; another
-- server takes each of its pipelines (the lock owner changes).
local taken_by, moved_at = {}, nil
wait_until("every pipeline edge drove is held by another server", function()
  local all = true
  for _, p in ipairs(mine) do
    if not taken_by[p] then
      local d = p:driver()
      if not (d and d ~= "edge") then -- or it already made a transition
        for _, s in ipairs(p:drivers()) do if s ~= "edge" then d = s end end
      end
      if d and d ~= "edge" then
        taken_by[p] = d
        moved_at = moved_at or db_now()
      end
    end
    all = all and taken_by[p] ~= nil
  end
  return all
end, 30)
for _, p in ipairs(mine) do
  expect(taken_by[p] ~= nil, p.app .. ": its lock moved from edge to " .. tostring(taken_by[p]))
end
expect(edge:alive(), "edge is still running while cut off (it fails closed, it does not exit)")

for _, p in ipairs(ps) do expect(p:wait("SUCCEEDED", 30), p.app .. " succeeds") end
for _, p in ipairs(mine) do
  local last = sql("SELECT server FROM pipeline_event WHERE pipeline_id = ? ORDER BY id DESC LIMIT 1", p.id)[1]
  expect(last and last.server ~= "edge", p.app .. " was finished by another server",
    "drivers: " .. table.concat(p:drivers(), ", "))
end

local twice = sql([[SELECT pipeline_id, from_status, COUNT(*) AS n FROM pipeline_event
  WHERE from_status IS NOT NULL GROUP BY pipeline_id, from_status HAVING COUNT(*) > 1]])
expect(#twice == 0, "no pipeline left a status twice",
  #twice > 0 and (twice[1].pipeline_id .. " left " .. twice[1].from_status .. " " .. twice[1].n .. " times") or nil)
for _, p in ipairs(ps) do
  local b, d = p:calls("build_submit"), p:calls("deploy")
  expect(b == 1 and d == 1, p.app .. ": build submitted once, deploy made once",
    ("build_submit %d, deploy %d"):format(b, d))
end

local ids = {}
for i, p in ipairs(mine) do ids[i] = p.id end
local first = tonumber(sql([[SELECT MIN(UNIX_TIMESTAMP(created_at)) AS t FROM pipeline_event
  WHERE server <> 'edge' AND server NOT LIKE 'oopsctl@%' AND UNIX_TIMESTAMP(created_at) >= ?
  AND pipeline_id IN (]] .. string.rep("?", #ids, ", ") .. ")", cut_at, table.unpack(ids))[1].t)
note(("session timeout %ds (counted from the lock session's last use, a validation at most 1s before " ..
  "the cut): edge's first lock moved %.1fs after the cut; the first transition by another server " ..
  "came %.1fs after it, when a build edge had submitted ended"):format(
  SESSION_TIMEOUT, (moved_at or cut_at) - cut_at, (first or cut_at) - cut_at))

-- Heal: edge's blocked calls come back, it finds its lock session gone (a
-- failed validation or lock call) and reconnects: the database shows its
-- server lock on a new session.
edge:heal()
wait_until("edge logs that it reconnected after the link came back", function()
  return edge:log():find("lock session reconnected", 1, true) ~= nil
end, 60)
local session_now
if not wait_until("edge holds its server lock on a new lock session", function()
  session_now = sql("SELECT IS_USED_LOCK(?) AS c", names.server_prefix .. "edge")[1].c
  return session_now ~= nil and tonumber(session_now) ~= tonumber(session_before)
end, 30) then
  note(("edge's lock session before the cut: %s, now: %s"):format(tostring(session_before), tostring(session_now)))
end
expect(edge:alive(), "edge is running after the heal")
