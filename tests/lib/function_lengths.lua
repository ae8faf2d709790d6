-- Functions a reader can hold in their head: lists every C function in src/
-- longer than C_MAX lines (from its signature to its closing brace, as the
-- .clang-format style lays them out: the body's braces at column 0), and every
-- Lua function of lua/oops/ longer than LUA_MAX lines, its closures included
-- (the line range luac reports). Prints one line per function over its bound
-- and exits 1 when there is one. Run by tests/style.sh:
--   lua5.4 tests/lib/function_lengths.lua FILE...
local C_MAX, LUA_MAX = 100, 150

local over = 0
local function report(kind, n, where, what)
  over = over + 1
  io.write(("%s function of %d lines (at most %d): %s %s\n"):format(kind, n,
    kind == "C" and C_MAX or LUA_MAX, where, what))
end

local function c_file(path)
  local lines = {}
  for line in io.lines(path) do lines[#lines + 1] = line end
  local start
  for i, line in ipairs(lines) do
    if line == "{" and i > 1 then
      start = i - 1 -- the signature ends on the line before; find where it begins
      while start > 1 and not lines[start]:find("(", 1, true) do start = start - 1 end
    elseif line == "}" and start then
      local n = i - start + 1
      if n > C_MAX then report("C", n, ("%s:%d"):format(path, start), lines[start]) end
      start = nil
    end
  end
end

local function lua_file(path)
  local p = assert(io.popen("luac5.4 -p -l -- '" .. path:gsub("'", "'\\''") .. "' 2>&1"))
  local out = p:read("a")
  p:close()
  for a, b in out:gmatch("\nfunction <[^\n]-:(%d+),(%d+)>") do
    local n = tonumber(b) - tonumber(a) + 1
    if n > LUA_MAX then report("Lua", n, ("%s:%s"):format(path, a), "") end
  end
end

for _, path in ipairs(arg) do
  if path:match("%.c$") then c_file(path) elseif path:match("%.lua$") then lua_file(path) end
end
os.exit(over == 0 and 0 or 1)
