-- apps.lua: the applications oopsd drives.
--
-- One block per application, named "namespace/application" (lowercase
-- letters, digits and "-"), as in `oopsctl create --app shop/api`.
--
--   environments     where it can be deployed; a pipeline names one.
--   build, deploy,   argv lists, run by the "exec" gateway (and required by
--   health,          it); never a shell string, so nothing is ever quoted
--   restart_command  or expanded. Placeholders: {namespace} {application}
--                    {environment}, plus {artifact} {id} (the pipeline) for build,
--                    deploy and health, plus {source.KEY} and {source} (the
--                    pipeline's --source JSON) for build; a missing KEY fails
--                    the pipeline before anything runs. The "simulated"
--                    gateway ignores them.
--                    A one-command build is a child process of the server
--                    that drives the pipeline: if that server dies, the next
--                    driver finds the build missing and fails the pipeline.
--                    For builds that must outlive servers, declare an
--                    external build: build = { submit = {...}, status =
--                    {...}, cancel = {...} }. submit prints a job handle as
--                    its last output line; status and cancel get it as {job}.
--                    status exits 0 succeeded, 1 running (or not started), 2
--                    missing, 3 failed (anything else: asked again next tick,
--                    within build.timeout). cancel runs once, on one server,
--                    when the pipeline is stopped or its build times out;
--                    stopping oopsd never cancels.
--   restart          a cron schedule per environment ("0 3 * * *" = 03:00
--                    daily; 5 fields, or 6 with seconds first). One server
--                    fires each restart once.
--   limits           the pods' limits, with units: cpu "500m" or "2"
--                    (cores), memory "512Mi", "4Gi" or "1G". Resource alerts
--                    fire at a percentage of these; no limit, no alert.
--   windows          when it may deploy, per environment: { prod = {
--                    "Mon-Fri 09:00-17:00", "Sat 10:00-12:00" } }: days (Mon
--                    .. Sun, ranges Mon-Fri, lists Sat,Sun, or daily) and
--                    [start, end) on the wall clock of deploy.timezone, at
--                    most 32 per environment. Outside them a pipeline waits,
--                    saying when the next one opens. Default: none (any time).
--   rollout          { on_failure = "rollback" }: its own rollout.on_failure;
--                    { strategy = "canary", steps = { ... } }: its own plan
--                    (oopsd.lua's rollout), even { strategy = "all" }.
--   weight           the exec gateway's command setting a canary's share of
--                    the traffic, {weight} (0 to 100): { "./weight.sh",
--                    "{environment}", "{weight}" }; timeouts.weight default 5m.
--   timeouts         how long each command may run before it is killed.
--                    Defaults: build as build.timeout, deploy 5m (at most
--                    deploy.timeout), health 30s, restart 1m; an external
--                    build's submit 1m, status 30s, cancel 1m.
--   env              variables for its commands, { NAME = "value" }. Commands
--                    never inherit oopsd's environment: they get PATH, HOME,
--                    USER, LOGNAME, LANG, LANGUAGE, LC_*, TZ, TMPDIR, then
--                    this, then OOPS_PIPELINE, OOPS_NAMESPACE, ... (OOPS_* are
--                    the engine's). A host variable: { KUBECONFIG =
--                    os.getenv("KUBECONFIG") }. OOPS_DB* is never readable.
--
-- oopsd drives only what is declared here: a pipeline for another
-- application or environment fails with "Refused, nothing was run".

-- A web API on staging and prod, restarted every night at 03:00 on prod.
application "shop/api" {
  environments    = { "staging", "prod" },
  build           = { "make", "image", "TAG={artifact}" },
  deploy          = { "./deploy.sh", "{artifact}", "{environment}" },
  health          = { "./healthy.sh", "{environment}" },
  restart_command = { "./restart.sh", "{environment}" },
  restart         = { prod = "0 3 * * *" },
  limits          = { cpu = "2", memory = "4Gi" },
  timeouts        = { build = "1h", deploy = "5m", health = "30s", restart = "1m" },
}

-- A background worker with small limits and no restart schedule.
application "shop/worker" {
  environments = { "staging", "prod" },
  build        = { "make", "worker-image", "TAG={artifact}" },
  deploy       = { "./deploy.sh", "{artifact}", "{environment}" },
  health       = { "./healthy.sh", "{environment}" },
  limits       = { cpu = "500m", memory = "512Mi" },
}
