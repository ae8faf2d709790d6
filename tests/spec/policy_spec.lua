-- oops.policy: the loader, its sandbox and every error wording operators see.
--
-- Fixtures live in tests/spec/fixtures/policies/; they are found from this
-- file's own path, so the specs run from the repository root (relative
-- paths) or through tests/run.sh (absolute ones). Messages carry the path
-- exactly as passed to the loader, so expectations are built from FIX.
local policy = require("oops.policy")

local ROOT = debug.getinfo(1, "S").source:sub(2):match("^(.-)tests/spec/[^/]*$") or ""
local FIX = ROOT .. "tests/spec/fixtures/policies/"

-- Real cron semantics are tested in C; this fake knows the REFERENCE examples.
local function fake_cron(expr)
  if expr == "0 3 * * *" or expr == "*/5 * * * * *" then return { expr = expr } end
  if expr == "61 * * * *" then return nil, "minute 61 out of range 0-59" end
  return nil, "not understood by the fake parser"
end

local OPTS = { cron_parse = fake_cron }

-- One policy file written for a case (the loader reads files), removed after it.
local path
local function load_text(text)
  path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return policy.load_files({ path }, OPTS)
end
after_each(function()
  if path then os.remove(path) end
  path = nil
end)

-- A fixture: a directory, or one file when the name ends in .lua.
local function load(name, opts)
  if name:match("%.lua$") then return policy.load_files({ FIX .. name }, opts or OPTS) end
  return policy.load_dir(FIX .. name, opts or OPTS)
end

local function errors_of(name, opts)
  local p, errs = load(name, opts)
  assert.is_nil(p)
  assert.are.equal("table", type(errs))
  return errs
end

local function assert_loads(name, opts)
  local p, errs = load(name, opts)
  assert(p, "expected " .. name .. " to load, got:\n  " .. table.concat(errs or {}, "\n  "))
  return p
end

-- Without a prefix and functions, so tables compare with assert.same.
local function without(t, ...)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  for _, k in ipairs({ ... }) do c[k] = nil end
  return c
end

-- Every fixture that must fail, with ALL its errors in the order reported:
-- file by file, line by line. Paths are relative to FIX.
local FAILS = {
  bad_cron = {
    'bad_cron/apps.lua:3: application "shop/api": restart.prod: "61 * * * *": minute 61 out of range 0-59',
  },
  bad_unknown_key = {
    'bad_unknown_key/apps.lua:1: scan: unknown key "intervall" (known: interval, max_new, parallel)',
    'bad_unknown_key/apps.lua:2: application "shop/api": unknown key "biuld" ' ..
      '(known: approvals, build, deploy, env, environments, health, limits, promote, restart, restart_command, ' ..
      'rollout, timeouts, weight, windows)',
    'bad_unknown_key/apps.lua:2: application "shop/api": limits: unknown key "gpu" (known: cpu, memory)',
    'bad_unknown_key/apps.lua:2: application "shop/api": timeouts: unknown key "rollout" ' ..
      '(known: build, cancel, deploy, health, restart, status, submit, weight)',
    'bad_unknown_key/apps.lua:8: alert.cpu: unknown key "window" (known: percent, sustained)',
    'bad_unknown_key/apps.lua:9: gateway "simulated": unknown key "workdir" (known: build, deploy, rollout)',
  },
  bad_duration = {
    'bad_duration/oopsd.lua:1: scan.interval: "5x": not a duration (use e.g. 500ms, 5s, 10m, 2h)',
    "bad_duration/oopsd.lua:2: deploy.timeout: 600: not a duration (use e.g. 500ms, 5s, 10m, 2h)",
    'bad_duration/oopsd.lua:3: rollout.timeout: "0s": must be more than zero',
    'bad_duration/oopsd.lua:4: locks.validate_every: "500ms": must be at least 1s',
    'bad_duration/oopsd.lua:5: gateway "simulated": build: "2 s": not a duration (use e.g. 500ms, 5s, 10m, 2h)',
    'bad_duration/oopsd.lua:6: alert.cpu.sustained: "1.5m": not a duration (use e.g. 500ms, 5s, 10m, 2h)',
    'bad_duration/oopsd.lua:6: alert.every: "soon": not a duration (use e.g. 500ms, 5s, 10m, 2h)',
    'bad_duration/oopsd.lua:7: restarts.grace: "-1m": not a duration (use e.g. 500ms, 5s, 10m, 2h)',
  },
  ["bad_restarts/oopsd.lua"] = {
    'bad_restarts/oopsd.lua:1: restarts.timezone: "Europe Paris": not a time zone name (like "Europe/Paris" or "UTC")',
  },
  bad_argv = {
    'bad_argv/apps.lua:1: application "shop/api": build: must be an argv list of strings like {"make", "image"}, ' ..
      'not a string (commands never run through a shell)',
    'bad_argv/apps.lua:1: application "shop/api": deploy: ' ..
      'must be a non-empty argv list of strings like {"make", "image"}',
    'bad_argv/apps.lua:1: application "shop/api": health: argument 2 is a number, not a string',
    'bad_argv/apps.lua:1: application "shop/api": restart_command: argument 2: "{artifact}": ' ..
      'unknown placeholder {artifact} (known: {application}, {environment}, {namespace})',
    'bad_argv/apps.lua:8: application "shop/web": build: argument 2: "TAG={artefact}": ' ..
      'unknown placeholder {artefact} (known: {application}, {artifact}, {environment}, {id}, {namespace}, ' ..
      '{source}, {source.KEY}, {trigger})',
    'bad_argv/apps.lua:8: application "shop/web": deploy: argument 1 (the program) is empty',
    'bad_argv/apps.lua:8: application "shop/web": health: must be an argv list of strings like {"make", "image"} ' ..
      '(it has named keys)',
  },
  bad_limits = {
    'bad_limits/apps.lua:1: application "shop/a": limits.memory: 512: needs a unit (e.g. 512Mi, 4Gi, 1G)',
    'bad_limits/apps.lua:2: application "shop/b": limits.memory: "512": needs a unit (e.g. 512Mi, 4Gi, 1G)',
    'bad_limits/apps.lua:3: application "shop/c": limits.cpu: 2: must be a string ' ..
      '(e.g. "500m", "2", "0.5"), not a number',
    'bad_limits/apps.lua:4: application "shop/d": limits.cpu: "0": must be more than zero',
    'bad_limits/apps.lua:4: application "shop/d": limits.memory: "512m": ' ..
      'unit "m" means thousandths; did you mean Mi or M?',
    'bad_limits/apps.lua:5: application "shop/e": limits.cpu: "two": not a CPU quantity (e.g. 500m, 2, 0.5)',
    'bad_limits/apps.lua:5: application "shop/e": limits.memory: "4GB": unknown unit "GB" ' ..
      '(use Ki, Mi, Gi, Ti or k, M, G, T)',
    'bad_limits/apps.lua:6: application "shop/f": limits: must be a table with keys cpu, memory, not a string',
  },
  bad_app = {
    'bad_app/apps.lua:1: application "Shop/API": name must be "namespace/application", each part lowercase letters, ' ..
      'digits and "-" (like "shop/api")',
    'bad_app/apps.lua:2: application "shop": name must be "namespace/application", each part lowercase letters, ' ..
      'digits and "-" (like "shop/api")',
    'bad_app/apps.lua:3: application "shop/api": restart.prod: must be a cron string like "0 3 * * *", not a number',
    'bad_app/apps.lua:3: application "shop/api": restart.qa: "qa" is not one of its environments (staging, prod)',
    'bad_app/apps.lua:7: application "shop/web": environments: required, like environments = { "staging", "prod" }',
    'bad_app/apps.lua:8: application "shop/db": environments: "prod" is listed twice',
    'bad_app/apps.lua:9: application "shop/cache": environments: "Prod": must be lowercase letters, digits and "-" ' ..
      '(like "prod")',
    'bad_app/apps.lua:10: application "shop/queue": environments: ' ..
      'must be a list of environment names like {"staging", "prod"}',
    'bad_app/apps.lua:11: application "shop/mail": restart: must be a table like { prod = "0 3 * * *" }, not a string',
    'bad_app/apps.lua:11: application "shop/mail": timeouts.build: "0s": must be more than zero',
  },
  ["bad_alert/oopsd.lua"] = {
    'bad_alert/oopsd.lua:1: alert.enabled: "yes": must be true or false',
    "bad_alert/oopsd.lua:1: alert.cpu.percent: 150: must be a whole number from 1 to 100",
    'bad_alert/oopsd.lua:1: alert.memory.percent: "90%": must be a whole number from 1 to 100',
    'bad_alert/oopsd.lua:1: alert.probe: "nagios": must be "simulated" or { prometheus = "http://..." }',
  },
  ["bad_alert/probe.lua"] = {
    "bad_alert/probe.lua:2: alert.probe.prometheus: required (the Prometheus base URL)",
    'bad_alert/probe.lua:2: alert.probe.token: "": must be a non-empty string',
  },
  ["bad_alert/shape.lua"] = {
    "bad_alert/shape.lua:2: alert.cpu: must be a table with keys percent, sustained, not a number",
    'bad_alert/shape.lua:2: alert.probe.prometheus: "127.0.0.1:9090": must be an http:// or https:// URL',
  },
  bad_global = {
    'bad_global/policy.lua:2: assignment to unknown global "foo" (hooks: on_build_lost, on_transition)',
    'bad_global/policy.lua:3: cannot assign to "scan" (it is part of the policy language)',
    "bad_global/policy.lua:4: on_build_lost: must be a function, not a string",
    'bad_global/policy.lua:6: unknown name "io"',
  },
  ["bad_gateway/kubernetes.lua"] = {
    'bad_gateway/kubernetes.lua:1: gateway "kubernetes": not available in this build (use "simulated" or "exec")',
  },
  ["bad_gateway/unknown.lua"] = {
    'bad_gateway/unknown.lua:1: gateway "docker": unknown gateway (known: exec, kubernetes, simulated)',
  },
  bad_notify = {
    'bad_notify/oopsd.lua:1: notify.webhook: "ftp://example.com/***": must be an http:// or https:// URL',
    'bad_notify/oopsd.lua:2: notify.command: must be an argv list of strings like {"make", "image"}, not a string ' ..
      '(commands never run through a shell)',
    'bad_notify/oopsd.lua:3: notify: names no route (use webhook = "http://...", slack = URL, teams = URL, ' ..
      'command = {...} or log = true)',
    'bad_notify/oopsd.lua:4: notify.log: "yes": must be true or false',
    "bad_notify/oopsd.lua:4: notify.retry: initial 2m is longer than max 1m",
    "bad_notify/oopsd.lua:5: notify.retry: already set at " .. FIX .. "bad_notify/oopsd.lua:4",
    'bad_notify/oopsd.lua:6: notify: unknown key "email" (known: applications, ca, command, environments, events, ' ..
      'format, log, page, retry, slack, teams, webhook)',
    'bad_notify/oopsd.lua:6: notify: names no route (use webhook = "http://...", slack = URL, teams = URL, ' ..
      'command = {...} or log = true)',
  },
  bad_shape = {
    'bad_shape/oopsd.lua:1: scan: expects a table, like scan { interval = "5s" }',
    'bad_shape/oopsd.lua:2: application: expects a name and a table, ' ..
      'like application "shop/api" { environments = { "prod" } }',
    'bad_shape/oopsd.lua:3: gateway "simulated": expects a table, like gateway "simulated" { build = "2s" }',
  },
  bad_hooks = {
    "bad_hooks/b.lua:1: on_build_lost: already defined at " .. FIX .. "bad_hooks/a.lua:1",
  },
  duplicate = {
    "duplicate/b.lua:2: scan: already declared at " .. FIX .. "duplicate/a.lua:1",
    'duplicate/b.lua:3: application "shop/api": already declared at ' .. FIX .. "duplicate/a.lua:2",
    'duplicate/b.lua:4: gateway "exec": already declared at ' .. FIX .. "duplicate/a.lua:3",
  },
  missing_body = {
    'missing_body/apps.lua:1: application "shop/api": missing { ... } after the name',
    'missing_body/apps.lua:2: gateway "exec": missing { ... } after the name',
  },
  runaway = {
    "runaway/a_loop.lua: runaway: more than 10000000 instructions",
    "runaway/b_pcall.lua: runaway: more than 10000000 instructions",
  },
  syntax = {
    "syntax/broken.lua:2: '}' expected (to close '{' at line 1) near 'deploy'",
  },
  runtime_error = {
    "runtime_error/boom.lua:2: boom",
  },
  exec_missing = {
    'exec_missing/apps.lua:1: application "shop/api": deploy: required by gateway "exec"',
    'exec_missing/apps.lua:1: application "shop/api": health: required by gateway "exec"',
    'exec_missing/apps.lua:1: application "shop/api": restart_command: ' ..
      'required by gateway "exec" for restart schedules',
    'exec_missing/apps.lua:1: application "shop/api": timeouts.deploy: 15m is longer than deploy.timeout 10m ' ..
      '(the pipeline would fail first)',
  },
  multi_error = {
    'multi_error/a.lua:1: scan.interval: "5x": not a duration (use e.g. 500ms, 5s, 10m, 2h)',
    'multi_error/a.lua:2: application "shop/api": build: must be an argv list of strings like {"make", "image"}, ' ..
      'not a string (commands never run through a shell)',
    'multi_error/a.lua:2: application "shop/api": restart.prod: "61 * * * *": minute 61 out of range 0-59',
    "multi_error/b.lua:2: '}' expected (to close '{' at line 1) near <eof>",
    'multi_error/c.lua:2: unknown name "undefined_thing"',
    "multi_error/d.lua:1: locks.validate_every: 30: not a duration (use e.g. 500ms, 5s, 10m, 2h)",
  },
}

