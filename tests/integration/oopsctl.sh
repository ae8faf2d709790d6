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
like "$out" "STOPPED +INITIALIZED -> STOPPED +[^ ]+@$(hostname) +Stopped by [^ ]+@$(hostname)\." "show prints the STOPPED event and who (the person, not oopsctl)"
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

# deploy --override --reason (issue 26): a held release, deployed now, the
# reason and the actor kept; every bad reason refused with nothing changed.
hid=$(ctl create --app shop/held --env prod --artifact v1)
out=$(ctl deploy "$hid" --override --reason "too early" 2>&1); is "$?" 1 "an override before the build succeeded exits 1"
like "$out" "the build has not succeeded yet \(INITIALIZED\); nothing changed" "... saying why"
sql "UPDATE pipeline SET status = 'BUILD_SUCCEEDED', hold = 'freeze', message = 'Waiting for the freeze f to end: 2027-01-04 08:00 UTC.' WHERE id = '$hid'"
out=$(ctl deploy "$hid" 2>&1); is "$?" 1 "a plain deploy of a held automatic release exits 1"
like "$out" "--override --reason TEXT releases it" "... pointing at --override"
out=$(ctl deploy "$hid" --override 2>&1); is "$?" 1 "--override without --reason exits 1"
like "$out" "--override needs --reason" "... saying so"
out=$(ctl deploy "$hid" --reason why 2>&1); is "$?" 1 "a plain deploy of it with a --reason exits 1 too (a reason is no override)"
out=$(ctl deploy "$hid" --override --reason "" 2>&1); is "$?" 1 "an empty reason exits 1"
out=$(ctl deploy "$hid" --override --reason "$(printf 'a\tb')" 2>&1); is "$?" 1 "a reason with a control character exits 1"
like "$out" "control character \(byte 2\)" "... naming where"
out=$(ctl deploy "$hid" --override --reason "$(printf '%0501d' 0)" 2>&1); is "$?" 1 "a reason over 500 bytes exits 1"
is "$(sql "SELECT COUNT(*) FROM pipeline_event WHERE pipeline_id = '$hid' AND event_type = 'OVERRIDE'")|$(sql "SELECT override_at IS NULL FROM pipeline WHERE id = '$hid'")" "0|1" "... nothing changed by any of them"
out=$(ctl show "$hid"); like "$out" "held        freeze" "show prints why a pipeline is held"
out=$(ctl deploy "$hid" --override --reason "security fix"); is "$?" 0 "deploy --override --reason exits 0"
like "$out" "override recorded" "... saying so"
is "$(sql "SELECT COUNT(*) FROM pipeline_event WHERE pipeline_id = '$hid' AND event_type = 'OVERRIDE' AND message LIKE 'Deploy override by %: security fix'")" 1 "... one OVERRIDE event with the reason"
out=$(ctl deploy "$hid" --override --reason again); is "$?" 0 "a second override is a no-op"
like "$out" "already overridden" "... saying so"
out=$(ctl show "$hid" --json); like "$out" '"hold":"freeze","override_at":"[0-9-]+ [0-9:.]+","rollback_of":null' "show --json has hold, override_at and rollback_of"
ctl stop "$hid" >/dev/null
out=$(ctl deploy "$hid" --override --reason late 2>&1); is "$?" 3 "an override of a stopped pipeline exits 3"

# --- names: the policy's rule, lowercase DNS labels (issue 10) ---------------
rule='must be a lowercase DNS label \(a-z, 0-9 and "-", not at either end, at most 63 characters\)'
rows_before=$(sql "SELECT COUNT(*) FROM pipeline")
out=$(ctl create --app shop/api --env '--force-delete' 2>&1); is "$?" 1 "an environment that is a flag is refused (exit 1)"
is "$out" 'oopsctl: create: --env "--force-delete": must be a lowercase DNS label (a-z, 0-9 and "-", not at either end, at most 63 characters)' \
  "... naming the flag, the value and the rule"
