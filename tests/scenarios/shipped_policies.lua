-- What an operator does before shipping a change: run the real policy
-- directory (here the shipped policies/) with one file overridden for
-- second-scale cadence, drive pipelines of its applications, and try a
-- broken edit of one file on one server before reloading it everywhere.
local FAST = [[
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "500ms", deploy = "0s", rollout = "300ms" }
notify  { log = true, retry = { initial = "200ms", max = "1s" } }
]]
local all = servers { count = 2, policies = "../../policies", overrides = { ["oopsd.lua"] = FAST } }

local ps = {
  create { app = "shop/api", env = "staging" },
  create { app = "shop/api", env = "prod" },
  create { app = "shop/worker", env = "prod" },
}
for _, p in ipairs(ps) do
  expect(p:wait("SUCCEEDED", 30), p.app .. " " .. p.env .. " succeeds on the shipped policies")
end

local broken = FAST:gsub('interval = "300ms"', 'interval = "300 ms please"')
local fine, why = all[1]:reload { ["oopsd.lua"] = broken }
expect(not fine and why and why:find("oopsd.lua:1: scan.interval", 1, true) ~= nil,
  "a broken edit is refused on the server that got it, naming oopsd.lua:1", tostring(why))
local again = create { app = "shop/worker", env = "staging" }
expect(again:wait("SUCCEEDED", 30), "... which keeps driving on the running policy")
expect(all[2]:reload { ["oopsd.lua"] = FAST } == true, "the other server reloads the good file")
