# oopsctl list (default view, filters, bounds, order) and oopsctl history
# (releases and rollbacks, the live one), the real binary against the real
# database. Rows are written with SQL so that times and statuses are exact.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }
ids() { ctl --json "$@" 2>/dev/null | grep -o '"id":"[a-z0-9]*"' | cut -d'"' -f4 | tr '\n' ' '; }
# pl ID NS APP ENV STATUS AGE_MINUTES [TRIGGER ARTIFACT CHANGED_AGE_MINUTES]
pl() {
  local art=NULL; [[ -n ${8:-} ]] && art="'$8'"
  sql "INSERT INTO pipeline (id, namespace, application, environment, status, trigger_type, artifact,
         created_at, status_changed_at)
       VALUES ('$1', '$2', '$3', '$4', '$5', '${7:-release}', $art,
         NOW(6) - INTERVAL $6 MINUTE, NOW(6) - INTERVAL ${9:-$6} MINUTE)"
}

ctl migrate >/dev/null || { echo "not ok 1 - migrate"; exit 1; }

# --- list: the default view ------------------------------------------------
is "$(ids list)" "" "an empty database lists nothing"
# 30 finished pipelines f01 (newest) .. f30 (oldest), minutes 1..30 old, and
# three unfinished ones older than all of them.
for i in $(seq -w 1 30); do pl "f$i" shop api prod SUCCEEDED "$((10#$i))"; done
pl u1 shop api staging RUNNING 100
pl u2 shop web prod BUILD_SUCCEEDED 200
pl u3 blog www prod ROLLING_OUT 300
want="f01 f02 f03 f04 f05 f06 f07 f08 f09 f10 f11 f12 f13 f14 f15 f16 f17 f18 f19 f20 u1 u2 u3 "
is "$(ids list)" "$want" "list: every unfinished pipeline and the 20 most recent finished ones, newest first"
out=$(ctl list); is "$(wc -l <<<"$out")" 24 "... in text: a header and 23 rows"
like "$out" $'\n''f01 +shop/api +prod +SUCCEEDED' "... newest first"
is "$(ids list --all | wc -w)" 33 "list --all: every pipeline"
is "$(ids list --all)" "f$(seq -w -s ' f' 1 30) u1 u2 u3 " "... newest first"
is "$(ids list --all --limit 5)" "f01 f02 f03 f04 f05 " "--limit bounds --all"
is "$(ids list --limit 3)" "f01 f02 f03 " "--limit bounds the default view too (newest first)"
out=$(ctl list --limit 3 2>&1 >/dev/null); like "$out" "showing the newest 3; more match" "a cut listing says so on stderr"
out=$(ctl list --all 2>&1 >/dev/null); is "$out" "" "... and says nothing when it is not cut"
is "$(ids list --all --limit 33)" "$(ids list --all)" "--limit N equal to the count shows all"

# Ties in created_at are broken by id, newest (highest) first.
sql "UPDATE pipeline SET created_at = (SELECT c FROM (SELECT created_at c FROM pipeline WHERE id = 'f02') t) WHERE id = 'f03'"
is "$(ids list --limit 3)" "f01 f03 f02 " "equal creation times: ordered by id, descending"
sql "UPDATE pipeline SET created_at = NOW(6) - INTERVAL 3 MINUTE WHERE id = 'f03'"

# --- filters ---------------------------------------------------------------
is "$(ids list --app shop/web)" "u2 " "--app NS/APP"
is "$(ids list --env staging)" "u1 " "--env ENV"
is "$(ids list --app shop/api --env staging)" "u1 " "--app and --env together"
is "$(ids list --app blog/www --env staging)" "" "... which must both match"
is "$(ids list --app shop/api --env prod --limit 100 | wc -w)" 20 "--app/--env keep the default view (20 most recent finished)"
is "$(ids list --app shop/api --env prod --all | wc -w)" 30 "... unless --all"
is "$(ids list --status running,rolling_out)" "u1 u3 " "--status filters every pipeline (newest first)"
is "$(ids list --status SUCCEEDED | wc -w)" 30 "--status lifts the 20-recent bound"
is "$(ids list --since 5m30s)" "f01 f02 f03 f04 f05 " "--since DURATION: created within it (1m..5m old)"
is "$(ids list --since 2h | wc -w)" 31 "--since 2h: the 30 finished ones and u1 (u2 and u3 are older)"
is "$(ids list --since 1d | wc -w)" 33 "--since 1d: days"
is "$(ids list --since 1h30m --app shop/api)" "$(ids list --all --app shop/api --since 90m)" "--since 1h30m = 90m, combined with --app"
is "$(ids list --since 5m30s --limit 2)" "f01 f02 " "--since with --limit"

