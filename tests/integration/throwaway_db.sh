# The throwaway MariaDBs the project starts are reachable by the user who
# started them alone (issue 34): oopsctl chaos and oopsctl scenario run as
# root on shared hosts, and so do CI's tests. Three of them, each as its
# users get it:
#   a. this test run's own (tests/run.sh: tests/lib/mariadb.sh),
#   b. one from lua/oops/scenario/mariadb.lua, as oopsctl scenario and
#      oopsctl chaos start theirs (with client hosts, as a campaign), after a
#      restart (restart_database, chaos faults: the socket is made anew),
#   c. one from tests/lib/mariadb.sh as the demo starts it, in a directory
#      whose parent anyone may traverse.
# As nobody (setpriv): every account the server has, plus root, oops, an
# empty name, nobody and a name no account has, without a password over TCP
# (127.0.0.1, and ::1 where it listens), and over the socket: all refused.
# As the owner with the real oops password: INTO OUTFILE and INTO DUMPFILE
# outside secure_file_priv (/tmp, the server's own directory, files/../)
# fail with 1290 and write nothing, LOAD DATA INFILE fails, LOAD_FILE()
# reads nothing; inside files/ they work. The directory, files/ and the
# socket are 0700 and ours. For b and c, no argv and no environment of the
# mariadb, mariadbd and mariadb-install-db they run holds the oops password
# (a wrapper in PATH records them). No URL of a or c holds the password (tests
# pass theirs in argv): a 0600 file does, OOPS_DB_PASSWORD_FILE names it. Needs root (CI runs as root) and setpriv.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
if ((EUID != 0)) || ! command -v setpriv >/dev/null || ! id nobody >/dev/null 2>&1 ||
  ! getent group nogroup >/dev/null; then
  echo "ok 1 # SKIP needs root, setpriv, the user nobody and the group nogroup"
  echo "1..1"
  exit 0
fi
not_under_sanitizers "it probes MariaDB's accounts, modes and files; the C it runs is covered elsewhere"

