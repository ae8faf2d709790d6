#include "schema.h"

#include <stdio.h>
#include <string.h>

#include "lock_names.h"

typedef struct migration {
    int version;
    const char *what;
    const char *const *statements; /* NULL-terminated */
} migration;

/* 1: the core — pipelines, their event trail, and the servers. */
/* The migrations are SQL laid out as SQL (one column per line): clang-format
 * would reflow it. */
/* clang-format off */
static const char *const v1[] = {
    "CREATE TABLE IF NOT EXISTS pipeline ("
    " id VARCHAR(24) NOT NULL PRIMARY KEY,"
    " namespace VARCHAR(63) NOT NULL,"
    " application VARCHAR(63) NOT NULL,"
    " environment VARCHAR(63) NOT NULL,"
    " status VARCHAR(16) NOT NULL,"
    " deploy_mode VARCHAR(8) NOT NULL DEFAULT 'auto',"
    " artifact VARCHAR(255) NULL,"
    " source TEXT NULL,"
    " message TEXT NULL,"
    " trigger_type VARCHAR(8) NOT NULL DEFAULT 'release',"
    " deploy_requested_at DATETIME(6) NULL,"
    " created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " status_changed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " driven_by VARCHAR(64) NULL,"
    /* Non-NULL only while unfinished: the UNIQUE index below then lets the
     * database itself refuse a second unfinished pipeline for one
     * application and environment, even for two creates racing. */
    " unfinished_key VARCHAR(200) AS (CASE WHEN status IN"
    "   ('INITIALIZED','RUNNING','DEPLOYING','ROLLING_OUT')"
    "   THEN CONCAT(namespace, '/', application, '/', environment) END) STORED,"
    " CONSTRAINT ck_pipeline_status CHECK (status IN ('INITIALIZED','RUNNING',"
    "   'BUILD_SUCCEEDED','DEPLOYING','ROLLING_OUT','SUCCEEDED','ERROR','STOPPED')),"
    " CONSTRAINT ck_pipeline_mode CHECK (deploy_mode IN ('auto','manual')),"
    " CONSTRAINT ck_pipeline_source CHECK (source IS NULL OR JSON_VALID(source)),"
    " CONSTRAINT ck_pipeline_trigger CHECK (trigger_type IN ('release','rollback')),"
    " UNIQUE KEY uq_pipeline_unfinished (unfinished_key),"
    " KEY ix_pipeline_status (status),"
    " KEY ix_pipeline_app (namespace, application, environment, created_at)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",

    "CREATE TABLE IF NOT EXISTS pipeline_event ("
    " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
    " pipeline_id VARCHAR(24) NOT NULL,"
    " event_type VARCHAR(24) NOT NULL,"
    " from_status VARCHAR(16) NULL,"
    " to_status VARCHAR(16) NOT NULL,"
    " message TEXT NULL,"
    " server VARCHAR(64) NOT NULL,"
    " created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " KEY ix_event_pipeline (pipeline_id, id)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",

    "CREATE TABLE IF NOT EXISTS server ("
    " name VARCHAR(64) NOT NULL PRIMARY KEY,"
    " lock_connection_id BIGINT UNSIGNED NULL,"
    " started_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " last_seen DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " host VARCHAR(255) NULL,"
    " pid INT NULL,"
    " KEY ix_server_conn (lock_connection_id)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    NULL,
};

/* 2: the engine — the simulated cluster and the exec gateway's jobs and output. */
static const char *const v2[] = {
    /* The simulated gateway's cluster, shared by every server (DESIGN.md). A
     * deleted row is a missing job; outcome: NULL = succeeds when ready_at is
     * reached, 'pending' = exists without a status, 'failed' (build) or a
     * failure reason (rollout), 'stopped'. */
    "CREATE TABLE IF NOT EXISTS sim_job ("
    " pipeline_id VARCHAR(200) NOT NULL," /* a pipeline id, or ns/app/env for faults */
    " kind VARCHAR(32) NOT NULL,"
    " started_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " ready_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " outcome VARCHAR(255) NULL,"
    " server VARCHAR(64) NULL,"
    " PRIMARY KEY (pipeline_id, kind)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",

    "CREATE TABLE IF NOT EXISTS sim_call ("
    " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
    " pipeline_id VARCHAR(24) NULL,"
    " target VARCHAR(200) NOT NULL,"
    " action VARCHAR(16) NOT NULL,"
    " server VARCHAR(64) NOT NULL,"
    " created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " KEY ix_sim_call_pipeline (pipeline_id, action),"
    " KEY ix_sim_call_target (target, action)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",

    /* The exec gateway's jobs: a build process belongs to the server that
     * drives its pipeline; its outcome is kept so a takeover after the build
     * finished can carry on. */
    "CREATE TABLE IF NOT EXISTS exec_job ("
    " pipeline_id VARCHAR(24) NOT NULL,"
    " kind VARCHAR(16) NOT NULL,"
    " server VARCHAR(64) NOT NULL,"
    " state VARCHAR(16) NOT NULL,"
    " exit_status INT NULL,"
    " started_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " finished_at DATETIME(6) NULL,"
    " PRIMARY KEY (pipeline_id, kind)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",

    /* Command output per pipeline, so `oopsctl logs ID` works from any host.
     * One row per command run: argv as run (a JSON array of strings), how it
     * ended (result: "exited 3", "timed out after 30s", "not started: ..."),
     * exit_status only when it exited, and the tail of its output. */
    "CREATE TABLE IF NOT EXISTS pipeline_log ("
    " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
    " pipeline_id VARCHAR(24) NOT NULL,"
    " step VARCHAR(16) NOT NULL,"
    " server VARCHAR(64) NOT NULL,"
    " argv TEXT NOT NULL,"
    " exit_status INT NULL,"
    " result VARCHAR(255) NULL,"
    " duration_ms BIGINT NULL,"
    " output MEDIUMTEXT NULL,"
    " created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " CONSTRAINT ck_pipeline_log_argv CHECK (JSON_VALID(argv)),"
    " KEY ix_pipeline_log (pipeline_id, id)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    NULL,
};

