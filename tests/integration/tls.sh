# TLS to the database: ssl-mode, ssl-ca, ssl-cert, ssl-key in the URL, against
# a MariaDB of this test's own that offers TLS (tests/lib/mariadb.sh with
# MDB_TLS=1: a CA made on the spot with openssl, a server certificate for
# 127.0.0.1 and localhost, a client certificate). The run's own MariaDB (no
# TLS) serves the "server without TLS" cases.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
plain_db=$OOPS_TEST_DB
plain_pw=$(cat "$OOPS_DB_PASSWORD_FILE") # the URL has none (issue 34)
plain_pw_file=$OOPS_DB_PASSWORD_FILE
source "$OOPS_ROOT/tests/lib/mariadb.sh" # replaces MDB_* in this process only
work=$(mktemp -d "$OOPS_TEST_WORK/tls.XXXXXX")
trap 'stop_servers; mariadb_stop' EXIT
MDB_TLS=1 mariadb_start "$work/mariadb" || { echo "not ok 1 - a MariaDB with TLS starts"; exit 1; }
oopsd="$OOPS_BUILD/oopsd" ctl="$OOPS_BUILD/oopsctl"
fixtures="$OOPS_ROOT/tests/fixtures/policies"

root() { mariadb "${MDB_ADMIN[@]}" -N -B "$@"; } # the socket, as our OS user (unix_socket)
pw=$MDB_PASSWORD
tls_pw=$(mariadb_password)
# Accounts that the server itself refuses without TLS, and without a client
# certificate (the statements on stdin: no password in argv).
root <<<"
  CREATE USER 'tls_only'@'127.0.0.1' IDENTIFIED BY '$tls_pw' REQUIRE SSL;
  GRANT ALL PRIVILEGES ON oops.* TO 'tls_only'@'127.0.0.1';
  CREATE USER 'tls_x509'@'127.0.0.1' IDENTIFIED BY '$tls_pw' REQUIRE X509;
  GRANT ALL PRIVILEGES ON oops.* TO 'tls_x509'@'127.0.0.1';"
base="mysql://oops:$pw@127.0.0.1:$MDB_PORT/oops"
other="mysql://oops:$pw@$MDB_TLS_OTHER_HOST:$MDB_PORT/oops" # not named by the certificate
ca=$MDB_TLS_CA
# Another CA, unrelated to the server's.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=some other CA" \
  -keyout "$work/other-ca.key" -out "$work/other-ca.pem" >/dev/null 2>&1

# What a session of that URL says about itself: the cipher ("" in the clear).
cat >"$work/cipher.lua" <<'EOF'
local oops = require("oops")
local ok, err = oops.connect { db = arg[1], locks = false }
if not ok then io.stderr:write(tostring(err), "\n") os.exit(2) end
local rows = assert(oops.db.exec("SHOW SESSION STATUS LIKE 'Ssl_cipher'"))
print("cipher=" .. rows[1].Value)
EOF
cipher() { "$oopsd" lua "$work/cipher.lua" "$1" 2>&1; }

out=$("$ctl" --db "$base?ssl-mode=VERIFY_IDENTITY&ssl-ca=$ca" migrate 2>&1)
is "$?" 0 "oopsctl migrate over TLS (VERIFY_IDENTITY) works"

# The modes, each checked on the session itself.
like "$(cipher "$base?ssl-mode=REQUIRED")" "^cipher=.+" "ssl-mode=REQUIRED: the session is encrypted"
like "$(cipher "$base?ssl-mode=verify_ca&ssl-ca=$ca")" "^cipher=.+" "ssl-mode=VERIFY_CA with the server's CA: encrypted"
like "$(cipher "$base?ssl-mode=VERIFY_IDENTITY&ssl-ca=$ca")" "^cipher=.+" \
  "ssl-mode=VERIFY_IDENTITY to 127.0.0.1, which the certificate names: encrypted"
is "$(cipher "$base?ssl-mode=DISABLED")" "cipher=" "ssl-mode=DISABLED: in the clear, though the server offers TLS"
like "$(cipher "$other?ssl-mode=VERIFY_CA&ssl-ca=$ca")" "^cipher=.+" \
  "VERIFY_CA does not check the host name: $MDB_TLS_OTHER_HOST, not in the certificate, is accepted"

# Refusals: exit 2 (cannot connect), one line naming the problem, no password.
out=$("$ctl" --db "$base?ssl-mode=VERIFY_CA&ssl-ca=$work/other-ca.pem" list 2>&1); rc=$?
is "$rc" 2 "a wrong CA: oopsctl exits 2"
like "$out" "^oopsctl: cannot connect to database at 127\.0\.0\.1:$MDB_PORT: TLS/SSL error: .*certificate" \
  "... naming the certificate problem"
like "$out" "must chain to ssl-ca $work/other-ca\.pem\)$" "... and the CA file it was checked against"
unlike "$out" "$pw" "... never the password"
is "$(printf '%s\n' "$out" | wc -l)" 1 "... on one line"
out=$("$oopsd" --db "$base?ssl-mode=VERIFY_IDENTITY&ssl-ca=$work/other-ca.pem" --name w1 \
  --policies "$fixtures/fast" --listen off 2>&1); rc=$?
