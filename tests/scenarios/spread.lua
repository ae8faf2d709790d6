-- Rule 1: one server drives a pipeline from build through rollout while other
-- servers drive other pipelines. Rule 2: claim, then act — the build is
-- submitted once, by the server that claimed RUNNING. Rule 9: the messages.
servers { count = 3, policy = [[
scan    { interval = "300ms" }
gateway "simulated" { build = "1s", deploy = "0s", rollout = "300ms" }
]] }

local ps = {}
for i = 1, 30 do ps[i] = create { app = "shop/app" .. i, env = "prod", artifact = "registry/app:" .. i } end

wait_until("all 30 pipelines succeed", function()
  return sql("SELECT COUNT(*) AS n FROM pipeline WHERE status = 'SUCCEEDED'")[1].n == 30
end, 60)

local single, drivers, submit_once, submit_by_claimer = 0, {}, 0, 0
for _, p in ipairs(ps) do
  local d = p:drivers()
  if #d == 1 then single = single + 1 end
  drivers[d[1] or "?"] = true
  if p:calls("build_submit") == 1 then submit_once = submit_once + 1 end
  local claim = sql("SELECT server FROM pipeline_event WHERE pipeline_id = ? AND to_status = 'RUNNING'", p.id)[1]
  local call = sql("SELECT server, created_at FROM sim_call WHERE pipeline_id = ? AND action = 'build_submit'", p.id)[1]
  if claim and call and claim.server == call.server then submit_by_claimer = submit_by_claimer + 1 end
end
expect(single == 30, "every pipeline's transitions carry a single server name", single .. " of 30")
local n = 0
for _ in pairs(drivers) do n = n + 1 end
expect(n > 1, "more than one server drives", n .. " server(s)")
expect(submit_once == 30, "each build was submitted exactly once", submit_once .. " of 30")
expect(submit_by_claimer == 30, "... by the server that claimed INITIALIZED -> RUNNING", submit_by_claimer .. " of 30")

-- Claim, then act: the RUNNING event is written before the build is submitted.
local before = sql([[SELECT COUNT(*) AS n FROM pipeline_event e JOIN sim_call c
  ON c.pipeline_id = e.pipeline_id AND c.action = 'build_submit'
  WHERE e.to_status = 'RUNNING' AND e.created_at <= c.created_at]])[1].n
expect(before == 30, "every build was submitted after its RUNNING claim", before .. " of 30")

local ev = ps[1]:events()
local want = {
  { "CREATED", "Pipeline created." },
  { "BUILDING", "Build started." },
  { "DEPLOYING", "The release has entered the deploy phase." },
  { "ROLLING_OUT", "Waiting for the new version to take effect…" },
  { "SUCCEEDED", "The application was released successfully." },
}
local got = {}
for i, e in ipairs(ev) do got[i] = e.event_type .. ": " .. tostring(e.message) end
local same = #ev == #want
for i, w in ipairs(want) do same = same and ev[i] and ev[i].event_type == w[1] and ev[i].message == w[2] end
expect(same, "an automatic pipeline's events and messages, in order", table.concat(got, "\n"))
