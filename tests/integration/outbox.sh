# oopsctl outbox: the notification backlog per route of the policy
# (lua/oops/outbox/), on rows written straight into the outbox table:
# delivered ones, a failing one (attempts, a retry in the future, a last
# error holding a raw secret URL), rows one route took and the other not, a
# row both routes took (a removed route's, waiting for the notifier's
# reconcile), a row whose event id holds a control character. Counts per
# route, the head row, --route listings, --json, the secrets never shown, the
# exit codes (1 bad input, 2 unreachable), the backlog without a policy, and
# every statement index-served on a filled table (tests/integration/explain.sh's rule).
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
sql "DELETE FROM outbox" # a database used before (run by hand)

# A webhook whose URL holds secrets (userinfo, query) to a closed port, and the log route.
hook='http://user:secret@127.0.0.1:9/hook?token=s3cr3t'
mkdir -p "$work/policies" "$work/broken"
cat >"$work/policies/oopsd.lua" <<EOF
notify { webhook = "$hook", log = true }
EOF
echo 'notify { webhook = 42 }' >"$work/broken/oopsd.lua"
P=$work/policies
# The webhook route's key, as the notifier computes it.
cat >"$work/key.lua" <<EOF
print(require("oops.scans.notify").route_key { kind = "webhook", url = "$hook" })
EOF
wkey=$("$OOPS_BUILD/oopsd" lua "$work/key.lua" 2>&1)
like "$wkey" '^webhook:[0-9a-f]{8}$' "the webhook route's key ($wkey)"

# Ids in the order of created_at (the notifier's order is the id's).
sql "INSERT INTO outbox (event_id, kind, created_at, delivered_at, delivered_routes) VALUES
  ('done-1', 'alert', NOW(6) - INTERVAL 5 HOUR, NOW(6) - INTERVAL 4 HOUR, 'log,$wkey'),
  ('done-2', 'pipeline', NOW(6) - INTERVAL 4 HOUR, NOW(6) - INTERVAL 3 HOUR, NULL);
INSERT INTO outbox (event_id, kind, created_at, attempts, next_attempt_at, last_error) VALUES
  ('fail-1', 'alert', NOW(6) - INTERVAL 2 HOUR, 3, NOW(6) + INTERVAL 1 HOUR,
   CONCAT('s1: webhook http://127.0.0.1:9/***: Could not connect; also http://user:secret@127.0.0.1:9/hook?token=s3cr3t',
          ' and user:secret@127.0.0.1 ', CHAR(27), '[2J ', REPEAT('x', 900)));
INSERT INTO outbox (event_id, kind, created_at, delivered_routes) VALUES
  ('wait-1', 'pipeline', NOW(6) - INTERVAL 90 MINUTE, NULL),
  ('log-1', 'pipeline', NOW(6) - INTERVAL 80 MINUTE, 'log'),
  ('log-2', 'alert', NOW(6) - INTERVAL 70 MINUTE, 'log'),
  ('hook-1', 'pipeline', NOW(6) - INTERVAL 60 MINUTE, '$wkey'),
  ('both-1', 'pipeline', NOW(6) - INTERVAL 50 MINUTE, 'log,$wkey'),
  (CONCAT('evil-', CHAR(27), '[31m'), 'alert', NOW(6) - INTERVAL 10 MINUTE, NULL);"
is "$(sql "SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL")" 7 "seven undelivered rows, two delivered"
fail_id=$(sql "SELECT id FROM outbox WHERE event_id = 'fail-1'")

# --- the routes -----------------------------------------------------------------
run --db "$OOPS_TEST_DB" outbox --policies "$P"
is "$rc" 0 "outbox --policies exits 0"
route_line() { grep -E "^$1 " <<<"$out" | head -1; }
read -r _ _ pend failing oldest attempts next <<<"$(route_line 'webhook http://127.0.0.1:9')"
is "$pend/$failing/$attempts" "5/1/3" "webhook http://127.0.0.1:9: 5 pending, 1 failing, its head tried 3 times"
like "$oldest" '^2h([0-9]+s)?$' "... the oldest pending is 2h old ($oldest)"
like "$next" '^20[0-9-]+ [0-9:]+ \(in 5[0-9]m[0-9]+s\)$' "... the head's next attempt in about an hour ($next)"
read -r _ pend failing oldest attempts next <<<"$(route_line 'log')"
like "$pend/$failing/$attempts/$oldest" '^4/1/3/2h([0-9]+s)?$' "log: 4 pending (what it took is not), 1 failing, the same head"
like "$out" 'total: 7 undelivered, 1 failing, oldest 2h' "the total counts every undelivered row (both routes' too)"
like "$out" 'webhook http://127.0.0.1:9: s1: webhook http://127.0.0.1:9/\*\*\*: Could not connect' \
  "the head's last error, under its route"
