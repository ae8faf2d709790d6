# Operators acting over HTTP (issue 27): --http-users FILE (NAME ROLE TOKEN),
# the page's actions POST /api/pipeline/ID/stop, /api/pipeline/ID/deploy,
# /api/rollback with oopsctl's rules and answers (200, 404, 409, 422), who
# may (401 unknown token, 403 a viewer, 403 another origin or site: CSRF),
# bounds (413, 400, 415), the event and the audit row naming NAME@page and
# the reason, and SIGHUP re-reading the users file. A real oopsd on a real
# MariaDB.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
trap stop_servers EXIT
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }
ctl migrate >/dev/null
pol=$OOPS_TEST_WORK/http_actions.$$
mkdir -p "$pol"
cat >"$pol/oopsd.lua" <<'P'
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
deploy  { timeout = "30s" }
rollout { timeout = "30s" }
gateway "simulated" { build = "3s", deploy = "0s", rollout = "300ms" }
P
umask 077
tok() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
alice=$(tok) bob=$(tok) carol=$(tok)
users=$OOPS_TEST_WORK/users
printf '# the fleet page'"'"'s users\nalice operator %s\nbob\tviewer\t%s\n' "$alice" "$bob" >"$users"

# --- refusals at start -----------------------------------------------------------
out=$(timeout 20 "$OOPS_BUILD/oopsd" --db "$OOPS_TEST_DB" --name x --policies "$pol" --http-users "$users" \
  --http-token-file "$users" 2>&1); is "$?" 1 "--http-users with --http-token-file: exit 1"
like "$out" "give one of them" "... saying so"
printf 'dave admin %s\n' "$(tok)" >"$OOPS_TEST_WORK/bad-users"
out=$(timeout 20 "$OOPS_BUILD/oopsd" --db "$OOPS_TEST_DB" --name x --policies "$pol" \
  --http-users "$OOPS_TEST_WORK/bad-users" 2>&1); is "$?" 1 "a users file with an unknown role: exit 1"
like "$out" "--http-users .*/bad-users: line 1: " "... naming the file and the line"
unlike "$out" "$(cut -d' ' -f3 "$OOPS_TEST_WORK/bad-users")" "... never the token"

start_server h1 "$pol" --http-users "$users"
code() { curl -s -o /dev/null -w '%{http_code}' -m 10 "$@"; }
A=(-H "Authorization: Bearer $alice") B=(-H "Authorization: Bearer $bob") J=(-H 'Content-Type: application/json')
post() { # TOKEN-ARRAY-NAME PATH BODY [CURL ARGS...] -> "STATUS BODY"
  local -n t=$1; local path=$2 body=$3; shift 3
  curl -s -m 15 -w ' %{http_code}' "${t[@]}" "${J[@]}" -X POST --data-binary "$body" "$@" "$(url h1 "$path")"
}
status_of() { printf '%s' "${1##* }"; } # curl's -w, after the body

is "$(curl -s -m 5 "${A[@]}" "$(url h1 /api/me)")" '{"name":"alice","role":"operator","actions":true,"users":true}' \
  "/api/me: alice is an operator"
is "$(curl -s -m 5 "${B[@]}" "$(url h1 /api/me)")" '{"name":"bob","role":"viewer","actions":false,"users":true}' \
  "... bob a viewer"
is "$(code "$(url h1 /api/me)")" 401 "no token: 401"
is "$(code -H "Authorization: Bearer $carol" "$(url h1 /api/fleet)")" 401 "an unknown token: 401"

# --- a pipeline to act on -----------------------------------------------------------
man=$(ctl create --app shop/web --env prod --manual --artifact v1 2>/dev/null)
wait_for 30 "a manual pipeline waits in BUILD_SUCCEEDED" \
  bash -c "[[ \$('$OOPS_BUILD/oopsctl' --db '$OOPS_TEST_DB' --json show '$man') == *'\"status\":\"BUILD_SUCCEEDED\"'* ]]"

