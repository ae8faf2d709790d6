# A canary on the fleet page (issue 38) in a real browser (Debian's chromium,
# headless, puppeteer-core: tests/browser/canary_page.js). One oopsd with
# --http-users (alice: operator, bob: viewer) and shop/web a canary of
# { weight 10, pause until an operator, weight 100 }. alice opens a paused
# canary: the section shows its steps with step 2 current, weight 10,
# "paused", and measurements (rows written here with SQL: the page only reads
# them) with their verdicts; she promotes it from the page with a reason and
# it finishes (weights 10 then 100, once each; the CANARY_PROMOTE event by
# alice@page with the reason); she aborts the next one: its traffic goes back
# to 0, then it fails. bob sees the section without any button, and a POST
# forged with his token is 403.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
not_under_sanitizers "a browser against the same C paths integration/oopsctl covers under the sanitizers"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
trap stop_servers EXIT

chromium=$(command -v chromium || true)
if [[ -z $chromium ]] || ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "ok 1 # SKIP chromium, node or npm is not installed (apt-get install chromium nodejs npm; scripts/setup.sh does)"
  echo "1..1"; exit 0
fi
browser_dir=$OOPS_ROOT/tests/browser
if [[ ! -d $browser_dir/node_modules/puppeteer-core ]]; then
  if ! (cd "$browser_dir" && npm ci --no-audit --no-fund --loglevel=error) >"$OOPS_TEST_WORK/npm-canary.log" 2>&1; then
    echo "ok 1 # SKIP puppeteer-core could not be installed with npm: $(tail -1 "$OOPS_TEST_WORK/npm-canary.log")"
    echo "1..1"; exit 0
  fi
fi

ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }
ctl migrate >/dev/null
pol=$OOPS_TEST_WORK/canary_page.$$
mkdir -p "$pol"
cat >"$pol/oopsd.lua" <<'P'
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "300ms", deploy = "0s", rollout = "300ms" }
application "shop/web" { environments = { "prod" }, rollout = { strategy = "canary", steps = {
  { weight = 10 }, { pause = true }, { weight = 100 } } } }
application "shop/pay" { environments = { "prod" }, approvals = { prod = 1 } }
application "shop/rel" { environments = { "staging", "prod", "qa" }, promote = { staging = { to = "prod", after = "1h" } } }
P
umask 077
alice=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
bob=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
users=$OOPS_TEST_WORK/canary_page.users
printf 'alice operator %s\nbob viewer %s\n' "$alice" "$bob" >"$users"
if ! start_server cp1 "$pol" --http-users "$users"; then
  _tap 1 "oopsd starts with --http-users" "$(tail -5 "${SRV_LOG[cp1]}")"
  done_testing; exit 1
fi

paused() { [[ $(sql "SELECT CONCAT(status, ' ', IFNULL(paused, '-')) FROM pipeline WHERE id = '$1'") == "ROLLING_OUT operator" ]]; }
status_is() { [[ $(sql "SELECT status FROM pipeline WHERE id = '$1'") == "$2" ]]; }
weights() { sql "SELECT IFNULL(GROUP_CONCAT(SUBSTRING(action, 8) ORDER BY id), '') FROM sim_call WHERE pipeline_id = '$1' AND action LIKE 'weight:%'"; }

p1=$(ctl create --app shop/web --env prod --artifact web:1)
wait_for 40 "a canary waits for an operator" paused "$p1"
# Measurements as the driver writes them (this canary has no analysis: the page only reads them).
sql "INSERT INTO canary_measurement (pipeline_id, step, n, analysis, value, verdict, detail) VALUES
  ('$p1', 2, 1, 'errors', 0.001, 'pass', '0.001'), ('$p1', 2, 2, 'errors', NULL, 'inconclusive', 'no data')"
