-- What the engine writes into pipeline messages and events (REFERENCE.md
-- sections 4, 6 and 10, in English). Kept in one place so tests, docs and
-- notifications agree on the wording.
return {
  build_started     = "Build started.",
  build_succeeded   = "Image built, waiting for a manual release.",
  build_failed      = "Image build failed, see the pipeline log.",
  build_not_submitted = "Build could not be submitted: ",   -- .. the gateway's error
  build_timed_out   = "Build timed out: still running after the build timeout.",
  build_missing     = "Build failed: build job missing (deleted, reaped, or its server died).",
  deploying         = "The release has entered the deploy phase.",
  rolling_out       = "Waiting for the new version to take effect…",
  succeeded         = "The application was released successfully.",
  workload_missing  = "Deployment failed: the workload does not exist.",
  deploy_failed     = "Deployment failed: ",          -- .. reason
  rollout_timed_out = "Release timed out: the new version was not ready in time.",
  rollout_max       = "Release timed out: the rollout did not settle within rollout.max " ..
                      "(its readiness kept changing).",
  deploy_timed_out  = "Deploy timed out: the pipeline stayed DEPLOYING longer than the deploy timeout " ..
                      "(its server may have died mid-deploy).",
  deploy_refused    = "Deploy refused: another pipeline for this application and environment is unfinished.",
  refused           = "Refused, nothing was run: ",   -- .. why (pipelines.refusal)
}