# (a)'s coordinates, before mariadb.sh replaces MDB_* in this process.
a_port=$MDB_PORT a_sock=$MDB_SOCKET a_admin=${MDB_ADMIN_USER:-root}
a_pw=$(cat "$OOPS_DB_PASSWORD_FILE") a_pw_file=$OOPS_DB_PASSWORD_FILE a_url=$OOPS_TEST_DB
a_db=${OOPS_TEST_DB##*/}; a_db=${a_db%%\?*}
source "$OOPS_ROOT/tests/lib/mariadb.sh"

# b and c live under a directory anyone may traverse (as /tmp is), so their
# own directory's mode is all that keeps nobody out. /work may not be.
pub=$(mktemp -d /tmp/oops-throwaway.XXXXXX)
chmod 755 "$pub"
priv=$pub/private # what the test keeps: the wrappers, their log, b's password
mkdir -m 700 "$priv"
b_pid=""
cleanup() {
  [[ -n $b_pid ]] && { touch "$priv/b.stop"; wait "$b_pid" 2>/dev/null; }
  mariadb_stop
  rm -rf "$pub"
  return 0
}
trap cleanup EXIT

# Wrappers recording each argv and environment, first in PATH.
shim=$priv/shim
mkdir "$shim"
for tool in mariadb mariadbd mariadb-install-db; do
  real=$(command -v "$tool") || { echo "not ok 1 - $tool is installed"; exit 1; }
  # One write a record: the tools run side by side (a client polls a starting server).
  printf '#!/bin/sh\nr="argv:"; for a in "$0" "$@"; do r="$r $a"; done\nprintf "%%s\\n%%s\\n" "$r" "$(env | sed "s/^/env: /")" >>%q\nexec %q "$@"\n' \
    "$priv/calls.log" "$real" >"$shim/$tool"
  chmod 700 "$shim/$tool"
done

nobody() { (cd / && setpriv --reuid=nobody --regid=nogroup --clear-groups env -i PATH=/usr/bin:/bin "$@"); }
admin() { # SOCKET ACCOUNT SQL: as its owner, unix_socket on the socket
  mariadb --no-defaults -N -B -S "$1" -u"$2" -e "$3"
}
# The lines of the wrappers' log holding $1 (cut short).
calls_with() { grep -nF -- "$1" "$priv/calls.log" | cut -c1-200 | head -n 5; }
# 0 when something listens on ADDR:PORT (TCP).
listens() { ss -Hltn "sport = :$2" | grep -qF " $1:$2 "; }

# probe NAME DIR PORT ADMIN_ACCOUNT PASSWORD DB
probe() {
  local name=$1 dir=$2 port=$3 acct=$4 pw=$5 db=$6
  local sock=$dir/mysqld.sock
  is "$(stat -c '%U %a' "$dir")" "root 700" "$name: its directory $dir is ours and private (0700)"
  is "$(stat -c '%U %a %F' "$sock")" "root 700 socket" "$name: its socket is ours and private (0700)"
  is "$(stat -c '%U %a' "$dir/files")" "root 700" "$name: its files directory is ours and private (0700)"
  is "$(admin "$sock" "$acct" "SELECT @@secure_file_priv")" "$dir/files/" \
    "$name: secure_file_priv is its files directory"

  # Every account the server has, and names that only an anonymous account
  # or a careless one would let in.
  local users=(root oops "" nobody "nosuch$RANDOM") u h in="" tried=0
  while IFS= read -r u; do users+=("$u"); done < <(admin "$sock" "$acct" "SELECT DISTINCT User FROM mysql.global_priv")
  local hosts=(127.0.0.1)
  listens "[::1]" "$port" && hosts+=(::1)
  for h in "${hosts[@]}"; do
    for u in "${users[@]}"; do
      tried=$((tried + 1))
      nobody mariadb --no-defaults --connect-timeout=5 -h"$h" -P"$port" --user="$u" -e 'SELECT 1' >/dev/null 2>&1 &&
        in+=" '$u'@$h"
    done
  done
  is "$in" "" "$name: as nobody, no account logs in over TCP without a password ($tried tries: ${hosts[*]} × ${#users[@]} names)"
  in=""
  for u in root oops "" nobody "$acct"; do
    nobody mariadb --no-defaults --connect-timeout=5 -S"$sock" --user="$u" -e 'SELECT 1' >/dev/null 2>&1 && in+=" '$u'"
  done
  is "$in" "" "$name: as nobody, no account logs in over the socket"
  MYSQL_PWD=$pw setpriv --reuid=nobody --regid=nogroup --clear-groups \
    mariadb --no-defaults --connect-timeout=5 -h127.0.0.1 -P"$port" -uoops -e 'SELECT 1' >/dev/null 2>&1
  _tap $? "$name: ... while nobody given the oops password gets in over TCP (the probe can succeed)"

  # As the owner, with the oops password (in the client's environment).
  q() { MYSQL_PWD=$pw mariadb --no-defaults -N -B -h127.0.0.1 -P"$port" -uoops "$db" -e "$1" 2>&1; }
  q "CREATE TABLE IF NOT EXISTS probe (l TEXT)" >/dev/null
  local target kind out bad=""
  for target in "/tmp/oops-probe-$$-$RANDOM" "$dir/outside-$RANDOM" "$dir/files/../escape-$RANDOM" \
    "$dir/data/written-$RANDOM"; do
    for kind in OUTFILE DUMPFILE; do
      out=$(q "SELECT 'x' INTO $kind '$target'")
      [[ $out == *"ERROR 1290"* && ! -e $target ]] || bad+=" $kind $target: ${out:-wrote it};"
      rm -f "$target"
    done
  done
  is "$bad" "" "$name: INTO OUTFILE and INTO DUMPFILE outside secure_file_priv fail with 1290 and write nothing"
  out=$(q "SELECT 'x' INTO OUTFILE '$dir/files/inside-$$'")
  is "$out:$(cat "$dir/files/inside-$$" 2>/dev/null)" ":x" "$name: ... inside it they work (the probe is not vacuous)"
  out=$(q "LOAD DATA INFILE '/etc/passwd' INTO TABLE probe")
  like "$out" "ERROR 1290" "$name: LOAD DATA INFILE of /etc/passwd fails with 1290"
  is "$(q "SELECT COUNT(*) FROM probe"):$(q "SELECT LOAD_FILE('/etc/shadow') IS NULL, LOAD_FILE('/etc/passwd') IS NULL")" \
    "0:1	1" "$name: ... nothing loaded, and LOAD_FILE() of /etc/shadow and /etc/passwd is NULL"
}

# ---- a. this run's own ------------------------------------------------------
probe "the test run's MariaDB" "$(dirname "$a_sock")" "$a_port" "$a_admin" "$a_pw" "$a_db"
# Tests pass their URL to oopsctl in argv, which ps shows every user: it holds no password;
# the password is in a file only we may read, which the environment names.
unlike "$a_url" '^mysql://[^/@]*:[^/@]*@' "the URL every test passes in argv holds no password"
is "$(stat -c '%a %U' "$a_pw_file")" "600 $(id -un)" "... the password is in a file only we may read (0600)"

# ---- b. lua/oops/scenario/mariadb.lua, as oopsctl scenario and chaos ----------
mkdir -m 755 "$pub/b"
cat >"$priv/b.lua" <<'EOF'
-- arg: DIR INFO STOP. Starts a throwaway MariaDB in DIR (client hosts as a
-- campaign's), restarts it, writes what the probe needs to INFO and stops
-- it once STOP exists.
local oops = require("oops")
local lfs = require("lfs")
local dir, info, stop = arg[1], arg[2], arg[3]
local ok, err = oops.wait(function()
  local db, serr = require("oops.scenario.mariadb").start { dir = dir, clients = { "10.213.0.0/255.255.0.0" } }
  if not db then return nil, serr end
  local up, rerr = db:restart {}
  if not up then db:stop() return nil, "restart: " .. tostring(rerr) end
  local f = assert(io.open(info .. ".new", "w"))
  f:write(db.port, "\n", db.password, "\n", db.user, "\n")
  f:close()
  os.rename(info .. ".new", info)
  while not lfs.attributes(stop) do oops.sleep(100) end
  return db:stop()
end)
if not ok then io.stderr:write("b.lua: ", tostring(err), "\n") os.exit(1) end
EOF
: >"$priv/calls.log"
PATH=$shim:$PATH "$OOPS_BUILD/oopsd" lua "$priv/b.lua" "$pub/b/mariadb" "$priv/b.info" "$priv/b.stop" \
  >"$priv/b.out" 2>&1 &
b_pid=$!
for _ in $(seq 1200); do [[ -e $priv/b.info ]] || ! kill -0 "$b_pid" 2>/dev/null && break; sleep 0.1; done
if [[ -e $priv/b.info ]]; then
  { read -r b_port; read -r b_pw; read -r b_user; } <"$priv/b.info"
  probe "mariadb.lua's MariaDB" "$pub/b/mariadb" "$b_port" "$b_user" "$b_pw" oops
  is "$(calls_with "$b_pw")" "" "mariadb.lua's MariaDB: no argv or environment of its tools holds the oops password"
  like "$(grep -c '^argv: .*/mariadbd ' "$priv/calls.log")" "^[2-9]" "  (the wrapper saw mariadbd start twice)"
else
  _tap 1 "mariadb.lua starts a MariaDB" "$(cat "$priv/b.out")"
fi
touch "$priv/b.stop"
wait "$b_pid"; is "$?" 0 "mariadb.lua's MariaDB stops"
b_pid=""

# ---- c. tests/lib/mariadb.sh, as the demo (and tests, bench) start it ---------
mkdir -m 755 "$pub/c"
: >"$priv/calls.log"
PATH=$shim:$PATH mariadb_start "$pub/c/mariadb" >"$priv/c.out" 2>&1 ||
  { echo "not ok - mariadb_start: $(cat "$priv/c.out")"; exit 1; }
probe "mariadb.sh's MariaDB" "$pub/c/mariadb" "$MDB_PORT" "${MDB_ADMIN_USER:-root}" "$MDB_PASSWORD" oops
is "$(calls_with "$MDB_PASSWORD")" "" "mariadb.sh's MariaDB: no argv or environment of its tools holds the oops password"
unlike "$MDB_URL$(mariadb_new_db probe_url)" ':[^/@]*@' "mariadb.sh's URLs hold no password"
is "$(stat -c '%a' "$OOPS_DB_PASSWORD_FILE") $(dirname "$OOPS_DB_PASSWORD_FILE")" "600 $pub/c/mariadb" \
  "... it is in a 0600 file of its directory, which OOPS_DB_PASSWORD_FILE names"
like "$(grep -c '^argv: .*/mariadb ' "$priv/calls.log")" "^[1-9]" "  (the wrapper saw the mariadb client)"
mariadb_stop
done_testing
