-- The flags of oopsctl's Lua subcommands (lua/oops/cli.lua): what is taken,
-- and each refusal's one line (a `bad` that raises stands in for the exit).
local cli = require("oops.cli")

local SPEC = { values = { ["--app"] = "app", ["--since"] = "since" }, switches = { ["--json"] = "json" },
  usage = "usage: test", bad = function(msg, with_usage) error({ msg = msg, usage = with_usage == true }) end }

local function refused(argv)
  local ok, e = pcall(cli.parse, argv, SPEC)
  assert.is_false(ok, "refused: " .. table.concat(argv, " "))
  assert.is_table(e, tostring(e))
  return e.msg, e.usage
end

describe("oops.cli.parse", function()
  it("takes values as two words or with =, and switches alone", function()
    assert.are.same({ app = "shop/api", since = "7d", json = true },
      cli.parse({ "--app", "shop/api", "--json", "--since=7d" }, SPEC))
    assert.are.same({}, cli.parse({}, SPEC))
    assert.are.same({ app = "a=b" }, cli.parse({ "--app=a=b" }, SPEC))
  end)

  it("refuses an unknown flag, with the usage, its name cut at 64 bytes", function()
    local msg, usage = refused { "--nope", "x" }
    assert.are.equal('unknown flag "--nope"', msg)
    assert.is_true(usage)
    msg = refused { "--" .. string.rep("x", 200) }
    assert.is_true(#msg < 100, msg)
  end)

  it("refuses a flag given twice, a switch too", function()
    assert.are.equal("--app: given twice", (refused { "--app", "a/b", "--app=c/d" }))
    assert.are.equal("--json: given twice", (refused { "--json", "--json" }))
  end)

  it("refuses a value missing or empty", function()
    assert.are.equal("--since: expects a value", (refused { "--since" }))
    assert.are.equal("--since: expects a value", (refused { "--since=" }))
    assert.are.equal("--app: expects a value", (refused { "--app", "" }))
  end)

  it("refuses a value longer than MAX_ARG bytes, and takes one that long", function()
    local long = string.rep("a", cli.MAX_ARG)
    assert.are.equal(long, cli.parse({ "--app", long }, SPEC).app)
    assert.are.equal("--app: longer than " .. cli.MAX_ARG .. " bytes", (refused { "--app", long .. "a" }))
  end)
end)
