# oopsctl rollback end to end (REFERENCE.md 9): which release it picks, every
# refusal (exit 1, 2, 3) changing nothing, --json, and a real oopsd driving
# the new pipeline INITIALIZED -> DEPLOYING -> ROLLING_OUT -> SUCCEEDED
# without a build.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
trap stop_servers EXIT
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }
ctl migrate >/dev/null || { echo "not ok 1 - migrate"; exit 1; }

# A pipeline of APP in ENV that reached STATUS MINUTES ago: release ARTIFACT [SOURCE].
release() { # app env artifact status minutes [source]
  local args=(create --app "$1" --env "$2") id
  [[ -n $3 ]] && args+=(--artifact "$3")
  [[ -n ${6:-} ]] && args+=(--source "$6")
  id=$(OOPS_POLICIES= ctl "${args[@]}" 2>/dev/null) || return 1
  sql "UPDATE pipeline SET status = '$4', status_changed_at = NOW(6) - INTERVAL $5 MINUTE WHERE id = '$id'"
  echo "$id"
}
# Everything a refused rollback must leave as it was.
snapshot() {
  sql "SELECT id, status, IFNULL(artifact, '-'), trigger_type, status_changed_at FROM pipeline ORDER BY id;
       SELECT COUNT(*) FROM pipeline_event; SELECT COUNT(*) FROM outbox"
}
export OOPS_POLICIES=

src1='{"git":"https://example.invalid/shop/api.git","branch":"main","commit":"c1"}'
r1=$(release shop/api prod registry/shop/api:1 SUCCEEDED 30 "$src1")
r2=$(release shop/api prod registry/shop/api:2 SUCCEEDED 20)
rnull=$(release shop/api prod "" SUCCEEDED 15)
r3=$(release shop/api prod registry/shop/api:2 SUCCEEDED 10) # the current release
rerr=$(release shop/api prod registry/shop/api:3 ERROR 5)
rstg=$(release shop/api staging registry/shop/api:9 SUCCEEDED 5)
solo=$(release shop/solo prod registry/shop/solo:1 SUCCEEDED 5)
release shop/never prod registry/shop/never:1 ERROR 5 >/dev/null
is "$(sql "SELECT COUNT(*) FROM pipeline")" 8 "a release history to roll back in"

# --- refusals: exit 1, nothing changed ----------------------------------------
before=$(snapshot)
refused() { # desc, want exit, want stderr (exact), args...
  local desc=$1 want_rc=$2 want=$3 out err rc; shift 3
  out=$(ctl --json rollback "$@" 2>"$OOPS_TEST_WORK/rb.err"); rc=$?
  err=$(cat "$OOPS_TEST_WORK/rb.err")
  is "$rc: $err" "$want_rc: $want" "$desc"
  is "$out" "" "... printing nothing on stdout"
}
refused "an application with no SUCCEEDED release at all is refused (exit 1)" 1 \
  "oopsctl: rollback: shop/never prod has no SUCCEEDED release" --app shop/never --env prod
refused "an application never released in that environment is refused" 1 \
  "oopsctl: rollback: shop/solo staging has no SUCCEEDED release" --app shop/solo --env staging
refused "a single release has nothing earlier to roll back to (exit 1)" 1 \
  "oopsctl: rollback: shop/solo prod has no earlier SUCCEEDED release to roll back to (current: $solo, artifact \"registry/shop/solo:1\")" \
  --app shop/solo --env prod
refused "--to an unknown id is refused (exit 1)" 1 \
  "oopsctl: rollback: no pipeline with id nosuchid0000" --app shop/api --env prod --to nosuchid0000
refused "--to a pipeline that did not succeed is refused, naming its status" 1 \
  "oopsctl: rollback: pipeline $rerr is ERROR, not SUCCEEDED: only a release that succeeded can be rolled back to" \
  --app shop/api --env prod --to "$rerr"
refused "--to a pipeline of another environment is refused, naming it" 1 \
  "oopsctl: rollback: pipeline $rstg belongs to shop/api staging, not shop/api prod" \
  --app shop/api --env prod --to "$rstg"
refused "--to a pipeline of another application is refused, naming it" 1 \
  "oopsctl: rollback: pipeline $solo belongs to shop/solo prod, not shop/api prod" \
  --app shop/api --env prod --to "$solo"
