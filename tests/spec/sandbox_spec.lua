-- The policy sandbox's bounds (issue: "no input hangs the daemon"): memory,
-- wall-clock time inside Lua's own C functions, instructions, which files
-- are read, what policies can see, and how much of a value a message quotes.
-- Every case is run through the real loader (oops.policy) and the real
-- binding (oops.sandbox), in the oopsd binary (busted runs through it).
local oops = require("oops")
local policy = require("oops.policy")

local OPTS = { cron_parse = oops.cron.parse }
-- For the memory cases: the cap, not the load's deadline, must be what stops
-- them, even on a loaded machine under ASan (a CI run met the 1000 ms first).
local MEMORY_OPTS = { cron_parse = oops.cron.parse, time_ms = 30000 }

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p '" .. d .. "'"))
  return d
end

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

-- Load one policy text; its errors (nil when it loaded) and the seconds it took.
local function load_text(text, opts)
  local dir = tmpdir()
  write(dir .. "/p.lua", text)
  local t0 = oops.now_ms()
  local p, errs = policy.load_dir(dir, opts or OPTS)
  local took = (oops.now_ms() - t0) / 1000
  os.execute("rm -rf '" .. dir .. "'")
  return p, errs and table.concat(errs, "\n"), took
end

local function refused(text, want, opts)
  local p, errs = load_text(text, opts)
  assert.is_nil(p, "loaded: " .. text)
  assert.matches(want, errs, 1, true)
  return errs
end

describe("policy code under the sandbox", function()
  -- The class: patterns whose backtracking grows with the subject, at the top
  -- level of a file, as methods, through gmatch and gsub, inside pcall.
  local backtracking = {
    'string.find(string.rep("a", 40), "(.-)(.-)(.-)(.-)(.-)(.-)(.-)(.-)b")',
    'local s = string.rep("a", 40); s:find("(.-)(.-)(.-)(.-)(.-)(.-)(.-)(.-)b")',
    'string.match(string.rep("a", 5000), "a.-a.-a.-b")',
    'for _ in string.gmatch(string.rep("ab", 3000), ".-.-.-x") do end',
    'string.gsub(string.rep("x", 9000), "x-x-x-y", "")',
    'string.find(string.rep("a", 400), "%w*%w*%w*%w*%w*b")',
    'string.find(string.rep("(", 3000) .. string.rep(")", 3000), "%b()%b()%b()x")',
  }
  for i, code in ipairs(backtracking) do
    it("refuses a backtracking pattern before it runs (" .. i .. ")", function()
      local p, errs, took = load_text(code .. "\nscan { interval = \"1s\" }\n")
      assert.is_nil(p)
      assert.is_true(took < 5, "took " .. took .. " s")
      assert.matches("this pattern could backtrack", errs, 1, true)
    end)
  end

  it("refuses it under pcall too: the file sees an error, never a hang", function()
    local p, _, took = load_text([[
      local ok, err = pcall(string.find, string.rep("a", 40), "(.-)(.-)(.-)(.-)(.-)(.-)(.-)(.-)b")
      assert(not ok and err:find("could backtrack", 1, true), "refused under pcall")
      scan { interval = "1s" }
    ]])
    assert.is_not_nil(p)
    assert.is_true(took < 5, "took " .. took .. " s")
  end)

  it("still lets ordinary patterns run on ordinary text", function()
    local p = load_text([[
      local ns, app = ("shop/api"):match("^(.-)/(.*)$")
      local trimmed = ("  prod  "):match("^%s*(.-)%s*$")
      assert(ns == "shop" and app == "api" and trimmed == "prod")
      local n = select(2, string.rep("a b ", 5000):gsub("%s+", ""))
      assert(n == 10000)
      application (ns .. "/" .. app) { environments = { trimmed } }
    ]])
    assert.is_not_nil(p)
    assert.is_not_nil(p.applications["shop/api"])
  end)

  it("caps memory: one huge allocation fails at once", function()
    local errs = refused('local s = string.rep("x", 2^31 - 1)', "used more than 32 MiB of memory")
    assert.matches("p.lua: ", errs, 1, true)
  end)

  it("caps memory: growth in small steps too, even under pcall", function()
    -- (steps of 64 KiB: fast enough, even under ASan, to meet the cap before the deadline)
    local block = '("x"):rep(1024):rep(64)'
    refused('local t = {} for i = 1, 1e9 do t[i] = ' .. block .. ' .. i end', "used more than 32 MiB of memory",
      MEMORY_OPTS)
    refused('while true do pcall(function() local t = {} for i = 1, 1e9 do t[i] = ' .. block .. ' .. i end end) end',
      "used more than 32 MiB of memory", MEMORY_OPTS)
  end)

  it("stops a loop that allocates nothing (instructions)", function()
    refused("while true do end", "runaway: more than 10000000 instructions")
    refused("while true do pcall(function() while true do end end) end", "runaway: more than")
  end)

  it("keeps the wall-clock deadline across many cheap C calls", function()
    -- Each find is allowed alone; together they would run for minutes.
    local _, errs, took = load_text('local s = ("a"):rep(2000) while true do s:find(".-b") end')
    assert.matches("p.lua: still running when the policy load's time limit (1000 ms) ran out", errs, 1, true)
    assert.is_true(took < 5, "took " .. took .. " s")
  end)

  it("gives memory back: the next load has the whole cap again", function()
    for _ = 1, 3 do refused('local s = string.rep("x", 2^31 - 1)', "memory", MEMORY_OPTS) end
    local p, errs = load_text('local s = ("x"):rep(4096):rep(4096) scan { interval = "1s" }', MEMORY_OPTS)
    assert.is_not_nil(p, errs)
  end)

  it("leaves the engine's own pattern calls alone outside the sandbox", function()
    local s = ("a"):rep(20000)
    assert.is_nil(s:find(".-b")) -- ~4e8 steps: refused inside a sandbox, fine out here
  end)
end)