# --- refusals: exit 1, one line, nothing read or changed --------------------
before=$(sql "CHECKSUM TABLE pipeline")
for d in 5 0s 0 -5m 5x 5M "5 m" " 5m" 1m1h 1h1h 2h- m 1.5h 99999999999999999999d 36601d; do
  out=$(ctl list --since "$d" 2>&1); rc=$?
  [[ $rc == 1 && $out == "oopsctl: list: --since \""*"not a duration"* && $out != *$'\n'* ]] ||
    is "$rc: $out" "1: --since" "list --since $(printf %q "$d") is refused"
done
is ok ok "every bad --since is refused on one line naming --since and the value"
out=$(ctl list --since 36600d); is "$?" 0 "--since accepts up to 36600 days"
for lim in 0 -1 10001 1e3 abc; do
  out=$(ctl list --limit "$lim" 2>&1); rc=$?
  [[ $rc == 1 && $out == "oopsctl: list: --limit \""*"from 1 to 10000" ]] || is "$rc: $out" "1: --limit" "list --limit $(printf %q "$lim") is refused"
  out=$(ctl history --app shop/api --env prod --limit "$lim" 2>&1); rc=$?
  [[ $rc == 1 && $out == "oopsctl: history: --limit \""* ]] || is "$rc: $out" "1: --limit" "history --limit $(printf %q "$lim") is refused"
done
is ok ok "--limit outside 1..10000 is refused (list and history)"
is "$(ids list --limit 10000 | wc -w)" 23 "--limit 10000 is accepted"
while read -r line; do
  out=$(eval "ctl $line" 2>&1); rc=$?
  [[ $rc == 1 && $(wc -l <<<"$out") == 1 && $out == "oopsctl: "* ]] || is "$rc: $out" "1: one line" "oopsctl $line"
done <<'EOF'
list --app shop
list --app Shop/api
list --app shop/api/x
list --env Prod
list --env ''
list --env a_b
list --all --all
list --all=yes
list --app a/b --app a/b
list --since 1h --since 2h
history
history --app shop/api
history --env prod
history --app shop --env prod
history --app shop/api --env PROD
history --app shop/api --env prod --all
history --app shop/api --env prod stray
history --app shop/api --env prod --since 1h
EOF
is ok ok "bad flags and names are refused with exit 1 and one line"
is "$(sql "CHECKSUM TABLE pipeline")" "$before" "refusals change nothing"
out=$("$OOPS_BUILD/oopsctl" --db "mysql://oops:x@127.0.0.1:1/oops" list --since 2h --app a/b 2>&1); is "$?" 2 "list with filters: an unreachable database exits 2"
out=$("$OOPS_BUILD/oopsctl" --db "mysql://oops:x@127.0.0.1:1/oops" history --app a/b --env e 2>&1); is "$?" 2 "history: an unreachable database exits 2"
out=$("$OOPS_BUILD/oopsctl" --db "mysql://oops:x@127.0.0.1:1/oops" list --since 5x 2>&1); is "$?" 1 "... but a bad flag exits 1 before connecting"

# --- --json keeps list's shape ---------------------------------------------
out=$(ctl --json list --app blog/www); like "$out" '^\[\{"id":"u3","namespace":"blog","application":"www","environment":"prod","status":"ROLLING_OUT",' "list --json: an array of pipeline objects, as before"
out=$(ctl --json list --app blog/www --env staging); is "$out" "[]" "... [] when nothing matches"