/* 3: scheduled restarts, resource alerts, and the notification outbox. */
static const char *const v3[] = {
    /* One row per restart occurrence: inserting it is the claim, so even two
     * leaders (a frozen one waking up) fire an occurrence once. */
    "CREATE TABLE IF NOT EXISTS restart_run ("
    " namespace VARCHAR(63) NOT NULL,"
    " application VARCHAR(63) NOT NULL,"
    " environment VARCHAR(63) NOT NULL,"
    " occurrence DATETIME NOT NULL," /* the scheduled second, UTC */
    " fired_by VARCHAR(64) NOT NULL,"
    " fired_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " outcome VARCHAR(1024) NULL," /* NULL while running; 'ok', 'missed', or the error's text */
    " finished_at DATETIME(6) NULL,"
    " PRIMARY KEY (namespace, application, environment, occurrence)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",

    /* How far the restart leaders have looked: a new leader carries on from
     * here, so occurrences missed during a failover fire late (within grace)
     * or are recorded as missed. Only ever moves forward. */
    "CREATE TABLE IF NOT EXISTS restart_watermark ("
    " id TINYINT NOT NULL PRIMARY KEY,"
    " checked_up_to DATETIME NOT NULL,"
    " server VARCHAR(64) NOT NULL,"
    " updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",

    /* Alert state per target and metric; every write is conditional on the
     * version it read, so two leaders cannot both announce one edge. */
    "CREATE TABLE IF NOT EXISTS alert_state ("
    " namespace VARCHAR(63) NOT NULL,"
    " application VARCHAR(63) NOT NULL,"
    " environment VARCHAR(63) NOT NULL,"
    " metric VARCHAR(16) NOT NULL,"
    " firing TINYINT NOT NULL DEFAULT 0,"
    " firing_since DATETIME(6) NULL,"
    " last_notified_at DATETIME(6) NULL,"
    " pods TEXT NULL,"
    " version BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    " PRIMARY KEY (namespace, application, environment, metric)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",

    /* The simulated probe's metrics: a pod's current usage (millicores or bytes). */
    "CREATE TABLE IF NOT EXISTS sim_metric ("
    " namespace VARCHAR(63) NOT NULL,"
    " application VARCHAR(63) NOT NULL,"
    " environment VARCHAR(63) NOT NULL,"
    " metric VARCHAR(16) NOT NULL,"
    " pod VARCHAR(128) NOT NULL,"
    " value DOUBLE NOT NULL,"
    " PRIMARY KEY (namespace, application, environment, metric, pod)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",

    /* Notifications to deliver, written in the same transaction as the change
     * they announce; marked delivered with a conditional update. event_id is
     * the stable id receivers deduplicate on. */
    "CREATE TABLE IF NOT EXISTS outbox ("
    " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
    " event_id VARCHAR(160) NOT NULL,"
    " kind VARCHAR(16) NOT NULL," /* 'pipeline' | 'alert' */
    " ref_id BIGINT UNSIGNED NULL," /* pipeline_event.id for kind 'pipeline' */
    " payload MEDIUMTEXT NULL," /* JSON facts for kind 'alert' */
    " created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " delivered_routes TEXT NULL," /* routes already done, for events with several */
    " delivered_at DATETIME(6) NULL,"
    " attempts INT NOT NULL DEFAULT 0,"
    " next_attempt_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " last_error TEXT NULL,"
    " UNIQUE KEY uq_outbox_event (event_id),"
    " KEY ix_outbox_pending (delivered_at, next_attempt_at)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    NULL,
};

/* v4: a restart claim records when its firing started, so a new leader can
 * tell a claim whose server died before calling the gateway (safe to fire
 * late) from one that died during the call (outcome unknown: never fired
 * twice); unfinished claims are found through finished_at. */
static const char *const v4[] = {
    "ALTER TABLE restart_run"
    " ADD COLUMN IF NOT EXISTS started_at DATETIME(6) NULL AFTER fired_at,"
    " ADD INDEX IF NOT EXISTS ix_restart_run_unfinished (finished_at)",
    /* The lock session a server's transition was fenced by (NULL for an
     * operator's change): scenarios check no transition came from a session
     * that had lost the pipeline's lock. */
    "ALTER TABLE pipeline_event ADD COLUMN IF NOT EXISTS lock_session BIGINT UNSIGNED NULL AFTER server",
    NULL,
};

