# oopsctl outbox: the notification backlog per route of the policy
# (lua/oops/outbox/), on rows written straight into the tables of schema 14
# (a queue per route, issue 37): outbox rows (delivered ones, routed ones,
# rows waiting to be routed), each route's queue (notify_pending: its own
# attempts, retry and last error) and each route's state (notify_route: failed
# rounds in a row, back-off, last error): a webhook backing off whose head
# failed (a last error holding a raw secret URL), a log route delivering, a
# row failing on the webhook only (the log's figures unaffected), a row both
# routes took (its delivery being recorded), a removed route's queue, a route
# the notifier has not registered, a row whose event id holds a control
# character. Counts per route, the head row, --route listings, --json, the
# secrets never shown, the exit codes (1 bad input, 2 unreachable), the backlog
# without a policy, counts capped past their bound, and every statement
# index-served on filled tables (tests/integration/explain.sh's rule), the
# fleet page's (lua/oops/web.lua) too.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/ports.sh"
ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }
unset OOPS_POLICIES OOPS_DB

work=$(mktemp -d "$OOPS_TEST_WORK/outbox.XXXXXX")
all=$work/all-output # every output of every run, for the secret check
: >"$all"
run() { # ARGS...: oopsctl ARGS; stdout in $out, stderr in $err, exit status in $rc
  "$OOPS_BUILD/oopsctl" "$@" >"$work/out" 2>"$work/err"; rc=$?
  out=$(cat "$work/out"); err=$(cat "$work/err")
  cat "$work/out" "$work/err" >>"$all"
}

out=$(ctl migrate 2>&1); is "$?" 0 "migrate ($out)"
sql "DELETE FROM notify_pending; DELETE FROM notify_route; DELETE FROM outbox" # a database used before (run by hand)

# A webhook whose URL holds secrets (userinfo, query) to a closed port, and the log route.
hook='http://user:secret@127.0.0.1:9/hook?token=s3cr3t'
mkdir -p "$work/policies" "$work/other" "$work/broken"
cat >"$work/policies/oopsd.lua" <<EOF
notify { webhook = "$hook", log = true }
EOF
echo 'notify { webhook = "http://127.0.0.2:9/other", log = true }' >"$work/other/oopsd.lua"
echo 'notify { webhook = 42 }' >"$work/broken/oopsd.lua"
P=$work/policies
# The webhook route's key, as the notifier computes it.
cat >"$work/key.lua" <<EOF
print(require("oops.scans.notify").route_key { kind = "webhook", url = "$hook" })
EOF
wkey=$("$OOPS_BUILD/oopsd" lua "$work/key.lua" 2>&1)
like "$wkey" '^webhook:[0-9a-f]{8}$' "the webhook route's key ($wkey)"

# Ids in the order of created_at (the notifier's order is the id's).
sql "INSERT INTO outbox (event_id, kind, created_at, delivered_at, routed) VALUES
  ('done-1', 'alert', NOW(6) - INTERVAL 5 HOUR, NOW(6) - INTERVAL 4 HOUR, 1),
  ('done-2', 'pipeline', NOW(6) - INTERVAL 4 HOUR, NOW(6) - INTERVAL 3 HOUR, 1),
  ('fail-1', 'alert', NOW(6) - INTERVAL 2 HOUR, NULL, 1),
  ('wait-1', 'pipeline', NOW(6) - INTERVAL 90 MINUTE, NULL, 1),
  ('log-1', 'pipeline', NOW(6) - INTERVAL 80 MINUTE, NULL, 1),
  ('log-2', 'alert', NOW(6) - INTERVAL 70 MINUTE, NULL, 1),
  ('hook-1', 'pipeline', NOW(6) - INTERVAL 60 MINUTE, NULL, 1),
  ('both-1', 'pipeline', NOW(6) - INTERVAL 50 MINUTE, NULL, 1),
  (CONCAT('evil-', CHAR(27), '[31m'), 'alert', NOW(6) - INTERVAL 10 MINUTE, NULL, 1),
  ('new-1', 'pipeline', NOW(6) - INTERVAL 5 MINUTE, NULL, 0),
  ('new-2', 'pipeline', NOW(6) - INTERVAL 1 MINUTE, NULL, 0);"