is "$rc" 2 "a wrong CA: oopsd exits 2"
like "$out" "^oopsd: cannot connect to database at 127\.0\.0\.1:$MDB_PORT: TLS/SSL error: .*certificate" \
  "... naming the certificate problem"
unlike "$out" "$pw" "... never the password"
out=$("$ctl" --db "$other?ssl-mode=VERIFY_IDENTITY&ssl-ca=$ca" list 2>&1); rc=$?
is "$rc" 2 "VERIFY_IDENTITY to an address the certificate does not name exits 2"
like "$out" "Validation of SSL server certificate failed .*name the host $MDB_TLS_OTHER_HOST\)$" "... saying which host"
out=$("$ctl" --db "$base?ssl-mode=VERIFY_CA&ssl-ca=$work/missing.pem" list 2>&1); rc=$?
is "$rc:$out" "2:oopsctl: cannot connect to database at 127.0.0.1:$MDB_PORT: ssl-ca $work/missing.pem: No such file or directory" \
  "a CA file that cannot be read is named (exit 2)"
out=$("$ctl" --db "$base?ssl-mode=SOMETIMES" list 2>&1); rc=$?
is "$rc:$out" "1:oopsctl: database URL: option ssl-mode must be DISABLED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY" \
  "an unknown ssl-mode is bad input (exit 1), naming the option"
out=$("$ctl" --db "$base?ssl-mode=REQUIRED&ssl-ca=$ca" list 2>&1)
is "$?" 1 "ssl-ca with REQUIRED is refused (exit 1) ..."
like "$out" "say ssl-mode=VERIFY_CA or VERIFY_IDENTITY" "... saying what to write"

# Accounts that require TLS.
tls_only="mysql://tls_only:$tls_pw@127.0.0.1:$MDB_PORT/oops"
out=$("$ctl" --db "$tls_only?ssl-mode=DISABLED" list 2>&1); rc=$?
is "$rc" 2 "ssl-mode=DISABLED for an account that REQUIREs SSL: refused by the server (exit 2)"
like "$out" "Access denied for user 'tls_only'.*\(ssl-mode=DISABLED: an account that requires TLS is refused without it\)$" \
  "... and the message says TLS may be why"
unlike "$out" "$tls_pw" "... never the password"
check "the same account with ssl-mode=REQUIRED connects" "$ctl" --db "$tls_only?ssl-mode=REQUIRED" list
x509="mysql://tls_x509:$tls_pw@127.0.0.1:$MDB_PORT/oops?ssl-mode=VERIFY_IDENTITY&ssl-ca=$ca"
out=$("$ctl" --db "$x509" list 2>&1)
is "$?" 2 "an account that REQUIREs X509, without a client certificate: refused (exit 2)"
like "$(cipher "$x509&ssl-cert=$MDB_TLS_CERT&ssl-key=$MDB_TLS_KEY")" "^cipher=.+" \
  "... with ssl-cert and ssl-key it connects, encrypted"

