-- The flags of oopsctl's subcommands written in Lua (stats, outbox, chaos):
-- `--flag VALUE` or `--flag=VALUE`, switches, --help. Each refusal is one
-- line through the command's own `bad(msg, with_usage)`, which exits.
local M = {}

M.MAX_ARG = 4096 -- bytes of one flag's value

-- spec = {
--   values   = { ["--app"] = "app", ... },   flags that take a value: o[key] = value
--   switches = { ["--json"] = "json", ... }, flags alone: o[key] = true
--   usage    = "usage: ...",                 printed by --help (exit 0)
--   bad      = function(msg, with_usage) end,
-- }
-- Returns o. A flag given twice, an unknown one, a value missing, empty or
-- longer than MAX_ARG is refused.
function M.parse(argv, spec)
  local o, i = {}, 1
  local switches = spec.switches or {}
  while i <= #argv do
    local word = argv[i]
    i = i + 1
    if word == "--help" or word == "-h" then
      io.write(spec.usage, "\n")
      os.exit(0)
    elseif switches[word] then
      if o[switches[word]] then spec.bad(word .. ": given twice", true) end
      o[switches[word]] = true
    else
      local flag, value = word:match("^(%-%-[%w-]+)=(.*)$")
      if not flag then flag, value, i = word, argv[i], i + 1 end
      local key = spec.values[flag]
      if not key then spec.bad(("unknown flag %q"):format(flag:sub(1, 64)), true) end
      if value == nil or value == "" then spec.bad(flag .. ": expects a value", true) end
      if #value > M.MAX_ARG then spec.bad(flag .. ": longer than " .. M.MAX_ARG .. " bytes") end
      if o[key] then spec.bad(flag .. ": given twice", true) end
      o[key] = value
    end
  end
  return o
end

return M
