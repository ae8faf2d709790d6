# The tests' webhook receiver (tests/tools/http_sink.c), started and stopped
# the same way by every test that sends it notifications.
#
#   sink_start NAME OUT PORT [HTTP_SINK_ARGS...]
#       start it on 127.0.0.1:PORT, its output in OUT; wait (10 s at most)
#       for its "listening" line. Returns 1, with its output as TAP comments,
#       when it does not come up. Its pid is SINK_PID[NAME].
#   sink_stop NAME      stop it (SIGTERM, then reap); nothing if not running
#   sink_stop_all       stop every one started (for the test's EXIT trap)
declare -gA SINK_PID=()

sink_start() {
  local name=$1 out=$2 port=$3
  shift 3
  "$OOPS_BUILD/http_sink" --port "$port" "$@" >"$out" 2>&1 &
  SINK_PID[$name]=$!
  local end=$((SECONDS + 10))
  while ((SECONDS < end)); do
    grep -q '^listening' "$out" 2>/dev/null && return 0
    kill -0 "${SINK_PID[$name]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "# http_sink $name did not start:"
  sed 's/^/#   /' "$out"
  return 1
}

sink_stop() {
  local pid=${SINK_PID[$1]:-}
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  unset "SINK_PID[$1]"
}

sink_stop_all() {
  local n
  for n in "${!SINK_PID[@]}"; do sink_stop "$n"; done
}
