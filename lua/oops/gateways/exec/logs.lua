-- What an exec gateway command run leaves: its output (stdout and stderr
-- interleaved, the last exec.OUTPUT_CAP bytes), the one line naming how it
-- ended (for the log and the step's error), and its pipeline_log row (one
-- per command run; `oopsctl logs ID`).
local oops = require("oops")
local log = require("oops.log")
local duration = require("oops.duration")
local json = require("oops.json")

local M = {}

-- Text the database accepts as utf8mb4: each invalid byte becomes "?".
local function clean_utf8(s)
  local out, i = {}, 1
  while true do
    local ok, bad = utf8.len(s, i)
    if ok then
      out[#out + 1] = s:sub(i)
      return table.concat(out)
    end
    out[#out + 1] = s:sub(i, bad - 1)
    out[#out + 1] = "?"
    i = bad + 1
  end
end

-- The argv as a JSON array (pipeline_log.argv, printed by `oopsctl logs`);
-- arguments that are not UTF-8 are cleaned first (the column is utf8mb4).
function M.argv_json(argv)
  local list = json.array()
  for i, a in ipairs(argv) do list[i] = clean_utf8(a) end
  return json.encode(list)
end

-- The last non-empty line of s, trimmed and bounded, or nil.
local function last_line(s)
  if not s then return nil end
  local line
  for l in s:gmatch("[^\r\n]+") do
    if l:match("%S") then line = l end
  end
  if not line then return nil end
  line = line:match("^%s*(.-)%s*$")
  if #line > 300 then line = line:sub(1, 297) .. "..." end
  return clean_utf8(line)
end

-- A tail buffer: keeps the last `cap` bytes of what is added.
local Tail = {}
Tail.__index = Tail

local function tail(cap) return setmetatable({ cap = cap, chunks = {}, size = 0 }, Tail) end

function Tail:add(data)
  self.chunks[#self.chunks + 1] = data
  self.size = self.size + #data
  if self.size > 2 * self.cap then
    local s = table.concat(self.chunks)
    s = s:sub(-self.cap)
    self.chunks, self.size = { s }, #s
  end
end

function Tail:text()
  local s = table.concat(self.chunks)
  if #s > self.cap then s = s:sub(-self.cap) end
  return s
end

local function fmt_ms(ms) return duration.format(math.tointeger(ms) or math.floor(ms)) end

-- One line naming how a command ended: "exited 3", "timed out after 30s".
local function outcome(r, timeout_ms)
  if r.timed_out then return "timed out after " .. fmt_ms(timeout_ms) end
  if r.signal ~= 0 then return "killed by signal " .. r.signal end
  return "exited " .. r.status
end

-- "deploy command exited 4: kubectl: connection refused"
local function describe(step, r, timeout_ms)
  local text = step .. " command " .. outcome(r, timeout_ms)
  if r.timed_out or r.signal ~= 0 then return text end
  local line = last_line(r.stderr) or last_line(r.stdout)
  return line and (text .. ": " .. line) or text
end

local function append_log(pipeline_id, step, argv, result, exit_status, duration_ms, output)
  local ok, err = oops.db.exec(
    "INSERT INTO pipeline_log (pipeline_id, step, server, argv, exit_status, result, duration_ms, output) " ..
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    pipeline_id, step, oops.server_name(), M.argv_json(argv), exit_status,
    clean_utf8(result:sub(1, 200)), duration_ms, clean_utf8(output or ""))
  if not ok then
    log.warn("exec: writing the " .. step .. " log failed: " .. tostring(err), { pipeline = pipeline_id })
  end
  return ok, err
end

-- Log one finished command run (r nil: it could not be started, err says why).
local function log_run(pipeline_id, step, run)
  local r = run.result
  if not r then
    return append_log(pipeline_id, step, run.argv, "not started: " .. tostring(run.err), nil, nil, "")
  end
  local status = (r.signal == 0 and not r.timed_out) and r.status or nil
  local result = run.note and (outcome(r, run.timeout_ms) .. " (" .. run.note .. ")") or outcome(r, run.timeout_ms)
  return append_log(pipeline_id, step, run.argv, result, status, run.duration_ms, run.output)
end

M.tail, M.last_line, M.outcome, M.describe, M.log_run = tail, last_line, outcome, describe, log_run

return M
