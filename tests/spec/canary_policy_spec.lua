-- oops.policy and oops.policy.canary: canary and blue_green rollouts, the
-- analysis block, the query's placeholders (fill) and the plan a pipeline
-- follows (issue 38): every rule, good and bad, with the operators' wording.
local policy = require("oops.policy")
local canary = require("oops.policy.canary")

local function fake_cron() return {} end
local OPTS = { cron_parse = fake_cron }

-- Policy files written for a case (the loader reads files), removed after it.
local paths = {}
local function write(text)
  local p = os.tmpname()
  local f = assert(io.open(p, "w"))
  f:write(text)
  f:close()
  paths[#paths + 1] = p
  return p
end
after_each(function()
  for _, p in ipairs(paths) do os.remove(p) end
  paths = {}
end)

local path -- the last single file loaded
local function load_text(text)
  path = write(text)
  return policy.load_files({ path }, OPTS)
end

-- The errors, the file's path written F.
local function errors_of(text)
  local p, errs = load_text(text)
  assert(p == nil, "expected errors, the policy loaded")
  for i, e in ipairs(errs) do
    if e:sub(1, #path) == path then errs[i] = "F" .. e:sub(#path + 1) end
  end
  return errs
end

local function loads(text)
  local p, errs = load_text(text)
  assert(p, "expected it to load, got:\n  " .. table.concat(errs or {}, "\n  "))
  return p
end

local ANALYSIS = 'analysis "errors" { prometheus = "http://127.0.0.1:9090",\n' ..
  '  query = [[sum(rate(x{app="{application}",env="{environment}"}[1m]))]],\n' ..
  "  success = function(v) return v < 0.01 end }\n"

-- A rollout declaration on line 1 with these steps, then ANALYSIS.
local function steps(list) return 'rollout { strategy = "canary", steps = ' .. list .. " }\n" .. ANALYSIS end

describe("rollout { strategy }", function()
  it('defaults to "all": no steps, no analyses', function()
    local p = loads("")
    assert.are.equal("all", p.rollout.strategy)
    assert.is_nil(p.rollout.steps)
    assert.are.same({}, p.analyses)
    assert.are.equal("all", policy.DEFAULTS.rollout.strategy)
    assert.are.same({}, policy.defaults().analyses)
    assert.are.equal("all", policy.defaults().rollout.strategy)
    p = loads('rollout { strategy = "all", timeout = "1m" }\n')
    assert.are.same({ timeout_ms = 60000, max_ms = 1800000, on_failure = "fail", strategy = "all" }, p.rollout)
  end)

  it("normalizes a canary's steps, each with its declaration's line", function()
    local p = loads("\n" .. 'rollout { strategy = "canary", steps = {\n' ..
      '  { weight = 10 }, { analysis = "errors" }, { weight = 50 }, { pause = "10m" },\n' ..
      '  { analysis = "errors" }, { pause = true }, { weight = 100 } } }\n' .. ANALYSIS)
    assert.are.equal("canary", p.rollout.strategy)
    assert.are.same({
      { weight = 10, line = 2 }, { analysis = "errors", line = 2 }, { weight = 50, line = 2 },
      { pause_ms = 600000, line = 2 }, { analysis = "errors", line = 2 }, { pause = true, line = 2 },
      { weight = 100, line = 2 },
    }, p.rollout.steps)
  end)

  it("takes equal weights, weight 0, steps after the last weight, and 32 steps", function()
    local p = loads(steps('{ { weight = 0 }, { weight = 0 }, { weight = 100 }, { analysis = "errors" } }'))
    assert.are.equal(4, #p.rollout.steps)
    local many = {}
    for i = 1, 32 do many[i] = "{ weight = " .. (i == 32 and 100 or i) .. " }" end
    p = loads(steps("{ " .. table.concat(many, ", ") .. " }"))
    assert.are.equal(32, #p.rollout.steps)
  end)

  it("refuses a bad strategy, naming it", function()
    assert.are.same({ 'F:1: rollout.strategy: "linear": must be "all", "canary" or "blue_green"' },
      errors_of('rollout { strategy = "linear", steps = {} }\n'))
  end)

  it("requires steps for a canary, and refuses them otherwise", function()
    assert.are.same({ 'F:1: rollout.steps: required by strategy "canary", like steps = { { weight = 10 }, ' ..
      '{ pause = "10m" }, { weight = 100 } }' }, errors_of('rollout { strategy = "canary" }\n'))
    assert.are.same({ 'F:1: rollout.steps: only for strategy "canary" (strategy is "all")' },
      errors_of('rollout { steps = { { weight = 100 } } }\n'))
    assert.are.same({ 'F:1: rollout.steps: only for strategy "canary" (strategy is "blue_green")' },
      errors_of('rollout { strategy = "blue_green", steps = { { weight = 100 } } }\n'))
    assert.are.same({
      'F:1: rollout.analysis: only for strategy "blue_green" (strategy is "canary": a canary names its ' ..
        "analyses and pauses in its steps)",
      'F:1: rollout.pause: only for strategy "blue_green" (strategy is "all")',
    }, {
      errors_of('rollout { strategy = "canary", analysis = "errors", steps = { { weight = 100 } } }\n' .. ANALYSIS)[1],
      errors_of('rollout { pause = true }\n')[1],
    })
  end)

  it("refuses a list that is not 1 to 32 steps", function()
    local like = "must be a list of 1 to 32 steps like { { weight = 10 }, { pause = \"10m\" }, { weight = 100 } }"
    assert.are.same({ "F:1: rollout.steps: " .. like }, errors_of(steps("{}")))
    assert.are.same({ "F:1: rollout.steps: " .. like .. ", not a string" }, errors_of(steps('"10,50,100"')))
    assert.are.same({ "F:1: rollout.steps: " .. like }, errors_of(steps("{ first = { weight = 100 } }")))
    local many = {}
    for i = 1, 33 do many[i] = "{ weight = 100 }" end
    assert.are.same({ "F:1: rollout.steps: 33 steps: at most 32" },
      errors_of(steps("{ " .. table.concat(many, ", ") .. " }")))
  end)

  it("refuses each bad step, naming it", function()
    local CASES = {
      { '"10"', 'rollout.steps[1]: must be a table with one of analysis, pause, weight (like { weight = 10 }), ' ..
        "not a string" },
      { "{}", "rollout.steps[1]: must have exactly one of analysis, pause, weight (it is empty)" },
      { '{ weight = 10, pause = "1m" }', "rollout.steps[1]: must have exactly one of analysis, pause, weight " ..
        "(it has pause, weight)" },
      { "{ wieght = 10 }", 'rollout.steps[1]: unknown key "wieght" (known: analysis, pause, weight)' },
      { "{ weight = 101 }", "rollout.steps[1].weight: 101: must be a whole number from 0 to 100" },
      { "{ weight = -1 }", "rollout.steps[1].weight: -1: must be a whole number from 0 to 100" },
      { "{ weight = 12.5 }", "rollout.steps[1].weight: 12.5: must be a whole number from 0 to 100" },
      { '{ pause = "10x" }', 'rollout.steps[1].pause: "10x": not a duration (use e.g. 500ms, 5s, 10m, 2h) ' ..
        "(or true: until an operator promotes)" },
      { '{ pause = "0s" }', 'rollout.steps[1].pause: "0s": must be more than zero (or true: until an operator ' ..
        "promotes)" },
      { "{ pause = false }", "rollout.steps[1].pause: false: not a duration (use e.g. 500ms, 5s, 10m, 2h) " ..
        "(or true: until an operator promotes)" },
      { '{ analysis = "Errors" }', 'rollout.steps[1].analysis: "Errors": must be the name of an analysis ' ..
        '(lowercase letters, digits and "-")' },
    }
    for _, c in ipairs(CASES) do
      assert.are.same({ "F:1: " .. c[2] }, errors_of(steps("{ " .. c[1] .. ", { weight = 100 } }")), c[1])
    end
  end)

  it("refuses a decreasing weight, naming both steps", function()
    assert.are.same({ "F:1: rollout.steps[3].weight: 20 is less than the weight before it (50, steps[1]): " ..
      "weights never decrease" },
      errors_of(steps('{ { weight = 50 }, { pause = "1m" }, { weight = 20 }, { weight = 100 } }')))
  end)

  it("wants the last weight step to be 100", function()
    local why = ":1: rollout.steps: the last weight step must be 100: the release ends with all traffic"
    assert.are.same({ "F" .. why }, errors_of(steps('{ { weight = 10 }, { weight = 50 }, { pause = "1m" } }')))
    assert.are.same({ "F" .. why }, errors_of(steps('{ { analysis = "errors" }, { pause = true } }')))
  end)

  it("checks the analyses steps name once every file is loaded, naming the step", function()
    -- declared in a later file: fine
    local a = write('rollout { strategy = "canary", steps = { { analysis = "errors" }, { weight = 100 } } }\n')
    local b = write(ANALYSIS)
    local p = assert(policy.load_files({ a, b }, OPTS))
    assert.are.equal("errors", p.rollout.steps[1].analysis)
    -- never declared
    local c = write('\nrollout { strategy = "canary", steps = { { weight = 10 }, { analysis = "latency" }, ' ..
      "{ weight = 100 } } }\n")
    local _, errs = policy.load_files({ c, b }, OPTS)
    assert.are.same({ c .. ':2: rollout.steps[2].analysis: "latency": no such analysis (declared: errors)' }, errs)
    _, errs = policy.load_files({ c }, OPTS)
    assert.are.same({ c .. ':2: rollout.steps[2].analysis: "latency": no such analysis (declared: none)' }, errs)
  end)
end)

describe("rollout { strategy = \"blue_green\" }", function()
  it("expands to weight 0, the analysis, the pause, then weight 100", function()
    local p = loads('rollout { strategy = "blue_green", analysis = "errors", pause = "5m" }\n' .. ANALYSIS)
    assert.are.equal("blue_green", p.rollout.strategy)
    assert.are.same({ { weight = 0, line = 1 }, { analysis = "errors", line = 1 }, { pause_ms = 300000, line = 1 },
      { weight = 100, line = 1 } }, p.rollout.steps)
    p = loads('rollout { strategy = "blue_green", analysis = "errors" }\n' .. ANALYSIS)
    assert.are.same({ { weight = 0, line = 1 }, { analysis = "errors", line = 1 }, { weight = 100, line = 1 } },
      p.rollout.steps)
    p = loads('rollout { strategy = "blue_green", pause = true }\n')
    assert.are.same({ { weight = 0, line = 1 }, { pause = true, line = 1 }, { weight = 100, line = 1 } },
      p.rollout.steps)
  end)

  it("waits for an operator when it has neither analysis nor pause (a preview)", function()
    local p = loads('rollout { strategy = "blue_green" }\n')
    assert.are.same({ { weight = 0, line = 1 }, { pause = true, line = 1 }, { weight = 100, line = 1 } },
      p.rollout.steps)
  end)

  it("refuses a bad analysis or pause, and an analysis never declared", function()
    assert.are.same({ 'F:1: rollout.pause: "soon": not a duration (use e.g. 500ms, 5s, 10m, 2h) ' ..
      "(or true: until an operator promotes)" }, errors_of('rollout { strategy = "blue_green", pause = "soon" }\n'))
    assert.are.same({ 'F:1: rollout.analysis: "nope": no such analysis (declared: errors)' },
      errors_of('rollout { strategy = "blue_green", analysis = "nope" }\n' .. ANALYSIS))
  end)
end)

describe("an application's rollout", function()
  local function app(rollout, extra)
    return 'application "shop/web" { environments = { "prod" }, rollout = ' .. rollout .. (extra or "") .. " }\n"
  end

  it("has its own plan when it sets a strategy, else nil steps (the global plan applies)", function()
    local p = loads(app('{ on_failure = "rollback", strategy = "canary", steps = { { weight = 20 }, ' ..
      '{ analysis = "errors" }, { weight = 100 } } }') .. ANALYSIS)
    assert.are.same({ on_failure = "rollback", strategy = "canary",
      steps = { { weight = 20, line = 1 }, { analysis = "errors", line = 1 }, { weight = 100, line = 1 } } },
      p.applications["shop/web"].rollout)
    p = loads(app('{ on_failure = "rollback" }'))
    assert.are.same({ on_failure = "rollback" }, p.applications["shop/web"].rollout)
    p = loads(app('{ strategy = "blue_green" }'))
    assert.are.same({ strategy = "blue_green", steps = { { weight = 0, line = 1 }, { pause = true, line = 1 },
      { weight = 100, line = 1 } } }, p.applications["shop/web"].rollout)
    p = loads(app('{ strategy = "all" }'))
    assert.are.same({ strategy = "all" }, p.applications["shop/web"].rollout)
  end)

  it("refuses the same mistakes at the application's line, naming the key", function()
    assert.are.same({ 'F:1: application "shop/web": rollout.steps: only for strategy "canary" ' ..
      "(this rollout sets no strategy)" }, errors_of(app("{ steps = { { weight = 100 } } }")))
    assert.are.same({ 'F:1: application "shop/web": rollout.steps[2].weight: 20 is less than the weight ' ..
      "before it (30, steps[1]): weights never decrease" },
      errors_of(app('{ strategy = "canary", steps = { { weight = 30 }, { weight = 20 }, { weight = 100 } } }')))
    assert.are.same({ 'F:1: application "shop/web": rollout.steps: the last weight step must be 100: the ' ..
      "release ends with all traffic" }, errors_of(app('{ strategy = "canary", steps = { { weight = 30 } } }')))
    assert.are.same({ 'F:1: application "shop/web": rollout.steps[1].analysis: "gone": no such analysis ' ..
      "(declared: none)" },
      errors_of(app('{ strategy = "canary", steps = { { analysis = "gone" }, { weight = 100 } } }')))
    assert.are.same({ 'F:1: application "shop/web": rollout.strategy: "rolling": must be "all", "canary" ' ..
      'or "blue_green"' }, errors_of(app('{ strategy = "rolling" }')))
    assert.are.same({ 'F:1: application "shop/web": rollout.pause: only for strategy "blue_green" ' ..
      "(this rollout sets no strategy)" }, errors_of(app("{ pause = true }")))
  end)
end)

describe("canary.plan(pol, p)", function()
  it("is the application's own plan when its rollout sets a strategy, else the global one, nil for all", function()
    local p = loads('rollout { strategy = "canary", steps = { { weight = 10 }, { weight = 100 } } }\n' ..
      'application "shop/web" { environments = { "prod" }, rollout = { strategy = "blue_green" } }\n' ..
      'application "shop/api" { environments = { "prod" }, rollout = { on_failure = "rollback" } }\n' ..
      'application "shop/old" { environments = { "prod" }, rollout = { strategy = "all" } }\n')
    assert.are.same({ { weight = 0, line = 2 }, { pause = true, line = 2 }, { weight = 100, line = 2 } },
      canary.plan(p, { namespace = "shop", application = "web" }))
    assert.are.same({ { weight = 10, line = 1 }, { weight = 100, line = 1 } },
      canary.plan(p, { namespace = "shop", application = "api" }))
    assert.are.same(p.rollout.steps, canary.plan(p, { namespace = "other", application = "undeclared" }))
    assert.is_nil(canary.plan(p, { namespace = "shop", application = "old" }))
    assert.is_nil(canary.plan(loads(""), { namespace = "shop", application = "web" }))
    local q = loads('application "shop/web" { environments = { "prod" }, rollout = { strategy = "blue_green" } }\n')
    assert.are.equal(3, #canary.plan(q, { namespace = "shop", application = "web" }))
    assert.is_nil(canary.plan(q, { namespace = "shop", application = "api" }))
  end)

  it("finds the application as oops.release does (app_of)", function()
    local p = loads('application "shop/web" { environments = { "prod" } }\n')
    assert.are.equal(p.applications["shop/web"], canary.app_of(p, { namespace = "shop", application = "web" }))
    assert.is_nil(canary.app_of(p, { namespace = "shop", application = "api" }))
    assert.is_nil(canary.app_of(nil, { namespace = "shop", application = "web" }))
  end)
end)

describe('analysis "NAME"', function()
  it("is normalized with its defaults, its file and line", function()
    local p = loads("\n" .. ANALYSIS)
    local a = p.analyses.errors
    assert.are.equal("function", type(a.success))
    assert.is_true(a.success(0.001))
    assert.is_false(a.success(0.5))
    a.success = nil
    assert.are.same({ name = "errors", prometheus = "http://127.0.0.1:9090",
      query = 'sum(rate(x{app="{application}",env="{environment}"}[1m]))', interval_ms = 30000, count = 3,
      failure_limit = 0, inconclusive = "pause", file = path, line = 2 }, a)
    assert.are.same({ interval = "30s", count = 3, failure_limit = 0, inconclusive = "pause" },
      policy.DEFAULTS.analysis)
  end)

  it("takes every key", function()
    local p = loads('analysis "p99-latency" { prometheus = "https://prom.example:9090/sub", token = ' ..
      '"/etc/oopsd/prometheus-token", query = [[histogram_quantile(0.99, x{app="{application}"})]], ' ..
      'success = function(v) return v < 0.3 end, interval = "1m", count = 100, failure_limit = 99, ' ..
      'inconclusive = "fail" }\n')
    local a = p.analyses["p99-latency"]
    assert.are.same({ "https://prom.example:9090/sub", "/etc/oopsd/prometheus-token", 60000, 100, 99, "fail" },
      { a.prometheus, a.token, a.interval_ms, a.count, a.failure_limit, a.inconclusive })
  end)

  it("requires prometheus, query and success", function()
    assert.are.same({
      'F:1: analysis "errors": prometheus: required (the Prometheus base URL)',
      'F:1: analysis "errors": query: required (a PromQL query whose value success judges)',
      'F:1: analysis "errors": success: required, like success = function(v) return v < 0.01 end',
    }, errors_of('analysis "errors" {}\n'))
  end)

  it("refuses each bad value, naming the key", function()
    local function one(body)
      return errors_of('analysis "errors" { prometheus = "http://127.0.0.1:9090", query = "up", ' ..
        "success = function(v) return v > 0 end, " .. body .. " }\n")
    end
    local CASES = {
      { 'prometheus = "ftp://x"', 'prometheus: "ftp://x": must be an http:// or https:// URL' },
      { 'token = "prometheus-token"', 'token: "prometheus-token": must be the absolute path of a file holding ' ..
        'the bearer token (like "/etc/oopsd/prometheus-token")' },
      { 'query = ""', 'query: "": must be a non-empty string (a PromQL query)' },
      { "query = string.rep('x', 4097)", "query: 4097 bytes: at most 4096" },
      { 'success = "v < 0.01"', 'success: must be a function (value) -> boolean, like success = function(v) ' ..
        'return v < 0.01 end, not a string' },
      { 'interval = "500ms"', 'interval: "500ms": must be at least 1s' },
      { "count = 0", "count: 0: must be a whole number from 1 to 100" },
      { "count = 101", "count: 101: must be a whole number from 1 to 100" },
      { "failure_limit = -1", "failure_limit: -1: must be a whole number from 0 to 100" },
      { "failure_limit = 3", "failure_limit: 3 is not below count 3: the analysis could never fail" },
      { 'inconclusive = "pass"', 'inconclusive: "pass": must be "pause" or "fail"' },
      { "threshold = 1", 'unknown key "threshold" (known: count, failure_limit, inconclusive, interval, ' ..
        "prometheus, query, success, token)" },
    }
    for _, c in ipairs(CASES) do
      assert.are.same({ 'F:1: analysis "errors": ' .. c[2] }, one(c[1]), c[1])
    end
    -- the query itself takes up to 4096 bytes
    assert(loads('analysis "errors" { prometheus = "http://127.0.0.1:9090", query = string.rep("x", 4096), ' ..
      "success = function(v) return v > 0 end }\n"))
  end)

  it("has a lowercase DNS label for a name, declared once across files", function()
    assert.are.same({ 'F:1: analysis "Errors": name must be lowercase letters, digits and "-" ' ..
      '(like "errors")' }, errors_of(ANALYSIS:gsub('"errors"', '"Errors"', 1)))
    local a, b = write(ANALYSIS), write("\n" .. ANALYSIS)
    local _, errs = policy.load_files({ a, b }, OPTS)
    assert.are.same({ b .. ':2: analysis "errors": already declared at ' .. a .. ":1" }, errs)
    assert.are.same({ 'F:1: analysis: expects a name and a table, like analysis "errors" { prometheus = ' ..
      '"http://127.0.0.1:9090", query = "...", success = function(v) return v < 0.01 end }' },
      errors_of("analysis { }\n"))
  end)

  it("is a block of its own that policy.keys() lists (so oopsd.policy(5) must document it)", function()
    local listed = {}
    for _, k in ipairs(policy.keys()) do listed[k[1] .. " " .. k[2]] = true end
    for _, key in ipairs({ "analysis prometheus", "analysis token", "analysis query", "analysis success",
      "analysis interval", "analysis count", "analysis failure_limit", "analysis inconclusive",
      "rollout strategy", "rollout steps", "rollout analysis", "rollout pause",
      "application rollout.strategy", "application rollout.steps", "application rollout.analysis",
      "application rollout.pause", "application weight", "application timeouts.weight", "placeholder {weight}" }) do
      assert(listed[key], key .. " is not listed")
    end
  end)
end)

describe("an analysis query's placeholders", function()
  local function query_errors(q)
    return errors_of('analysis "errors" { prometheus = "http://127.0.0.1:9090", query = ' .. q ..
      ", success = function(v) return v > 0 end }\n")
  end
  local function why(text) return { 'F:1: analysis "errors": query: ' .. text } end

  it("takes the five inside double-quoted strings, and PromQL's own braces anywhere", function()
    for _, q in ipairs({
      '[[up{app="{application}", env="{environment}", ns="{namespace}", v="{artifact}", p="{id}"}]]',
      [=[[[x{a="pre-{application}-post", b=~"{application}|\"{environment}\""}]]]=],
      [=[[[sum by (code) (rate(x{job='api'}[5m])) > 2]]]=],
      '[[x{a=`raw`} # a comment with { and }]]',
      '[[x{a="{id}"} # it\'s a comment: "quotes" need not pair\n+ y{b="{artifact}"}]]',
    }) do
      assert(loads('analysis "errors" { prometheus = "http://127.0.0.1:9090", query = ' .. q ..
        ", success = function(v) return v > 0 end }\n"), q)
    end
  end)

  it("refuses one outside a quoted string, or in a single-quoted or raw one", function()
    assert.are.same(why("{application} outside a quoted string: placeholders are filled in as PromQL string " ..
      "contents"), query_errors('[[up{app={application}}]]'))
    assert.are.same(why("{id} outside a quoted string: placeholders are filled in as PromQL string contents"),
      query_errors('[[x{id} + 1]]'))
    assert.are.same(why("{application} inside a '...' or `...` string: only a double-quoted string may hold a " ..
      "placeholder (its escaping is the one filled in)"), query_errors([=[[[up{app='{application}'}]]]=]))
    assert.are.same(why("{application} inside a '...' or `...` string: only a double-quoted string may hold a " ..
      "placeholder (its escaping is the one filled in)"), query_errors('[[up{app=`{application}`}]]'))
  end)

  it("refuses an unknown {name}, inside strings or out", function()
    local known = "(known: {application}, {artifact}, {environment}, {id}, {namespace})"
    assert.are.same(why("unknown placeholder {app} " .. known), query_errors('[[up{app="{app}"}]]'))
    assert.are.same(why("unknown placeholder {weight} " .. known), query_errors('[[x{weight}]]'))
  end)

  it("refuses a string literal never closed", function()
    assert.are.same(why('a string literal opened with " is never closed'), query_errors([=[[[up{app="x}]]]=]))
    assert.are.same(why('a string literal opened with " is never closed'),
      query_errors([=[[[up{app="x\"}]]]=]))
    assert.are.same(why("{id} outside a quoted string: placeholders are filled in as PromQL string contents"),
      query_errors('[[up # "{id}"]]'))
  end)
end)

describe("canary.fill(query, p)", function()
  local P = { application = "web", environment = "prod", namespace = "shop", artifact = "v1.2", id = "p1" }
  local function with(fields)
    local p = {}
    for k, v in pairs(P) do p[k] = v end
    for k, v in pairs(fields) do p[k] = v end
    return p
  end

  it("fills each placeholder inside double-quoted strings", function()
    assert.are.equal('up{app="web",env="prod",ns="shop",v="v1.2",id="p1",x="web-web"}',
      canary.fill('up{app="{application}",env="{environment}",ns="{namespace}",v="{artifact}",id="{id}",' ..
        'x="{application}-{application}"}', P))
  end)

  it("escapes quotes, backslashes, newlines and other control characters as string contents", function()
    assert.are.equal([[x{v="a\"b"}]], canary.fill('x{v="{artifact}"}', with({ artifact = 'a"b' })))
    assert.are.equal([[x{v="a\\b"}]], canary.fill('x{v="{artifact}"}', with({ artifact = "a\\b" })))
    assert.are.equal([[x{v="a\nb"}]], canary.fill('x{v="{artifact}"}', with({ artifact = "a\nb" })))
    assert.are.equal([[x{v="a\x09b\x00\x0d\x7f"}]],
      canary.fill('x{v="{artifact}"}', with({ artifact = "a\tb\0\r\127" })))
    assert.are.equal('x{v="héllo"}', canary.fill('x{v="{artifact}"}', with({ artifact = "héllo" })))
  end)

  it("keeps a hostile artifact inside its string", function()
    local hostile = '"} or vector(0) # \\"\n{job="'
    local q = canary.fill('sum(x{app="{application}",v="{artifact}"}) / 1', with({ artifact = hostile }))
    assert.are.equal([[sum(x{app="web",v="\"} or vector(0) # \\\"\n{job=\""}) / 1]], q)
    -- the filled query still has exactly the query's string literals
    local n = 0
    for _ in q:gsub('\\.', ""):gmatch('"[^"]*"') do n = n + 1 end
    assert.are.equal(2, n)
  end)

  it("leaves everything but placeholders in double-quoted strings as written", function()
    local q = [=[x{a='{application}', b=`{application}`, c="\"{application}\""} + {application}]=]
    assert.are.equal([=[x{a='{application}', b=`{application}`, c="\"web\""} + {application}]=], canary.fill(q, P))
    assert.are.equal('x{a="{other}"}', canary.fill('x{a="{other}"}', P))
    assert.are.equal('x{a="p1"} # "{id}"\n+ y{b="v1.2"}',
      canary.fill('x{a="{id}"} # "{id}"\n+ y{b="{artifact}"}', P))
  end)

  it("wants every field it fills", function()
    assert.has_error(function() canary.fill('x{v="{artifact}"}', with({ artifact = false })) end,
      "canary.fill: p.artifact must be a string, not a boolean")
    assert.are.equal('x{v="7"}', canary.fill('x{v="{id}"}', with({ id = 7 })))
    assert.are.equal('x{v="web"}', canary.fill('x{v="{application}"}', { application = "web" }))
  end)
end)

describe("the exec gateway's weight command", function()
  local function app(extra)
    return 'gateway "exec" {}\napplication "shop/web" { environments = { "prod" }, build = { "true" }, ' ..
      'deploy = { "./deploy.sh" }, health = { "./health.sh" }' .. (extra or "") .. " }\n"
  end

  it("is an argv with {weight} and the pipeline's placeholders, its timeout like deploy's", function()
    local a = loads(app(', weight = { "./weight.sh", "{application}", "{environment}", "--weight={weight}", ' ..
      '"{artifact}", "{id}", "{namespace}" }, timeouts = { weight = "2m" }')).applications["shop/web"]
    assert.are.same({ "./weight.sh", "{application}", "{environment}", "--weight={weight}", "{artifact}", "{id}",
      "{namespace}" }, a.weight)
    assert.are.equal(120000, a.timeout_ms.weight)
    a = loads(app()).applications["shop/web"]
    assert.is_nil(a.weight)
    assert.are.equal(300000, a.timeout_ms.weight)
    assert.are.equal(policy.app_timeout_default("weight"), a.timeout_ms.weight)
  end)

  it("offers {weight} to no other command", function()
    local errs = errors_of(app(', weight = "./weight.sh {weight}"'))
    assert.are.same({ 'F:2: application "shop/web": weight: must be an argv list of strings like ' ..
      '{"make", "image"}, not a string (commands never run through a shell)' }, errs)
    errs = errors_of(app(', restart_command = { "./r.sh", "{weight}" }'):gsub('"%./deploy%.sh"',
      '"./deploy.sh", "{weight}"'))
    assert.are.same({
      'F:2: application "shop/web": deploy: argument 2: "{weight}": unknown placeholder {weight} ' ..
        "(known: {application}, {artifact}, {environment}, {id}, {namespace}, {trigger})",
      'F:2: application "shop/web": restart_command: argument 2: "{weight}": unknown placeholder {weight} ' ..
        "(known: {application}, {environment}, {namespace})",
      'F:2: application "shop/web": deploy: required by gateway "exec"',
    }, errs)
    errs = errors_of(app(', weight = { "./w.sh", "{source}" }'))
    assert.are.same({ 'F:2: application "shop/web": weight: argument 2: "{source}": unknown placeholder ' ..
      "{source} (known: {application}, {artifact}, {environment}, {id}, {namespace}, {trigger}, {weight})" }, errs)
  end)

  it('is required by gateway "exec" for a canary or blue_green plan, its own or the global one', function()
    assert.are.same({ 'F:2: application "shop/web": weight: required by gateway "exec" for a "canary" ' ..
      "rollout (it sets the new release's share of traffic)" },
      errors_of(app() .. 'rollout { strategy = "canary", steps = { { weight = 50 }, { weight = 100 } } }\n'))
    assert.are.same({ 'F:2: application "shop/web": weight: required by gateway "exec" for a ' ..
      "\"blue_green\" rollout (it sets the new release's share of traffic)" },
      errors_of(app(', rollout = { strategy = "blue_green" }')))
    assert(loads(app(', rollout = { strategy = "all" }') .. 'rollout { strategy = "blue_green" }\n'))
    assert(loads(app(', weight = { "./w.sh", "{weight}" }') .. 'rollout { strategy = "blue_green" }\n'))
  end)
end)
