-- oops.policy.alert: the alert block: the CPU and memory thresholds (a
-- percentage held for a while), how often the alert scan probes and an
-- alert repeats, and the probe (simulated, or a Prometheus server).
local show = require("oops.duration").show
local defaults = require("oops.policy.defaults")
local KEYS = require("oops.policy.keys").KEYS
local values = require("oops.policy.values")

local D = defaults.D
local dur, percent, boolean, url, nonempty = values.dur, values.percent, values.boolean, values.url, values.nonempty

local M = { build = {} }
local build = M.build

local function alert_metric(d, t, name, default)
  local m = d:sub(t, name, KEYS["alert." .. name])
  return {
    percent = d:field(m, "percent", percent, default.percent, name .. ".percent"),
    sustained_ms = d:field(m, "sustained", dur(0), default.sustained_ms, name .. ".sustained"),
  }
end

local function alert_probe(d, v)
  local probe = { kind = "simulated", scrape_interval_ms = D.scrape_interval }
  if v == nil or v == "simulated" then return probe end
  if type(v) ~= "table" then
    d:fail("probe", show(v) .. ': must be "simulated" or { prometheus = "http://..." }')
    return probe
  end
  d:only("probe", v, KEYS["alert.probe"])
  if v.prometheus == nil then
    d:fail("probe.prometheus", "required (the Prometheus base URL)")
  end
  probe.kind = "prometheus"
  probe.url = d:field(v, "prometheus", url, nil, "probe.prometheus")
  probe.scrape_interval_ms = d:field(v, "scrape_interval", dur(1000), D.scrape_interval, "probe.scrape_interval")
  probe.token = d:field(v, "token", nonempty, nil, "probe.token")
  return probe
end

function build.alert(d, t)
  d:only(nil, t, KEYS.alert)
  local a = defaults.defaults().alert
  -- Writing an alert block means wanting alerts, unless it says enabled = false.
  a.enabled = d:field(t, "enabled", boolean, true)
  -- How often the alert scan probes: every minute (at its start) unless set
  -- shorter, which tests and scenarios do.
  a.interval_ms = d:field(t, "interval", dur(1000), a.interval_ms)
  a.cpu = alert_metric(d, t, "cpu", a.cpu)
  a.memory = alert_metric(d, t, "memory", a.memory)
  a.every_ms = d:field(t, "every", dur(1000), a.every_ms)
  a.probe = alert_probe(d, t.probe)
  return a
end

return M
