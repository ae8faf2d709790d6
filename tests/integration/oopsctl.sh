# oopsctl end to end: the real binary against the real database.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }

out=$(ctl migrate); is "$?" 0 "migrate applies the schema"
like "$out" "applied [0-9]+ migration" "migrate says what it applied"
out=$(ctl migrate); like "$out" "up to date" "migrate again is a no-op"

# Concurrent migrations of a fresh database are serialised by oops:migrate.
sql "DROP TABLE pipeline, pipeline_event, server, schema_version"
pids=(); for i in 1 2 3 4; do ctl migrate >/dev/null 2>&1 & pids+=($!); done
rcs=0; for p in "${pids[@]}"; do wait "$p" || rcs=$((rcs + 1)); done
is "$rcs" 0 "four concurrent migrations all succeed"
is "$(sql 'SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_version')" "$(sql 'SELECT MAX(version), MAX(version) FROM schema_version')" \
  "each migration is recorded exactly once"

id=$(ctl create --app shop/api --env prod --artifact registry/shop/api:1.2.3); is "$?" 0 "create exits 0"
like "$id" '^[a-z0-9]{12}$' "create prints the new id"
out=$(ctl list); like "$out" "$id +shop/api +prod +INITIALIZED +auto" "list shows the pipeline"
out=$(ctl list --status RUNNING); unlike "$out" "$id" "list --status filters"
out=$(ctl --json list); like "$out" "\"id\":\"$id\".*\"status\":\"INITIALIZED\"" "list --json"

out=$(ctl create --app shop/api --env prod 2>&1); rc=$?
is "$rc" 1 "a second unfinished pipeline for the same app and env is refused (exit 1)"
like "$out" "an unfinished pipeline already exists for shop/api in prod" "... with a message naming it"
id2=$(ctl create --app shop/api --env staging --manual); is "$?" 0 "another environment is independent"

out=$(ctl stop "$id" --expect RUNNING 2>&1); is "$?" 3 "a stale stop exits 3"
like "$out" "state changed concurrently" "... saying the state changed concurrently"
is "$(sql "SELECT status FROM pipeline WHERE id = '$id'")" "INITIALIZED" "... and changes nothing"

out=$(ctl stop "$id"); is "$?" 0 "stop exits 0"
like "$out" "stopped $id \(was INITIALIZED\)" "stop says from what"
out=$(ctl stop "$id" 2>&1); is "$?" 1 "stopping a finished pipeline exits 1"
like "$out" "already finished \(STOPPED\)" "... with a clear message"

out=$(ctl show "$id"); is "$?" 0 "show exits 0"
like "$out" "status +STOPPED" "show prints the status"
like "$out" "CREATED +-> INITIALIZED" "show prints the CREATED event"
like "$out" "STOPPED +INITIALIZED -> STOPPED +oopsctl@" "show prints the STOPPED event and who"
out=$(ctl --json show "$id"); like "$out" '"events":\[\{.*"type":"CREATED".*"type":"STOPPED"' "show --json carries the events"
is "$(sql "SELECT COUNT(*) FROM pipeline_event WHERE pipeline_id = '$id'")" 2 "exactly one event per transition"

id3=$(ctl create --app shop/api --env prod); is "$?" 0 "after the stop a new pipeline may start"

# ROLLING_OUT cannot be stopped (the table has no such transition).
sql "UPDATE pipeline SET status = 'ROLLING_OUT' WHERE id = '$id3'"
out=$(ctl stop "$id3" 2>&1); is "$?" 1 "stopping a rollout is an illegal transition (exit 1)"
like "$out" "illegal transition ROLLING_OUT -> STOPPED" "... named as such"

out=$(ctl show nosuchid 2>&1); is "$?" 1 "unknown id exits 1"
like "$out" 'no pipeline with id "nosuchid"' "... naming the id"
out=$(ctl create --app noslash --env prod 2>&1); is "$?" 1 "a malformed --app exits 1"
like "$out" 'is not NAMESPACE/APPLICATION' "... saying the expected form"
out=$(ctl frobnicate 2>&1); is "$?" 1 "an unknown command exits 1"
out=$(ctl list --status NOPE 2>&1); is "$?" 1 "an unknown status exits 1"
out=$(ctl create --app a/b --env e --source '{broken' 2>&1); is "$?" 1 "a source that is not JSON exits 1"

# Manual deploy request (the servers act on it; here only the row change).
out=$(ctl deploy "$id2" 2>&1); is "$?" 1 "deploy before the build succeeded exits 1"
sql "UPDATE pipeline SET status = 'BUILD_SUCCEEDED' WHERE id = '$id2'"
out=$(ctl deploy "$id2"); is "$?" 0 "deploy of a BUILD_SUCCEEDED manual pipeline exits 0"
isnull=$(sql "SELECT deploy_requested_at IS NOT NULL FROM pipeline WHERE id = '$id2'"); is "$isnull" 1 "... and marks it requested"
ctl stop "$id2" >/dev/null
out=$(ctl deploy "$id2" 2>&1); is "$?" 3 "a stale deploy request exits 3"
is "$(sql "SELECT status FROM pipeline WHERE id = '$id2'")" "STOPPED" "... with nothing changed"

# The database unreachable, or credentials refused: exit 2, naming the host, never the password.
pw=${OOPS_TEST_DB#mysql://*:}; pw=${pw%%@*}
out=$("$OOPS_BUILD/oopsctl" --db "mysql://oops:$pw@127.0.0.1:1/oops" list 2>&1); is "$?" 2 "an unreachable database exits 2"
like "$out" "cannot connect to database at 127.0.0.1:1" "... naming the host"
unlike "$out" "$pw" "... never the password"
bad=${OOPS_TEST_DB/:$pw@/:wrong-$pw@}
out=$("$OOPS_BUILD/oopsctl" --db "$bad" list 2>&1); is "$?" 2 "refused credentials exit 2"
like "$out" "Access denied" "... saying access was denied"
unlike "$out" "wrong-$pw" "... never the password"
out=$("$OOPS_BUILD/oopsctl" --db "nonsense" list 2>&1); is "$?" 1 "a malformed URL exits 1"
out=$(OOPS_DB="$OOPS_TEST_DB" "$OOPS_BUILD/oopsctl" list); is "$?" 0 "OOPS_DB is read when --db is absent"
nopw=${OOPS_TEST_DB/:$pw@/@}
out=$(OOPS_DB="$nopw" OOPS_DB_PASSWORD="$pw" "$OOPS_BUILD/oopsctl" list); is "$?" 0 "OOPS_DB_PASSWORD supplies the password"

done_testing