r_promote='page test: the canary looks healthy <b>ship it</b>'
r_abort='page test: wrong config in web:2'
r_approve='page test: reviewed pay:1 <i>with care</i>'
r_promote_now='page test: staging looks good, ship rel:1 now'
shots=$OOPS_TEST_WORK/shots
mkdir -p "$shots"
run_browser() { # phase, pipeline
  CP_URL=$(url cp1 /) CP_ALICE=$alice CP_BOB=$bob CP_PHASE=$1 CP_ID=$2 CP_PROMOTE=$r_promote CP_ABORT=$r_abort CP_APPROVE=$r_approve \
    CP_PROMOTE_NOW=$r_promote_now \
    CP_SHOTS=$shots CHROMIUM=$chromium timeout 180 node "$browser_dir/canary_page.js" 2>&1
}
relay() { # the driver's TAP, renumbered into this script's
  while IFS= read -r line; do
    case $line in
      "ok "*) d=${line#ok }; _tap 0 "${d#* - }" ;;
      "not ok "*) d=${line#not ok }; _tap 1 "${d#* - }" ;;
      "#"*) echo "$line" ;;
      1..*) ;;
      *) echo "# node: $line" ;;
    esac
  done <<<"$1"
}
out=$(run_browser promote "$p1"); rc=$?
relay "$out"
is "$rc" 0 "the browser run (promote) ended cleanly"
wait_for 40 "the promoted canary finishes" status_is "$p1" SUCCEEDED
is "$(weights "$p1")" "10,100" "its weights: 10, then 100, once each"
is "$(sql "SELECT CONCAT(actor, ' | ', reason) FROM pipeline_event WHERE pipeline_id = '$p1' AND event_type = 'CANARY_PROMOTE'")" \
  "alice@page | $r_promote" "the promotion is an event by alice@page with her reason"
is "$(sql "SELECT CONCAT(action, ' ', outcome, ' ', actor) FROM operator_action WHERE pipeline_id = '$p1' AND action = 'promote'")" \
  "promote done alice@page" "... and in the audit log"

p2=$(ctl create --app shop/web --env prod --artifact web:2)
wait_for 40 "the next canary waits" paused "$p2"
out=$(run_browser abort "$p2"); rc=$?
relay "$out"
is "$rc" 0 "the browser run (abort) ended cleanly"
wait_for 40 "the aborted canary fails" status_is "$p2" ERROR
is "$(weights "$p2")" "10,0" "its traffic went back to stable once"
is "$(sql "SELECT CONCAT(actor, ' | ', reason) FROM pipeline_event WHERE pipeline_id = '$p2' AND event_type = 'CANARY_ABORT'")" \
  "alice@page | $r_abort" "the abort is an event by alice@page with her reason"

# Approvals (issue 39): carol's release of shop/pay waits for one approval;
# bob (a viewer) sees it, alice approves it on the page.
p3=$(SUDO_USER=carol ctl create --app shop/pay --env prod --artifact pay:1)
held() { [[ $(sql "SELECT CONCAT(status, ' ', IFNULL(hold, '-')) FROM pipeline WHERE id = '$1'") == "BUILD_SUCCEEDED approval" ]]; }
wait_for 40 "a release waits for its approval" held "$p3"
out=$(run_browser approve "$p3"); rc=$?
relay "$out"
is "$rc" 0 "the browser run (approve) ended cleanly"
is "$(sql "SELECT CONCAT(approvals, ' ', approved_by) FROM pipeline WHERE id = '$p3'")" "1 alice" \
  "the approval is counted once, for alice"
is "$(sql "SELECT CONCAT(action, ' ', outcome, ' ', actor) FROM operator_action WHERE pipeline_id = '$p3' AND action = 'approve'")" \
  "approve done alice@page" "... and in the audit log"

# Promotion (issue 39): a live staging release its policy promotes to prod in
# an hour; alice promotes it now from the page.
p4=$(ctl create --app shop/rel --env staging --artifact rel:1)
wait_for 40 "a staging release goes live" status_is "$p4" SUCCEEDED
out=$(run_browser promote_now "$p4"); rc=$?
relay "$out"
is "$rc" 0 "the browser run (promote_now) ended cleanly"
p5=$(sql "SELECT id FROM pipeline WHERE promoted_from = '$p4'")
is "$(sql "SELECT CONCAT(environment, ' ', trigger_type, ' ', artifact) FROM pipeline WHERE promoted_from = '$p4'")" \
  "prod promotion rel:1" "one pipeline releases its artifact to prod as a promotion"
is "$(sql "SELECT CONCAT(actor, ' | ', reason) FROM pipeline_event WHERE pipeline_id = '$p5' AND event_type = 'CREATED'")" \
  "alice@page | $r_promote_now" "its creation is by alice@page with her reason"
is "$(sql "SELECT CONCAT(action, ' ', outcome, ' ', actor) FROM operator_action WHERE pipeline_id = '$p5'")" \
  "promote-now done alice@page" "... and in the audit log"
wait_for 40 "the promotion goes live in prod" status_is "$p5" SUCCEEDED
done_testing
