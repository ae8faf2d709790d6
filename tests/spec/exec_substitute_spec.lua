-- The exec gateway's placeholders (lua/oops/gateways/exec/argv.lua): the
-- pipeline's source reaches build commands as {source} and {source.KEY};
-- a key the source lacks stops the command before it runs; a value that
-- would become an option, or holds a control character, is refused.
local exec = require("oops.gateways.exec")
local json = require("oops.json")

local function values(source)
  return { id = "abc", artifact = "v1", source = source or "",
    source_fields = source and json.decode(source) or nil }
end

describe("exec placeholders", function()
  it("fill {source.KEY} from the source's top-level strings and {source} with its JSON", function()
    local src = '{"repo": "git@example.org:shop/api.git", "ref": "main", "n": 7}'
    local argv = assert(exec.substitute({ "ci", "{id}", "{source.repo}@{source.ref}", "{source.n}", "{source}" },
      values(src)))
    assert.are.same({ "ci", "abc", "git@example.org:shop/api.git@main", "7", src }, argv)
  end)

  it("fill {trigger} with what made the pipeline: release (the default) or rollback", function()
    local v = exec.values { id = "abc", namespace = "shop", application = "web", environment = "prod",
      artifact = "v1", trigger = "rollback" }
    assert.are.same({ "deploy", "web", "v1", "rollback" },
      assert(exec.substitute({ "deploy", "{application}", "{artifact}", "{trigger}" }, v)))
    v = exec.values { id = "abc", namespace = "shop", application = "web", environment = "prod", artifact = "v1" }
    assert.are.same({ "release" }, assert(exec.substitute({ "{trigger}" }, v)))
  end)

  it("use a value as text only: it is never read again as a placeholder or a pattern", function()
    local argv = assert(exec.substitute({ "{source.a}", "{source.b}" }, values('{"a": "{id}", "b": "%1"}')))
    assert.are.same({ "{id}", "%1" }, argv)
  end)

  it("refuse a key the source lacks, a value that is not text, or no source at all, naming the argument", function()
    local argv, why = exec.substitute({ "ci", "{source.ref}" }, values('{"repo": "x"}'))
    assert.is_nil(argv)
    assert.are.equal('argument 2: {source.ref}: its source has no "ref"', why)
    argv, why = exec.substitute({ "{source.tags}" }, values('{"tags": ["a"]}'))
    assert.is_nil(argv)
    assert.are.equal('argument 1: {source.tags}: its source\'s "tags" is not a string', why)
    argv, why = exec.substitute({ "x", "y", "{source.ref}" }, values(nil))
    assert.is_nil(argv)
    assert.are.equal("argument 3: {source.ref}: the pipeline has no source", why)
  end)
end)

-- The class: oopsd.policy(5) promises that a placeholder never expands to
-- an option. M.substitute (every argv the gateway runs is built there)
-- refuses an argument whose expansion starts with "-" where the policy's
-- argument does not, and any value holding a control character, whatever
-- the placeholder.
describe("exec placeholders never expand to an option", function()
  local NAMES = { "id", "pipeline", "namespace", "application", "environment", "artifact", "job", "source",
    "source.ref", "trigger" }
  -- Every placeholder set to v; {source} is the JSON text itself, {source.ref} a field of it.
  local function all(v)
    local t = { source_fields = { ref = v } }
    for _, n in ipairs(NAMES) do
      if not n:find(".", 1, true) then t[n] = v end
    end
    return t
  end

  for _, name in ipairs(NAMES) do
    local ph = "{" .. name .. "}"
    for _, v in ipairs({ "-", "--x", "-rf", "--upload-pack=touch /tmp/x" }) do
      it(("refuse %s = %q at the start of an argument, naming it"):format(ph, v), function()
        local argv, why, kind = exec.substitute({ "cmd", "ok", ph }, all(v))
        assert.is_nil(argv)
        assert.are.equal("invalid", kind)
        assert.truthy(why:find("argument 3: " .. ph .. ": ", 1, true), why)
        assert.truthy(why:find('would start the argument with "-"', 1, true), why)
      end)
      it(("let %s = %q through inside an argument, or after the policy's own \"-\""):format(ph, v), function()
        local argv = assert(exec.substitute({ "cmd", "x=" .. ph, "--opt=" .. ph, "-" .. ph }, all(v)))
        assert.are.same({ "cmd", "x=" .. v, "--opt=" .. v, "-" .. v }, argv)
      end)
    end
    for _, c in ipairs({ "\n", "\r", "\t", "\0", "\27[31m", "\127" }) do
      it(("refuse %s holding control character %d, at the start or inside"):format(ph, c:byte()), function()
        for _, arg in ipairs({ ph, "x=" .. ph, "--opt=" .. ph }) do
          local argv, why, kind = exec.substitute({ "cmd", arg }, all("a" .. c .. "b"))
          assert.is_nil(argv)
          assert.are.equal("invalid", kind)
          assert.truthy(why:find("argument 2: " .. ph .. ": .* holds a control character"), why)
        end
      end)
    end
  end

  it("name the field: the source's key, the job handle, the artifact", function()
    local _, why = exec.substitute({ "git", "clone", "{source.repo}" },
      { source_fields = { repo = "--upload-pack=touch x" } })
    assert.are.equal('argument 3: {source.repo}: its source\'s "repo" "--upload-pack=touch x" would start the ' ..
      'argument with "-" (a command would take it for an option)', why)
    _, why = exec.substitute({ "ci", "status", "{job}" }, { job = "--help" })
    assert.truthy(why:find("{job}: its job handle \"--help\"", 1, true), why)
    _, why = exec.substitute({ "deploy", "{artifact}" }, { artifact = "-x" })
    assert.truthy(why:find("{artifact}: its artifact \"-x\"", 1, true), why)
  end)

  it("refuse a '-' that empty placeholders let come first, naming the first non-empty one or the empty one", function()
    local _, why, kind = exec.substitute({ "x", "{artifact}{source.a}" },
      { artifact = "", source_fields = { a = "-v" } })
    assert.are.equal("invalid", kind)
    assert.truthy(why:find("argument 2: {source.a}: ", 1, true), why)
    _, why, kind = exec.substitute({ "x", "{artifact}-v" }, { artifact = "" })
    assert.are.equal("invalid", kind)
    assert.truthy(why:find("{artifact}: its artifact is empty", 1, true), why)
    -- Filled, the same argument is fine.
    assert.are.same({ "x", "v1-v" }, exec.substitute({ "x", "{artifact}-v" }, { artifact = "v1" }))
  end)

  it("keep a template argument that starts with '-', and unknown placeholders as written", function()
    assert.are.same({ "x", "--tag=-1", "-", "{nope}", "{nope}-x" },
      exec.substitute({ "x", "--tag={artifact}", "-", "{nope}", "{nope}-x" }, { artifact = "-1" }))
    -- Control characters of the policy's own text are the policy's business.
    assert.are.same({ "x", "a\tb" }, exec.substitute({ "x", "a\t{artifact}" }, { artifact = "b" }))
  end)

  it("refuse a negative {source.KEY} number at the start, not inside", function()
    local argv, _, kind = exec.substitute({ "x", "{source.n}" }, { source_fields = { n = -5 } })
    assert.is_nil(argv)
    assert.are.equal("invalid", kind)
    assert.are.same({ "x", "n=-5" }, exec.substitute({ "x", "n={source.n}" }, { source_fields = { n = -5 } }))
  end)

  it("a missing key is 'missing', not a refusal", function()
    local _, _, kind = exec.substitute({ "x", "{source.ref}" }, { source_fields = {} })
    assert.are.equal("missing", kind)
  end)
end)

