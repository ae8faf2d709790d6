-- The demo (README's first command, via scripts/demo.sh): three oopsd servers
-- on the simulated gateway drive a dozen pipelines — some manual and released
-- with `oopsctl deploy`, one failing build, one stopped midway — while one
-- server is SIGKILLed mid-run and the others take its pipelines over.
-- Usage: oopsd lua lua/oops/scenario/demo.lua   (OOPS_DB, OOPSD, OOPSCTL, OOPS_DEMO_DIR set)
local oops = require("oops")
local scenario = require("oops.scenario")

local tty = os.getenv("OOPS_DEMO_TTY") == "1"
local dir = assert(os.getenv("OOPS_DEMO_DIR"), "OOPS_DEMO_DIR")
local env = assert(scenario.begin(os.getenv("OOPS_DB"), os.getenv("OOPSD"), os.getenv("OOPSCTL"), dir))

local POLICY = [[
scan    { interval = "500ms" }
deploy  { timeout = "20s" }
rollout { timeout = "20s" }
locks   { validate_every = "2s" }
gateway "simulated" { build = "6s", deploy = "1s", rollout = "2s" }
]]

local APPS = {
  { "shop/api", "prod" }, { "shop/web", "prod" }, { "shop/worker", "prod" },
  { "billing/invoices", "prod" }, { "billing/ledger", "prod", manual = true },
  { "search/indexer", "prod" }, { "search/query", "prod", manual = true },
  { "auth/login", "prod", fail = true }, { "auth/tokens", "prod" },
  { "media/thumbs", "prod", stop = true }, { "media/upload", "prod", manual = true },
  { "ops/status", "prod" },
}

local function short(s, n)
  s = tostring(s or "")
  if #s > n then return s:sub(1, n - 1) .. "…" end
  return s
end

local started = oops.time()
local finished_status = { SUCCEEDED = true, ERROR = true, STOPPED = true }
local killed, killed_at, takeover_s, victim_pipelines

local function draw(ps, note)
  local rows = {}
  for _, p in ipairs(ps) do
    local r = p:row()
    -- The server holding its lock now; once finished, the last one that drove it.
    local driver = p:driver() or (finished_status[r.status] and r.driven_by) or "(no one)"
    if driver == killed then driver = driver .. " (dead)" end
    rows[#rows + 1] = ("%-12s  %-17s  %-15s  %-10s  %s"):format(p.id, short(p.app, 17), r.status,
      driver, short(r.message, 60))
  end
  local out = {}
  if tty then out[#out + 1] = "\27[H\27[2J" end
  local title = "oopsd demo — 3 servers, %d pipelines, %.0fs   (Ctrl-C stops everything)\n\n"
  out[#out + 1] = title:format(#ps, oops.time() - started)
  out[#out + 1] = ("%-12s  %-17s  %-15s  %-10s  %s\n"):format("PIPELINE", "APP", "STATUS", "DRIVER", "MESSAGE")
  for _, r in ipairs(rows) do out[#out + 1] = r .. "\n" end
  out[#out + 1] = "\n" .. (note or "") .. "\n"
  io.write(table.concat(out))
  io.flush()
end

local function finished(p)
  local st = p:status()
  return st == "SUCCEEDED" or st == "ERROR" or st == "STOPPED"
end

local ok, err = pcall(oops.wait, function()
  local servers = env.servers { count = 3, policy = POLICY }
  local ps, by = {}, {}
  for _, a in ipairs(APPS) do
    local p = env.create { app = a[1], env = a[2], manual = a.manual, artifact = "registry.local/" .. a[1] .. ":2.0" }
    ps[#ps + 1] = p
    by[p] = a
  end
  local status_note = "servers s1 s2 s3 started; pipelines created"
  local stopped, failed, deployed = false, false, {}
  local last_draw = 0
  while true do
    local now = oops.time() - started
    for _, p in ipairs(ps) do
      local a = by[p]
      local st = p:status()
      if a.fail and not failed and st == "RUNNING" then
        -- Setting the simulated job's outcome makes the build fail.
        local r = env.sql("UPDATE sim_job SET outcome = 'failed' WHERE pipeline_id = ? AND kind = 'build'", p.id)
        if r.affected == 1 then failed = true; status_note = "the build of " .. a[1] .. " fails" end
      elseif a.stop and not stopped and st == "RUNNING" and now > 3 then
        p:stop()
        stopped = true
        status_note = "an operator stopped " .. a[1] .. " midway (oopsctl stop)"
      elseif a.manual and st == "BUILD_SUCCEEDED" and not deployed[p] then
        p:deploy()
        deployed[p] = true
        status_note = "an operator released " .. a[1] .. " (oopsctl deploy)"
      end
    end
    if not killed and now > 4 then
      -- Kill the server driving the most pipelines, mid-build.
      local count = {}
      for _, p in ipairs(ps) do
        local d = p:driver()
        if d then count[d] = (count[d] or 0) + 1 end
      end
      local best
      for name, n in pairs(count) do if not best or n > count[best] then best = name end end
      if best then
        victim_pipelines = env.held_by(ps, best)
        killed = best
        killed_at = oops.time()
        env.server(best):kill("KILL")
        status_note = ("SIGKILL sent to %s, which drove %d pipelines"):format(best, #victim_pipelines)
      end
    end
    if killed and not takeover_s then
      local all = true
      for _, p in ipairs(victim_pipelines) do
        if not finished(p) then
          local d = p:driver()
          if not d or d == killed then all = false end
        end
      end
      if all then
        takeover_s = oops.time() - killed_at
        status_note = ("the survivors took over %s's pipelines %.1fs after the SIGKILL"):format(killed, takeover_s)
      end
    end
    if oops.time() - last_draw >= 0.5 then
      draw(ps, status_note)
      last_draw = oops.time()
    end
    local done = true
    for _, p in ipairs(ps) do if not finished(p) then done = false end end
    if done then break end
    if now > 80 then status_note = "giving up after 80s"; break end
    env.sleep(0.25)
  end
  draw(ps, status_note)

  -- The summary: who drove what, and how long the takeover took.
  local per = {}
  for _, p in ipairs(ps) do
    for _, name in ipairs(p:drivers()) do per[name] = (per[name] or 0) + 1 end
  end
  print("summary")
  local names = {}
  for name in pairs(per) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    print(("  %-4s drove %2d pipeline(s)%s"):format(name, per[name], name == killed and "  (SIGKILLed mid-run)" or ""))
  end
  local counts = env.sql("SELECT status, COUNT(*) AS n FROM pipeline GROUP BY status ORDER BY status")
  local parts = {}
  for _, r in ipairs(counts) do parts[#parts + 1] = r.n .. " " .. r.status end
  print("  outcome: " .. table.concat(parts, ", "))
  if takeover_s then
    print(("  takeover: %s's %d unfinished pipeline(s) had a new driver %.1fs after the SIGKILL"):format(
      killed, #victim_pipelines, takeover_s))
  end
  local twice = env.sql([[SELECT COUNT(*) AS n FROM (SELECT pipeline_id FROM sim_call
    WHERE action = 'build_submit' GROUP BY pipeline_id HAVING COUNT(*) > 1) x]])[1].n
  print(("  builds submitted twice: %d; total time %.0fs"):format(twice, oops.time() - started))
  -- What every scenario checks at its end, read from the database.
  local results = scenario.checks(15)
  print("checks (read from the database, as every scenario's end)")
  for _, c in ipairs(results) do
    print(("  %s %s%s"):format(c.ok and "ok  " or "FAIL", c.desc, c.ok and "" or (": " .. tostring(c.diag))))
  end
  for _, s in ipairs(servers) do s:stop(10) end
end)
pcall(oops.wait, scenario.cleanup)
if not ok then
  io.stderr:write("demo failed: " .. tostring(err) .. "\n")
  os.exit(1)
end
