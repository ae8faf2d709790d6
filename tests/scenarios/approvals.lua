-- Approvals by two people (issue 39): shop/api asks for two approvals before
-- a prod release deploys (approvals = { prod = 2 }), staging for none. The
-- release carol creates waits after its build (hold "approval"), saying how
-- many approved and who; carol's own approval is refused (two-person rule),
-- alice's counts once however often she gives it, an override is refused;
-- the server holding it is SIGKILLed between the two approvals and another
-- takes it over, still waiting; bob's approval releases it, deployed once.
-- A rejection stops a release; a rollback and a deployed release take no
-- approval. Each approval and rejection is an event with its person and
-- reason, in the audit log, and announced.
servers { count = 3, policy = [[
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "300ms", deploy = "0s", rollout = "300ms" }
notify  { log = true }
application "shop/api" { environments = { "staging", "prod" }, approvals = { prod = 2 } }
]] }

local function approve(person, id, reason) return oopsctl_as(person, "approve", id, "--reason", reason) end

local staged = create { app = "shop/api", env = "staging", artifact = "a1", as = "carol" }
local rel = create { app = "shop/api", env = "prod", artifact = "a1", as = "carol" }
expect(staged:wait("SUCCEEDED", 30), "staging asks for no approval: its release deploys", staged:message())
expect(rel:wait("BUILD_SUCCEEDED", 30), "the prod release waits after its build", rel:message())
wait_until("... held for approval, saying how many it needs", function()
  local r = rel:row()
  return r.hold == "approval" and r.message:find("Waiting for approval: 0 of 2;", 1, true) ~= nil
end, 10)

local _, rc, out, err
rc, _, err = approve("carol", rel.id, "looks good to me")
expect(rc == 1 and err:find("carol created it", 1, true) and err:find("two-person rule", 1, true),
  "its creator's approval is refused (exit 1), saying why", tostring(rc) .. " " .. tostring(err))
rc, _, err = oopsctl_as("alice", "approve", rel.id)
expect(rc == 1 and err:find("--reason", 1, true), "an approval without a reason is refused", err)
rc, out, err = approve("alice", rel.id, "checked the diff")
expect(rc == 0 and out:find(rel.id .. " approved by alice: 1 approval (alice)", 1, true),
  "alice's approval counts: 1 of 2", tostring(rc) .. " " .. tostring(out) .. tostring(err))
rc, out = approve("alice", rel.id, "again")
expect(rc == 0 and out:find("already recorded", 1, true), "alice approving again is a no-op", out)
expect(rel:row().approvals == 1, "... she counts once", tostring(rel:row().approvals))
wait_until("the hold says who approved so far", function()
  return rel:message():find("Waiting for approval: 1 of 2 (approved by alice);", 1, true) ~= nil
end, 10)
rc, _, err = oopsctl_as("alice", "deploy", rel.id, "--override", "--reason", "in a hurry")
expect(rc == 1 and err:find("which an override does not replace", 1, true),
  "an override skips no approval: one person cannot stand for two", tostring(rc) .. " " .. tostring(err))

-- The server holding it dies between the two approvals.
local d1 = rel:driver()
expect(d1 ~= nil, "a server holds the waiting release", tostring(d1))
server(d1):kill("KILL")
wait_until("another server takes it over", function()
  local d = rel:driver()
  return d ~= nil and d ~= d1
end, 20)
sleep(1)
expect(rel:status() == "BUILD_SUCCEEDED" and rel:row().hold == "approval",
  "... and it still waits for its second approval", rel:status())

rc, out, err = approve("bob", rel.id, "second pair of eyes")
expect(rc == 0 and out:find("2 approvals (alice,bob)", 1, true), "bob's approval is the second",
  tostring(out) .. tostring(err))
expect(rel:wait("SUCCEEDED", 30), "with two approvals it deploys and succeeds", rel:message())
local deploys = sql("SELECT COUNT(*) AS n FROM pipeline_event WHERE pipeline_id = ? AND to_status = 'DEPLOYING'",
  rel.id)[1].n
expect(deploys == 1 and rel:calls("deploy") == 1, "... once", deploys .. " DEPLOYING events, " ..
  rel:calls("deploy") .. " deploy calls")
local ev = sql("SELECT actor, reason FROM pipeline_event WHERE pipeline_id = ? AND event_type = 'APPROVED' " ..
  "ORDER BY id", rel.id)
expect(#ev == 2 and ev[1].actor:match("^alice@") and ev[2].actor:match("^bob@") and
  ev[2].reason == "second pair of eyes", "each approval is an event with its person and reason", #ev .. " events")
local audit = sql("SELECT outcome, COUNT(*) AS n FROM operator_action WHERE pipeline_id = ? AND action = 'approve' " ..
  "GROUP BY outcome ORDER BY outcome", rel.id)
local got = {}
for _, r in ipairs(audit) do got[#got + 1] = r.outcome .. ":" .. r.n end
expect(table.concat(got, " ") == "already:1 done:2 refused:1",
  "the audit log has the approvals, the one given again and the refusals", table.concat(got, " "))
rc, _, err = approve("dave", rel.id, "late")
expect(rc == 1 and err:find("it is SUCCEEDED: approvals are given before the deploy", 1, true),
  "a deployed release takes no approval", err)

-- A rejection stops a release before its deploy.
local bad = create { app = "shop/api", env = "prod", artifact = "a2", as = "dave" }
expect(bad:wait("BUILD_SUCCEEDED", 30), "the next prod release waits too", bad:message())
rc, out, err = oopsctl_as("erin", "reject", bad.id, "--reason", "wrong artifact")
expect(rc == 0 and out:find(bad.id .. " rejected: BUILD_SUCCEEDED -> STOPPED", 1, true), "erin rejects it",
  tostring(out) .. tostring(err))
expect(bad:status() == "STOPPED", "... it is stopped", bad:status())
ev = sql("SELECT message FROM pipeline_event WHERE pipeline_id = ? AND event_type = 'REJECTED'", bad.id)
expect(#ev == 1 and ev[1].message:find("Rejected by erin@", 1, true) and
  ev[1].message:find(": wrong artifact", 1, true),
  "the rejection is an event with who and why", ev[1] and ev[1].message)
rc, _, err = oopsctl_as("erin", "reject", bad.id, "--reason", "again")
expect(rc == 1, "a stopped release cannot be rejected again", err)

-- A rollback needs no approval, and takes none.
local back = assert(rollback { app = "shop/api", env = "prod", to = rel.id })
rc, _, err = approve("alice", back.id, "sure")
expect(rc == 1 and err:find("a rollback needs no approval", 1, true), "a rollback takes no approval", err)
expect(back:wait("SUCCEEDED", 30), "... and deploys without one", back:message())

wait_until("the approvals and the rejection are announced", function()
  return sql("SELECT COUNT(*) AS n FROM outbox o JOIN pipeline_event e ON e.id = o.ref_id WHERE o.kind = 'pipeline'" ..
    " AND e.event_type IN ('APPROVED', 'REJECTED') AND o.delivered_at IS NOT NULL")[1].n == 3
end, 20)
