# shellcheck shell=sh
# Shared by k8s-build, k8s-deploy, k8s-health and k8s-restart (sourced, never
# run). POSIX sh; the scripts run under `set -eu`. Every value reaches kubectl
# and jq as its own argument (argv, never a shell string, never eval).
#
# Reading the cluster: get_job, get_deployment and get_pods print what
# `kubectl get -o json` prints, or, when K8S_JOB_JSON, K8S_DEPLOYMENT_JSON or
# K8S_PODS_JSON names a file, that file instead (saved documents, for tests
# and for looking at a verdict by hand). An object that does not exist reads
# as nothing at all (`--ignore-not-found`; an empty file stands for it).

# Names this integration writes on the cluster (in the jq programs):
#   annotations oops.dev/pipeline-id, oops.dev/rollout-started-at,
#               oops.dev/artifact, oops.dev/source-repo, oops.dev/source-ref
#   labels      oops.dev/pipeline-id (build Jobs), oops.dev/namespace,
#               oops.dev/environment, app.kubernetes.io/{name,instance,
#               component,managed-by}

# Messages go to stderr: the exec gateway takes a failure's reason from the
# last line of stderr (stdout when stderr is empty).
say() { printf '%s\n' "$*" >&2; }
die() { # CODE MESSAGE...
  _code=$1
  shift
  printf '%s\n' "$*" >&2
  exit "$_code"
}

# kubectl with a bound on each request (K8S_REQUEST_TIMEOUT, default 20s), so a
# hung API server gives a message before oopsd's own timeout kills the command.
kc() { kubectl --request-timeout="${K8S_REQUEST_TIMEOUT:-20s}" "$@"; }

# The line of kubectl's output that says what went wrong: the first one
# starting "error" (any case), else the last one.
first_error() {
  printf '%s\n' "$1" | awk 'tolower($0) ~ /^error/ && !f { print; f = 1 } { l = $0 } END { if (!f) print l }'
}

need() { # EXIT_CODE TOOL...
  _code=$1
  shift
  for _t in "$@"; do
    command -v "$_t" >/dev/null 2>&1 || die "$_code" "$_t is not installed (not found on PATH)"
  done
}

# A DNS label, as Kubernetes wants for namespaces and label values:
# lowercase letters, digits and "-", at most 63, not starting or ending with "-".
is_label() {
  case $1 in '' | -* | *- | *[!a-z0-9-]*) return 1 ;; esac
  [ "${#1}" -le 63 ]
}
# A pipeline id: [a-z0-9], at most 63 (it is a label value).
is_id() {
  case $1 in '' | *[!a-z0-9]*) return 1 ;; esac
  [ "${#1}" -le 63 ]
}
# Only blanks (or nothing): what `kubectl get --ignore-not-found` prints for
# an object that does not exist.
is_blank() {
  case $1 in *[![:space:]]*) return 1 ;; esac
  return 0
}

# A canary (K8S_CANARY=1, a canary or blue_green rollout): the release runs as
# a second Deployment beside the stable one, named T_NAME-canary (T_CANARY).
# Sets T_CANARY; returns 1 with a message when the name is too long.
canary_name() {
  T_CANARY=$T_NAME-canary
  is_label "$T_CANARY" && return 0
  say "canary deployment \"$T_CANARY\": must be a DNS label of at most 63 characters"
  return 1
}
# Whether K8S_CANARY asks for a canary: 1 yes, 0 or unset no, else an error.
canary_mode() {
  case ${K8S_CANARY:-0} in
    1) return 0 ;;
    0) return 1 ;;
  esac
  die 64 "K8S_CANARY=${K8S_CANARY}: must be 1 or 0"
}

# Where an application's environment lives on the cluster (K8S_LAYOUT):
#   namespace-per-environment (default): namespace NS-ENV, Deployment APP
#   name-per-environment:                namespace NS,     Deployment APP-ENV
# Sets T_NS and T_NAME; returns 1 with a message when they are not names.
target() { # NS APP ENV
  case ${K8S_LAYOUT:-namespace-per-environment} in
    namespace-per-environment) T_NS=$1-$3 T_NAME=$2 ;;
    name-per-environment) T_NS=$1 T_NAME=$2-$3 ;;
    *)
      say "K8S_LAYOUT=${K8S_LAYOUT}: must be namespace-per-environment or name-per-environment"
      return 1
      ;;
  esac
  if ! is_label "$T_NS" || ! is_label "$T_NAME"; then
    say "namespace \"$T_NS\" / deployment \"$T_NAME\": each must be a DNS label of at most 63 characters"
    return 1
  fi
}

# A file read as a manifest template (YAML or JSON) printed as JSON, offline:
# `kubectl patch --local` decodes it without a server.
template_json() { # FILE
  kubectl patch --local --filename "$1" --type merge --patch '{}' --output json
}

