#!/usr/bin/env bash
# bench/commit_rate.sh BUILD_DIR [N] [SESSIONS...]: the database's own ceiling
# for transitions on this machine (issue 36), the figure the engine's drive is
# measured against. A throwaway MariaDB as the tests start it, `oopsctl
# migrate`, N RUNNING pipelines (default 20,000); then a plain loop of the
# transition's transaction (oops_transition: the conditional UPDATE, its
# pipeline_event and its outbox row, one COMMIT each), run inside the server
# by a procedure (no client round trip: the database alone), by 1 session and
# then by each count in SESSIONS (default 1 2 4) side by side on slices of
# the pipelines. Prints transitions a second for each, and the drive's own
# share: the 10,000-pipeline scale case makes 40,000 transitions (four a
# pipeline), 10,000 creates and the simulated gateway's rows.
set -euo pipefail
build=$(cd "${1:?usage: bench/commit_rate.sh BUILD_DIR [N] [SESSIONS...]}" && pwd)
n=${2:-20000}
shift $(($# >= 2 ? 2 : 1))
sessions=("$@")
((${#sessions[@]})) || sessions=(1 2 4)
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../tests/lib/mariadb.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/oops-commit.XXXXXX")
trap 'mariadb_stop; rm -rf "$work"' EXIT
mariadb_start "$work/mariadb" >/dev/null || exit 1
db=$(mariadb_new_db c)
OOPS_DB=$db "$build/oopsctl" migrate >/dev/null # the URL not in argv
q() { mariadb "${MDB_ADMIN[@]}" -N -B c -e "$1"; }
mariadb "${MDB_ADMIN[@]}" c <<'SQL'
DELIMITER //
CREATE PROCEDURE bench_loop(p_first INT, p_last INT, p_from VARCHAR(16), p_to VARCHAR(16))
BEGIN
  DECLARE i INT DEFAULT p_first;
  WHILE i <= p_last DO
    CALL oops_transition(CONCAT('c', LPAD(i, 11, '0')), p_from, p_to, p_to, 'bench', NULL, 'bench', 0);
    SET i = i + 1;
  END WHILE;
END //
DELIMITER ;
SQL
echo "bench/commit_rate.sh: $n transitions per run; $(nproc) cores; $(q 'SELECT VERSION()')"
from=RUNNING
for k in "${sessions[@]}"; do
  q "DELETE FROM outbox; DELETE FROM pipeline_event; DELETE FROM pipeline"
  q "INSERT INTO pipeline (id, namespace, application, environment, status)
     SELECT CONCAT('c', LPAD(seq, 11, '0')), 'bench', CONCAT('app', seq), 'prod', '$from' FROM seq_1_to_$n"
  slice=$(((n + k - 1) / k))
  t0=$(date +%s.%N)
  pids=()
  for ((s = 0; s < k; s++)); do
    first=$((s * slice + 1)) last=$(((s + 1) * slice))
    ((last > n)) && last=$n
    q "CALL bench_loop($first, $last, 'RUNNING', 'BUILD_SUCCEEDED')" >/dev/null &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  t1=$(date +%s.%N)
  made=$(q "SELECT COUNT(*) FROM pipeline WHERE status = 'BUILD_SUCCEEDED'")
  awk -v k="$k" -v n="$made" -v t0="$t0" -v t1="$t1" 'BEGIN {
    printf "%d session(s): %d transitions in %.2f s = %.0f a second (the 10,000-pipeline drive'"'"'s 40,000: %.2f s)\n",
      k, n, t1 - t0, n / (t1 - t0), 40000 / (n / (t1 - t0)) }'
done
