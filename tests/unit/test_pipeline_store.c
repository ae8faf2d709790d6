/* The pipeline store and its state machine against the real MariaDB. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <cmocka.h>
#include <mysql.h>

#include "pipeline_store.h"
#include "testdb.h"

static int setup(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char err[512];
    assert_int_equal(schema_migrate(c, NULL, err, sizeof err), 0);
    db_close(c);
    return 0;
}

static void create_app(db_conn *c, const char *app, const char *env, char id[25])
{
    char err[512];
    pipeline_new n = {.namespace = "shop", .application = app, .environment = env,
                      .artifact = "v1", .actor = "test"};
    assert_int_equal(pipeline_store_create(c, &n, id, err, sizeof err), 0);
}

static long long events_of(db_conn *c, const char *id, const char *to)
{
    db_value p[] = {db_text(id), db_text(to)};
    return testdb_int(c, "SELECT COUNT(*) FROM pipeline_event WHERE pipeline_id = ? AND to_status = ?",
                      p, 2);
}

static void every_allowed_transition_is_in_the_table_and_nothing_else(void **state)
{
    (void)state;
    static const char *allowed[] = {
        "INITIALIZED>RUNNING", "INITIALIZED>DEPLOYING", "INITIALIZED>ERROR", "INITIALIZED>STOPPED",
        "RUNNING>BUILD_SUCCEEDED", "RUNNING>DEPLOYING", "RUNNING>ERROR", "RUNNING>STOPPED",
        "BUILD_SUCCEEDED>DEPLOYING", "BUILD_SUCCEEDED>STOPPED",
        "DEPLOYING>ROLLING_OUT", "DEPLOYING>ERROR", "DEPLOYING>STOPPED",
        "ROLLING_OUT>SUCCEEDED", "ROLLING_OUT>ERROR",
    };
    int count = 0;
    for (int f = 0; f < PS__COUNT; f++) {
        for (int t = 0; t < PS__COUNT; t++) {
            char key[64];
            snprintf(key, sizeof key, "%s>%s", pipeline_status_name(f), pipeline_status_name(t));
            bool listed = false;
            for (size_t i = 0; i < sizeof allowed / sizeof *allowed; i++)
                listed |= strcmp(allowed[i], key) == 0;
            assert_int_equal(pipeline_transition_allowed(f, t), listed);
            count += listed;
        }
    }
    assert_int_equal(count, 15);
    assert_true(pipeline_status_terminal(PS_SUCCEEDED) && pipeline_status_terminal(PS_ERROR) &&
                pipeline_status_terminal(PS_STOPPED));
    assert_false(pipeline_status_unfinished(PS_BUILD_SUCCEEDED));
    assert_string_equal(pipeline_event_type(PS_ERROR), "FAILED");
    assert_string_equal(pipeline_event_type(PS_INITIALIZED), "CREATED");
}

static void an_illegal_transition_sends_no_sql(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char id[25], err[512];
    create_app(c, "illegal", "prod", id);
    uint64_t before = db_statement_count(c);
    int rc = pipeline_store_transition(c, id, PS_INITIALIZED, PS_SUCCEEDED, "x", "s1", NULL, 0, err,
                                       sizeof err);
    assert_int_equal(rc, PSTORE_ILLEGAL);
    assert_string_equal(err, "illegal transition INITIALIZED -> SUCCEEDED");
    assert_int_equal(db_statement_count(c), before);
    rc = pipeline_store_transition(c, id, PS_ROLLING_OUT, PS_STOPPED, "x", "s1", NULL, 0, err, sizeof err);
    assert_int_equal(rc, PSTORE_ILLEGAL);
    assert_int_equal(db_statement_count(c), before);
    db_close(c);
}

static void a_transition_records_its_event_time_and_driver(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char id[25], err[512];
    create_app(c, "record", "prod", id);
    assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_RUNNING, "Building.", "s1",
                                               NULL, 0, err, sizeof err), 1);
    pipeline p;
    assert_int_equal(pipeline_store_get(c, id, &p, err, sizeof err), 1);
    assert_int_equal(p.status, PS_RUNNING);
    assert_string_equal(p.driven_by, "s1");
    assert_string_equal(p.message, "Building.");
    assert_true(strcmp(p.status_changed_at, p.created_at) > 0);
    pipeline_clear(&p);
    pipeline_event_row *ev;
    size_t n;
    assert_int_equal(pipeline_store_events(c, id, &ev, &n, err, sizeof err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(ev[0].event_type, "CREATED");
    assert_null(ev[0].from_status);
    assert_string_equal(ev[1].event_type, "BUILDING");
    assert_string_equal(ev[1].from_status, "INITIALIZED");
    assert_string_equal(ev[1].to_status, "RUNNING");
    assert_string_equal(ev[1].server, "s1");
    pipeline_events_free(ev, n);
    /* From a status it is no longer in: 0 rows, no event. */
    assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_ERROR, "late", "s2", NULL, 0,
                                               err, sizeof err), 0);
    assert_int_equal(events_of(c, id, "ERROR"), 0);
    assert_int_equal(pipeline_store_transition(c, "nosuchid", PS_INITIALIZED, PS_ERROR, "x", "s2",
                                               NULL, 0, err, sizeof err), 0);
    db_close(c);
}

