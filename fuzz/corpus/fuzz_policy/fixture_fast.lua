-- Fast cadences for integration tests: everything moves within seconds.
scan    { interval = "300ms" }
deploy  { timeout = "6s" }
rollout { timeout = "4s" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "1s", deploy = "0s", rollout = "500ms" }