is "$(code "${A[@]}" -X POST "$(url h1 /api/fleet)")" 405 "POST to a read-only path: 405"
is "$(code "${A[@]}" -X PUT "${J[@]}" -d '{}' "$(url h1 "/api/pipeline/$man/stop")")" 405 "PUT to an action: 405"
like "$(curl -s -D - -o /dev/null -m 5 "${A[@]}" -X DELETE "$(url h1 "/api/pipeline/$man/stop")")" "Allow: GET, POST" \
  "... with Allow: GET, POST"
out=$(post B "/api/pipeline/$man/deploy" '{"reason":"ship it"}'); is "$(status_of "$out")" 403 "a viewer acting: 403"
like "$out" "bob is a viewer" "... saying who and why"
out=$(post A "/api/pipeline/$man/deploy" '{"reason":"ship it"}' -H 'Origin: http://evil.example')
is "$(status_of "$out")" 403 "an operator's token from a foreign Origin: 403"
like "$out" "another origin" "... saying so"
out=$(post A "/api/pipeline/$man/deploy" '{"reason":"ship it"}' -H 'Sec-Fetch-Site: cross-site')
is "$(status_of "$out")" 403 "Sec-Fetch-Site: cross-site: 403"
is "$(status_of "$(post A "/api/pipeline/$man/deploy" '{}' -H 'Sec-Fetch-Site: same-site')")" 403 "Sec-Fetch-Site: same-site: 403"
is "$(code "${A[@]}" -X POST -H 'Content-Type: text/plain' -d '{}' "$(url h1 "/api/pipeline/$man/deploy")")" 415 \
  "a body that is not JSON by its type: 415"
is "$(status_of "$(post A "/api/pipeline/$man/deploy" '{"reason":')")" 400 "malformed JSON: 400"
is "$(status_of "$(post A "/api/pipeline/$man/deploy" '{"why":"x"}')")" 400 "an unknown field: 400"
is "$(status_of "$(post A "/api/pipeline/$man/deploy" '{"reason":5}')")" 400 "a reason that is no string: 400"
big=$(printf '{"reason":"%05000d"}' 0)
is "$(status_of "$(post A "/api/pipeline/$man/deploy" "$big")")" 413 "a body over 4 KiB: 413"
out=$(post A "/api/pipeline/$man/deploy" "$(printf '{"reason":"%0501d"}' 0)"); is "$(status_of "$out")" 422 "a reason over 500 bytes: 422"
is "$(status_of "$(post A "/api/pipeline/$man/deploy" '{"reason":"a\u0007b"}')")" 422 "a reason with a control character: 422"
is "$(status_of "$(post A "/api/pipeline/$man/deploy" '{"reason":"a\u0085b"}')")" 422 "... a C1 control character too: 422"
is "$(sql "SELECT deploy_requested_at IS NULL FROM pipeline WHERE id = '$man'")|$(sql "SELECT COUNT(*) FROM operator_action WHERE pipeline_id = '$man' AND actor = 'alice@page'")" \
  "1|0" "... nothing changed or recorded by any of them"
out=$(post A "/api/pipeline/nosuchid0000/stop" '{}'); is "$(status_of "$out")" 404 "an unknown pipeline: 404"
like "$out" 'no pipeline with id \\"nosuchid0000\\"' "... saying so"
out=$(post A "/api/pipeline/$man/stop" '{"expect":"RUNNING","reason":"stale page"}'); is "$(status_of "$out")" 409 \
  "a stop from a status it is no longer in: 409"
like "$out" "state changed concurrently: it is BUILD_SUCCEEDED, not RUNNING; nothing changed" "... oopsctl's message"