/* v5: names compare byte for byte. The tables were created with the server's
 * default utf8mb4_general_ci, under which "SHOP/API" collided with an
 * unfinished "shop/api" and 'abc123 ' found the pipeline 'abc123' (PAD SPACE).
 * Every column holding an identifier — pipeline ids and every column that
 * refers to one, namespace/application/environment, server names, statuses
 * and other enumerated values, outbox keys, route keys — becomes
 * utf8mb4_nopad_bin: binary (case-sensitive) and NO PAD ('a' <> 'a '), unlike
 * utf8mb4_bin, which pads. Each table's default becomes the same, so a column
 * added later is an exact name unless it says otherwise; free text (messages,
 * outcomes, output, payloads) keeps utf8mb4_general_ci. Converting to a finer
 * collation cannot make two keys of a unique index equal, so this never fails
 * on existing data. Statuses and modes written in another case by some other
 * tool were valid under the old CHECKs but would fail the now exact ones:
 * they are normalised first. There are no foreign keys to keep in step. */
#define NAME(col, type, rest) " MODIFY " col " " type " CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin " rest
#define EXACT " DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,"
static const char *const v5[] = {
    "UPDATE pipeline SET status = UPPER(status), deploy_mode = LOWER(deploy_mode),"
    " trigger_type = LOWER(trigger_type)"
    " WHERE BINARY status <> UPPER(status) OR BINARY deploy_mode <> LOWER(deploy_mode)"
    " OR BINARY trigger_type <> LOWER(trigger_type)",

    "ALTER TABLE pipeline" EXACT
    NAME("id", "VARCHAR(24)", "NOT NULL") ","
    NAME("namespace", "VARCHAR(63)", "NOT NULL") ","
    NAME("application", "VARCHAR(63)", "NOT NULL") ","
    NAME("environment", "VARCHAR(63)", "NOT NULL") ","
    NAME("status", "VARCHAR(16)", "NOT NULL") ","
    NAME("deploy_mode", "VARCHAR(8)", "NOT NULL DEFAULT 'auto'") ","
    NAME("artifact", "VARCHAR(255)", "NULL") ","
    NAME("trigger_type", "VARCHAR(8)", "NOT NULL DEFAULT 'release'") ","
    NAME("driven_by", "VARCHAR(64)", "NULL") ","
    NAME("unfinished_key", "VARCHAR(200)",
         "AS (CASE WHEN status IN ('INITIALIZED','RUNNING','DEPLOYING','ROLLING_OUT')"
         " THEN CONCAT(namespace, '/', application, '/', environment) END) STORED"),

    "ALTER TABLE pipeline_event" EXACT
    NAME("pipeline_id", "VARCHAR(24)", "NOT NULL") ","
    NAME("event_type", "VARCHAR(24)", "NOT NULL") ","
    NAME("from_status", "VARCHAR(16)", "NULL") ","
    NAME("to_status", "VARCHAR(16)", "NOT NULL") ","
    NAME("server", "VARCHAR(64)", "NOT NULL"),

    "ALTER TABLE server" EXACT
    NAME("name", "VARCHAR(64)", "NOT NULL"),

    "ALTER TABLE sim_job" EXACT
    NAME("pipeline_id", "VARCHAR(200)", "NOT NULL") ","
    NAME("kind", "VARCHAR(32)", "NOT NULL") ","
    NAME("server", "VARCHAR(64)", "NULL"),

    "ALTER TABLE sim_call" EXACT
    NAME("pipeline_id", "VARCHAR(24)", "NULL") ","
    NAME("target", "VARCHAR(200)", "NOT NULL") ","
    NAME("action", "VARCHAR(16)", "NOT NULL") ","
    NAME("server", "VARCHAR(64)", "NOT NULL"),

    "ALTER TABLE exec_job" EXACT
    NAME("pipeline_id", "VARCHAR(24)", "NOT NULL") ","
    NAME("kind", "VARCHAR(16)", "NOT NULL") ","
    NAME("server", "VARCHAR(64)", "NOT NULL") ","
    NAME("state", "VARCHAR(16)", "NOT NULL"),

    "ALTER TABLE pipeline_log" EXACT
    NAME("pipeline_id", "VARCHAR(24)", "NOT NULL") ","
    NAME("step", "VARCHAR(16)", "NOT NULL") ","
    NAME("server", "VARCHAR(64)", "NOT NULL"),

    "ALTER TABLE restart_run" EXACT
    NAME("namespace", "VARCHAR(63)", "NOT NULL") ","
    NAME("application", "VARCHAR(63)", "NOT NULL") ","
    NAME("environment", "VARCHAR(63)", "NOT NULL") ","
    NAME("fired_by", "VARCHAR(64)", "NOT NULL"),

    "ALTER TABLE restart_watermark" EXACT
    NAME("server", "VARCHAR(64)", "NOT NULL"),

    "ALTER TABLE alert_state" EXACT
    NAME("namespace", "VARCHAR(63)", "NOT NULL") ","
    NAME("application", "VARCHAR(63)", "NOT NULL") ","
    NAME("environment", "VARCHAR(63)", "NOT NULL") ","
    NAME("metric", "VARCHAR(16)", "NOT NULL"),

    "ALTER TABLE sim_metric" EXACT
    NAME("namespace", "VARCHAR(63)", "NOT NULL") ","
    NAME("application", "VARCHAR(63)", "NOT NULL") ","
    NAME("environment", "VARCHAR(63)", "NOT NULL") ","
    NAME("metric", "VARCHAR(16)", "NOT NULL") ","
    NAME("pod", "VARCHAR(128)", "NOT NULL"),

    "ALTER TABLE outbox" EXACT
    NAME("event_id", "VARCHAR(160)", "NOT NULL") ","
    NAME("kind", "VARCHAR(16)", "NOT NULL") ","
    NAME("delivered_routes", "TEXT", "NULL"),
    NULL,
};
#undef NAME
#undef EXACT

