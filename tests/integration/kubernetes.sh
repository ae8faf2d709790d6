# The Kubernetes example (examples/kubernetes/) offline: no API server runs
# here, so nothing is deployed. What is tested:
#   1. the manifests k8s-build and k8s-deploy generate, decoded by kubectl
#      itself into the typed API objects (batch/v1 Job, apps/v1 Deployment)
#      with `kubectl set image --local`: a wrongly typed field is refused, a
#      misplaced or misspelt one is dropped, and the test checks none was.
#      (`kubectl create/apply --dry-run=client` need the server's discovery.)
#   2. the status and health verdicts, on saved `kubectl get -o json`
#      documents (tests/fixtures/kubernetes/, written from the API reference),
#      one per exit code and per failure reason;
#   3. the kubectl calls the scripts make, through a recording stand-in
#      (tests/fixtures/kubernetes/bin/kubectl), and what they do when the real
#      kubectl cannot reach its server (a kubeconfig naming a closed port);
#   4. the whole policy with `oopsd --check`.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/ports.sh"
not_under_sanitizers "shell scripts and kubectl; oopsd only checks the policy"
ex=$OOPS_ROOT/examples/kubernetes
fx=$OOPS_ROOT/tests/fixtures/kubernetes
work=$OOPS_TEST_WORK/kubernetes.$$
mkdir -p "$work"
# The scripts read these; nothing of the caller's may leak in.
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(K8S_|KUBECONFIG$)')
# kubectl keeps its discovery cache under $HOME/.kube: the test's own.
export HOME=$work

skip() { TAP_N=$((TAP_N + 1)); echo "ok $TAP_N # SKIP $1"; }
# run CMD...: OUT (stdout), ERR (stderr), RC; LAST = the last non-blank line
# of stderr, else of stdout, trimmed (what the exec gateway reports).
run() {
  OUT=$("$@" 2>"$work/stderr")
  RC=$?
  ERR=$(cat "$work/stderr")
  LAST=$(printf '%s\n' "$ERR" | awk 'NF { l = $0 } END { print l }')
  [[ -n $LAST ]] || LAST=$(printf '%s\n' "$OUT" | awk 'NF { l = $0 } END { print l }')
  LAST=$(printf '%s' "$LAST" | sed -E 's/^[[:space:]]+|[[:space:]]+$//g')
}
# jq -r FILTER over the JSON in $1 (a string).
q() { printf '%s\n' "$1" | jq -r "$2"; }

if ! command -v kubectl >/dev/null || ! command -v jq >/dev/null; then
  skip "kubectl or jq is not installed (Debian: kubernetes-client, jq): manifests, status and health untested"
  kube=
else
  kube=1
fi

id=k3v9q2m7x1ab
image=registry.example.com/shop/api:1.4.0

# kubectl decodes the manifest into its typed object: prints it back as JSON
# (every container's image replaced by a probe value, so kubectl has a change
# to print), or fails on a wrongly typed field.
typed() { # MANIFEST_JSON
  printf '%s\n' "$1" | KUBECONFIG=/dev/null kubectl set image --local --filename - '*=typed-check.invalid/probe:1' --output json
}
# The scalar fields of $1 that $2 lost or changed (images aside): "[]" when none.
lost() { # ORIGINAL TYPED
  jq -cn --argjson a "$1" --argjson b "$2" \
    '[$a | paths(scalars) | select(.[-1] != "image") | select(. as $p | ($b | getpath($p)) != ($a | getpath($p)))]'
}
# Every selector label is on the pod template.
selects_template() {
  jq -e '.spec.selector.matchLabels as $m | .spec.template.metadata.labels as $l
    | $m | to_entries | all(.[]; $l[.key] == .value)' >/dev/null <<<"$1"
}