# --- the release, from the page -------------------------------------------------------
out=$(post A "/api/pipeline/$man/deploy" '{"reason":"ship it"}'); is "$(status_of "$out")" 200 "an operator releases a manual pipeline: 200"
like "$out" "\"id\":\"$man\",\"requested\":true" "... answering like oopsctl --json"
out=$(post A "/api/pipeline/$man/deploy" '{"reason":"ship it again"}'); is "$(status_of "$out")" 200 "a second release: 200"
like "$out" "\"requested\":true,\"already\":true" "... saying it was requested already"
is "$(sql "SELECT CONCAT(event_type, '|', actor, '|', reason, '|', server) FROM pipeline_event WHERE pipeline_id = '$man' AND event_type = 'DEPLOY_REQUESTED'")" \
  "DEPLOY_REQUESTED|alice@page|ship it|h1" "... its event names alice@page, the reason, and the server that ran it"
wait_for 20 "the page's detail shows the event at once" \
  bash -c "curl -s -m 5 -H 'Authorization: Bearer $alice' '$(url h1 "/api/pipeline/$man")' | grep -q '\"actor\":\"alice@page\"'"
wait_for 30 "it goes live" bash -c "[[ \$('$OOPS_BUILD/oopsctl' --db '$OOPS_TEST_DB' --json show '$man') == *'\"status\":\"SUCCEEDED\"'* ]]"
out=$(post A "/api/pipeline/$man/stop" '{"reason":"late"}'); is "$(status_of "$out")" 422 "stopping a finished pipeline: 422"
like "$out" "already finished \(SUCCEEDED\)" "... oopsctl's message"

# --- a stop, from the page ---------------------------------------------------------------
run=$(ctl create --app shop/api --env prod --artifact v1 2>/dev/null)
wait_for 20 "a pipeline is RUNNING" bash -c "[[ \$('$OOPS_BUILD/oopsctl' --db '$OOPS_TEST_DB' --json show '$run') == *'\"status\":\"RUNNING\"'* ]]"
sql "UPDATE sim_job SET ready_at = NOW(6) + INTERVAL 1 HOUR WHERE pipeline_id = '$run'" # it stays RUNNING
out=$(post A "/api/pipeline/$run/stop" '{"expect":"RUNNING","reason":"wrong branch"}'); is "$(status_of "$out")" 200 "an operator stops it: 200"
like "$out" "\"from\":\"RUNNING\",\"status\":\"STOPPED\"" "... from RUNNING"
is "$(sql "SELECT CONCAT(actor, '|', reason, '|', message) FROM pipeline_event WHERE pipeline_id = '$run' AND to_status = 'STOPPED'")" \
  "alice@page|wrong branch|Stopped by alice@page: wrong branch" "... the event says who and why"

# --- a rollback, from the page ------------------------------------------------------------
v2=$(ctl create --app shop/web --env prod --artifact v2 2>/dev/null)
wait_for 30 "a second release goes live" bash -c "[[ \$('$OOPS_BUILD/oopsctl' --db '$OOPS_TEST_DB' --json show '$v2') == *'\"status\":\"SUCCEEDED\"'* ]]"
out=$(post A /api/rollback '{"app":"shop/web","env":"prod","reason":"v2 is broken"}'); is "$(status_of "$out")" 200 "an operator rolls back: 200"
like "$out" "\"trigger\":\"rollback\",\"rollback_to\":\"$man\",\"artifact\":\"v1\"" "... to the previous release"
rb=$(sed -E 's/.*"id":"([a-z0-9]+)".*/\1/' <<<"$out")
out=$(post A /api/rollback '{"app":"shop/web","env":"prod","reason":"twice"}'); is "$(status_of "$out")" 409 "a second rollback beside it: 409"
like "$out" "an unfinished pipeline already exists for shop/web in prod \($rb, " "... naming the one in the way"
is "$(status_of "$(post A /api/rollback '{"app":"Shop/web","env":"prod"}')")" 422 "a bad application name: 422"
is "$(status_of "$(post A /api/rollback '{"app":"shop/none","env":"prod"}')")" 422 "an application with no release: 422"
wait_for 30 "the rollback goes live" bash -c "[[ \$('$OOPS_BUILD/oopsctl' --db '$OOPS_TEST_DB' --json show '$rb') == *'\"status\":\"SUCCEEDED\"'* ]]"
wait_for 20 "the page's release history shows it live" \
  bash -c "curl -s -m 5 -H 'Authorization: Bearer $bob' '$(url h1 /api/history/shop/web/prod)' | jq -e '.live == \"$rb\" and .releases[0].trigger == \"rollback\"' >/dev/null"
