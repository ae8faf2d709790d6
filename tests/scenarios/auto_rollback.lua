-- Automatic rollback (issue 26): a release that fails at or after its deploy
-- is rolled back to the live release by exactly one rollback pipeline, made
-- in the transaction that fails it, whoever dies when: its driver SIGKILLed
-- as the rollout fails, its lock session cut at that moment. A rollback
-- that fails never triggers another; an application that says "fail" and a
-- first release (nothing live) get none. The end checks read the history:
-- every automatic rollback follows one release that failed after its deploy.
servers { count = 3, policy = [[
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
deploy  { timeout = "4s" }
rollout { timeout = "3s", on_failure = "rollback" }
gateway "simulated" { build = "300ms", deploy = "0s", rollout = "1500ms" }
application "shop/api" { environments = { "prod" } }
application "shop/new" { environments = { "prod" } }
application "shop/web" { environments = { "prod" }, rollout = { on_failure = "fail" } }
]] }

local function rollbacks_of(p)
  return sql("SELECT id, status, artifact, message FROM pipeline WHERE rollback_of = ?", p.id)
end

local live = create { app = "shop/api", env = "prod", artifact = "v1" }
expect(live:wait("SUCCEEDED", 30), "release v1 went live", live:message())

-- Each round: a release rolls out, its rollout fails, and its driver dies
-- (SIGKILL or a lock-session cut) just before, with, or just after the
-- failure. Exactly one rollback to v1 each time, which succeeds.
local rounds = {
  { how = "kill", delay = 0 }, { how = "kill", delay = 0.3 }, { how = "kill", delay = -0.2 },
  { how = "cut", delay = 0 }, { how = "cut", delay = 0.3 },
}
for i, r in ipairs(rounds) do
  local p = create { app = "shop/api", env = "prod", artifact = "v2-" .. i }
  expect(p:wait("ROLLING_OUT", 30), ("round %d: the release rolls out"):format(i), p:message())
  local driver = p:driver()
  local function strike()
    if r.how == "kill" then server(driver):kill("KILL") else server(driver):cut() end
  end
  if r.delay < 0 then strike(); sleep(-r.delay) end
  fail_rollout(p, "CrashLoopBackOff (round " .. i .. ")")
  if r.delay >= 0 then sleep(r.delay); strike() end
  expect(p:wait("ERROR", 30), ("round %d: the release failed (%s its driver %s)"):format(i, r.how, driver),
    p:message())
  local made
  wait_until(("round %d: its rollback went live"):format(i), function()
    made = rollbacks_of(p)
    return #made == 1 and made[1].status == "SUCCEEDED"
  end, 40)
  expect(#made == 1 and made[1].artifact == "v1", ("round %d: one rollback, to v1"):format(i),
    #made .. " rollbacks")
  local created = made[1] and sql("SELECT message FROM pipeline_event WHERE pipeline_id = ? AND " ..
    "to_status = 'INITIALIZED'", made[1].id)[1]
  expect(created and created.message:find("Automatic rollback after " .. p.id .. " failed: Deployment failed: " ..
    "CrashLoopBackOff (round " .. i .. ").", 1, true), ("round %d: its announcement says why"):format(i),
    created and created.message)
  if r.how == "kill" then server(driver):start() end
  -- A cut server reconnects by itself (its validation finds the session gone).
  wait_until(("round %d: every server drives again"):format(i), function()
    for _, name in ipairs({ "s1", "s2", "s3" }) do
      if not server(name):alive() then return false end
    end
    return true
  end, 20)
end

-- The rollback fails too (every deploy of shop/api fails for a while): no
-- second rollback.
local p = create { app = "shop/api", env = "prod", artifact = "v3" }
expect(p:wait("ROLLING_OUT", 30), "another release rolls out")
fault("shop/api/prod", "deploy", "registry unreachable")
fail_rollout(p, "OOMKilled")
expect(p:wait("ERROR", 30), "it fails")
local rb
wait_until("its rollback is made and fails", function()
  rb = rollbacks_of(p)[1]
  return rb and rb.status == "ERROR"
end, 40)
clear_fault("shop/api/prod", "deploy")
sleep(2)
expect(#sql("SELECT id FROM pipeline WHERE rollback_of = ?", rb.id) == 0,
  "a rollback that fails triggers no other", rb.id)

-- on_failure = "fail" for shop/web; nothing live for shop/new: no rollback.
local w1 = create { app = "shop/web", env = "prod", artifact = "w1" }
expect(w1:wait("SUCCEEDED", 30), "shop/web's first release went live")
local w2 = create { app = "shop/web", env = "prod", artifact = "w2" }
expect(w2:wait("ROLLING_OUT", 30), "its second rolls out")
fail_rollout(w2, "ImagePullBackOff")
expect(w2:wait("ERROR", 30), "... and fails")
local n1 = create { app = "shop/new", env = "prod", artifact = "n1" }
expect(n1:wait("ROLLING_OUT", 30), "shop/new's first release rolls out")
fail_rollout(n1, "ImagePullBackOff")
expect(n1:wait("ERROR", 30), "... and fails")
sleep(2)
expect(#rollbacks_of(w2) == 0, "an application whose policy says fail is not rolled back")
expect(#rollbacks_of(n1) == 0, "a first release with nothing live is not rolled back")
local total = sql("SELECT COUNT(*) AS n FROM pipeline WHERE rollback_of IS NOT NULL")[1].n
expect(tonumber(total) == #rounds + 1, "one automatic rollback per failed release", tostring(total))