/* 6: external builds (exec gateway, build = {submit, status, cancel}): the
 * job handle submit printed, so any server can poll it; how many times it was
 * submitted (scenarios check: once); the one cancel claim (cancel_server,
 * cancels) and how it ended. mode 'local' is the one-command build (a child
 * process of its server). */
static const char *const v6[] = {
    "ALTER TABLE exec_job"
    " ADD COLUMN IF NOT EXISTS mode VARCHAR(8) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin"
    "   NOT NULL DEFAULT 'local' AFTER kind,"
    " ADD COLUMN IF NOT EXISTS handle VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin"
    "   NULL AFTER state,"
    " ADD COLUMN IF NOT EXISTS submits INT UNSIGNED NOT NULL DEFAULT 0 AFTER handle,"
    " ADD COLUMN IF NOT EXISTS cancel_state VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin"
    "   NULL AFTER submits,"
    " ADD COLUMN IF NOT EXISTS cancel_server VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin"
    "   NULL AFTER cancel_state,"
    " ADD COLUMN IF NOT EXISTS cancels INT UNSIGNED NOT NULL DEFAULT 0 AFTER cancel_server,"
    " ADD COLUMN IF NOT EXISTS cancelled_at DATETIME(6) NULL AFTER cancels,"
    " ADD INDEX IF NOT EXISTS ix_exec_job_state (state)",
    NULL,
};
/* 7: indexes only, so a year of history costs what an empty database costs
 * (tests/integration/explain.sh EXPLAINs every statement the servers and
 * oopsctl run, on tens of thousands of finished rows). Additive: servers of
 * schema 6 run on it unchanged, and InnoDB builds a secondary index online
 * (in place, writes go on), so migrating a large database stalls no server.
 * - pipeline (status, status_changed_at): the scans' and the stats gauges'
 *   per-status reads (MIN(status_changed_at) from the index), ages, retention;
 * - pipeline (created_at): `oopsctl list` newest first, --since;
 * - pipeline (namespace, application, environment, status, status_changed_at):
 *   the rollback target and `oopsctl history` (the last SUCCEEDED ones) without
 *   reading an application's whole past;
 * - created_at of pipeline_event, pipeline_log, sim_call and outbox
 *   (delivered_at, created_at): retention finds expired rows by age;
 * - outbox (ref_id): an event still referenced by a pending notification;
 * - sim_job (kind, outcome, ready_at): the simulated gateway's orphaned builds
 *   without walking every ERROR/STOPPED pipeline.
 * ix_event_pipeline, ix_pipeline_log (pipeline_id, id) and
 * ix_restart_run_unfinished (finished_at) already serve the rest. */
static const char *const v7[] = {
    "ALTER TABLE pipeline"
    " ADD INDEX IF NOT EXISTS ix_pipeline_status_changed (status, status_changed_at),"
    " ADD INDEX IF NOT EXISTS ix_pipeline_created (created_at),"
    " ADD INDEX IF NOT EXISTS ix_pipeline_app_status"
    "   (namespace, application, environment, status, status_changed_at)",
    "ALTER TABLE pipeline_event ADD INDEX IF NOT EXISTS ix_event_created (created_at)",
    "ALTER TABLE pipeline_log ADD INDEX IF NOT EXISTS ix_pipeline_log_created (created_at)",
    "ALTER TABLE outbox"
    " ADD INDEX IF NOT EXISTS ix_outbox_delivered (delivered_at, created_at),"
    " ADD INDEX IF NOT EXISTS ix_outbox_ref (ref_id)",
    "ALTER TABLE sim_call ADD INDEX IF NOT EXISTS ix_sim_call_created (created_at)",
    "ALTER TABLE sim_job ADD INDEX IF NOT EXISTS ix_sim_job_open (kind, outcome, ready_at)",
    NULL,
};
/* 8: a transition in one round trip. oops_transition() makes the fenced
 * conditional UPDATE, its pipeline_event and its outbox row in one
 * transaction, as pipeline_store_transition did with five statements
 * (START TRANSACTION, UPDATE, INSERT event, INSERT outbox, COMMIT), and
 * answers one row: won = 1 when this call changed the status, else 0. Any
 * error rolls back and is raised again unchanged (a second unfinished
 * pipeline is still error 1062). SQL SECURITY INVOKER: it runs with the
 * caller's rights on the tables (SELECT, INSERT, UPDATE); calling it needs
 * EXECUTE (doc/guide/database.md, "Database grants"; without it the servers fall back to
 * the five statements and say so). Parameters carry the columns' exact
 * collation (utf8mb4_nopad_bin, v5), so comparisons stay byte for byte.
 * Additive: servers of schema 7 run on it unchanged. */
