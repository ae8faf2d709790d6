-- The `oops` module's C bindings, through the real binary
-- (`oopsd lua busted ...`): each block checks the promise lua/oops/meta.lua
-- makes for those functions. Caller mistakes raise; runtime failures return
-- nil, msg, name (oops.ErrorName: "error names" below provokes each one).
--
-- The database blocks need OOPS_TEST_DB (tests/run.sh sets it to a fresh
-- database on a throwaway MariaDB). Without it they FAIL, saying so: a
-- skipped database test looks like a passing one.
local oops = require("oops")

-- The binary this spec runs in; a child started from it runs the same build
-- (the sanitizer one too).
local OOPSD = "/proc/self/exe"

-- Expect fn(...) to raise an error whose text contains `text` (plain).
local function raises(text, fn, ...)
  local ok, err = pcall(fn, ...)
  assert(not ok, "expected an error containing '" .. text .. "', but the call returned")
  err = tostring(err)
  assert(err:find(text, 1, true), "expected an error containing '" .. text .. "', got: " .. err)
  return err
end

local function contains(list, value)
  for _, v in ipairs(list) do
    if v == value then return true end
  end
  return false
end

local function write_temp(text)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() end
  return f ~= nil
end

-- Run a Lua script in a child `oopsd lua` and return its result.
local function run_script(text)
  local path = write_temp(text)
  local r, err = oops.wait(function()
    return oops.proc.run{ argv = { OOPSD, "lua", path }, inherit_env = true, timeout_ms = 60000,
                          env = require("support.db").child_env() }
  end)
  os.remove(path)
  assert(r, err)
  return r
end

-- 2024-01-15T03:00:00Z. In January Paris is UTC+1: 03:00 there is 02:00 UTC.
local UTC_0300 = 1705287600
local PARIS_0300 = UTC_0300 - 3600

describe("oops.cron", function()
  it("parse returns a handle whose :text() is the input", function()
    local c = assert(oops.cron.parse("0 3 * * *"))
    assert.are.equal("0 3 * * *", c:text())
    assert.are.equal("0 3 * * *", tostring(c))
    assert.is_false(c:has_seconds())
    assert.is_true(assert(oops.cron.parse("*/5 * * * * *")):has_seconds())
  end)

  it(":text() is the input for a long expression too", function()
    local text = string.rep("0,", 80) .. "0 * * * *" -- 169 characters, valid
    local c = assert(oops.cron.parse(text))
    assert.are.equal(text, c:text())
  end)

  it("parse returns nil and the reason for an invalid expression", function()
    local c, err, name = oops.cron.parse("61 * * * *")
    assert.is_nil(c)
    assert.are.equal("minute 61 out of range 0-59", err)
    assert.are.equal("invalid", name)
  end)

  it("parse raises when the text is not a string", function()
    raises("bad argument #1", oops.cron.parse, nil)
  end)

  it(":matches fires at the exact second only", function()
    local c = assert(oops.cron.parse("0 3 * * *"))
    assert.is_true(c:matches(UTC_0300, "UTC"))
    assert.is_false(c:matches(UTC_0300 + 60, "UTC"))
    assert.is_false(c:matches(UTC_0300 + 1, "UTC"))
  end)

  it(":next is the first firing strictly after epoch", function()
    local c = assert(oops.cron.parse("0 3 * * *"))
    assert.are.equal(UTC_0300, c:next(UTC_0300 - 1, "UTC"))
    assert.are.equal(UTC_0300 + 86400, c:next(UTC_0300, "UTC"))
    assert.is_nil(assert(oops.cron.parse("0 0 30 2 *")):next(UTC_0300, "UTC"))
  end)

  it("evaluates in the time zone given", function()
    local c = assert(oops.cron.parse("0 3 * * *"))
    assert.is_true(c:matches(PARIS_0300, "Europe/Paris"))
    assert.is_false(c:matches(PARIS_0300, "UTC"))
    assert.is_false(c:matches(UTC_0300, "Europe/Paris"))
    local midnight = UTC_0300 - 3 * 3600
    assert.are.equal(PARIS_0300, c:next(midnight, "Europe/Paris"))
    assert.are.equal(UTC_0300, c:next(midnight, "UTC"))
  end)

  it("valid_timezone knows real zones and says why not", function()
    assert.is_true(oops.cron.valid_timezone("Europe/Paris"))
    assert.is_true(oops.cron.valid_timezone("UTC"))
    local ok, err = oops.cron.valid_timezone("Mars/Olympus")
    assert.is_false(ok)
    assert.is_string(err)
    assert.truthy(err:find("Mars/Olympus", 1, true), err)
    local ok2, err2 = oops.cron.valid_timezone("../etc/passwd")
    assert.is_false(ok2)
    assert.is_string(err2)
  end)
end)

