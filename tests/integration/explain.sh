# No full scan of a growing table, ever (issue 14, "History"). On a MariaDB of
# this test's own, the general log (as a table) records every statement that
# real servers and oopsctl run through a workload: a scenario (two servers,
# auto and manual pipelines to SUCCEEDED, a driver killed and taken over, a
# stop, scheduled restarts, an alert episode, webhook notifications), the exec
# gateway (builds, logs) and every oopsctl command that reads (list, show,
# logs, locks, history) or writes (create, deploy, stop, rollback), and the
# fleet page's JSON (its snapshot and a pipeline's detail). The
# statements are collected from the log with the values they ran with (one
# example per shape: literals folded), the tables are then filled with tens of
# thousands of finished pipelines, events, logs, notifications, jobs, calls and
# restarts (INSERT ... SELECT from the sequence engine) and analysed, and each
# statement is EXPLAINed: type ALL (a full scan) on one of the tables that
# grow fails, unless the allow-list below names the statement and says why.
# A new query is covered the day it is first run: nothing here lists them.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
source "$OOPS_ROOT/tests/lib/mariadb.sh" # replaces MDB_* in this process only
not_under_sanitizers "the plans of statements every other test runs under the sanitizers"
work=$(mktemp -d "$OOPS_TEST_WORK/explain.XXXXXX")
cleanup() {
  local f
  for f in "$work"/exec/*.build.pid; do [[ -s $f ]] && kill -KILL -- "-$(cat "$f")" 2>/dev/null; done
  stop_servers
  mariadb_stop
}
trap cleanup EXIT
mariadb_start "$work/mariadb" || { echo "not ok 1 - a MariaDB of its own starts"; exit 1; }
ctl="$OOPS_BUILD/oopsctl"
root() { mariadb "${MDB_ADMIN[@]}" -N -B "$@"; } # the socket, as our OS user (unix_socket)

# Tables that grow with history: a full scan of one of them fails. The others
# hold a row per server (server), per target and metric (alert_state,
# sim_metric), one row (restart_watermark) or a row per migration
# (schema_version): reading them whole is what the alert scan, the leader
# count and `oopsctl locks` mean to do.
growing=" pipeline pipeline_event pipeline_log outbox notify_pending exec_job sim_call restart_run sim_job operator_action "
# Statements allowed a full scan of a growing table: "REGEX|why", the regex
# (extended) matched against the folded statement.
allowed=(
)

# The servers and oopsctl run as their own account (the run-time grants of
# doc/guide/database.md "Database grants"), so
# the log tells their statements from the runner's and this test's.
run_pw=$(mariadb_password)
root <<<"CREATE USER 'oopsrun'@'127.0.0.1' IDENTIFIED BY '$run_pw';
  GRANT SELECT, INSERT, UPDATE, DELETE ON oops.* TO 'oopsrun'@'127.0.0.1';" # stdin: no password in argv
run_db="mysql://oopsrun:$run_pw@127.0.0.1:$MDB_PORT/oops"
out=$("$ctl" --db "$MDB_URL" migrate 2>&1); is "$?" 0 "oopsctl migrate ($out)"
root -e "SET GLOBAL log_output = 'TABLE'; TRUNCATE mysql.general_log; SET GLOBAL general_log = 1;"

# --- the workload -------------------------------------------------------------
cat >"$work/workload.lua" <<'EOF'
-- tests/lib/workload.lua, with the scenario's functions in scope.
local run_db = assert(os.getenv("OOPS_EXPLAIN_RUN_DB"), "OOPS_EXPLAIN_RUN_DB")
assert(loadfile(os.getenv("OOPS_ROOT") .. "/tests/lib/workload.lua", "t", _ENV))(run_db)
EOF
out=$(OOPS_EXPLAIN_RUN_DB=$run_db "$ctl" --db "$MDB_URL" scenario "$work/workload.lua" 2>&1); rc=$?
is "$rc" 0 "the workload scenario passes ($(grep -c '^ok ' <<<"$out") checks)"
((rc == 0)) || printf '%s\n' "$out" | grep -E '^not ok|^#' | head -40 | sed 's/^/#   /'

# Expired history, so the retention leader's DELETEs run too (the server
# below takes the leadership at its start): a year-old finished pipeline with
# its event, log line, delivered notification, jobs and calls, and a restart.
root oops -e "
INSERT INTO pipeline (id, namespace, application, environment, status, created_at, status_changed_at)
  VALUES ('expired00001', 'old', 'app', 'prod', 'SUCCEEDED', NOW(6) - INTERVAL 400 DAY, NOW(6) - INTERVAL 400 DAY),
         ('expired00002', 'old', 'app', 'prod', 'SUCCEEDED', NOW(6) - INTERVAL 399 DAY, NOW(6) - INTERVAL 399 DAY);
INSERT INTO pipeline_event (pipeline_id, event_type, to_status, server, created_at)
  VALUES ('expired00001', 'SUCCEEDED', 'SUCCEEDED', 'old', NOW(6) - INTERVAL 400 DAY);
INSERT INTO outbox (event_id, kind, ref_id, created_at, delivered_at)
  VALUES ('expired-1', 'pipeline', LAST_INSERT_ID(), NOW(6) - INTERVAL 400 DAY, NOW(6) - INTERVAL 400 DAY);
INSERT INTO pipeline_log (pipeline_id, step, server, argv, created_at)
  VALUES ('expired00001', 'build', 'old', '[]', NOW(6) - INTERVAL 400 DAY);
INSERT INTO exec_job (pipeline_id, kind, server, state, started_at, finished_at)
  VALUES ('expired00001', 'build', 'old', 'succeeded', NOW(6) - INTERVAL 400 DAY, NOW(6) - INTERVAL 400 DAY);
INSERT INTO sim_job (pipeline_id, kind, started_at, ready_at) VALUES ('expired00001', 'build', NOW(6) - INTERVAL 400 DAY, NOW(6) - INTERVAL 400 DAY);
INSERT INTO sim_call (pipeline_id, target, action, server, created_at)
  VALUES ('expired00001', 'old/app/prod', 'build', 'old', NOW(6) - INTERVAL 400 DAY),
         (NULL, 'old/app/prod', 'probe', 'old', NOW(6) - INTERVAL 400 DAY);
INSERT INTO restart_run (namespace, application, environment, occurrence, fired_by, fired_at, outcome, finished_at)
  VALUES ('old', 'app', 'prod', NOW() - INTERVAL 400 DAY, 'old', NOW(6) - INTERVAL 400 DAY, 'ok', NOW(6) - INTERVAL 400 DAY);"

# The exec gateway (exec_job, pipeline_log) and oopsctl's commands.
mkdir -p "$work/exec"
export EXEC_STATE=$work/exec EXEC_ARGS_FILE=$work/exec/args
OOPS_TEST_DB=$run_db start_server ex1 "$OOPS_ROOT/tests/exec/policies"
rctl() { "$ctl" --db "$run_db" "$@"; }
ctl_ok() { # DESC ARGS...: oopsctl ARGS exits 0 (its output shown when not)
  local d=$1 out; shift
  out=$(rctl "$@" 2>&1); _tap $? "$d" "$(head -5 <<<"$out")"
}
id=$(rctl create --app t/web --env prod --artifact registry/t/web:1 2>/dev/null); is "$?" 0 "oopsctl create"
wait_for 40 "the exec gateway drives it to SUCCEEDED" \
  bash -c "[[ \$('$ctl' --db '$run_db' --json show '$id') == *'\"status\":\"SUCCEEDED\"'* ]]"
man=$(rctl create --app t/web --env prod --manual --artifact registry/t/web:2 2>/dev/null)
wait_for 30 "a manual pipeline reaches BUILD_SUCCEEDED" \
  bash -c "[[ \$('$ctl' --db '$run_db' --json show '$man') == *'\"status\":\"BUILD_SUCCEEDED\"'* ]]"
ctl_ok "oopsctl deploy" deploy "$man"
wait_for 40 "... it succeeds" \
  bash -c "[[ \$('$ctl' --db '$run_db' --json show '$man') == *'\"status\":\"SUCCEEDED\"'* ]]"
ctl_ok "oopsctl logs" logs "$id"
ctl_ok "oopsctl logs --step" logs "$id" --step build
ctl_ok "oopsctl show" show "$id"
ctl_ok "oopsctl --json show" --json show "$id"
ctl_ok "oopsctl list" list
ctl_ok "oopsctl list --status --limit" list --status succeeded,error --limit 5
ctl_ok "oopsctl locks" locks
rb=$(rctl rollback --app t/web --env prod 2>/dev/null); is "$?" 0 "oopsctl rollback"
wait_for 40 "... the rollback is deployed" \
  bash -c "[[ \$('$ctl' --db '$run_db' --json show '$rb') == *'\"status\":\"SUCCEEDED\"'* ]]"
# A stop of a pipeline that stays where a stop is allowed (a manual one
# waiting for its release): a deploy moving on could not race it.
held=$(rctl create --app t/web --env prod --manual --artifact registry/t/web:4 2>/dev/null)
wait_for 30 "a manual pipeline waits at BUILD_SUCCEEDED" \
  bash -c "[[ \$('$ctl' --db '$run_db' --json show '$held') == *'\"status\":\"BUILD_SUCCEEDED\"'* ]]"
ctl_ok "oopsctl stop" stop "$held"
# Approvals (issue 39): an approval (the creator read, the conditional
# UPDATE) and a rejection, of a manual pipeline waiting at BUILD_SUCCEEDED.
held=$(rctl create --app t/web --env prod --manual --artifact registry/t/web:5 2>/dev/null)
wait_for 30 "another manual pipeline waits at BUILD_SUCCEEDED" \
  bash -c "[[ \$('$ctl' --db '$run_db' --json show '$held') == *'\"status\":\"BUILD_SUCCEEDED\"'* ]]"
SUDO_USER=explainer ctl_ok "oopsctl approve" approve "$held" --reason "explain"
ctl_ok "oopsctl reject" reject "$held" --reason "explain"
# Newer commands and flags, when this build has them (the log shows what ran).
rctl list --app t/web --env prod --since 1h --limit 10 >/dev/null 2>&1
rctl list --all >/dev/null 2>&1
rctl history --app t/web --env prod >/dev/null 2>&1
rctl --json list >/dev/null 2>&1
rctl --json list --app t/web --env prod --all >/dev/null 2>&1
rctl audit >/dev/null 2>&1
rctl audit --since 1h --actor "nobody@$(hostname)" >/dev/null 2>&1
rctl audit --app t/web --env prod --since 7d >/dev/null 2>&1
rctl audit --app t/web >/dev/null 2>&1
rctl outbox --policies "$OOPS_ROOT/tests/exec/policies" >/dev/null 2>&1
rctl outbox --policies "$OOPS_ROOT/tests/exec/policies" --route webhook >/dev/null 2>&1
rctl stats >/dev/null 2>&1
rctl --json stats --app t/web --env prod --since 90d >/dev/null 2>&1
wait_for 70 "the retention leader deleted the expired history (its DELETEs are in the log)" \
  bash -c "[[ \$(mariadb --no-defaults -N -B -S '$MDB_SOCKET' -u'$MDB_ADMIN_USER' oops -e \"SELECT (SELECT COUNT(*) FROM pipeline
    WHERE id = 'expired00001') + (SELECT COUNT(*) FROM restart_run WHERE namespace = 'old')\") == 0 ]]"
# The fleet page's reads (lua/oops/web.lua): its snapshot and a pipeline's detail.
wait_for 20 "the fleet page's JSON is served (its statements are in the log)" \
  bash -c "curl -s -m 5 '$(url ex1 /api/fleet)' | grep -q '\"pipelines\"'"
wait_for 20 "... and a pipeline's detail" \
  bash -c "curl -s -m 5 '$(url ex1 "/api/pipeline/$id")' | grep -q '\"events\"'"
canary=$(mariadb --no-defaults -N -B -S "$MDB_SOCKET" -u"$MDB_ADMIN_USER" oops -e \
  "SELECT id FROM pipeline WHERE application = 'blind' LIMIT 1")
wait_for 20 "... and a canary's detail (its measurements)" \
  bash -c "curl -s -m 5 '$(url ex1 "/api/pipeline/$canary")' | grep -q '\"measurements\"'"
wait_for 20 "... and an application's release history" \
  bash -c "curl -s -m 5 '$(url ex1 /api/history/t/web/prod)' | grep -q '\"releases\"'"
stop_servers
root -e "SET GLOBAL general_log = 0"

# --- the statements ----------------------------------------------------------
# One line each (newlines folded), as run by the servers and oopsctl.
root -r -e "SELECT REPLACE(REPLACE(REPLACE(argument, '\n', ' '), '\r', ' '), '\t', ' ')
  FROM mysql.general_log WHERE user_host LIKE 'oopsrun[%' AND command_type IN ('Query', 'Execute')" |
  grep -aiE '^[[:space:](]*(select|update|delete)[[:space:]]' | grep -aiE '[[:space:]](from|update)[[:space:]]|^[[:space:]]*update' \
  >"$work/all.sql"
# Their shapes: quoted strings and numbers folded; the first example of each kept.
fold() { sed -E -e "s/'([^'\\\\]|\\\\.)*'/?/g" -e 's/\b[0-9]+(\.[0-9]+)?\b/N/g' -e 's/[[:space:]]+/ /g'; }
paste -d '\t' <(fold <"$work/all.sql") "$work/all.sql" | awk -F '\t' '!seen[$1]++' >"$work/distinct.tsv"
n=$(wc -l <"$work/distinct.tsv")
check "the general log holds the statements ($(wc -l <"$work/all.sql") run, $n distinct shapes)" test "$n" -ge 30
for want in "FROM pipeline WHERE 1 = 1 AND status IN" "FROM pipeline_event WHERE pipeline_id" \
  "FROM pipeline_log WHERE pipeline_id" "FROM outbox o" "UPDATE pipeline SET status" \
  "FROM restart_run WHERE finished_at IS NULL" "FROM exec_job" "UPDATE outbox SET" "DELETE FROM pipeline" \
  "UNION ALL (SELECT" "IF(status = 'SUCCEEDED', status_changed_at, created_at) DESC" \
  "FROM pipeline ORDER BY created_at DESC LIMIT" "FROM notify_pending WHERE route_key = ? LIMIT" \
  "FROM notify_pending n JOIN outbox o ON o.id = n.outbox_id" "WHERE o.routed = N ORDER BY o.id LIMIT" \
  "DELETE FROM notify_pending WHERE route_key = ?" \
  "FROM operator_action WHERE 1 = 1 ORDER BY" "FROM operator_action WHERE N = N AND actor = ?" \
  "FROM operator_action WHERE N = N AND namespace = ?" "AND e.actor IS NOT NULL ORDER BY e.id DESC LIMIT" \
  "FROM pipeline r WHERE r.rollback_of = p.id" "AND e.to_status = ? ORDER BY e.id DESC LIMIT N"; do
  check "... among them: $want" grep -qF "$want" "$work/distinct.tsv"
done

# --- history: tens of thousands of finished rows ------------------------------
N=${OOPS_EXPLAIN_ROWS:-20000}
root oops -e "
INSERT INTO pipeline (id, namespace, application, environment, status, artifact, message,
    created_at, status_changed_at)
  SELECT CONCAT('h', LPAD(seq, 11, '0')), 'hist', CONCAT('app', seq % 50), IF(seq % 2, 'prod', 'staging'),
    ELT(1 + seq % 3, 'SUCCEEDED', 'ERROR', 'STOPPED'), CONCAT('registry/app:', seq), 'done',
    NOW(6) - INTERVAL (seq + 3600) SECOND, NOW(6) - INTERVAL (seq + 3000) SECOND
  FROM seq_1_to_$N;
INSERT INTO pipeline_event (pipeline_id, event_type, from_status, to_status, message, server, created_at)
  SELECT CONCAT('h', LPAD(seq DIV 4 + 1, 11, '0')), 'BUILDING', 'INITIALIZED', 'RUNNING', 'x', 'old',
    NOW(6) - INTERVAL (seq + 3600) SECOND
  FROM seq_0_to_$((4 * N - 1));
INSERT INTO outbox (event_id, kind, ref_id, created_at, delivered_at, next_attempt_at, routed)
  SELECT CONCAT('hist-', seq), 'pipeline', seq, NOW(6) - INTERVAL (seq + 3600) SECOND,
    IF(seq % 8, NOW(6) - INTERVAL (seq + 3500) SECOND, NULL), NOW(6) - INTERVAL (seq + 3600) SECOND, 1
  FROM seq_1_to_$((4 * N));
INSERT INTO notify_pending (route_key, outbox_id, attempts, next_attempt_at)
  SELECT 'webhook:0badbeef', o.id, 3, NOW(6) + INTERVAL 1 HOUR FROM outbox o WHERE o.delivered_at IS NULL;
INSERT INTO pipeline_log (pipeline_id, step, server, argv, exit_status, result, output, created_at)
  SELECT CONCAT('h', LPAD(seq, 11, '0')), 'build', 'old', '[\"./build.sh\"]', 0, 'exited 0', 'ok',
    NOW(6) - INTERVAL (seq + 3600) SECOND
  FROM seq_1_to_$N;
INSERT INTO exec_job (pipeline_id, kind, mode, server, state, exit_status, started_at, finished_at)
  SELECT CONCAT('h', LPAD(seq, 11, '0')), 'build', IF(seq % 2, 'local', 'external'), 'old',
    IF(seq % 2, 'succeeded', 'failed'), 0, NOW(6) - INTERVAL (seq + 3600) SECOND, NOW(6) - INTERVAL (seq + 3500) SECOND
  FROM seq_1_to_$N;
INSERT INTO sim_job (pipeline_id, kind, started_at, ready_at, outcome, server)
  SELECT CONCAT('h', LPAD(seq, 11, '0')), IF(seq % 2, 'build', 'rollout'), NOW(6) - INTERVAL (seq + 3600) SECOND,
    NOW(6) - INTERVAL (seq + 3500) SECOND, IF(seq % 3, NULL, 'stopped'), 'old'
  FROM seq_1_to_$N;
INSERT INTO sim_call (pipeline_id, target, action, server, created_at)
  SELECT CONCAT('h', LPAD(seq DIV 4 + 1, 11, '0')), CONCAT('hist/app', seq % 50, '/prod'),
    ELT(1 + seq % 4, 'build', 'deploy', 'rollout', 'probe'), 'old', NOW(6) - INTERVAL (seq + 3600) SECOND
  FROM seq_0_to_$((4 * N - 1));
INSERT INTO restart_run (namespace, application, environment, occurrence, fired_by, fired_at, started_at,
    outcome, finished_at)
  SELECT 'hist', CONCAT('app', seq % 50), 'prod', NOW() - INTERVAL (seq * 60 + 3600) SECOND, 'old',
    NOW(6) - INTERVAL (seq * 60 + 3600) SECOND, NOW(6) - INTERVAL (seq * 60 + 3600) SECOND, 'ok',
    NOW(6) - INTERVAL (seq * 60 + 3599) SECOND
  FROM seq_1_to_$N;
INSERT INTO operator_action (created_at, actor, action, pipeline_id, namespace, application, environment,
    reason, outcome, via)
  SELECT NOW(6) - INTERVAL (seq * 60 + 3600) SECOND, CONCAT('user', seq % 40, '@host'),
    ELT(1 + seq % 4, 'create', 'stop', 'release', 'rollback'), CONCAT('h', LPAD(seq, 11, '0')), 'hist',
    CONCAT('app', seq % 50), IF(seq % 2, 'prod', 'staging'), 'a reason', 'done', 'oopsctl@host'
  FROM seq_1_to_$N;
ANALYZE TABLE pipeline, pipeline_event, outbox, notify_pending, pipeline_log, exec_job, sim_job, sim_call,
  restart_run, operator_action;" \
  >"$work/fill.log" 2>&1
is "$?" 0 "history: $N finished pipelines, $((4 * N)) events, notifications and simulated calls, $N logs, jobs, restarts"

# --- EXPLAIN each ---------------------------------------------------------------
# The real table behind an EXPLAIN row's name (an alias or the table itself).
real_table() { # STATEMENT NAME
  local t
  t=$(grep -oiE "(from|join|update)[[:space:]]+[a-z_]+[[:space:]]+(as[[:space:]]+)?$2\b" <<<"$1" | head -1 |
    awk '{print $2}')
  echo "${t:-$2}"
}
# The full scans of growing tables in a statement's plan ("" for none).
full_scans() { # STATEMENT → "table (rows) ..." on stdout; exit 2 when EXPLAIN fails
  local plan name type rows t scans=""
  plan=$(root oops -e "EXPLAIN $1" 2>&1) || { printf '%s\n' "$plan"; return 2; }
  while IFS=$'\t' read -r _ _ name type _ _ _ _ rows _; do
    [[ $type == ALL ]] || continue
    t=$(real_table "$1" "$name")
    [[ $growing == *" $t "* ]] && scans+="$t ($rows rows) "
  done <<<"$plan"
  printf '%s' "$scans"
}
# The detector itself: a statement that must scan is caught, through an alias too.
like "$(full_scans "SELECT p.id FROM pipeline p WHERE p.message LIKE '%x%'")" '^pipeline \([0-9]+ rows\)' \
  "a full scan is detected (an unindexed condition on pipeline, through an alias)"
is "$(full_scans "SELECT id FROM pipeline WHERE id = 'h00000000001'")" "" "... and a primary key lookup is not one"

k=0
while IFS=$'\t' read -r shape stmt; do
  k=$((k + 1))
  short=$(cut -c1-150 <<<"$shape")
  scans=$(full_scans "$stmt"); rc=$?
  if ((rc != 0)); then
    _tap 1 "EXPLAIN runs: $short" "$scans
$stmt"
    continue
  fi
  why=""
  if [[ -n $scans ]]; then
    for a in "${allowed[@]}"; do
      [[ $shape =~ ${a%%|*} ]] && { why=${a#*|}; break; }
    done
  fi
  if [[ -z $scans ]]; then
    _tap 0 "no full scan: $short"
  elif [[ -n $why ]]; then
    _tap 0 "full scan of $scans allowed ($why): $short"
  else
    _tap 1 "full scan of $scans: $short" "$stmt
$(root oops -e "EXPLAIN $stmt" 2>&1)"
  fi
done <"$work/distinct.tsv"
check "every distinct statement was EXPLAINed" test "$k" -eq "$n"
done_testing