oid() { sql "SELECT id FROM outbox WHERE event_id = '$1'"; }
fail_id=$(oid fail-1) wait_id=$(oid wait-1)
# The queues: fail-1 failed on the webhook (the log took it), wait-1 failed on the
# webhook and waits on the log, log-1 and log-2 the log took, hook-1 the webhook
# took (and a removed route still holds), both-1 both took, new-1 and new-2 wait
# to be routed.
sql "INSERT INTO notify_pending (route_key, outbox_id, attempts, next_attempt_at, last_error) VALUES
  ('$wkey', $fail_id, 3, NOW(6) + INTERVAL 1 HOUR,
   CONCAT('s1: webhook http://127.0.0.1:9/***: Could not connect; also http://user:secret@127.0.0.1:9/hook?token=s3cr3t',
          ' and user:secret@127.0.0.1 ', CHAR(27), '[2J ', REPEAT('x', 800))),
  ('$wkey', $wait_id, 1, NOW(6) + INTERVAL 10 MINUTE, 'HTTP 500'),
  ('log', $wait_id, 0, NOW(6) - INTERVAL 1 MINUTE, NULL);
INSERT INTO notify_pending (route_key, outbox_id, next_attempt_at)
  SELECT '$wkey', id, created_at FROM outbox WHERE event_id IN ('log-1', 'log-2') OR event_id LIKE 'evil-%';
INSERT INTO notify_pending (route_key, outbox_id, next_attempt_at)
  SELECT 'log', id, created_at FROM outbox WHERE event_id = 'hook-1' OR event_id LIKE 'evil-%';
INSERT INTO notify_pending (route_key, outbox_id, next_attempt_at)
  SELECT 'webhook:deadbeef', id, created_at FROM outbox WHERE event_id IN ('hook-1', 'log-1');
INSERT INTO notify_route (route_key, name, failures, retry_at, last_error, removed_at) VALUES
  ('$wkey', 'webhook http://127.0.0.1:9/***', 4, NOW(6) + INTERVAL 5 MINUTE,
   CONCAT('round: webhook http://user:secret@127.0.0.1:9/hook?token=s3cr3t: Could not connect ', CHAR(27), '[2J'),
   NULL),
  ('log', 'log', 0, NULL, 'an error of long ago', NULL),
  ('webhook:deadbeef', 'webhook http://old.example/***', 0, NULL, NULL, NOW(6));"
is "$(sql "SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL")/$(sql "SELECT COUNT(*) FROM notify_pending")" \
  9/10 "nine undelivered rows (two waiting to be routed), ten queue rows"

# --- the routes -----------------------------------------------------------------
run --db "$OOPS_TEST_DB" outbox --policies "$P"
is "$rc" 0 "outbox --policies exits 0"
route_line() { grep -E "^$1 " <<<"$out" | head -1; }
read -r _ _ pend failing oldest attempts next <<<"$(route_line 'webhook http://127.0.0.1:9')"
is "$pend/$failing/$attempts" "5/2/3" "webhook http://127.0.0.1:9: 5 pending, 2 failing, its head tried 3 times"
like "$oldest" '^2h([0-9]+s)?$' "... the oldest pending is 2h old ($oldest)"
like "$next" '^20[0-9-]+ [0-9:]+ \(in 5[0-9]m[0-9]+s\)$' "... the head's next attempt in about an hour ($next)"
read -r _ pend failing oldest attempts next <<<"$(route_line 'log')"
like "$pend/$failing/$attempts/$next/$oldest" '^3/0/0/due/1h30m([0-9]+s)?$' \
  "log: 3 pending (not what it took, not the removed route's), none failing (the webhook's failures are its own)"
like "$out" 'total: 9 undelivered \(2 waiting to be routed\), 2 failing, oldest 2h' \
  "the total counts every undelivered row, the ones waiting to be routed apart"
like "$out" $'route state:\n  webhook http://127\\.0\\.0\\.1:9: 4 failed rounds in a row, backing off until 20[0-9-]+ [0-9:]+ \\(in 4m[0-9]+s\\)' \
  "the webhook backs off: its failed rounds, until when"
like "$out" $'\n    last failed round: round: webhook http://127\\.0\\.0\\.1:9/\\*\\*\\*: Could not connect \\\\x1b\\[2J\n' \
  "... and the error of its last round, the URL masked, the control character escaped"
unlike "$out" '  log: |long ago' "the log route, delivering, has no state to report"
like "$out" 'webhook http://127.0.0.1:9: s1: webhook http://127.0.0.1:9/\*\*\*: Could not connect' \
  "the head's last error, under its route"