long=$(printf 'e%.0s' {1..64})
bad_names=(PROD Prod prodD "prod " " prod" -prod prod- pr_od pr.od pr/od "pr od" $'prod\n' $'pr\eod' "caf$(printf '\xc3\xa9')" "$long")
for env in "${bad_names[@]}"; do
  out=$(ctl create --app shop/names --env "$env" 2>&1); rc=$?
  [[ $rc == 1 && $out =~ --env\ \".*\":\ $rule ]] || { is "$rc: $out" "1: --env rule" "a bad --env $(printf %q "$env") is refused"; continue; }
done
is "$(sql "SELECT COUNT(*) FROM pipeline")" "$rows_before" "every bad --env of the class is refused with the rule, and creates nothing"
for app in SHOP/api shop/API Shop/Api "shop /api" "shop/api " " shop/api" -shop/api shop/api- sh_op/api shop/a.pi "$long/api" "shop/$long"; do
  out=$(ctl create --app "$app" --env prod 2>&1); rc=$?
  [[ $rc == 1 && $out =~ --app\ \".*:\ (namespace|application)\ \".*:\ $rule ]] || is "$rc: $out" "1: --app rule" "a bad --app $(printf %q "$app") is refused"
done
is "$(sql "SELECT COUNT(*) FROM pipeline")" "$rows_before" "every bad namespace or application of the class is refused with the rule, and creates nothing"
out=$(ctl create --app SHOP/API --env prod 2>&1); is "$?" 1 "SHOP/API beside an unfinished shop/api is refused"
like "$out" 'namespace "SHOP": must be a lowercase DNS label' "... for its name, not as a collision with shop/api"
unlike "$out" "already exists" "... (names no longer compare without case)"
# In the database itself names compare byte for byte: a row another tool
# wrote for SHOP/API or "shop /api" does not collide with the unfinished shop/api.
other=$(sql "SELECT id FROM pipeline WHERE namespace = 'shop' AND application = 'api' AND environment = 'prod' AND unfinished_key IS NOT NULL")
sql "INSERT INTO pipeline (id, namespace, application, environment, status) VALUES ('zzcase000001', 'SHOP', 'API', 'prod', 'INITIALIZED'), ('zzcase000002', 'shop ', 'api', 'prod', 'INITIALIZED')"
is "$?" 0 "the database keeps SHOP/API and 'shop ' apart from the unfinished shop/api ($other)"
sql "DELETE FROM pipeline WHERE id LIKE 'zzcase%'"
out=$(ctl --db "mysql://oops:x@127.0.0.1:1/oops" create --app shop/api --env PROD 2>&1); is "$?" 1 "a bad name is refused before the database is opened (exit 1, not 2)"

# --- pipeline ids: the id format, byte for byte (issue 10) --------------------
idok=$(ctl create --app shop/ids --env prod); is "$?" 0 "a pipeline for the id checks"
idlong=$(printf 'a%.0s' {1..65})
for cmd in show stop deploy logs; do
  for bad in "$idok " " $idok" "${idok^^}" "$idok-x" "$idok/" $'\e[2J' "$idlong"; do
    out=$(ctl $cmd "$bad" 2>&1); rc=$?
    [[ $rc == 1 && $out == "oopsctl: $cmd: malformed pipeline id "* ]] || is "$rc: $out" "1: malformed" "$cmd $(printf %q "$bad") is refused"
  done
done
is "$(sql "SELECT status FROM pipeline WHERE id = '$idok'")" INITIALIZED "every malformed id of the class is refused by show, stop, deploy and logs; nothing changed"
is "$(sql "SELECT COUNT(*) FROM pipeline_event WHERE pipeline_id <> TRIM(pipeline_id) OR BINARY pipeline_id <> LOWER(pipeline_id)")" 0 "... and no event was stored under a spaced or upper-case id"
out=$(ctl show "$idok 2>&1" 2>&1); is "$?" 1 "show 'ID ' (trailing space) does not find the pipeline"
out=$(ctl show "$(printf 'a%.0s' {1..64})" 2>&1); is "$?" 1 "a 64-character id is well formed (rows of other tools) ..."
like "$out" "no pipeline with id" "... and simply not found"

# --- the policy decides what may be created (issue 9) -------------------------
pol="$OOPS_TEST_WORK/ctl-policies"; mkdir -p "$pol"
printf 'application "pol/api" { environments = { "prod", "canary" } }\napplication "pol/web" { environments = { "staging" } }\n' >"$pol/apps.lua"
brokenpol="$OOPS_ROOT/tests/fixtures/policies/broken"
before=$(sql "SELECT COUNT(*) FROM pipeline")
out=$(ctl create --app pol/api --env staging --policies "$pol" 2>&1); is "$?" 1 "an environment the application does not declare is refused (exit 1)"
is "$out" "oopsctl: create: --env \"staging\" is not an environment of pol/api in the policies in $pol (it declares: prod, canary)" "... in one line naming the environment, the application and what it declares"
out=$(ctl create --app pol/web --env prod --policies "$pol" 2>&1); is "$?" 1 "... for every application"
out=$(ctl create --app pol/nope --env prod --policies "$pol" 2>&1); is "$?" 1 "an undeclared application is refused (exit 1)"
is "$out" "oopsctl: create: --app \"pol/nope\" is not declared in the policies in $pol (declared: pol/api, pol/web)" "... naming it and what is declared"
out=$(OOPS_POLICIES="$pol" ctl create --app pol/api --env staging 2>&1); is "$?" 1 "OOPS_POLICIES is read when --policies is absent"
out=$(ctl create --app pol/api --env prod --policies "$brokenpol" 2>&1); is "$?" 1 "a broken policy directory refuses the create (exit 1)"
like "$out" 'did not load.*broken/oopsd.lua:1: scan.interval: "fast": not a duration' "... printing its errors"
out=$(ctl create --app pol/api --env prod --policies "$OOPS_TEST_WORK/no-such-dir" 2>&1); is "$?" 1 "a missing policy directory refuses the create (exit 1)"
is "$(sql "SELECT COUNT(*) FROM pipeline")" "$before" "no refused create wrote anything"
polid=$(ctl create --app pol/api --env canary --policies "$pol" 2>"$OOPS_TEST_WORK/ctl.err"); is "$?" 0 "a declared application and environment are created"
is "$(cat "$OOPS_TEST_WORK/ctl.err")" "" "... without a warning"
polid2=$(OOPS_POLICIES="$brokenpol" ctl create --app pol/web --env staging --policies "$pol" 2>/dev/null); is "$?" 0 "--policies wins over OOPS_POLICIES"
unchecked=$(env -u OOPS_POLICIES "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" create --app pol/unchecked --env anything 2>"$OOPS_TEST_WORK/ctl.err"); is "$?" 0 "without a policy directory the create still happens"
is "$(cat "$OOPS_TEST_WORK/ctl.err")" "oopsctl: create: not checked against a policy: pass --policies DIR or set OOPS_POLICIES" "... saying on stderr that it was not checked"
out=$(OOPS_POLICIES= ctl create --app pol/unchecked2 --env anything 2>&1 >/dev/null); like "$out" "not checked against a policy" "an empty OOPS_POLICIES is no policy, and says so"
# With the exec gateway, a field the servers would refuse (a placeholder that
# would become an option, a control character: issue 22) refuses the create.
xpol="$OOPS_TEST_WORK/ctl-exec-policies"; mkdir -p "$xpol"
cat >"$xpol/apps.lua" <<'EOF'
gateway "exec" {}
application "pol/git" {
  environments = { "prod" },
  build = { submit = { "./ci", "submit", "{id}", "{source.repo}" }, status = { "./ci", "{job}" },
            cancel = { "./ci", "cancel", "{job}" } },
  deploy = { "./deploy", "{artifact}" }, health = { "true" },
}
EOF
before=$(sql "SELECT COUNT(*) FROM pipeline")
out=$(ctl create --app pol/git --env prod --source '{"repo": "--upload-pack=touch /tmp/x"}' --policies "$xpol" 2>&1)
is "$?" 1 "a --source value the build would take for an option is refused (exit 1)"
is "$out" "oopsctl: create: the servers would refuse this pipeline (policies in $xpol): build.submit argument 4: {source.repo}: its source's \"repo\" \"--upload-pack=touch /tmp/x\" would start the argument with \"-\" (a command would take it for an option)" "... in one line naming the command, the argument and the source's key"
out=$(ctl create --app pol/git --env prod --source '{"repo": "a\u001bb"}' --policies "$xpol" 2>&1); is "$?" 1 "a --source value holding a control character is refused"
like "$out" "\{source.repo\}: its source's \"repo\" holds a control character" "... naming the key"
out=$(ctl create --app pol/git --env prod --artifact=-x --policies "$xpol" 2>&1); is "$?" 1 "an artifact the deploy would take for an option is refused"
like "$out" "deploy argument 2: \{artifact\}: its artifact" "... naming the deploy's argument"
is "$(sql "SELECT COUNT(*) FROM pipeline")" "$before" "... and nothing was created"
gitid=$(ctl create --app pol/git --env prod --source '{"repo": "git@example.org:x.git"}' --policies "$xpol" 2>&1); is "$?" 0 "a plain source is created"
sql "UPDATE pipeline SET status = 'STOPPED' WHERE id = '$gitid'" >/dev/null

# --- terminal escapes: text output is safe, JSON exact (issue 11) ------------
# Every C0 byte but NUL (a C string ends there; logs shows NUL too), DEL, and
# every C1 code point U+0080..U+009F as UTF-8, in fields a text output prints.
c0=$(for b in $(seq 1 31) 127; do printf '%02x' "$b"; done)
c1=$(for b in $(seq 128 159); do printf 'c2%02x' "$b"; done)
hostile="CONVERT(UNHEX('41${c0}${c1}5a') USING utf8mb4)"
c0_only="CONVERT(UNHEX('${c0}') USING utf8mb4)" c1_only="CONVERT(UNHEX('${c1}') USING utf8mb4)" # for 64-character names
esc=$(ctl create --app shop/escapes --env prod); is "$?" 0 "a pipeline for the escape checks"
sql "UPDATE pipeline SET artifact = $hostile, message = $hostile, driven_by = CONCAT('srv', $c0_only) WHERE id = '$esc'"
sql "INSERT INTO pipeline_event (pipeline_id, event_type, from_status, to_status, message, server) VALUES ('$esc', 'FAILED', 'INITIALIZED', 'ERROR', $hostile, CONCAT('s', $c1_only))"
sql "INSERT INTO pipeline_log (pipeline_id, step, server, argv, result, output) VALUES ('$esc', 'build', CONCAT('s', $c0_only), JSON_ARRAY(CONVERT(UNHEX('1b5d303b7877') USING utf8mb4)), $hostile, CONCAT('line one', CHAR(10), CONVERT(UNHEX('00${c0}${c1}') USING utf8mb4), CHAR(10), 'last'))"
# Bytes a terminal acts on: C0 (but newline, and tab where lines are kept), DEL, C1 as UTF-8.
controls() { printf '%s' "$1" | LC_ALL=C tr -d '\n\040-\176\200-\377' | wc -c; }
c1s() { printf '%s' "$1" | LC_ALL=C grep -caP '\xc2[\x80-\x9f]'; }
want_escaped='A\\x01\\x02\\x03\\x04\\x05\\x06\\x07\\x08\\t\\n\\x0b\\x0c\\r\\x0e\\x0f\\x10\\x11\\x12\\x13\\x14\\x15\\x16\\x17\\x18\\x19\\x1a\\x1b\\x1c\\x1d\\x1e\\x1f\\x7f\\u0080\\u0081\\u0082\\u0083\\u0084\\u0085\\u0086\\u0087\\u0088\\u0089\\u008a\\u008b\\u008c\\u008d\\u008e\\u008f\\u0090\\u0091\\u0092\\u0093\\u0094\\u0095\\u0096\\u0097\\u0098\\u0099\\u009a\\u009b\\u009c\\u009d\\u009e\\u009fZ'
out=$(ctl show "$esc"); is "$?" 0 "show prints a pipeline whose fields hold control characters"
is "$(controls "$out")" 0 "... with no C0 control byte or DEL in its output"
is "$(c1s "$out")" 0 "... and no C1 control"
like "$out" "artifact    $want_escaped" "... each one shown escaped (\\xNN, \\t \\n \\r, \\uNNNN for C1)"
like "$out" "message     $want_escaped" "... in the message too"
like "$out" "FAILED +INITIALIZED -> ERROR +s\\\\u0080\\\\u0081.*\\\\u009f +$want_escaped" "... and in the events"
like "$out" "driven by   srv\\\\x01\\\\x02\\\\x03\\\\x04\\\\x05\\\\x06\\\\x07\\\\x08\\\\t\\\\n\\\\x0b" "... and the server name"
out=$(ctl list); is "$(controls "$out")" 0 "list prints no control byte (a server name holds them)"
is "$(c1s "$out")" 0 "... and no C1 control"
like "$out" "srv\\\\x01\\\\x02" "... showing them escaped"
out=$(ctl logs "$esc"); is "$?" 0 "logs prints output holding control characters"
is "$(printf '%s' "$out" | LC_ALL=C tr -d '\n\t\040-\176\200-\377' | wc -c)" 0 "... with no control byte but newlines and tabs"
is "$(c1s "$out")" 0 "... and no C1 control"
like "$out" "    \| line one
    \| \\\\x00\\\\x01" "... lines kept, NUL and the rest escaped"
like "$out" "argv \[\"\\\\u001[bB]\]0;xw\"\]" "... the argv as stored (JSON escapes are text)"
# JSON stays exact: the database decodes it back to the very bytes stored.
json_is_exact() { # JSON, path, SQL expression of the stored value
  local hex; hex=$(printf '%s' "$1" | od -An -tx1 | tr -d ' \n')
  sql "SELECT JSON_VALID(CONVERT(UNHEX('$hex') USING utf8mb4)) AND JSON_UNQUOTE(JSON_EXTRACT(CONVERT(UNHEX('$hex') USING utf8mb4), '$2')) = BINARY $3"
}
is "$(json_is_exact "$(ctl --json show "$esc")" '$.pipeline.artifact' "$hostile")" 1 "show --json is valid JSON holding the artifact exactly"
is "$(json_is_exact "$(ctl --json show "$esc")" '$.events[1].message' "$hostile")" 1 "... and the event message exactly"
is "$(json_is_exact "$(ctl --json logs "$esc")" '$[0].result' "$hostile")" 1 "logs --json holds the result exactly"
out=$(ctl show $'\e]0;pwned\a' 2>&1); is "$(controls "$out")" 0 "an error message quoting bad input prints no control byte either"
like "$out" 'malformed pipeline id "\\x1b\]0;pwned\\x07"' "... showing it escaped"

# --- every flag validated fully (issue 12) ------------------------------------
ini=$(sql "SELECT id FROM pipeline WHERE status = 'INITIALIZED' ORDER BY created_at LIMIT 1")
long_status=$(printf 'RUNNING,%.0s' {1..40})DEPLOYING
out=$(ctl list --status "$long_status"); is "$?" 0 "a --status list longer than 255 characters is read ..."
unlike "$out" "$ini" "... and filters (an INITIALIZED pipeline is not listed)"
out=$(ctl list --status "${long_status},NOPE" 2>&1); is "$?" 1 "... to its last element (a bad one at the end is refused)"
like "$out" '"NOPE" is not a status' "... naming it"
for st in "" "," "RUNNING," ",RUNNING" "RUNNING,,ERROR" "RUNNING " " RUNNING" "RUN" "NOPE" "RÜNNING"; do
  out=$(ctl list --status "$st" 2>&1); rc=$?
  [[ $rc == 1 && $out == "oopsctl: list: --status \""* ]] || is "$rc: $out" "1: --status" "list --status $(printf %q "$st") is refused"
done
is ok ok "every bad --status of the class is refused, naming --status and the value"
out=$(ctl list --status initialized); like "$out" "$ini" "statuses are case-insensitive in list ..."
ids_of() { ctl --json list --status "$1" | grep -o '"id":"[a-z0-9]*"'; }
is "$(ids_of Initialized,running)" "$(ids_of INITIALIZED,RUNNING)" "... in any mix of case"
case_id=$(ctl create --app shop/case --env prod)
for st in running build_succeeded Deploying rolling_out succeeded Error stopped; do
  out=$(ctl stop "$case_id" --expect "$st" 2>&1); rc=$?
  [[ $rc == 3 && $out == *"it is INITIALIZED, not ${st^^}; nothing changed" ]] || is "$rc: $out" "3: stale" "stop --expect $st (any case) reads the status"
done
is "$(sql "SELECT status FROM pipeline WHERE id = '$case_id'")" INITIALIZED "... and in stop --expect: every other status, in any case, is a stale view (exit 3)"
out=$(ctl stop "$case_id" --expect initialized); is "$?" 0 "stop --expect initialized stops an INITIALIZED pipeline"
for st in "" "NOPE" "INITIALIZED," "initialized "; do
  out=$(ctl stop "$case_id" --expect "$st" 2>&1); rc=$?
  [[ $rc == 1 && $out == "oopsctl: stop: --expect \""* ]] || is "$rc: $out" "1: --expect" "stop --expect $(printf %q "$st") is refused"
done
for lim in "" 0 -5 abc 1.5 " 5" "5 " 5x +5 0x10 1000001 99999999999999999999999; do
  out=$(ctl list --limit "$lim" 2>&1); rc=$?
  [[ $rc == 1 && $out == "oopsctl: list: --limit \""* ]] || is "$rc: $out" "1: --limit" "list --limit $(printf %q "$lim") is refused"
done
is "$(ctl --json list --limit 1 | grep -o '"id"' | wc -l)" 1 "every bad --limit is refused; --limit 1 lists one"
bad_lines=(
  "list --bogus" "list --stat RUNNING" "list --status RUNNING --status ERROR" "list --status=RUNNING --status=ERROR"
  "--json --json list" "--json list --json" "--json=yes list" "list extra"
  "create --app a/b --env e --env f" "create --app a/b --env e --manual=yes" "create --app a/b --env e --artifact ''"
  "create --app a/b --env e --source ''" "create --app a/b --env e --policies ''" "create --app a/b --env" "create --app a/b --env e --ap x/y"
  "create --app a/b --env e stray" "logs $idok --step ''" "logs $idok --step BUILD" "logs $idok --step build --step deploy"
  "show" "show $idok $idok" "stop" "stop $idok --expect" "migrate now" "locks all" "--db '' list" "--help=1"
)
for line in "${bad_lines[@]}"; do
  eval "set -- $line"
  out=$(ctl "$@" 2>&1); rc=$?
  [[ $rc == 1 && $out == oopsctl:* ]] || is "$rc: $out" "1: refused" "oopsctl $line is refused"
done
is "$(sql "SELECT COUNT(*) FROM pipeline WHERE application IN ('b', 'y')")" 0 "unknown, abbreviated, repeated and empty flags are refused (exit 1), nothing created"
out=$(ctl create --app a/b --env e --artifact $'v1\e[2J' 2>&1); is "$?" 1 "an artifact holding a control character is refused"
like "$out" '--artifact "v1\\x1b\[2J": holds a control character' "... naming it, escaped"
out=$(ctl list --status=RUNNING --limit=5); is "$?" 0 "--flag=value is the same as --flag value"
out=$(ctl list --json); is "$?" 0 "global flags may follow the command"
out=$(ctl --help); is "$?" 0 "--help exits 0"
like "$out" "Status names are read in any case" "... and states the status rule"

# The database unreachable, or credentials refused: exit 2, naming the host, never the password.
pw=$(cat "$OOPS_DB_PASSWORD_FILE") # the URL has none (issue 34: tests pass it in argv)
out=$("$OOPS_BUILD/oopsctl" --db "mysql://oops:$pw@127.0.0.1:1/oops" list 2>&1); is "$?" 2 "an unreachable database exits 2"
like "$out" "cannot connect to database at 127.0.0.1:1" "... naming the host"
unlike "$out" "$pw" "... never the password"
bad=${OOPS_TEST_DB/\/\/oops@/\/\/oops:wrong-$pw@}
out=$("$OOPS_BUILD/oopsctl" --db "$bad" list 2>&1); is "$?" 2 "refused credentials exit 2"
like "$out" "Access denied" "... saying access was denied"
unlike "$out" "wrong-$pw" "... never the password"
out=$("$OOPS_BUILD/oopsctl" --db "nonsense" list 2>&1); is "$?" 1 "a malformed URL exits 1"
# --- who and why (issue 27): the actor and --reason on every action, the audit log
host=$(hostname)
aid=$(SUDO_USER=alice USER=root ctl create --app shop/audit --env prod --manual --reason "release 7" 2>/dev/null)
is "$?" 0 "create --reason exits 0"
is "$(sql "SELECT CONCAT(actor, '|', reason, '|', server) FROM pipeline_event WHERE pipeline_id = '$aid'")" \
  "alice@$host|release 7|oopsctl@$host" "the CREATED event names the person behind sudo (SUDO_USER), the reason, and oopsctl as its server"
out=$(env -u SUDO_USER USER=bob LOGNAME=nobody "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" stop "$aid" --expect RUNNING --reason "too late" 2>&1)
is "$?" 3 "a stale stop with a reason exits 3"
out=$(env -u SUDO_USER USER=bob "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" stop "$aid" --reason "wrong branch"); is "$?" 0 "stop --reason exits 0"
is "$(sql "SELECT CONCAT(actor, '|', reason, '|', message) FROM pipeline_event WHERE pipeline_id = '$aid' AND to_status = 'STOPPED'")" \
  "bob@$host|wrong branch|Stopped by bob@$host: wrong branch" "... its event names USER without sudo, and says who and why"
me=$(id -un)
bid=$(env -u SUDO_USER -u USER -u LOGNAME "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" create --app shop/audit --env staging 2>/dev/null)
is "$(sql "SELECT CONCAT(actor, '|', reason IS NULL) FROM pipeline_event WHERE pipeline_id = '$bid'")" "$me@$host|1" \
  "without SUDO_USER, USER and LOGNAME the uid's name is the actor; no reason is NULL"
cid=$(SUDO_USER='-rf; x' USER=carol ctl create --app shop/audit2 --env prod 2>/dev/null)
is "$(sql "SELECT actor FROM pipeline_event WHERE pipeline_id = '$cid'")" "carol@$host" "a SUDO_USER that is no login name is not taken (USER is)"
for bad in "" "$(printf 'a\nb')" "$(printf 'x\033[2J')" "$(printf '%0501d' 0)" "$(printf 'caf\xe9')"; do
  out=$(ctl stop "$bid" --reason "$bad" 2>&1); is "$?" 1 "stop with a bad reason ($(printf '%q' "${bad:0:12}")) exits 1"
done
like "$(ctl create --app shop/x --env prod --reason "$(printf 'a\tb')" 2>&1)" "create: --reason holds a control character \(byte 2\)" \
  "create refuses a control character, naming where"
like "$(ctl rollback --app shop/x --env prod --reason "$(printf '%0501d' 0)" 2>&1)" "rollback: --reason must be 1 to 500 bytes, not 501" \
  "rollback refuses an over-long reason"
is "$(sql "SELECT status FROM pipeline WHERE id = '$bid'")|$(sql "SELECT COUNT(*) FROM pipeline WHERE application = 'x'")" "INITIALIZED|0" \
  "... nothing changed by any of them"
out=$(ctl stop "$bid" --reason "ünïcode ok"); is "$?" 0 "a UTF-8 reason is taken"
out=$(ctl show "$aid"); like "$out" "bob@$host +Stopped by bob@$host: wrong branch" "show prints the actor of an operator's event"
like "$out" "reason: wrong branch" "... and its reason"
out=$(ctl --json show "$aid"); like "$out" "\"actor\":\"bob@$host\",\"reason\":\"wrong branch\"" "show --json has actor and reason"
is "$(ctl --json list --app shop/audit --env prod --all | jq -r '.[0].actor')" "bob@$host" \
  "list --json has the person of each pipeline's latest operator event"
is "$(ctl --json list --app shop/api --env prod --all | jq -r '[.[] | has("actor")] | all')" "true" "... on every row (null for none)"
out=$(ctl --json audit --app shop/audit); is "$?" 0 "audit --json exits 0"
like "$out" "^\[\{.*\"actor\":\"$me@$host\",\"action\":\"stop\".*\"outcome\":\"done\"" "audit is newest first (the last stop first)"
is "$(jq -r '.[] | "\(.action)/\(.outcome)/\(.actor)/\(.reason)"' <<<"$out" | tr '\n' ' ')" \
  "stop/done/$me@$host/ünïcode ok create/done/$me@$host/null stop/done/bob@$host/wrong branch stop/stale/bob@$host/too late create/done/alice@$host/release 7 " \
  "audit records every action of the app, a stale stop too (outcome stale), with actor and reason"
like "$(jq -r '.[3].detail' <<<"$out")" "state changed concurrently: it is INITIALIZED, not RUNNING" "... the refusal keeps what the operator was told"
is "$(ctl --json audit --actor "alice@$host" | jq -r 'map(.pipeline) | join(",")')" "$aid" "audit --actor filters by actor"
is "$(ctl --json audit --app shop/audit --env staging | jq -r 'map(.action) | join(",")')" "stop,create" "audit --env filters by environment"
is "$(ctl --json audit --since 1h --actor nobody@nowhere)" "[]" "audit of nobody is empty"
sql "UPDATE operator_action SET created_at = NOW(6) - INTERVAL 2 DAY WHERE actor = 'alice@$host'"
is "$(ctl --json audit --since 1d --app shop/audit | jq -r 'map(.actor) | unique | join(",")')" "$(printf '%s\n' "$me@$host" "bob@$host" | LC_ALL=C sort -u | paste -sd,)" "audit --since leaves older actions out"
out=$(ctl audit --limit 2 2>&1); like "$out" "showing the newest 2; more match" "audit --limit cuts, saying so"
like "$(ctl audit | head -1)" "^TIME \(UTC\) +ACTOR +ACTION +PIPELINE +APP ENV +OUTCOME +REASON" "audit prints a table"
out=$(ctl audit --since 3x 2>&1); is "$?" 1 "audit with a bad --since exits 1"
out=$(ctl audit --actor "$(printf '%0129d' 0)" 2>&1); is "$?" 1 "audit with an over-long --actor exits 1"

# --- the audit log misses nothing (issue 34): a refused create, "already" answers,
# and a row that cannot be written is said, never lost silently
first=$(ctl create --app shop/refuse --env prod --manual --reason "first" 2>/dev/null)
out=$(ctl create --app shop/refuse --env prod --reason "second one" 2>&1); is "$?" 1 "a second create beside an unfinished pipeline exits 1"
told=${out#oopsctl: }
out=$(ctl --json audit --app shop/refuse --env prod)
is "$(jq -r '.[0] | "\(.action)/\(.outcome)/\(.reason)/\(.pipeline)"' <<<"$out")" "create/refused/second one/null" \
  "... and the audit log records the refused create with its reason"
is "$(jq -r '.[0].detail' <<<"$out")" "$told" "... in the words the operator saw"
like "$told" "create: an unfinished pipeline already exists for shop/refuse in prod" "... which say why"
out=$(ctl create --app shop/refuse --env Prod 2>&1); is "$?" 1 "a create refused for its environment's name exits 1 before the database"
is "$(ctl --json audit --app shop/refuse | jq length)" 2 "... a refusal that never reached the database is no action"
out=$(ctl create --app shop/refuse --env staging --source 'not json' 2>&1); is "$?" 1 "a create whose source the database refuses exits 1"
is "$(ctl --json audit --app shop/refuse --env staging | jq -r '.[0] | "\(.action)/\(.outcome)/\(.detail)"')" \
  "create/refused/create: source is not valid JSON" "... recorded as refused, in its words"
sql "UPDATE pipeline SET status = 'BUILD_SUCCEEDED' WHERE id = '$first'"
is "$(ctl deploy "$first" --reason "go")" "deploy of $first requested" "a release is requested"
is "$(ctl deploy "$first" --reason "go again")" "deploy of $first already requested" "a second release: already requested"
out=$(ctl --json deploy "$first" --reason "json too"); like "$out" '"already":true' "... --json says already"
is "$(ctl deploy "$first" --override --reason "hotfix")" "deploy of $first: override recorded; it deploys at the next tick" "an override"
is "$(ctl deploy "$first" --override --reason "hotfix again")" "deploy of $first already overridden" "a second override: already overridden"
out=$(ctl --json audit --app shop/refuse --env prod)
is "$(jq -r 'map("\(.action)/\(.outcome)/\(.reason)") | reverse | join(" ")' <<<"$out")" \
  "create/done/first create/refused/second one release/done/go release/already/go again release/already/json too override/done/hotfix override/already/hotfix again" \
  "every answer is in the audit log, already ones as outcome already"
is "$(jq -r '.[0].detail, .[3].detail' <<<"$out" | paste -sd'|')" "deploy of $first already overridden|deploy of $first already requested" \
  "... each with the words the operator saw"
# A release the engine took up already (a second click after it moved on) is "already", not stale;
# one never requested is stale as before.
sql "UPDATE pipeline SET status = 'ROLLING_OUT' WHERE id = '$first'"
is "$(ctl deploy "$first" --reason "third" 2>&1)" "deploy of $first already requested (it is ROLLING_OUT)" \
  "a release asked again once it rolls out: already requested, saying where it is"
other=$(ctl create --app shop/refuse --env qa --manual 2>/dev/null)
sql "UPDATE pipeline SET status = 'DEPLOYING' WHERE id = '$other'"
out=$(ctl deploy "$other" 2>&1); is "$?" 3 "a release of one deploying without a request exits 3 (stale)"
like "$out" "state changed concurrently: it is DEPLOYING, not BUILD_SUCCEEDED; nothing changed" "... saying so"
# An audit row that cannot be written (a trigger refuses it): the answer stands, a log line says so.
sql "CREATE TRIGGER audit_full BEFORE INSERT ON operator_action FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'audit table full'"
out=$(ctl stop "$aid" --reason "after the end" 2>&1); is "$?" 1 "with the audit log failing, a refused stop still exits 1"
like "$out" "already finished" "... with its answer"
like "$out" "level=error .*error=\"execute: audit table full\" msg=\"audit log: the operator.s action could not be recorded\"" \
  "... and a log line saying the row was lost, and why"
sql "DROP TRIGGER audit_full"

# abort / promote (issue 38): an operator's request to a canary, carried out by its driver.
cid=$(ctl create --app shop/canary --env prod --artifact c1)
out=$(ctl abort "$cid" 2>&1); is "$?" 1 "abort without a reason exits 1"
like "$out" "abort: --reason TEXT is needed" "... saying the reason is needed"
out=$(ctl abort "$cid" --reason "bad" 2>&1); is "$?" 1 "abort before the rollout exits 1"
like "$out" "abort $cid: the pipeline is INITIALIZED, not rolling out: no canary to abort" "... saying why"
out=$(ctl abort nosuchpipeline1 --reason "x" 2>&1); is "$?" 1 "abort of an unknown id exits 1"
like "$out" 'no pipeline with id "nosuchpipeline1"' "... naming it"
sql "UPDATE pipeline SET status = 'ROLLING_OUT' WHERE id = '$cid'"
out=$(ctl promote "$cid" --reason "go" 2>&1); is "$?" 1 "promote before a canary step began exits 1"
like "$out" "no canary step has begun" "... saying so"
sql "UPDATE pipeline SET step = 2, paused = 'operator' WHERE id = '$cid'"
out=$(ctl promote "$cid" --reason "looks good"); is "$?" 0 "promote exits 0"
like "$out" "promote of $cid requested: the server driving it ends the current step" "... saying what happens next"
is "$(sql "SELECT canary_request FROM pipeline WHERE id = '$cid'")" "promote" "... and records the request"
out=$(ctl promote "$cid" --reason "again"); like "$out" "promote of $cid already requested" "the same request again: already"
out=$(ctl --json abort "$cid" --reason "wrong config"); is "$?" 0 "an abort replaces a pending promotion"
like "$out" '"requested":"abort"' "... --json says what was requested"
out=$(ctl promote "$cid" --full --reason "late" 2>&1); is "$?" 1 "a promotion over a pending abort exits 1"
like "$out" "an abort is pending" "... saying so"
is "$(sql "SELECT GROUP_CONCAT(CONCAT(event_type, '/', reason) ORDER BY id) FROM pipeline_event WHERE pipeline_id = '$cid' AND event_type LIKE 'CANARY%'")" \
  "CANARY_PROMOTE/looks good,CANARY_ABORT/wrong config" "each request is an event with its reason"
is "$(sql "SELECT COUNT(*) FROM outbox o JOIN pipeline_event e ON o.ref_id = e.id WHERE e.pipeline_id = '$cid' AND e.event_type LIKE 'CANARY%'")" \
  2 "... each announced"
is "$(sql "SELECT GROUP_CONCAT(CONCAT(action, '/', outcome) ORDER BY id) FROM operator_action WHERE pipeline_id = '$cid' AND action IN ('abort', 'promote')")" \
  "abort/refused,promote/refused,promote/done,promote/already,abort/done,promote/refused" "... and every answer about it is in the audit log"
out=$(ctl show "$cid"); like "$out" "canary +step 2, paused \(operator\), abort requested" "show prints the canary's state"

# approve / reject (issue 39): before the deploy, a reason, two persons, the JSON answer.
xid=$(SUDO_USER=carol ctl create --app shop/approve --env prod --artifact a1)
out=$(SUDO_USER=alice ctl approve "$xid" 2>&1); is "$?" 1 "approve without a reason exits 1"
like "$out" "approve: --reason TEXT is needed" "... saying the reason is needed"
out=$(SUDO_USER=carol ctl approve "$xid" --reason "mine" 2>&1); is "$?" 1 "its creator's approval exits 1"
like "$out" "approve $xid: carol created it \(or promoted it, or a release it was promoted from\), and an approval must come from another person \(two-person rule\)" \
  "... saying why"
out=$(SUDO_USER=alice ctl --json approve "$xid" --reason "ok"); is "$?" 0 "another person's approval exits 0"
is "$out" "{\"id\":\"$xid\",\"approvals\":1,\"approved_by\":\"alice\"}" "... --json: the count and who"
out=$(SUDO_USER=alice ctl approve "$xid" --reason "ok again"); is "$?" 0 "approving again exits 0"
like "$out" "approval of $xid by alice already recorded" "... and counts nothing"
is "$(SUDO_USER=bob ctl approve "$xid" --reason "ok too")" "$xid approved by bob: 2 approvals (alice,bob)" \
  "a second person: 2 approvals"
out=$(ctl show "$xid"); like "$out" "approvals +2 \(alice,bob\)" "show prints the approvals"
out=$(SUDO_USER=dave ctl approve nosuchpipeline1 --reason "x" 2>&1); is "$?" 1 "approve of an unknown id exits 1"
out=$(SUDO_USER=dave ctl reject "$xid" --reason "no"); is "$?" 0 "reject exits 0"
is "$out" "$xid rejected: INITIALIZED -> STOPPED" "... it is stopped"
out=$(SUDO_USER=dave ctl approve "$xid" --reason "late" 2>&1); is "$?" 1 "approving a stopped release exits 1"
like "$out" "it is STOPPED: approvals are given before the deploy" "... saying why"
is "$(sql "SELECT GROUP_CONCAT(CONCAT(event_type, '/', actor, '/', reason) ORDER BY id) FROM pipeline_event WHERE pipeline_id = '$xid' AND event_type IN ('APPROVED', 'REJECTED')")" \
  "APPROVED/alice@$host/ok,APPROVED/bob@$host/ok too,REJECTED/dave@$host/no" "each is an event with its person and reason"
is "$(sql "SELECT GROUP_CONCAT(CONCAT(action, '/', outcome) ORDER BY id) FROM operator_action WHERE pipeline_id = '$xid' AND action IN ('approve', 'reject')")" \
  "approve/refused,approve/done,approve/already,approve/done,reject/done,approve/refused" "... and every answer is in the audit log"

# promote-now (issue 39): a live release to the environment its policy names,
# once; every refusal one line with its exit code, nothing changed.
ppol="$OOPS_TEST_WORK/ctl-promote"; mkdir -p "$ppol"
printf 'application "shop/prom" { environments = { "staging", "prod", "qa" }, promote = { staging = { to = "prod", after = "1h" } } }\n' >"$ppol/apps.lua"
sid=$(ctl create --app shop/prom --env staging --artifact p1)
out=$(SUDO_USER=erin ctl promote-now "$sid" --to prod --reason "early" 2>&1); is "$?" 1 "promote-now of a release not live exits 1"
like "$out" "promote-now $sid: it is INITIALIZED: only a release that went live \(SUCCEEDED\) is promoted" "... saying why"
sql "UPDATE pipeline SET status = 'SUCCEEDED' WHERE id = '$sid'"
out=$(ctl promote-now "$sid" --reason "x" 2>&1); is "$?" 1 "without a policy and without --to: exit 1"
like "$out" "--to ENV must name where it goes" "... saying what is missing"
out=$(ctl promote-now "$sid" --to prod 2>&1); is "$?" 1 "without a reason: exit 1"
like "$out" "a reason is needed" "... saying so"
out=$(ctl promote-now "$sid" --policies "$ppol" --to qa --reason "x" 2>&1); is "$?" 1 "--to other than the policy's: exit 1"
is "$out" "oopsctl: promote-now $sid: --to qa, but the policies in $ppol promote it to prod" "... in one line"
out=$(ctl promote-now nosuchpipeline1 --policies "$ppol" --reason "x" 2>&1); is "$?" 1 "an unknown id: exit 1"
like "$out" 'no pipeline with id "nosuchpipeline1"' "... saying so"
is "$(sql "SELECT COUNT(*) FROM pipeline WHERE promoted_from = '$sid'")" 0 "nothing was promoted by a refusal"
out=$(SUDO_USER=erin ctl --json promote-now "$sid" --policies "$ppol" --reason "ship it"); is "$?" 0 "promote-now exits 0"
pid=$(sql "SELECT id FROM pipeline WHERE promoted_from = '$sid'")
is "$out" "{\"id\":\"$pid\",\"trigger\":\"promotion\",\"promoted_from\":\"$sid\",\"environment\":\"prod\"}" \
  "... --json: the new pipeline, its trigger, where it came from and went"
is "$(sql "SELECT CONCAT(environment, ' ', status, ' ', trigger_type, ' ', artifact) FROM pipeline WHERE id = '$pid'")" \
  "prod INITIALIZED promotion p1" "... a promotion of its artifact to prod"
out=$(SUDO_USER=fred ctl promote-now "$sid" --to prod --reason "again" 2>"$OOPS_TEST_WORK/promote.err")
is "$?" 0 "promoting it again exits 0"
is "$out" "$pid" "... printing the promotion made before"
like "$(cat "$OOPS_TEST_WORK/promote.err")" "promote-now: $sid was promoted already: $pid" "... and saying so"
out=$(SUDO_USER=erin ctl approve "$pid" --reason "mine" 2>&1); is "$?" 1 "its promoter's approval exits 1 (two-person rule)"
out=$(ctl show "$pid"); like "$out" "promoted    from release $sid" "show names the release it came from"
is "$(sql "SELECT CONCAT(actor, '/', reason) FROM pipeline_event WHERE pipeline_id = '$pid' AND event_type = 'CREATED'")" \
  "erin@$host/ship it" "its creation names who promoted it and why"
is "$(sql "SELECT GROUP_CONCAT(CONCAT(action, '/', outcome) ORDER BY id) FROM operator_action WHERE action = 'promote-now'")" \
  "promote-now/refused,promote-now/refused,promote-now/refused,promote-now/done,promote-now/already" \
  "... and the audit log every answer that reached the database (not live, no reason, unknown id, made, already)"

out=$(OOPS_DB="$OOPS_TEST_DB" "$OOPS_BUILD/oopsctl" list); is "$?" 0 "OOPS_DB is read when --db is absent"
out=$(env -u OOPS_DB_PASSWORD_FILE OOPS_DB="$OOPS_TEST_DB" OOPS_DB_PASSWORD="$pw" "$OOPS_BUILD/oopsctl" list); is "$?" 0 "OOPS_DB_PASSWORD supplies the password"

done_testing