static const char *const v8[] = {
    "DROP PROCEDURE IF EXISTS oops_transition",
    "CREATE PROCEDURE oops_transition("
    " IN p_id VARCHAR(24) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,"
    " IN p_from VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,"
    " IN p_to VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,"
    " IN p_event VARCHAR(24) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,"
    " IN p_message TEXT CHARACTER SET utf8mb4,"
    " IN p_driver VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,"
    " IN p_actor VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,"
    " IN p_fence BIGINT)"
    " SQL SECURITY INVOKER MODIFIES SQL DATA"
    " BEGIN"
    "  DECLARE won INT DEFAULT 0;"
    "  DECLARE ev BIGINT UNSIGNED;"
    "  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;"
    "  START TRANSACTION;"
    /* Fenced: with a lock session (p_fence <> 0) the update counts only while
     * that session holds the pipeline's lock. */
    "  UPDATE pipeline SET status = p_to, message = p_message, status_changed_at = NOW(6),"
    "   driven_by = COALESCE(p_driver, driven_by)"
    "   WHERE id = p_id AND status = p_from"
    "   AND (p_fence = 0 OR IS_USED_LOCK(CONCAT('" OOPS_LOCK_PIPELINE_PREFIX "', id)) <=> p_fence);"
    "  SET won = ROW_COUNT();"
    "  IF won = 1 THEN"
    "   INSERT INTO pipeline_event (pipeline_id, event_type, from_status, to_status, message,"
    "    server, lock_session, created_at)"
    "    VALUES (p_id, p_event, p_from, p_to, p_message, p_actor, NULLIF(p_fence, 0), NOW(6));"
    "   SET ev = LAST_INSERT_ID();"
    /* The notification, in the same transaction: never lost across a crash. */
    "   INSERT INTO outbox (event_id, kind, ref_id)"
    "    VALUES (CONCAT('pipeline-event-', ev), 'pipeline', ev);"
    "  END IF;"
    "  COMMIT;"
    "  SELECT won;"
    " END",
    NULL,
};
/* v9: what the fleet page (issue 16) shows of each server, published by its
 * heartbeat: its health ("ok" or what /healthz says is wrong), the policy it
 * runs (version_hash) and its oopsd version. NULL for a server older than
 * schema 9 (N-1 servers run on schema N and simply do not publish). */
static const char *const v9[] = {
    "ALTER TABLE server"
    " ADD COLUMN IF NOT EXISTS health VARCHAR(255) NULL,"
    " ADD COLUMN IF NOT EXISTS policy_hash VARCHAR(40) NULL,"
    " ADD COLUMN IF NOT EXISTS oopsd_version VARCHAR(64) NULL",
    NULL,
};
/* v10: a scan reads what it takes (issue 15). Its free candidates are the
 * oldest rows of one status whose lock is free, read in (status, created_at,
 * id) order up to a LIMIT: ix_pipeline_status_created serves that without a
 * sort, and makes ix_pipeline_status (status) redundant, so it replaces it:
 * the same number of indexes to maintain per transition. Servers of schema 9
 * run on it unchanged (no statement names an index). */
static const char *const v10[] = {
    "ALTER TABLE pipeline"
    " ADD INDEX IF NOT EXISTS ix_pipeline_status_created (status, created_at),"
    " DROP INDEX IF EXISTS ix_pipeline_status",
    NULL,
};
/* v11: oops_transition2, the transition of oops_transition (v8) with the
 * fence's second half (pipeline_store.c, fence_lock): the session that holds
 * the pipeline's lock must also hold p_named, the lock naming the driver, so
 * that a connection id numbered again after a database restart fences
 * nothing. NULL p_named: the v8 fence. Additive: servers of schema 10 keep
 * calling oops_transition, which stays. */
static const char *const v11[] = {
    "DROP PROCEDURE IF EXISTS oops_transition2",
    "CREATE PROCEDURE oops_transition2("
    " IN p_id VARCHAR(24) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,"
    " IN p_from VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,"
    " IN p_to VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,"
    " IN p_event VARCHAR(24) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,"
    " IN p_message TEXT CHARACTER SET utf8mb4,"
    " IN p_driver VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,"
    " IN p_actor VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,"
    " IN p_fence BIGINT,"
    " IN p_named VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin)"
    " SQL SECURITY INVOKER MODIFIES SQL DATA"
    " BEGIN"
    "  DECLARE won INT DEFAULT 0;"
    "  DECLARE ev BIGINT UNSIGNED;"
    "  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;"
    "  START TRANSACTION;"
    "  UPDATE pipeline SET status = p_to, message = p_message, status_changed_at = NOW(6),"
    "   driven_by = COALESCE(p_driver, driven_by)"
    "   WHERE id = p_id AND status = p_from"
    "   AND (p_fence = 0 OR IS_USED_LOCK(CONCAT('" OOPS_LOCK_PIPELINE_PREFIX "', id)) <=> p_fence)"
    "   AND (p_named IS NULL OR IS_USED_LOCK(p_named) <=> p_fence);"
    "  SET won = ROW_COUNT();"
    "  IF won = 1 THEN"
    "   INSERT INTO pipeline_event (pipeline_id, event_type, from_status, to_status, message,"
    "    server, lock_session, created_at)"
    "    VALUES (p_id, p_event, p_from, p_to, p_message, p_actor, NULLIF(p_fence, 0), NOW(6));"
    "   SET ev = LAST_INSERT_ID();"
    "   INSERT INTO outbox (event_id, kind, ref_id)"
    "    VALUES (CONCAT('pipeline-event-', ev), 'pipeline', ev);"
    "  END IF;"
    "  COMMIT;"
    "  SELECT won;"
    " END",
    NULL,
};
/* v12: release safety (issue 26). On pipeline: `hold` (why a pipeline that
 * may deploy is waiting: 'window', 'freeze' or 'slot'; meaningful while it is
 * INITIALIZED or BUILD_SUCCEEDED), `override_at` (`oopsctl deploy --override`:
 * windows and freezes no longer hold it) and `rollback_of` (the release whose
 * failure created this automatic rollback; UNIQUE: one rollback per failed
 * release, whatever retries). An automatic release waiting in BUILD_SUCCEEDED
 * (held) is unfinished: nothing else is released beside it. deploy_slot: one
 * row per environment and slot number, naming the pipeline that deploys in
 * it; a slot whose pipeline is no longer DEPLOYING or ROLLING_OUT is free
 * (deploy_slot.c, deploy_slot_claim). Additive but for unfinished_key, which no
 * schema-11 server's pipeline can break: they never leave an automatic
 * pipeline in BUILD_SUCCEEDED. */