get_job() { # NS NAME
  if [ -n "${K8S_JOB_JSON:-}" ]; then
    cat -- "$K8S_JOB_JSON"
    return
  fi
  kc get job "$2" --namespace "$1" --ignore-not-found --output json
}

get_deployment() { # NS NAME
  if [ -n "${K8S_DEPLOYMENT_JSON:-}" ]; then
    cat -- "$K8S_DEPLOYMENT_JSON"
    return
  fi
  kc get deployment "$2" --namespace "$1" --ignore-not-found --output json
}

get_pods() { # NS SELECTOR
  if [ -n "${K8S_PODS_JSON:-}" ]; then
    cat -- "$K8S_PODS_JSON"
    return
  fi
  kc get pods --namespace "$1" --selector "$2" --output json
}

# The one object of a `kubectl get NAME -o json` document (stdin), or nothing
# when it names none: a List with no items reads as absent, like no output.
one_object() {
  jq -c 'if .kind == "List" then (.items[0] // empty) else . end'
}

# The verdict on a Job document (stdin): one line "WORD detail", WORD one of
# succeeded, failed, running (REFERENCE.md §3; "no status yet" is running).
# Conditions are read as well as the counters: a Job past its deadline is
# Failed (DeadlineExceeded) with failed still 0 when its pod never started.
job_verdict() {
  jq -r '
    def cond(t): [(.status.conditions // [])[] | select(.type == t and .status == "True")] | first;
    if .kind != "Job" then error("not a Job document (kind \(.kind | tostring))") else . end
    | (.status // {}) as $s
    | "\(.metadata.namespace)/\(.metadata.name)" as $job
    | if ($s.succeeded // 0) >= 1 or cond("Complete") != null then
        "succeeded job \($job) succeeded"
      elif ($s.failed // 0) > 0 or cond("Failed") != null then
        (cond("Failed") // {}) as $c
        | "failed job \($job) failed"
          + (if $c.reason then ": \($c.reason)" else "" end)
          + (if $c.message then ": \($c.message)" else "" end)
      elif $s == {} then
        "running job \($job) has no status yet"
      elif .spec.suspend == true then
        "running job \($job) is suspended"
      else
        "running job \($job): \($s.active // 0) pod(s) active"
      end'
}

# The verdict on a rollout: stdin holds the Deployment document, then the pod
# list. One line "WORD detail", WORD one of
#   failure   detail "REASON (POD)": the first container (init containers
#             first) of the rollout's pods waiting with ImagePullBackOff,
#             ErrImagePull or CrashLoopBackOff (REFERENCE.md §5)
#   complete  status.observedGeneration >= metadata.generation and
#             updatedReplicas == readyReplicas == spec.replicas
#   waiting   anything else
# "The rollout's pods": those whose template annotation oops.dev/pipeline-id
# is the Deployment's (so a pod of the previous version crash-looping does not
# fail the rollout replacing it); every selected pod when the Deployment has
# no such annotation.
rollout_verdict() {
  jq -r -s '
    .[0] as $d | (.[1].items // []) as $pods
    | if $d.kind != "Deployment" then error("not a Deployment document (kind \($d.kind | tostring))") else . end
    | ($d.metadata.annotations["oops.dev/pipeline-id"] // "") as $pid
    | [ $pods[]
        | select($pid == "" or (.metadata.annotations["oops.dev/pipeline-id"] // "") == $pid)
        | .metadata.name as $pod
        | ((.status.initContainerStatuses // []) + (.status.containerStatuses // []))[]
        | (.state.waiting.reason // "")
        | select(. == "ImagePullBackOff" or . == "ErrImagePull" or . == "CrashLoopBackOff")
        | "\(.) (\($pod))" ] as $bad
    | ($d.spec.replicas // 1) as $want
    | ($d.status // {}) as $s
    | ($s.observedGeneration // 0) as $seen | ($d.metadata.generation // 0) as $gen
    | "deployment \($d.metadata.namespace)/\($d.metadata.name)" as $what
    | if ($bad | length) > 0 then "failure \($bad[0])"
      elif $seen >= $gen and ($s.updatedReplicas // 0) == $want and ($s.readyReplicas // 0) == $want then
        "complete \($what): \($want) of \($want) updated and ready"
      elif $seen < $gen then
        "waiting \($what): generation \($gen) not observed yet (observed \($seen))"
      else
        "waiting \($what): \($s.updatedReplicas // 0) updated, \($s.readyReplicas // 0) ready of \($want)"
      end'
}

# The Deployment's spec.selector.matchLabels as "k=v,k=v" (for get_pods).
selector_of() {
  jq -r '(.spec.selector.matchLabels // {}) | to_entries | map("\(.key)=\(.value)") | join(",")'
}
