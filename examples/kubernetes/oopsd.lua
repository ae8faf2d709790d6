-- luacheck: std policy
-- oopsd.lua: the Kubernetes example's scheduling (see README.md). Every
-- declaration left out keeps its default (policies/oopsd.lua explains each).

-- Builds, deploys, rollout checks and restarts run the k8s-* scripts next to
-- these files (commands run in the policy directory).
gateway "exec" {}

-- The original's build Job deadline is 2 hours (activeDeadlineSeconds 7200
-- in k8s-build); oopsd stops waiting for a build at the same bound.
build { timeout = "2h" }

-- A rollout not ready for 5 minutes fails (REFERENCE.md §6); a pipeline left
-- DEPLOYING for 10 minutes (a server died mid-deploy) fails too.
rollout { timeout = "5m" }
deploy { timeout = "10m" }
