gateway "exec" { workdir = "/srv/deploy" }
application "shop/api" {
  environments = { "staging", "prod" },
  build = { "make", "image", "TAG={artifact}" },
  deploy = { "./deploy.sh", "{artifact}", "{environment}", "{id}" },
  health = { "./healthy.sh", "{namespace}/{application}" },
  restart_command = { "./restart.sh", "{environment}" },
  restart = { prod = "0 30 3 * * MON-FRI", staging = "@daily" },
  limits = { cpu = "0.5", memory = "1.5Gi" },
  timeouts = { build = "1h30m", deploy = "5m", health = "30s", restart = "1m" },
}