is "$(code "${B[@]}" "$(url h1 /api/history/Shop/web/prod)")" 404 "a history of a bad name: 404"
out=$(curl -s -m 5 -H "Authorization: Bearer $bob" "$(url h1 /api/history/shop/web/prod)")
is "$(jq -r '.actions | map("\(.action)/\(.outcome)") | reverse | join(" ")' <<<"$out")" \
  "create/done stop/stale release/done release/already stop/refused create/done rollback/done rollback/stale" \
  "the release history lists the operators' actions there, refusals and already ones too (issue 34)"
like "$(jq -r '.actions[0] | "\(.actor)|\(.reason)|\(.detail)"' <<<"$out")" \
  "^alice@page\|twice\|rollback: an unfinished pipeline already exists for shop/web in prod \($rb, " \
  "... each with who, why and the words the operator saw"

# --- the audit log ------------------------------------------------------------------------------
out=$(ctl --json audit --actor alice@page)
is "$(jq -r 'map("\(.action)/\(.outcome)") | reverse | join(" ")' <<<"$out")" \
  "stop/refused stop/stale release/done release/already stop/refused stop/done rollback/done rollback/stale rollback/refused" \
  "oopsctl audit lists alice's page actions, refusals too, via h1"
is "$(jq -r 'map(.via) | unique | join(",")' <<<"$out")" "h1" "... each run by server h1"

# An audit row that cannot be written (a trigger refuses it): the answer stands, a
# log line and a counter say so (issue 34).
sql "CREATE TRIGGER audit_full BEFORE INSERT ON operator_action FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'audit table full'"
is "$(status_of "$(post A "/api/pipeline/$man/stop" '{"reason":"lost row"}')")" 422 "with the audit log failing, a refusal is still 422"
sql "DROP TRIGGER audit_full"
is "$(curl -s -m 5 "${A[@]}" "$(url h1 /metrics)" | grep '^oops_audit_write_failures_total ')" "oops_audit_write_failures_total 1" \
  "... oops_audit_write_failures_total counts the lost row"
wait_for 10 "... and the log says so" grep -q "audit log: the operator's action could not be recorded" "${SRV_LOG[h1]}"

# --- SIGHUP re-reads the users file ---------------------------------------------------------
printf 'alice viewer %s\ncarol operator %s\n' "$alice" "$carol" >"$users"
kill -HUP "${SRV_PID[h1]}"
wait_for 10 "after SIGHUP the new user is known" \
  bash -c "[[ \$(curl -s -m 5 -H 'Authorization: Bearer $carol' '$(url h1 /api/me)') == *'\"name\":\"carol\"'* ]]"
is "$(code "${B[@]}" "$(url h1 /api/me)")" 401 "... a removed one is not"
is "$(status_of "$(post A "/api/pipeline/$run/stop" '{}')")" 403 "... and alice, now a viewer, may not act"
printf 'broken line\n' >"$users"
kill -HUP "${SRV_PID[h1]}"
wait_for 10 "a users file refused at a reload is logged" grep -q "http users not reloaded, keeping the 2 read before" "${SRV_LOG[h1]}"
is "$(code -H "Authorization: Bearer $carol" "$(url h1 /api/me)")" 200 "... and the users read before stay"
for t in "$alice" "$bob" "$carol"; do
  unlike "$(cat "${SRV_LOG[h1]}")" "$t" "the log never shows a token"
done
done_testing
