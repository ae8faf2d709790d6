#!/usr/bin/env bash
# README's first command: set up, start a throwaway MariaDB, and show oopsd
# at work. Everything it starts is stopped and removed on exit or Ctrl-C.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
source tests/lib/mariadb.sh
work=$(mktemp -d /tmp/oops-demo.XXXXXX)
trap 'mariadb_stop; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
echo "demo: starting a throwaway MariaDB in $work"
mariadb_start "$work/mariadb" || exit 1
export OOPS_DB="$MDB_URL"
ctl=build/oopsctl
$ctl migrate
for app in shop/api shop/web billing/worker; do
  id=$($ctl create --app "$app" --env prod --artifact "registry.local/$app:1.0.0") || exit 1
  echo "demo: created $id for $app"
done
$ctl list
