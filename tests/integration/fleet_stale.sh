# The fleet page's JSON while the database is down (issue 22): the server
# keeps answering /api/fleet from its last snapshot, and says how old it is
# (snapshot_age_s, growing), why the refresh failed (refresh_error) and how
# long the refresh under way has waited (refresh_running_s) — it must not
# look live. Pipeline reads failing meanwhile are logged once per minute, not
# once each. After the thaw, the age falls back and the error goes. MariaDB
# frozen with SIGSTOP (its own: it is frozen), a 2 s read timeout.
# (tests/integration/fleet_page.sh shows the same in a browser.)
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
source "$OOPS_ROOT/tests/lib/mariadb.sh" # replaces MDB_* in this process only
work=$(mktemp -d "$OOPS_TEST_WORK/stale.XXXXXX")
cleanup() {
  [[ -n ${MDB_PID:-} ]] && kill -CONT "$MDB_PID" 2>/dev/null
  stop_servers
  mariadb_stop
}
trap cleanup EXIT
mariadb_start "$work/mariadb" || { echo "not ok 1 - a MariaDB of its own starts"; exit 1; }
export OOPS_TEST_DB="$(mariadb_new_db stale)?read_timeout=2&connect_timeout=2"
"$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" migrate >/dev/null
mkdir -p "$work/policies"
cp "$OOPS_ROOT/tests/fixtures/policies/fast/oopsd.lua" "$work/policies/"
start_server st1 "$work/policies" || exit 1
fleet() { curl -s -m 5 "$(url st1 /api/fleet)"; }
field() { jq -r "$1" <<<"$(fleet)"; }
wait_for 20 "the fleet JSON is served" bash -c "curl -s -m 5 '$(url st1 /api/fleet)' | grep -q '\"servers\"'"
f=$(fleet)
is "$(jq -r '.refresh_error' <<<"$f")" null "while the database answers: no refresh error"
check "... and a fresh snapshot ($(jq -r .snapshot_age_s <<<"$f") s old)" \
  jq -e '.snapshot_age_s >= 0 and .snapshot_age_s < 30' <<<"$f"

kill -STOP "$MDB_PID"
wait_for 30 "frozen database: /api/fleet carries the refresh error" \
  bash -c "[[ \$(curl -s -m 5 '$(url st1 /api/fleet)' | jq -r .refresh_error) != null ]]"
f=$(fleet)
echo "# refresh_error: $(jq -r .refresh_error <<<"$f")"
a1=$(jq -r .snapshot_age_s <<<"$f")
wait_for 30 "... and its snapshot's age grows (from $a1 s)" \
  bash -c "curl -s -m 5 '$(url st1 /api/fleet)' | jq -e '.snapshot_age_s > $a1 + 2'"
is "$(field '.servers[0].name')" st1 "... still serving the last snapshot"
check "... within bounds of a JSON object" jq -e 'type == "object" and (.pipelines | type) == "array"' <<<"$(fleet)"

# Pipeline reads fail meanwhile: logged once per minute, not once each.
rand_id() { head -c 9 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
failed() { curl -s -m 5 "$(url st1 /metrics)" | awk '$1 == "oops_web_fetches_total{result=\"failed\"}" {print $2}'; }
for i in $(seq 1 30); do
  curl -s -o /dev/null -m 5 --interface "127.0.0.$((i + 1))" "$(url st1 "/api/pipeline/$(rand_id)")"
  sleep 0.2
done
wait_for 60 "pipeline reads fail while the database is frozen (3 or more)" bash -c "(( \$(curl -s -m 5 '$(url st1 /metrics)' |
  awk '\$1 == \"oops_web_fetches_total{result=\\\"failed\\\"}\" {print \$2}') >= 3 ))"
is "$(grep -c 'fleet page: reading pipeline .* failed' "${SRV_LOG[st1]}")" 1 \
  "... and are logged once ($(failed) failed)"

kill -CONT "$MDB_PID"
wait_for 60 "after the thaw the snapshot is fresh again, without error" \
  bash -c "curl -s -m 5 '$(url st1 /api/fleet)' | jq -e '.refresh_error == null and .snapshot_age_s < 5'"
done_testing
