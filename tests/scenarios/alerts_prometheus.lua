-- The alert scan's Prometheus probe (lua/oops/probes/prometheus.lua)
-- against a real Prometheus (Debian's, the one the canaries' analyses ask):
-- it scrapes the pods' use the scenario sets (container_cpu_usage_seconds_total,
-- container_memory_working_set_bytes), and the probe's queries (REFERENCE.md
-- §8: min_over_time over the sustained window, the pods APPLICATION-N of
-- the namespace) decide. A pod over its threshold fires once, with that pod
-- only; a pod of another application whose name begins alike is not one of
-- them; memory fires on its own; back under, resolved once; Prometheus
-- unreachable changes nothing.
local cjson = require("cjson")

local prom = prometheus()

local POLICY = ([[
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "1s", deploy = "0s", rollout = "300ms" }
alert   { interval = "1s", cpu = { percent = 50, sustained = "2s" }, memory = { percent = 50, sustained = "0s" },
          every = "1h", probe = { prometheus = %q, scrape_interval = "1s" } }
application "shop/api" { environments = { "prod" }, limits = { cpu = "1", memory = "1Gi" } }
]]):format(prom.url)

local MI = 1024 * 1024
-- Before the servers start: every series exists from the first scrape.
pod_use("shop", "api-1", { cpu = 100, memory = 100 * MI })
pod_use("shop", "api-2", { cpu = 100, memory = 100 * MI })
pod_use("shop", "apiary-1", { cpu = 100, memory = 100 * MI }) -- another application's pod
pod_use("web", "api-1", { cpu = 100, memory = 100 * MI })     -- another namespace's

local all = servers { count = 2, policy = POLICY }

local edges, count = alert_edges, alert_count
local function probed_ok()
  for _, s in ipairs(all) do
    if s:log():find("alert probe failed", 1, true) then return false, s.name end
  end
  return true
end

local CPU, MEM = "shop/api/prod/cpu", "shop/api/prod/memory"

-- 1. Under the thresholds (500 millicores, 512 MiB): the probe answers, nothing fires.
sleep(4)
expect(#edges(CPU) == 0 and #edges(MEM) == 0, "every pod under its thresholds: no alert",
  cjson.encode { edges(CPU), edges(MEM) })
expect(probed_ok(), "the probe's queries were answered (no probe failure logged)")

-- 2. CPU over the threshold: one FIRING, naming that pod only. The other
-- application's pod (apiary-1) and the other namespace's api-1 are over too
-- and are not this application's.
pod_use("shop", "apiary-1", { cpu = 900 })
pod_use("web", "api-1", { cpu = 900 })
pod_use("shop", "api-2", { cpu = 800 })
wait_until("api-2 over 500m for 2 s fires the CPU alert", function() return count(CPU, "FIRING") >= 1 end, 30)
sleep(3)
local fired = edges(CPU)
expect(#fired == 1 and fired[1].edge == "FIRING", "announced exactly once", cjson.encode(fired))
expect(#fired[1].pods == 1 and fired[1].pods[1] == "api-2",
  "... naming api-2 alone (not apiary-1, not web's api-1)", cjson.encode(fired[1].pods))
expect(fired[1].threshold == 500 and fired[1].limit == 1000, "... threshold 500m of 1000m",
  cjson.encode(fired[1]))
expect(#edges(MEM) == 0, "memory still under: no memory alert", cjson.encode(edges(MEM)))

-- 3. Memory over 512 MiB: its own alert.
pod_use("shop", "api-1", { memory = 700 * MI })
wait_until("api-1's memory over 512 MiB fires the memory alert", function() return count(MEM, "FIRING") >= 1 end, 30)
local mem = edges(MEM)
expect(#mem == 1 and #mem[1].pods == 1 and mem[1].pods[1] == "api-1", "the memory alert names api-1 once",
  cjson.encode(mem))

-- 4. Memory back under: RESOLVED, once.
pod_use("shop", "api-1", { memory = 100 * MI })
wait_until("api-1's memory back under resolves the memory alert", function() return count(MEM, "RESOLVED") >= 1 end,
  30)
sleep(2)
mem = edges(MEM)
expect(#mem == 2 and mem[2].edge == "RESOLVED", "FIRING then RESOLVED, each once", cjson.encode(mem))

-- 5. Prometheus stopped: probe errors change nothing (no RESOLVED though
-- api-2 is back under), and the leader logs them.
prom.prom:stop()
pod_use("shop", "api-2", { cpu = 50 })
wait_until("the leader logs the probe's failure", function() return not probed_ok() end, 15)
sleep(3)
expect(count(CPU, "RESOLVED") == 0 and #edges(CPU) == 1, "Prometheus away: the CPU alert stays as it was",
  cjson.encode(edges(CPU)))
local st = sql("SELECT firing FROM alert_state WHERE namespace = 'shop' AND application = 'api' AND metric = 'cpu'")[1]
expect(st and tonumber(st.firing) == 1, "alert_state: still firing")