like "$out" 'also http://127\.0\.0\.1:9/\*\*\* and \*\*\*@127\.0\.0\.1 \\x1b\[2J x' \
  "... a raw URL in it masked to scheme and host, userinfo masked, the control character escaped"
err_line=$(grep -E '^  webhook http://127\.0\.0\.1:9: s1:' <<<"$out") prefix="  webhook http://127.0.0.1:9: "
is "$((${#err_line} - ${#prefix}))" 303 "... bounded to 300 characters (its ESC shown as \\x1b: 3 more)"
unlike "$out" $'\e' "no raw control character in the output"
run outbox --policies "$P" --db "$OOPS_TEST_DB" --json
is "$rc" 0 "global flags after the command: --db and --json"
run --db "$OOPS_TEST_DB" --json outbox --policies="$P"
is "$rc" 0 "--json before the command, --policies=DIR"

# --- --json -----------------------------------------------------------------------
check "--json parses" jq -e . "$work/out"
j() { jq -r "$1" "$work/out"; }
W='.routes[] | select(.kind == "webhook")'
L='.routes[] | select(.kind == "log")'
is "$(j "$W"' | [.name, .where, .pending, .failing, .capped] | map(tostring) | join("|")')" \
  "webhook http://127.0.0.1:9|http://127.0.0.1:9/***|5|2|false" "--json: the webhook's name, where, pending, failing"
is "$(j "$W"' | .head | [.id, .event_id, .attempts, .due] | map(tostring) | join("|")')" \
  "$fail_id|fail-1|3|false" "--json: its head row (id, event, attempts, not due)"
is "$(j "$W"' | (.head.wait_s > 3500 and .head.wait_s <= 3600)')" true \
  "--json: the head's retry is about an hour away (wait_s)"
is "$(j "$W"' | (.oldest_s >= 7200 and .oldest_s < 7300)')" true "--json: the oldest pending age (oldest_s)"
is "$(j "$W"' | .head.last_error | length == 300')" true "--json: the last error bounded"
is "$(j "$W"' | .state | [.seen, .failures, .backing_off, .removing] | map(tostring) | join("|")')" "true|4|true|false" \
  "--json: the webhook's state: seen, 4 failed rounds, backing off"
is "$(j "$W"' | .state | (.retry_in_s > 240 and .retry_in_s <= 300) and (.retry_at | test("^20[0-9-]+ [0-9:]+$"))')" \
  true "--json: ... until retry_at, in about 5 minutes (retry_in_s)"
like "$(j "$W"' | .state.last_error')" '^round: webhook http://127\.0\.0\.1:9/\*\*\*: Could not connect .\[2J$' \
  "--json: ... and its last error, masked"
is "$(j "$L"' | [.pending, .failing, .head.event_id, .head.attempts, .head.due, .state.failures,
  .state.backing_off] | map(tostring) | join("|")')" "3|0|wait-1|0|true|0|false" \
  "--json: the log route's numbers: its head is wait-1, due, the webhook's failing row"
is "$(j "$L"' | (.oldest_s >= 5400 and .oldest_s < 5500)')" true "--json: the log's oldest is its head's age"
is "$(j '.total | [.pending, .failing, .unrouted, .capped, .unrouted_capped] | map(tostring) | join("|")')" \
  "9|2|2|false|false" "--json: the total (9 undelivered, 2 failing, 2 waiting to be routed), not capped"
is "$(j '.total.head | [.event_id, .routed, .queues, .attempts] | map(tostring) | join("|")'),$(j '.capped')" \
  "fail-1|true|1|3,false" "--json: the total's head (routed, in one queue, tried 3 times)"
is "$(j '.policy')" "$P" "--json: the policy directory"

# --- --route ------------------------------------------------------------------------
run --db "$OOPS_TEST_DB" outbox --policies "$P" --route webhook
is "$rc" 0 "--route webhook exits 0"
like "$out" 'route: +webhook http://127\.0\.0\.1:9' "... names the route"
like "$out" 'state: +4 failed rounds in a row, backing off until 20[0-9: -]+ \(in 4m' "... its state"
like "$out" 'round error: +round: webhook http://127\.0\.0\.1:9/\*\*\*: Could not connect \\x1b\[2J' \
  "... its last round's error, masked"
