# The fleet page's sign-in and actions in a real browser: Debian's chromium,
# headless, driven by puppeteer-core (tests/browser/fleet_actions.js,
# installed with npm on first use; no browser is downloaded). One oopsd with
# --http-users (alice: operator, bob: viewer). alice signs in through the
# page's form, stops a RUNNING pipeline, releases a manual one, overrides a
# freeze (a reason required) and rolls an application back from its release
# history, each with a reason; each shows in the pipeline's history with
# "alice@page" and the reason without a reload, and `oopsctl show --json`
# confirms the events. A stop the server refuses (the pipeline was stopped
# elsewhere while alice confirmed) shows the server's error. bob's page shows
# no action button, a POST forged from it gets 403, and so does one with
# alice's token from another origin. No console error (but the 401s of
# signing in, bob's 403 and the refused stop), nothing fetched from
# elsewhere. Screenshots go to the work directory.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
not_under_sanitizers "a browser against the same C paths the HTTP tests cover under the sanitizers"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
trap stop_servers EXIT

chromium=$(command -v chromium || true)
if [[ -z $chromium ]] || ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "ok 1 # SKIP chromium, node or npm is not installed (apt-get install chromium nodejs npm; scripts/setup.sh does)"
  echo "1..1"; exit 0
fi
browser_dir=$OOPS_ROOT/tests/browser
if [[ ! -d $browser_dir/node_modules/puppeteer-core ]]; then
  # puppeteer-core never downloads a browser; the lock file pins every package.
  if ! (cd "$browser_dir" && npm ci --no-audit --no-fund --loglevel=error) >"$OOPS_TEST_WORK/npm.log" 2>&1; then
    echo "ok 1 # SKIP puppeteer-core could not be installed with npm: $(tail -1 "$OOPS_TEST_WORK/npm.log")"
    echo "1..1"; exit 0
  fi
fi

ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }
ctl migrate >/dev/null
pol=$OOPS_TEST_WORK/fleet_actions.$$
mkdir -p "$pol"
# shop/search staging sits in a freeze (yesterday to tomorrow, UTC): held.
from=$(date -u -d '-1 day' '+%Y-%m-%d %H:%M')
to=$(date -u -d '+1 day' '+%Y-%m-%d %H:%M')
cat >"$pol/oopsd.lua" <<P
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "1s", deploy = "0s", rollout = "1s" }
application "shop/web" { environments = { "prod" } }
application "shop/cart" { environments = { "prod" } }
application "shop/mail" { environments = { "prod" } }
application "shop/pay" { environments = { "prod" } }
application "shop/search" { environments = { "staging" } }
freeze "page-test" { from = "$from", to = "$to", environments = { "staging" } }
P
# A build whose status cannot be read stays RUNNING (lua/oops/gateways/simulated.lua).
sql "INSERT INTO sim_job (pipeline_id, kind, outcome) VALUES
  ('shop/cart/prod', 'fail_build_status', 'simulated: the CI is unreachable'),
  ('shop/mail/prod', 'fail_build_status', 'simulated: the CI is unreachable')"

umask 077 # a users file others may read is refused
alice=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
bob=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
users=$OOPS_TEST_WORK/fleet_actions.users
printf 'alice operator %s\nbob viewer %s\n' "$alice" "$bob" >"$users"
chmod 600 "$users"
if ! start_server s1 "$pol" --http-users "$users"; then
  _tap 1 "oopsd starts with --http-users" "$(tail -5 "${SRV_LOG[s1]}")"
  done_testing; exit 1
fi

# --- what the page relies on, seen from curl -----------------------------------
code() { curl -s -o /dev/null -w '%{http_code}' -m 5 "$@"; }
is "$(code "$(url s1 /)")" 200 "the page is served without a token (it holds no data)"
is "$(code "$(url s1 /fleet.js)")" 200 "... its script too"
is "$(code "$(url s1 /api/fleet)")" 401 "/api/fleet without a token: 401"
like "$(curl -s -D - -o /dev/null -m 5 "$(url s1 /api/me)")" "WWW-Authenticate: Bearer realm=\"oopsd\"" \
  "... /api/me too, with WWW-Authenticate: Bearer"
like "$(curl -s -m 5 -H "Authorization: Bearer $alice" "$(url s1 /api/me)")" \
  '"name":"alice".*"role":"operator".*"actions":true' "/api/me with alice's token: operator, actions"
like "$(curl -s -m 5 -H "Authorization: Bearer $bob" "$(url s1 /api/me)")" \
  '"name":"bob".*"role":"viewer".*"actions":false' "/api/me with bob's token: viewer, no actions"

# --- the pipelines ---------------------------------------------------------------
create() { ctl create --policies "$pol" --app "shop/$1" --env "$2" "${@:3}" | grep -oE '[a-z0-9]{12}' | head -1; }
status_is() { [[ $(sql "SELECT status FROM pipeline WHERE id = '$1'") == "$2" ]]; }
r1=$(create web prod --artifact reg/web:1)
wait_for 40 "release 1 of shop/web goes live" status_is "$r1" SUCCEEDED
r2=$(create web prod --artifact reg/web:2)
wait_for 40 "release 2 of shop/web goes live" status_is "$r2" SUCCEEDED
running=$(create cart prod)
stale=$(create mail prod)
manual=$(create pay prod --manual)
held=$(create search staging)
wait_for 30 "a build sits RUNNING (its status unreadable)" status_is "$running" RUNNING
wait_for 30 "... and another" status_is "$stale" RUNNING
wait_for 30 "a manual pipeline sits in BUILD_SUCCEEDED" status_is "$manual" BUILD_SUCCEEDED
wait_for 30 "an automatic one is held by the freeze" \
  bash -c "[[ \$(sql \"SELECT CONCAT(status, ' ', IFNULL(hold, '-')) FROM pipeline WHERE id = '$held'\") == 'BUILD_SUCCEEDED freeze' ]]"

