#!/usr/bin/env bash
# Throughput and cost of the pipeline engine: N pipelines (default 1000) on 3
# servers with instant builds and rollouts (simulated gateway, 0s each).
#   bash bench/pipelines.sh [N ...]        e.g. bash bench/pipelines.sh 100 1000
# Prints, per N: wall time until all are SUCCEEDED (from the servers' start),
# SQL round trips per pipeline (both connections of every server, prepares
# included), and GET_LOCK statements per scan tick that asked for locks.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
[[ -x build/oopsd ]] || bash scripts/setup.sh >/dev/null || exit 1
source tests/lib/mariadb.sh
source tests/lib/oopsd.sh
work=$(mktemp -d /tmp/oops-bench.XXXXXX)
export OOPS_TEST_WORK=$work OOPS_BUILD=$root/build
trap 'stop_servers; mariadb_stop; rm -rf "$work"' EXIT
mariadb_start "$work/mariadb" >/dev/null || exit 1
mkdir -p "$work/policies"
cat >"$work/policies/bench.lua" <<'POLICY'
scan    { interval = "500ms" }
gateway "simulated" { build = "0s", deploy = "0s", rollout = "0s" }
POLICY

metric() { # server, series → its value (0 when absent)
  local v
  v=$(curl -s "$(url "$1" /metrics)" | awk -v k="$2" 'index($0, k" ") == 1 { print $2 }')
  echo "${v:-0}"
}

printf '%-6s  %-9s  %-22s  %-24s  %s\n' "N" "wall (s)" "round trips/pipeline" "GET_LOCK stmts/scan" "drivers (s1/s2/s3)"
for n in "${@:-1000}"; do
  export OOPS_TEST_DB; OOPS_TEST_DB=$(mariadb_new_db "bench_$n")
  OOPS_DB=$OOPS_TEST_DB build/oopsctl migrate >/dev/null
  for s in s1 s2 s3; do start_server "$s" "$work/policies" >/dev/null || exit 1; done
  # All N pipelines appear at once (one multi-row INSERT, as oopsctl create would write them).
  t0=$(date +%s.%N)
  { echo "INSERT INTO pipeline (id, namespace, application, environment, status) VALUES"
    for i in $(seq "$n"); do printf "('b%d', 'bench', 'app%d', 'prod', 'INITIALIZED')%s\n" "$i" "$i" "$( ((i < n)) && echo , || echo ';')"; done
  } | mariadb "${MDB_ADMIN[@]}" "bench_$n"
  while (( $(mariadb "${MDB_ADMIN[@]}" -N -B "bench_$n" -e "SELECT COUNT(*) FROM pipeline WHERE status = 'SUCCEEDED'") < n )); do sleep 0.2; done
  t1=$(date +%s.%N)
  trips=0 acq=0 batches=0
  for s in s1 s2 s3; do
    w=$(metric "$s" 'oops_db_round_trips_total{conn="work"}'); l=$(metric "$s" 'oops_db_round_trips_total{conn="locks"}')
    a=0 b=0
    for scan in build rollout; do
      a=$(echo "$a + $(metric "$s" "oops_lock_acquire_statements_total{scan=\"$scan\"}")" | bc)
      b=$(echo "$b + $(metric "$s" "oops_lock_acquire_batches_total{scan=\"$scan\"}")" | bc)
    done
    trips=$(echo "$trips + $w + $l" | bc); acq=$(echo "$acq + $a" | bc); batches=$(echo "$batches + $b" | bc)
  done
  per_server=$(mariadb "${MDB_ADMIN[@]}" -N -B "bench_$n" -e \
    "SELECT GROUP_CONCAT(c ORDER BY server SEPARATOR '/') FROM (SELECT server, COUNT(DISTINCT pipeline_id) c FROM pipeline_event WHERE to_status = 'SUCCEEDED' GROUP BY server) x")
  printf '%-6s  %-9.2f  %-22.1f  %-24s  %s\n' "$n" "$(echo "$t1 - $t0" | bc)" "$(echo "scale=2; $trips / $n" | bc)" \
    "$(echo "scale=2; $acq / $batches" | bc) ($acq in $batches)" "$per_server"
  stop_servers
  SRV_PID=()
done
