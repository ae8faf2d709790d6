-- The exec gateway's per-pipeline memory stays bounded (issue 22): with the
-- real build and rollout scans, real named locks, the real test database
-- and real commands (tests/exec/ci.sh as the external build system), many
-- builds end through every path that is not a verdict — stopped, timed
-- out, taken over by another server (their lock lost), and rollouts whose
-- lock is lost — and the gateway forgets each of them (gw.memory() counts
-- the entries of builds, procs, submitting, health and status_seen). Past
-- exec.MEMO_CAP a memo drops what it can, so even held pipelines cannot
-- grow it without bound.
local oops = require("oops")
local P = require("oops.pipelines")
local exec = require("oops.gateways.exec")
local build_scan = require("oops.scans.build")
local rollout_scan = require("oops.scans.rollout")

local ROOT = assert(os.getenv("OOPS_ROOT"), "OOPS_ROOT is not set: run the specs through tests/run.sh")
local CI = ROOT .. "/tests/exec/ci.sh"
local N = 12 -- pipelines per path
local TAG = ("st%d"):format(os.time() % 100000)

local ci_dir = os.tmpname() .. ".ci" -- ci.sh makes it
local policy = {
  scan = { interval_ms = 1000, max_new = 500, parallel = 16 },
  build = { timeout_ms = 3600000 }, deploy = { timeout_ms = 600000 }, rollout = { timeout_ms = 3600000 },
  gateway = { kind = "exec" },
  applications = {
    [TAG .. "/ext"] = {
      namespace = TAG, application = "ext", environments = { "prod", "staging", "qa" },
      build = { external = true, submit = { CI, "submit", "{id}", "v1" }, status = { CI, "status", "{job}" },
        cancel = { CI, "cancel", "{job}" } },
      deploy = { "true" }, health = { "true" },
      env = { CI_DIR = ci_dir, CI_BUILD_SECONDS = "3600" },
    },
    [TAG .. "/roll"] = {
      namespace = TAG, application = "roll", environments = { "prod" },
      build = { "true" }, deploy = { "true" }, health = { "false" }, -- exit 1: never ready
    },
  },
}

local function run(scan) oops.wait(function() scan.run(policy, policy._gw) end) end

local n = 0
local function create(app, env)
  n = n + 1
  -- One unfinished pipeline per target: each gets an application of its own.
  return assert(oops.store.create { namespace = TAG, application = app, environment = env,
    artifact = "v" .. n })
end

local function statuses(ids)
  local out = {}
  for _, id in ipairs(ids) do
    local s = assert(oops.store.get(id)).status
    out[s] = (out[s] or 0) + 1
  end
  return out
end

-- Run `scan` until every one of ids is in `status` (bounded: a hung test stops).
local function until_all(scan, ids, status)
  for _ = 1, 100 do
    run(scan)
    if statuses(ids)[status] == #ids then return end
    oops.wait(function() oops.sleep(100) end)
  end
  error("not all " .. status .. ": " .. require("oops.json").encode(statuses(ids)))
end

-- Another server takes the lock: our session lets it go, the work
-- connection (another session) takes it.
local function taken_over(ids)
  for _, id in ipairs(ids) do
    assert.is_true(oops.locks.release(P.lock_name(id)))
    assert.are.equal(1, assert(oops.db.exec("SELECT GET_LOCK(?, 0) AS g", P.lock_name(id)))[1].g)
  end
end

-- Nothing unfinished (another spec's pipelines would be driven), no lock held.
local function clean()
  assert(oops.db.exec("UPDATE pipeline SET status = 'STOPPED' " ..
    "WHERE status IN ('INITIALIZED','RUNNING','BUILD_SUCCEEDED','DEPLOYING','ROLLING_OUT')"))
  assert(oops.db.exec("SELECT RELEASE_ALL_LOCKS()"))
  oops.locks.release_all()
end

describe("the exec gateway's per-pipeline memory (needs OOPS_TEST_DB)", function()
  setup(function()
    require("support.db").connect()
    clean()
    policy._gw = exec.new(policy.gateway, policy)
  end)
  teardown(function()
    assert(oops.db.exec("SELECT RELEASE_ALL_LOCKS()"))
    oops.locks.release_all()
    oops.wait(function() oops.proc.run { argv = { "rm", "-rf", ci_dir } } end)
  end)

  it("forgets builds stopped, timed out or taken over, and rollouts taken over", function()
    local gw = policy._gw
    -- Each build on an application of its own (one unfinished pipeline per
    -- target), all sharing one declaration.
    local apps = policy.applications
    local groups = { stop = {}, takeover = {}, timeout = {} }
    local all = {}
    for name, list in pairs(groups) do
      for i = 1, N do
        local app = ("ext-%s-%d"):format(name, i)
        apps[TAG .. "/" .. app] = apps[TAG .. "/ext"]
        list[i] = create(app, "prod")
        all[#all + 1] = list[i]
      end
    end
    -- Claimed and submitted, then polled: every one is remembered.
    until_all(build_scan, all, "RUNNING")
    run(build_scan)
    assert.are.equal(3 * N, gw.memory().status_seen, "one status verdict per build polled")

    -- 1. Stopped (oopsctl stop): the sweep stops the build and lets the lock go.
    for _, id in ipairs(groups.stop) do assert(oops.store.transition(id, "RUNNING", "STOPPED", "spec")) end
    -- 2. Taken over: another session holds their locks now.
    taken_over(groups.takeover)
    run(rollout_scan)
    assert.are.equal(N, gw.memory().status_seen, "only the builds still held are remembered")

    -- 3. Timed out: the build scan fails them and stops their builds.
    policy.build.timeout_ms = 1
    run(build_scan)
    policy.build.timeout_ms = 3600000
    assert.are.same({ ERROR = N }, statuses(groups.timeout))
    assert.are.equal(0, gw.memory().status_seen, "the timed-out builds are forgotten")

    -- Rollouts not ready, then taken over.
    local rolls = {}
    for i = 1, N do
      apps[TAG .. "/roll-" .. i] = apps[TAG .. "/roll"]
      rolls[i] = create("roll-" .. i, "prod")
    end
    until_all(build_scan, rolls, "ROLLING_OUT")
    run(rollout_scan)
    assert.are.equal(N, gw.memory().health, "one health verdict per rollout")
    taken_over(rolls)
    run(rollout_scan)
    run(rollout_scan) -- the sweep let the stopped and failed ones go: pruned now

    assert.are.same({ builds = 0, procs = 0, submitting = 0, health = 0, status_seen = 0 }, gw.memory())
  end)

  it("past MEMO_CAP, a memo keeps at most the cap even for pipelines still held", function()
    clean()
    local gw = exec.new(policy.gateway, policy)
    policy._gw = gw
    local cap = exec.MEMO_CAP
    exec.MEMO_CAP = 5
    local ids = {}
    for i = 1, 12 do
      local app = "cap-" .. i
      policy.applications[TAG .. "/" .. app] = policy.applications[TAG .. "/ext"]
      ids[i] = create(app, "prod")
    end
    local ok, err = pcall(function()
      until_all(build_scan, ids, "RUNNING")
      run(build_scan)
    end)
    exec.MEMO_CAP = cap
    assert(ok, err)
    local m = gw.memory().status_seen
    assert.is_true(m >= 1 and m <= 5, m .. " entries")
    for _, id in ipairs(ids) do assert(oops.store.transition(id, "RUNNING", "STOPPED", "spec")) end
    run(rollout_scan)
    assert.are.equal(0, gw.memory().status_seen)
  end)
end)