like "$out" 'also http://127\.0\.0\.1:9/\*\*\* and \*\*\*@127\.0\.0\.1 \\x1b\[2J x' \
  "... a raw URL in it masked to scheme and host, userinfo masked, the control character escaped"
err_line=$(grep -E '^  webhook' <<<"$out") prefix="  webhook http://127.0.0.1:9: "
is "$((${#err_line} - ${#prefix}))" 303 "... bounded to 300 characters (its ESC shown as \\x1b: 3 more)"
unlike "$out" $'\e' "no raw control character in the output"
run outbox --policies "$P" --db "$OOPS_TEST_DB" --json
is "$rc" 0 "global flags after the command: --db and --json"
run --db "$OOPS_TEST_DB" --json outbox --policies="$P"
is "$rc" 0 "--json before the command, --policies=DIR"

# --- --json -----------------------------------------------------------------------
check "--json parses" jq -e . "$work/out"
j() { jq -r "$1" "$work/out"; }
is "$(j '.routes[] | select(.kind == "webhook") | [.name, .where, .pending, .failing] | join("|")')" \
  "webhook http://127.0.0.1:9|http://127.0.0.1:9/***|5|1" "--json: the webhook's name, where, pending, failing"
is "$(j '.routes[] | select(.kind == "webhook") | .head | [.id, .event_id, .attempts, .due] | map(tostring) | join("|")')" \
  "$fail_id|fail-1|3|false" "--json: its head row (id, event, attempts, not due)"
is "$(j '.routes[] | select(.kind == "webhook") | (.head.wait_s > 3500 and .head.wait_s <= 3600)')" true \
  "--json: the head's retry is about an hour away (wait_s)"
is "$(j '.routes[] | select(.kind == "webhook") | (.oldest_s >= 7200 and .oldest_s < 7300)')" true \
  "--json: the oldest pending age (oldest_s)"
is "$(j '.routes[] | select(.kind == "webhook") | .head.last_error | length == 300')" true "--json: the last error bounded"
is "$(j '.routes[] | select(.kind == "log") | [.pending, .failing] | map(tostring) | join("|")')" "4|1" \
  "--json: the log route's numbers"
is "$(j '[.total.pending, .total.failing, .capped] | map(tostring) | join("|")')" "7|1|false" "--json: the total, not capped"
is "$(j '.policy')" "$P" "--json: the policy directory"

# --- --route ------------------------------------------------------------------------
run --db "$OOPS_TEST_DB" outbox --policies "$P" --route webhook
is "$rc" 0 "--route webhook exits 0"
like "$out" 'route: +webhook http://127\.0\.0\.1:9' "... names the route"
like "$out" "head: +#$fail_id fail-1, 3 attempts, next attempt 20" "... its head"
listed=$(awk '$1 ~ /^[0-9]+$/ {print $2}' <<<"$out" | tr '\n' ' ')
is "$listed" 'fail-1 wait-1 log-1 log-2 evil-\x1b[31m ' "... lists its pending rows in id order (not what it took, not delivered)"
like "$out" "$fail_id +fail-1 +alert +3 +20[0-9: -]+ \(in 5[0-9]m" "... with kind, attempts and next attempt"
run --db "$OOPS_TEST_DB" outbox --policies "$P" --route "webhook http://127.0.0.1:9"
is "$rc/$(awk '$1 ~ /^[0-9]+$/' <<<"$out" | wc -l)" "0/5" "--route by the shown name: the same 5 rows"
run --db "$OOPS_TEST_DB" outbox --policies "$P" --route "webhook http://127.0.0.1:9/***"
is "$rc" 0 "--route by the page's form (scheme, host, /***)"
run --db "$OOPS_TEST_DB" outbox --policies "$P" --route log
is "$(awk '$1 ~ /^[0-9]+$/ {print $2}' <<<"$out" | tr '\n' ' ')" 'fail-1 wait-1 hook-1 evil-\x1b[31m ' \
  "--route log lists what the webhook took, not what it took itself"
