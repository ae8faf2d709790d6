# Start and stop real oopsd servers in integration tests (sourced after tap.sh).
#   start_server NAME POLICY_DIR [ARGS...]   waits until it logs "started:"
#                                            (the database: OOPS_DB=$OOPS_TEST_DB)
#                                            (SRV_WRAP=CMD: runs CMD oopsd ARGS, where CMD
#                                            execs it, e.g. in a mount namespace)
#   url NAME PATH                            http://127.0.0.1:PORT/PATH of that server
#   stop_servers                             SIGKILL every server still running (trap)
declare -A SRV_PID SRV_PORT SRV_LOG

source "$(dirname "${BASH_SOURCE[0]}")/ports.sh" # _free_port (the integration tests use it too)

start_server() {
  local name=$1 dir=$2; shift 2
  local port; port=$(_free_port)
  local log="$OOPS_TEST_WORK/$name.log"
  # The log is appended to (a restarted server keeps its history): look for
  # "started:" only in what this start writes, never in an earlier test's.
  local from; from=$(stat -c %s "$log" 2>/dev/null || echo 0)
  # The URL (its password) in OOPS_DB, not in argv: ps shows argv to every
  # user, until oopsd masks it. A test of --db in argv passes it in ARGS.
  OOPS_DB=$OOPS_TEST_DB ${SRV_WRAP:-} "$OOPS_BUILD/oopsd" --name "$name" --policies "$dir" \
    --listen "127.0.0.1:$port" "$@" 2>>"$log" &
  SRV_PID[$name]=$!
  SRV_PORT[$name]=$port
  SRV_LOG[$name]=$log
  local end=$((SECONDS + 30))
  while ((SECONDS < end)); do
    tail -c +$((from + 1)) "$log" 2>/dev/null | grep -q 'msg="started:' && return 0
    kill -0 "${SRV_PID[$name]}" 2>/dev/null || { echo "# $name exited at start:"; sed 's/^/#   /' "$log"; return 1; }
    sleep 0.1
  done
  echo "# $name did not start within 30s"; return 1
}

url() { echo "http://127.0.0.1:${SRV_PORT[$1]}$2"; }

stop_servers() {
  local n
  for n in "${!SRV_PID[@]}"; do kill -KILL "${SRV_PID[$n]}" 2>/dev/null; done
  for n in "${!SRV_PID[@]}"; do wait "${SRV_PID[$n]}" 2>/dev/null; done
  return 0
}

# The HTTP status code of a GET.
http_code() { curl -s -o /dev/null -w '%{http_code}' "$1"; }
