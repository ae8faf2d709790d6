#!/usr/bin/env bash
# README's first command: install what is missing, build, start a throwaway
# MariaDB, and run the demo: three oopsd servers drive a dozen pipelines on
# the simulated gateway while one of them is SIGKILLed mid-run. Everything it
# starts is stopped and removed on exit or Ctrl-C.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bash scripts/setup.sh || exit 1
source tests/lib/mariadb.sh
work=$(mktemp -d /tmp/oops-demo.XXXXXX)
cleanup() {
  pkill -KILL -f -- "oopsd .*$work" 2>/dev/null   # every oopsd the demo started (their policies live in $work)
  mariadb_stop
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted, stopping everything"; exit 130' INT TERM
echo "demo: starting a throwaway MariaDB in $work"
mariadb_start "$work/mariadb" || exit 1
tty=0; [[ -t 1 ]] && tty=1
OOPS_DB="$MDB_URL" OOPSD="$root/build/oopsd" OOPSCTL="$root/build/oopsctl" \
  OOPS_DEMO_DIR="$work" OOPS_DEMO_TTY=$tty \
  "$root/build/oopsd" lua "$root/lua/oops/scenario/demo.lua"