refused "--to a release without an artifact is refused" 1 \
  "oopsctl: rollback: pipeline $rnull has no artifact to redeploy" --app shop/api --env prod --to "$rnull"
refused "a malformed --to is refused" 1 \
  'oopsctl: rollback: --to: malformed pipeline id "NOPE" (1 to 64 characters from a-z and 0-9, like "k3v9x0b2m1qa")' \
  --app shop/api --env prod --to NOPE
for line in "--env prod" "--app shop/api" "--app shop/api --env PROD" "--app SHOP/api --env prod" \
  "--app shopapi --env prod" "--app shop/api --env prod --to" "--app shop/api --env prod --to ''" \
  "--app shop/api --env prod --bogus" "--app shop/api --env prod --rollback" "--app shop/api --env prod stray" \
  "--app shop/api --env prod --env prod" "--app shop/api --env prod --policies ''"; do
  eval "set -- $line"
  out=$(ctl rollback "$@" 2>&1); rc=$?
  [[ $rc == 1 && $out == "oopsctl: rollback: "* ]] || is "$rc: $out" "1: oopsctl: rollback: ..." "rollback $line is refused"
done
is ok ok "missing, malformed, unknown, repeated and empty flags are refused (exit 1), naming rollback"
out=$(ctl --db "mysql://oops:x@127.0.0.1:1/oops" rollback --app shop/api --env PROD 2>&1)
is "$?" 1 "a bad name is refused before the database is opened (exit 1, not 2)"

# The policy, as create reads it.
pol="$OOPS_TEST_WORK/rb-policies"; mkdir -p "$pol"
printf 'application "shop/api" { environments = { "prod" } }\n' >"$pol/apps.lua"
out=$(ctl rollback --app shop/api --env staging --policies "$pol" 2>&1)
is "$?: $out" "1: oopsctl: rollback: --env \"staging\" is not an environment of shop/api in the policies in $pol (it declares: prod)" \
  "an environment the policy does not declare is refused (exit 1)"
out=$(OOPS_POLICIES="$pol" ctl rollback --app shop/solo --env prod 2>&1)
is "$?: $out" "1: oopsctl: rollback: --app \"shop/solo\" is not declared in the policies in $pol (declared: shop/api)" \
  "OOPS_POLICIES is read: an undeclared application is refused"
out=$(ctl rollback --app shop/api --env prod --policies "$OOPS_ROOT/tests/fixtures/policies/broken" 2>&1)
is "$?" 1 "a policy directory that does not load refuses the rollback"
like "$out" "rollback: the policies in .* did not load" "... saying so"

# Database unreachable: exit 2.
out=$("$OOPS_BUILD/oopsctl" --db "mysql://oops:x@127.0.0.1:1/oops" rollback --app shop/api --env prod 2>&1)
is "$?" 2 "an unreachable database exits 2"
like "$out" "cannot connect to database at 127.0.0.1:1" "... naming the host"
is "$(snapshot)" "$before" "no refusal changed a pipeline, an event or the outbox"

# --- the rollback -------------------------------------------------------------
out=$(ctl --json rollback --app shop/api --env prod --policies "$pol" 2>"$OOPS_TEST_WORK/rb.err"); is "$?" 0 "rollback exits 0"
like "$out" '^\{"id":"[a-z0-9]{12}","status":"INITIALIZED","trigger":"rollback","rollback_to":"'"$r1"'","artifact":"registry/shop/api:1"\}$' \
  "--json prints the new pipeline; the target skips the release without an artifact and the current artifact"
rb=$(printf '%s' "$out" | grep -oE '"id":"[a-z0-9]+"' | cut -d'"' -f4)
is "$(cat "$OOPS_TEST_WORK/rb.err")" "oopsctl: rollback: $rb rolls shop/api prod back to $r1 (artifact \"registry/shop/api:1\")" \
  "... and says on stderr what it rolls back to (checked against the policy: no warning)"
is "$(sql "SELECT status, trigger_type, deploy_mode, artifact, source = (SELECT source FROM pipeline WHERE id = '$r1') FROM pipeline WHERE id = '$rb'")" \
  "$(printf 'INITIALIZED\trollback\tauto\tregistry/shop/api:1\t1')" "the new pipeline: INITIALIZED, trigger rollback, the target's artifact and source"
like "$(sql "SELECT event_type, server FROM pipeline_event WHERE pipeline_id = '$rb'")" "^CREATED	oopsctl@" \
  "... with one CREATED event by oopsctl@HOST"
