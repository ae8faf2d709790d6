-- needs: own database
-- External builds outlive their servers (exec gateway, build = { submit,
-- status, cancel }): the build runs in a pretend CI system of the tests'
-- own (tests/exec/ci.sh, jobs kept in a directory), any server can poll it.
--   1. The driver of a build is SIGKILLed mid-build, then every server is
--      restarted in turn (SIGTERM, start), a driver's lock session is cut and
--      the database restarts: each pipeline still finishes with exactly one
--      submit and no cancel; SIGTERM never cancels.
--   2. A pipeline stopped while its driver is dead: exactly one server calls
--      cancel, once, and records it.
--   3. The pipeline's source reaches submit ({source.repo}, {source.ref});
--      a pipeline whose source lacks a key fails before anything runs.
local ci, dir = here("../exec/ci.sh"), workdir() .. "/ci"
local policy = ([[
scan  { interval = "300ms" }
build { timeout = "2m" }
gateway "exec" {}
application "shop/api" {
  environments = { "prod", "staging", "qa", "dev", "test" },
  build = {
    submit = { %q, "submit", "{id}", "{artifact}", "{source.repo}", "{source.ref}" },
    status = { %q, "status", "{job}" },
    cancel = { %q, "cancel", "{job}" },
  },
  deploy = { "true" },
  health = { "true" },
  env = { CI_DIR = %q, CI_BUILD_SECONDS = "16" },
}
]]):format(ci, ci, ci, dir)
local all = servers { count = 3, policy = policy }

local function calls()
  local f = io.open(dir .. "/calls")
  local text = f and f:read("a") or ""
  if f then f:close() end
  return text
end
-- How many times `plain` occurs in text (plain text, not a pattern).
local function count(text, plain)
  local n, at = 0, 1
  while true do
    local i, j = text:find(plain, at, true)
    if not i then return n end
    n, at = n + 1, j + 1
  end
end
local function job_of(p)
  local r = sql("SELECT state, handle, submits, cancels, cancel_state, cancel_server FROM exec_job " ..
    "WHERE pipeline_id = ? AND kind = 'build'", p.id)[1]
  return r or {}
end

local source = '{"repo": "git@example.org:shop/api.git", "ref": "release-7"}'
local ps = {}
for i, env in ipairs({ "prod", "staging", "qa" }) do
  ps[i] = create { app = "shop/api", env = env, artifact = "v" .. i, source = source }
end
for _, p in ipairs(ps) do
  expect(wait_until(p.env .. ": its job is submitted and running", function()
    return job_of(p).state == "running" end, 20), p.env .. " builds elsewhere", job_of(p).state)
end

-- 3. The source reached submit.
local args = io.open(dir .. "/jobs/job-" .. ps[1].id .. "-1/args")
local got = args and args:read("l") or ""
if args then args:close() end
expect(got == ps[1].id .. " v1 git@example.org:shop/api.git release-7",
  "submit received {id} {artifact} {source.repo} {source.ref}", got)

-- 1. SIGKILL the first pipeline's driver mid-build, then restart everyone.
local victim = ps[1]:driver()
expect(victim ~= nil, "the first pipeline has a driver", tostring(victim))
server(victim):kill("KILL")
expect(wait_until("another server drives the victim's pipeline", function()
  local d = ps[1]:driver()
  return d ~= nil and d ~= victim
end, 20), "taken over after the SIGKILL")
server(victim):start()
for _, s in ipairs(all) do
  s:stop(20) -- SIGTERM: drains, never cancels an external build
  s:start()
  sleep(0.5)
end
local cut
expect(wait_until("the second pipeline has a driver again", function()
  cut = ps[2]:driver()
  return cut ~= nil
end, 20), "driven after the restarts")
server(cut):cut() -- its lock session killed: it drives nothing until it reconnects
restart_database { down = 3 }
local running = sql("SELECT COUNT(*) AS n FROM exec_job WHERE mode = 'external' AND state = 'running'")[1].n
note(running .. " of 3 builds still running after the kill, the restarts, the cut and the database restart")
for _, p in ipairs(ps) do
  expect(p:wait("SUCCEEDED", 60), p.env .. " succeeded through the kill and the restarts", p:message())
end
local c = calls()
for _, p in ipairs(ps) do
  local j = job_of(p)
  expect(count(c, "submit " .. p.id .. " ") == 1 and j.submits == 1,
    p.env .. ": submitted exactly once", ("%d submit calls, submits=%s"):format(
      count(c, "submit " .. p.id .. " "), tostring(j.submits)))
end
expect(count(c, "cancel ") == 0, "no build was cancelled (SIGTERM never cancels)", c)

-- 2. Stop a pipeline whose driver is dead: one cancel, recorded.
local slow = create { app = "shop/api", env = "dev", artifact = "slow-1", source = source }
expect(wait_until("the slow build runs", function() return job_of(slow).state == "running" end, 20),
  "the slow build was submitted")
local driver = slow:driver()
expect(driver ~= nil, "the slow build has a driver", tostring(driver))
server(driver):kill("KILL")
local rc = slow:stop()
expect(rc == 0, "oopsctl stop the pipeline while its driver is dead", tostring(rc))
local handle = job_of(slow).handle
expect(wait_until("one cancel of " .. tostring(handle), function()
  return count(calls(), "cancel " .. handle .. "\n") >= 1 end, 20), "the dead driver's build was cancelled")
sleep(2) -- more ticks of every survivor: still once
local j = job_of(slow)
expect(count(calls(), "cancel " .. handle .. "\n") == 1, "cancel was called exactly once",
  count(calls(), "cancel " .. handle .. "\n") .. " calls")
expect(j.cancels == 1 and j.cancel_state == "cancelled" and j.cancel_server ~= driver,
  "recorded: one claim, cancelled, by a surviving server",
  ("cancels=%s state=%s by %s"):format(tostring(j.cancels), tostring(j.cancel_state), tostring(j.cancel_server)))
server(driver):start()

-- 3. A placeholder naming a key the source lacks: ERROR, nothing submitted.
local bad = create { app = "shop/api", env = "test", artifact = "v9", source = '{"repo": "x"}' }
expect(bad:wait("ERROR", 20), "a source without \"ref\" fails the pipeline", bad:status())
expect((bad:message() or ""):find("{source.ref}", 1, true) ~= nil, "the message names the placeholder",
  bad:message())
expect(count(calls(), "submit " .. bad.id .. " ") == 0, "nothing was submitted for it")
