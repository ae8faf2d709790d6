# Throwaway MariaDB for tests and the demo: sourced, not run.
#   mariadb_start DIR   → sets MDB_PORT, MDB_SOCKET, MDB_URL (user oops, no
#                         password in it), MDB_PASSWORD (oops' generated one),
#                         MDB_PASSWORD_FILE (DIR/db-password, 0600; exported as
#                         OOPS_DB_PASSWORD_FILE for oopsd and oopsctl), MDB_ADMIN (mariadb
#                         client args: the private socket, as the account of the
#                         OS user who started it, unix_socket auth, no password)
#                         and MDB_ADMIN_USER (that account's name)
#   mariadb_stop        → stops the server and removes DIR (call it from an EXIT trap)
#   mariadb_new_db NAME → creates database NAME, prints its URL (no password)
#   mariadb_password    → prints a new random password (for a test's own accounts)
# The server listens on a free loopback port and a private socket; nothing is
# shared with a system MariaDB.
#
# Reachable by the user who started it alone (issue 34), also on a shared host
# and when that user is root: DIR and the socket are 0700; root and the OS
# user's account log in by unix_socket on that socket only (no root over TCP,
# no anonymous account: any account that could log in without a password is
# dropped, and the start fails if one is left); `oops` has a random password
# that never goes into an argv (statements reach the client on stdin); and
# secure_file_priv is DIR/files (0700), so INTO OUTFILE, INTO DUMPFILE, LOAD
# DATA and LOAD_FILE() reach nothing else. No URL holds the password (a test
# passes its URL to oopsctl in argv): it is in MDB_PASSWORD_FILE, which
# mariadb_start exports as OOPS_DB_PASSWORD_FILE. MDB_URL
# and MDB_PASSWORD are not exported: tests/run.sh hands each test its URL
# (OOPS_TEST_DB).
#
# TLS, opt-in: MDB_TLS=1 before mariadb_start makes a certificate authority
# with openssl in DIR/tls (nothing leaves DIR), a server certificate for
# 127.0.0.1, localhost and db.oops.test (a name tests map in a private
# /etc/hosts) signed by it, and a client certificate; the server
# then offers TLS (ssl-ca/ssl-cert/ssl-key) and also listens on 127.0.0.2, an
# address its certificate does not name. Exported: MDB_TLS_CA, MDB_TLS_CERT,
# MDB_TLS_KEY (the client's), MDB_TLS_OTHER_HOST=127.0.0.2. Without MDB_TLS
# nothing changes.
#
# MDB_EXTRA_ARGS (words, unquoted) adds server options, e.g.
# "--performance-schema=ON" for bench/cpu.sh's statement profile.
#
# MDB_MAX_CONNECTIONS: the server's max_connections, 500 when unset;
# "default" leaves MariaDB's own (151, also MySQL's), as a new operator's
# database has it (tests/integration/fleet.sh).

MDB_DIR=""
MDB_PID=""

source "$(dirname "${BASH_SOURCE[0]}")/ports.sh" # _free_port

# Why mariadb-install-db failed: what its log ($1) says before the generic
# advice it ends with (the bootstrap server's own lines), at most 12.
_mariadb_install_why() {
  awk '/Installation of system tables failed/ { exit } NF && !/^Installing MariaDB/' "$1" |
    head -n 12
}

# A new data directory in $1/data (its temporary files in $1/tmp: the
# bootstrap's temporary tables in a shared /tmp collide with another
# bootstrap's, and two passes start theirs at once), root and the OS user $2
# logging in by unix_socket alone (the default: no account without a
# password, as `normal` made root@127.0.0.1, root@::1 and root@localhost).
# 0 or 1.
_mariadb_install() {
  rm -rf "$1/data" "$1/tmp" && mkdir -p "$1/tmp" || return 1
  mariadb-install-db --no-defaults --datadir="$1/data" --tmpdir="$1/tmp" --user="$2" \
    --auth-root-authentication-method=socket --skip-test-db >"$1/install.log" 2>&1
}

