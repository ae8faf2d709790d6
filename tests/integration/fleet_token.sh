# The fleet page's guard (issue 16): --http-token-file. A bearer token read at
# start (regular file, bounded, never echoed); required when --listen is not
# loopback; with one, every request but /healthz needs
# "Authorization: Bearer TOKEN" (401 otherwise) but the page's own code (its
# sign-in form is in it; no data); a token file is one viewer: nothing but GET.
# And the page's JSON: served from memory, bounded statements per refresh.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
trap stop_servers EXIT
"$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" migrate >/dev/null
pol=$OOPS_TEST_WORK/fleet_token.$$
mkdir -p "$pol"
cp "$OOPS_ROOT/tests/fixtures/policies/fast/oopsd.lua" "$pol/"
umask 077 # a token file others may read is refused (checked below)
token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$token" >"$OOPS_TEST_WORK/token"
chmod 600 "$OOPS_TEST_WORK/token"

# --- refusals at start: exit 1, one line, never the token ----------------------
start_fails() { # DESC WANT-REGEX ARGS...
  local d=$1 want=$2; shift 2
  local out rc
  out=$(timeout 20 "$OOPS_BUILD/oopsd" --db "$OOPS_TEST_DB" --name refused --policies "$pol" "$@" 2>&1)
  rc=$?
  is "$rc" 1 "$d: exit 1"
  like "$out" "$want" "... says why"
  unlike "$out" "$token" "... never shows the token"
}
start_fails "--listen 0.0.0.0 without a token" "not a loopback address.*--http-token-file" --listen 0.0.0.0:0
start_fails "a missing token file" "--http-token-file .*/nope: No such file" \
  --http-token-file "$OOPS_TEST_WORK/nope"
start_fails "a directory" "not a regular file" --http-token-file "$OOPS_TEST_WORK"
cp "$OOPS_TEST_WORK/token" "$OOPS_TEST_WORK/token-open"
chmod 0644 "$OOPS_TEST_WORK/token-open"
start_fails "a token file every user may read" \
  "--http-token-file .*/token-open: refused, it is readable by every user \(mode 0644\); make it readable by its owner alone \(chmod 600\)" \
  --http-token-file "$OOPS_TEST_WORK/token-open"
head -c 5000 /dev/zero | tr '\0' a >"$OOPS_TEST_WORK/big"
start_fails "a token file over 4096 bytes" "longer than 4096 bytes" --http-token-file "$OOPS_TEST_WORK/big"
echo short >"$OOPS_TEST_WORK/short"
start_fails "a short token" "shorter than 16 characters" --http-token-file "$OOPS_TEST_WORK/short"
printf '%s two\n' "$token" >"$OOPS_TEST_WORK/spaced"
start_fails "a token with a space" "one line of printable ASCII" --http-token-file "$OOPS_TEST_WORK/spaced"

# --- a server with a token -----------------------------------------------------
start_server t1 "$pol" --http-token-file "$OOPS_TEST_WORK/token"
code() { curl -s -o /dev/null -w '%{http_code}' -m 5 "$@"; }
is "$(code "$(url t1 /)")" 200 "the page's code without a token: 200 (it holds no data; its sign-in asks for the token)"
is "$(code -H "Authorization: Bearer wrong-$token" "$(url t1 /api/fleet)")" 401 "a wrong token: 401"
is "$(code -H "Authorization: Bearer ${token%?}" "$(url t1 /api/fleet)")" 401 "the token less its last character: 401"
is "$(code -H "Authorization: Basic $token" "$(url t1 /api/fleet)")" 401 "another scheme: 401"
is "$(code "$(url t1 /api/fleet)")" 401 "the JSON without a token: 401"
like "$(curl -s -D - -o /dev/null -m 5 "$(url t1 /api/fleet)")" "WWW-Authenticate: Bearer" "... with WWW-Authenticate: Bearer"
is "$(code "$(url t1 /api/me)")" 401 "/api/me without a token: 401"
is "$(code "$(url t1 /metrics)")" 401 "/metrics needs the token too"
is "$(code "$(url t1 /status)")" 401 "/status needs the token too"
is "$(code "$(url t1 /healthz)")" 200 "/healthz stays open (probes)"
auth=(-H "Authorization: Bearer $token")
is "$(code "${auth[@]}" "$(url t1 /)")" 200 "the page with the token: 200"
is "$(code -H "Authorization: bearer $token" "$(url t1 /api/me)")" 200 "the scheme in any case"
is "$(curl -s -m 5 "${auth[@]}" "$(url t1 /api/me)")" '{"name":"token","role":"viewer","actions":false,"users":false}' \
  "a token file's token is one viewer, who may not act"
is "$(code "${auth[@]}" -X POST -H 'Content-Type: application/json' -d '{}' "$(url t1 /api/rollback)")" 403 \
  "an action with it: 403 (actions need --http-users)"
is "$(code "${auth[@]}" "$(url t1 /metrics)")" 200 "/metrics with the token: 200"
is "$(code "${auth[@]}" -X POST "$(url t1 /)")" 405 "POST: 405 (read-only)"
is "$(code "${auth[@]}" "$(url t1 /nothing)")" 404 "an unknown path: 404"
headers=$(curl -s -D - -o /dev/null -m 5 "${auth[@]}" "$(url t1 /)")
like "$headers" "Content-Security-Policy: default-src 'none'" "the page forbids any other origin (CSP)"
like "$headers" "Cache-Control: no-store" "... and is never cached"
wait_for 20 "the fleet JSON is served once read" \
  bash -c "curl -s -m 5 -H 'Authorization: Bearer $token' '$(url t1 /api/fleet)' | grep -q '\"servers\"'"
fleet=$(curl -s -m 5 "${auth[@]}" "$(url t1 /api/fleet)")
is "$(jq -r '.servers[0].name + " " + .servers[0].health' <<<"$fleet")" "t1 ok" "it shows the server, healthy"
n=$(jq -r '.statements' <<<"$fleet")
check "a refresh costs at most 7 statements (here $n)" test "$n" -le 7
for a in / /fleet.js /fleet.css; do
  check "the asset $a is served" test "$(code "${auth[@]}" "$(url t1 "$a")")" = 200
done
bytes=0
for a in / /fleet.js /fleet.css; do
  bytes=$((bytes + $(curl -s -m 5 "${auth[@]}" "$(url t1 "$a")" | wc -c)))
done
echo "# the page weighs $bytes bytes (html + js + css, uncompressed)"
check "the page weighs under 64 KiB ($bytes bytes)" test "$bytes" -lt 65536
unlike "$(cat "${SRV_LOG[t1]}")" "$token" "the log never shows the token"
like "$("$OOPS_BUILD/oopsd" --help)" "--http-token-file FILE" "oopsd --help lists --http-token-file"

# --- a loopback server without a token: open, as before ------------------------
start_server t2 "$pol"
is "$(code "$(url t2 /)")" 200 "loopback without a token: the page is served"
is "$(code "$(url t2 /metrics)")" 200 "... and /metrics"
done_testing