# Reasons as an operator would type them; < and > must stay text on the page.
r_stop='page test: stop the broken build — <b>not html</b>'
r_release='page test: release approved by the change board (CAB-42)'
r_override='page test: hotfix inside the freeze, ticket INC-7 «urgent»'
r_rollback='page test: back to web:1 after the checkout errors'
# A refused action on shop/web prod (an automatic release cannot be released
# by hand): the history dialog lists it with what oopsctl said (issue 34).
r_refused='page test: release r1 again'
out=$(ctl deploy "$r1" --reason "$r_refused" 2>&1); is "$?" 1 "oopsctl refuses to release an automatic pipeline"
shots=$OOPS_TEST_WORK/shots
mkdir -p "$shots"
out=$(FA_URL=$(url s1 /) FA_ALICE=$alice FA_BOB=$bob FA_RUNNING=$running FA_MANUAL=$manual FA_HELD=$held \
  FA_APP=shop/web/prod FA_R1=$r1 FA_R2=$r2 FA_REASON_STOP=$r_stop FA_REASON_RELEASE=$r_release \
  FA_REASON_OVERRIDE=$r_override FA_REASON_ROLLBACK=$r_rollback FA_REFUSED=$r_refused FA_SHOTS=$shots \
  FA_STALE=$stale FA_STALE_CMD="'$OOPS_BUILD/oopsctl' --db '$OOPS_TEST_DB' stop $stale >/dev/null" \
  CHROMIUM=$chromium timeout 300 node "$browser_dir/fleet_actions.js" 2>&1)
rc=$?
rollback=""
# The driver's TAP, renumbered into this script's.
while IFS= read -r line; do
  case $line in
    "ok "*) d=${line#ok }; _tap 0 "${d#* - }" ;;
    "not ok "*) d=${line#not ok }; _tap 1 "${d#* - }" ;;
    "# rollback-id "*) rollback=${line#\# rollback-id }; echo "$line" ;;
    "#"*) echo "$line" ;;
    1..*) ;;
    *) echo "# node: $line" ;;
  esac
done <<<"$out"
is "$rc" 0 "the browser run ended cleanly"

# --- the database says the same ------------------------------------------------
# events ID TYPE-REGEX ACTOR REASON: how many events of `oopsctl show --json`
# match the type, were made by ACTOR and carry REASON (its reason field, or in
# its message).
events() {
  ctl --json show "$1" | node -e '
    const [type, actor, reason] = process.argv.slice(1);
    let s = "";
    process.stdin.on("data", (d) => { s += d; }).on("end", () => {
      const ev = JSON.parse(s).events || [];
      console.log(ev.filter((e) => new RegExp(type).test(e.type) && e.actor === actor &&
        (e.reason === reason || String(e.message || "").includes(reason))).length);
    });' "$2" "$3" "$4" 2>&1
}
show_events() { ctl --json show "$1" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>
  console.log(JSON.stringify(JSON.parse(s).events)))' 2>&1; }
is "$(sql "SELECT status FROM pipeline WHERE id = '$running'")" STOPPED "oopsctl: the running pipeline is STOPPED"
n=$(events "$running" '^STOPPED$' alice@page "$r_stop")
is "$n" 1 "... its STOPPED event by alice@page with the reason"
((n == 1)) || show_events "$running" | sed 's/^/#   /'
is "$(ctl --json show "$running" | grep -o '"type":"STOPPED"' | wc -l)" 1 \
  "... the only STOPPED event (the forged and foreign POSTs changed nothing)"
n=$(events "$manual" . alice@page "$r_release")
is "$n" 1 "oopsctl: the manual pipeline's release by alice@page with the reason"
((n == 1)) || show_events "$manual" | sed 's/^/#   /'
wait_for 40 "... it deploys" status_is "$manual" SUCCEEDED
n=$(events "$held" '^OVERRIDE$' alice@page "$r_override")
is "$n" 1 "oopsctl: the held pipeline's OVERRIDE event by alice@page with the reason"
((n == 1)) || show_events "$held" | sed 's/^/#   /'
wait_for 40 "... it deploys inside the freeze" status_is "$held" SUCCEEDED
if [[ -n $rollback ]]; then
  like "$(ctl --json show "$rollback")" '"artifact":"reg/web:1".*"trigger":"rollback"' \
    "oopsctl: the page's rollback $rollback redeploys reg/web:1 (trigger rollback)"
  is "$(events "$rollback" . alice@page "$r_rollback")" 1 "... its history names alice@page and the reason"
  wait_for 40 "... and it goes live" \
    bash -c "'$OOPS_BUILD/oopsctl' --db '$OOPS_TEST_DB' --json history --app shop/web --env prod | grep -q '\"live\":\"$rollback\"'"
else
  _tap 1 "the page's rollback created a pipeline" "no rollback-id from the browser run"
fi
for f in actions-operator actions-viewer actions-stopped actions-history actions-phone actions-phone-confirm; do
  check "screenshot $f.png saved" test -s "$shots/$f.png"
done
done_testing
