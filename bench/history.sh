#!/usr/bin/env bash
# A year of history (issue 14): do the scans, a takeover and `oopsctl show`
# cost on half a million finished pipelines what they cost on an empty
# database? One throwaway MariaDB (tests/lib/mariadb.sh), one database,
# measured twice: empty (just migrated), then after INSERT ... SELECT from the
# sequence engine has added N finished pipelines with EVENTS events and
# notifications each, a log line, a simulated job, exec job and two simulated
# calls each, and N/10 finished restarts (then ANALYZE TABLE). Each round:
#   scan tick     one server idle for IDLE seconds (scan every 500 ms): the mean
#                 tick of each scan, from oops_scan_duration_seconds_sum/_count
#   takeover      server A drives K pipelines (simulated builds of 1 h), is
#                 SIGKILLed, the builds are made ready, server B starts: from
#                 B's start to the last of the K SUCCEEDED (database clock);
#                 includes B's start (connect, policy), the same both rounds
#   oopsctl show  median wall time of SAMPLES runs on one of the K pipelines
#                 (a process start included, the same both rounds); with
#                 history also on an old pipeline in the middle of the history
# Prints one table with the ratio history / empty. Nothing is asserted.
#   bench/history.sh [--pipelines N] [--events N] [--k K] [--samples S] [--idle SECONDS] [--build DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${OOPS_BUILD:-$root/build}
N=500000 EVENTS=4 K=20 SAMPLES=20 IDLE=31
while (($#)); do
  case $1 in
    --pipelines) N=$2; shift 2 ;;
    --events) EVENTS=$2; shift 2 ;;
    --k) K=$2; shift 2 ;;
    --samples) SAMPLES=$2; shift 2 ;;
    --idle) IDLE=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/history.sh: unknown option $1 (--help)" >&2; exit 1 ;;
  esac
done
[[ -x $build/oopsd && -x $build/oopsctl ]] || { echo "bench/history.sh: no oopsd/oopsctl in $build" >&2; exit 1; }
source "$root/tests/lib/mariadb.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/oops-history.XXXXXX")
declare -A PID
cleanup() {
  set +e
  local n
  for n in "${!PID[@]}"; do kill -KILL "${PID[$n]}" 2>/dev/null || true; wait "${PID[$n]}" 2>/dev/null || true; done
  mariadb_stop
  rm -rf "$work"
}
trap cleanup EXIT
mariadb_start "$work/mariadb" >/dev/null
export OOPS_DB=$MDB_URL # the URL not in argv: ps shows argv to every user
q() { mariadb "${MDB_ADMIN[@]}" -N -B oops -e "$1"; }
ctl() { "$build/oopsctl" "$@"; }
ctl migrate >/dev/null
mkdir -p "$work/policies"
cat >"$work/policies/oopsd.lua" <<'EOF'
scan    { interval = "500ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "1h", deploy = "0s", rollout = "0s" }
EOF

start() { # NAME: an oopsd, waits for "started:"
  local port
  port=$(_free_port)
  "$build/oopsd" --name "$1" --policies "$work/policies" --listen "127.0.0.1:$port" \
    2>>"$work/$1.log" &
  PID[$1]=$! PORT[$1]=$port
  for _ in $(seq 300); do grep -q 'msg="started:' "$work/$1.log" 2>/dev/null && return 0; sleep 0.1; done
  echo "bench/history.sh: $1 did not start" >&2; exit 1
}
declare -A PORT
stop() { kill -KILL "${PID[$1]}"; wait "${PID[$1]}" 2>/dev/null || true; unset "PID[$1]"; }
scans() { # NAME → "scan sum count" per scan
  curl -s "http://127.0.0.1:${PORT[$1]}/metrics" |
    awk -F'[{}" ]+' '/^oops_scan_duration_seconds_(sum|count)\{/ {
      split($1, a, "_"); kind = a[length(a)]; scan = $3; v[scan, kind] = $NF; s[scan] = 1 }
      END { for (x in s) print x, v[x, "sum"], v[x, "count"] }'
}
median_ms() { # CMD...: median wall time of SAMPLES runs, ms
  local i t0 t1
  for ((i = 0; i < SAMPLES; i++)); do
    t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000))
  done | sort -n | awk '{a[NR] = $1} END {printf "%.1f", a[int((NR + 1) / 2)] / 1000}'
}