static const char *const v12[] = {
    "ALTER TABLE pipeline"
    " ADD COLUMN IF NOT EXISTS hold VARCHAR(8) NULL,"
    " ADD COLUMN IF NOT EXISTS override_at DATETIME(6) NULL,"
    " ADD COLUMN IF NOT EXISTS rollback_of VARCHAR(24) NULL,"
    " MODIFY unfinished_key VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin"
    "  AS (CASE WHEN status IN ('INITIALIZED','RUNNING','DEPLOYING','ROLLING_OUT')"
    "  OR (status = 'BUILD_SUCCEEDED' AND deploy_mode = 'auto')"
    "  THEN CONCAT(namespace, '/', application, '/', environment) END) STORED",
    "ALTER TABLE pipeline"
    " ADD UNIQUE INDEX IF NOT EXISTS uq_pipeline_rollback_of (rollback_of),"
    " ADD INDEX IF NOT EXISTS ix_pipeline_hold (hold, environment, created_at)",
    "CREATE TABLE IF NOT EXISTS deploy_slot ("
    " environment VARCHAR(63) NOT NULL,"
    " slot SMALLINT UNSIGNED NOT NULL,"
    " pipeline_id VARCHAR(24) NULL,"
    " claimed_at DATETIME(6) NULL,"
    " PRIMARY KEY (environment, slot)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin",
    NULL,
};
/* v13: operators (issue 27). The person behind an operator's event and why:
 * pipeline_event.actor ("alice@build-7", "bob@page"; NULL for the engine's
 * own transitions; `server` stays the process that wrote it: oopsctl@HOST or
 * the oopsd server) and .reason. operator_action: the audit log, one row per
 * operator action whatever came of it (done, or refused: changed
 * concurrently, not allowed), kept apart from the events so that it outlives
 * their retention and holds the refusals no event records; `oopsctl audit`
 * reads it newest first by created_at, by actor or by target (indexes).
 * Additive: an older server writes events without them. */
static const char *const v13[] = {
    "ALTER TABLE pipeline_event"
    " ADD COLUMN IF NOT EXISTS actor VARCHAR(128) NULL,"
    " ADD COLUMN IF NOT EXISTS reason VARCHAR(500) NULL",
    "CREATE TABLE IF NOT EXISTS operator_action ("
    " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
    " created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " actor VARCHAR(128) NOT NULL,"
    " action VARCHAR(16) NOT NULL,"
    " pipeline_id VARCHAR(24) NULL,"
    " namespace VARCHAR(63) NULL,"
    " application VARCHAR(63) NULL,"
    " environment VARCHAR(63) NULL,"
    " reason VARCHAR(500) NULL,"
    " outcome VARCHAR(16) NOT NULL,"
    " detail VARCHAR(300) NULL,"
    " via VARCHAR(64) NOT NULL,"
    " KEY ix_action_created (created_at),"
    " KEY ix_action_actor (actor, created_at),"
    " KEY ix_action_target (namespace, application, environment, created_at)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin",
    NULL,
};
/* v14: notifications, a queue per route (issue 37). The outbox stays the one
 * row per event, written in the transaction of its change; `routed` says
 * whether the notifier has handed it to its routes yet (0: waiting;
 * ix_outbox_unrouted reads those first). Routing writes one notify_pending row
 * per route that wants the event (a route's filters are applied there, once);
 * a route reads, sends and deletes its own rows (primary key: route, then
 * outbox id, so a route's read costs its own backlog only), each row with its
 * own attempts and retry. An outbox row is delivered (delivered_at) once no
 * notify_pending row is left for it. notify_route: each route the leader has
 * seen, its failures in a row and when it may try again (its own clock), and
 * removed_at while the rows of a route a reload removed are released in
 * pages. The column is added with DEFAULT 1, so rows delivered before need no
 * rewrite, then its default becomes 0 for new rows; undelivered rows are set
 * to 0, and routing skips the routes their delivered_routes (the old record)
 * lists. */
