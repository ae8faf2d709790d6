#!/usr/bin/env bash
# bench/cpu.sh BUILD_DIR N [OOPSD FLAGS...]: where the CPU of one server driving
# N instant pipelines goes (issue 15). A throwaway MariaDB, `oopsctl migrate`,
# N INITIALIZED rows from seq_1_to_N, one oopsd with the scale case's policy
# (scan 500 ms, simulated gateway with instant steps); prints the wall time to
# all SUCCEEDED and the CPU of mariadbd and oopsd over it (/proc utime+stime,
# in clock ticks: 100 per second), oopsd's peak RSS, and the MariaDB status
# counters that moved most. EXTRA_POLICY adds policy lines; PERF=1 / PERF_O=1
# record `perf` profiles of mariadbd / oopsd into /tmp/perf-{mdb,oopsd}.data.
# Run two builds one after the other for a comparison (bench/README.md).
build=$1 n=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../tests/lib/mariadb.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/oops-cpu.XXXXXX")
trap 'kill $spid 2>/dev/null; wait $spid 2>/dev/null; mariadb_stop; rm -rf "$work"' EXIT
mariadb_start "$work/mariadb" >/dev/null || exit 1
db=$(mariadb_new_db e)
export OOPS_DB=$db # the URL not in argv: ps shows argv to every user
$build/oopsctl migrate >/dev/null
mkdir -p $work/pol
cat > $work/pol/p.lua <<'P'
scan { interval = "500ms" }
gateway "simulated" { build = "0s", deploy = "0s", rollout = "0s" }
P
[[ -n ${EXTRA_POLICY:-} ]] && echo "$EXTRA_POLICY" >> $work/pol/p.lua
q() { mariadb "${MDB_ADMIN[@]}" -N -B e -e "$1"; }
$build/oopsd --name s1 --policies $work/pol --listen off "$@" 2>$work/s1.log &
spid=$!
sleep 1.5
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
m0=$(cpu $MDB_PID) o0=$(cpu $spid)
mariadb "${MDB_ADMIN[@]}" -N -B -e "SHOW GLOBAL STATUS" > $work/st0
[[ -n ${PERF:-} ]] && { perf record -F 499 -g -p $MDB_PID -o /tmp/perf-mdb.data 2>/dev/null & perfpid=$!; }
[[ -n ${PERF_O:-} ]] && { perf record -F 499 -g -p $spid -o /tmp/perf-oopsd.data 2>/dev/null & perfpid2=$!; }
t0=$(date +%s.%N)
q "INSERT INTO pipeline (id, namespace, application, environment, status) SELECT CONCAT('b', LPAD(seq, 11, '0')), 'bench', CONCAT('app', seq), 'prod', 'INITIALIZED' FROM seq_1_to_$n"
while :; do
  left=$(q "SELECT COUNT(*) FROM pipeline WHERE status <> 'SUCCEEDED'")
  [[ $left == 0 ]] && break
  sleep 0.2
done
t1=$(date +%s.%N)
[[ -n ${perfpid:-} ]] && { kill -INT $perfpid; wait $perfpid; }
[[ -n ${perfpid2:-} ]] && { kill -INT $perfpid2; wait $perfpid2; }
m1=$(cpu $MDB_PID) o1=$(cpu $spid)
mariadb "${MDB_ADMIN[@]}" -N -B -e "SHOW GLOBAL STATUS" > $work/st1
join <(sort $work/st0) <(sort $work/st1) | awk '$3 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ {d=$3-$2; if (d>20000) print $1, d}' | sort -k2 -n -r | head -25
rss=$(grep VmHWM /proc/$spid/status | awk '{print $2}')
echo "N=$n flags=[$*] wall=$(echo "$t1 - $t0" | bc) s  mariadb_cpu=$(( (m1-m0) ))ticks oopsd_cpu=$((o1-o0))ticks peakRSS=${rss}kB errors=$(grep -c "level=error" $work/s1.log)"; grep "level=error" $work/s1.log | head -3
grep 'level=error\|level=warn' $work/s1.log | head -5
