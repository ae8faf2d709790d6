#!/usr/bin/env oopsd
local seen = {}
function on_transition(p, from, to)
  seen[#seen + 1] = from .. "->" .. to
end
on_build_lost = function(p) return "resubmit" end
for i = 1, 3 do
  application ("team/app-" .. i) { environments = { "prod" }, restart = { prod = i .. " 4 * * *" } }
end