-- What the engine checks before any step (pipelines.refusal → exec.refusal):
-- every command of the application expanded with the pipeline's fields.
describe("exec.refusal and exec.check_handle", function()
  local app = {
    build = { external = true, submit = { "ci", "submit", "{id}", "{source.repo}" },
      status = { "ci", "status", "{job}" }, cancel = { "ci", "cancel", "--job={job}" } },
    deploy = { "deploy", "{artifact}" }, health = { "health", "{environment}" },
  }
  local function p(fields)
    local t = { id = "abc123", namespace = "shop", application = "api", environment = "prod", artifact = "v1" }
    for k, v in pairs(fields) do t[k] = v end
    return t
  end

  it("refuses a source value or artifact that would become an option, naming command, argument and field", function()
    assert.is_nil(exec.refusal(app, p { source = '{"repo": "git@x:y.git"}' }))
    assert.are.equal('build.submit argument 4: {source.repo}: its source\'s "repo" "--upload-pack=touch m" would ' ..
      'start the argument with "-" (a command would take it for an option)',
      exec.refusal(app, p { source = '{"repo": "--upload-pack=touch m"}' }))
    assert.truthy(exec.refusal(app, p { source = '{"repo": "a\\nb"}' }):find("holds a control character", 1, true))
    assert.truthy(exec.refusal(app, p { source = '{"repo": "x"}', artifact = "-x" }):find("^deploy argument 2"))
    -- A key the source lacks is the build step's to report, not a refusal.
    assert.is_nil(exec.refusal(app, p { source = '{"other": "x"}' }))
  end)

  it("a one-command build, and {source} itself", function()
    local one = { build = { "make", "{source}" } }
    assert.is_nil(exec.refusal(one, p { source = '{"a": 1}' }))
    assert.truthy(exec.refusal(one, p { source = '{\n"a": 1}' }):find("^build argument 2: {source}: its source holds"))
  end)

  it("check_handle: a handle that status or cancel would take for an option is refused", function()
    assert.is_nil(exec.check_handle(app.build, {}, "job-1"))
    assert.truthy(exec.check_handle(app.build, {}, "--help"):find("^build.status argument 3: {job}: its job handle"))
    -- Each argument on its own: another field refused first does not hide it.
    local both = { status = { "ci", "{source.v}", "{job}" }, cancel = { "ci" } }
    assert.truthy(exec.check_handle(both, { source_fields = { v = "-v" } }, "--help"):find("argument 3: {job}", 1,
      true))
    assert.is_nil(exec.check_handle(both, { source_fields = { v = "-v" } }, "job-1"), "only {job} is its business")
    -- Inside an argument ("--job={job}" in cancel) it would be fine; status refuses it.
    local inside = { status = { "ci", "--job={job}" }, cancel = { "ci", "job={job}" } }
    assert.is_nil(exec.check_handle(inside, {}, "--help"))
  end)
end)