like "$out" 'pending: +5 \(2 failing\)' "... its counts"
like "$out" "head: +#$fail_id fail-1, 3 attempts, next attempt 20" "... its head"
listed=$(awk '$1 ~ /^[0-9]+$/ {print $2}' <<<"$out" | tr '\n' ' ')
is "$listed" 'fail-1 wait-1 log-1 log-2 evil-\x1b[31m ' "... lists its queue in id order (not what it took, not delivered)"
like "$out" "$fail_id +fail-1 +alert +3 +20[0-9: -]+ \(in 5[0-9]m" "... with kind, attempts and next attempt"
like "$out" "$wait_id +wait-1 +pipeline +1 +20[0-9: -]+ \(in [0-9]m[0-9]+s\) +HTTP 500" "... and each row's own error"
run --db "$OOPS_TEST_DB" outbox --policies "$P" --route "webhook http://127.0.0.1:9"
is "$rc/$(awk '$1 ~ /^[0-9]+$/' <<<"$out" | wc -l)" "0/5" "--route by the shown name: the same 5 rows"
run --db "$OOPS_TEST_DB" outbox --policies "$P" --route "webhook http://127.0.0.1:9/***"
is "$rc" 0 "--route by the page's form (scheme, host, /***)"
run --db "$OOPS_TEST_DB" outbox --policies "$P" --route log
is "$(awk '$1 ~ /^[0-9]+$/ {print $2}' <<<"$out" | tr '\n' ' ')" 'wait-1 hook-1 evil-\x1b[31m ' \
  "--route log lists its own queue: not the webhook's, not the removed route's"
like "$out" $'state: +delivering\npending: +3 \\(0 failing\\)' "... a route delivering, none of its rows failing"
like "$out" "$wait_id +wait-1 +pipeline +0 +due +-" "... wait-1 due on the log (it failed on the webhook only)"
run --db "$OOPS_TEST_DB" --json outbox --policies "$P" --route webhook
is "$(j '.routes | length'),$(j '.routes[0].rows | length'),$(j '.routes[0].rows[0].event_id')" "1,5,fail-1" \
  "--json --route: that route only, its 5 rows"
is "$(j '.routes[0].rows[4].event_id | explode | .[5]')" 27 "--json keeps an event id exact (ESC as \\u001b)"
is "$(j '.routes[0].rows_capped')" false "--json --route: every row read"

# --- a route the notifier has not registered ---------------------------------------
run --db "$OOPS_TEST_DB" outbox --policies "$work/other"
read -r _ _ pend failing oldest attempts next <<<"$(route_line 'webhook http://127.0.0.2:9')"
is "$rc/$pend/$failing/$oldest/$attempts/$next" "0/0/0/-/-/-" "a route of another policy: nothing pending"
like "$out" '  webhook http://127\.0\.0\.2:9: not registered by the notifier yet' "... and not registered yet"
run --db "$OOPS_TEST_DB" --json outbox --policies "$work/other"
is "$(j "$W"' | [.state.seen, .head] | map(tostring) | join("|")')" "false|null" "--json: seen false, no head"

# --- bad input: exit 1 ------------------------------------------------------------
run --db "$OOPS_TEST_DB" outbox --policies "$P" --route slack
is "$rc" 1 "an unknown route exits 1"
like "$err" 'no such route .*\(routes: webhook http://127\.0\.0\.1:9, log\)' "... naming the routes"
run --db "$OOPS_TEST_DB" outbox --policies "$P" --bogus
is "$rc" 1 "a bad flag exits 1"
like "$err" '--bogus' "... naming it"
run --db "$OOPS_TEST_DB" outbox --policies "$P" --route
is "$rc" 1 "--route without a value exits 1"
run --db "$OOPS_TEST_DB" outbox --policies "$P" --route log --route webhook
is "$rc" 1 "--route twice exits 1"
run --db "$OOPS_TEST_DB" outbox extra
is "$rc" 1 "an extra argument exits 1"
run --db "$OOPS_TEST_DB" outbox --policies "$work/broken"
is "$rc" 1 "a policy that does not load exits 1"
like "$err" 'did not load' "... saying so"
run --db "$OOPS_TEST_DB" outbox --policies "$work/none"
is "$rc" 1 "a policy directory that does not exist exits 1"
run --db "$OOPS_TEST_DB" outbox --route webhook
is "$rc" 1 "--route without a policy exits 1"
like "$err" 'pass --policies DIR or set OOPS_POLICIES' "... saying where the policy comes from"