describe("oops.sandbox.run", function()
  it("returns the function's results, or false, message, kind, traceback", function()
    assert.are.same({ true, 1, 2 }, { oops.sandbox.run(function(a, b) return a, b end, {}, 1, 2) })
    local ok, msg, kind, tb = oops.sandbox.run(function() error("boom") end, {})
    assert.is_false(ok)
    assert.matches("boom", msg)
    assert.are.equal("error", kind)
    assert.matches("stack traceback", tb)
    ok, msg, kind = oops.sandbox.run(function() while true do end end, { instructions = 5000 })
    assert.are.same({ false, "runaway: more than 5000 instructions", "instructions" }, { ok, msg, kind })
    ok, msg, kind = oops.sandbox.run(function() return ("y"):rep(2^30) end, { memory = 1024 * 1024 })
    assert.are.same({ false, "used more than 1 MiB of memory", "memory" }, { ok, msg, kind })
    ok, msg, kind = oops.sandbox.run(function() coroutine.yield() end, {})
    assert.are.same({ false, "yield" }, { ok, kind })
    assert.matches("cannot wait", msg, 1, true)
  end)

  it("raises on a caller's mistake", function()
    assert.has_error(function() oops.sandbox.run("f", {}) end)
    assert.has_error(function() oops.sandbox.run(function() end, { memory = -1 }) end)
    assert.has_error(function() oops.sandbox.run(function() end, { time_ms = 1.5 }) end)
  end)
end)