static const char *const v14[] = {
    "ALTER TABLE outbox ADD COLUMN IF NOT EXISTS routed TINYINT NOT NULL DEFAULT 1",
    "ALTER TABLE outbox ALTER COLUMN routed SET DEFAULT 0",
    "UPDATE outbox SET routed = 0 WHERE delivered_at IS NULL AND routed = 1",
    "ALTER TABLE outbox ADD INDEX IF NOT EXISTS ix_outbox_unrouted (routed, id)",
    "CREATE TABLE IF NOT EXISTS notify_route ("
    " route_key VARCHAR(64) NOT NULL PRIMARY KEY,"
    " name VARCHAR(300) NOT NULL,"
    " failures INT NOT NULL DEFAULT 0,"
    " retry_at DATETIME(6) NULL,"
    " last_error VARCHAR(1000) NULL,"
    " added_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " removed_at DATETIME(6) NULL"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin",
    "CREATE TABLE IF NOT EXISTS notify_pending ("
    " route_key VARCHAR(64) NOT NULL,"
    " outbox_id BIGINT UNSIGNED NOT NULL,"
    " attempts INT NOT NULL DEFAULT 0,"
    " next_attempt_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " last_error VARCHAR(1000) NULL,"
    " PRIMARY KEY (route_key, outbox_id),"
    " KEY ix_notify_pending_outbox (outbox_id)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin",
    NULL,
};
/* v15: canary releases (issue 38). On pipeline, the canary's state, each
 * change of it one conditional UPDATE fenced like a transition
 * (lua/oops/canary.lua): `step` (the step being run, 1-based; 0 before the
 * first), `step_at` (when it began, the database's clock), `weight` and
 * `weight_step` (the weight last confirmed set by the gateway, and the step
 * it was set for: an heir that finds a step's weight unconfirmed asks the
 * gateway before setting it), `paused` (why the step waits: 'operator',
 * 'inconclusive'), `canary_request` (an operator's 'promote',
 * 'promote_full' or 'abort', carried out by the driver; src/operator.c).
 * canary_measurement: one row per measurement of an analysis step, unique
 * per (pipeline, step, n), written by INSERT ... SELECT only while the
 * driver holds the pipeline's lock and its name lock: an heir continues the
 * count and never measures twice what was recorded. sim_traffic and
 * sim_artifact: the simulated gateway's traffic split per target and a
 * test's per-artifact error rate and requests per second
 * (lua/oops/scenario/traffic.lua serves them to Prometheus). Additive. */
static const char *const v15[] = {
    "ALTER TABLE pipeline"
    " ADD COLUMN IF NOT EXISTS step SMALLINT UNSIGNED NOT NULL DEFAULT 0,"
    " ADD COLUMN IF NOT EXISTS step_at DATETIME(6) NULL,"
    " ADD COLUMN IF NOT EXISTS weight SMALLINT NULL,"
    " ADD COLUMN IF NOT EXISTS weight_step SMALLINT UNSIGNED NULL,"
    " ADD COLUMN IF NOT EXISTS paused VARCHAR(16) NULL,"
    " ADD COLUMN IF NOT EXISTS canary_request VARCHAR(16) NULL",
    "CREATE TABLE IF NOT EXISTS canary_measurement ("
    " pipeline_id VARCHAR(24) NOT NULL,"
    " step SMALLINT UNSIGNED NOT NULL,"
    " n SMALLINT UNSIGNED NOT NULL,"
    " analysis VARCHAR(63) NOT NULL,"
    " value DOUBLE NULL,"
    " verdict VARCHAR(16) NOT NULL,"
    " detail VARCHAR(300) NULL,"
    " server VARCHAR(64) NULL,"
    " measured_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " PRIMARY KEY (pipeline_id, step, n)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin",
    "CREATE TABLE IF NOT EXISTS sim_traffic ("
    " namespace VARCHAR(63) NOT NULL,"
    " application VARCHAR(63) NOT NULL,"
    " environment VARCHAR(63) NOT NULL,"
    " weight SMALLINT NOT NULL DEFAULT 0,"
    " canary_artifact VARCHAR(255) NULL,"
    " stable_artifact VARCHAR(255) NULL,"
    " updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),"
    " PRIMARY KEY (namespace, application, environment)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin",
    "CREATE TABLE IF NOT EXISTS sim_artifact ("
    " artifact VARCHAR(255) NOT NULL PRIMARY KEY,"
    " error_rate DOUBLE NOT NULL DEFAULT 0,"
    " rps DOUBLE NOT NULL DEFAULT 20"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin",
    NULL,
};
/* v16: approvals (issue 39). On pipeline, `approvals` (how many distinct
 * persons approved it) and `approved_by` (their names, comma-separated, in
 * the order they approved). An approval is one conditional UPDATE
 * (pipeline_store_approve_by): only before the deploy, only a person not yet
 * in approved_by, at most PIPELINE_APPROVALS_MAX; so two approvals by one
 * person count once whatever races. Additive. */
static const char *const v16[] = {
    "ALTER TABLE pipeline"
    " ADD COLUMN IF NOT EXISTS approvals TINYINT UNSIGNED NOT NULL DEFAULT 0,"
    " ADD COLUMN IF NOT EXISTS approved_by VARCHAR(700) NULL",
    NULL,
};
/* v17: promotion (issue 39). A promoted release is one row whose
 * `promoted_from` names the release it came from; UNIQUE, so whoever makes
 * it (the promote scan's leader, an operator's promote-now, both at once, a
 * maker killed and its heir) makes it once: the second INSERT is refused by
 * the database (lua/oops/promote.lua). trigger_type gains 'promotion' (one
 * character wider than the column was). Additive for servers of schema 16:
 * they read the new trigger as a release. */
static const char *const v17[] = {
    "ALTER TABLE pipeline"
    " MODIFY trigger_type VARCHAR(12) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin"
    "   NOT NULL DEFAULT 'release',"
    " ADD COLUMN IF NOT EXISTS promoted_from VARCHAR(24) CHARACTER SET utf8mb4"
    "   COLLATE utf8mb4_nopad_bin NULL,"
    " ADD UNIQUE KEY IF NOT EXISTS uq_pipeline_promoted (promoted_from),"
    " DROP CONSTRAINT IF EXISTS ck_pipeline_trigger,"
    " ADD CONSTRAINT ck_pipeline_trigger CHECK (trigger_type IN ('release','rollback','promotion'))",
    NULL,
};
/* clang-format on */

