-- Whole-file reads and writes, and private work directories, for the tools
-- (the scenario runner, its throwaway MariaDB and network namespaces, the
-- demo, bench/): logs, policy files, /proc, results. The engine has none of
-- its own: the policy loader reads through oops.sandbox.read (bounded).
local lfs = require("lfs")
local oops = require("oops")

local M = {}

-- The file's text, or nil and the reason when it cannot be read (it does
-- not exist (yet), a process in /proc is gone, ...).
function M.read(path)
  local f, err = io.open(path, "r")
  if not f then return nil, err end
  local s, rerr = f:read("a")
  f:close()
  if not s then return nil, path .. ": " .. tostring(rerr) end
  return s
end

-- Replace the file's text; raises when it cannot be written.
function M.write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- Remove p and everything under it (symbolic links themselves, never what
-- they point to).
function M.remove_tree(p)
  if lfs.symlinkattributes(p, "mode") == "directory" then
    for name in lfs.dir(p) do
      if name ~= "." and name ~= ".." then M.remove_tree(p .. "/" .. name) end
    end
  end
  os.remove(p)
end

-- A new private directory (0700: its policies, logs and files are nobody
-- else's) named PREFIX-NNNNNN under $TMPDIR (when it names a directory), else
-- /tmp; nil and the parent when none could be made.
function M.workdir(prefix)
  local base = os.getenv("TMPDIR")
  if not base or base == "" or lfs.attributes(base, "mode") ~= "directory" then base = "/tmp" end
  base = base:gsub("/+$", "")
  for _ = 1, 20 do
    local dir = ("%s/%s-%06d"):format(base, prefix, math.random(0, 999999))
    if oops.fs.mkdir_private(dir) then return dir end
  end
  return nil, base
end

return M