# A server without TLS (the run's own MariaDB).
plain_hostport=${plain_db#*@}; plain_hostport=${plain_hostport%%/*}
out=$(OOPS_DB_PASSWORD_FILE=$plain_pw_file "$ctl" --db "$plain_db?ssl-mode=REQUIRED" list 2>&1); rc=$?
is "$rc" 2 "ssl-mode=REQUIRED against a server without TLS exits 2"
is "$out" "oopsctl: cannot connect to database at $plain_hostport: the server offers no TLS, and ssl-mode=REQUIRED requires it" \
  "... saying so (the session it opened in the clear is closed unused)"
out=$(OOPS_DB_PASSWORD_FILE=$plain_pw_file "$ctl" --db "$plain_db?ssl-mode=VERIFY_CA&ssl-ca=$ca" list 2>&1); rc=$?
is "$rc:$out" "2:oopsctl: cannot connect to database at $plain_hostport: the server offers no TLS, and ssl-mode=VERIFY_CA requires it" \
  "... and so does VERIFY_CA"
out=$(OOPS_DB_PASSWORD_FILE=$plain_pw_file "$ctl" --db "$plain_db?ssl-mode=VERIFY_IDENTITY&ssl-ca=$ca" list 2>&1); rc=$?
is "$rc" 2 "VERIFY_IDENTITY against a server without TLS exits 2 (refused before authenticating)"
like "$out" "SSL is required, but the server does not support it" "... saying so"
unlike "$out" "$plain_pw" "... never the password"

# Real servers, both sessions (work and locks) over TLS: the account cannot
# open any other kind. A pipeline goes through; oopsctl talks TLS too.
srv_db="$tls_only?ssl-mode=VERIFY_IDENTITY&ssl-ca=$ca&connect_timeout=5"
OOPS_TEST_DB=$srv_db start_server tls1 "$fixtures/fast" --db "$srv_db" # in argv: masked
OOPS_TEST_DB=$srv_db start_server tls2 "$fixtures/fast"
check "two servers run with an account that requires TLS" kill -0 "${SRV_PID[tls1]}" "${SRV_PID[tls2]}"
is "$(http_code "$(url tls1 /healthz)")" 200 "... their lock sessions are up (/healthz 200)"
unlike "$(tr '\0' ' ' </proc/${SRV_PID[tls1]}/cmdline)" "$tls_pw" "... the password masked in argv (the options are not)"
id=$("$ctl" --db "$srv_db" create --app shop/tls --env prod --artifact registry/shop/tls:1 2>/dev/null)
wait_for 30 "a pipeline created over TLS is driven to SUCCEEDED" \
  bash -c "[[ \$('$ctl' --db '$srv_db' --json show '$id') == *'\"status\":\"SUCCEEDED\"'* ]]"
sessions=$(root -e "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'tls_only'")
like "$sessions" '^([4-9]|[1-9][0-9]+)$' "... each with its work and lock sessions open as that account ($sessions)"
# Host names (issue 22): a name is looked up off the loop and its addresses
# tried in turn, and VERIFY_IDENTITY still checks the certificate against the
# NAME, not the address connected to. A private mount namespace gives the
# clients their own /etc/hosts: db.oops.test (named by the certificate) at
# 127.0.0.3 (nothing listens) then 127.0.0.2 (an address the certificate does
# not name); wrong.oops.test at 127.0.0.1 (an address it names, but not that
# name). Any other name asks a name server where none listens: refused at once.
if unshare -m true 2>/dev/null; then
  printf '%s\n' "127.0.0.1 localhost" "127.0.0.3 db.oops.test" "127.0.0.2 db.oops.test" \
    "127.0.0.1 wrong.oops.test" >"$work/hosts"
  printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >"$work/resolv.conf"
  in_ns() { # CMD... in a mount namespace with this test's /etc/hosts and /etc/resolv.conf
    exec unshare -m bash -c 'mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf &&
      shift 2 && exec "$@"' in_ns "$work/hosts" "$work/resolv.conf" "$@"
  }
  named="mysql://oops:$pw@db.oops.test:$MDB_PORT/oops"
  wrong="mysql://oops:$pw@wrong.oops.test:$MDB_PORT/oops"
  like "$( (in_ns "$oopsd" lua "$work/cipher.lua" "$named?ssl-mode=VERIFY_IDENTITY&ssl-ca=$ca") 2>&1)" \
    "^cipher=.+" "VERIFY_IDENTITY to db.oops.test, at addresses the certificate does not name: the first refuses, the second connects"
  out=$( (in_ns "$ctl" --db "$wrong?ssl-mode=VERIFY_IDENTITY&ssl-ca=$ca" list) 2>&1); rc=$?
  is "$rc" 2 "VERIFY_IDENTITY to wrong.oops.test, at an address the certificate names but not by that name: refused (exit 2)"
  like "$out" "^oopsctl: cannot connect to database at wrong\.oops\.test:$MDB_PORT: .*Validation of SSL server certificate failed .*name the host wrong\.oops\.test\)$" \
    "... the name was checked, and the message says so"
  like "$( (in_ns "$oopsd" lua "$work/cipher.lua" "$wrong?ssl-mode=VERIFY_CA&ssl-ca=$ca") 2>&1)" "^cipher=.+" \
    "... VERIFY_CA to it connects (no name checked)"
  out=$( (in_ns "$ctl" --db "mysql://oops:$pw@nowhere.oops.test:$MDB_PORT/oops" list) 2>&1); rc=$?
  is "$rc" 2 "a name that does not resolve: exit 2"
  like "$out" "^oopsctl: cannot connect to database at nowhere\.oops\.test:$MDB_PORT: Unknown server host 'nowhere\.oops\.test'" \
    "... saying so"
  # The daemon: its sessions open by name in fibers (uv_getaddrinfo), the
  # name checked each time, also when the lock session is reopened.
  SRV_WRAP=in_ns OOPS_TEST_DB="$named?ssl-mode=VERIFY_IDENTITY&ssl-ca=$ca" start_server tlsname "$fixtures/fast"
  is "$(http_code "$(url tlsname /healthz)")" 200 "a server connected by name, VERIFY_IDENTITY: /healthz 200"
  lock_id=$(curl -s "$(url tlsname /status)" | sed -n 's/.*"lock_connection_id":\([0-9]*\).*/\1/p')
  root -e "KILL $lock_id"
  wait_for 60 "... its lock session, killed, is reopened by name (lock_connection_id changes, /healthz 200)" \
    bash -c "[[ \$(curl -s '$(url tlsname /status)') != *'\"lock_connection_id\":$lock_id,'* && \$(curl -s -o /dev/null -w '%{http_code}' '$(url tlsname /healthz)') == 200 ]]"
  like "$(cat "${SRV_LOG[tlsname]}")" "lock session reconnected" "... as its log says"
else
  echo "ok $((TAP_N += 1)) # SKIP host names by a private /etc/hosts: unshare -m is not allowed here"
fi
done_testing
