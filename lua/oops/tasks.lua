-- Running steps side by side: one slow gateway call (a slow cluster, a hung
-- command) delays no other pipeline or restart, and the caller still waits
-- for all of them, so a scan tick never overlaps the next. At most LIMIT run
-- at once (a new one starts when one ends): 10,000 steps are never 10,000
-- coroutines, each with its rows, at the same time.
local oops = require("oops")
local log = require("oops.log")

local M = {}

-- Steps running at once per pool. Gateway calls are child processes, HTTP
-- requests or database statements: more than this side by side gains nothing
-- but memory (the database work runs on a small pool of connections).
M.LIMIT = 32

local Pool = {}
Pool.__index = Pool

-- A pool of steps for the calling task: pool:run(fn) starts fn() in a task of
-- its own, first waiting while `limit` (default M.LIMIT) of its steps run;
-- pool:wait() waits until every step has ended and returns how many failed.
-- An error in a step is logged (with its traceback, as `what`) and counted,
-- and stops no other. Only the task that made the pool may call run and wait.
function M.pool(what, limit)
  local me = oops.current()
  assert(me, "tasks.pool must be called from a task")
  return setmetatable({ what = what or "step", limit = limit or M.LIMIT, owner = me,
    running = 0, started = 0, failed = 0, waiting = false }, Pool)
end

-- Suspend the owner until a step ends. A step wakes it only while it waits
-- here (`waiting`), never out of a wait of another kind (a database call
-- may yield it too); the owner tests its condition again after every wake,
-- and a step that ended while the owner was busy elsewhere is seen by that
-- test, so no wake-up is lost.
local function await(self)
  self.waiting = true
  oops.suspend()
  self.waiting = false
end

function Pool:run(fn)
  while self.running >= self.limit do await(self) end
  self.running = self.running + 1
  self.started = self.started + 1
  oops.task(self.what .. " " .. self.started, function()
    local ok, err = xpcall(fn, debug.traceback)
    if not ok then
      self.failed = self.failed + 1
      log.failure(self.what, err)
    end
    self.running = self.running - 1
    if self.waiting then oops.wake(self.owner) end
  end)
end

function Pool:wait()
  while self.running > 0 do await(self) end
  return self.failed
end

-- Run each fn() in its own task, at most M.LIMIT at once, and wait for all.
-- An error in one is logged (with its traceback) and does not stop the
-- others. Returns the number that failed. Must be called from a task.
function M.all(fns, what, limit)
  if #fns == 0 then return 0 end
  local pool = M.pool(what, limit)
  for _, fn in ipairs(fns) do pool:run(fn) end
  return pool:wait()
end

return M