# The accounts someone could log in to without a password (over TCP above
# all), one 'user'@'host' a line: anonymous ones, root anywhere but the
# socket (localhost), and any account, neither locked nor a role, with a way
# in (its plugin, or one of its OR alternatives) that is not unix_socket and
# has an empty authentication string. mariadb.sys (locked) and the socket
# accounts ("invalid" OR unix_socket) are not.
# lua/oops/scenario/mariadb.lua asks the same (OPEN_ACCOUNTS).
MDB_OPEN_ACCOUNTS="SELECT CONCAT(QUOTE(g.User), '@', QUOTE(g.Host)) FROM mysql.global_priv g
  WHERE IFNULL(JSON_EXTRACT(g.Priv, '\$.account_locked'), 'false') <> 'true'
    AND IFNULL(JSON_EXTRACT(g.Priv, '\$.is_role'), 'false') <> 'true'
    AND (g.User = '' OR (g.User = 'root' AND g.Host <> 'localhost')
      OR (IFNULL(JSON_VALUE(g.Priv, '\$.authentication_string'), '') = ''
        AND IFNULL(JSON_VALUE(g.Priv, '\$.plugin'), 'mysql_native_password') NOT IN ('unix_socket', 'auth_socket'))
      OR EXISTS (SELECT 1 FROM JSON_TABLE(JSON_EXTRACT(g.Priv, '\$.auth_or'), '\$[*]' COLUMNS (
          plugin VARCHAR(64) PATH '\$.plugin', auth TEXT PATH '\$.authentication_string')) a
        WHERE a.plugin NOT IN ('unix_socket', 'auth_socket') AND IFNULL(a.auth, '') = ''))"

# Drop every such account, then check that none is left. 0 or 1.
_mariadb_lock_down() {
  local open
  open=$(mariadb "${MDB_ADMIN[@]}" -N -B <<<"$MDB_OPEN_ACCOUNTS;") || return 1
  if [[ -n $open ]]; then
    sed 's/^/DROP USER /; s/$/;/' <<<"$open" | mariadb "${MDB_ADMIN[@]}" || return 1
  fi
  open=$(mariadb "${MDB_ADMIN[@]}" -N -B <<<"$MDB_OPEN_ACCOUNTS;") || return 1
  [[ -z $open ]] || { echo "mariadb_start: accounts without a password are left: $open" >&2; return 1; }
}

mariadb_password() { echo "pw$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"; }

mariadb_start() {
  mkdir -p "$1" || return 1
  # Private: the data, the socket, the logs and the files dir live here.
  # (Another user's directory is left alone: mariadb_stop would remove it.)
  [[ -O $1 ]] || { echo "mariadb_start: $1 belongs to another user" >&2; return 1; }
  MDB_DIR=$1
  chmod 700 "$MDB_DIR" || return 1
  local user; user=$(id -un)
  # Nothing else may hold this data directory or socket.
  if pgrep -f -- "--datadir=$MDB_DIR/data" >/dev/null; then
    echo "mariadb_start: a mariadbd already uses $MDB_DIR/data" >&2; return 1
  fi
  if [[ -e $MDB_DIR/mysqld.sock ]]; then
    echo "mariadb_start: $MDB_DIR/mysqld.sock exists: another server's socket?" >&2; return 1
  fi
  local attempt
  for attempt in 1 2; do # one retry, on a clean directory
    _mariadb_install "$MDB_DIR" "$user" && break
    echo "mariadb-install-db failed (attempt $attempt of 2): $MDB_DIR/install.log says:" >&2
    _mariadb_install_why "$MDB_DIR/install.log" | sed 's/^/  /' >&2
    cp "$MDB_DIR/install.log" "$MDB_DIR/install.$attempt.log"
    ((attempt == 2)) && return 1
  done
  # The one place INTO OUTFILE/DUMPFILE, LOAD DATA and LOAD_FILE() may reach.
  mkdir -p -m 700 "$MDB_DIR/files" || return 1
  MDB_SOCKET="$MDB_DIR/mysqld.sock"
  MDB_ADMIN_USER=$user
  MDB_ADMIN=(--no-defaults -S "$MDB_SOCKET" -u"$user")
  # Also on ::1 where the machine has an IPv6 loopback, so a bracketed IPv6
  # URL can be tested for real (MDB_IPV6=1 says so; tests skip without it).
  local bind=127.0.0.1
  MDB_IPV6=""
  if grep -qE '^0{31}1 .* lo$' /proc/net/if_inet6 2>/dev/null; then bind=127.0.0.1,::1; MDB_IPV6=1; fi
  local tls_args=()
  if [[ ${MDB_TLS:-} == 1 ]]; then
    _mariadb_make_tls "$MDB_DIR/tls" || return 1
    tls_args=(--ssl-ca="$MDB_DIR/tls/ca.pem" --ssl-cert="$MDB_DIR/tls/server.pem"
      --ssl-key="$MDB_DIR/tls/server.key")
    bind="$bind,127.0.0.2"
  fi
  local max_conn=(--max-connections="${MDB_MAX_CONNECTIONS:-500}")
  [[ ${MDB_MAX_CONNECTIONS:-} == default ]] && max_conn=()
  local try
  for try in 1 2 3; do
    MDB_PORT=$(_free_port)
    mariadbd --no-defaults --datadir="$MDB_DIR/data" --socket="$MDB_SOCKET" \
      --port="$MDB_PORT" --bind-address="$bind" --user="$user" \
      --pid-file="$MDB_DIR/mysqld.pid" --log-error="$MDB_DIR/error.log" --tmpdir="$MDB_DIR/tmp" \
      --secure-file-priv="$MDB_DIR/files" \
      --innodb-buffer-pool-size=128M --innodb-log-file-size=64M --skip-log-bin \
      "${max_conn[@]}" --innodb-flush-log-at-trx-commit=2 --skip-name-resolve \
      --innodb-fast-shutdown=2 "${tls_args[@]}" ${MDB_EXTRA_ARGS:-} >/dev/null 2>&1 &
    MDB_PID=$!
    disown "$MDB_PID" 2>/dev/null # no "Killed" job report from the shell when it is stopped
    for _ in $(seq 300); do
      if mariadb "${MDB_ADMIN[@]}" -e 'SELECT 1' >/dev/null 2>&1; then
        break 2
      fi
      kill -0 "$MDB_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$MDB_PID" 2>/dev/null
    MDB_PID=""
  done
  [[ -n "$MDB_PID" ]] || { echo "mariadbd did not start:" >&2; tail -20 "$MDB_DIR/error.log" >&2; return 1; }
  chmod 700 "$MDB_SOCKET" || return 1
  _mariadb_lock_down || return 1
  MDB_PASSWORD=$(mariadb_password)
  # On stdin, never in an argv: ps shows every user the client's arguments.
  mariadb "${MDB_ADMIN[@]}" <<SQL || { echo "mariadb_start: creating user oops failed" >&2; return 1; }
    CREATE USER 'oops'@'127.0.0.1' IDENTIFIED BY '$MDB_PASSWORD';
    CREATE USER 'oops'@'localhost' IDENTIFIED BY '$MDB_PASSWORD';
    GRANT ALL PRIVILEGES ON *.* TO 'oops'@'127.0.0.1';
    GRANT ALL PRIVILEGES ON *.* TO 'oops'@'localhost';
    ${MDB_IPV6:+CREATE USER 'oops'@'::1' IDENTIFIED BY '$MDB_PASSWORD'; GRANT ALL PRIVILEGES ON *.* TO 'oops'@'::1';}
    CREATE DATABASE oops;
SQL
  # The password in a file of DIR's (0600), never in a URL: tests hand URLs to
  # oopsctl in argv, which ps shows every user. OOPS_DB_PASSWORD_FILE names it
  # to this process's oopsctl and oopsd (a test that also reaches another
  # server's URL names that one's file for those commands).
  MDB_PASSWORD_FILE="$MDB_DIR/db-password"
  (umask 077 && printf '%s' "$MDB_PASSWORD" >"$MDB_PASSWORD_FILE") || return 1
  MDB_URL="mysql://oops@127.0.0.1:$MDB_PORT/oops"
  export OOPS_DB_PASSWORD_FILE=$MDB_PASSWORD_FILE
  export MDB_PORT MDB_SOCKET MDB_IPV6 MDB_ADMIN_USER
}

