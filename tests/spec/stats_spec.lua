-- The delivery figures' arithmetic (lua/oops/stats): made-up rows, known answers.
-- tests/integration/stats.sh checks the same against the database.
local stats = require("oops.stats")
local json = require("oops.json")

local D, H = 86400, 3600
local NOW = 1796119200 -- 2026-12-01T10:00:00Z

-- A SUCCEEDED row: target, trigger, live (seconds before NOW), lead (seconds before live), extra fields.
local function live(t, trigger, ago, lead, extra)
  local ns, app, env = t:match("^(.-)/(.-)/(.-)$")
  local r = { namespace = ns, application = app, environment = env, trigger_type = trigger, at = NOW - ago,
    created = NOW - ago - lead }
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end
local function failed(t, ago, from, extra)
  local ns, app, env = t:match("^(.-)/(.-)/(.-)$")
  local r = { namespace = ns, application = app, environment = env, trigger_type = "release", at = NOW - ago,
    failed_from = from }
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end
local function figures(l, f, window, want)
  return stats.figures(stats.collect(NOW, l, f), window or 7 * D, want)
end

describe("oops.stats", function()
  describe("parse_window", function()
    it("takes whole days from 1d to 90d", function()
      assert.equal(7 * D, stats.parse_window("7d"))
      assert.equal(90 * D, stats.parse_window("90d"))
      assert.equal(D, stats.parse_window("24h"))
    end)
    it("refuses anything else, saying what", function()
      for _, bad in ipairs({ "2h", "91d", "1d12h", "0d", "soon", "" }) do
        local w, err = stats.parse_window(bad)
        assert.is_nil(w, bad)
        assert.is_string(err)
      end
      assert.matches("whole days from 1d to 90d", select(2, stats.parse_window("91d")))
    end)
  end)

  describe("parse_time", function()
    it("reads RFC 3339 in UTC, with an offset, with a fraction, and Unix seconds", function()
      assert.equal(NOW, stats.parse_time("2026-12-01T10:00:00Z"))
      assert.equal(NOW, stats.parse_time("2026-12-01T11:00:00+01:00"))
      assert.equal(NOW, stats.parse_time("2026-12-01T05:30:00-04:30"))
      assert.equal(NOW + 0.25, stats.parse_time("2026-12-01T10:00:00.25Z"))
      assert.equal(951868799, stats.parse_time("2000-02-29T23:59:59Z"))
      assert.equal(NOW, stats.parse_time(tostring(NOW)))
    end)
    it("gives nil for anything else (the pipeline's creation is used then)", function()
      for _, bad in ipairs({ "2026-13-01T10:00:00Z", "2026-12-01T10:00:00", "2026-12-01", "yesterday",
        "2026-12-01T10:00:00+0100", ("9"):rep(13), ("x"):rep(100) }) do
        assert.is_nil(stats.parse_time(bad), bad)
      end
      assert.is_nil(stats.parse_time(nil))
      assert.is_nil(stats.parse_time(12))
    end)
  end)

  describe("figures", function()
    it("medians (the mean of the middle two for an even count) and p90 (nearest rank)", function()
      local l = {}
      for i = 1, 10 do l[i] = live("a/b/prod", "release", i * H, i * 60) end -- leads 1..10 minutes
      local f = figures(l).fleet
      assert.equal(10, f.deployments)
      assert.equal(330, f.lead_time.median_s) -- (5m + 6m) / 2
      assert.equal(540, f.lead_time.p90_s) -- the 9th of 10
      assert.equal(10 / 7, f.per_day)
      l[11] = live("a/b/prod", "release", 11 * H, 11 * 60)
      assert.equal(360, figures(l).fleet.lead_time.median_s)
      assert.equal(600, figures(l).fleet.lead_time.p90_s) -- ceil(9.9) = the 10th of 11
    end)

    it("takes the lead from the commit time when it is before live, else from creation", function()
      local f = figures({
        live("a/b/prod", "release", H, 60, { committed_at = "2026-12-01T07:00:00Z" }), -- 2h before live
        live("a/b/prod", "release", 2 * H, 60, { committed_at = "2026-12-01T09:30:00Z" }), -- after live: ignored
        live("a/b/prod", "release", 3 * H, 60, { committed_at = "not a time" }),
      }).fleet
      assert.equal(1, f.lead_time.from_source)
      assert.equal(60, f.lead_time.median_s)
      assert.equal(2 * H, f.lead_time.p90_s)
    end)

    it("counts deployments, not changes: builds that failed and rollbacks are not deployments", function()
      local f = figures({
        live("a/b/prod", "release", 5 * H, 60),
        live("a/b/prod", "rollback", 2 * H, 60, { rolled_back = nil }),
      }, {
        failed("a/b/prod", 4 * H, "RUNNING"), -- its build failed
        failed("a/b/prod", 3 * H, "DEPLOYING"),
        failed("a/b/prod", 2.5 * H, "ROLLING_OUT", { rolled_back = NOW - 2.4 * H }), -- counted once
      }).fleet
      assert.equal(1, f.deployments)
      assert.same({ failures = 2, deployments = 3, rate = 2 / 3 }, f.change_failure)
    end)

    it("times a restore to the next release live after the failure, whatever its trigger", function()
      local f = figures({
        live("a/b/prod", "release", 10 * H, 60), -- before the failure: not the restore
        live("a/b/prod", "rollback", 8 * H, 60), -- the restore: 1h after
        live("x/y/prod", "release", 8.5 * H, 60), -- another target
      }, { failed("a/b/prod", 9 * H, "DEPLOYING") }).fleet
      assert.same({ median_s = H, restored = 1, open = 0 }, f.restore)
    end)

    it("a release rolled back is a failure from the rollback's creation", function()
      local f = figures({
        live("a/b/prod", "release", 10 * H, 60, { rolled_back = NOW - 9 * H }),
        live("a/b/prod", "rollback", 8.5 * H, 60),
      }).fleet
      assert.same({ failures = 1, deployments = 1, rate = 1 }, f.change_failure)
      assert.same({ median_s = H / 2, restored = 1, open = 0 }, f.restore)
    end)

    it("a failure with nothing live since is open, not timed", function()
      local f = figures({}, { failed("a/b/prod", H, "DEPLOYING") }).fleet
      assert.same({ median_s = json.null, restored = 0, open = 1 }, f.restore)
      assert.equal(0, f.deployments)
      assert.equal(json.null, f.lead_time.median_s)
    end)

    it("an empty window: zeros where counted, null where there is nothing to divide or sort", function()
      local f = figures({ live("a/b/prod", "release", 8 * D, 60) }, {}, 7 * D)
      assert.equal(0, f.fleet.deployments)
      assert.equal(0, f.fleet.per_day)
      assert.equal(json.null, f.fleet.change_failure.rate)
      assert.equal(json.null, f.fleet.lead_time.p90_s)
      assert.equal(7, #f.series)
      assert.equal(0, #f.targets)
    end)

    it("puts each release on its day, oldest first, and each target apart", function()
      local f = figures({
        live("a/b/prod", "release", 6.5 * D, 60), -- day 1
        live("a/b/prod", "release", 0.5 * D, 60), -- day 7
        live("c/d/staging", "release", 0.25 * D, 60), -- day 7
      })
      assert.equal(1, f.series[1].deployments)
      assert.equal(2, f.series[7].deployments)
      assert.equal("2026-11-24T10:00:00Z", f.series[1].from)
      assert.same({ "a/b/prod", "c/d/staging" }, { f.targets[1].target, f.targets[2].target })
      assert.equal(2, f.targets[1].deployments)
    end)

    it("counts only the targets asked for", function()
      local f = figures({ live("a/b/prod", "release", H, 60), live("c/d/prod", "release", H, 60) }, {}, 7 * D,
        function(t) return t == "c/d/prod" end)
      assert.equal(1, f.fleet.deployments)
      assert.equal(1, #f.targets)
    end)

    it("says when the rows were capped and from when the figures are whole", function()
      local data = stats.collect(NOW, {})
      data.capped, data.whole_since = true, NOW - D
      local f = stats.figures(data, 7 * D)
      assert.is_true(f.capped)
      assert.equal("2026-11-30T10:00:00Z", f.whole_since)
    end)
  end)

  describe("human", function()
    it("shows durations as people read them", function()
      assert.equal("45s", stats.human(45))
      assert.equal("12m", stats.human(720))
      assert.equal("1h 15m", stats.human(4500))
      assert.equal("2d 4h", stats.human(2 * D + 4 * H))
      assert.equal("-", stats.human(json.null))
    end)
  end)
end)
