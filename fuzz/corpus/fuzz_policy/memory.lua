local t = {}
for i = 1, 50 do t[i] = ("x"):rep(1000 * i) end
local ok, why = pcall(string.rep, "y", 2^31)
