#!/usr/bin/env bash
# What MariaDB's thread pool changes for a fleet's connections (doc/guide/database.md,
# "Sizing the database's connections"): the database's operating-system threads with
# N idle sessions, and with N sessions waiting in GET_LOCK (a server parked on
# a neighbour's lock), under thread_handling=one-thread-per-connection (the
# default) and pool-of-threads. Counts, not timings.
#   bash bench/thread_pool.sh [N]        (default 50)
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib/mariadb.sh
n=${1:-50}
work=$(mktemp -d /tmp/oops-bench-tp.XXXXXX)
trap 'mariadb_stop; rm -rf "$work"' EXIT

threads() { ps -o nlwp= -p "$MDB_PID" | tr -d ' '; }
client() { MYSQL_PWD=$MDB_PASSWORD mariadb --no-defaults -h127.0.0.1 -P"$MDB_PORT" -uoops "$@"; } # no password in argv
measure() { # label, extra server options
  MDB_EXTRA_ARGS="$2" mariadb_start "$work/$1" >/dev/null || exit 1
  local base idle waiting i
  base=$(threads)
  for i in $(seq 1 "$n"); do (sleep 12 | client >/dev/null) & done # connected, sending nothing
  sleep 6 # the pool retires the workers the connect burst made (thread_pool_idle_timeout=2 here)
  idle=$(threads)
  mariadb "${MDB_ADMIN[@]}" -e "SELECT GET_LOCK('held', 0), SLEEP(10)" >/dev/null &
  sleep 0.5
  for i in $(seq 1 "$n"); do client -e "SELECT GET_LOCK('held', 8)" >/dev/null & done
  sleep 3
  waiting=$(threads)
  printf '%-26s %8s %14s %22s\n' "$1" "$base" "$(printf %+d $((idle - base))) ($n idle)" \
    "$(printf %+d $((waiting - idle))) ($n in GET_LOCK)"
  wait
  mariadb_stop
}
printf '%-26s %8s %14s %22s\n' thread_handling "threads" "idle sessions" "waiting sessions"
measure one-thread-per-connection ""
measure pool-of-threads "--thread-handling=pool-of-threads --thread-pool-size=2 --thread-pool-idle-timeout=2"