run --db "$OOPS_TEST_DB" --json outbox --policies "$P" --route webhook
is "$(j '.routes | length'),$(j '.routes[0].rows | length'),$(j '.routes[0].rows[0].event_id')" "1,5,fail-1" \
  "--json --route: that route only, its 5 rows"
is "$(j '.routes[0].rows[4].event_id | explode | .[5]')" 27 "--json keeps an event id exact (ESC as \\u001b)"

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
is "$rc/$(route_line log | awk '{print $2}')" "0/4" "\$OOPS_POLICIES names the policy when --policies is absent"
run --db "$OOPS_TEST_DB" outbox
is "$rc" 0 "no policy: exits 0"
like "$out" 'total: 7 undelivered, 1 failing, oldest 2h' "... the backlog as a whole"
like "$out" "first: +#$fail_id fail-1, 3 attempts" "... and its first row"
like "$err" 'no policy .*without per-route attribution' "... and a note on stderr"
unlike "$out" 'ROUTE' "... no routes"
run --db "$OOPS_TEST_DB" --json outbox
is "$(j '.routes'),$(j '.total.pending'),$(j '.total.head.event_id')" "null,7,fail-1" "--json without a policy: routes null, the total"

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

# --- the secrets -------------------------------------------------------------------------
run --help
like "$out" 'outbox \[--route NAME\] \[--policies DIR\]' "oopsctl --help lists outbox"
is "$(grep -cE 'secret|s3cr3t|token=|/hook' "$all")" 0 \
  "the webhook's userinfo, path and query appear in no output ($(wc -l <"$all") lines read)"

# --- every statement index-served ------------------------------------------------
# explain.sh's rule (no full scan of a growing table) on 20,000 delivered rows,
# for the statements of lua/oops/outbox/ with the values they run with.
sql "INSERT INTO outbox (event_id, kind, ref_id, created_at, delivered_at, next_attempt_at)
  SELECT CONCAT('hist-', seq), 'pipeline', seq, NOW(6) - INTERVAL (seq + 36000) SECOND,
    NOW(6) - INTERVAL (seq + 35000) SECOND, NOW(6) - INTERVAL (seq + 36000) SECOND FROM seq_1_to_20000;
  ANALYZE TABLE outbox" >/dev/null
cat >"$work/explain.lua" <<EOF
local oops = require("oops")
local ob = require("oops.outbox")
assert(oops.connect { db = os.getenv("OOPS_TEST_DB"), locks = false })
for _, c in ipairs({ { "groups", ob.SCAN_MAX, ob.GROUPS_MAX }, { "head", "$wkey", ob.ROWS, ob.SCAN_MAX },
  { "head_any", 1 } }) do
  for _, r in ipairs(assert(oops.db.exec("EXPLAIN " .. ob.SQL[c[1]], table.unpack(c, 2)))) do
    print(c[1], r.table, r.type, r.key or "-")
  end
end
EOF
plans=$("$OOPS_BUILD/oopsd" lua "$work/explain.lua" 2>&1)
is "$(cut -f1 <<<"$plans" | sort -u | tr '\n' ' ')" "groups head head_any " "each statement is EXPLAINed"
is "$(awk -F '\t' '$2 == "outbox" && ($3 == "ALL" || $4 == "-")' <<<"$plans")" "" \
  "none scans outbox whole: $(awk -F '\t' '$2 == "outbox" {printf "%s %s %s; ", $1, $3, $4}' <<<"$plans")"
run --db "$OOPS_TEST_DB" outbox --policies "$P"
is "$rc/$(route_line log | awk '{print $2}')" "0/4" "... and the counts are the same with the history"

[[ -n ${OUTBOX_KEEP:-} ]] || rm -rf "$work"
done_testing
