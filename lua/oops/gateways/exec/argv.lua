-- The exec gateway's placeholders: every argv it runs is an application's
-- command from the policy expanded with a pipeline's fields, and refused
-- where a field would start an argument with "-" (a command would take it
-- for an option) or put a control character into one.
--
-- Placeholders {id} (the pipeline id; {pipeline} also works) {namespace}
-- {application} {environment} {artifact} {trigger} ("release" or
-- "rollback") are replaced inside arguments by
-- plain text substitution; the values are never rescanned, so a field
-- holding "$(touch x)" or "{id}" reaches the command as that literal text
-- (but see "Pipeline fields in argv" below for what is refused).
-- Build commands also get {source} (the pipeline's --source JSON) and
-- {source.KEY} (a top-level string or integer of it); a KEY the source lacks
-- fails the step before anything runs. Unknown ones stay as written.
-- restart_command gets {namespace} {application} {environment}; {id} and
-- {artifact} are empty there. An external build's status and cancel also
-- get {job}, the handle submit printed.
--
-- Pipeline fields in argv: a placeholder never expands to an argument
-- starting with "-" unless the policy's own text starts it so, nor puts a
-- control character into one (oopsd.policy(5) promises it). M.substitute,
-- which builds every argv this gateway runs, refuses such an argument
-- (nothing runs; the step fails with kind "invalid"); M.refusal runs the
-- same expansion for every command of the application before each step
-- (pipelines.refusal), so a pipeline whose fields would do it — a source
-- value "--upload-pack=...", say — fails at once, naming the field; a job
-- handle is checked when submit prints it (M.check_handle). The engine
-- also constrains the fields themselves: namespace, application and
-- environment lowercase DNS labels declared by the policy, the id
-- [a-z0-9], the artifact not starting with "-".
--
-- require("oops.gateways.exec") hands out substitute, refusal and
-- check_handle (pipelines.refusal, oopsctl create --policies, specs,
-- fuzz/fuzz_exec_argv.c).
local duration = require("oops.duration")
local json = require("oops.json")
local policy_defaults = require("oops.policy")
local show = duration.show

local M = {}

-- How a placeholder's value is named in a refusal.
local function field_of(name)
  local key = name:match("^source%.(.+)$")
  if key then return "its source's " .. show(key) end
  if name == "job" then return "its job handle" end
  if name == "pipeline" then return "its id" end
  return "its " .. name
end

-- The value of placeholder `name`: text, nil (unknown: stays as written),
-- or false, why (a {source.KEY} that cannot be filled).
local function value_of(name, values)
  local key = name:match("^source%.(.+)$")
  if not key then
    local v = values[name]
    if v == nil then return nil end
    return tostring(v)
  end
  local src = values.source_fields
  local v = type(src) == "table" and src[key] or nil
  if type(v) == "string" then return v end
  if math.tointeger(v) then return tostring(math.tointeger(v)) end -- JSON 7 (decoded as 7.0)
  return false, src == nil and "the pipeline has no source" or
    (v == nil and ("its source has no %q"):format(key) or ("its source's %q is not a string"):format(key))
end

-- Argument i of an argv, expanded: text, or nil, why, kind, name ("invalid":
-- a value holds a control character, or the expansion starts with "-" where
-- the argument as written does not; "missing": a {source.KEY} the source
-- lacks; name: the placeholder refused). A refusal names the placeholder
-- that put the "-" first: the one whose value starts the expansion, else
-- the empty one before a "-" of the policy's own text ("{artifact}-x" with
-- no artifact).
local function expand(i, arg, values)
  local parts, pos = {}, 1
  local first, lead, lead_value -- placeholders at the start: the first, the first not empty
  local empty = true            -- nothing expanded yet
  while true do
    local s, e, name = arg:find(policy_defaults.PLACEHOLDER, pos)
    local lit = arg:sub(pos, (s or #arg + 1) - 1)
    if lit ~= "" then empty = false end
    parts[#parts + 1] = lit
    if not s then break end
    local v, why = value_of(name, values)
    if v == false then return nil, ("argument %d: {%s}: %s"):format(i, name, why), "missing", name end
    if v == nil then
      v = arg:sub(s, e) -- unknown: stays as written, the policy's own text
    elseif v:find("%c") then
      return nil, ("argument %d: {%s}: %s holds a control character"):format(i, name, field_of(name)), "invalid",
        name
    elseif empty then
      first = first or name
      if v ~= "" then lead, lead_value = name, v end
    end
    if v ~= "" then empty = false end
    parts[#parts + 1] = v
    pos = e + 1
  end
  local out = table.concat(parts)
  if out:sub(1, 1) ~= "-" or arg:sub(1, 1) == "-" then return out end
  if lead then
    return nil, ('argument %d: {%s}: %s %s would start the argument with "-" (a command would take it ' ..
      "for an option)"):format(i, lead, field_of(lead), show(lead_value)), "invalid", lead
  end
  return nil, ('argument %d: {%s}: %s is empty, so the argument would start with the "-" after it ' ..
    "(a command would take it for an option)"):format(i, first, field_of(first)), "invalid", first
end

-- Replace {name} (and {source.KEY}) inside each argument; the replacement
-- text is used as is (never re-read as a pattern or rescanned). Returns the
-- new argv, or nil, why, kind, name when it must not run (expand: kind
-- "invalid" when a value would start an argument with "-" that the
-- policy's own text does not start with "-", or holds a control
-- character; "missing" when a {source.KEY} names a key the pipeline's
-- source does not have). Other unknown names stay as written. Every argv
-- the gateway runs is built here: this is what makes oopsd.policy(5)'s
-- promise true whatever a field holds.
function M.substitute(argv, values)
  local out = {}
  for i, arg in ipairs(argv) do
    local a, why, kind, name = expand(i, arg, values)
    if not a then return nil, why, kind, name end
    out[i] = a
  end
  return out
end

-- The pipeline's source (JSON text, `oopsctl create --source`): its
-- top-level object, or nil when there is none (or it is not an object).
local function source_fields(p)
  if type(p.source) ~= "string" or p.source == "" then return nil end
  local v = json.decode(p.source)
  return type(v) == "table" and v or nil
end

-- The placeholders' values for pipeline p (restart_command, which runs for
-- no pipeline, gets its own).
local function pipeline_values(p)
  return {
    id = p.id, pipeline = p.id, namespace = p.namespace, application = p.application,
    environment = p.environment, artifact = p.artifact or "", trigger = p.trigger or "release",
    source = p.source or "", source_fields = source_fields(p),
  }
end
M.values = pipeline_values

-- The commands of application a that run for a pipeline, with their names:
-- { {"build.submit", argv}, ... }.
local function pipeline_commands(a)
  local list = {}
  local b = a.build
  if b and b.external then
    for _, cmd in ipairs({ "submit", "status", "cancel" }) do list[#list + 1] = { "build." .. cmd, b[cmd] } end
  elseif b then
    list[#list + 1] = { "build", b }
  end
  if a.deploy then list[#list + 1] = { "deploy", a.deploy } end
  if a.health then list[#list + 1] = { "health", a.health } end
  if a.weight then list[#list + 1] = { "weight", a.weight } end -- {weight} is known when it runs
  return list
end

-- Why application a's commands must not run for pipeline p, or nil: each
-- command the pipeline can run is expanded with its fields as the step
-- would, and one that M.substitute refuses (a value that would start an
-- argument with "-", or holds a control character) refuses the pipeline
-- before any step (pipelines.refusal). {job} is not known yet and stays as
-- written (the handle is checked when submit prints it: M.check_handle). A
-- {source.KEY} the source lacks is not a refusal here: the build step
-- fails for it, naming the placeholder.
function M.refusal(a, p)
  local values
  for _, c in ipairs(pipeline_commands(a)) do
    values = values or pipeline_values(p)
    local argv, why, kind = M.substitute(c[2], values)
    if not argv and kind == "invalid" then return c[1] .. " " .. why end
  end
  return nil
end

-- Why a job handle must not be used, or nil: build.status and build.cancel
-- (of the external build `b`) are expanded with it and the other values as
-- they would be, and one refused for {job} refuses it (the other fields are
-- pipelines.refusal's, checked before the build was submitted).
function M.check_handle(b, values, handle)
  local with = setmetatable({ job = handle }, { __index = values })
  for _, cmd in ipairs({ "status", "cancel" }) do
    for i, arg in ipairs(b[cmd]) do
      local a, why, kind, name = expand(i, arg, with)
      if not a and kind == "invalid" and name == "job" then return "build." .. cmd .. " " .. why end
    end
  end
  return nil
end

return M
