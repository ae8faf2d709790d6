# Throwaway MariaDB for tests and the demo: sourced, not run.
#   mariadb_start DIR   → sets MDB_PORT, MDB_SOCKET, MDB_URL (a user with a password),
#                         MDB_ADMIN (mariadb client args as that user)
#   mariadb_stop        → stops the server and removes DIR (call it from an EXIT trap)
#   mariadb_new_db NAME → creates database NAME, prints its URL
# The server listens on a free loopback port and a private socket; nothing is
# shared with a system MariaDB.

MDB_DIR=""
MDB_PID=""

source "$(dirname "${BASH_SOURCE[0]}")/ports.sh" # _free_port

mariadb_start() {
  MDB_DIR=$1
  mkdir -p "$MDB_DIR"
  local user; user=$(id -un)
  mariadb-install-db --no-defaults --datadir="$MDB_DIR/data" --user="$user" \
      --auth-root-authentication-method=normal --skip-test-db >"$MDB_DIR/install.log" 2>&1 ||
    { echo "mariadb-install-db failed:" >&2; tail -20 "$MDB_DIR/install.log" >&2; return 1; }
  MDB_SOCKET="$MDB_DIR/mysqld.sock"
  # Also on ::1 where the machine has an IPv6 loopback, so a bracketed IPv6
  # URL can be tested for real (MDB_IPV6=1 says so; tests skip without it).
  local bind=127.0.0.1
  MDB_IPV6=""
  if grep -qE '^0{31}1 .* lo$' /proc/net/if_inet6 2>/dev/null; then bind=127.0.0.1,::1; MDB_IPV6=1; fi
  local try
  for try in 1 2 3; do
    MDB_PORT=$(_free_port)
    mariadbd --no-defaults --datadir="$MDB_DIR/data" --socket="$MDB_SOCKET" \
      --port="$MDB_PORT" --bind-address="$bind" --user="$user" \
      --pid-file="$MDB_DIR/mysqld.pid" --log-error="$MDB_DIR/error.log" \
      --innodb-buffer-pool-size=128M --innodb-log-file-size=64M --skip-log-bin \
      --max-connections=500 --innodb-flush-log-at-trx-commit=2 --skip-name-resolve \
      --innodb-fast-shutdown=2 >/dev/null 2>&1 &
    MDB_PID=$!
    disown "$MDB_PID" 2>/dev/null # no "Killed" job report from the shell when it is stopped
    for _ in $(seq 300); do
      if mariadb --no-defaults -S "$MDB_SOCKET" -uroot -e 'SELECT 1' >/dev/null 2>&1; then
        break 2
      fi
      kill -0 "$MDB_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$MDB_PID" 2>/dev/null
    MDB_PID=""
  done
  [[ -n "$MDB_PID" ]] || { echo "mariadbd did not start:" >&2; tail -20 "$MDB_DIR/error.log" >&2; return 1; }
  MDB_PASSWORD="pw-$RANDOM$RANDOM"
  mariadb --no-defaults -S "$MDB_SOCKET" -uroot -e "
    CREATE USER 'oops'@'127.0.0.1' IDENTIFIED BY '$MDB_PASSWORD';
    CREATE USER 'oops'@'localhost' IDENTIFIED BY '$MDB_PASSWORD';
    GRANT ALL PRIVILEGES ON *.* TO 'oops'@'127.0.0.1';
    GRANT ALL PRIVILEGES ON *.* TO 'oops'@'localhost';
    ${MDB_IPV6:+CREATE USER 'oops'@'::1' IDENTIFIED BY '$MDB_PASSWORD'; GRANT ALL PRIVILEGES ON *.* TO 'oops'@'::1';}
    CREATE DATABASE oops;"
  MDB_URL="mysql://oops:$MDB_PASSWORD@127.0.0.1:$MDB_PORT/oops"
  MDB_ADMIN=(--no-defaults -h127.0.0.1 -P"$MDB_PORT" -uoops -p"$MDB_PASSWORD")
  export MDB_PORT MDB_SOCKET MDB_URL MDB_PASSWORD MDB_IPV6
}

mariadb_new_db() {
  mariadb "${MDB_ADMIN[@]}" -e "DROP DATABASE IF EXISTS \`$1\`; CREATE DATABASE \`$1\`"
  echo "mysql://oops:$MDB_PASSWORD@127.0.0.1:$MDB_PORT/$1"
}

mariadb_stop() {
  if [[ -n "$MDB_PID" ]]; then
    # The data is thrown away: a short grace, then SIGKILL.
    kill "$MDB_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$MDB_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$MDB_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$MDB_PID" 2>/dev/null || break; sleep 0.1; done
    MDB_PID=""
  fi
  [[ -n "$MDB_DIR" && -d "$MDB_DIR" ]] && rm -rf "$MDB_DIR"
  MDB_DIR=""
}