# A CA, a server certificate (127.0.0.1, localhost) and a client certificate
# in $1, made with openssl on the spot (short-lived keys, never reused).
_mariadb_make_tls() {
  local d=$1
  mkdir -p "$d" && chmod 700 "$d" || return 1
  {
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=oops test CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -keyout "$d/ca.key" -out "$d/ca.pem" &&
    openssl req -new -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
      -keyout "$d/server.key" -out "$d/server.csr" &&
    openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
      -days 2 -out "$d/server.pem" -extfile <(printf '%s\n' "basicConstraints=CA:FALSE" \
        "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" \
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:db.oops.test") &&
    openssl req -new -newkey rsa:2048 -nodes -subj "/CN=oops test client" \
      -keyout "$d/client.key" -out "$d/client.csr" &&
    openssl x509 -req -in "$d/client.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
      -days 2 -out "$d/client.pem" -extfile <(printf '%s\n' "basicConstraints=CA:FALSE" \
        "extendedKeyUsage=clientAuth")
  } >"$d/openssl.log" 2>&1 || { echo "openssl failed:" >&2; tail -20 "$d/openssl.log" >&2; return 1; }
  MDB_TLS_CA=$d/ca.pem MDB_TLS_CERT=$d/client.pem MDB_TLS_KEY=$d/client.key
  MDB_TLS_OTHER_HOST=127.0.0.2
  export MDB_TLS_CA MDB_TLS_CERT MDB_TLS_KEY MDB_TLS_OTHER_HOST
}

mariadb_new_db() {
  mariadb "${MDB_ADMIN[@]}" -e "DROP DATABASE IF EXISTS \`$1\`; CREATE DATABASE \`$1\`"
  echo "mysql://oops@127.0.0.1:$MDB_PORT/$1"
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