# --- $OOPS_POLICIES, and no policy ----------------------------------------------
OOPS_POLICIES=$P run --db "$OOPS_TEST_DB" outbox
is "$rc/$(route_line log | awk '{print $2}')" "0/3" "\$OOPS_POLICIES names the policy when --policies is absent"
run --db "$OOPS_TEST_DB" outbox
is "$rc" 0 "no policy: exits 0"
like "$out" 'total: 9 undelivered \(2 waiting to be routed\), 2 failing, oldest 2h' "... the backlog as a whole"
like "$out" "first: +#$fail_id fail-1, 2h([0-9]+s)? old, queued for 1 route, 3 attempts, next attempt 20" \
  "... and its first row"
like "$err" 'no policy .*without per-route attribution' "... and a note on stderr"
unlike "$out" 'ROUTE' "... no routes"
run --db "$OOPS_TEST_DB" --json outbox
is "$(j '.routes'),$(j '.total.pending'),$(j '.total.unrouted'),$(j '.total.head.event_id')" "null,9,2,fail-1" \
  "--json without a policy: routes null, the total"

# --- the database ---------------------------------------------------------------------
pw=$(cat "$OOPS_DB_PASSWORD_FILE") # the URL has none (issue 34)
port=$(_free_port)
run --db "mysql://oops:$pw@127.0.0.1:$port/oops" outbox --policies "$P"
is "$rc" 2 "an unreachable database exits 2"
like "$err" "127\.0\.0\.1:$port" "... naming the host"
unlike "$out$err" "$pw" "... never the password"
run outbox --policies "$P"
is "$rc" 1 "no database URL exits 1"
OOPS_DB=$OOPS_TEST_DB run outbox --policies "$P"
is "$rc" 0 "\$OOPS_DB is the database when --db is absent"

# --- the fleet page's figures (lua/oops/web.lua), from the same rows -----------------
cat >"$work/web.lua" <<EOF
local oops = require("oops")
local json = require("oops.json")
local web = require("oops.web")
assert(oops.connect { db = os.getenv("OOPS_TEST_DB"), locks = false })
for _, r in ipairs({ { kind = "webhook", url = "$hook" }, { kind = "log" } }) do
  local key = require("oops.scans.notify").route_key(r)
  local row = assert(oops.db.exec(web.SQL.route, key, key, key, web.ROUTE_SCAN, key))[1]
  print(json.encode(web.route_backlog(row, r)))
end
EOF
page=$("$OOPS_BUILD/oopsd" lua "$work/web.lua" 2>&1); echo "$page" >>"$all"
p() { jq -rs "$1" <<<"$page"; }
is "$(p '.[0] | [.kind, .where, .pending, .failing, .failures] | map(tostring) | join("|")')" \
  "webhook|http://127.0.0.1:9/***|5|2|4" "the page: the webhook's pending, failing, failed rounds"
like "$(p '.[0].last_error')" '^round: webhook http://127\.0\.0\.1:9/\*\*\*: Could not connect' \
  "... its last error: its last round's (it backs off), masked"
is "$(p '.[0] | (.oldest_s >= 7200 and .oldest_s < 7300) and (.retry_in_s > 240 and .retry_in_s <= 300)')" true \
  "... its oldest row's age and its back-off"
is "$(p '.[1] | [.kind, .where, .pending, .failing, .failures, .last_error] | map(tostring) | join("|")')" \
  "log|log|3|0|0|null" "... the log: its own queue, nothing failing, no error"
sql "UPDATE notify_route SET failures = 0, retry_at = NULL WHERE route_key = '$wkey'"
page=$("$OOPS_BUILD/oopsd" lua "$work/web.lua" 2>&1); echo "$page" >>"$all"
like "$(p '.[0].last_error')" '^s1: webhook http://127\.0\.0\.1:9/\*\*\*: Could not connect; also http://127\.0\.0\.1:9/\*\*\*' \
  "... a route not backing off: its first failing row's error, masked"
is "$(p '.[0].last_error | length')" 300 "... bounded"

# --- the secrets -------------------------------------------------------------------------
run --help
like "$out" 'outbox \[--route NAME\] \[--policies DIR\]' "oopsctl --help lists outbox"
is "$(grep -cE 'secret|s3cr3t|token=|/hook' "$all")" 0 \
  "the webhook's userinfo, path and query appear in no output ($(wc -l <"$all") lines read)"

