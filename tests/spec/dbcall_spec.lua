-- Database calls from tasks with a pool of work connections (issue 15): what
-- the daemon does (--db-connections), here through oops.db.pool(n). A call
-- yields its task while the statement is out, so other tasks, timers and the
-- loop go on; a transaction keeps its connection until COMMIT/ROLLBACK.
local oops = require("oops")
local tasks = require("oops.tasks")

local RUN = tostring(os.time()) .. tostring(math.random(1e6))

-- Run fns side by side in tasks and wait for all of them (from the spec's main
-- state); a task's error fails the spec with its message.
local function side_by_side(fns)
  local first
  local wrapped = {}
  for i, fn in ipairs(fns) do
    wrapped[i] = function()
      local ok, err = pcall(fn)
      if not ok then first = first or tostring(err) error(err, 0) end
    end
  end
  oops.wait(function() assert(tasks.all(wrapped, "spec") == 0, "a task failed: " .. tostring(first)) end)
end

local function rows(sql, ...)
  return assert(oops.db.exec(sql, ...))
end

describe("database calls from tasks with a pool (needs OOPS_TEST_DB)", function()
  setup(function()
    require("support.db").connect()
    assert(oops.db.exec("CREATE TABLE IF NOT EXISTS spec_dbcall (k VARCHAR(64) NOT NULL PRIMARY KEY)"))
    assert(oops.db.pool(2))
  end)
  teardown(function()
    oops.wait(function() oops.sleep(100) end) -- let a rollback of an orphaned transaction finish
    assert(oops.db.pool(0))
  end)

  it("a slow statement of one task holds no other task", function()
    -- The pool's connections open first. While none is open, up to 8 calls
    -- wait behind a short one on the server's own connection (issue 24: an
    -- idle tick opens no pool connection), and a 3 s statement is not
    -- short: this promise holds once the pool is warm (12 calls at once open
    -- both). Before, it passed or failed by who came first in a cold pool.
    local warm = {}
    for i = 1, 12 do warm[i] = function() rows("SELECT SLEEP(0.05) AS s") end end
    -- Then both pool connections are open: two transactions at once hold one
    -- each. Opening is not what this promise is about, and a loaded CI
    -- machine has failed an open ("cannot connect ... (2)", 2026-12-05,
    -- once in the transactions, once in the warm-up): a failed try is tried
    -- again, up to five times.
    for try = 1, 5 do
      local warmed = pcall(side_by_side, warm)
      local opened = 0
      local function hold()
        local ok = oops.db.begin()
        if ok then
          rows("SELECT SLEEP(0.2) AS s")
          assert(oops.db.commit())
          opened = opened + 1
        end
      end
      pcall(side_by_side, { hold, hold })
      if warmed and opened == 2 then break end
      assert(try < 5, "the pool's two connections could not be opened")
      oops.wait(function() oops.sleep(500) end)
    end
    local order = {}
    side_by_side {
      function()
        rows("SELECT SLEEP(3) AS s")
        order[#order + 1] = "slow"
      end,
      function()
        oops.sleep(300) -- the slow one is out on its connection by now
        local r = rows("SELECT 41 + 1 AS n")
        assert.are.equal(42, r[1].n)
        order[#order + 1] = "quick"
      end,
    }
    assert.are.same({ "quick", "slow" }, order)
  end)

  it("more tasks than connections: each waits for a free one, every call is answered", function()
    local got = {}
    local fns = {}
    for i = 1, 7 do
      fns[i] = function() got[i] = rows("SELECT SLEEP(0.05) AS s, ? AS i", i)[1].i end
    end
    side_by_side(fns)
    for i = 1, 7 do assert.are.equal(i, got[i]) end
  end)

  it("rows that tasks insert meanwhile go in one statement; each row is answered on its own", function()
    local function insert_stmts()
      return oops.metrics.get("oops_db_insert_statements_total", { table = "spec_dbcall" }) or 0
    end
    local before = insert_stmts()
    local answers, fns = {}, {}
    -- Both connections busy first: the rows queue up behind them. The
    -- connections stay busy 20 times as long as the rows take to arrive, so
    -- a loaded machine still queues them all (0.2 s once let 5 through).
    for i = 1, 2 do fns[i] = function() rows("SELECT SLEEP(1) AS s") end end
    for i = 1, 10 do
      fns[#fns + 1] = function()
        oops.sleep(50)
        answers[i] = { oops.db.insert("INSERT INTO spec_dbcall (k)", "(?)", "", "ins-" .. RUN .. "-" .. i) }
      end
    end
    side_by_side(fns)
    for i = 1, 10 do assert.are.same({ true }, answers[i]) end
    assert.are.equal(10, rows("SELECT COUNT(*) AS n FROM spec_dbcall WHERE k LIKE ?", "ins-" .. RUN .. "-%")[1].n)
    local sent = insert_stmts() - before
    assert.is_true(sent >= 1 and sent <= 3, "10 rows in " .. sent .. " statements")
    -- One row of a batch fails (its key exists): the others are written,
    -- and only that one gets the error, with its name.
    answers, fns = {}, {}
    for i = 1, 2 do fns[i] = function() rows("SELECT SLEEP(1) AS s") end end
    for i = 1, 4 do
      fns[#fns + 1] = function()
        oops.sleep(50)
        local k = i == 2 and ("ins-" .. RUN .. "-1") or ("dup-" .. RUN .. "-" .. i)
        answers[i] = { oops.db.insert("INSERT INTO spec_dbcall (k)", "(?)", "", k) }
      end
    end
    side_by_side(fns)
    for i = 1, 4 do
      if i == 2 then
        assert.is_nil(answers[i][1])
        assert.are.equal("exists", answers[i][3])
      else
        assert.are.same({ true }, answers[i])
      end
    end
    assert.are.equal(3, rows("SELECT COUNT(*) AS n FROM spec_dbcall WHERE k LIKE ?", "dup-" .. RUN .. "-%")[1].n)
    assert.has_error(function() oops.db.insert("INSERT INTO spec_dbcall (k)", "(?)", "", 1, 2) end,
      "oops.db.insert: the row has 1 placeholders for 2 values")
    assert.has_error(function() oops.db.insert("INSERT INTO spec_dbcall (k)", "(?)", "WHERE ?", 1) end,
      "oops.db.insert: only the row may hold placeholders")
  end)

  it("a transaction keeps its connection: another task does not see it until COMMIT", function()
    local key = "tx-" .. RUN
    local seen = {}
    local began, committed = false, false
    side_by_side {
      function()
        assert(oops.db.begin())
        rows("INSERT INTO spec_dbcall (k) VALUES (?)", key)
        began = true
        oops.sleep(200)
        rows("SELECT COUNT(*) AS n FROM spec_dbcall") -- still on the same connection
        assert(oops.db.commit())
        committed = true
      end,
      function()
        while not began do oops.sleep(10) end
        seen.before = rows("SELECT COUNT(*) AS n FROM spec_dbcall WHERE k = ?", key)[1].n
        while not committed do oops.sleep(10) end
        seen.after = rows("SELECT COUNT(*) AS n FROM spec_dbcall WHERE k = ?", key)[1].n
      end,
    }
    assert.are.same({ before = 0, after = 1 }, seen)
  end)

  it("a task that ends inside its transaction is rolled back, and its connection comes back", function()
    local key = "orphan-" .. RUN
    local failed = oops.wait(function()
      return tasks.all({
        function()
          assert(oops.db.begin())
          rows("INSERT INTO spec_dbcall (k) VALUES (?)", key)
          error("a step that fails mid-transaction (expected by the spec)", 0)
        end,
      }, "spec")
    end)
    assert.are.equal(1, failed)
    oops.wait(function() oops.sleep(100) end)
    assert.are.equal(0, rows("SELECT COUNT(*) AS n FROM spec_dbcall WHERE k = ?", key)[1].n)
    -- Every connection is back (making the pool anew raises while one is lent).
    assert.is_true(oops.db.pool(2))
  end)

  it("a second begin in one task raises; rollback ends the first", function()
    local err
    side_by_side {
      function()
        assert(oops.db.begin())
        local ok, e = pcall(oops.db.begin)
        err = not ok and tostring(e)
        oops.db.rollback()
      end,
    }
    assert.truthy(err and err:find("has a transaction open already", 1, true), err)
  end)

  it("failures come back as nil, msg, name, the task going on", function()
    local r = {}
    side_by_side {
      function()
        r.syntax = { oops.db.exec("SELEC nothing") }
        local key = "dup-" .. RUN
        rows("INSERT INTO spec_dbcall (k) VALUES (?)", key)
        r.dup = { oops.db.exec("INSERT INTO spec_dbcall (k) VALUES (?)", key) }
        r.after = rows("SELECT 7 AS n")[1].n
      end,
    }
    assert.is_nil(r.syntax[1])
    assert.are.equal("db", r.syntax[3])
    assert.is_nil(r.dup[1])
    assert.are.equal("exists", r.dup[3])
    assert.are.equal(7, r.after)
  end)

  it("lock calls from several tasks take the lock session one at a time, each answered", function()
    local names, got = {}, {}
    local fns = {}
    for i = 1, 5 do
      names[i] = "spec:dbcall:" .. RUN .. ":" .. i
      fns[i] = function() got[i] = oops.locks.acquire(names[i]) end
    end
    side_by_side(fns)
    for i = 1, 5 do
      assert.is_true(got[i])
      assert.is_true(oops.locks.holds(names[i]))
    end
    side_by_side {
      function()
        local many = assert(oops.locks.acquire_many { names[1], names[2] })
        assert.is_true(many[names[1]] and many[names[2]])
        for i = 1, 5 do assert.is_true(oops.locks.release(names[i])) end
      end,
    }
    for i = 1, 5 do assert.is_false(oops.locks.holds(names[i])) end
  end)

  it("10,000 names in one GET_LOCK from a task: one statement, its parameters off the fiber's stack", function()
    local many, got, sent = {}, nil, nil
    for i = 1, 10000 do many[i] = "spec:many:" .. RUN .. ":" .. i end
    side_by_side { function() got, sent = oops.locks.acquire_many(many) end }
    assert.are.equal(1, sent)
    for i = 1, 10000, 997 do assert.is_true(got[many[i]]) end
    side_by_side { function() oops.locks.release_all() end }
    assert.is_false(oops.locks.holds(many[1]))
  end)

  it("store calls work from tasks: create, a fenced transition (one CALL), get, list, events", function()
    local id, won, p, ev, listed
    side_by_side {
      function()
        id = assert(oops.store.create { namespace = "spec", application = "dbcall-" .. RUN,
          environment = "prod", artifact = "a:1" })
        assert(oops.locks.acquire("oops:pipeline:" .. id))
        won = oops.store.transition(id, "INITIALIZED", "RUNNING", "via a task")
        p = assert(oops.store.get(id))
        ev = assert(oops.store.events(id))
        listed = assert(oops.store.list { statuses = { "RUNNING" }, lock_owner = true })
        assert(oops.locks.release("oops:pipeline:" .. id))
      end,
    }
    assert.is_true(won)
    assert.are.equal("RUNNING", p.status)
    assert.are.equal("via a task", ev[#ev].message)
    local mine
    for _, q in ipairs(listed) do if q.id == id then mine = q end end
    assert.are.equal(oops.locks.connection_id(), mine and mine.lock_owner)
    assert.are.equal(1, rows("SELECT COUNT(*) AS n FROM outbox o JOIN pipeline_event e ON e.id = o.ref_id "
      .. "WHERE e.pipeline_id = ? AND e.to_status = 'RUNNING'", id)[1].n)
  end)
end)

-- oops.db.lookup batches point reads of many tasks into one IN (...)
-- statement and hands each caller the rows of its own key. The database
-- compares by the column's collation (case-insensitive, PAD SPACE for
-- utf8mb4_general_ci; PAD SPACE for utf8mb4_bin) but the caller's key by
-- bytes: a batched lookup must answer every caller exactly as the same
-- lookup made alone does, whatever the column's collation.
describe("oops.db.lookup batched or alone (needs OOPS_TEST_DB)", function()
  local KEYS = { "abc", "ABC", "Abc", "abc ", "abc  ", " abc", "aBC ", "zzz", "ABC\t" }
  local TABLES = {
    spec_lookup_ci = "utf8mb4_general_ci", spec_lookup_bin = "utf8mb4_bin",
    spec_lookup_nopad = "utf8mb4_nopad_bin",
  }

  setup(function()
    require("support.db").connect()
    for t, coll in pairs(TABLES) do
      assert(oops.db.exec("DROP TABLE IF EXISTS " .. t))
      assert(oops.db.exec("CREATE TABLE " .. t .. " (id INT AUTO_INCREMENT PRIMARY KEY, " ..
        "k VARCHAR(16) CHARACTER SET utf8mb4 COLLATE " .. coll .. " NOT NULL, v INT NOT NULL, KEY (k))"))
      for i, k in ipairs({ "abc", "ABC", "abc ", "Abc  ", "zzz", "other" }) do
        assert(oops.db.exec("INSERT INTO " .. t .. " (k, v) VALUES (?, ?)", k, i))
      end
    end
    assert(oops.db.pool(2))
  end)
  teardown(function() assert(oops.db.pool(0)) end)

  -- The v of each row, sorted: what a caller got.
  local function vs(got)
    local out = {}
    for i, r in ipairs(got) do out[i] = r.v end
    table.sort(out)
    return out
  end

  local function batches() return oops.metrics.get("oops_db_lookup_batches_total") or 0 end

  for t in pairs(TABLES) do
    it("on a " .. TABLES[t] .. " column: each caller of a batch gets what its lookup alone gets", function()
      local sql = "SELECT k, v FROM " .. t .. " WHERE k IN (?)"
      local alone, batched = {}, {}
      -- Alone: one task at a time, so nothing shares its statement.
      for i, k in ipairs(KEYS) do
        side_by_side { function() alone[i] = vs(assert(oops.db.lookup(sql, k))) end }
      end
      -- Batched: every connection busy first (the task's own and the pool's
      -- two, one more waiting), so every lookup queues up behind them. With
      -- only two busy, the third connection, when a former test left it open,
      -- took each lookup alone as its timer fired (a CI run under ASan).
      local before = batches()
      local fns = {}
      for i = 1, 4 do fns[i] = function() rows("SELECT SLEEP(0.3) AS s") end end
      for i, k in ipairs(KEYS) do
        fns[#fns + 1] = function()
          oops.sleep(50)
          batched[i] = vs(assert(oops.db.lookup(sql, k)))
        end
      end
      side_by_side(fns)
      assert.is_true(batches() > before, "the lookups went in a batch")
      for i, k in ipairs(KEYS) do
        assert.are.same(alone[i], batched[i], ("key %q: alone %s, batched %s"):format(k,
          table.concat(alone[i], ","), table.concat(batched[i], ",")))
      end
      -- And alone is the rows whose key is the caller's byte for byte.
      assert.are.same({ 1 }, alone[1])
      assert.are.same({ 2 }, alone[2])
      assert.are.same({ 3 }, alone[4])
      assert.are.same({}, alone[3])
    end)
  end

  it("refuses a key holding a NUL byte (it would compare as its prefix)", function()
    assert.has_error(function() oops.db.lookup("SELECT k, v FROM spec_lookup_ci WHERE k IN (?)", "abc\0x") end,
      "oops.db.lookup: the key holds a NUL byte")
  end)
end)