describe("oops.task, oops.sleep, oops.wait", function()
  it("a task sleeps and returns values through oops.wait", function()
    local t0 = oops.now_ms()
    local a, b, slept = oops.wait(function(x, y)
      local s = oops.sleep(50)
      return x, y, s
    end, "x", 2)
    assert.are.equal("x", a)
    assert.are.equal(2, b)
    assert.is_true(slept)
    assert.is_true(oops.now_ms() - t0 >= 50)
  end)

  it("oops.sleep waits the full time even after Lua kept the loop busy", function()
    local busy = oops.now_ms() + 200
    while oops.now_ms() < busy do end -- the loop's cached time goes stale meanwhile
    local t0 = oops.now_ms()
    oops.wait(function() oops.sleep(100) end)
    assert.is_true(oops.now_ms() - t0 >= 100, "slept " .. (oops.now_ms() - t0) .. " ms")
  end)

  it("oops.wait raises the task's error", function()
    raises("boom from the task", oops.wait, function()
      oops.sleep(1)
      error("boom from the task")
    end)
  end)

  it("oops.task from the main thread runs at once, until its first wait", function()
    local steps = {}
    oops.task("spec", function()
      steps[#steps + 1] = "started"
      oops.sleep(1)
      steps[#steps + 1] = "woke"
    end)
    steps[#steps + 1] = "after task()"
    assert.are.same({ "started", "after task()" }, steps)
    oops.wait(function()
      local deadline = oops.now_ms() + 10000
      while #steps < 3 and oops.now_ms() < deadline do oops.sleep(5) end
    end)
    assert.are.same({ "started", "after task()", "woke" }, steps)
  end)

  it("oops.task from a task starts once the caller waits", function()
    local steps = {}
    oops.wait(function()
      local done = false
      oops.task("spec", function()
        steps[#steps + 1] = "started"
        oops.sleep(1)
        done = true
      end)
      steps[#steps + 1] = "after task()"
      while not done do oops.sleep(5) end
    end)
    assert.are.same({ "after task()", "started" }, steps) -- started once the caller waited
  end)

  it("clocks: now_ms is an integer, time a float near os.time, stopping false", function()
    assert.are.equal("integer", math.type(oops.now_ms()))
    assert.are.equal("float", math.type(oops.time()))
    assert.is_true(math.abs(oops.time() - os.time()) < 2)
    assert.is_false(oops.stopping())
    assert.is_string(oops.server_name())
  end)

  it("oops.interrupt ends a task's sleep at once, as if it had slept; false for a task not sleeping", function()
    local t0 = oops.now_ms()
    local slept, again, late = oops.wait(function()
      local me, sleeper = oops.current(), nil
      local got
      oops.task("spec sleeper", function()
        sleeper = oops.current()
        got = oops.sleep(60000)
      end)
      local interrupted = false
      oops.task("spec waker", function()
        oops.sleep(20)
        interrupted = oops.interrupt(sleeper)
      end)
      while got == nil do oops.sleep(5) end
      assert.is_true(interrupted)
      return got, oops.interrupt(sleeper), oops.interrupt(me) -- its sleep is over; the caller runs
    end)
    assert.is_true(slept)
    assert.is_false(again)
    assert.is_false(late)
    assert.is_true(oops.now_ms() - t0 < 30000, "the sleep ended early")
    raises("thread expected", oops.interrupt, "not a task")
  end)

  it("oops.sleep outside a task raises", function()
    raises("must be called from a task", oops.sleep, 10)
  end)

  it("oops.sleep raises on a negative duration", function()
    raises("must be >= 0", oops.wait, function() return oops.sleep(-1) end)
  end)
end)

describe("oops.proc.run", function()
  it("runs argv and reports status, stdout and stderr", function()
    local r = oops.wait(function()
      return oops.proc.run{ argv = { "sh", "-c", 'echo "out $1"; echo err >&2; exit 3', "sh", "arg" } }
    end)
    assert.are.equal(3, r.status)
    assert.is_false(r.ok)
    assert.are.equal(0, r.signal)
    assert.is_false(r.timed_out)
    assert.are.equal("out arg\n", r.stdout)
    assert.are.equal("err\n", r.stderr)
  end)

  it("passes an argument literally, never through a shell", function()
    local base = os.tmpname() -- creates the file: remove it below
    local marker = base .. ".touched"
    local literal = "$(touch " .. marker .. ")"
    local r = oops.wait(function()
      return oops.proc.run{ argv = { "printf", "%s", literal } }
    end)
    assert.is_true(r.ok)
    assert.are.equal(literal, r.stdout)
    os.remove(base)
    assert.is_false(exists(marker))
  end)

  it("feeds stdin and sets env", function()
    local r = oops.wait(function()
      return oops.proc.run{ argv = { "sh", "-c", 'cat; printf %s "$SPEC_VAR"' },
                            stdin = "in\n", env = { SPEC_VAR = "v" } }
    end)
    assert.are.equal("in\nv", r.stdout)
  end)

  it("kills a command that outlives timeout_ms", function()
    local t0 = oops.now_ms()
    local r = oops.wait(function()
      return oops.proc.run{ argv = { "sleep", "10" }, timeout_ms = 200 }
    end)
    assert.is_true(r.timed_out)
    assert.is_false(r.ok)
    assert.are_not.equal(0, r.signal)
    assert.is_true(oops.now_ms() - t0 < 9000, "it waited for sleep to end")
  end)

  it("counts timeout_ms from the start, even after Lua kept the loop busy", function()
    -- Busy for longer than the timeout: a timer started on the stale loop
    -- time would fire at once.
    local busy = oops.now_ms() + 1500
    while oops.now_ms() < busy do end
    local r = oops.wait(function()
      return oops.proc.run{ argv = { "sleep", "0.1" }, timeout_ms = 1200 }
    end)
    assert.is_false(r.timed_out, "sleep 0.1 was killed by a 1.2 s timeout")
    assert.is_true(r.ok)
  end)

  it("returns nil and a message naming a missing binary", function()
    local r, err, code = oops.wait(function()
      return oops.proc.run{ argv = { "oops-no-such-binary" } }
    end)
    assert.is_nil(r)
    assert.truthy(err:find("oops-no-such-binary", 1, true), err)
    assert.are.equal("io", code)
  end)

  it("raises when argv is a string", function()
    local ok, err = oops.wait(function()
      return pcall(oops.proc.run, { argv = "echo hi" })
    end)
    assert.is_false(ok)
    assert.truthy(err:find("argv must be a list of strings", 1, true), err)
  end)

  it("raises outside a task", function()
    raises("must be called from a task", oops.proc.run, { argv = { "true" } })
  end)
end)

describe("oops.proc.start", function()
  -- Wait in a task until box.result is set (on_exit ran), for at most 10 s.
  local function wait_exit(box)
    oops.wait(function()
      local deadline = oops.now_ms() + 10000
      while not box.result and oops.now_ms() < deadline do oops.sleep(5) end
    end)
    assert(box.result, "on_exit was not called within 10 s")
    return box.result
  end

  it("returns a handle at once and calls on_exit with the result", function()
    local box = {}
    local h = assert(oops.proc.start{
      argv = { "sh", "-c", "echo started; exit 4" },
      on_exit = function(r) box.result = r end,
    })
    assert.is_true(h:pid() > 0)
    assert.is_true(h:running())
    local r = wait_exit(box)
    assert.are.equal(4, r.status)
    assert.are.equal("started\n", r.stdout)
    assert.is_false(h:running())
    h:kill() -- after exit: ignored
  end)

  it(":kill signals the process", function()
    local box = {}
    local h = assert(oops.proc.start{ argv = { "sleep", "10" }, on_exit = function(r) box.result = r end })
    h:kill()
    local r = wait_exit(box)
    assert.are.equal(15, r.signal)
    assert.is_false(r.ok)
  end)

  it("returns nil and a message for a missing binary, raises for a string argv", function()
    local h, err, name = oops.proc.start{ argv = { "oops-no-such-binary" } }
    assert.is_nil(h)
    assert.truthy(err:find("oops-no-such-binary", 1, true), err)
    assert.are.equal("io", name)
    raises("argv must be a list of strings", oops.proc.start, { argv = "echo hi" })
  end)
end)

describe("oops.http.request", function()
  it("returns nil and an error naming the address when nothing listens", function()
    local r, err, code = oops.wait(function()
      return oops.http.request{ url = "http://127.0.0.1:9/", timeout_ms = 5000 }
    end)
    assert.is_nil(r)
    assert.is_string(err)
    assert.truthy(err:find("127.0.0.1:9", 1, true), err)
    assert.are.equal("io", code)
  end)

  it("raises outside a task", function()
    raises("must be called from a task", oops.http.request, { url = "http://127.0.0.1:9/" })
  end)
end)

describe("oops.log", function()
  it("writes one key=value line with the fields, quoted on one line", function()
    local r = run_script([[
      local oops = require("oops")
      oops.log("debug", "not written at the default level")
      oops.log("info", "hello spec", { note = "two words\nand a line", pipeline = "p1", count = 3 })
    ]])
    assert.is_true(r.ok, r.stderr)
    local lines = {}
    for l in r.stderr:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.are.equal(1, #lines, r.stderr)
    local line = lines[1]
    assert.truthy(line:match("^ts=%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ level=info "), line)
    -- pipeline comes first, the other fields by name, msg last
    local p = line:find(" pipeline=p1 ", 1, true)
    local c = line:find(" count=3 ", 1, true)
    local n = line:find(' note="two words\\nand a line" ', 1, true)
    assert.truthy(p and c and n, line)
    assert.truthy(p < c and c < n, line)
    assert.truthy(line:find(' msg="hello spec"$'), line)
  end)

  it("takes 32 fields from deep in the Lua stack without crashing", function()
    local r = run_script([[
      local oops = require("oops")
      oops.log_level("error")
      local fields = {}
      for i = 1, 32 do fields["k" .. i] = "v" end
      local function deep(n) if n == 0 then return oops.log("info", "m", fields) end return (deep(n - 1)) end
      for n = 0, 400 do deep(n) end
    ]])
    assert.are.equal(0, r.signal, "the child died of signal " .. r.signal .. "\n" .. r.stderr)
    assert.is_true(r.ok, r.stderr)
  end)

  it("raises on an unknown level", function()
    raises("level must be debug, info, warn or error", oops.log, "loud", "m")
  end)
end)

describe("oops.http.request headers", function()
  it("takes 32 headers from deep in the Lua stack without crashing", function()
    local r = run_script([[
      local oops = require("oops")
      local h = {}
      for i = 1, 32 do h[#h + 1] = "X-H" .. i .. ": v" end
      local function deep(n)
        if n == 0 then return oops.http.request{ url = "http://127.0.0.1:9/", headers = h } end
        return (deep(n - 1))
      end
      for n = 0, 400 do oops.task("h", deep, n) end
    ]])
    assert.are.equal(0, r.signal, "the child died of signal " .. r.signal .. "\n" .. r.stderr)
    assert.is_true(r.ok, r.stderr)
  end)
end)

describe("oops.metrics", function()
  it("inc adds to a counter, get reads it, labels in any order", function()
    assert.are.equal(0, oops.metrics.get("spec_total", { scan = "a", app = "x" }))
    oops.metrics.inc("spec_total", { scan = "a", app = "x" })
    oops.metrics.inc("spec_total", { app = "x", scan = "a" }, 2)
    assert.are.equal(3, oops.metrics.get("spec_total", { scan = "a", app = "x" }))
    assert.are.equal(0, oops.metrics.get("spec_total", { scan = "b", app = "x" }))
    assert.are.equal(0, oops.metrics.get("spec_total"))
  end)

  it("set replaces a gauge, observe counts a summary", function()
    oops.metrics.set("spec_gauge", nil, 7)
    oops.metrics.set("spec_gauge", nil, 5)
    assert.are.equal(5, oops.metrics.get("spec_gauge"))
    oops.metrics.observe("spec_seconds", { scan = "a" }, 0.5)
    oops.metrics.observe("spec_seconds", { scan = "a" }, 1.5)
    assert.are.equal(2, oops.metrics.get("spec_seconds", { scan = "a" }))
  end)
end)

------------------------------------------------------------------ database


-- Connect once (the one Lua state keeps the connection for every spec file).
local need_db = require("support.db").connect

-- Names unique to this run, so the specs also pass against a reused database.
local RUN = string.format("%x%x", os.time(), math.random(0, 0xffffff))

describe("oops.db (needs OOPS_TEST_DB)", function()
  before_each(need_db)

  it("migrate is idempotent", function()
    assert.are.equal(0, oops.migrate())
  end)

  it("binds parameters of each type and returns typed columns", function()
    assert(oops.db.exec("DROP TABLE IF EXISTS spec_types"))
    assert(oops.db.exec([[CREATE TABLE spec_types (id INT AUTO_INCREMENT PRIMARY KEY,
      n INT NULL, i BIGINT, f DOUBLE, s TEXT, b BOOLEAN)]]))
    local r = assert(oops.db.exec("INSERT INTO spec_types (n, i, f, s, b) VALUES (?, ?, ?, ?, ?)",
      nil, 9007199254740993, 2.5, "text", true))
    assert.are.equal(1, r.affected)
    assert.is_true(r.insert_id > 0)
    local rows = assert(oops.db.exec("SELECT * FROM spec_types WHERE id = ?", r.insert_id))
    assert.are.equal(1, #rows)
    local row = rows[1]
    assert.is_nil(row.n)
    assert.are.equal("integer", math.type(row.i))
    assert.are.equal(9007199254740993, row.i)
    assert.are.equal("float", math.type(row.f))
    assert.are.equal(2.5, row.f)
    assert.are.equal("text", row.s)
    assert.are.equal(1, row.b)
    local e = assert(oops.db.exec("SELECT ? AS e", false))[1].e
    assert.are.equal(0, e)
  end)

  it("stores an injection-looking string literally", function()
    assert(oops.db.exec("CREATE TABLE IF NOT EXISTS spec_strings (id INT AUTO_INCREMENT PRIMARY KEY, s BLOB)"))
    local nasty = "x'); DROP TABLE spec_strings; -- \" \\ \0 end"
    local r = assert(oops.db.exec("INSERT INTO spec_strings (s) VALUES (?)", nasty))
    local rows = assert(oops.db.exec("SELECT s FROM spec_strings WHERE id = ?", r.insert_id))
    assert.are.equal(nasty, rows[1].s)
    assert(oops.db.exec("SELECT COUNT(*) AS n FROM spec_strings"))
  end)

  it("returns nil, msg, name on an SQL error", function()
    local r, err, code = oops.db.exec("SELEC 1")
    assert.is_nil(r)
    assert.is_string(err)
    assert.are.equal("db", code) -- a syntax error (1064)
    local r2, err2, code2 = oops.db.exec("SELECT * FROM spec_no_such_table")
    assert.is_nil(r2)
    assert.truthy(err2:find("spec_no_such_table", 1, true), err2)
    assert.are.equal("not_found", code2) -- 1146
  end)

  it("raises on a parameter of another type", function()
    raises("parameters are nil, booleans, numbers or strings", oops.db.exec, "SELECT ?", {})
  end)

  it("begin/rollback undoes, begin/commit keeps", function()
    assert(oops.db.exec("CREATE TABLE IF NOT EXISTS spec_tx (v VARCHAR(40))"))
    assert(oops.db.begin())
    assert(oops.db.exec("INSERT INTO spec_tx VALUES (?)", "rolled back " .. RUN))
    oops.db.rollback()
    assert(oops.db.begin())
    assert(oops.db.exec("INSERT INTO spec_tx VALUES (?)", "committed " .. RUN))
    assert(oops.db.commit())
    local rows = assert(oops.db.exec("SELECT v FROM spec_tx WHERE v LIKE ?", "% " .. RUN))
    assert.are.equal(1, #rows)
    assert.are.equal("committed " .. RUN, rows[1].v)
  end)

  it("now reads the database's clock", function()
    local before = oops.time()
    local epoch, text, mid = oops.db.now()
    local after = oops.time()
    assert.are.equal("float", math.type(epoch))
    assert.truthy(math.abs(epoch - os.time()) < 3600)
    assert.truthy(text:match("^%d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d%.%d+$"), text)
    -- This host's clock in the middle of the statement's own round trip.
    assert.truthy(mid >= before - 0.001 and mid <= after + 0.001, ("%f not in [%f, %f]"):format(mid, before, after))
  end)
end)

describe("oops.store (needs OOPS_TEST_DB)", function()
  before_each(need_db)

  local function new_pipeline(app)
    return oops.store.create{ namespace = "spec", application = app .. "-" .. RUN, environment = "prod",
                              artifact = "a:1", source = '{"ref":"main"}' }
  end

  it("create returns an id; get reads the pipeline", function()
    local id = assert(new_pipeline("create"))
    assert.truthy(id:match("^[a-z0-9]+$") and #id == 12, id)
    local p = assert(oops.store.get(id))
    assert.are.equal(id, p.id)
    assert.are.equal("INITIALIZED", p.status)
    assert.are.equal("spec/create-" .. RUN, p.app)
    assert.are.equal("auto", p.deploy_mode)
    assert.is_false(p.manual)
    assert.are.equal("release", p.trigger)
    assert.are.equal("a:1", p.artifact)
    assert.is_number(p.status_age)
    assert.is_false(oops.store.get("nosuchid0000"))
  end)

  it("create refuses a second unfinished pipeline", function()
    assert(new_pipeline("twice"))
    local id, err, kind = new_pipeline("twice")
    assert.is_nil(id)
    assert.is_string(err)
    assert.are.equal("exists", kind)
  end)

  it("transition raises on an illegal transition or an unknown status", function()
    local id = assert(new_pipeline("illegal"))
    raises("illegal transition INITIALIZED -> SUCCEEDED", oops.store.transition, id, "INITIALIZED", "SUCCEEDED")
    raises('unknown status "NOPE"', oops.store.transition, id, "NOPE", "RUNNING")
    assert.are.equal("INITIALIZED", assert(oops.store.get(id)).status)
  end)

  it("transition is fenced by this server's lock session: without the pipeline's lock it changes nothing", function()
    local id = assert(new_pipeline("fence"))
    assert.is_false(oops.store.transition(id, "INITIALIZED", "RUNNING", "no lock"))
    assert.are.equal("INITIALIZED", assert(oops.store.get(id)).status)
    assert.is_true(oops.locks.acquire("oops:pipeline:" .. id))
    assert.is_true(oops.store.transition(id, "INITIALIZED", "RUNNING", "locked"))
    oops.locks.release("oops:pipeline:" .. id)
    assert.is_false(oops.store.transition(id, "RUNNING", "ERROR", "released"))
    assert.are.equal("RUNNING", assert(oops.store.get(id)).status)
  end)

  it("transition is claimed once: a lost claim returns false", function()
    local id = assert(new_pipeline("claim"))
    assert.is_true(oops.locks.acquire("oops:pipeline:" .. id))
    assert.is_true(oops.store.transition(id, "INITIALIZED", "RUNNING", "building"))
    assert.is_false(oops.store.transition(id, "INITIALIZED", "RUNNING", "again"))
    assert.is_false(oops.store.transition("nosuchid0000", "INITIALIZED", "RUNNING"))
    local p = assert(oops.store.get(id))
    assert.are.equal("RUNNING", p.status)
    assert.are.equal("building", p.message)
    assert.are.equal(oops.server_name(), p.driven_by)
  end)

  it("events and list show the trail", function()
    local id = assert(new_pipeline("trail"))
    assert.is_true(oops.locks.acquire("oops:pipeline:" .. id))
    assert.is_true(oops.store.transition(id, "INITIALIZED", "RUNNING", "go"))
    local ev = assert(oops.store.events(id))
    assert.are.equal(2, #ev)
    assert.are.equal("CREATED", ev[1].type)
    assert.are.equal("INITIALIZED", ev[1].to)
    assert.are.equal("BUILDING", ev[2].type)
    assert.are.equal("INITIALIZED", ev[2].from)
    assert.are.equal("RUNNING", ev[2].to)
    assert.are.equal("go", ev[2].message)
    assert.are.equal(oops.server_name(), ev[2].server)
    assert.are.same({}, assert(oops.store.events("nosuchid0000")))

    local function ids(list)
      local out = {}
      for _, p in ipairs(list) do out[#out + 1] = p.id end
      return out
    end
    assert.is_true(contains(ids(assert(oops.store.list{ statuses = { "RUNNING" } })), id))
    assert.is_false(contains(ids(assert(oops.store.list{ statuses = { "SUCCEEDED", "INITIALIZED" } })), id))
    assert.is_true(contains(ids(assert(oops.store.list())), id))
    raises('unknown status "NOPE"', oops.store.list, { statuses = { "NOPE" } })
  end)

  it("store.list reads a long list a page at a time (limit + after), every row once, in order", function()
    local want = {}
    for i = 1, 7 do want[#want + 1] = assert(new_pipeline("page" .. i)) end
    local all = assert(oops.store.list { statuses = { "INITIALIZED" }, lock_owner = true })
    local seen, after, pages = {}, nil, 0
    repeat
      local page = assert(oops.store.list { statuses = { "INITIALIZED" }, lock_owner = true, limit = 3, after = after })
      assert.is_true(#page <= 3)
      for _, p in ipairs(page) do seen[#seen + 1] = p.id end
      after = page[#page]
      pages = pages + 1
    until #page < 3
    assert.are.equal(#all, #seen)
    for i, p in ipairs(all) do assert.are.equal(p.id, seen[i]) end
    for _, id in ipairs(want) do assert.is_true(contains(seen, id)) end
    assert.is_true(pages >= 3)
    raises("after needs created_at and id", oops.store.list, { after = { id = "x" } })
    raises("limit must be >= 0", oops.store.list, { limit = -1 })
  end)

  it("store.list{ids} reads those pipelines only; store.free the oldest nobody holds, up to its limit", function()
    local a = assert(new_pipeline("free-a"))
    local b = assert(new_pipeline("free-b"))
    local c = assert(new_pipeline("free-c"))
    local by_id = assert(oops.store.list { ids = { c, a, "nosuchid0000" }, lock_owner = true })
    local got = {}
    for _, p in ipairs(by_id) do got[#got + 1] = p.id end
    assert.are.same({ a, c }, got) -- oldest first; an unknown id is not there
    assert.are.same({}, assert(oops.store.list { ids = { a }, statuses = { "RUNNING" } }))
    raises("ids holds 1 to 1000 ids", oops.store.list, { ids = {} })
    raises("ids[1] is not a string", oops.store.list, { ids = { 1 } })

    -- Every free INITIALIZED one, oldest first: a, b, c among them in order.
    local function free(opts)
      local ids = assert(oops.store.free(opts))
      local pos = {}
      for i, id in ipairs(ids) do pos[id] = i end
      return ids, pos
    end
    local all, pos = free { statuses = { "INITIALIZED" }, limit = 65535 }
    assert.is_true(pos[a] < pos[b] and pos[b] < pos[c])
    -- A held one is not free, and the limit is the most it answers.
    assert.is_true(oops.locks.acquire("oops:pipeline:" .. b))
    local _, pos2 = free { statuses = { "INITIALIZED" }, limit = 65535 }
    assert.is_nil(pos2[b])
    assert.is_true(pos2[a] ~= nil and pos2[c] ~= nil)
    assert.is_true(#assert(oops.store.free { statuses = { "INITIALIZED" }, limit = 1 }) == 1)
    assert.are.equal(#all - 1, #assert(oops.store.free { statuses = { "INITIALIZED" }, limit = 65535 }))
    oops.locks.release("oops:pipeline:" .. b)
    -- Several statuses: merged, oldest first; BUILD_SUCCEEDED only with a
    -- deploy request when deploy_requested says so (a manual one), or
    -- automatic (one a window, freeze or slot holds: issue 26).
    assert(oops.db.exec("UPDATE pipeline SET status = 'BUILD_SUCCEEDED', deploy_mode = 'manual' WHERE id = ?", b))
    local _, p3 = free { statuses = { "INITIALIZED", "BUILD_SUCCEEDED" }, limit = 65535 }
    assert.is_true(p3[a] < p3[b] and p3[b] < p3[c])
    local _, p4 = free { statuses = { "INITIALIZED", "BUILD_SUCCEEDED" }, limit = 65535, deploy_requested = true }
    assert.is_nil(p4[b])
    assert(oops.db.exec("UPDATE pipeline SET deploy_requested_at = NOW(6) WHERE id = ?", b))
    local _, p5 = free { statuses = { "INITIALIZED", "BUILD_SUCCEEDED" }, limit = 65535, deploy_requested = true }
    assert.is_true(p5[a] < p5[b] and p5[b] < p5[c])
    -- Each one's status beside it (share.lua tells new work from a gone driver's).
    local ids5, st5 = assert(oops.store.free { statuses = { "INITIALIZED", "BUILD_SUCCEEDED" }, limit = 65535,
                                               deploy_requested = true })
    assert.are.equal(#ids5, #st5)
    assert.are.equal("BUILD_SUCCEEDED", st5[p5[b]])
    assert.are.equal("INITIALIZED", st5[p5[a]])
    assert(oops.db.exec("UPDATE pipeline SET deploy_requested_at = NULL, deploy_mode = 'auto' WHERE id = ?", b))
    local _, p6 = free { statuses = { "INITIALIZED", "BUILD_SUCCEEDED" }, limit = 65535, deploy_requested = true }
    assert.is_true(p6[a] < p6[b] and p6[b] < p6[c])
    raises("limit must be 1 to 65535", oops.store.free, { statuses = { "INITIALIZED" }, limit = 0 })
    raises("statuses is empty", oops.store.free, { statuses = {}, limit = 1 })
    raises('unknown status "NOPE"', oops.store.free, { statuses = { "NOPE" }, limit = 1 })
  end)
end)

describe("oops.locks (needs OOPS_TEST_DB)", function()
  before_each(need_db)

  it("acquire, holds, held, release", function()
    local name = "spec:lock:" .. RUN
    assert.is_true(oops.locks.is_up())
    assert.is_true(oops.locks.connection_id() > 0)
    assert.is_false(oops.locks.holds(name))
    assert.is_true(oops.locks.acquire(name))
    assert.is_true(oops.locks.acquire(name)) -- already held: still true
    assert.is_true(oops.locks.holds(name))
    assert.is_true(contains(oops.locks.held(), name))
    assert.is_true(oops.locks.release(name))
    assert.is_false(oops.locks.release(name))
    assert.is_false(oops.locks.holds(name))
    assert.is_false(contains(oops.locks.held(), name))
  end)

  it("release_many lets go of the names held here, in one statement", function()
    local names = {}
    for i = 1, 5 do
      names[i] = "spec:many:" .. RUN .. ":" .. i
      assert.is_true(oops.locks.acquire(names[i]))
    end
    local before = oops.locks.statements()
    -- Twice one name, and one never held: skipped.
    assert.are.equal(4, oops.locks.release_many({ names[1], names[2], names[2], names[3], names[4],
                                                   "spec:many:never" }))
    assert.are.equal(1, oops.locks.statements() - before)
    for i = 1, 4 do assert.is_false(oops.locks.holds(names[i])) end
    assert.is_true(oops.locks.holds(names[5]))
    -- Another session may take them now.
    local free = assert(oops.db.exec("SELECT IS_FREE_LOCK(?) AS f", names[1]))
    assert.are.equal(1, free[1].f)
    assert.are.equal(0, oops.locks.release_many({}))
    assert.are.equal(1, oops.locks.release_many({ names[5] }))
    raises("names[1] is a number", oops.locks.release_many, { 7 })
  end)

  it("acquire returns false for a lock held by another session", function()
    local name = "spec:other:" .. RUN
    -- the work connection is another session than the lock session
    assert.are.equal(1, assert(oops.db.exec("SELECT GET_LOCK(?, 0) AS g", name))[1].g)
    assert.is_false(oops.locks.acquire(name))
    assert.is_false(oops.locks.holds(name))
    assert(oops.db.exec("SELECT RELEASE_LOCK(?) AS r", name))
  end)

  it("acquire_many answers for every name; release_all drops them", function()
    local a, b, other = "spec:a:" .. RUN, "spec:b:" .. RUN, "spec:taken:" .. RUN
    assert.are.equal(1, assert(oops.db.exec("SELECT GET_LOCK(?, 0) AS g", other))[1].g)
    local got = assert(oops.locks.acquire_many{ a, b, other })
    assert.are.same({ [a] = true, [b] = true, [other] = false }, got)
    assert.is_true(oops.locks.holds(a) and oops.locks.holds(b))
    oops.locks.release_all()
    assert.is_false(oops.locks.holds(a))
    -- all but the name lock of this connection ("spec"): it says who fences
    -- this session's transitions (pipeline_store.c), and stays
    assert.are.same({ oops.locks.names.server_prefix .. "spec" }, oops.locks.held())
    assert(oops.db.exec("SELECT RELEASE_LOCK(?) AS r", other))
  end)
end)

------------------------------------------------------------- error names

-- A script run by a child oopsd (its own sessions), connected to the spec's
-- database (with a lock session when locks); its stdout and stderr.
local function db_script(body, locks)
  local r = run_script(([[
    local oops = require("oops")
    assert(oops.connect{ db = os.getenv("OOPS_TEST_DB"), name = "spec-child", locks = %s })
  ]]):format(tostring(locks == true)) .. body)
  return r.stdout, r.stderr
end

-- Every name of oops.ErrorName, provoked for real (the database, processes,
-- sockets): a runtime failure returns nil, msg, name.
describe("error names (needs OOPS_TEST_DB)", function()
  before_each(need_db)

  local function fails(name, r, err, got)
    assert.is_nil(r)
    assert.is_string(err)
    assert.are.equal(name, got, err)
    assert.is_true(contains(oops.error_names, got), got)
  end

  setup(function()
    need_db()
    assert(oops.db.exec("CREATE TABLE IF NOT EXISTS spec_names (id INT PRIMARY KEY, v INT) ENGINE=InnoDB"))
    assert(oops.db.exec("INSERT IGNORE INTO spec_names VALUES (1, 0), (2, 0)"))
  end)

  it('"exists": a duplicate key, a second unfinished pipeline', function()
    fails("exists", oops.db.exec("INSERT INTO spec_names VALUES (1, 0)"))
    local app = { namespace = "spec", application = "names-" .. RUN, environment = "prod" }
    assert(oops.store.create(app))
    fails("exists", oops.store.create(app))
  end)

  it('"not_found": an unknown table, KILL of a session that does not exist', function()
    fails("not_found", oops.db.exec("SELECT * FROM spec_no_such_table"))
    local id = assert(oops.db.exec("SELECT MAX(ID) + 1000000 AS id FROM information_schema.PROCESSLIST"))[1].id
    fails("not_found", oops.db.exec("KILL CONNECTION ?", id))
  end)

  it('"db": any other error the database reports (a syntax error)', function()
    fails("db", oops.db.exec("SELEC 1"))
  end)

  it('"lock_wait": a row lock held by another session past innodb_lock_wait_timeout', function()
    assert(oops.db.begin())
    assert(oops.db.exec("UPDATE spec_names SET v = v + 1 WHERE id = 1"))
    local out, log = db_script([[
      assert(oops.db.exec("SET SESSION innodb_lock_wait_timeout = 1"))
      local r, err, name = oops.db.exec("UPDATE spec_names SET v = v + 1 WHERE id = 1")
      io.write(tostring(name))
    ]])
    oops.db.rollback()
    assert.are.equal("lock_wait", out, log)
  end)

  it('"deadlock": two transactions waiting for each other, one is the victim', function()
    -- We hold row 1; the child takes row 2, then waits for row 1; we ask for
    -- row 2. InnoDB rolls one of us back at once: we get "deadlock", or the
    -- child does (and our update then goes through).
    local path = write_temp([[
      local oops = require("oops")
      assert(oops.connect{ db = os.getenv("OOPS_TEST_DB"), name = "spec-child", locks = false })
      assert(oops.db.begin())
      assert(oops.db.exec("UPDATE spec_names SET v = v + 1 WHERE id = 2"))
      io.write("locked\n")
      io.flush()
      local r, err, name = oops.db.exec("UPDATE spec_names SET v = v + 1 WHERE id = 1")
      io.write(tostring(name), "\n")
      oops.db.rollback()
    ]])
    assert(oops.db.begin())
    assert(oops.db.exec("UPDATE spec_names SET v = v + 1 WHERE id = 1"))
    local box = { out = "" }
    assert(oops.proc.start{
      argv = { OOPSD, "lua", path }, inherit_env = true, timeout_ms = 60000, env = require("support.db").child_env(),
      on_output = function(stream, data) if stream == 1 then box.out = box.out .. data end end,
      on_exit = function(r) box.result = r end,
    })
    oops.wait(function() -- the child holds row 2 and waits for row 1
      local deadline = oops.now_ms() + 30000
      while oops.now_ms() < deadline do
        local w = oops.db.exec("SELECT COUNT(*) AS n FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'")
        if box.out:find("locked", 1, true) and w and w[1].n > 0 then return end
        if box.result then break end
        oops.sleep(20)
      end
    end)
    local r, err, name = oops.db.exec("UPDATE spec_names SET v = v + 1 WHERE id = 2")
    oops.db.rollback()
    oops.wait(function()
      local deadline = oops.now_ms() + 30000
      while not box.result and oops.now_ms() < deadline do oops.sleep(20) end
    end)
    os.remove(path)
    assert(box.result, "the child did not end")
    local child = box.out:match("locked\n(.-)\n")
    if r then
      assert.are.equal("deadlock", child, box.result.stderr)
    else
      fails("deadlock", r, err, name)
    end
  end)

  it('"gone": the work connection killed; the next call reopens it', function()
    local id = assert(oops.db.exec("SELECT CONNECTION_ID() AS id"))[1].id
    local r, err, name = oops.db.exec("KILL CONNECTION ?", id)
    if r then r, err, name = oops.db.exec("SELECT 1 AS one") end -- the kill itself may answer OK
    fails("gone", r, err, name)
    assert.are.equal(1, assert(oops.db.exec("SELECT 1 AS one"))[1].one)
    assert.are_not.equal(id, assert(oops.db.exec("SELECT CONNECTION_ID() AS id"))[1].id)
  end)

  it('"gone": the lock session killed (every lock is gone)', function()
    local out, log = db_script([[
      assert(oops.locks.acquire("spec:gone"))
      assert(oops.db.exec("KILL CONNECTION ?", oops.locks.connection_id()))
      local got, err, name = oops.locks.acquire("spec:gone:2")
      io.write(tostring(got), " ", tostring(name), " ", tostring(oops.locks.holds("spec:gone")))
    ]], true)
    assert.are.equal("nil gone false", out, log)
  end)

  it('"unreachable": oops.connect to a port nothing listens on; no connection at all', function()
    local r = run_script([[
      local oops = require("oops")
      local ok, err, name = oops.connect{ db = "mysql://oops:x@127.0.0.1:1/oops", locks = false }
      io.write(tostring(ok), " ", tostring(name), "\n")
      local r2, err2, name2 = oops.db.exec("SELECT 1")
      io.write(tostring(r2), " ", tostring(name2), "\n")
    ]])
    assert.are.equal("nil unreachable\nnil unreachable\n", r.stdout, r.stderr)
  end)

  it('"io": a missing binary, an HTTP port nothing listens on, an address in use, an unreadable file', function()
    fails("io", oops.proc.start{ argv = { "oops-no-such-binary" } })
    fails("io", oops.wait(function()
      return oops.http.request{ url = "http://127.0.0.1:9/", timeout_ms = 5000 }
    end))
    local srv = assert(oops.http.serve { handler = function() return 200 end })
    fails("io", oops.http.serve { listen = "127.0.0.1:" .. srv:port(), handler = function() return 200 end })
    srv:close()
    fails("io", oops.sandbox.read("/nonexistent/oops-spec", 100))
  end)

  it('"invalid": a pipeline field, a cron expression, a request refused before sending', function()
    fails("invalid", oops.store.create{ namespace = "Not A Label", application = "x", environment = "prod" })
    fails("invalid", oops.cron.parse("61 * * * *"))
    fails("invalid", oops.wait(function() return oops.http.request{ url = "ftp://127.0.0.1/" } end))
  end)
end)

------------------------------------------------------------- lock names

describe("lock names (src/lock_names.h through oops.locks.names)", function()
  local names = oops.locks.names

  it("the leader scans take the leader locks the binding names", function()
    local scans = {}
    for scan, lock in pairs(names.leaders) do
      scans[#scans + 1] = scan
      assert.are.equal(names.leader_prefix .. scan, lock)
      assert.are.equal(lock, require("oops.scans." .. scan).LOCK)
      assert.are.equal(lock, require("oops.leader").lock(scan))
    end
    table.sort(scans)
    assert.are.same({ "alert", "notify", "promote", "restart", "retention" }, scans)
    raises("no leader lock for scan \"build\"", require("oops.leader").lock, "build")
  end)

  it("pipelines take oops:pipeline:ID and read it back", function()
    local P = require("oops.pipelines")
    assert.are.equal("oops:pipeline:", names.pipeline_prefix)
    assert.are.equal(names.pipeline_prefix .. "abc123", P.lock_name("abc123"))
    assert.are.equal("abc123", P.lock_id(P.lock_name("abc123")))
    assert.is_nil(P.lock_id(names.leaders.restart))
    assert.is_nil(P.lock_id(names.pipeline_prefix))
    assert.are.equal("oops:server:", names.server_prefix)
  end)

  it("`oopsctl locks` shows every leader lock, and who holds one (needs OOPS_TEST_DB)", function()
    need_db()
    local build = os.getenv("OOPS_BUILD")
    assert(build and build ~= "", "OOPS_BUILD is not set: run the specs through tests/run.sh")
    local lock = names.leaders.alert
    local held_before = oops.locks.holds(lock)
    assert.is_true(oops.locks.acquire(lock))
    local r = oops.wait(function()
      return oops.proc.run{ argv = { build .. "/oopsctl", "--db", os.getenv("OOPS_TEST_DB"), "--json", "locks" },
                            inherit_env = true, timeout_ms = 60000, env = require("support.db").child_env() }
    end)
    if not held_before then oops.locks.release(lock) end
    assert(r and r.ok, r and r.stderr)
    local rows = require("cjson").decode(r.stdout)
    local by = {}
    for _, row in ipairs(rows) do by[row.lock] = row end
    for _, l in pairs(names.leaders) do assert.is_table(by[l], l .. " is not listed: " .. r.stdout) end
    assert.are.equal(oops.locks.connection_id(), by[lock].session)
  end)
end)

describe("oopsctl on a database not migrated yet (needs OOPS_TEST_DB)", function()
  it("says to run `oopsctl migrate` first: a missing table, told by its error number", function()
    need_db()
    local build = os.getenv("OOPS_BUILD")
    assert(build and build ~= "", "OOPS_BUILD is not set: run the specs through tests/run.sh")
    local db = "spec_empty_" .. RUN
    assert(oops.db.exec("CREATE DATABASE " .. db)) -- a name of our own making, not a value
    local url = os.getenv("OOPS_TEST_DB"):gsub("^(mysql://[^/]*@[^/]*)/[^?]*", "%1/" .. db)
    local r = oops.wait(function()
      return oops.proc.run{ argv = { build .. "/oopsctl", "--db", url, "list" }, inherit_env = true,
                            timeout_ms = 60000, env = require("support.db").child_env() }
    end)
    assert(oops.db.exec("DROP DATABASE " .. db))
    assert.are.equal(1, r.status, r.stderr)
    assert.truthy(r.stderr:find("(run `oopsctl migrate` first)", 1, true), r.stderr)
  end)
end)

describe("oops.fs (issue 34: the tools' files are the user's alone)", function()
  local lfs = require("lfs")
  it("mkdir_private makes a 0700 directory whatever the umask, and says why it cannot", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert.is_true(oops.fs.mkdir_private(dir))
    assert.are.equal("rwx------", lfs.attributes(dir, "permissions"))
    local ok, err = oops.fs.mkdir_private(dir)
    assert.is_nil(ok)
    assert.are.equal(dir .. ": File exists", err)
    assert(lfs.rmdir(dir))
  end)
  it("the scenario runner's and campaigns' work directories are private", function()
    local dir = assert(require("oops.scenario.files").workdir("oops-spec"))
    assert.are.equal("rwx------", lfs.attributes(dir, "permissions"))
    assert(lfs.rmdir(dir))
  end)
end)