/* A fenced transition counts only while the given lock session holds the
 * pipeline's lock: a server that lost its session (frozen past its timeout,
 * cut off) and does not know it yet changes nothing. */
static void a_fenced_transition_needs_the_lock_held_by_that_session(void **state)
{
    (void)state;
    db_conn *c = testdb_open(), *holder = testdb_open();
    char id[25], name[64], err[512];
    create_app(c, "fence", "prod", id);
    snprintf(name, sizeof name, "oops:pipeline:%s", id);
    uint64_t mine = db_connection_id(holder), other = db_connection_id(c);
    /* Nobody holds it: refused, no event. */
    assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_RUNNING, "b", "s1", NULL,
                                               mine, err, sizeof err), 0);
    assert_int_equal(events_of(c, id, "RUNNING"), 0);
    db_value n[] = {db_text(name)};
    assert_int_equal(testdb_int(holder, "SELECT GET_LOCK(?, 0)", n, 1), 1);
    /* Held by another session: refused. */
    assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_RUNNING, "b", "s2", NULL,
                                               other, err, sizeof err), 0);
    /* Held by this session: made, and the event records the session. */
    assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_RUNNING, "b", "s1", NULL,
                                               mine, err, sizeof err), 1);
    db_value e[] = {db_text(id)};
    assert_int_equal(testdb_int(c, "SELECT lock_session FROM pipeline_event WHERE pipeline_id = ? "
                                   "AND to_status = 'RUNNING'", e, 1),
                     (long long)mine);
    /* Released (the session's end does the same): refused again. */
    assert_int_equal(testdb_int(holder, "SELECT RELEASE_LOCK(?)", n, 1), 1);
    assert_int_equal(pipeline_store_transition(c, id, PS_RUNNING, PS_ERROR, "x", "s1", NULL, mine,
                                               err, sizeof err), 0);
    /* An operator's change (no session) is not fenced. */
    assert_int_equal(pipeline_store_transition(c, id, PS_RUNNING, PS_STOPPED, "s", NULL, "op", 0,
                                               err, sizeof err), 1);
    assert_int_equal(testdb_int(c, "SELECT COUNT(*) FROM pipeline_event WHERE pipeline_id = ? "
                                   "AND to_status = 'STOPPED' AND lock_session IS NULL", e, 1), 1);
    db_close(holder);
    db_close(c);
}

typedef struct race {
    pthread_barrier_t *go;
    const char *id;
    const char *server;
    int result;
    char app[32];
    char created[25];
} race;

static void *race_transition(void *arg)
{
    race *r = arg;
    db_conn *c = testdb_open();
    char err[512];
    pthread_barrier_wait(r->go);
    r->result = pipeline_store_transition(c, r->id, PS_RUNNING, PS_DEPLOYING, "Deploying.",
                                          r->server, NULL, 0, err, sizeof err);
    db_close(c);
    return NULL;
}

