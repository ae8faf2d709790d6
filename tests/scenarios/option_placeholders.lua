-- A placeholder never expands to an option (oopsd.policy(5), issue 22), with
-- real servers and real commands: the exec gateway refuses any argument a
-- field would start with "-", and any field holding a control character.
--   1. A CI system whose submit prints "--help" as the job handle
--      (tests/exec/ci.sh, artifact "dash-handle"): the pipeline fails naming
--      the handle; status and cancel never run with it, nothing is deployed.
--   2. A source value "--upload-pack=touch MARKER" for a build
--      { clone.sh, "clone", "{source.repo}", DIR } (tests/exec/clone.sh runs
--      --upload-pack's command, as git does): the pipeline fails before
--      anything runs, naming the source's key; MARKER is never created, the
--      clone never called, nothing deployed. A control character in a source
--      value likewise.
-- Beside each, the same application with plain values succeeds, so the
-- commands would have run.
local ci, clone, dir = here("../exec/ci.sh"), here("../exec/clone.sh"), workdir() .. "/opts"
local marker = dir .. "/MARKER"
local policy = ([[
scan  { interval = "300ms" }
build { timeout = "1m" }
gateway "exec" {}
application "shop/ci" {
  environments = { "prod", "staging" },
  build = {
    submit = { %q, "submit", "{id}", "{artifact}" },
    status = { %q, "status", "{job}" },
    cancel = { %q, "cancel", "{job}" },
  },
  deploy = { "touch", %q },
  health = { "true" },
  env = { CI_DIR = %q, CI_BUILD_SECONDS = "1" },
}
application "shop/git" {
  environments = { "prod", "staging", "qa" },
  build  = { %q, "clone", "{source.repo}", %q },
  deploy = { "touch", %q },
  health = { "true" },
  env = { CLONE_LOG = %q },
}
]]):format(ci, ci, ci, dir .. "/deployed-{id}", dir .. "/ci", clone, dir .. "/checkout-{id}",
  dir .. "/deployed-{id}", dir .. "/clone.log")
servers { count = 2, policy = policy }
assert(assert(oops.proc.run { argv = { "mkdir", "-p", dir } }).ok, "mkdir " .. dir)

local function read(path)
  local f = io.open(path)
  local text = f and f:read("a") or ""
  if f then f:close() end
  return text
end
local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end
local function logged(p) return sql("SELECT COUNT(*) AS n FROM pipeline_log WHERE pipeline_id = ?", p.id)[1].n end

-- The controls: plain values, every command runs.
local ok_ci = create { app = "shop/ci", env = "prod", artifact = "v1" }
local ok_git = create { app = "shop/git", env = "prod", source = '{"repo": "https://example.org/shop.git"}' }
expect(ok_ci:wait("SUCCEEDED", 30), "an external build with a plain handle succeeds", ok_ci:message())
expect(ok_git:wait("SUCCEEDED", 30), "a clone of a plain repository succeeds", ok_git:message())
expect(exists(dir .. "/deployed-" .. ok_ci.id) and exists(dir .. "/deployed-" .. ok_git.id),
  "... and both were deployed")
expect(read(dir .. "/ci/calls.status"):find("status job-" .. ok_ci.id .. "-1", 1, true) ~= nil,
  "... the status command received the handle")

-- 1. submit prints "--help" as the handle.
local dash = create { app = "shop/ci", env = "staging", artifact = "dash-handle-1" }
expect(dash:wait("ERROR", 30), "a job handle \"--help\" fails the pipeline", dash:status())
local m = dash:message() or ""
expect(m:find("{job}: its job handle \"--help\" would start the argument with \"-\"", 1, true) ~= nil,
  "... the message names the job handle and what it would have done", m)
expect(read(dir .. "/ci/calls"):find("submit " .. dash.id, 1, true) ~= nil, "... submit ran (it printed the handle)")
expect(not read(dir .. "/ci/calls.status"):find("--help", 1, true), "... status never ran with it",
  read(dir .. "/ci/calls.status"))
expect(not read(dir .. "/ci/calls"):find("cancel --help", 1, true), "... nor cancel")
local job = sql("SELECT state, handle FROM exec_job WHERE pipeline_id = ?", dash.id)[1] or {}
expect(job.state == "failed" and job.handle == nil, "... and the handle was never recorded",
  tostring(job.state) .. " " .. tostring(job.handle))
expect(not exists(dir .. "/deployed-" .. dash.id), "... nothing was deployed")

-- 2. A source value shaped like an option.
local evil = create { app = "shop/git", env = "staging", source = '{"repo": "--upload-pack=touch ' .. marker .. '"}' }
expect(evil:wait("ERROR", 30), "a source value \"--upload-pack=...\" fails the pipeline", evil:status())
m = evil:message() or ""
expect(m:find("Refused, nothing was run: build argument 3: {source.repo}: its source's \"repo\"", 1, true) == 1,
  "... refused, naming the command, the argument and the source's key", m)
local ctl = create { app = "shop/git", env = "qa", source = '{"repo": "shop\\u001b[2J.git"}' }
expect(ctl:wait("ERROR", 30), "a source value holding a control character fails the pipeline", ctl:status())
expect((ctl:message() or ""):find("{source.repo}: its source's \"repo\" holds a control character", 1, true) ~= nil,
  "... naming the key", ctl:message())
sleep(1) -- more ticks of both servers
expect(not exists(marker), "the --upload-pack command never ran: " .. marker .. " does not exist")
local calls = read(dir .. "/clone.log")
expect(select(2, calls:gsub("\n", "")) == 1, "the clone ran once only, for the plain repository", calls)
expect(logged(evil) == 0 and logged(ctl) == 0, "no command ran for either (no pipeline_log row)")
expect(not exists(dir .. "/deployed-" .. evil.id) and not exists(dir .. "/deployed-" .. ctl.id),
  "... nothing was deployed")
