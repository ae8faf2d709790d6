# The history the delivery-figure tests read (sourced after tap.sh, with the
# schema migrated): rows as the engine writes them, times relative to the
# database's clock, in whole seconds from one base, so the answers are exact.
# tests/integration/stats.sh says what each row stands for and the figures
# they make; stats_page.sh shows the same on the page. Leaves $base, $H, $D.
base=$(sql "SELECT UNIX_TIMESTAMP()")
# id, target (ns app env), status, trigger, created (seconds before base),
# status changed (seconds before base), source JSON or NULL, rollback_of or NULL
pipeline() {
  sql "INSERT INTO pipeline (id, namespace, application, environment, status, trigger_type, created_at,
    status_changed_at, source, rollback_of) VALUES ('$1', '$2', '$3', '$4', '$5', '$6',
    FROM_UNIXTIME($((base - $7))), FROM_UNIXTIME($((base - $8))), $9, ${10})"
}
failed_from() { # id, status it failed from
  sql "INSERT INTO pipeline_event (pipeline_id, event_type, from_status, to_status, server)
    VALUES ('$1', 'STATUS_CHANGED', 'INITIALIZED', 'RUNNING', 'x'), ('$1', 'STATUS_CHANGED', '$2', 'ERROR', 'x')"
}
H=3600 D=86400
iso_ago() { date -u -d "@$((base - $1))" +%Y-%m-%dT%H:%M:%SZ; }
iso_ago_plus1() { date -u -d "@$((base - $1 + H))" +%Y-%m-%dT%H:%M:%S+01:00; }

pipeline r1 shop api prod SUCCEEDED release $((6 * D + 2 * H)) $((6 * D)) "'{\"committed_at\":\"$(iso_ago $((6 * D + 5 * H)))\"}'" NULL
pipeline r2 shop api prod SUCCEEDED release $((5 * D + H)) $((5 * D)) NULL NULL
pipeline r3 shop api prod ERROR release $((4 * D + 3 * H)) $((4 * D)) NULL NULL
failed_from r3 DEPLOYING
pipeline r4 shop api prod SUCCEEDED release $((4 * D - H)) $((4 * D - 2 * H)) NULL NULL
pipeline r5 shop api prod SUCCEEDED release $((2 * D + 2 * H)) $((2 * D)) "'{\"committed_at\":\"$(iso_ago_plus1 $((2 * D + 3 * H)))\"}'" NULL
pipeline rb1 shop api prod SUCCEEDED rollback $((2 * D - H)) $((2 * D - 3 * H / 2)) NULL "'r5'"
pipeline r6 shop api prod ERROR release $((D + 2 * H)) $((D + H)) NULL NULL
failed_from r6 RUNNING
pipeline r7 shop api prod SUCCEEDED release $((10 * D + 6 * H)) $((10 * D)) NULL NULL
pipeline w1 shop web staging SUCCEEDED release $((D + 4 * H)) $((D)) "'{\"committed_at\":\"$(iso_ago $((D - H)))\"}'" NULL
pipeline w2 shop web staging ERROR release $((13 * H)) $((12 * H)) NULL NULL
failed_from w2 ROLLING_OUT
