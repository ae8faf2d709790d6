-- Applications whose commands are the scripts in tests/exec/ ("../" from
-- here: commands run in the policy directory). Commands do not inherit
-- oopsd's environment (oopsd.policy(5), COMMANDS' ENVIRONMENT), so the
-- state directory the scripts write to reaches them through `env`, read
-- from the test's environment when the policy loads.
local test_env = { EXEC_STATE = os.getenv("EXEC_STATE"), EXEC_ARGS_FILE = os.getenv("EXEC_ARGS_FILE") }

-- What each environment of t/web does is written in the scripts: hold* builds never finish, deployfail
-- deploys fail, gone and sick rollouts fail.
application "t/web" {
  environments    = { "prod", "hold1", "hold2", "hold3", "deployfail", "gone", "sick" },
  build           = { "../build.sh", "{id}", "{environment}", "{namespace}/{application}", "TAG={artifact}" },
  deploy          = { "../deploy.sh", "{id}", "{artifact}", "{environment}" },
  health          = { "../health.sh", "{id}", "{environment}" },
  restart_command = { "../record-args.sh", "restart", "{namespace}/{application}", "{environment}" },
  timeouts        = { build = "1m", deploy = "10s", health = "5s", restart = "5s" },
  env             = test_env,
}

-- Records its build arguments, one per line, in $EXEC_ARGS_FILE: the test
-- reads back exactly what the command received.
application "t/args" {
  environments = { "prod" },
  build        = { "../record-args.sh", "{artifact}", "x{id}y", "{namespace}/{application}@{environment}",
                   "100%", "%1" },
  deploy       = { "../deploy.sh", "{id}", "{artifact}", "{environment}" },
  health       = { "../health.sh", "{id}", "{environment}" },
  env          = test_env,
}

-- A build that fails (exit 2, a compiler error on stderr).
application "t/broken" {
  environments = { "prod" },
  build        = { "../build-fail.sh", "{artifact}" },
  deploy       = { "../deploy.sh", "{id}", "{artifact}", "{environment}" },
  health       = { "../health.sh", "{id}", "{environment}" },
  env          = test_env,
}