# --- every statement index-served ------------------------------------------------
# explain.sh's rule (no full scan of a growing table) on 20,000 delivered rows
# and a removed route's queue of 20,000, for the statements of lua/oops/outbox/
# and the page's, with the values they run with.
sql "INSERT INTO outbox (event_id, kind, ref_id, created_at, delivered_at, next_attempt_at, routed)
  SELECT CONCAT('hist-', seq), 'pipeline', seq, NOW(6) - INTERVAL (seq + 36000) SECOND,
    NOW(6) - INTERVAL (seq + 35000) SECOND, NOW(6) - INTERVAL (seq + 36000) SECOND, 1 FROM seq_1_to_20000;
  INSERT INTO notify_pending (route_key, outbox_id) SELECT 'webhook:deadbeef', 1000000 + seq FROM seq_1_to_20000;
  ANALYZE TABLE outbox, notify_pending, notify_route" >/dev/null
cat >"$work/explain.lua" <<EOF
local oops = require("oops")
local ob = require("oops.outbox")
local web = require("oops.web")
assert(oops.connect { db = os.getenv("OOPS_TEST_DB"), locks = false })
local k = "$wkey"
for _, c in ipairs({ { "total", ob.SCAN_MAX }, { "unrouted", ob.SCAN_MAX }, { "head_any" },
  { "head_queues", $fail_id, ob.HEAD_QUEUES }, { "counts", k, ob.SCAN_MAX }, { "rows", k, ob.ROWS }, { "state", k },
  { "web", k, k, k, web.ROUTE_SCAN, k } }) do
  local sql = c[1] == "web" and web.SQL.route or ob.SQL[c[1]]
  for _, r in ipairs(assert(oops.db.exec("EXPLAIN " .. sql, table.unpack(c, 2)))) do
    print(table.concat({ c[1], r.table or "-", r.type or "-", r.key or "-", r.Extra or "-" }, "\t"))
  end
end
EOF
plans=$("$OOPS_BUILD/oopsd" lua "$work/explain.lua" 2>&1)
is "$(cut -f1 <<<"$plans" | sort -u | tr '\n' ' ')" "counts head_any head_queues rows state total unrouted web " \
  "each statement is EXPLAINed"
mine='$2 == "outbox" || $2 ~ /^notify_/ || $2 ~ /^[ohefqrnt]$/'
is "$(awk -F '\t' "($mine) && (\$3 == \"ALL\" || \$4 == \"-\")" <<<"$plans")" "" \
  "none scans outbox or a queue whole: $(awk -F '\t' "$mine {printf \"%s %s %s %s; \", \$1, \$2, \$3, \$4}" <<<"$plans")"
is "$(awk -F '\t' '($1 == "rows" || $1 == "head_any") && $5 ~ /filesort/' <<<"$plans")" "" \
  "a route's rows and the oldest row are read in index order, no sort"
run --db "$OOPS_TEST_DB" outbox --policies "$P"
is "$rc/$(route_line log | awk '{print $2}')/$(route_line webhook | awk '{print $3}')" "0/3/5" \
  "... and the counts are the same with the history and the removed route's queue"

# --- counts capped ---------------------------------------------------------------------
# Past SCAN_MAX (100,000) rows a count stops: ">=" (capped in --json).
sql "INSERT INTO notify_pending (route_key, outbox_id) SELECT 'log', 2000000 + seq FROM seq_1_to_100000;
  INSERT INTO outbox (event_id, kind, created_at) SELECT CONCAT('many-', seq), 'pipeline', NOW(6) FROM seq_1_to_100000"
run --db "$OOPS_TEST_DB" outbox --policies "$P"
read -r _ pend failing _ <<<"$(route_line 'log')"
is "$rc/$pend/$failing" "0/>=100000/>=0" "a queue past the bound: its count capped (>=)"
read -r _ _ pend _ <<<"$(route_line 'webhook http://127.0.0.1:9')"
is "$pend" 5 "... the other route's count exact"
like "$out" 'total: >=100000 undelivered \(>=100000 waiting to be routed\), >=2 failing, oldest 2h' \
  "... the total's counts capped"
like "$out" 'a count stops at 100000 rows' "... saying so"
run --db "$OOPS_TEST_DB" --json outbox --policies "$P"
is "$(j "$L"' | [.pending, .capped] | map(tostring) | join("|")'),$(j "$W"' | .capped'),$(j '.capped')" \
  "100000|true,false,true" "--json: capped per route and in all"
is "$(j '.total | [.pending, .capped, .unrouted, .unrouted_capped] | map(tostring) | join("|")')" \
  "100000|true|100000|true" "--json: the total's counts capped"

[[ -n ${OUTBOX_KEEP:-} ]] || rm -rf "$work"
done_testing