is "$(sql "SELECT p.message, e.message FROM pipeline p JOIN pipeline_event e ON e.pipeline_id = p.id WHERE p.id = '$rb'")" \
  "$(printf 'Rollback to %s.\tRollback to %s.' "$r1" "$r1")" "... both saying what it rolls back to"
is "$(sql "SELECT COUNT(*) FROM outbox o JOIN pipeline_event e ON e.id = o.ref_id WHERE o.kind = 'pipeline' AND e.pipeline_id = '$rb'")" 1 \
  "... and its notification"

# --- beside an unfinished pipeline: exit 3, nothing changed ---------------------
before=$(snapshot)
refused "a second rollback beside the unfinished one exits 3, naming it" 3 \
  "oopsctl: rollback: an unfinished pipeline already exists for shop/api in prod ($rb, INITIALIZED); nothing changed" \
  --app shop/api --env prod
is "$(snapshot)" "$before" "... and changes nothing"
sql "UPDATE pipeline SET status = 'ROLLING_OUT' WHERE id = '$rb'"
before=$(snapshot)
refused "... in any unfinished status" 3 \
  "oopsctl: rollback: an unfinished pipeline already exists for shop/api in prod ($rb, ROLLING_OUT); nothing changed" \
  --app shop/api --env prod --to "$r2"
is "$(snapshot)" "$before" "... and changes nothing"
sql "UPDATE pipeline SET status = 'INITIALIZED' WHERE id = '$rb'"
unfinished=$(OOPS_POLICIES= ctl create --app shop/solo --env prod 2>/dev/null)
sql "UPDATE pipeline SET status = 'RUNNING' WHERE id = '$unfinished'"
before=$(snapshot)
out=$(ctl rollback --app shop/solo --env prod --to "$solo" 2>&1)
is "$?: $out" "3: oopsctl: rollback: an unfinished pipeline already exists for shop/solo in prod ($unfinished, RUNNING); nothing changed" \
  "a running release blocks a rollback too (exit 3)"
is "$(snapshot)" "$before" "... and nothing changed"
sql "UPDATE pipeline SET status = 'STOPPED' WHERE id = '$unfinished'"

# --- a real oopsd drives it without a build ------------------------------------
start_server rb1 "$OOPS_ROOT/tests/fixtures/policies/fast"
wait_for 30 "oopsd drives the rollback to SUCCEEDED" bash -c "[[ \$(sql \"SELECT status FROM pipeline WHERE id = '$rb'\") == SUCCEEDED ]]"
is "$(sql "SELECT GROUP_CONCAT(event_type ORDER BY id) FROM pipeline_event WHERE pipeline_id = '$rb'")" \
  "CREATED,DEPLOYING,ROLLING_OUT,SUCCEEDED" "... INITIALIZED -> DEPLOYING -> ROLLING_OUT -> SUCCEEDED"
is "$(sql "SELECT GROUP_CONCAT(action ORDER BY id) FROM sim_call WHERE pipeline_id = '$rb'")" "deploy" \
  "... deploying the artifact, never submitting a build"
stop_servers; SRV_PID=()

# The rollback is now the current release: rolling back again goes forward.
out=$(ctl --json rollback --app shop/api --env prod 2>/dev/null); is "$?" 0 "a rollback of the rollback exits 0"
like "$out" '"rollback_to":"'"$r3"'","artifact":"registry/shop/api:2"' "... back to the last release before it with another artifact"
rb2=$(printf '%s' "$out" | grep -oE '"id":"[a-z0-9]+"' | cut -d'"' -f4)
sql "UPDATE pipeline SET status = 'STOPPED' WHERE id = '$rb2'"
out=$(ctl rollback --app shop/api --env prod --to "$r2" 2>/dev/null); is "$?" 0 "--to a release that shipped the current artifact is allowed"
is "$(sql "SELECT artifact, trigger_type FROM pipeline WHERE id = '$out'")" "$(printf 'registry/shop/api:2\trollback')" "... redeploying it"
out=$(ctl rollback --app shop/api --env prod --to "$r2" 2>&1 >/dev/null); like "$out" "already exists" "text mode refuses with the same message"
out=$(ctl rollback --help); is "$?" 0 "rollback --help exits 0"
like "$out" "rollback --app NS/APP --env ENV \[--to ID\] \[--policies DIR\]" "... listing rollback"

done_testing
