-- scan { max_new }: each server takes at most 2 new pipelines per tick (its
-- fair share bounded), reading its candidates a page at a time, with the
-- database calls of every step yielding to the others (the daemon's pool).
-- A flood larger than the servers take in one tick still ends with every
-- pipeline driven by one server from build to rollout, each built once.
servers { count = 3, policy = [[
scan    { interval = "300ms", max_new = 2 }
gateway "simulated" { build = "1s", deploy = "0s", rollout = "300ms" }
]] }

local N = 24
local ps = {}
for i = 1, N do ps[i] = create { app = "flood/app" .. i, env = "prod", artifact = "registry/app:" .. i } end

wait_until("all " .. N .. " pipelines succeed", function()
  return sql("SELECT COUNT(*) AS n FROM pipeline WHERE status = 'SUCCEEDED'")[1].n == N
end, 120)

local single, built_once, drivers = 0, 0, {}
for _, p in ipairs(ps) do
  local d = p:drivers()
  if #d == 1 then single = single + 1 end
  drivers[d[1] or "?"] = true
  if p:calls("build_submit") == 1 then built_once = built_once + 1 end
end
local n = 0
for _ in pairs(drivers) do n = n + 1 end
expect(single == N, "every pipeline was driven by one server", single .. " of " .. N)
expect(built_once == N, "each build was submitted exactly once", built_once .. " of " .. N)
expect(n > 1, "more than one server drives", n .. " server(s)")
