# The fleet page (issue 16) in a real browser: Debian's chromium, headless,
# driven by puppeteer-core (tests/browser/, installed with npm on first use;
# no browser is downloaded). Three real servers, pipelines sitting in every
# status a pipeline can sit in (INITIALIZED is left within a scan tick), a
# firing alert and a restart schedule. The page shows the servers and the
# pipelines, a status changes without a reload, an event history opens with
# the server of each transition, no console error, nothing fetched from
# elsewhere, a server killed with SIGKILL shows as gone, and when the database
# freezes (SIGSTOP: a MariaDB of its own) the page says its data is stale, how
# old, and why (issue 22). Screenshots (laptop, history, phone, stale) go to
# the work directory, or to doc/images/ with OOPS_UPDATE_SCREENSHOTS=1 (what
# README.md and doc/guide/page.md show).
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
not_under_sanitizers "a browser against the same C paths fleet_token.sh and fleet_stale.sh cover under the sanitizers"
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

# A MariaDB of its own: the page's last check freezes it.
source "$OOPS_ROOT/tests/lib/mariadb.sh" # replaces MDB_* in this process only
mdb_work=$(mktemp -d "$OOPS_TEST_WORK/fleet_page_db.XXXXXX")
cleanup() {
  [[ -n ${MDB_PID:-} ]] && kill -CONT "$MDB_PID" 2>/dev/null
  stop_servers
  mariadb_stop
}
trap cleanup EXIT
mariadb_start "$mdb_work/mariadb" || { echo "not ok 1 - a MariaDB of its own starts"; exit 1; }
export OOPS_TEST_DB="$(mariadb_new_db fleet_page)?read_timeout=3&connect_timeout=2"
"$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" migrate >/dev/null
pol=$OOPS_TEST_WORK/fleet_page.$$
mkdir -p "$pol"
cat >"$pol/oopsd.lua" <<'P'
scan    { interval = "300ms" }
locks   { validate_every = "1s" }
gateway "simulated" { build = "1s", deploy = "0s", rollout = "1s" }
application "shop/web" { environments = { "prod" }, restart = { prod = "*/30 * * * * *" } }
application "shop/cart" { environments = { "prod" } }
application "shop/search" { environments = { "prod" } }
application "shop/auth" { environments = { "prod" } }
application "shop/pay" { environments = { "prod" } }
application "shop/mail" { environments = { "prod" } }
application "shop/media" { environments = { "prod" } }
P
# Gateway faults keep pipelines where they are (lua/oops/gateways/simulated.lua):
# a build whose status cannot be read stays RUNNING, a deploy that fails stays
# a rollout whose health cannot be read stays ROLLING_OUT. A deploy sits in
# DEPLOYING after a reload makes the simulated deploys take a minute.
sql "INSERT INTO sim_job (pipeline_id, kind, outcome) VALUES
  ('shop/cart/prod', 'fail_build_status', 'simulated: the CI is unreachable'),
  ('shop/search/prod', 'fail_build_status', 'simulated: the CI is unreachable'),
  ('shop/auth/prod', 'fail_build_status', 'simulated: the CI is unreachable'),
  ('shop/media/prod', 'fail_rollout_health', 'simulated: metrics-server unavailable')"
sql "INSERT INTO alert_state (namespace, application, environment, metric, firing, firing_since, pods)
     VALUES ('shop', 'search', 'prod', 'memory', 1, NOW(6) - INTERVAL 7 MINUTE, '[\"search-0\"]')"

for s in s1 s2 s3; do start_server "$s" "$pol" || exit 1; done
create() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" create --policies "$pol" --app "shop/$1" --env prod "${@:2}" | grep -oE '[a-z0-9]{12}' | head -1; }
status_of() { sql "SELECT status FROM pipeline WHERE id = '$1'"; }
declare -A want
done_id=$(create web); want[$done_id]=SUCCEEDED
hold=$(create cart); want[$hold]=RUNNING
stopped=$(create search)
broken=$(create auth)
manual=$(create pay --manual); want[$manual]=BUILD_SUCCEEDED
rolling=$(create media); want[$rolling]=ROLLING_OUT
wait_for 30 "shop/web goes through to SUCCEEDED" bash -c "[[ \$(sql \"SELECT status FROM pipeline WHERE id = '$done_id'\") == SUCCEEDED ]]"
wait_for 30 "two builds sit RUNNING (their status unreadable)" \
  bash -c "[[ \$(sql \"SELECT COUNT(*) FROM pipeline WHERE id IN ('$stopped', '$broken') AND status = 'RUNNING'\") == 2 ]]"
"$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" stop "$stopped" >/dev/null; want[$stopped]=STOPPED
sql "UPDATE sim_job SET outcome = 'failed' WHERE pipeline_id = '$broken' AND kind = 'build'"
sql "DELETE FROM sim_job WHERE pipeline_id = 'shop/auth/prod'"; want[$broken]=ERROR
# Deploys now take a minute (every server reloads the policy): one sits in DEPLOYING.
sed -i 's/deploy = "0s"/deploy = "60s"/' "$pol/oopsd.lua"
for s in s1 s2 s3; do kill -HUP "${SRV_PID[$s]}"; done
for s in s1 s2 s3; do
  wait_for 20 "$s reloaded the policy" bash -c "curl -s -m 5 '$(url "$s" /healthz)' | grep -q '\"policy_version\":2'"
done
deploying=$(create mail); want[$deploying]=DEPLOYING
for id in "${!want[@]}"; do
  wait_for 30 "pipeline $id sits in ${want[$id]}" bash -c "[[ \$(sql \"SELECT status FROM pipeline WHERE id = '$id'\") == ${want[$id]} ]]"
done

expect=$(for id in "${!want[@]}"; do printf '"%s":"%s",' "$id" "${want[$id]}"; done)
shots=$OOPS_TEST_WORK/shots
[[ ${OOPS_UPDATE_SCREENSHOTS:-} == 1 ]] && shots=$OOPS_ROOT/doc/images
mkdir -p "$shots"
out=$(FLEET_URL=$(url s1 /) FLEET_EXPECT="{${expect%,}}" FLEET_HOLD=$hold FLEET_DETAIL=$done_id \
  FLEET_WATCH=$rolling FLEET_RELEASE_CMD="sql \"DELETE FROM sim_job WHERE pipeline_id = 'shop/media/prod'\"" \
  FLEET_KILL_PID=${SRV_PID[s3]} FLEET_KILL_NAME=s3 FLEET_SERVERS=s1,s2,s3 FLEET_SHOTS=$shots \
  FLEET_DB_PID=$MDB_PID \
  CHROMIUM=$chromium timeout 240 node "$browser_dir/fleet_page.js" 2>&1)
rc=$?
while IFS= read -r line; do
  case $line in
    "PASS "*) _tap 0 "${line#PASS }" ;;
    "FAIL "*) l=${line#FAIL }; _tap 1 "${l%%$'\t'*}" "${l#*$'\t'}" ;;
    "#"*) echo "$line" ;;
    *) echo "# node: $line" ;;
  esac
done <<<"$out"
is "$rc" 0 "the browser run ended cleanly"
for f in fleet-laptop fleet-history fleet-phone fleet-stale; do check "screenshot $f.png saved" test -s "$shots/$f.png"; done
done_testing
