restarts { timezone = "Europe/Paris", grace = "2m" }
alert {
  cpu = { percent = 95, sustained = "10m" },
  memory = { percent = 90, sustained = "5m" },
  every = "30m", interval = "1s",
  probe = { prometheus = "http://127.0.0.1:9090", scrape_interval = "30s", token = "t" },
}
notify { webhook = "https://hooks.example.com/oops", retry = { initial = "1s", max = "1m" } }
notify { command = { "/usr/local/bin/page", "--team", "shop" }, log = true }
locks { validate_every = "1s", session_timeout = "server" }
