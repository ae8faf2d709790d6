# The outbox of schema 13 moves to a queue per route (schema 14, issue 37)
# keeping every undelivered row and what each route took. A database is put
# back to schema 13's outbox (the column, the tables and the version of 14
# dropped), rows written as schema 13 wrote them: one the log route took and
# the webhook not, one the webhook took and the log not, one neither took,
# one delivered. After `oopsctl migrate` the undelivered ones wait to be
# routed and the delivered one does not; a server with both routes then
# sends the webhook exactly the rows it had not taken and logs exactly the
# rows the log had not taken, and all are delivered.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }

work=$OOPS_TEST_WORK/notify_migrate.$$
mkdir -p "$work/policies"
port=$(_free_port)
source "$OOPS_ROOT/tests/lib/sink.sh"
cleanup() { stop_servers; sink_stop_all; }
trap cleanup EXIT

out=$(ctl migrate 2>&1); is "$?" 0 "migrate ($out)"
latest=$(sql "SELECT MAX(version) FROM schema_version") # this build's; 14 or later
# Back to schema 13's outbox.
sql "ALTER TABLE outbox DROP INDEX ix_outbox_unrouted, DROP COLUMN routed;
  DROP TABLE notify_pending, notify_route; DELETE FROM schema_version WHERE version >= 14"
is "$(sql "SELECT MAX(version) FROM schema_version")" 13 "the database is at schema 13"

hook="http://127.0.0.1:$port/hook"
cat >"$work/key.lua" <<EOF
print(require("oops.scans.notify").route_key { kind = "webhook", url = "$hook" })
EOF
wkey=$("$OOPS_BUILD/oopsd" lua "$work/key.lua" 2>&1)
like "$wkey" '^webhook:[0-9a-f]{8}$' "the webhook route's key ($wkey)"

payload() { # EDGE: an alert edge's payload as the alert scan writes it
  printf '{"edge":"%s","namespace":"shop","application":"m1","environment":"prod","metric":"cpu","percent":95,' "$1"
  printf '"threshold":1900,"limit":2000,"pods":["m1-0"],"since":"2026-08-01 12:00:00","time":"2026-08-01 12:10:00"}'
}
sql "INSERT INTO outbox (event_id, kind, payload, delivered_routes) VALUES
  ('alert-shop/m1/prod/cpu-1', 'alert', '$(payload FIRING)', 'log'),
  ('alert-shop/m1/prod/cpu-2', 'alert', '$(payload REPEAT)', '$wkey'),
  ('alert-shop/m1/prod/cpu-3', 'alert', '$(payload RESOLVED)', NULL);
INSERT INTO outbox (event_id, kind, payload, delivered_routes, delivered_at) VALUES
  ('alert-shop/m1/prod/cpu-0', 'alert', '$(payload FIRING)', 'log,$wkey', NOW(6))"

out=$(ctl migrate 2>&1); is "$?" 0 "oopsctl migrate from schema 13 ($out)"
is "$(sql "SELECT MAX(version) FROM schema_version")" "$latest" "... the database is at this build's schema ($latest) again"
is "$(sql "SELECT GROUP_CONCAT(CONCAT(RIGHT(event_id, 1), ':', routed) ORDER BY id) FROM outbox")" "1:0,2:0,3:0,0:1" \
  "... the undelivered rows wait to be routed, the delivered one does not"
is "$(sql "SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL AND delivered_routes IS NOT NULL")" 2 "... what each route took is kept"

sink_start hook "$work/sink.out" "$port" --record "$work/hook.rec" || exit 1
cat >"$work/policies/oopsd.lua" <<EOF
scan    { interval = "300ms" }
notify  { webhook = "$hook", log = true }
EOF
start_server m1 "$work/policies" || exit 1
wait_for 30 "every row is delivered" \
  bash -c "[[ \$(sql 'SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL') == 0 ]]"
is "$(grep -o '"id":"[^"]*"' "$work/hook.rec" | cut -d'"' -f4 | sort | paste -sd' ')" \
  "alert-shop/m1/prod/cpu-1 alert-shop/m1/prod/cpu-3" "the webhook got exactly the rows it had not taken, once each"
is "$(grep -o 'event=alert-shop/m1/prod/cpu-[0-9]' "${SRV_LOG[m1]}" | cut -d= -f2 | sort | paste -sd' ')" \
  "alert-shop/m1/prod/cpu-2 alert-shop/m1/prod/cpu-3" "the log route wrote exactly the rows it had not taken"
is "$(sql "SELECT COUNT(*) FROM notify_pending")" 0 "... and no queue holds anything"
done_testing