# --- terminal-safe text ----------------------------------------------------
pl evil shop evil prod SUCCEEDED 2 release $'reg/x:1\e]0;pwned\a'
out=$(ctl list --app shop/evil); like "$out" 'evil +shop/evil' "list: a row with control characters ..."
unlike "$out" $'\e' "... is printed escaped"
out=$(ctl history --app shop/evil --env prod); like "$out" 'reg/x:1\\x1b\]0;pwned\\x07' "history escapes the artifact"
out=$(ctl --json history --app shop/evil --env prod); like "$out" '"artifact":"reg/x:1\\u001b\]0;pwned\\u0007"' "... and --json is exact"

# --- history ---------------------------------------------------------------
# h1 v1 (succeeded 50 min ago), h2 v2 (40), h3 failed, h4 stopped, h5 rollback
# to v1 (succeeded 20 min ago): v1 is live again.
pl h1 shop pay prod SUCCEEDED 55 release reg/pay:1 50
pl h2 shop pay prod SUCCEEDED 45 release reg/pay:2 40
pl h3 shop pay prod ERROR 35 release reg/pay:3 34
pl h4 shop pay prod STOPPED 30 release reg/pay:4 29
pl h5 shop pay prod SUCCEEDED 25 rollback reg/pay:1 20
pl o1 shop pay staging SUCCEEDED 10 release reg/pay:9 9
out=$(ctl history --app shop/pay --env prod); is "$?" 0 "history exits 0"
is "$(sed 1d <<<"$out" | awk '{print ($1 == "live" ? "*" $2 : $1)}' | tr '\n' ' ')" "*h5 h2 h1 " "history: the SUCCEEDED releases and rollbacks, newest first, the live one marked"
like "$out" $'\n''live +h5 +rollback +[0-9-]+ [0-9:]+ +reg/pay:1' "... with trigger, finish time and artifact"
like "$out" $'\n'' +h2 +release +[0-9-]+ [0-9:]+ +reg/pay:2' "... for each"
unlike "$out" "h3|h4|o1" "ERROR and STOPPED pipelines and other environments are left out"
live_json() { ctl --json history --app shop/pay --env prod | grep -o '"live":"[a-z0-9]*"'; }
is "$(live_json)" '"live":"h5"' "history --json names the live one"
out=$(ctl --json history --app shop/pay --env prod --limit 2)
like "$out" '^\{"namespace":"shop","application":"pay","environment":"prod","live":"h5","releases":\[\{"id":"h5","trigger":"rollback","status":"SUCCEEDED","artifact":"reg/pay:1","created_at":"[^"]+","finished_at":"[^"]+","live":true\},\{"id":"h2",[^]]*"live":false\}\]\}$' "... and --limit bounds it"

# A rollback in progress is shown first, the live one still marked.
id=$(ctl rollback --app shop/pay --env prod 2>/dev/null); is "$?" 0 "a rollback to v2 is created"
out=$(ctl history --app shop/pay --env prod)
is "$(sed -n 2p <<<"$out" | awk '{print $1, $2, $3, $4}')" "$id rollback in progress" "history shows the rollback in progress first ..."
like "$out" $'\n''live +h5 ' "... while h5 stays live"
is "$(ctl --json history --app shop/pay --env prod | grep -o '"finished_at":null,"live":false' | wc -l)" 1 "... (--json: finished_at null)"
# It succeeds: it is the live one now, across the rollback.
sql "UPDATE pipeline SET status = 'SUCCEEDED', status_changed_at = NOW(6) WHERE id = '$id'"
out=$(ctl history --app shop/pay --env prod)
like "$out" $'\n''live +'"$id"' +rollback +[0-9-]+ [0-9:]+ +reg/pay:2' "after the rollback succeeds, it is live with v2's artifact"
is "$(grep -c '^live' <<<"$out")" 1 "... and the only one marked"
is "$(live_json)" "\"live\":\"$id\"" "... in --json too"
# Agrees with what rollback would take as the current release.
out=$(ctl rollback --app shop/pay --env prod 2>&1 >/dev/null); like "$out" "rolls shop/pay prod back to h5" "rollback's current release is history's live one"
out=$(ctl history --app shop/none --env prod 2>&1); rc=$?
is "$rc" 0 "history of an app without releases exits 0 ..."
like "$out" "shop/none prod has no release yet" "... saying so"
is "$(ctl --json history --app shop/none --env prod)" '{"namespace":"shop","application":"none","environment":"prod","live":null,"releases":[]}' "... --json: live null, no releases"

done_testing
