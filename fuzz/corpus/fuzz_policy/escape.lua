string.rep = nil
local ok = pcall(function() ("x").upper = 1 end)
local mt = pcall(function() return getmetatable("") end)
_ENV = { application = application }