static void two_connections_race_one_transition_and_exactly_one_wins(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char err[512];
    for (int round = 0; round < 20; round++) {
        char id[25], app[32];
        snprintf(app, sizeof app, "race%d", round);
        create_app(c, app, "prod", id);
        assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_RUNNING, "b", "s0",
                                                   NULL, 0, err, sizeof err), 1);
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        race a = {.go = &go, .id = id, .server = "A"}, b = {.go = &go, .id = id, .server = "B"};
        pthread_t ta, tb;
        pthread_create(&ta, NULL, race_transition, &a);
        pthread_create(&tb, NULL, race_transition, &b);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        pthread_barrier_destroy(&go);
        assert_int_equal(a.result + b.result, 1);
        assert_true(a.result >= 0 && b.result >= 0);
        assert_int_equal(events_of(c, id, "DEPLOYING"), 1);
        db_value p[] = {db_text(id)};
        db_result *r = testdb_q(c, "SELECT p.driven_by, e.server FROM pipeline p JOIN pipeline_event e"
                                   " ON e.pipeline_id = p.id AND e.to_status = 'DEPLOYING' WHERE p.id = ?",
                                p, 1);
        assert_string_equal(db_get(r, 0, 0), a.result ? "A" : "B");
        assert_string_equal(db_get(r, 0, 1), a.result ? "A" : "B");
        db_result_free(r);
    }
    db_close(c);
}

static void *race_create(void *arg)
{
    race *r = arg;
    db_conn *c = testdb_open();
    char err[512];
    pipeline_new n = {.namespace = "shop", .application = r->app, .environment = "prod",
                      .actor = r->server};
    pthread_barrier_wait(r->go);
    r->result = pipeline_store_create(c, &n, r->created, err, sizeof err);
    db_close(c);
    return NULL;
}

static void concurrent_creates_for_one_app_and_env_leave_exactly_one(void **state)
{
    (void)state;
    enum { N = 6 };
    db_conn *c = testdb_open();
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N);
    race r[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        r[i] = (race){.go = &go, .server = "racer"};
        snprintf(r[i].app, sizeof r[i].app, "together");
        pthread_create(&t[i], NULL, race_create, &r[i]);
    }
    int ok = 0, exists = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        ok += r[i].result == 0;
        exists += r[i].result == PSTORE_EXISTS;
    }
    pthread_barrier_destroy(&go);
    assert_int_equal(ok, 1);
    assert_int_equal(exists, N - 1);
    assert_int_equal(testdb_int(c, "SELECT COUNT(*) FROM pipeline WHERE application = 'together'",
                                NULL, 0), 1);
    db_close(c);
}

static void a_finished_pipeline_frees_its_app_and_env_for_the_next(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char id[25], id2[25], err[512];
    create_app(c, "again", "prod", id);
    pipeline_new n = {.namespace = "shop", .application = "again", .environment = "prod",
                      .actor = "t"};
    assert_int_equal(pipeline_store_create(c, &n, id2, err, sizeof err), PSTORE_EXISTS);
    assert_non_null(strstr(err, "shop/again in prod"));
    n.environment = "staging"; /* another environment is independent */
    assert_int_equal(pipeline_store_create(c, &n, id2, err, sizeof err), 0);
    n.environment = "prod";
    assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_STOPPED, "s", NULL, "t", 0,
                                               err, sizeof err), 1);
    assert_int_equal(pipeline_store_create(c, &n, id2, err, sizeof err), 0);
    db_close(c);
}

static void a_build_succeeded_pipeline_cannot_deploy_beside_an_unfinished_one(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char a[25], b[25], err[512];
    create_app(c, "manual", "prod", a);
    assert_int_equal(pipeline_store_transition(c, a, PS_INITIALIZED, PS_RUNNING, "", "s", NULL, 0, err, sizeof err), 1);
    assert_int_equal(pipeline_store_transition(c, a, PS_RUNNING, PS_BUILD_SUCCEEDED, "", "s", NULL, 0, err, sizeof err), 1);
    create_app(c, "manual", "prod", b); /* BUILD_SUCCEEDED is not unfinished */
    int rc = pipeline_store_transition(c, a, PS_BUILD_SUCCEEDED, PS_DEPLOYING, "", "s", NULL, 0, err, sizeof err);
    assert_int_equal(rc, PSTORE_EXISTS);
    pipeline p;
    assert_int_equal(pipeline_store_get(c, a, &p, err, sizeof err), 1);
    assert_int_equal(p.status, PS_BUILD_SUCCEEDED); /* rolled back, no event */
    pipeline_clear(&p);
    assert_int_equal(events_of(c, a, "DEPLOYING"), 0);
    db_close(c);
}

