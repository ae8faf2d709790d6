# SIGTERM while the fleet page's JSON is asked for in a tight loop (issue 22):
# /api/pipeline/ID starts a task whose database read runs in a fiber, and
# /api/fleet wakes the refresher. Once the shutdown tears down (finish), no
# HTTP request, timer, signal, child exit or curl callback may start Lua or a
# fiber any more, and none started before may be resumed after the Lua state
# is freed. Under build-asan every sanitizer report fails the run (tests/run.sh);
# this test also names the round whose server left one.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
hammer_pid=""
trap '[[ -n $hammer_pid ]] && kill "$hammer_pid" 2>/dev/null; stop_servers' EXIT
"$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" migrate >/dev/null
pol=$OOPS_TEST_WORK/stop_under_requests.$$
mkdir -p "$pol"
cp "$OOPS_ROOT/tests/fixtures/policies/fast/oopsd.lua" "$pol/"
rounds=${OOPS_STOP_ROUNDS:-50}

# What a process's sanitizer log says beyond ASan's note on swapcontext.
sanitizer_report() { # PID
  local f
  for f in "$OOPS_TEST_WORK"/sanitizer."$1"*; do
    [[ -e $f ]] && grep -v "ASan doesn't fully support makecontext/swapcontext" "$f" | grep -v '^$'
  done
  return 0
}

# Requests as fast as one curl can send them on a kept-alive connection: a
# pipeline id new each time (so each starts a read), the fleet, again.
hammer() { # BASE-URL ROUND
  local i=0 args
  while :; do
    args=()
    for ((k = 0; k < 20; k++, i++)); do
      args+=(-o /dev/null "$1/api/pipeline/r${2}x$i" -o /dev/null "$1/api/fleet")
    done
    curl -s --max-time 5 "${args[@]}" 2>/dev/null
  done
}

bad=0
for ((r = 1; r <= rounds; r++)); do
  # Odd rounds stop at once (--drain 1: the deadline passes with fibers in
  # flight, which are abandoned); even ones let the steps finish.
  drain=()
  ((r % 2)) && drain=(--drain 1)
  start_server stop "$pol" "${drain[@]}" || { bad=$((bad + 1)); break; }
  pid=${SRV_PID[stop]}
  hammer "$(url stop "")" "$r" &
  hammer_pid=$!
  # Let the requests run a little (0.1 to 0.5 s), then stop the server under them.
  sleep "0.$((RANDOM % 5 + 1))"
  kill -TERM "$pid"
  for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "# round $r: the server did not exit within 60 s of SIGTERM"
    kill -KILL "$pid"
    bad=$((bad + 1))
  fi
  wait "$pid"
  rc=$?
  unset "SRV_PID[stop]"
  kill "$hammer_pid" 2>/dev/null
  wait "$hammer_pid" 2>/dev/null
  hammer_pid=""
  report=$(sanitizer_report "$pid")
  if ((rc != 0)) || [[ -n $report ]]; then
    bad=$((bad + 1))
    echo "# round $r (drain ${drain[*]:-default}): exit $rc"
    printf '%s\n' "$report" | head -30 | sed 's/^/#   /'
    tail -5 "${SRV_LOG[stop]}" | sed 's/^/#   log: /'
  fi
done
is "$bad" 0 "$rounds SIGTERMs under a loop of /api/pipeline/ID and /api/fleet requests: every server exits 0, no sanitizer report"
done_testing
