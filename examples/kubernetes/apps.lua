-- luacheck: std policy
-- apps.lua: applications deployed to Kubernetes by the k8s-* scripts of this
-- directory, which drive kubectl (README.md says what each does, the RBAC
-- they need and every variable).
--
--   build            an external build: submit starts a Kubernetes Job and
--                    prints its handle (NAMESPACE/JOBNAME); status and cancel
--                    get that handle as {job}. Any server can poll it.
--   deploy           kubectl apply of the Deployment with the new image
--   health           exit 0 rolled out, 1 not yet, 2 no Deployment, 3 failed
--                    (ImagePullBackOff, ErrImagePull, CrashLoopBackOff)
--   restart_command  kubectl rollout restart
--   env              the scripts' settings (K8S_*) and KUBECONFIG: commands
--                    inherit nothing else from oopsd (names OOPS_* are the
--                    engine's own and refused here)

-- Settings every application shares; each application adds its own below.
local cluster = {
  KUBECONFIG          = "/etc/oopsd/kubeconfig",  -- a service account's token (README.md: RBAC)
  K8S_BUILD_NAMESPACE = "oops-build",             -- where build Jobs run
  K8S_BUILD_TEMPLATE  = "build-job.yaml",         -- kaniko, pushing with the Secret registry-push
  K8S_LAYOUT          = "namespace-per-environment", -- shop/api in prod: Deployment "api" in namespace "shop-prod"
}

local function settings(extra)
  local t = {}
  for k, v in pairs(cluster) do t[k] = v end
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

-- The same commands for every application: the placeholders say which.
local k8s_build = {
  submit = { "./k8s-build", "submit", "{namespace}", "{application}", "{id}", "{artifact}",
             "{source.repo}", "{source.ref}" },
  status = { "./k8s-build", "status", "{job}" },
  cancel = { "./k8s-build", "cancel", "{job}" },
}
local k8s_deploy = { "./k8s-deploy", "{namespace}", "{application}", "{environment}", "{artifact}", "{id}" }
local k8s_health = { "./k8s-health", "{namespace}", "{application}", "{environment}" }
local k8s_restart = { "./k8s-restart", "{namespace}", "{application}", "{environment}" }

-- A web API: its Deployment starts from deployment-api.yaml (ports, probes,
-- resources); restarted every night at 03:00 in prod.
application "shop/api" {
  environments    = { "staging", "prod" },
  build           = k8s_build,
  deploy          = k8s_deploy,
  health          = k8s_health,
  restart_command = k8s_restart,
  restart         = { prod = "0 3 * * *" },
  limits          = { cpu = "2", memory = "4Gi" },
  timeouts        = { submit = "1m", status = "30s", cancel = "1m", deploy = "2m", health = "30s", restart = "1m" },
  env             = settings { K8S_DEPLOYMENT_TEMPLATE = "deployment-api.yaml" },
}

-- A background worker: a generated Deployment (one container "worker", the
-- image only), two replicas.
application "shop/worker" {
  environments    = { "staging", "prod" },
  build           = k8s_build,
  deploy          = k8s_deploy,
  health          = k8s_health,
  restart_command = k8s_restart,
  limits          = { cpu = "500m", memory = "512Mi" },
  env             = settings { K8S_REPLICAS = "2" },
}

-- A canary (README.md, "Canary"): each release runs as the Deployment
-- web-canary beside the stable web (K8S_CANARY=1 in its env: k8s-deploy and
-- k8s-health work on web-canary), and k8s-weight shifts ingress-nginx's
-- canary weight: 10 %, judged by the analysis "errors", 50 %, ten minutes,
-- judged again, then promoted (the stable web takes the image). A failed
-- analysis or `oopsctl abort` sets the weight to 0; the pipeline then fails.
analysis "errors" {
  prometheus = "http://prometheus.monitoring:9090",
  -- ingress-nginx (1.0.5 and later) counts the requests it sends to a canary
  -- under the stable Ingress's name ("web"), labelled canary="<the canary's
  -- upstream>" (empty for the stable's): the canary's share of 5xx answers
  -- over the last minute. (A scrape that keeps the controller pod's own
  -- namespace label renames this one exported_namespace.)
  query = [[sum(rate(nginx_ingress_controller_requests{namespace="{namespace}-{environment}",
              ingress="{application}",canary!="",status=~"5.."}[1m]))
            / sum(rate(nginx_ingress_controller_requests{namespace="{namespace}-{environment}",
              ingress="{application}",canary!=""}[1m]))]],
  success = function(v) return v < 0.01 end,
  interval = "1m", count = 5, failure_limit = 1,
}

application "shop/web" {
  environments    = { "staging", "prod" },
  build           = k8s_build,
  -- {trigger}: a rollback (no canary steps) deploys to the stable web
  deploy          = { "./k8s-deploy", "{namespace}", "{application}", "{environment}", "{artifact}", "{id}",
                      "{trigger}" },
  health          = { "./k8s-health", "{namespace}", "{application}", "{environment}", "{trigger}" },
  weight          = { "./k8s-weight", "{namespace}", "{application}", "{environment}", "{artifact}", "{id}",
                      "{weight}" },
  limits          = { cpu = "1", memory = "1Gi" },
  timeouts        = { submit = "1m", status = "30s", cancel = "1m", deploy = "2m", health = "30s", weight = "5m" },
  env             = settings { K8S_CANARY = "1", K8S_REPLICAS = "2" },
  rollout         = { strategy = "canary", steps = {
    { weight = 10 }, { analysis = "errors" }, { weight = 50 }, { pause = "10m" }, { analysis = "errors" },
    { weight = 100 } } },
}