static void pipelines_in_a_status_longer_than_n_seconds_on_the_database_clock(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char old[25], fresh[25], err[512];
    create_app(c, "stale", "prod", old);
    create_app(c, "fresh", "prod", fresh);
    for (int i = 0; i < 2; i++) {
        const char *id = i ? fresh : old;
        assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_RUNNING, "", "s", NULL, 0, err, sizeof err), 1);
        assert_int_equal(pipeline_store_transition(c, id, PS_RUNNING, PS_DEPLOYING, "", "s", NULL, 0, err, sizeof err), 1);
    }
    /* Age one of them by moving its status_changed_at back ten minutes. */
    db_value p[] = {db_text(old)};
    db_result_free(testdb_q(c, "UPDATE pipeline SET status_changed_at = NOW(6) - INTERVAL 601 SECOND"
                               " WHERE id = ?", p, 1));
    pipeline *v;
    size_t n;
    assert_int_equal(pipeline_store_list(c, 1u << PS_DEPLOYING, 600, 0, &v, &n, err, sizeof err), 0);
    assert_int_equal(n, 1);
    assert_string_equal(v[0].id, old);
    assert_true(v[0].status_age_s >= 600);
    pipeline_list_free(v, n);
    assert_int_equal(pipeline_store_list(c, 1u << PS_DEPLOYING, 0, 0, &v, &n, err, sizeof err), 0);
    int seen = 0;
    for (size_t i = 0; i < n; i++)
        seen += !strcmp(v[i].id, old) || !strcmp(v[i].id, fresh);
    assert_int_equal(seen, 2);
    pipeline_list_free(v, n);
    db_close(c);
}

static void bad_fields_are_refused_before_insert(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char id[25], err[512];
    pipeline_new n = {.namespace = "shop", .application = "", .environment = "prod"};
    assert_int_equal(pipeline_store_create(c, &n, id, err, sizeof err), PSTORE_BAD);
    assert_string_equal(err, "application is empty");
    n.application = "json";
    n.source = "{not json";
    assert_int_equal(pipeline_store_create(c, &n, id, err, sizeof err), PSTORE_BAD);
    assert_string_equal(err, "source is not valid JSON");
    n.source = "{\"git\":\"https://example.invalid/shop.git\",\"branch\":\"main\"}";
    assert_int_equal(pipeline_store_create(c, &n, id, err, sizeof err), 0);
    db_close(c);
}

static void manual_deploy_request_is_conditional(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char id[25], err[512];
    create_app(c, "request", "prod", id);
    assert_int_equal(pipeline_store_request_deploy(c, id, err, sizeof err), 0); /* INITIALIZED */
    assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_RUNNING, "", "s", NULL, 0, err, sizeof err), 1);
    assert_int_equal(pipeline_store_transition(c, id, PS_RUNNING, PS_BUILD_SUCCEEDED, "", "s", NULL, 0, err, sizeof err), 1);
    assert_int_equal(pipeline_store_request_deploy(c, id, err, sizeof err), 1);
    assert_int_equal(pipeline_store_request_deploy(c, id, err, sizeof err), 0); /* once */
    db_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_allowed_transition_is_in_the_table_and_nothing_else),
        cmocka_unit_test(an_illegal_transition_sends_no_sql),
        cmocka_unit_test(a_transition_records_its_event_time_and_driver),
        cmocka_unit_test(a_fenced_transition_needs_the_lock_held_by_that_session),
        cmocka_unit_test(two_connections_race_one_transition_and_exactly_one_wins),
        cmocka_unit_test(concurrent_creates_for_one_app_and_env_leave_exactly_one),
        cmocka_unit_test(a_finished_pipeline_frees_its_app_and_env_for_the_next),
        cmocka_unit_test(a_build_succeeded_pipeline_cannot_deploy_beside_an_unfinished_one),
        cmocka_unit_test(pipelines_in_a_status_longer_than_n_seconds_on_the_database_clock),
        cmocka_unit_test(bad_fields_are_refused_before_insert),
        cmocka_unit_test(manual_deploy_request_is_conditional),
    };
    int rc = cmocka_run_group_tests(tests, setup, NULL);
    mysql_library_end();
    return rc;
}