if [[ -n $kube ]]; then
  # --- 1. manifests, offline -------------------------------------------------
  export K8S_BUILD_IMAGE=gcr.io/kaniko-project/executor:v1.23.2
  run "$ex/k8s-build" manifest shop api "$id" "$image" git.example.com/shop/api.git main
  is "$RC" 0 "k8s-build manifest prints the build Job"
  job=$OUT
  tjob=$(typed "$job")
  is "$?" 0 "kubectl decodes it as a batch/v1 Job (no wrongly typed field)"
  is "$(lost "$job" "$tjob")" "[]" "... and keeps every field of it (none misplaced or misspelt)"
  is "$(q "$tjob" '[.apiVersion, .kind, .metadata.namespace, .metadata.name] | join(" ")')" \
    "batch/v1 Job oops-build api-pipeline-$id" "the Job is APP-pipeline-ID in the build namespace"
  is "$(q "$tjob" '.spec.backoffLimit')" 0 "backoffLimit 0: no retries"
  is "$(q "$tjob" '.spec.activeDeadlineSeconds')" 7200 "activeDeadlineSeconds 7200: a 2-hour deadline"
  is "$(q "$tjob" '.spec.ttlSecondsAfterFinished')" 259200 "ttlSecondsAfterFinished 259200: removed 3 days after it ends"
  is "$(q "$tjob" '.spec.template.spec.restartPolicy')" Never "restartPolicy Never (a failed pod is not restarted)"
  is "$(q "$tjob" '.metadata.labels["oops.dev/pipeline-id"]')" "$id" "the Job is labelled with the pipeline id"
  is "$(q "$tjob" '.spec.template.metadata.labels["oops.dev/pipeline-id"]')" "$id" "... and so are its pods"
  is "$(q "$tjob" '.metadata.annotations["oops.dev/artifact"]')" "$image" "the artifact is annotated"
  is "$(q "$job" '.spec.template.spec.containers[0] | "\(.name) \(.image)"')" "build $K8S_BUILD_IMAGE" \
    "the container build runs K8S_BUILD_IMAGE"
  is "$(q "$tjob" '[.spec.template.spec.containers[0].env[] | "\(.name)=\(.value)"] | join(" ")')" \
    "BUILD_PIPELINE_ID=$id BUILD_ARTIFACT=$image BUILD_SOURCE_REPO=git.example.com/shop/api.git BUILD_SOURCE_REF=main BUILD_APPLICATION=shop/api" \
    "it gets the pipeline id, artifact and source in its environment"
  is "$(q "$tjob" '.spec | has("suspend")')" false "it is not created suspended"
  is "$(q "$tjob" '.spec.template.spec | has("serviceAccountName")')" false "no service account unless K8S_BUILD_SERVICE_ACCOUNT"

  run env K8S_BUILD_COMMAND='["/kaniko/executor"]' K8S_BUILD_ARGS='["--destination=$(BUILD_ARTIFACT)", "--context=dir:///src"]' \
    K8S_BUILD_SERVICE_ACCOUNT=builder K8S_BUILD_NAMESPACE=ci "$ex/k8s-build" manifest shop api "$id" "$image" r main
  is "$(q "$OUT" '.spec.template.spec.containers[0] | [.command, .args] | tostring')" \
    '[["/kaniko/executor"],["--destination=$(BUILD_ARTIFACT)","--context=dir:///src"]]' \
    "K8S_BUILD_COMMAND and K8S_BUILD_ARGS become the container's command and args, as written"
  is "$(q "$OUT" '"\(.metadata.namespace) \(.spec.template.spec.serviceAccountName)"')" "ci builder" \
    "K8S_BUILD_NAMESPACE and K8S_BUILD_SERVICE_ACCOUNT are used"
  run env K8S_BUILD_ARGS='--destination=x' "$ex/k8s-build" manifest shop api "$id" "$image" r main
  is "$RC" 64 "K8S_BUILD_ARGS that is not a JSON list is refused"
  like "$LAST" "K8S_BUILD_ARGS must be a JSON list of strings" "... saying so"

  # The example's Job template (kaniko, a Secret for the registry).
  run env K8S_BUILD_TEMPLATE="$ex/build-job.yaml" "$ex/k8s-build" manifest shop api "$id" "$image" r main
  is "$RC" 0 "k8s-build starts from K8S_BUILD_TEMPLATE (YAML, read offline)"
  tjob=$(typed "$OUT")
  is "$?" 0 "... and kubectl decodes the result as a Job"
  is "$(lost "$OUT" "$tjob")" "[]" "... keeping every field"
  is "$(q "$tjob" '[.spec.backoffLimit, .spec.activeDeadlineSeconds, .spec.ttlSecondsAfterFinished, .metadata.name] | join(" ")')" \
    "0 7200 259200 api-pipeline-$id" "the fixed fields are set over the template"
  is "$(q "$OUT" '.spec.template.spec.containers[0] | "\(.image) \(.volumeMounts[0].name) \(.env | length)"')" \
    "$K8S_BUILD_IMAGE registry-push 5" "the template's volumes, args and image stay; the BUILD_* variables are added"
  unset K8S_BUILD_IMAGE
  run "$ex/k8s-build" manifest shop api "$id" "$image" r main
  is "$RC" 64 "without K8S_BUILD_IMAGE or a template nothing is built"
  like "$LAST" "K8S_BUILD_IMAGE is not set" "... saying so"
  run env K8S_BUILD_IMAGE=x "$ex/k8s-build" manifest shop api BAD "$image" r main
  is "$RC" 64 "an id outside [a-z0-9] is refused"
  run env K8S_BUILD_IMAGE=x "$ex/k8s-build" manifest shop api "$id" --image=evil r main
  is "$RC" 64 "an artifact starting with - is refused"

  # The checks have teeth: a misspelt field is dropped, a wrong type refused.
  bad=$(q "$job" '.spec.ttlSecondsAfterFinish = 259200 | del(.spec.ttlSecondsAfterFinished)')
  like "$(lost "$bad" "$(typed "$bad")")" 'ttlSecondsAfterFinish"' "(the check finds a misspelt field: kubectl drops it)"
  bad=$(q "$job" '.spec.backoffLimit = "0"')
  typed "$bad" >/dev/null 2>&1
  is "$?" 1 "(the check refuses a wrongly typed field)"

  # The Deployment.
  run "$ex/k8s-deploy" --manifest shop api prod "$image" "$id"
  is "$RC" 0 "k8s-deploy --manifest prints the Deployment"
  dep=$OUT
  tdep=$(typed "$dep")
  is "$?" 0 "kubectl decodes it as an apps/v1 Deployment"
  is "$(lost "$dep" "$tdep")" "[]" "... keeping every field"
  is "$(q "$tdep" '[.apiVersion, .kind, .metadata.namespace, .metadata.name] | join(" ")')" \
    "apps/v1 Deployment shop-prod api" "shop/api in prod is Deployment api in namespace shop-prod (default layout)"
  is "$(q "$tdep" '.metadata.annotations["oops.dev/pipeline-id"]')" "$id" "annotated with the pipeline id"
  like "$(q "$tdep" '.metadata.annotations["oops.dev/rollout-started-at"]')" \
    '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$' "... and the rollout start time (UTC, RFC 3339)"
  is "$(q "$tdep" '.spec.template.metadata.annotations["oops.dev/pipeline-id"]')" "$id" \
    "the pod template carries the pipeline id (each pipeline rolls out new pods)"
  is "$(q "$dep" '.spec.template.spec.containers | map("\(.name) \(.image)") | join(",")')" "api $image" \
    "one container, named after the application, with the artifact as image"
  is "$(q "$tdep" '.spec.replicas')" 1 "one replica by default"
  check "the selector selects the pod template" selects_template "$tdep"
  run env K8S_REPLICAS=2 K8S_LAYOUT=name-per-environment "$ex/k8s-deploy" --manifest shop api prod "$image" "$id"
  is "$(q "$OUT" '"\(.metadata.namespace) \(.metadata.name) \(.spec.replicas)"')" "shop api-prod 2" \
    "K8S_LAYOUT=name-per-environment and K8S_REPLICAS=2"
  run env K8S_REPLICAS=none "$ex/k8s-deploy" --manifest shop api prod "$image" "$id"
  is "$(q "$OUT" '.spec | has("replicas")')" false "K8S_REPLICAS=none leaves spec.replicas to an autoscaler"
  run env K8S_REPLICAS=two "$ex/k8s-deploy" --manifest shop api prod "$image" "$id"
  is "$RC" 64 "K8S_REPLICAS that is not a number is refused"
  run env K8S_LAYOUT=flat "$ex/k8s-deploy" --manifest shop api prod "$image" "$id"
  is "$RC" 64 "an unknown K8S_LAYOUT is refused"

  run env K8S_DEPLOYMENT_TEMPLATE="$ex/deployment-api.yaml" "$ex/k8s-deploy" --manifest shop api prod "$image" "$id"
  is "$RC" 0 "k8s-deploy starts from K8S_DEPLOYMENT_TEMPLATE (YAML, read offline)"
  tdep=$(typed "$OUT")
  is "$?" 0 "... kubectl decodes the result as a Deployment"
  is "$(lost "$OUT" "$tdep")" "[]" "... keeping every field"
  is "$(q "$OUT" '.spec.template.spec.containers[0] | "\(.image) \(.ports[0].containerPort) \(.readinessProbe.httpGet.path)"')" \
    "$image 8080 /healthz" "the template's ports and probes stay; its container gets the artifact"
  is "$(q "$OUT" '"\(.spec.replicas) \(.metadata.annotations["oops.dev/pipeline-id"])"')" "3 $id" \
    "the template's replicas stay; the annotations are added"
  check "... its selector selects its pod template" selects_template "$tdep"
  run env K8S_DEPLOYMENT_TEMPLATE="$ex/deployment-api.yaml" K8S_CONTAINER=sidecar "$ex/k8s-deploy" --manifest shop api prod "$image" "$id"
  is "$RC" 64 "K8S_CONTAINER naming no container of the template is refused"

  # A canary (K8S_CANARY=1): the Deployment NAME-canary beside the stable one,
  # selecting its own pods only; a rollback goes to the stable one.
  run env K8S_CANARY=1 K8S_DEPLOYMENT_TEMPLATE="$ex/deployment-api.yaml" "$ex/k8s-deploy" --manifest shop api prod \
    "$image" "$id"
  is "$RC" 0 "k8s-deploy with K8S_CANARY=1 prints the canary Deployment"
  tdep=$(typed "$OUT")
  is "$?" 0 "... kubectl decodes it as a Deployment"
  is "$(lost "$OUT" "$tdep")" "[]" "... keeping every field"
  is "$(q "$tdep" '"\(.metadata.namespace) \(.metadata.name) \(.metadata.labels["oops.dev/track"])"')" \
    "shop-prod api-canary canary" "it is api-canary, labelled oops.dev/track=canary"
  is "$(q "$tdep" '.spec.selector.matchLabels | to_entries | map("\(.key)=\(.value)") | sort | join(",")')" \
    "app.kubernetes.io/instance=api-canary,app.kubernetes.io/name=api" \
    "its selector is its own (instance api-canary), not the template's: it never adopts the stable pods"
  check "... and selects its pod template" selects_template "$tdep"
  is "$(q "$OUT" '.spec.template.spec.containers[0].image')" "$image" "... whose container runs the release"
  run env K8S_CANARY=1 "$ex/k8s-deploy" --manifest shop api prod "$image" "$id" rollback
  is "$(q "$OUT" '"\(.metadata.name) \(.metadata.labels | has("oops.dev/track"))"')" "api false" \
    "a rollback (TRIGGER rollback) deploys to the stable Deployment, canary or not"
  run env K8S_CANARY=1 K8S_REPLICAS=none "$ex/k8s-deploy" --manifest shop api prod "$image" "$id"
  is "$RC" 64 "K8S_REPLICAS=none with a canary is refused (the last canary was scaled to 0: apply must set a count)"
  run env K8S_CANARY=1 K8S_REPLICAS=none "$ex/k8s-deploy" --manifest shop api prod "$image" "$id" rollback
  is "$RC" 0 "... but not for a rollback, which goes to the stable Deployment"
  run env K8S_CANARY=yes "$ex/k8s-deploy" --manifest shop api prod "$image" "$id"
  is "$RC:$LAST" "64:K8S_CANARY=yes: must be 1 or 0" "K8S_CANARY other than 1 or 0 is refused"
  run "$ex/k8s-deploy" --manifest shop api prod "$image" "$id" promote
  is "$RC:$LAST" '64:trigger "promote" must be release or rollback' "an unknown TRIGGER is refused"

  # --- 2. status and health verdicts on saved documents ------------------------
  status_of() { # FIXTURE -> RC, OUT
    run env K8S_JOB_JSON="$fx/$1" "$ex/k8s-build" status "oops-build/api-pipeline-$id"
  }
  status_of job-succeeded.json
  is "$RC" 0 "status: a Job with succeeded 1 (condition Complete) exits 0"
  status_of job-running.json
  is "$RC" 1 "status: a Job with an active pod exits 1 (running)"
  is "$OUT" "job oops-build/api-pipeline-$id: 1 pod(s) active" "... saying so"
  status_of job-no-status.json
  is "$RC" 1 "status: a Job without a status yet exits 1 (left for the next tick)"
  status_of job-suspended.json
  is "$RC" 1 "status: a suspended Job exits 1 (oopsd's build timeout bounds it)"
  status_of absent
  is "$RC" 2 "status: a Job that does not exist (kubectl prints nothing) exits 2, missing"
  run env K8S_JOB_JSON="$fx/pods-none.json" "$ex/k8s-build" status "oops-build/api-pipeline-$id"
  is "$RC" 2 "status: an empty List reads as missing too"
  status_of job-failed.json
  is "$RC" 3 "status: a Job with failed 1 exits 3"
  is "$OUT" "job oops-build/api-pipeline-$id failed: BackoffLimitExceeded: Job has reached the specified backoff limit" \
    "... naming the Failed condition"
  status_of job-deadline.json
  is "$RC" 3 "status: a Job past its deadline (condition Failed, failed 0) exits 3"
  like "$OUT" "DeadlineExceeded" "... DeadlineExceeded"
  run env K8S_JOB_JSON="$work/no-such-file" "$ex/k8s-build" status "oops-build/api-pipeline-$id"
  is "$RC" 4 "status: kubectl failing exits 4 (a transient error, retried)"
  run env K8S_JOB_JSON="$fx/deployment-complete.json" "$ex/k8s-build" status "oops-build/api-pipeline-$id"
  is "$RC" 4 "status: a document that is no Job exits 4, never a verdict"
  run "$ex/k8s-build" status "api-pipeline-$id"
  is "$RC" 64 "status: a handle without NAMESPACE/ is refused"

  health_of() { # DEPLOYMENT PODS -> RC, OUT, LAST
    run env K8S_DEPLOYMENT_JSON="$fx/$1" K8S_PODS_JSON="$fx/$2" "$ex/k8s-health" shop api prod
  }
  health_of deployment-complete.json pods-ready.json
  is "$RC" 0 "health: observed generation, 3 updated = 3 ready = 3 desired exits 0"
  is "$OUT" "deployment shop-prod/api: 3 of 3 updated and ready" "... saying so"
  health_of deployment-progressing.json pods-rolling.json
  is "$RC" 1 "health: 1 of 3 updated exits 1 (not ready yet)"
  health_of deployment-unobserved.json pods-ready.json
  is "$RC" 1 "health: counts complete but the new generation not observed yet exits 1"
  like "$OUT" "generation 8 not observed yet" "... saying so"
  health_of deployment-new-unready.json pods-none.json
  is "$RC" 1 "health: a new Deployment without a ready pod (readyReplicas absent) exits 1"
  health_of absent pods-none.json
  is "$RC" 2 "health: no Deployment exits 2 (workload missing)"
  health_of deployment-progressing.json pods-imagepullbackoff.json
  is "$RC:$LAST" "3:ImagePullBackOff (api-6d8f7c9b54-7xk2p)" "health: ImagePullBackOff fails as \"REASON (POD)\""
  health_of deployment-progressing.json pods-errimagepull.json
  is "$RC:$LAST" "3:ErrImagePull (api-6d8f7c9b54-7xk2p)" "health: ErrImagePull fails as \"REASON (POD)\""
  health_of deployment-progressing.json pods-crashloop.json
  is "$RC:$LAST" "3:CrashLoopBackOff (api-6d8f7c9b54-bq5nf)" "health: CrashLoopBackOff fails as \"REASON (POD)\""
  health_of deployment-new-unready.json pods-init-crashloop.json
  is "$RC:$LAST" "3:CrashLoopBackOff (api-6d8f7c9b54-7xk2p)" "health: an init container crash-looping fails too"
  health_of deployment-progressing.json pods-old-crashloop.json
  is "$RC" 1 "health: the previous version's pod crash-looping does not fail this rollout"
  health_of deployment-complete.json pods-crashloop.json
  is "$RC" 3 "health: a failure is reported before completeness (the rollout scan's order)"
  run env K8S_DEPLOYMENT_JSON="$work/no-such-file" "$ex/k8s-health" shop api prod
  is "$RC" 1 "health: kubectl failing exits 1 (not ready; retried within the rollout timeout, never failed at once)"

  # --- 3. the kubectl calls, through a recording stand-in ----------------------
  stub=$work/stub
  stubbed() { # CMD... with the stand-in first on PATH, a fresh record
    rm -rf "$stub"
    mkdir -p "$stub"
    for f in "$stub_setup"/*; do [[ -e $f ]] && cp "$f" "$stub/"; done
    run env PATH="$fx/bin:$PATH" KSTUB="$stub" "$@"
  }
  calls() { jq -r 'map(select(startswith("--request-timeout") | not)) | join(" ")' "$stub/calls" 2>/dev/null; }
  answer() { # KEY OUT [RC [ERR]]
    printf '%s' "$2" >"$stub_setup/$1.out"
    [[ -n ${3:-} ]] && echo "$3" >"$stub_setup/$1.rc"
    [[ -n ${4:-} ]] && printf '%s\n' "$4" >"$stub_setup/$1.err"
    return 0
  }
  fresh() { rm -rf "$stub_setup"; mkdir -p "$stub_setup"; }
  stub_setup=$work/stub-setup

  fresh
  answer create "job.batch/api-pipeline-$id created"
  stubbed env K8S_BUILD_IMAGE=busybox "$ex/k8s-build" submit shop api "$id" "$image" r main
  is "$RC" 0 "submit exits 0 once kubectl created the Job"
  is "$(printf '%s\n' "$OUT" | tail -n 1)" "oops-build/api-pipeline-$id" "... the last line of stdout is the handle NAMESPACE/JOBNAME"
  is "$(calls)" "create --filename -" "... kubectl create reads the manifest from stdin"
  is "$(jq -c . "$stub/stdin.1")" \
    "$(env K8S_BUILD_IMAGE=busybox "$ex/k8s-build" manifest shop api "$id" "$image" r main | jq -c .)" \
    "... and what it reads is the manifest tested above"
  fresh
  answer create "" 1 "Error from server (AlreadyExists): error when creating \"STDIN\": jobs.batch \"api-pipeline-$id\" already exists"
  stubbed env K8S_BUILD_IMAGE=busybox "$ex/k8s-build" submit shop api "$id" "$image" r main
  is "$RC:$(printf '%s\n' "$OUT" | tail -n 1)" "0:oops-build/api-pipeline-$id" \
    "a retried submit whose Job exists already prints its handle (the same pipeline's Job)"
  fresh
  answer create "" 1 "Error from server (Forbidden): error when creating \"STDIN\": jobs.batch is forbidden: User \"system:serviceaccount:oops:oopsd\" cannot create resource \"jobs\""
  stubbed env K8S_BUILD_IMAGE=busybox "$ex/k8s-build" submit shop api "$id" "$image" r main
  is "$RC" 1 "submit exits 1 when kubectl refuses"
  like "$LAST" '^kubectl create job oops-build/api-pipeline-k3v9q2m7x1ab failed: Error from server \(Forbidden\)' \
    "... with a one-line reason last on stderr"
  is "$OUT" "" "... and prints no handle"

  fresh
  answer get-job "$(cat "$fx/job-running.json")"
  answer patch true # what -o jsonpath={.spec.suspend} prints once the Job is suspended
  stubbed "$ex/k8s-build" cancel "oops-build/api-pipeline-$id"
  is "$RC" 0 "cancel of a running Job exits 0"
  is "$(calls)" "get job api-pipeline-$id --namespace oops-build --ignore-not-found --output json
patch job api-pipeline-$id --namespace oops-build --type merge --patch {\"spec\":{\"suspend\":true}} --output jsonpath={.spec.suspend}
delete pods --namespace oops-build --selector job-name=api-pipeline-$id --ignore-not-found --wait=false" \
    "... it suspends the Job (spec.suspend=true) and deletes its pods"
  is "$OUT" "job oops-build/api-pipeline-$id suspended, its pods deleted" "... saying so"
  fresh
  answer get-job "$(cat "$fx/job-running.json")"
  answer patch "" # a cluster before 1.21 drops spec.suspend
  stubbed "$ex/k8s-build" cancel "oops-build/api-pipeline-$id"
  is "$RC:$(calls | sed -n 3p)" "0:delete job api-pipeline-$id --namespace oops-build --ignore-not-found --wait=false" \
    "cancel on a cluster that ignores spec.suspend deletes the Job instead"
  fresh
  answer get-job ""
  stubbed "$ex/k8s-build" cancel "oops-build/api-pipeline-$id"
  is "$RC:$(calls | wc -l)" "0:1" "cancel of a Job already gone exits 0 and changes nothing"
  fresh
  answer get-job "$(cat "$fx/job-succeeded.json")"
  stubbed "$ex/k8s-build" cancel "oops-build/api-pipeline-$id"
  is "$RC:$(calls | wc -l)" "0:1" "cancel of a finished Job exits 0 and changes nothing"
  fresh
  answer get-job "$(cat "$fx/job-running.json")"
  answer patch "" 1 "Error from server (NotFound): jobs.batch \"api-pipeline-$id\" not found"
  stubbed "$ex/k8s-build" cancel "oops-build/api-pipeline-$id"
  is "$RC" 0 "cancel racing the Job's removal (patch: NotFound) exits 0"

  fresh
  answer apply "deployment.apps/api configured"
  stubbed "$ex/k8s-deploy" shop api prod "$image" "$id"
  is "$RC" 0 "deploy exits 0 once kubectl applied the Deployment"
  is "$(calls)" "apply --filename -" "... kubectl apply reads the manifest from stdin"
  is "$(jq -r '"\(.metadata.namespace)/\(.metadata.name) \(.spec.template.spec.containers[0].image) \(.metadata.annotations["oops.dev/pipeline-id"])"' "$stub/stdin.1")" \
    "shop-prod/api $image $id" "... the Deployment with the new image and the pipeline id"
  fresh
  answer apply "" 1 "Error from server (NotFound): error when creating \"STDIN\": namespaces \"shop-prod\" not found"
  stubbed "$ex/k8s-deploy" shop api prod "$image" "$id"
  is "$RC" 1 "deploy exits 1 when kubectl apply fails"
  is "$LAST" "kubectl apply of deployment shop-prod/api failed: Error from server (NotFound): error when creating \"STDIN\": namespaces \"shop-prod\" not found" \
    "... with a one-line reason last on stderr"

  fresh
  answer rollout "deployment.apps/api restarted"
  stubbed "$ex/k8s-restart" shop api prod
  is "$RC:$(calls)" "0:rollout restart deployment/api --namespace shop-prod" "restart runs kubectl rollout restart deployment/NAME -n NS"
  fresh
  answer rollout "" 1 'Error from server (NotFound): deployments.apps "api" not found'
  stubbed "$ex/k8s-restart" shop api prod
  is "$RC:$LAST" '1:kubectl rollout restart deployment/api -n shop-prod failed: Error from server (NotFound): deployments.apps "api" not found' \
    "restart of a missing Deployment exits 1 with a one-line reason"

  fresh
  answer get-deployment "$(cat "$fx/deployment-progressing.json")"
  answer get-pods "$(cat "$fx/pods-crashloop.json")"
  stubbed "$ex/k8s-health" shop api prod
  is "$RC:$LAST" "3:CrashLoopBackOff (api-6d8f7c9b54-bq5nf)" "health through kubectl: the same verdict"
  is "$(calls)" "get deployment api --namespace shop-prod --ignore-not-found --output json
get pods --namespace shop-prod --selector app.kubernetes.io/instance=api,app.kubernetes.io/name=api --output json" \
    "... reading the Deployment, then its pods by its selector"

  fresh
  stubbed env K8S_CANARY=1 "$ex/k8s-health" shop web prod
  is "$(calls | head -n 1)" "get deployment web-canary --namespace shop-prod --ignore-not-found --output json" \
    "health with K8S_CANARY=1 judges the canary Deployment"
  fresh
  stubbed env K8S_CANARY=1 "$ex/k8s-health" shop web prod rollback
  is "$(calls | head -n 1)" "get deployment web --namespace shop-prod --ignore-not-found --output json" \
    "... but a rollback's, the stable one"

  # k8s-weight: ingress-nginx's canary weight; 0 and 100 end the canary.
  fresh
  answer annotate "ingress.networking.k8s.io/web-canary annotated"
  stubbed "$ex/k8s-weight" shop web prod "$image" "$id" 10
  is "$RC" 0 "weight 10 exits 0"
  is "$(calls)" "annotate --overwrite --namespace shop-prod ingress web-canary nginx.ingress.kubernetes.io/canary-weight=10" \
    "... annotating the canary Ingress with canary-weight 10, and nothing else"
  is "$OUT" "ingress shop-prod/web-canary: weight 10 on $image" "... saying so"
  fresh
  stubbed "$ex/k8s-weight" shop web prod "$image" "$id" 0
  is "$RC:$(calls)" "0:annotate --overwrite --namespace shop-prod ingress web-canary nginx.ingress.kubernetes.io/canary-weight=0
scale --namespace shop-prod deployment web-canary --replicas=0" \
    "weight 0 (an abort): canary-weight 0, then the canary Deployment scaled to 0"
  fresh
  answer scale "" 1 'Error from server (NotFound): deployments.apps "web-canary" not found'
  stubbed "$ex/k8s-weight" shop web prod "$image" "$id" 0
  is "$RC" 0 "weight 0 again, the canary Deployment gone already: exits 0 (each weight may be set again)"
  fresh
  stubbed env K8S_CANARY=1 K8S_PROMOTE_TIMEOUT=90s "$ex/k8s-weight" shop web prod "$image" "$id" 100
  is "$RC" 0 "weight 100 (the promotion) exits 0"
  is "$(calls)" "apply --filename -
rollout status --namespace shop-prod deployment/web --timeout=90s
annotate --overwrite --namespace shop-prod ingress web-canary nginx.ingress.kubernetes.io/canary-weight=0
scale --namespace shop-prod deployment web-canary --replicas=0" \
    "... the stable Deployment takes the release, is waited for, then the canary's weight 0 and its pods gone"
  is "$(jq -r '"\(.metadata.name) \(.spec.template.spec.containers[0].image) \(.metadata.labels | has("oops.dev/track"))"' "$stub/stdin.1")" \
    "web $image false" "... the applied Deployment is the stable web with the release's image (K8S_CANARY set or not)"
  fresh
  answer rollout "" 1 'error: timed out waiting for the condition'
  stubbed "$ex/k8s-weight" shop web prod "$image" "$id" 100
  is "$RC:$LAST" "1:deployment shop-prod/web did not roll out $image within 4m: error: timed out waiting for the condition" \
    "a promotion whose stable rollout does not end exits 1, one line, the canary's weight left as it was"
  is "$(calls | grep -c annotate)" 0 "... (no annotate after it)"
  fresh
  answer annotate "" 1 'Error from server (NotFound): ingresses.networking.k8s.io "web-canary" not found'
  stubbed "$ex/k8s-weight" shop web prod "$image" "$id" 50
  is "$RC:$LAST" '1:kubectl annotate of ingress shop-prod/web-canary (canary-weight 50) failed: Error from server (NotFound): ingresses.networking.k8s.io "web-canary" not found' \
    "no canary Ingress: exits 1 with a one-line reason"
  for w in 101 -1 1x "" 007 1000; do
    fresh
    stubbed "$ex/k8s-weight" shop web prod "$image" "$id" "$w"
    is "$RC:$(calls | wc -l)" "64:0" "weight \"$w\" is refused (exit 64) before any kubectl call"
  done
  like "$LAST" 'must be a whole number from 0 to 100' "... saying what a weight is"
  fresh
  stubbed env K8S_PROMOTE_TIMEOUT='4m;x' "$ex/k8s-weight" shop web prod "$image" "$id" 100
  is "$RC:$(calls | wc -l)" "64:0" "a K8S_PROMOTE_TIMEOUT that is no duration is refused"

  # The real kubectl, its server unreachable (a closed local port).
  port=$(_free_port)
  cat >"$work/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster: { server: "https://127.0.0.1:$port", insecure-skip-tls-verify: true }
users:
- name: nobody
  user: { token: not-a-token }
contexts:
- name: nowhere
  context: { cluster: nowhere, user: nobody }
current-context: nowhere
EOF
  export KUBECONFIG=$work/kubeconfig
  run "$ex/k8s-build" status "oops-build/api-pipeline-$id"
  is "$RC" 4 "server unreachable: status exits 4 (transient, retried), never 2 (missing)"
  run "$ex/k8s-health" shop api prod
  is "$RC" 1 "server unreachable: health exits 1 (not ready), never 2 or a failure"
  run "$ex/k8s-build" cancel "oops-build/api-pipeline-$id"
  is "$RC" 1 "server unreachable: cancel exits 1 (it cannot say the Job is gone)"
  run env K8S_BUILD_IMAGE=busybox "$ex/k8s-build" submit shop api "$id" "$image" r main
  is "$RC" 1 "server unreachable: submit exits 1"
  unlike "$OUT" "api-pipeline" "... printing no handle"
  run "$ex/k8s-deploy" shop api prod "$image" "$id"
  is "$RC" 1 "server unreachable: deploy exits 1"
  like "$LAST" "^kubectl apply of deployment shop-prod/api failed: .*127\.0\.0\.1:$port" "... its reason, one line, names the server"
  run "$ex/k8s-restart" shop api prod
  like "$RC:$LAST" "^1:kubectl rollout restart deployment/api -n shop-prod failed: .*127\.0\.0\.1:$port" \
    "server unreachable: restart exits 1 with its reason"
  run "$ex/k8s-weight" shop web prod "$image" "$id" 10
  like "$RC:$LAST" "^1:kubectl annotate of ingress shop-prod/web-canary \(canary-weight 10\) failed: .*127\.0\.0\.1:$port" \
    "server unreachable: weight exits 1 with its reason"
  unset KUBECONFIG
fi

# --- the scripts themselves ---------------------------------------------------
for s in k8s-build k8s-deploy k8s-health k8s-restart k8s-weight; do
  check "$s is executable" test -x "$ex/$s"
done
for s in k8s-lib.sh k8s-build k8s-deploy k8s-health k8s-restart k8s-weight; do
  check "$s parses as sh (sh -n; Debian: dash)" sh -n "$ex/$s"
done
if command -v shellcheck >/dev/null; then
  out=$(shellcheck -s sh -x "$ex/k8s-lib.sh" "$ex/k8s-build" "$ex/k8s-deploy" "$ex/k8s-health" "$ex/k8s-restart" "$ex/k8s-weight" 2>&1)
  is "$out" "" "shellcheck finds nothing in the scripts"
else
  skip "shellcheck is not installed"
fi
unlike "$(cat "$ex/k8s-lib.sh" "$ex/k8s-build" "$ex/k8s-deploy" "$ex/k8s-health" "$ex/k8s-restart" "$ex/k8s-weight")" \
  '(^|[^a-z_])eval[[:space:]]' "no eval in the scripts"

# --- 4. the whole policy ------------------------------------------------------
out=$("$OOPS_BUILD/oopsd" --check --policies "$ex" 2>&1)
rc=$?
is "$rc" 0 "oopsd --check accepts examples/kubernetes"
is "$out" "ok" "... printing ok"
missing=
for cmd in $(grep -oE '"\./[a-z0-9-]+"' "$ex/apps.lua" | tr -d '"' | sort -u); do
  [[ -x $ex/$cmd ]] || missing+=" $cmd"
done
is "$missing" "" "every command the policy names is an executable script next to it"

done_testing