describe("which policy files are read", function()
  local function errors_in(setup)
    local dir = tmpdir()
    write(dir .. "/a.lua", 'scan { interval = "1s" }\n')
    setup(dir)
    local t0 = oops.now_ms()
    local p, errs = policy.load_dir(dir, OPTS)
    local took = (oops.now_ms() - t0) / 1000
    os.execute("rm -rf '" .. dir .. "'")
    assert.is_nil(p)
    assert.is_true(took < 5, "took " .. took .. " s")
    return table.concat(errs, "\n"), dir
  end

  it("refuses a FIFO without opening it for good (no hang)", function()
    local errs, dir = errors_in(function(d) assert(os.execute("mkfifo '" .. d .. "/zz.lua'")) end)
    assert.matches(dir .. "/zz.lua: a FIFO, not a regular file", errs, 1, true)
  end)

  it("refuses a symlink to a device", function()
    local errs, dir = errors_in(function(d) assert(os.execute("ln -s /dev/zero '" .. d .. "/zero.lua'")) end)
    assert.matches(dir .. "/zero.lua: a character device, not a regular file", errs, 1, true)
  end)

  it("refuses a directory named *.lua", function()
    local errs = errors_in(function(d) assert(os.execute("mkdir '" .. d .. "/sub.lua'")) end)
    assert.matches("sub.lua: a directory, not a regular file", errs, 1, true)
  end)

  it("refuses a file over the size cap, naming it", function()
    local errs = errors_in(function(d) write(d .. "/big.lua", ("-- x\n"):rep(policy.MAX_FILE_BYTES // 5 + 1)) end)
    assert.matches("big.lua: larger than 1048576 bytes: not read", errs, 1, true)
  end)

  it("follows a symlink to a regular file", function()
    local dir = tmpdir()
    write(dir .. "/real", 'scan { interval = "2s" }\n')
    assert(os.execute("ln -s '" .. dir .. "/real' '" .. dir .. "/link.lua'"))
    local p = policy.load_dir(dir, OPTS)
    os.execute("rm -rf '" .. dir .. "'")
    assert.are.equal(2000, p.scan.interval_ms)
  end)

  it("refuses a directory with no policy files", function()
    local dir = tmpdir()
    write(dir .. "/README", "not a policy")
    local p, errs = policy.load_dir(dir, OPTS)
    os.execute("rm -rf '" .. dir .. "'")
    assert.is_nil(p)
    assert.are.same({ dir .. ": no policy files (*.lua) in it" }, errs)
  end)

  it("oops.sandbox.read bounds what it reads and never blocks", function()
    local dir = tmpdir()
    assert(os.execute("mkfifo '" .. dir .. "/f'"))
    local text, err = oops.sandbox.read(dir .. "/f", 100)
    assert.is_nil(text)
    assert.matches("a FIFO, not a regular file", err, 1, true)
    write(dir .. "/ok", "hello")
    assert.are.equal("hello", oops.sandbox.read(dir .. "/ok", 5))
    text, err = oops.sandbox.read(dir .. "/ok", 4)
    assert.is_nil(text)
    assert.matches("larger than 4 bytes", err, 1, true)
    text, err = oops.sandbox.read(dir .. "/none", 4)
    assert.is_nil(text)
    assert.matches("No such file", err, 1, true)
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)

describe("what policies can see and what messages quote", function()
  it("refuses the database settings in os.getenv, whatever the case", function()
    for _, name in ipairs({ "OOPS_DB", "OOPS_DB_PASSWORD", "oops_db", "Oops_Db_Password_File" }) do
      refused(('local v = os.getenv(%q)'):format(name), "the database settings are not readable by policies")
    end
    assert.is_not_nil((load_text('assert(os.getenv("PATH")) scan { interval = "1s" }')))
  end)

  it("quotes only a short prefix of a long value", function()
    local long = "SECRETSTART" .. ("z"):rep(500) .. "SECRETEND"
    local errs = refused(('scan { interval = %q }'):format(long), "not a duration")
    assert.matches('"SECRETSTART', errs, 1, true)
    assert.not_matches("SECRETEND", errs, 1, true)
    assert.matches("(520 bytes)", errs, 1, true)
  end)

  it("bounds the errors a policy can produce: their size and their count", function()
    local errs = refused(('error(%q)'):format(("E"):rep(100000)), "...")
    assert.is_true(#errs <= policy.MAX_ERROR_BYTES + 100, #errs .. " bytes")
    local many = {}
    for i = 1, 200 do many[i] = ('application "shop/a%d" { environments = { "Bad" } }'):format(i) end
    local _, list = load_text(table.concat(many, "\n"))
    local n = select(2, list:gsub("\n", "\n")) + 1
    assert.are.equal(policy.MAX_ERRORS + 1, n)
    assert.matches("... and 150 more errors", list, 1, true)
  end)

  it("checks an application's env: names, the engine's OOPS_* names, values", function()
    local function app(env) return 'application "shop/api" { environments = { "prod" }, env = ' .. env .. ' }' end
    local p = assert(load_text(app('{ KUBECONFIG = "/etc/oopsd/kube", LANG = "C.UTF-8" }')))
    assert.are.same({ KUBECONFIG = "/etc/oopsd/kube", LANG = "C.UTF-8" }, p.applications["shop/api"].env)
    refused(app('{ OOPS_DB = "x" }'), "OOPS_* names are the engine's own")
    refused(app('{ oops_pipeline = "x" }'), "OOPS_* names are the engine's own")
    refused(app('{ ["A=B"] = "x" }'), "not a variable name")
    refused(app('{ A = 1 }'), "A: must be a string, not a number")
    refused(app('"A=1"'), "must be a table of NAME")
  end)
end)
