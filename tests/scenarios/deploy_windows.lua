-- ci: normal pass (scripts/test.sh runs each scenario in one pass; these even out the two)
-- Deploy windows and freezes (issue 26): a release whose build succeeded
-- outside its application's window, or inside a freeze, waits in
-- BUILD_SUCCEEDED (still unfinished), its message naming the window or
-- freeze and when it opens; it deploys once it opens, exactly once, by
-- whichever server holds it then — here its driver is frozen (SIGSTOP) as
-- it opens, so another server takes it over and deploys it, and the thawed
-- one does nothing. `oopsctl deploy --override --reason` releases one inside
-- the freeze; a rollback is never held. Windows and freezes are read on the
-- database's clock in deploy.timezone, at minute precision: the window opens
-- at the first minute boundary at least 25 s away.
local function db_now() return tonumber(sql("SELECT UNIX_TIMESTAMP(NOW(6)) AS t")[1].t) end
local function minute(t) return os.date("!%Y-%m-%d %H:%M", t) end
local function hhmm(t) return os.date("!%H:%M", t) end
local now = db_now()
local open = math.ceil((now + 25) / 60) * 60
local close = math.min(open + 300, (math.floor(open / 86400) + 1) * 86400) -- at most 24:00
local window = ("daily %s-%s"):format(hhmm(open), close % 86400 == 0 and "24:00" or hhmm(close))
local from = math.floor(now / 60) * 60 - 3600
release_rules { freezes = { { name = "release-day", from = from, to = open, environments = { prod = true } } } }
servers { count = 3, policy = ([[
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
deploy  { timezone = "UTC" }
gateway "simulated" { build = "300ms", deploy = "0s", rollout = "500ms" }
freeze "release-day" { from = "%s", to = "%s", environments = { "prod" } }
application "shop/api" { environments = { "prod", "staging" }, windows = { staging = { "%s" } } }
application "shop/web" { environments = { "prod" } }
]]):format(minute(from), minute(open), window) }

local staged = create { app = "shop/api", env = "staging", artifact = "a1" }
local frozen = create { app = "shop/api", env = "prod", artifact = "a1" }
local urgent = create { app = "shop/web", env = "prod", artifact = "w1" }
for _, p in ipairs({ staged, frozen, urgent }) do
  expect(p:wait("BUILD_SUCCEEDED", 30), p.app .. " " .. p.env .. " waits after its build", p:message())
end
local opens = os.date("!%a %H:%M", open)
expect(staged:message() == ("Waiting for the deploy window %s, opens %s UTC."):format(window, opens),
  "the window hold says which window and when it opens", staged:message())
expect(frozen:message() == ("Waiting for the freeze release-day to end: %s UTC."):format(minute(open)),
  "the freeze hold says which freeze and when it ends", frozen:message())
expect(staged:row().hold == "window" and frozen:row().hold == "freeze", "... and the pipelines say why they are held",
  tostring(staged:row().hold) .. " " .. tostring(frozen:row().hold))
local rc, _, err = oopsctl("create", "--app", "shop/api", "--env", "prod", "--artifact", "a2")
expect(rc == 1 and err:find("an unfinished pipeline already exists", 1, true),
  "a held release is unfinished: no second release beside it", tostring(rc) .. " " .. tostring(err))

-- An operator overrides the freeze for one release, with a reason.
rc, _, err = oopsctl("deploy", urgent.id, "--override")
expect(rc == 1 and err:find("--reason", 1, true), "--override without --reason is refused", err)
rc, _, err = oopsctl("deploy", urgent.id, "--override", "--reason", "security fix CVE-0")
expect(rc == 0, "oopsctl deploy --override --reason releases it", err)
expect(urgent:wait("SUCCEEDED", 30), "... inside the freeze", urgent:message())
local ev = sql("SELECT message, server FROM pipeline_event WHERE pipeline_id = ? AND event_type = 'OVERRIDE'",
  urgent.id)
expect(#ev == 1 and ev[1].message:find(": security fix CVE-0", 1, true),
  "the override and its reason are in its history",
  ev[1] and ev[1].message)
-- A rollback is never held, freeze or not.
local back = assert(rollback { app = "shop/web", env = "prod", to = urgent.id })
expect(back:wait("SUCCEEDED", 30), "a rollback deploys inside the freeze", back:message())

-- Freeze the drivers of the two held releases as the window and the freeze
-- open: other servers take them over and deploy each once.
expect(db_now() < open - 5, "the window is still closed before the drivers are frozen",
  ("%.1f s before it opens"):format(open - db_now()))
local drivers = {}
for _, p in ipairs({ staged, frozen }) do drivers[p:driver()] = true end
-- (two drivers at most: the third server is free to take them over)
sleep(math.max(0, open - db_now() - 3))
for name in pairs(drivers) do server(name):freeze() end
for _, p in ipairs({ staged, frozen }) do
  expect(p:wait("SUCCEEDED", 60), ("%s %s deploys once it opens"):format(p.app, p.env), p:message())
  local at = tonumber(sql("SELECT UNIX_TIMESTAMP(created_at) AS t FROM pipeline_event WHERE pipeline_id = ? " ..
    "AND to_status = 'DEPLOYING'", p.id)[1].t)
  expect(at >= open, "... not before", ("%.2f s after the opening"):format(at - open))
  expect(not drivers[p:driver()], "... by a server that took it over", p:driver())
end
for name in pairs(drivers) do server(name):thaw() end
sleep(3)
for _, p in ipairs({ staged, frozen }) do
  expect(p:calls("deploy") == 1, p.app .. " " .. p.env .. ": one deploy, the thawed server made none",
    tostring(p:calls("deploy")))
end
