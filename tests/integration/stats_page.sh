# The fleet page's Delivery panel (issue 39) in a real browser (Debian's
# chromium, headless, puppeteer-core: tests/browser/stats_panel.js), against
# the history of tests/integration/stats.sh (the same rows, the same times,
# the same known figures) and one oopsd with --http-users: the page signs in
# with a viewer's token, so /api/stats goes through the page's own requests
# (the bearer, the 202 while the first computation runs). The panel shows the
# 30-day window first:
#   30d  6 live (0.20 / day), lead median 3h 30m p90 6h, 3 of 8 = 37.5 %,
#        restore median 1h 15m, 1 open
# and the 7-day one when its button is pressed:
#   7d   5 live (0.71 / day), lead median 3h p90 5h, 3 of 7 = 42.9 %,
#        restore median 1h 15m, 1 open; its frequency chart: 7 days, 5 of
#        them with one release
# Then at a phone's width: the four cards visible, the section not wider than
# itself (a screenshot in the work directory).
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
not_under_sanitizers "a browser against the same C paths integration/stats.sh covers under the sanitizers"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
trap stop_servers EXIT

chromium=$(command -v chromium || true)
if [[ -z $chromium ]] || ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "ok 1 # SKIP chromium, node or npm is not installed (apt-get install chromium nodejs npm; scripts/setup.sh does)"
  echo "1..1"; exit 0
fi
browser_dir=$OOPS_ROOT/tests/browser
if [[ ! -d $browser_dir/node_modules/puppeteer-core ]]; then
  if ! (cd "$browser_dir" && npm ci --no-audit --no-fund --loglevel=error) >"$OOPS_TEST_WORK/npm-stats.log" 2>&1; then
    echo "ok 1 # SKIP puppeteer-core could not be installed with npm: $(tail -1 "$OOPS_TEST_WORK/npm-stats.log")"
    echo "1..1"; exit 0
  fi
fi

ctl() { "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" "$@"; }
ctl migrate >/dev/null || { echo "not ok 1 - migrate"; exit 1; }

source "$OOPS_ROOT/tests/lib/stats_history.sh"
is "$(sql "SELECT COUNT(*) FROM pipeline")" 10 "the history of stats.sh is written (10 pipelines)"

policies=$OOPS_TEST_WORK/stats_page.$$
mkdir -p "$policies"
cp "$OOPS_ROOT/tests/fixtures/policies/fast/oopsd.lua" "$policies/"
umask 077
bob=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
users=$OOPS_TEST_WORK/stats_page.users
printf 'bob viewer %s\n' "$bob" >"$users"
if ! start_server sp1 "$policies" --http-users "$users"; then
  _tap 1 "oopsd starts with --http-users" "$(tail -5 "${SRV_LOG[sp1]}")"
  done_testing; exit 1
fi
is "$(http_code "$(url sp1 /api/stats)")" 401 "GET /api/stats without a token: 401 (the page must send its bearer)"

shots=$OOPS_TEST_WORK/stats_page_shots
mkdir -p "$shots"
out=$(SP_URL=$(url sp1 /) SP_TOKEN=$bob SP_SHOTS=$shots CHROMIUM=$chromium timeout 240 \
  node "$browser_dir/stats_panel.js" 2>&1)
rc=$?
while IFS= read -r line; do # the driver's TAP, renumbered into this script's
  case $line in
    "ok "*) d=${line#ok }; _tap 0 "${d#* - }" ;;
    "not ok "*) d=${line#not ok }; _tap 1 "${d#* - }" ;;
    "#"*) echo "$line" ;;
    1..*) ;;
    *) echo "# node: $line" ;;
  esac
done <<<"$out"
is "$rc" 0 "the browser run ended cleanly"
for f in stats-laptop stats-phone; do
  check "screenshot $f.png saved ($(stat -c %s "$shots/$f.png" 2>/dev/null || echo 0) bytes)" test -s "$shots/$f.png"
done
unlike "$(cat "${SRV_LOG[sp1]}")" "delivery figures: reading the history failed" "the server never failed a computation"
done_testing
