on_transition = function(p, from, to)
  scan { interval = "1s" }           -- declaring after the load: refused
end
function on_build_lost(p)
  later = 1                          -- a global after the load: refused
  while true do p.n = (p.n or 0) + 1 end
end
