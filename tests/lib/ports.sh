# A free loopback TCP port (sourced by mariadb.sh and oopsd.sh, not run).
#   _free_port   → prints a port nothing listens on now, below the ephemeral
#                  range (32768+: no clash with a client socket); fails after
#                  50 tries. Another process may still take it before the
#                  caller binds it: callers that can, retry.
_free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 12000))
    (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo "$p"; return 0; }
  done
  return 1
}