static const migration migrations[] = {
    {1, "pipelines, events and servers", v1},
    {2, "simulated cluster, exec jobs, pipeline logs", v2},
    {3, "restarts, alerts, notification outbox", v3},
    {4, "restart claims record when their firing started; events their lock session", v4},
    {5, "identifiers compare byte for byte (utf8mb4_nopad_bin)", v5},
    {6, "external builds: job handle, submit count, one cancel claim", v6},
    {7, "indexes for every query of the scans and oopsctl, and for retention", v7},
    {8, "a transition in one round trip: the procedure oops_transition", v8},
    {9, "the fleet page: servers publish their health, policy and version", v9},
    {10, "scans read their free candidates in (status, created_at) order", v10},
    {11, "transitions fenced by the driver's name lock too: oops_transition2", v11},
    {12, "release safety: holds, overrides, automatic rollbacks, deploy slots", v12},
    {13, "operators: who acted and why (event actor, reason; operator_action)", v13},
    {14, "notifications: a queue per route (notify_route, notify_pending, outbox.routed)", v14},
    {15, "canary releases: steps, weights, measurements (canary_measurement, sim_traffic)", v15},
    {16, "approvals: how many persons approved a release, and who (pipeline.approvals)", v16},
    {17, "promotion: a release made from another (pipeline.promoted_from, unique)", v17},
};

#define NMIGRATIONS (sizeof migrations / sizeof migrations[0])

int schema_latest(void) { return migrations[NMIGRATIONS - 1].version; }

static const char create_version_table[] =
    "CREATE TABLE IF NOT EXISTS schema_version ("
    " version INT NOT NULL PRIMARY KEY,"
    " description VARCHAR(255) NOT NULL,"
    " applied_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";

/* Reads only (SELECT): the run-time account, which may not create tables,
 * can ask too. No version table yet is an empty database: 0. */
int schema_current(db_conn *c, char *err, size_t errlen)
{
    db_result *r = NULL;
    unsigned rc = db_exec(c, "SELECT COALESCE(MAX(version), 0) FROM schema_version", NULL, 0, &r,
                          err, errlen);
    if (rc == DB_ER_NO_SUCH_TABLE)
        return 0;
    if (rc)
        return -1;
    int v = (int)db_get_int(r, 0, 0, 0);
    db_result_free(r);
    return v;
}

static unsigned apply(db_conn *c, const migration *m, char *err, size_t errlen)
{
    char e[512];
    for (const char *const *s = m->statements; *s; s++) {
        unsigned rc = db_exec(c, *s, NULL, 0, NULL, e, sizeof e);
        if (rc) {
            snprintf(err, errlen, "migration %d (%s): %s", m->version, m->what, e);
            return rc;
        }
    }
    db_value p[] = {db_int(m->version), db_text(m->what)};
    unsigned rc = db_exec(c, "INSERT INTO schema_version (version, description) VALUES (?, ?)", p,
                          2, NULL, e, sizeof e);
    if (rc)
        snprintf(err, errlen, "migration %d (%s): recording it: %s", m->version, m->what, e);
    return rc;
}

unsigned schema_migrate(db_conn *c, int *applied, char *err, size_t errlen)
{
    char e[512];
    db_result *r = NULL;
    int n = 0;
    if (applied)
        *applied = 0;
    /* Wait (bounded) for another runner rather than racing it. */
    unsigned rc =
        db_exec(c, "SELECT GET_LOCK('" OOPS_LOCK_MIGRATE "', 60)", NULL, 0, &r, e, sizeof e);
    if (rc) {
        snprintf(err, errlen, "taking the migrate lock: %s", e);
        return rc;
    }
    long long got = db_get_int(r, 0, 0, 0);
    db_result_free(r);
    if (got != 1) {
        snprintf(err, errlen,
                 "another runner held the migrate lock (" OOPS_LOCK_MIGRATE ") for 60s");
        return 1205; /* ER_LOCK_WAIT_TIMEOUT */
    }
    /* The error number goes back as it is: an account that may not create
     * tables (the run-time grants) is told from one that cannot reach them. */
    if ((rc = db_exec(c, create_version_table, NULL, 0, NULL, e, sizeof e))) {
        snprintf(err, errlen, "creating schema_version: %s", e);
        goto out;
    }
    int cur = schema_current(c, e, sizeof e);
    if (cur < 0) {
        snprintf(err, errlen, "reading schema_version: %s", e);
        rc = db_last_error(c) ? db_last_error(c) : 1;
        goto out;
    }
    if (cur > schema_latest()) {
        snprintf(err, errlen,
                 "database schema is version %d, newer than this binary knows (%d): upgrade oopsd",
                 cur, schema_latest());
        rc = 1;
        goto out;
    }
    for (size_t i = 0; i < NMIGRATIONS; i++) {
        if (migrations[i].version <= cur)
            continue;
        rc = apply(c, &migrations[i], err, errlen);
        if (rc)
            goto out;
        n++;
    }
    if (applied)
        *applied = n;
out:
    db_exec(c, "SELECT RELEASE_LOCK('" OOPS_LOCK_MIGRATE "')", NULL, 0, NULL, e, sizeof e);
    return rc;
}