local FAIL_NAMES = {}
for name in pairs(FAILS) do FAIL_NAMES[#FAIL_NAMES + 1] = name end
table.sort(FAIL_NAMES)

describe("policy errors", function()
  for _, name in ipairs(FAIL_NAMES) do
    describe(name, function()
      local want = {}
      for i, msg in ipairs(FAILS[name]) do want[i] = FIX .. msg end

      for _, msg in ipairs(want) do
        it(msg:sub(#FIX + 1), function()
          for _, got in ipairs(errors_of(name)) do
            if got == msg then return end
          end
          error("not reported; got:\n  " .. table.concat(errors_of(name), "\n  "))
        end)
      end

      it("reports these errors and no other, in file and line order", function()
        assert.are.same(want, errors_of(name))
      end)
    end)
  end

  it("reports an unknown time zone where the system has a zone database", function()
    local probe = io.open("/usr/share/zoneinfo/UTC")
    if not probe then return end -- no tzdata: only the name's form is checked
    probe:close()
    assert.are.same({
      FIX .. 'bad_restarts/tz.lua:2: restarts.timezone: "Europe/Pariss": ' ..
        'unknown time zone (not in /usr/share/zoneinfo)',
    }, errors_of("bad_restarts/tz.lua"))
  end)

  it("stops a runaway file at the configured instruction count", function()
    assert.are.same({ FIX .. "runaway/a_loop.lua: runaway: more than 50000 instructions" },
      errors_of("runaway/a_loop.lua", { cron_parse = fake_cron, instruction_limit = 50000 }))
  end)

  it("names a long path in full, though Lua shortens chunk names", function()
    local long = FIX .. "syntax/" .. string.rep("./", 30) .. "broken.lua"
    assert.are.same({ long .. ":2: '}' expected (to close '{' at line 1) near 'deploy'" },
      select(2, policy.load_files({ long }, OPTS)))
    local boom = FIX .. "runtime_error/" .. string.rep("./", 30) .. "boom.lua"
    assert.are.same({ boom .. ":2: boom" }, select(2, policy.load_files({ boom }, OPTS)))
  end)

  it("never quotes a refused URL's userinfo, path or query (they hold webhook secrets)", function()
    local _, errs = load_text('notify { webhook = "http://user:SECRET1@hooks.example/T0/SECRET2 x" }\n'
      .. 'notify { webhook = "ftp://hooks.example/services/SECRET3?token=SECRET4" }\n'
      .. 'alert { probe = { prometheus = "prom.example/SECRET5" } }\n')
    local text = table.concat(errs or {}, "\n")
    assert.is_truthy(text:find('notify.webhook: "http://hooks.example/***": must be an http', 1, true), text)
    assert.is_truthy(text:find('notify.webhook: "ftp://hooks.example/***": must be an http', 1, true), text)
    assert.is_truthy(text:find('alert.probe.prometheus: "prom.example/***": must be an http', 1, true), text)
    assert.is_nil(text:find("SECRET"), text)
  end)

  it("reports a missing directory", function()
    assert.are.same({ FIX .. "nowhere: no such directory" }, select(2, policy.load_dir(FIX .. "nowhere", OPTS)))
  end)

  it("reports a missing file among good ones and keeps checking the rest", function()
    local p, errs = policy.load_files({ FIX .. "nowhere.lua", FIX .. "bad_cron/apps.lua" }, OPTS)
    assert.is_nil(p)
    assert.are.same({
      FIX .. "nowhere.lua: No such file or directory",
      FIX .. 'bad_cron/apps.lua:3: application "shop/api": restart.prod: "61 * * * *": minute 61 out of range 0-59',
    }, errs)
  end)

  it("reports a cron parser that raises like one that refuses", function()
    local function raising() error("cron exploded", 0) end
    assert.are.same({ FIX .. 'bad_cron/apps.lua:3: application "shop/api": restart.prod: "61 * * * *": cron exploded' },
      errors_of("bad_cron/apps.lua", {
        cron_parse = function(e) if e == "61 * * * *" then raising() end return {} end,
      }))
  end)
end)

describe("simulate (oopsd --simulate URL, oopsctl chaos --policies)", function()
  local function with(simulate)
    return policy.load_dir(ROOT .. "tests/fixtures/chaos_policies", { no_cron = true, simulate = simulate })
  end

  it("keeps what the operator wrote but runs nothing real and tells nobody else", function()
    local real = assert(with(nil))
    local p = assert(with("http://127.0.0.1:9/hook"))
    assert.are.equal("exec", real.gateway.kind)
    assert.are.equal("prometheus", real.alert.probe.kind)
    assert.are.equal(2, #real.notify.routes) -- a webhook and a command
    assert.are.equal("simulated", p.gateway.kind)
    assert.are.equal("simulated", p.alert.probe.kind)
    assert.are.same({ { kind = "webhook", url = "http://127.0.0.1:9/hook", format = "json" } }, p.notify.routes)
    assert.is_true(p.simulated)
    -- the applications, their schedules and the timeouts are the operator's
    assert.are.equal(real.applications["ops/api"].restart.prod.cron, p.applications["ops/api"].restart.prod.cron)
    assert.are.same(real.applications["ops/api"].timeout_ms, p.applications["ops/api"].timeout_ms)
    assert.are.same(real.deploy, p.deploy)
    assert.are.same(real.rollout, p.rollout)
    assert.is_nil(real.simulated)
  end)

  it("refuses a URL that is not http(s), saying so without quoting it whole", function()
    local p, errs = with("ftp://user:secret@host/x")
    assert.is_nil(p)
    assert.are.equal(1, #errs)
    assert.matches("^%-%-simulate .*must be an http:// or https:// URL", errs[1])
    assert.is_nil(errs[1]:find("secret", 1, true))
  end)
end)

describe("the shipped policies/", function()
  local p
  before_each(function()
    p = assert(policy.load_dir(ROOT .. "policies", OPTS))
  end)

  it("loads cleanly, files in name order", function()
    assert.are.same({ ROOT .. "policies/apps.lua", ROOT .. "policies/oopsd.lua" }, p.files)
    assert.are.equal("string", type(p.version_hash))
  end)

  it("carries the documented defaults", function()
    assert.are.same({ interval_ms = 5000, max_new = policy.DEFAULTS.scan.max_new,
                      parallel = policy.DEFAULTS.scan.parallel }, p.scan)
    assert.are.same({ timeout_ms = 600000, timezone = "UTC", concurrency = {} }, p.deploy)
    assert.are.same({ timeout_ms = 300000, max_ms = 1800000, on_failure = "fail", strategy = "all" }, p.rollout)
    assert.are.same({}, p.freezes)
    assert.are.same({ validate_every_ms = 30000 }, p.locks)
    assert.are.same({ kind = "simulated", build_ms = 2000, deploy_ms = 0, rollout_ms = 1000, options = {} }, p.gateway)
    assert.are.same({ timezone = "UTC", grace_ms = 120000 }, p.restarts)
    assert.are.same({
      enabled = false,
      cpu = { percent = 95, sustained_ms = 600000 },
      memory = { percent = 90, sustained_ms = 300000 },
      every_ms = 1800000,
      interval_ms = 60000,
      probe = { kind = "simulated", scrape_interval_ms = 30000 },
    }, p.alert)
    assert.are.same({ routes = { { kind = "log" } }, retry = { initial_ms = 1000, max_ms = 60000 } }, p.notify)
    assert.are.same({}, p.hooks)
  end)

  it("declares two example applications, one with a restart schedule", function()
    local api, worker = p.applications["shop/api"], p.applications["shop/worker"]
    assert.are.same({ "shop/api", "shop/worker" }, (function()
      local names = {}
      for name in pairs(p.applications) do names[#names + 1] = name end
      table.sort(names)
      return names
    end)())
    assert.are.same({ prod = { cron = "0 3 * * *", expr = { expr = "0 3 * * *" } } }, api.restart)
    assert.are.same({}, worker.restart)
    assert.are.same({ cpu_millicores = 2000, memory_bytes = 4294967296 }, api.limits)
    assert.are.same({ cpu_millicores = 500, memory_bytes = 536870912 }, worker.limits)
  end)

  it("would also satisfy the exec gateway", function()
    -- Every command is written out, so switching the gateway is one line.
    for _, a in pairs(p.applications) do
      assert.is_table(a.build)
      assert.is_table(a.deploy)
      assert.is_table(a.health)
    end
  end)
end)

describe("a good policy", function()
  local p
  before_each(function() p = assert_loads("good") end)

  it("fills every declaration", function()
    assert.are.same({ interval_ms = 2000, max_new = policy.DEFAULTS.scan.max_new,
                      parallel = policy.DEFAULTS.scan.parallel }, p.scan)
    assert.are.same({ timeout_ms = 900000, timezone = "UTC", concurrency = {} }, p.deploy)
    -- rollout.max defaults to 30m, or the timeout when that is longer
    assert.are.same({ timeout_ms = 5400000, max_ms = 5400000, on_failure = "fail", strategy = "all" }, p.rollout)
    assert.are.same({ validate_every_ms = 10000 }, p.locks)
    assert.are.same({ kind = "simulated", build_ms = 500, deploy_ms = 1000, rollout_ms = 3000, options = {} },
      p.gateway)
    assert.are.same({ timezone = "Europe/Paris", grace_ms = 90000 }, p.restarts)
    assert.are.same({
      enabled = true,
      cpu = { percent = 80, sustained_ms = 120000 },
      memory = { percent = 85, sustained_ms = 300000 },
      every_ms = 3600000,
      interval_ms = 60000,
      probe = { kind = "prometheus", url = "http://127.0.0.1:9090", scrape_interval_ms = 15000, token = "t0ken" },
    }, p.alert)
  end)

  it("gathers notify routes from every notify block, in order", function()
    assert.are.same({
      routes = {
        { kind = "webhook", url = "http://127.0.0.1:9000/hook", format = "json" },
        { kind = "log" },
        { kind = "command", argv = { "/usr/local/bin/page", "--team", "shop" } },
      },
      retry = { initial_ms = 2000, max_ms = 300000 },
    }, p.notify)
  end)

  it("takes slack and teams routes, a webhook's format, a block's filters and CA, and the page (issue 28)", function()
    local q = assert(load_text([[
notify { slack = "https://hooks.slack.com/services/T/B/x", events = { "ERROR", "SUCCEEDED", "alert" },
  environments = { "prod" }, applications = { "shop/*", "pay/api" } }
notify { teams = "https://example.webhook.office.com/w", webhook = "https://ce.example/in", format = "cloudevents",
  ca = "/etc/oopsd/ca.pem", page = "https://oops.example/" }
]]))
    local f = { events = { ERROR = true, SUCCEEDED = true, alert = true }, environments = { prod = true },
      applications = { "^shop/[a-z0-9-]*$", "^pay/api$" } }
    assert.are.same({
      { kind = "slack", url = "https://hooks.slack.com/services/T/B/x", format = "slack", filter = f },
      { kind = "webhook", url = "https://ce.example/in", format = "cloudevents", ca = "/etc/oopsd/ca.pem" },
      { kind = "teams", url = "https://example.webhook.office.com/w", format = "teams", ca = "/etc/oopsd/ca.pem" },
    }, q.notify.routes)
    assert.are.equal("https://oops.example/", q.notify.page)
  end)

  it("refuses unknown event names, bad filters, a format without a webhook, a second page", function()
    local _, errs = load_text([[
notify { log = true, events = { "ERROR", "EXPLODED" } }
notify { log = true, events = { "restart" } }
notify { log = true, applications = { "Shop/*" }, environments = { "Prod" } }
notify { slack = "https://hooks.slack.com/x", format = "cloudevents" }
notify { log = true, page = "https://a.example/", ca = "relative.pem" }
notify { log = true, page = "https://b.example/" }
]])
    local text = table.concat(errs, "\n")
    assert.matches(':1: notify.events: "EXPLODED": not an event name %(known: APPROVED, BUILD_SUCCEEDED,', text)
    assert.matches(':2: notify.events: "restart": scheduled restarts are not announced', text)
    assert.matches(':3: notify.applications: "Shop/%*": must be NS/APP', text)
    assert.matches(':3: notify.environments: "Prod": must be lowercase', text)
    assert.matches(':4: notify.format: goes with webhook = URL', text)
    assert.matches(':5: notify.ca: "relative.pem": must be an absolute path', text)
    assert.matches(':6: notify.page: already set at ', text)
  end)

  it("refuses a page URL holding a user or password, never quoting it (issue 34)", function()
    for _, page in ipairs { "https://alice:s3cret@oops.example/", "https://s3cret@oops.example",
      "https://alice:pa/s3cret@oops.example/", "https://oops.example/x?u=s3cret@y" } do
      local _, errs = load_text('notify { log = true, page = "' .. page .. '" }\n')
      local text = table.concat(errs or {}, "\n")
      assert.matches(':1: notify.page: .*must not hold a user or password', text, 1, page)
      assert.is_nil(text:find("s3cret", 1, true), page)
    end
    local loaded = assert(load_text('notify { log = true, page = "https://oops.example/oops#top" }\n'))
    assert.are.equal("https://oops.example/oops#top", loaded.notify.page)
  end)

  it("turns applications into plain data", function()
    assert.are.same({
      namespace = "shop", application = "api",
      environments = { "staging", "prod" },
      build = { "make", "image", "TAG={artifact}" },
      deploy = { "./deploy.sh", "{artifact}", "{environment}" },
      health = { "./healthy.sh", "{environment}" },
      restart_cmd = { "./restart.sh", "{namespace}", "{application}", "{environment}" },
      restart = {
        prod = { cron = "0 3 * * *", expr = { expr = "0 3 * * *" } },
        staging = { cron = "*/5 * * * * *", expr = { expr = "*/5 * * * * *" } },
      },
      limits = { cpu_millicores = 2000, memory_bytes = 4294967296 },
      timeout_ms = { build = 1200000, deploy = 600000, health = 10000, restart = 120000,
        submit = 60000, status = 30000, cancel = 60000, weight = 300000 },
      env = {},
      windows = {}, approvals = {}, promote = {},
    }, p.applications["shop/api"])
    assert.are.same({
      namespace = "shop", application = "worker", environments = { "prod" }, restart = {},
      limits = { cpu_millicores = 500 }, env = {}, windows = {}, approvals = {}, promote = {},
      -- a one-command build's default: the policy's build.timeout
      timeout_ms = { build = p.build.timeout_ms, deploy = 300000, health = 30000, restart = 60000,
        submit = 60000, status = 30000, cancel = 60000, weight = 300000 },
    }, p.applications["shop/worker"])
    assert.are.same({ memory_bytes = 1000000000 }, p.applications["billing/web-2"].limits)
  end)

  it("copies operator tables rather than keeping them", function()
    -- 10_apps.lua shares one `envs` table; the policy must not alias it.
    local api = p.applications["shop/api"]
    api.environments[1] = "changed"
    assert.are.same({ "staging", "prod" }, assert_loads("good").applications["shop/api"].environments)
  end)

  it("records where each declaration came from", function()
    local dir = FIX .. "good/"
    assert.are.equal(dir .. "00_settings.lua:2", p.sources.scan)
    assert.are.equal(dir .. "00_settings.lua:6", p.sources.gateway)
    assert.are.equal(dir .. "00_settings.lua:8", p.sources.alert)
    assert.are.same({ dir .. "00_settings.lua:14", dir .. "00_settings.lua:15" }, p.sources.notify)
    assert.are.equal(dir .. "10_apps.lua:5", p.sources.applications["shop/api"])
    assert.are.equal(dir .. "20_hooks.lua:4", p.sources.hooks.on_build_lost)
  end)

  it("skips hidden files and files not ending in .lua", function()
    local dir = FIX .. "good/"
    assert.are.same({ dir .. "00_settings.lua", dir .. "10_apps.lua", dir .. "20_hooks.lua" }, p.files)
  end)

  it("returns hooks as functions the engine can call", function()
    assert.are.equal("function", type(p.hooks.on_build_lost))
    assert.are.equal("fail", p.hooks.on_build_lost({ id = "abc" }))
    assert.are.equal(1, p.hooks.on_transition({}))
    assert.are.equal(2, p.hooks.on_transition({}))
  end)

  it("loads the exec gateway with its options", function()
    local e = assert_loads("good_exec")
    assert.are.same("exec", e.gateway.kind)
    assert.are.same({ workdir = "/srv/deploy" }, e.gateway.options)
    assert.are.same({ "./restart.sh", "{environment}" }, e.applications["shop/api"].restart_cmd)
  end)

  it("keeps one application's deploy timeout within deploy.timeout by default", function()
    local short = policy.load_files({ FIX .. "good_exec/apps.lua" }, OPTS)
    assert.are.equal(300000, short.applications["shop/api"].timeout_ms.deploy)
  end)
end)

describe("defaults", function()
  it("are the whole policy when no file declares anything", function()
    local p = assert(policy.load_files({}, OPTS))
    local want = policy.defaults()
    assert.are.same(without(want, "version_hash"), without(p, "version_hash"))
    assert.are.equal("string", type(p.version_hash))
  end)

  it("are fresh tables on every call", function()
    local a, b = policy.defaults(), policy.defaults()
    a.scan.interval_ms = 1
    assert.are.equal(5000, b.scan.interval_ms)
  end)
end)

describe("the sandbox", function()
  it("reaches none of io, require, load, debug, os.execute ...", function()
    assert_loads("escape")
  end)

  it("keeps each file's locals and library changes to itself", function()
    assert_loads("isolation")
    assert.are.equal("X", string.upper("x"))
    assert.is_true(math.pi > 3.14)
  end)

  it("leaks no state from one load into the next", function()
    local a, b = assert_loads("good"), assert_loads("good")
    assert.are_not.equal(a, b)
    assert.are.equal(a.version_hash, b.version_hash)
    a.scan.interval_ms = 1
    assert.are.equal(2000, b.scan.interval_ms)
    -- Each load has its own hook closures and their own upvalues.
    assert.are_not.equal(a.hooks.on_transition, b.hooks.on_transition)
    assert.are.equal(1, a.hooks.on_transition({}))
    assert.are.equal(2, a.hooks.on_transition({}))
    assert.are.equal(1, b.hooks.on_transition({}))
  end)

  it("gives a different version hash to a different policy", function()
    assert.are_not.equal(assert_loads("good").version_hash, assert_loads("good_exec").version_hash)
  end)

  it("runs hooks outside the loading instruction limit", function()
    local p = assert_loads("hooks_heavy", { cron_parse = fake_cron, instruction_limit = 100000 })
    assert.are.equal(500000500000, p.hooks.on_transition({}))
  end)

  it("refuses declarations and unknown names from hooks after loading", function()
    local p = assert_loads("hooks_late")
    local file = FIX .. "hooks_late/hooks.lua"
    local ok, err = pcall(p.hooks.on_build_lost, {})
    assert.is_false(ok)
    assert.are.equal(file .. ":3: scan: declarations are only allowed while the policy loads", err)
    ok, err = pcall(p.hooks.on_transition, {})
    assert.is_false(ok)
    assert.are.equal(file .. ':7: unknown name "io"', err)
  end)
end)

describe("cron validation", function()
  local saved
  before_each(function() saved = package.loaded["oops"] end)
  after_each(function() package.loaded["oops"] = saved end)

  it("uses the oops module's cron.parse when none is injected", function()
    package.loaded["oops"] = { cron = { parse = fake_cron } }
    assert.are.same({
      FIX .. 'bad_cron/apps.lua:3: application "shop/api": restart.prod: "61 * * * *": minute 61 out of range 0-59',
    }, select(2, policy.load_dir(FIX .. "bad_cron")))
  end)

  it("raises when there is no parser and no_cron is not set", function()
    package.loaded["oops"] = {}
    assert.has_error(function() policy.load_dir(FIX .. "bad_cron") end,
      "policy: no cron parser (pass opts.cron_parse, load the oops module, or set opts.no_cron)")
  end)

  it("skips cron checks only with no_cron, keeping the text", function()
    package.loaded["oops"] = {}
    local p = assert(policy.load_dir(FIX .. "bad_cron", { no_cron = true }))
    assert.are.same({ prod = { cron = "61 * * * *" }, staging = { cron = "0 3 * * *" } },
      p.applications["shop/api"].restart)
  end)
end)

describe("caller mistakes", function()
  it("raise", function()
    assert.has_error(function() policy.load_dir(nil, OPTS) end)
    assert.has_error(function() policy.load_files("policies/oopsd.lua", OPTS) end)
    assert.has_error(function() policy.load_files({ 42 }, OPTS) end)
    assert.has_error(function() policy.load_files({}, { cron_parse = "yes" }) end)
    assert.has_error(function() policy.load_files({}, { cron_parse = fake_cron, instruction_limit = 0 }) end)
    assert.has_error(function() policy.load_files({}, "opts") end)
  end)
end)

describe("locks { session_timeout }", function()

  it("is left out by default: 3 validation intervals, decided by the lock registry", function()
    local p = assert(load_text('locks { validate_every = "2s" }\n'))
    assert.are.same({ validate_every_ms = 2000 }, p.locks)
  end)

  it("takes a duration of at least twice validate_every, in whole seconds rounded up", function()
    local p = assert(load_text('locks { validate_every = "1s", session_timeout = "2500ms" }\n'))
    assert.are.same({ validate_every_ms = 1000, session_timeout = 3 }, p.locks)
  end)

  it('takes "server": the database server\'s own wait_timeout', function()
    local p = assert(load_text('locks { validate_every = "1s", session_timeout = "server" }\n'))
    assert.are.same({ validate_every_ms = 1000, session_timeout = "server" }, p.locks)
  end)

  it("refuses a timeout the validation could not keep alive, and anything else", function()
    local p, errs = load_text('locks { validate_every = "30s", session_timeout = "45s" }\n')
    assert.is_nil(p)
    assert.are.same({ path .. ':1: locks.session_timeout: "45s": must be at least twice validate_every ' ..
      "(1m), or the validation cannot keep a living server's session" }, errs)
    p, errs = load_text('locks { session_timeout = "default" }\n')
    assert.is_nil(p)
    assert.are.equal(1, #errs)
    assert.truthy(errs[1]:find(path .. ':1: locks.session_timeout: "default": ', 1, true), errs[1])
    assert.truthy(errs[1]:find('(or "server": the database server\'s own wait_timeout)', 1, true), errs[1])
  end)
end)

describe("scan { max_new }", function()

  it("defaults to policy.DEFAULTS and takes a whole number from 1 to 65535", function()
    assert.are.equal(policy.DEFAULTS.scan.max_new, assert(load_text('scan { interval = "1s" }\n')).scan.max_new)
    assert.are.equal(1, assert(load_text("scan { max_new = 1 }\n")).scan.max_new)
    assert.are.equal(65535, assert(load_text("scan { max_new = 65535 }\n")).scan.max_new)
    assert.are.equal(200, assert(load_text("scan { max_new = 200.0 }\n")).scan.max_new)
    assert.are.same({ interval_ms = 2000, max_new = 7, parallel = policy.DEFAULTS.scan.parallel },
      assert(load_text('scan { interval = "2s", max_new = 7 }\n')).scan)
  end)

  it("scan.parallel defaults to policy.DEFAULTS and takes a whole number from 1 to 1024", function()
    assert.are.equal(policy.DEFAULTS.scan.parallel, assert(load_text('scan { interval = "1s" }\n')).scan.parallel)
    assert.are.equal(1, assert(load_text("scan { parallel = 1 }\n")).scan.parallel)
    assert.are.equal(1024, assert(load_text("scan { parallel = 1024 }\n")).scan.parallel)
    for _, bad in ipairs({ "0", "1025", "2.5", '"8"' }) do
      local p, errs = load_text("\nscan { parallel = " .. bad .. " }\n")
      assert.is_nil(p)
      assert.are.same({ path .. ":2: scan.parallel: " .. bad .. ": must be a whole number from 1 to 1024" }, errs)
    end
  end)

  it("refuses anything else with one line naming the file, the line and the key", function()
    for _, bad in ipairs({ { "0", "0" }, { "65536", "65536" }, { "-3", "-3" }, { "2.5", "2.5" },
                           { '"500"', '"500"' }, { "true", "true" } }) do
      local p, errs = load_text("\nscan { max_new = " .. bad[1] .. " }\n")
      assert.is_nil(p)
      assert.are.same({ path .. ":2: scan.max_new: " .. bad[2] .. ": must be a whole number from 1 to 65535" }, errs)
    end
  end)
end)

describe("the defaults, written once", function()
  local D = policy.DEFAULTS
  local function text_of(file)
    local f = assert(io.open(ROOT .. file, "rb"))
    local s = f:read("a")
    f:close()
    return s
  end
  -- The comment block (joined into one line) that ends right above the first
  -- line matching `anchor`, or that holds it when the anchor is in a comment.
  local function comment_around(text, anchor)
    local lines = {}
    for l in (text .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = l end
    for i, l in ipairs(lines) do
      if l:find(anchor, 1, true) then
        local last = i
        if not l:match("^%-%-") then last = i - 1 end
        local first = last
        while first > 1 and lines[first - 1]:match("^%-%-") do first = first - 1 end
        while lines[last + 1] and lines[last + 1]:match("^%-%-") do last = last + 1 end
        local parts = {}
        for j = first, last do parts[#parts + 1] = (lines[j]:gsub("^%-%-%s?", "")) end
        return (table.concat(parts, " "):gsub("%s+", " "))
      end
    end
    error("no line with " .. anchor)
  end

  it("fill every omitted value of a loaded policy", function()
    local p = assert(policy.load_files({}, OPTS))
    local ms = function(s) return assert(require("oops.duration").parse(s)) end
    assert.are.equal(ms(D.scan.interval), p.scan.interval_ms)
    assert.are.equal(D.scan.max_new, p.scan.max_new)
    assert.are.equal(D.scan.parallel, p.scan.parallel)
    assert.are.equal(ms(D.build.timeout), p.build.timeout_ms)
    assert.are.equal(ms(D.deploy.timeout), p.deploy.timeout_ms)
    assert.are.equal(ms(D.rollout.timeout), p.rollout.timeout_ms)
    assert.are.equal(ms(D.locks.validate_every), p.locks.validate_every_ms)
    assert.are.equal(ms(D.gateway.simulated.build), p.gateway.build_ms)
    assert.are.equal(ms(D.restarts.grace), p.restarts.grace_ms)
    assert.are.same({ percent = D.alert.cpu.percent, sustained_ms = ms(D.alert.cpu.sustained) }, p.alert.cpu)
    assert.are.equal(ms(D.alert.every), p.alert.every_ms)
    assert.are.equal(ms(D.notify.retry.max), p.notify.retry.max_ms)
    assert.are.equal(ms(D.application.timeouts.health), policy.app_timeout_default("health"))
  end)

  it("are the ones the shipped policies' comments state", function()
    local oopsd, apps = text_of("policies/oopsd.lua"), text_of("policies/apps.lua")
    local function says(text, anchor, phrase)
      local block = comment_around(text, anchor)
      assert(block:find(phrase, 1, true), ("the comment at %q should say %q:\n%s"):format(anchor, phrase, block))
    end
    says(oopsd, "scan {", "Default " .. D.scan.interval .. ".")
    says(oopsd, "scan {", ("`max_new`: the most new pipelines (ones no server drives yet) this server " ..
      "takes per tick, its fair share of them bounded so: default %d (1 to 65535)."):format(D.scan.max_new))
    says(oopsd, "scan {", ("`parallel`: the most pipelines a scan steps side by side: default %d (1 " ..
      "to 1024)."):format(D.scan.parallel))
    says(oopsd, "build { timeout", "Default " .. D.build.timeout .. ".")
    says(oopsd, "deploy {", "Default " .. D.deploy.timeout .. ".")
    says(oopsd, "deploy {", ("`timezone`: the zone the applications' deploy windows (apps.lua) and the freezes " ..
      "below are read in, the same on every server whatever its host's TZ: default %s."):format(D.deploy.timezone))
    assert.are.same({}, D.deploy.concurrency)
    says(oopsd, "deploy {", "like { prod = 2 } (1 to 100 each): default none (no bound).")
    says(oopsd, "rollout {", ('`on_failure`: what a failed rollout does, "fail" or "rollback" (to the live ' ..
      "release); an application may say otherwise (apps.lua): default %s."):format(D.rollout.on_failure))
    says(oopsd, "rollout {", "Default " .. D.rollout.timeout .. ".")
    says(oopsd, "locks { validate_every", "Default " .. D.locks.validate_every .. ".")
    local sim = D.gateway.simulated
    says(oopsd, 'gateway "simulated"', ("Defaults %s, %s, %s."):format(sim.build, sim.deploy, sim.rollout))
    says(oopsd, "notify { log", ("defaults %s and %s"):format(D.notify.retry.initial, D.notify.retry.max))
    local a = D.alert
    says(oopsd, "Resource alerts", ("Defaults: cpu %d%% for %s, memory %d%% for %s, every %s."):format(
      a.cpu.percent, a.cpu.sustained, a.memory.percent, a.memory.sustained, a.every))
    says(oopsd, "Scheduled restarts", ("Defaults: %s, %s."):format(D.restarts.timezone, D.restarts.grace))
    local at = D.application.timeouts
    says(apps, "timeouts  ", ("Defaults: build as build.timeout, deploy %s (at most deploy.timeout), health %s, " ..
      "restart %s; an external build's submit %s, status %s, cancel %s."):format(
      at.deploy, at.health, at.restart, at.submit, at.status, at.cancel))
    says(oopsd, "rollout {", "default " .. D.rollout.max .. " (at least the timeout).")
    local r = D.retention
    says(oopsd, "retention {", ("Defaults: pipelines %s, events %s, logs %s, outbox %s, restarts %s."):format(
      r.pipelines, r.events, r.logs, r.outbox, r.restarts))
  end)
end)


describe("builds: one command or three (external)", function()
  local function app(build_src, extra)
    return 'gateway "exec" {}\nbuild { timeout = "45m" }\napplication "shop/api" {\n' ..
      '  environments = { "prod" }, deploy = { "true" }, health = { "true" },\n' ..
      "  build = " .. build_src .. ",\n" .. (extra or "") .. "}\n"
  end

  it("a one-command build runs as long as build.timeout unless its own timeout says otherwise", function()
    local p = assert(load_text(app('{ "make", "{source.ref}", "{source}" }')))
    assert.are.equal(45 * 60000, p.applications["shop/api"].timeout_ms.build)
    p = assert(load_text(app('{ "make" }', '  timeouts = { build = "10m" },\n')))
    assert.are.equal(10 * 60000, p.applications["shop/api"].timeout_ms.build)
  end)

  it("an external build is three argv lists; {job} reaches status and cancel only", function()
    local p = assert(load_text(app('{ submit = { "./ci", "submit", "{id}", "{source.repo}" }, ' ..
      'status = { "./ci", "status", "{job}" }, cancel = { "./ci", "cancel", "{job}" } }')))
    assert.are.same({ external = true, submit = { "./ci", "submit", "{id}", "{source.repo}" },
      status = { "./ci", "status", "{job}" }, cancel = { "./ci", "cancel", "{job}" } },
      p.applications["shop/api"].build)
    assert.are.same({ submit = 60000, status = 30000, cancel = 60000 }, {
      submit = p.applications["shop/api"].timeout_ms.submit, status = p.applications["shop/api"].timeout_ms.status,
      cancel = p.applications["shop/api"].timeout_ms.cancel })
  end)

  it("refuses a missing command, {job} in submit, an unknown key, and {source.KEY} outside builds", function()
    local p, errs = load_text(app('{ submit = { "./ci", "{job}" }, status = { "./ci" }, nightly = { "x" } }'))
    assert.is_nil(p)
    local text = table.concat(errs, "\n")
    assert.matches('build: unknown key "nightly" (known: cancel, status, submit)', text, 1, true)
    assert.matches('build.submit: argument 2: "{job}": unknown placeholder {job}', text, 1, true)
    assert.matches("build.cancel: required in an external build", text, 1, true)
    p, errs = load_text(app('{ "make" }', '  restart_command = { "./r", "{source.ref}" },\n'))
    assert.is_nil(p)
    assert.matches('restart_command: argument 2: "{source.ref}": unknown placeholder {source.ref}',
      table.concat(errs, "\n"), 1, true)
    p, errs = load_text(app('{ "make", "{source.}" }'))
    assert.is_nil(p)
    assert.matches("unknown placeholder {source.}", table.concat(errs, "\n"), 1, true)
  end)
end)

describe("rollout { max }", function()

  it("bounds the whole rollout; it may not be shorter than the timeout", function()
    assert.are.same({ timeout_ms = 60000, max_ms = 600000, on_failure = "fail", strategy = "all" },
      assert(load_text('rollout { timeout = "1m", max = "10m" }\n')).rollout)
    local p, errs = load_text('rollout { timeout = "5m", max = "1m" }\n')
    assert.is_nil(p)
    assert.are.same({ path .. ':1: rollout.max: "1m" is shorter than timeout 5m (max bounds the whole rollout, ' ..
      "timeout the time not ready)" }, errs)
  end)
end)

describe("retention { ... }", function()
  local DAY = 86400000

  it("defaults to the documented durations", function()
    local ms = function(s) return assert(require("oops.duration").parse(s)) end
    local D = policy.DEFAULTS.retention
    assert.are.same({ pipelines_ms = 180 * DAY, events_ms = 180 * DAY, logs_ms = 30 * DAY, outbox_ms = 30 * DAY,
      restarts_ms = 90 * DAY, audit_ms = 365 * DAY }, assert(policy.load_files({}, OPTS)).retention)
    assert.are.same({ pipelines_ms = ms(D.pipelines), events_ms = ms(D.events), logs_ms = ms(D.logs),
      outbox_ms = ms(D.outbox), restarts_ms = ms(D.restarts), audit_ms = ms(D.audit) },
      assert(load_text("")).retention)
  end)

  it('takes durations and "forever" (never deleted), and keeps the defaults of the kinds left out', function()
    assert.are.same({ pipelines_ms = 365 * DAY, events_ms = 180 * DAY, logs_ms = 7 * DAY, outbox_ms = false,
      restarts_ms = 90 * DAY, audit_ms = 365 * DAY },
      assert(load_text('retention { pipelines = "365d", logs = "7d", outbox = "forever" }\n')).retention)
    assert.are.same({ pipelines_ms = 3600000, events_ms = 180 * DAY, logs_ms = 30 * DAY, outbox_ms = 30 * DAY,
      restarts_ms = false, audit_ms = false },
      assert(load_text('retention { pipelines = "1h", restarts = "forever", audit = "forever" }\n')).retention)
  end)

  it("refuses a bad value, a too short one, an unknown key, and a second block, naming each", function()
    local p, errs = load_text('retention { pipelines = "6 months", logs = "10m", outbox = 30, tables = "1d" }\n' ..
      'retention { events = "1d" }\n')
    assert.is_nil(p)
    assert.are.same({
      path .. ':1: retention: unknown key "tables" (known: audit, events, logs, outbox, pipelines, restarts)',
      path .. ':1: retention.logs: "10m": must be at least 1h (or "forever")',
      path .. ':1: retention.outbox: 30: not a duration (use e.g. 500ms, 5s, 10m, 2h) (or "forever")',
      path .. ':1: retention.pipelines: "6 months": not a duration (use e.g. 500ms, 5s, 10m, 2h) (or "forever")',
      path .. ":2: retention: already declared at " .. path .. ":1",
    }, errs)
  end)

  it("is listed by policy.keys() (so oopsd.policy(5) must document it)", function()
    local found = {}
    for _, k in ipairs(policy.keys()) do
      if k[1] == "retention" then found[#found + 1] = k[2] end
    end
    assert.are.same({ "audit", "events", "logs", "outbox", "pipelines", "restarts" }, found)
  end)
end)

describe("deploy { timezone, concurrency }", function()

  it("defaults to UTC and no bound", function()
    local p = assert(load_text(""))
    assert.are.same({ timeout_ms = 600000, timezone = policy.DEFAULTS.deploy.timezone, concurrency = {} }, p.deploy)
    assert.are.equal("UTC", p.deploy.timezone)
  end)

  it("takes a zone name and a whole number from 1 to 100 per environment", function()
    local p = assert(load_text('deploy { timezone = "Europe/Paris", concurrency = { prod = 2, ["eu-west"] = 100 } }\n'))
    assert.are.same({ timeout_ms = 600000, timezone = "Europe/Paris", concurrency = { prod = 2, ["eu-west"] = 100 } },
      p.deploy)
    assert.are.same({ prod = 1 }, assert(load_text("deploy { concurrency = { prod = 1.0 } }\n")).deploy.concurrency)
  end)

  it("refuses a bad zone, a bad count, a bad environment name and a non-table, naming each", function()
    local p, errs = load_text('\ndeploy { timezone = "Europe Paris", concurrency = { prod = 0, qa = 101, dev = 2.5, ' ..
      'staging = "2", Prod = 1 } }\n')
    assert.is_nil(p)
    assert.are.same({
      path .. ':2: deploy.timezone: "Europe Paris": not a time zone name (like "Europe/Paris" or "UTC")',
      path .. ':2: deploy.concurrency: "Prod": not an environment name (lowercase letters, digits and "-", ' ..
        'like "prod")',
      path .. ":2: deploy.concurrency.dev: 2.5: must be a whole number from 1 to 100",
      path .. ":2: deploy.concurrency.prod: 0: must be a whole number from 1 to 100",
      path .. ":2: deploy.concurrency.qa: 101: must be a whole number from 1 to 100",
      path .. ':2: deploy.concurrency.staging: "2": must be a whole number from 1 to 100',
    }, errs)
    p, errs = load_text("deploy { concurrency = 2 }\n")
    assert.is_nil(p)
    assert.are.same({ path .. ":1: deploy.concurrency: must be a table like { prod = 2 }, not a number" }, errs)
    p, errs = load_text('deploy { zone = "UTC" }\n')
    assert.is_nil(p)
    assert.are.same({ path .. ':1: deploy: unknown key "zone" (known: concurrency, timeout, timezone)' }, errs)
  end)

  it("refuses an unknown zone where the system has a zone database", function()
    local probe = io.open("/usr/share/zoneinfo/UTC")
    if not probe then return end
    probe:close()
    local p, errs = load_text('deploy { timezone = "Mars/Olympus" }\n')
    assert.is_nil(p)
    assert.are.same({ path .. ':1: deploy.timezone: "Mars/Olympus": unknown time zone (not in /usr/share/zoneinfo)' },
      errs)
  end)
end)

describe("rollout { on_failure } and an application's rollout", function()
  local function app(extra)
    return 'application "shop/api" { environments = { "prod" }' .. (extra and (", " .. extra) or "") .. " }\n"
  end

  it('defaults to "fail"; takes "fail" or "rollback"', function()
    assert.are.equal("fail", assert(load_text("")).rollout.on_failure)
    assert.are.equal(policy.DEFAULTS.rollout.on_failure, assert(load_text("")).rollout.on_failure)
    assert.are.same({ timeout_ms = 300000, max_ms = 1800000, on_failure = "rollback", strategy = "all" },
      assert(load_text('rollout { on_failure = "rollback" }\n')).rollout)
    assert.are.equal("fail", assert(load_text('rollout { on_failure = "fail" }\n')).rollout.on_failure)
  end)

  it("is an application's own choice when it says so, else nil (rollout.on_failure applies)", function()
    assert.is_nil(assert(load_text(app())).applications["shop/api"].rollout)
    assert.are.same({ on_failure = "rollback" },
      assert(load_text(app('rollout = { on_failure = "rollback" }'))).applications["shop/api"].rollout)
    assert.are.same({ on_failure = "fail" },
      assert(load_text('rollout { on_failure = "rollback" }\n' .. app('rollout = { on_failure = "fail" }')))
      .applications["shop/api"].rollout)
  end)

  it("refuses anything else, naming the key", function()
    local p, errs = load_text('rollout { on_failure = "retry" }\n')
    assert.is_nil(p)
    assert.are.same({ path .. ':1: rollout.on_failure: "retry": must be "fail" or "rollback"' }, errs)
    p, errs = load_text(app('rollout = { on_failure = true, timeout = "5m" }'))
    assert.is_nil(p)
    assert.are.same({
      path .. ':1: application "shop/api": rollout: unknown key "timeout" ' ..
        "(known: analysis, on_failure, pause, steps, strategy)",
      path .. ':1: application "shop/api": rollout.on_failure: true: must be "fail" or "rollback"',
    }, errs)
    p, errs = load_text(app('rollout = "rollback"'))
    assert.is_nil(p)
    assert.are.same({ path .. ':1: application "shop/api": rollout: must be a table with keys analysis, ' ..
      "on_failure, pause, steps, strategy, not a string" }, errs)
  end)
end)

describe("an application's windows", function()
  local function app(windows)
    return '\napplication "shop/api" { environments = { "staging", "prod" }, windows = ' .. windows .. " }\n"
  end

  it("are {} when absent, else parsed windows per environment", function()
    assert.are.same({}, assert(load_text(app("nil"))).applications["shop/api"].windows)
    local a = assert(load_text(app('{ prod = { "Mon-Fri 09:00-17:00", "Sat 10:00-12:00" }, staging = { "daily ' ..
      '00:00-24:00" } }'))).applications["shop/api"]
    assert.are.same({
      prod = {
        { text = "Mon-Fri 09:00-17:00", days = { true, true, true, true, true }, start = 540, stop = 1020 },
        { text = "Sat 10:00-12:00", days = { [6] = true }, start = 600, stop = 720 },
      },
      staging = { { text = "daily 00:00-24:00", days = { true, true, true, true, true, true, true }, start = 0,
        stop = 1440 } },
    }, a.windows)
    local many = {}
    for i = 1, policy.MAX_WINDOWS do many[i] = ('"Mon %02d:00-%02d:30"'):format(i % 24, i % 24) end
    assert.are.equal(32, #assert(load_text(app("{ prod = { " .. table.concat(many, ", ") .. " } }")))
      .applications["shop/api"].windows.prod)
  end)

  it("refuses each bad form at the application's line, naming the environment and the window", function()
    local CASES = {
      { '"Mon-Fri 09:00-17:00"', 'windows: must be a table like { prod = { "Mon-Fri 09:00-17:00" } }, not a string' },
      { '{ "Mon-Fri 09:00-17:00" }', 'windows: must be a table like { prod = { "Mon-Fri 09:00-17:00" } } ' ..
        "(keyed by environment)" },
      { '{ qa = { "Mon 09:00-10:00" } }', 'windows.qa: "qa" is not one of its environments (staging, prod)' },
      { '{ prod = "Mon 09:00-10:00" }', 'windows.prod: must be a non-empty list of windows like ' ..
        '{ "Mon-Fri 09:00-17:00", "Sat 10:00-12:00" }' },
      { "{ prod = {} }", 'windows.prod: must be a non-empty list of windows like ' ..
        '{ "Mon-Fri 09:00-17:00", "Sat 10:00-12:00" }' },
      { '{ prod = { "Mon 09:00-10:00", "Mon 17:00-09:00" } }', 'windows.prod[2]: "Mon 17:00-09:00": a window ' ..
        'whose end is before its start (a window never crosses midnight: write two, like "Fri 22:00-24:00" and ' ..
        '"Sat 00:00-02:00")' },
      { '{ prod = { "Mon-Fry 09:00-10:00" } }', 'windows.prod[1]: "Mon-Fry 09:00-10:00": unknown day "Fry" ' ..
        "(days are Mon, Tue, Wed, Thu, Fri, Sat, Sun; ranges like Mon-Fri, lists like Sat,Sun, or daily)" },
      { '{ prod = { "Mon 9:00-10:00" } }', 'windows.prod[1]: "Mon 9:00-10:00": start "9:00" is not HH:MM' },
      { '{ prod = { "Mon 09:00-24:30" } }', 'windows.prod[1]: "Mon 09:00-24:30": end 24:30 out of range 00:00-24:00' },
      { "{ prod = { 9 } }", 'windows.prod[1]: must be a string like "Mon-Fri 09:00-17:00", not a number' },
    }
    for _, case in ipairs(CASES) do
      local p, errs = load_text(app(case[1]))
      assert.is_nil(p)
      assert.are.same({ path .. ':2: application "shop/api": ' .. case[2] }, errs, case[1])
    end
    local many = {}
    for i = 1, policy.MAX_WINDOWS + 1 do many[i] = '"daily 09:00-10:00"' end
    local p, errs = load_text(app("{ prod = { " .. table.concat(many, ", ") .. " } }"))
    assert.is_nil(p)
    assert.are.same({ path .. ':2: application "shop/api": windows.prod: 33 windows: at most 32' }, errs)
  end)
end)

describe("an application's approvals (issue 39)", function()
  local function app(approvals)
    return '\napplication "shop/api" { environments = { "staging", "prod" }, approvals = ' .. approvals .. " }\n"
  end

  it("are {} when absent, else a count of persons per environment", function()
    assert.are.same({}, assert(load_text(app("nil"))).applications["shop/api"].approvals)
    assert.are.same({ prod = 2, staging = 1 },
      assert(load_text(app("{ prod = 2, staging = 1 }"))).applications["shop/api"].approvals)
    assert.are.same({ prod = 9 }, assert(load_text(app("{ prod = 9 }"))).applications["shop/api"].approvals)
  end)

  it("refuses each bad form at the application's line, naming the environment", function()
    local CASES = {
      { "2", "approvals: must be a table like { prod = 2 }, not a number" },
      { "{ 2 }", "approvals: must be a table like { prod = 2 } (keyed by environment)" },
      { "{ qa = 2 }", 'approvals.qa: "qa" is not one of its environments (staging, prod)' },
      { "{ prod = 0 }", "approvals.prod: must be a whole number of persons from 1 to 9, not 0" },
      { "{ prod = 10 }", "approvals.prod: must be a whole number of persons from 1 to 9, not 10" },
      { "{ prod = 1.5 }", "approvals.prod: must be a whole number of persons from 1 to 9, not 1.5" },
      { '{ prod = "2" }', 'approvals.prod: must be a whole number of persons from 1 to 9, not "2"' },
    }
    for _, case in ipairs(CASES) do
      local p, errs = load_text(app(case[1]))
      assert.is_nil(p)
      assert.are.same({ path .. ':2: application "shop/api": ' .. case[2] }, errs, case[1])
    end
  end)

  it("hold a release until that many persons approved it; never a rollback", function()
    local release = require("oops.release")
    local pol = assert(load_text(app("{ prod = 2 }")))
    local p = { id = "p1", namespace = "shop", application = "api", environment = "prod", trigger = "release",
      approvals = 0 }
    assert.are.equal(2, release.approvals_needed(pol, p))
    assert.are.same({ kind = "approval", message = "Waiting for approval: 0 of 2; `oopsctl approve p1 --reason " ..
      "TEXT` by another person than its creator." }, release.approval_hold(pol, p))
    p.approvals, p.approved_by = 1, "alice"
    assert.matches("Waiting for approval: 1 of 2 (approved by alice);", release.approval_hold(pol, p).message, 1, true)
    p.approvals, p.approved_by = 2, "alice,bob"
    assert.is_nil(release.approval_hold(pol, p))
    p.approvals, p.trigger = 0, "rollback"
    assert.is_nil(release.approval_hold(pol, p))
    p.trigger, p.environment = "release", "staging"
    assert.is_nil(release.approval_hold(pol, p))
  end)
end)

describe('freeze "NAME" { ... }', function()
  local DAY = 86400

  it("is stored with its epochs (deploy.timezone, default UTC), sorted by from; none by default", function()
    assert.are.same({}, assert(load_text("")).freezes)
    local p = assert(load_text('freeze "year-end" { from = "2026-12-20 00:00", to = "2027-01-04 08:00", ' ..
      'environments = { "prod", "eu-prod" } }\nfreeze "black-friday" { from = "2026-11-27 00:00", ' ..
      'to = "2026-11-28 00:00" }\n'))
    assert.are.same({
      { name = "black-friday", from = 1795737600, to = 1795737600 + DAY, from_text = "2026-11-27 00:00",
        to_text = "2026-11-28 00:00", where = path .. ":2" },
      { name = "year-end", from = 1797724800, to = 1799049600, from_text = "2026-12-20 00:00",
        to_text = "2027-01-04 08:00", environments = { prod = true, ["eu-prod"] = true }, where = path .. ":1" },
    }, p.freezes)
    -- 400 days at most: exactly 400 is allowed
    assert(load_text('freeze "long" { from = "2026-01-01 00:00", to = "2027-02-05 00:00" }\n'))
  end)

  it("refuses each bad form at the freeze's line", function()
    local CASES = {
      { 'freeze "x" { from = "2026-12-20 00:00" }',
        { 'freeze "x": to: required (a freeze that never ends is an error), like to = "2027-01-04 08:00"' } },
      { 'freeze "x" { to = "2026-12-20 00:00" }', { 'freeze "x": from: required, like from = "2026-12-20 00:00"' } },
      { 'freeze "x" { from = "2026-12-20", to = "2026-02-29 00:00" }', {
        'freeze "x": from: "2026-12-20": not a local time like "2026-12-20 00:00" (YYYY-MM-DD HH:MM)',
        'freeze "x": to: "2026-02-29 00:00": day 29 out of range 1-28 (2026-02 has 28 days)' } },
      { 'freeze "x" { from = "2026-12-20 00:00", to = "2026-12-19 00:00" }',
        { 'freeze "x": to: "2026-12-19 00:00" is not after from "2026-12-20 00:00"' } },
      { 'freeze "x" { from = "2026-12-20 00:00", to = "2026-12-20 00:00" }',
        { 'freeze "x": to: "2026-12-20 00:00" is not after from "2026-12-20 00:00"' } },
      { 'freeze "x" { from = "2026-01-01 00:00", to = "2027-02-05 00:01" }',
        { 'freeze "x": to: "2027-02-05 00:01" is more than 400 days after from "2026-01-01 00:00"' } },
      { 'freeze "x" { from = "2026-12-20 00:00", to = "2027-01-04 08:00", environments = { "Prod" } }',
        { 'freeze "x": environments: "Prod": must be lowercase letters, digits and "-" (like "prod")' } },
      { 'freeze "x" { from = "2026-12-20 00:00", to = "2027-01-04 08:00", environments = "prod" }',
        { 'freeze "x": environments: must be a list of environment names like {"staging", "prod"}' } },
      { 'freeze "x" { from = "2026-12-20 00:00", to = "2027-01-04 08:00", env = { "prod" } }',
        { 'freeze "x": unknown key "env" (known: environments, from, to)' } },
      { 'freeze "Year End" { from = "2026-12-20 00:00", to = "2027-01-04 08:00" }',
        { 'freeze "Year End": name must be lowercase letters, digits and "-" (like "year-end")' } },
      { 'freeze "x" "y"', { 'freeze "x": expects a table, like freeze "year-end" { from = "2026-12-20 00:00", ' ..
        'to = "2027-01-04 08:00" }' } },
      { 'freeze { from = "2026-12-20 00:00" }', { 'freeze: expects a name and a table, like freeze "year-end" ' ..
        '{ from = "2026-12-20 00:00", to = "2027-01-04 08:00" }' } },
      { 'local _ = freeze "x"', { 'freeze "x": missing { ... } after the name' } },
    }
    for _, case in ipairs(CASES) do
      local p, errs = load_text("\n" .. case[1] .. "\n")
      assert.is_nil(p)
      local want = {}
      for i, msg in ipairs(case[2]) do want[i] = path .. ":2: " .. msg end
      assert.are.same(want, errs, case[1])
    end
  end)

  it("may be declared several times, each name once", function()
    local p, errs = load_text('freeze "a" { from = "2026-12-20 00:00", to = "2026-12-21 00:00" }\n' ..
      'freeze "a" { from = "2026-12-22 00:00", to = "2026-12-23 00:00" }\n')
    assert.is_nil(p)
    assert.are.same({ path .. ':2: freeze "a": already declared at ' .. path .. ":1" }, errs)
  end)

  it("reports an error found once every file is loaded at the freeze's own line", function()
    -- The epochs (and so this check) wait for deploy.timezone, declared below.
    local p, errs = load_text('\n\nfreeze "x" { from = "2026-12-20 00:00", to = "2026-12-20 00:00" }\n' ..
      'deploy { timezone = "Europe/Paris" }\n')
    assert.is_nil(p)
    assert.are.same({ path .. ':3: freeze "x": to: "2026-12-20 00:00" is not after from "2026-12-20 00:00"' }, errs)
  end)
end)

describe("the keys of issue 26 (windows, freezes, timezone, concurrency, on_failure)", function()
  it("are listed by policy.keys() (so oopsd.policy(5) must document them)", function()
    local found = {}
    for _, k in ipairs(policy.keys()) do found[k[1] .. " " .. k[2]] = true end
    for _, k in ipairs({ "deploy timezone", "deploy concurrency", "deploy timeout", "rollout on_failure",
      "application windows", "application rollout", "application rollout.on_failure", "freeze from", "freeze to",
      "freeze environments" }) do
      assert.is_true(found[k], k)
    end
  end)
end)

describe("an application's promotions (issue 39)", function()
  local function app(promote, envs)
    return '\napplication "shop/api" { environments = ' .. (envs or '{ "dev", "staging", "prod" }') ..
      ", promote = " .. promote .. " }\n"
  end

  it("are {} when absent, else each environment's destination and wait (default 0)", function()
    assert.are.same({}, assert(load_text(app("nil"))).applications["shop/api"].promote)
    assert.are.same({ dev = { to = "staging", after_ms = 0 }, staging = { to = "prod", after_ms = 1800000 } },
      assert(load_text(app('{ dev = { to = "staging" }, staging = { to = "prod", after = "30m" } }')))
        .applications["shop/api"].promote)
  end)

  it("refuses each bad form at the application's line, naming what is wrong", function()
    local CASES = {
      { '"prod"', 'promote: must be a table like { staging = { to = "prod", after = "30m" } }, not a string' },
      { '{ { to = "prod" } }', "promote: must be a table like { staging = { to = \"prod\", after = \"30m\" } } " ..
        "(keyed by environment)" },
      { '{ qa = { to = "prod" } }', 'promote.qa: "qa" is not one of its environments (dev, staging, prod)' },
      { '{ staging = "prod" }', 'promote.staging: must be a table like { to = "prod", after = "30m" }, not a string' },
      { '{ staging = { after = "1m" } }', "promote.staging.to: required: the environment it promotes to" },
      { '{ staging = { to = "live" } }', 'promote.staging.to: "live" is not one of its environments (dev, staging, ' ..
        "prod)" },
      { '{ staging = { to = "staging" } }', 'promote.staging.to: must be another environment than "staging"' },
      { '{ staging = { to = "prod", after = "soon" } }',
        'promote.staging.after: "soon": not a duration (use e.g. 500ms, 5s, 10m, 2h)' },
      { '{ staging = { to = "prod", after = "100d" } }', 'promote.staging.after: "100d": must be at most 90d' },
      { '{ staging = { to = "prod", wait = "1m" } }', "promote.staging.wait: is not a key of a promotion (to, after)" },
      { '{ staging = { to = "prod" }, prod = { to = "dev" }, dev = { to = "staging" } }',
        "promote: a cycle: dev → staging → prod → dev would promote for ever" },
    }
    for _, case in ipairs(CASES) do
      local p, errs = load_text(app(case[1]))
      assert.is_nil(p, case[1])
      assert.are.same({ path .. ':2: application "shop/api": ' .. case[2] }, errs, case[1])
    end
  end)

  it("become the promote scan's rules, and a candidate is due once live for its wait", function()
    local scan = require("oops.scans.promote")
    local pol = assert(load_text(app('{ dev = { to = "staging" }, staging = { to = "prod", after = "30m" } }')))
    assert.are.same({
      { key = "shop/api/dev", ns = "shop", app = "api", from = "dev", to = "staging", after_ms = 0 },
      { key = "shop/api/staging", ns = "shop", app = "api", from = "staging", to = "prod", after_ms = 1800000 },
    }, scan.rules(pol))
    local r = scan.rules(pol)[2]
    -- quiet_ms: live with no alert resolved since (the read's quiet_ms <= live_ms)
    local row = { id = "s1", status = "SUCCEEDED", trigger_type = "release", live_ms = 600000, quiet_ms = 600000,
      firing = 0 }
    assert.are.equal(1200000, scan.due(r, row))
    row.live_ms, row.quiet_ms = 1800000, 1800000
    assert.are.equal(0, scan.due(r, row))
    row.quiet_ms = 600000 -- an alert resolved 10 minutes ago: the wait counts from then
    assert.are.equal(1200000, scan.due(r, row))
    row.quiet_ms = 1800000
    row.trigger_type = "promotion"
    assert.are.equal(0, scan.due(r, row), "a promotion is promoted on (a chain)")
    local function live(status, trigger) return { id = "s1", status = status, trigger_type = trigger, live_ms = 1e9,
      quiet_ms = 1e9, firing = 0 } end
    assert.is_nil(scan.due(r, live("SUCCEEDED", "rollback")))
    assert.is_nil(scan.due(r, live("ROLLING_OUT", "release")))
    assert.is_nil(scan.due(r, { id = "s1", status = "SUCCEEDED", trigger_type = "release", live_ms = 1e9,
      quiet_ms = 1e9, firing = 0, promoted = "p2" }))
    assert.are.same({ nil, "firing" }, { scan.due(r, { id = "s1", status = "SUCCEEDED", trigger_type = "release",
      live_ms = 1e9, firing = 1 }) })
    assert.are.same({}, scan.rules(assert(load_text(app("nil")))))
  end)
end)
