-- The exec gateway's placeholders (lua/oops/gateways/exec.lua): the
-- pipeline's source reaches build commands as {source} and {source.KEY};
-- a key the source lacks stops the command before it runs.
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
