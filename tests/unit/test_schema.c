/* schema: versioned migrations, against the real MariaDB of tests/run.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "schema.h"
#include "testdb.h"

/* Every table the migrations create (and the version table). */
static const char *const tables[] = {
    "pipeline",          "pipeline_event",     "server",          "sim_job",
    "sim_call",          "exec_job",           "pipeline_log",    "restart_run",
    "restart_watermark", "alert_state",        "sim_metric",      "outbox",
    "schema_version",    "deploy_slot",        "operator_action", "notify_route",
    "notify_pending",    "canary_measurement", "sim_traffic",     "sim_artifact",
};
#define NTABLES (sizeof tables / sizeof tables[0])

static long long table_count(db_conn *c)
{
    return testdb_int(
        c, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()", NULL,
        0);
}

/* An empty database: drop every table of this test's own database. Table
 * names come from the server and are checked before they go into the DROP
 * (an identifier cannot be a bound parameter). */
static int empty_database(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    db_result *r = testdb_q(
        c, "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()", NULL,
        0);
    for (size_t i = 0; i < r->nrows; i++) {
        const char *t = db_get(r, i, 0);
        if (strspn(t, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(t))
            abort();
        char sql[128];
        snprintf(sql, sizeof sql, "DROP TABLE `%s`", t);
        db_result_free(testdb_q(c, sql, NULL, 0));
    }
    db_result_free(r);
    if (table_count(c) != 0)
        abort();
    db_close(c);
    return 0;
}

static bool table_exists(db_conn *c, const char *name)
{
    db_value p[] = {db_text(name)};
    return testdb_int(c,
                      "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = "
                      "DATABASE() AND table_name = ?",
                      p, 1) == 1;
}

/* From another session: is the migrate lock free? */
static bool migrate_lock_free(void)
{
    db_conn *spy = testdb_open();
    bool free_ = testdb_int(spy, "SELECT IS_FREE_LOCK('oops:migrate')", NULL, 0) == 1;
    db_close(spy);
    return free_;
}

static void an_empty_database_migrates_to_the_latest(void **state)
{
    (void)state;
    char err[512] = "";
    db_conn *c = testdb_open();
    assert_true(schema_latest() >= 5);
    assert_int_equal(schema_current(c, err, sizeof err), 0);
    int applied = -1;
    unsigned rc = schema_migrate(c, &applied, err, sizeof err);
    if (rc)
        fail_msg("schema_migrate: %u %s", rc, err);
    assert_int_equal(applied, schema_latest());
    assert_int_equal(schema_current(c, err, sizeof err), schema_latest());
    for (size_t i = 0; i < NTABLES; i++)
        if (!table_exists(c, tables[i]))
            fail_msg("table %s missing after migrating", tables[i]);
    assert_int_equal(table_count(c), NTABLES);
    assert_true(migrate_lock_free()); /* released at the end */
    /* The tables work: a pipeline can be written and read back. */
    db_result_free(testdb_q(c,
                            "INSERT INTO pipeline (id, namespace, application, environment, status)"
                            " VALUES ('abc', 'ns', 'app', 'prod', 'INITIALIZED')",
                            NULL, 0));
    assert_int_equal(
        testdb_int(c, "SELECT COUNT(*) FROM pipeline WHERE unfinished_key = 'ns/app/prod'", NULL,
                   0),
        1);
    db_close(c);
}

/* Migration 7: the indexes the scans, oopsctl and retention read through
 * (tests/integration/explain.sh proves they are used), each with its columns
 * in order. They are additive: a schema-6 server's statements still run. */
static void migration_7_adds_the_history_indexes(void **state)
{
    (void)state;
    char err[512] = "";
    db_conn *c = testdb_open();
    if (schema_migrate(c, NULL, err, sizeof err))
        fail_msg("schema_migrate: %s", err);
    static const char *const want[][2] = {
        {"pipeline", "ix_pipeline_status_changed:status,status_changed_at"},
        {"pipeline", "ix_pipeline_created:created_at"},
        {"pipeline", "ix_pipeline_app_status:namespace,application,environment,status,"
                     "status_changed_at"},
        {"pipeline_event", "ix_event_created:created_at"},
        {"pipeline_event", "ix_event_pipeline:pipeline_id,id"},
        {"pipeline_log", "ix_pipeline_log_created:created_at"},
        {"pipeline_log", "ix_pipeline_log:pipeline_id,id"},
        {"outbox", "ix_outbox_delivered:delivered_at,created_at"},
        {"outbox", "ix_outbox_ref:ref_id"},
        {"sim_call", "ix_sim_call_created:created_at"},
        {"sim_job", "ix_sim_job_open:kind,outcome,ready_at"},
        {"restart_run", "ix_restart_run_unfinished:finished_at"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        db_value p[] = {db_text(want[i][0]), db_text(want[i][1])};
        if (testdb_int(c,
                       "SELECT COUNT(*) FROM (SELECT CONCAT(index_name, ':', GROUP_CONCAT("
                       "column_name ORDER BY seq_in_index)) AS k FROM information_schema.statistics"
                       " WHERE table_schema = DATABASE() AND table_name = ? GROUP BY index_name) i"
                       " WHERE k = ?",
                       p, 2) != 1)
            fail_msg("%s: index %s missing", want[i][0], want[i][1]);
    }
    /* Applying it again changes nothing and fails on nothing (IF NOT EXISTS). */
    db_result_free(testdb_q(c, "DELETE FROM schema_version WHERE version >= 7", NULL, 0));
    int applied = -1;
    if (schema_migrate(c, &applied, err, sizeof err))
        fail_msg("re-applying migration 7: %s", err);
    assert_int_equal(applied, schema_latest() - 6);
    assert_int_equal(schema_current(c, err, sizeof err), schema_latest());
    db_close(c);
}

/* Migration 8: the procedure a transition is one CALL of; it runs with the
 * caller's rights, and applying the migration again replaces it. */
static void migration_8_creates_the_transition_procedure(void **state)
{
    (void)state;
    char err[512] = "";
    db_conn *c = testdb_open();
    if (schema_migrate(c, NULL, err, sizeof err))
        fail_msg("schema_migrate: %s", err);
    const char *q = "SELECT security_type FROM information_schema.routines WHERE routine_schema "
                    "= DATABASE() AND routine_name = 'oops_transition' AND routine_type = "
                    "'PROCEDURE'";
    db_result *r = testdb_q(c, q, NULL, 0);
    assert_int_equal(r->nrows, 1);
    assert_string_equal(db_get(r, 0, 0), "INVOKER");
    db_result_free(r);
    db_result_free(testdb_q(c, "DELETE FROM schema_version WHERE version >= 8", NULL, 0));
    int applied = -1;
    if (schema_migrate(c, &applied, err, sizeof err))
        fail_msg("re-applying migration 8: %s", err);
    assert_int_equal(applied, schema_latest() - 7);
    r = testdb_q(c, q, NULL, 0);
    assert_int_equal(r->nrows, 1);
    db_result_free(r);
    db_close(c);
}

/* One row per migration, 1..latest, each with what it did and when. */
static void the_version_table_records_each_migration(void **state)
{
    (void)state;
    char err[512] = "";
    db_conn *c = testdb_open();
    assert_int_equal(schema_migrate(c, NULL, err, sizeof err), 0); /* applied may be NULL */
    db_result *r = testdb_q(
        c, "SELECT version, description, applied_at FROM schema_version ORDER BY version", NULL, 0);
    assert_int_equal(r->nrows, (size_t)schema_latest());
    for (size_t i = 0; i < r->nrows; i++) {
        assert_int_equal(db_get_int(r, i, 0, -1), (long long)i + 1);
        assert_non_null(db_get(r, i, 1));
        assert_true(strlen(db_get(r, i, 1)) > 5);
        assert_non_null(db_get(r, i, 2));
    }
    db_result_free(r);
    /* The primary key keeps a version from being recorded twice. */
    db_value p[] = {db_int(1), db_text("again")};
    db_result *out = NULL;
    assert_int_equal(db_exec(c, "INSERT INTO schema_version (version, description) VALUES (?, ?)",
                             p, 2, &out, err, sizeof err),
                     DB_ER_DUP_ENTRY);
    db_close(c);
}

static void migrating_twice_changes_nothing(void **state)
{
    (void)state;
    char err[512] = "";
    db_conn *c = testdb_open();
    int applied = -1;
    assert_int_equal(schema_migrate(c, &applied, err, sizeof err), 0);
    assert_int_equal(applied, schema_latest());
    db_result *before = testdb_q(
        c, "SELECT GROUP_CONCAT(version, '@', applied_at ORDER BY version) FROM schema_version",
        NULL, 0);
    long long tables_before = table_count(c);
    for (int round = 0; round < 2; round++) {
        applied = -1;
        assert_int_equal(schema_migrate(c, &applied, err, sizeof err), 0);
        assert_int_equal(applied, 0);
    }
    db_result *after = testdb_q(
        c, "SELECT GROUP_CONCAT(version, '@', applied_at ORDER BY version) FROM schema_version",
        NULL, 0);
    assert_string_equal(db_get(after, 0, 0), db_get(before, 0, 0));
    assert_int_equal(table_count(c), tables_before);
    assert_int_equal(schema_current(c, err, sizeof err), schema_latest());
    db_result_free(before);
    db_result_free(after);
    /* A fresh session sees the same: it is the database that is current. */
    db_conn *c2 = testdb_open();
    applied = -1;
    assert_int_equal(schema_migrate(c2, &applied, err, sizeof err), 0);
    assert_int_equal(applied, 0);
    db_close(c2);
    db_close(c);
}

static void a_newer_database_is_refused_unchanged(void **state)
{
    (void)state;
    char err[512] = "";
    db_conn *c = testdb_open();
    assert_int_equal(schema_migrate(c, NULL, err, sizeof err), 0);
    db_value p[] = {db_int(schema_latest() + 1), db_text("from a newer oopsd")};
    db_result_free(
        testdb_q(c, "INSERT INTO schema_version (version, description) VALUES (?, ?)", p, 2));
    long long tables_before = table_count(c);
    int applied = -1;
    assert_int_not_equal(schema_migrate(c, &applied, err, sizeof err), 0);
    assert_int_equal(applied, 0);
    char want[200];
    snprintf(want, sizeof want,
             "database schema is version %d, newer than this binary knows (%d): upgrade oopsd",
             schema_latest() + 1, schema_latest());
    assert_string_equal(err, want);
    assert_int_equal(schema_current(c, err, sizeof err), schema_latest() + 1);
    assert_int_equal(testdb_int(c, "SELECT COUNT(*) FROM schema_version", NULL, 0),
                     schema_latest() + 1);
    assert_int_equal(table_count(c), tables_before);
    assert_true(migrate_lock_free()); /* released on the error path too */
    db_close(c);
}

/* Sessions of this database waiting in GET_LOCK (state "User lock"). */
static long long lock_waiters(db_conn *c)
{
    return testdb_int(c,
                      "SELECT COUNT(*) FROM information_schema.processlist"
                      " WHERE db = DATABASE() AND state = 'User lock'",
                      NULL, 0);
}

/* Several runners at once, released together while they all wait: each
 * migration is applied exactly once and every runner succeeds. Without the
 * lock, two would create the same tables and record the same version (a
 * duplicate key) at the same time. */
static void concurrent_runners_are_serialised(void **state)
{
    (void)state;
    enum { RUNNERS = 4 };
    char err[512] = "";
    db_conn *holder = testdb_open();
    assert_int_equal(testdb_int(holder, "SELECT GET_LOCK('oops:migrate', 0)", NULL, 0), 1);
    fflush(NULL);
    pid_t pids[RUNNERS];
    int fds[RUNNERS];
    for (int i = 0; i < RUNNERS; i++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) { /* a runner: its own session; reports "rc applied err" */
            close(p[0]);
            db_conn *c = testdb_open();
            int applied = -1;
            char e[512] = "";
            unsigned rc = schema_migrate(c, &applied, e, sizeof e);
            db_close(c);
            dprintf(p[1], "%u %d %s", rc, applied, e);
            _exit(0);
        }
        close(p[1]);
        fds[i] = p[0];
    }
    /* Every runner is waiting for the lock, and none has touched anything. */
    time_t deadline = time(NULL) + 50; /* under GET_LOCK's 60 s */
    while (lock_waiters(holder) < RUNNERS && time(NULL) < deadline)
        usleep(20000);
    long long waiting = lock_waiters(holder), touched = table_count(holder);
    /* Released before asserting, so no runner is left waiting. */
    assert_int_equal(testdb_int(holder, "SELECT RELEASE_LOCK('oops:migrate')", NULL, 0), 1);
    assert_int_equal(waiting, RUNNERS);
    assert_int_equal(touched, 0);

    int total = 0, migrated = 0;
    for (int i = 0; i < RUNNERS; i++) {
        char out[600] = "";
        ssize_t n = 0, k;
        while ((k = read(fds[i], out + n, sizeof out - 1 - (size_t)n)) > 0)
            n += k;
        close(fds[i]);
        int st = 0;
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        unsigned rc = 1;
        int applied = -1;
        if (sscanf(out, "%u %d", &rc, &applied) != 2 || rc != 0)
            fail_msg("runner %d: %s", i, out);
        total += applied;
        migrated += applied > 0;
    }
    /* One runner did all the work; the others found the database current. */
    assert_int_equal(total, schema_latest());
    assert_int_equal(migrated, 1);
    assert_int_equal(testdb_int(holder, "SELECT COUNT(*) FROM schema_version", NULL, 0),
                     schema_latest());
    assert_int_equal(
        testdb_int(holder, "SELECT COUNT(DISTINCT version) FROM schema_version", NULL, 0),
        schema_latest());
    assert_int_equal(schema_current(holder, err, sizeof err), schema_latest());
    assert_true(migrate_lock_free());
    db_close(holder);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(an_empty_database_migrates_to_the_latest, empty_database),
        cmocka_unit_test_setup(the_version_table_records_each_migration, empty_database),
        cmocka_unit_test_setup(migration_7_adds_the_history_indexes, empty_database),
        cmocka_unit_test_setup(migration_8_creates_the_transition_procedure, empty_database),
        cmocka_unit_test_setup(migrating_twice_changes_nothing, empty_database),
        cmocka_unit_test_setup(a_newer_database_is_refused_unchanged, empty_database),
        cmocka_unit_test_setup(concurrent_runners_are_serialised, empty_database),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
