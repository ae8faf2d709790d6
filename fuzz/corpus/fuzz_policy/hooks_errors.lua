local big = {}
on_transition = function(p, from, to)
  for i = 1, 100 do big[i] = ("x"):rep(100000) end
  error({ table = "error object" })
end
on_build_lost = function(p) return p, "resubmit", string.rep("y", 10), nil end
