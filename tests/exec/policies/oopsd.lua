-- The exec gateway's integration test (tests/integration/exec_gateway.sh):
-- fast scans, short timeouts, and commands that run next to these files
-- (the exec gateway runs every command in the policy directory).
scan    { interval = "500ms" }
deploy  { timeout = "20s" }
rollout { timeout = "20s" }

gateway "exec" {}
