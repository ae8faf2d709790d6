-- Policy reloads under load: while three servers drive a stream of
-- pipelines, one gets a policy with a syntax error, another one with a bad
-- value, a third a good change. A broken reload names the file and line and
-- keeps the running policy; the server keeps driving. Then all are fixed.
local GOOD = [[
scan    { interval = "300ms" }
gateway "simulated" { build = "800ms", deploy = "0s", rollout = "300ms" }
]]
local FASTER = [[
scan    { interval = "150ms" }
gateway "simulated" { build = "500ms", deploy = "0s", rollout = "200ms" }
]]
local SYNTAX = GOOD .. "\napplication \"shop/x\" { environments = { \"prod\" }\n"
local BADVALUE = [[
scan    { interval = "soon" }
gateway "simulated" { build = "800ms" }
]]
local all = servers { count = 3, policy = GOOD }

local ps = {}
local function wave(tag, n)
  for i = 1, n do ps[#ps + 1] = create { app = "shop/" .. tag .. i, env = "prod" } end
end

wave("a", 8)
local ok1, why1 = all[1]:reload(SYNTAX)
expect(not ok1 and why1 and why1:find("scenario.lua:%d+") ~= nil,
  "a policy with a syntax error is refused, naming file and line", tostring(why1))
local ok2, why2 = all[2]:reload(BADVALUE)
expect(not ok2 and why2 and why2:find("scan.interval", 1, true) ~= nil,
  "a policy with a bad value is refused, naming the setting", tostring(why2))
local ok3, why3 = all[3]:reload(FASTER)
expect(ok3, "a good change is taken", why3)

wave("b", 8)
for _, p in ipairs(ps) do expect(p:wait("SUCCEEDED", 30), p.app .. " succeeds") end
for _, s in ipairs({ all[1], all[2] }) do
  local after = sql("SELECT COUNT(*) AS n FROM pipeline_event WHERE server = ? AND pipeline_id IN (" ..
    ("?, "):rep(7) .. "?)", s.name, ps[9].id, ps[10].id, ps[11].id, ps[12].id, ps[13].id, ps[14].id,
    ps[15].id, ps[16].id)[1].n
  expect(s:alive(), s.name .. " is still running on its old policy")
  note(("%s made %d transitions of the second wave on its old policy"):format(s.name, after))
end

-- Fixed: every server reloads a good policy.
for _, s in ipairs(all) do
  local fine, why = s:reload(GOOD)
  expect(fine, s.name .. " takes the fixed policy", why)
end
wave("c", 8)
for _, p in ipairs(ps) do expect(p:wait("SUCCEEDED", 30), p.app .. " succeeds") end
local served = sql("SELECT COUNT(DISTINCT server) AS n FROM pipeline_event WHERE server NOT LIKE 'oopsctl@%'")[1].n
expect(served == 3, "all three servers drove pipelines throughout", served .. " servers")