declare -A R # "round:what" -> ms
measure() { # ROUND
  local r=$1 a=a-$1 b=b-$1 i
  start "$a"
  scans "$a" >"$work/s0"; sleep "$IDLE"; scans "$a" >"$work/s1"
  while read -r scan sum count; do
    read -r _ sum0 count0 < <(grep "^$scan " "$work/s0" || echo "$scan 0 0")
    ((count > count0)) && R[$r:tick $scan]=$(awk -v s="$sum" -v s0="$sum0" -v c="$count" -v c0="$count0" \
      'BEGIN {printf "%.2f", (s - s0) / (c - c0) * 1000}')
  done <"$work/s1"
  local ids=()
  for ((i = 0; i < K; i++)); do ids+=("$(ctl create --app "bench-$r/a$i" --env prod --artifact "registry/a$i:1" 2>/dev/null)"); done
  local list
  list=$(printf "'%s'," "${ids[@]}"); list=${list%,}
  for _ in $(seq 600); do
    [[ $(q "SELECT COUNT(*) FROM pipeline WHERE id IN ($list) AND status = 'RUNNING' AND driven_by = '$a'") == "$K" ]] && break
    sleep 0.1
  done
  stop "$a"
  q "UPDATE sim_job SET ready_at = NOW(6) WHERE pipeline_id IN ($list) AND kind = 'build'"
  local t0
  t0=$(q "SELECT NOW(6)")
  start "$b"
  for _ in $(seq 1200); do
    [[ $(q "SELECT COUNT(*) FROM pipeline WHERE id IN ($list) AND status = 'SUCCEEDED'") == "$K" ]] && break
    sleep 0.1
  done
  R[$r:takeover]=$(q "SELECT ROUND(TIMESTAMPDIFF(MICROSECOND, '$t0', MAX(status_changed_at)) / 1000, 1)
    FROM pipeline WHERE id IN ($list)")
  R[$r:show]=$(median_ms ctl show "${ids[0]}")
  if [[ $r == history ]]; then
    R[empty:show old]=${R[empty:show]}
    R[$r:show old]=$(median_ms ctl show "$(printf 'h%011d' $((N / 2)))")
  fi
  stop "$b"
}

echo "bench/history.sh: $N pipelines x $EVENTS events, K=$K, $SAMPLES samples, ${IDLE}s idle (MariaDB $(q 'SELECT VERSION()'))" >&2
measure empty
E=$((N * EVENTS)) R=$((N / 10 > 0 ? N / 10 : 1))
# Ages within the shipped retention defaults (pipelines and events 180 days,
# logs and notifications 30, restarts 90), so the retention leader deletes
# nothing and the history stays what it is while measured: pipelines, events
# and jobs spread over 170 days, logs, notifications and simulated calls over
# 29, restarts over 80 (500,000 pipelines: one every 29 s).
P_SPAN=$((170 * 86400)) S_SPAN=$((29 * 86400)) R_SPAN=$((80 * 86400))
t0=$(date +%s)
q "
INSERT INTO pipeline (id, namespace, application, environment, status, artifact, message,
    created_at, status_changed_at)
  SELECT CONCAT('h', LPAD(seq, 11, '0')), 'hist', CONCAT('app', seq % 500), IF(seq % 2, 'prod', 'staging'),
    ELT(1 + seq % 3, 'SUCCEEDED', 'ERROR', 'STOPPED'), CONCAT('registry/app:', seq), 'done',
    NOW(6) - INTERVAL (N - seq) * $P_SPAN DIV N + 3600 SECOND, NOW(6) - INTERVAL (N - seq) * $P_SPAN DIV N + 3000 SECOND
  FROM (SELECT seq, $N AS N FROM seq_1_to_$N) s;
INSERT INTO pipeline_event (pipeline_id, event_type, from_status, to_status, message, server, created_at)
  SELECT CONCAT('h', LPAD(seq DIV $EVENTS + 1, 11, '0')), 'BUILDING', 'INITIALIZED', 'RUNNING', 'x', 'old',
    NOW(6) - INTERVAL ($E - seq) * $P_SPAN DIV $E + 3600 SECOND
  FROM seq_0_to_$((E - 1));
INSERT INTO outbox (event_id, kind, ref_id, created_at, delivered_at, next_attempt_at, routed)
  SELECT CONCAT('hist-', seq), 'pipeline', seq, NOW(6) - INTERVAL ($E - seq) * $S_SPAN DIV $E + 3600 SECOND,
    NOW(6) - INTERVAL ($E - seq) * $S_SPAN DIV $E + 3500 SECOND, NOW(6) - INTERVAL ($E - seq) * $S_SPAN DIV $E + 3600 SECOND, 1
  FROM seq_1_to_$E;
INSERT INTO pipeline_log (pipeline_id, step, server, argv, exit_status, result, output, created_at)
  SELECT CONCAT('h', LPAD(seq, 11, '0')), 'build', 'old', '[\"./build.sh\"]', 0, 'exited 0', 'ok',
    NOW(6) - INTERVAL ($N - seq) * $S_SPAN DIV $N + 3600 SECOND
  FROM seq_1_to_$N;
INSERT INTO exec_job (pipeline_id, kind, mode, server, state, exit_status, started_at, finished_at)
  SELECT CONCAT('h', LPAD(seq, 11, '0')), 'build', 'local', 'old', 'succeeded', 0,
    NOW(6) - INTERVAL ($N - seq) * $P_SPAN DIV $N + 3600 SECOND, NOW(6) - INTERVAL ($N - seq) * $P_SPAN DIV $N + 3500 SECOND
  FROM seq_1_to_$N;
INSERT INTO sim_job (pipeline_id, kind, started_at, ready_at, outcome, server)
  SELECT CONCAT('h', LPAD(seq, 11, '0')), 'build', NOW(6) - INTERVAL ($N - seq) * $P_SPAN DIV $N + 3600 SECOND,
    NOW(6) - INTERVAL ($N - seq) * $P_SPAN DIV $N + 3500 SECOND, IF(seq % 3, NULL, 'stopped'), 'old'
  FROM seq_1_to_$N;
INSERT INTO sim_call (pipeline_id, target, action, server, created_at)
  SELECT CONCAT('h', LPAD(seq DIV 2 + 1, 11, '0')), CONCAT('hist/app', seq % 500, '/prod'),
    IF(seq % 2, 'build', 'deploy'), 'old', NOW(6) - INTERVAL ($N * 2 - seq) * $S_SPAN DIV ($N * 2) + 3600 SECOND
  FROM seq_0_to_$((2 * N - 1));
INSERT INTO restart_run (namespace, application, environment, occurrence, fired_by, fired_at, started_at,
    outcome, finished_at)
  SELECT 'hist', CONCAT('app', seq % 500), 'prod', NOW() - INTERVAL seq * $R_SPAN DIV $R + 3600 SECOND, 'old',
    NOW(6) - INTERVAL seq * $R_SPAN DIV $R + 3600 SECOND, NOW(6) - INTERVAL seq * $R_SPAN DIV $R + 3600 SECOND, 'ok',
    NOW(6) - INTERVAL seq * $R_SPAN DIV $R + 3599 SECOND
  FROM seq_1_to_$R;
ANALYZE TABLE pipeline, pipeline_event, outbox, pipeline_log, exec_job, sim_job, sim_call, restart_run;" >/dev/null
fill=$(($(date +%s) - t0))
# Let InnoDB settle (purge of the fill's undo, dirty pages written) before
# measuring, as a database that grew over months would be: at most 300 s.
for _ in $(seq 300); do
  hist=$(q "SHOW ENGINE INNODB STATUS" | grep -o 'History list length [0-9]*' | grep -o '[0-9]*$')
  dirty=$(q "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'" | awk '{print $2}')
  ((${hist:-0} < 100 && ${dirty:-0} < 100)) && break
  sleep 1
done
settled=$(($(date +%s) - t0 - fill))
echo "bench/history.sh: filled in ${fill}s, settled in ${settled}s: $(q "SELECT CONCAT((SELECT COUNT(*) FROM pipeline), ' pipelines, ',
  (SELECT COUNT(*) FROM pipeline_event), ' events')")" >&2
measure history

printf '%-28s %12s %12s %8s\n' "history: $N pipelines" "empty (ms)" "history (ms)" "ratio"
for what in $(printf '%s\n' "${!R[@]}" | sed -n 's/^empty:\(tick .*\)$/\1/p' | sort | tr ' ' '~') takeover show "show~old"; do
  w=${what//\~/ }
  e=${R[empty:$w]:-} h=${R[history:$w]:-}
  [[ -n $e && -n $h ]] || continue
  printf '%-28s %12s %12s %8s\n' "$w" "$e" "$h" "$(awk -v e="$e" -v h="$h" 'BEGIN {printf (e > 0 ? "%.2f" : "-"), h / e}')"
done
