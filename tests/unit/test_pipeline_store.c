/* The pipeline store and its state machine against the real MariaDB; and
 * the pure checks every path that creates or shows a pipeline goes through
 * (names, ids, oopsctl's flags and its terminal-safe text, ctl_args.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <cmocka.h>
#include <mysql.h>

#include "buf.h"
#include "ctl_args.h"
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
    pipeline_new n = {.namespace = "shop",
                      .application = app,
                      .environment = env,
                      .artifact = "v1",
                      .actor = "test"};
    assert_int_equal(pipeline_store_create(c, &n, id, err, sizeof err), 0);
}

static long long events_of(db_conn *c, const char *id, const char *to)
{
    db_value p[] = {db_text(id), db_text(to)};
    return testdb_int(
        c, "SELECT COUNT(*) FROM pipeline_event WHERE pipeline_id = ? AND to_status = ?", p, 2);
}

static void every_allowed_transition_is_in_the_table_and_nothing_else(void **state)
{
    (void)state;
    static const char *allowed[] = {
        "INITIALIZED>RUNNING",     "INITIALIZED>DEPLOYING",   "INITIALIZED>ERROR",
        "INITIALIZED>STOPPED",     "RUNNING>BUILD_SUCCEEDED", "RUNNING>DEPLOYING",
        "RUNNING>ERROR",           "RUNNING>STOPPED",         "BUILD_SUCCEEDED>DEPLOYING",
        "BUILD_SUCCEEDED>STOPPED", "DEPLOYING>ROLLING_OUT",   "DEPLOYING>ERROR",
        "DEPLOYING>STOPPED",       "ROLLING_OUT>SUCCEEDED",   "ROLLING_OUT>ERROR",
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
    rc = pipeline_store_transition(c, id, PS_ROLLING_OUT, PS_STOPPED, "x", "s1", NULL, 0, err,
                                   sizeof err);
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
                                               NULL, 0, err, sizeof err),
                     1);
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
    assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_ERROR, "late", "s2", NULL,
                                               0, err, sizeof err),
                     0);
    assert_int_equal(events_of(c, id, "ERROR"), 0);
    assert_int_equal(pipeline_store_transition(c, "nosuchid", PS_INITIALIZED, PS_ERROR, "x", "s2",
                                               NULL, 0, err, sizeof err),
                     0);
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
                                               mine, err, sizeof err),
                     0);
    assert_int_equal(events_of(c, id, "RUNNING"), 0);
    db_value n[] = {db_text(name)};
    assert_int_equal(testdb_int(holder, "SELECT GET_LOCK(?, 0)", n, 1), 1);
    /* Held by another session: refused. */
    assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_RUNNING, "b", "s2", NULL,
                                               other, err, sizeof err),
                     0);
    /* Held by the session of that number, which is not s1's (it does not hold
     * s1's name lock): a stale id after a database restart, numbered again
     * for another server's lock session. Refused. */
    assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_RUNNING, "b", "s1", NULL,
                                               mine, err, sizeof err),
                     0);
    db_value s1[] = {db_text("oops:server:s1")};
    assert_int_equal(testdb_int(holder, "SELECT GET_LOCK(?, 0)", s1, 1), 1);
    /* Held by s1's session: made, and the event records the session. */
    assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_RUNNING, "b", "s1", NULL,
                                               mine, err, sizeof err),
                     1);
    db_value e[] = {db_text(id)};
    assert_int_equal(testdb_int(c,
                                "SELECT lock_session FROM pipeline_event WHERE pipeline_id = ? "
                                "AND to_status = 'RUNNING'",
                                e, 1),
                     (long long)mine);
    /* Released (the session's end does the same): refused again. */
    assert_int_equal(testdb_int(holder, "SELECT RELEASE_LOCK(?)", n, 1), 1);
    assert_int_equal(pipeline_store_transition(c, id, PS_RUNNING, PS_ERROR, "x", "s1", NULL, mine,
                                               err, sizeof err),
                     0);
    /* An operator's change (no session) is not fenced. */
    assert_int_equal(pipeline_store_transition(c, id, PS_RUNNING, PS_STOPPED, "s", NULL, "op", 0,
                                               err, sizeof err),
                     1);
    assert_int_equal(testdb_int(c,
                                "SELECT COUNT(*) FROM pipeline_event WHERE pipeline_id = ? "
                                "AND to_status = 'STOPPED' AND lock_session IS NULL",
                                e, 1),
                     1);
    db_close(holder);
    db_close(c);
}

/* A batch whose driver holds every lock (the UPDATE of all at once, no
 * locking read first), then one where one lock is not held (rolled back,
 * then the locking read): each made one has its own event, with its message
 * and status, and one outbox row naming that event. */
static void every_one_of_a_batch_made(db_conn *c, db_conn *holder, uint64_t mine,
                                      const char *prefix)
{
    enum { A = 5 };
    char all_ids[A][25], app[A][32], name[256];
    pipeline_transition_req a[A];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < A; i++) {
            snprintf(app[i], sizeof app[i], "%s%d-%d", prefix, round, i);
            create_app(c, app[i], "prod", all_ids[i]);
            snprintf(name, sizeof name, "oops:pipeline:%s", all_ids[i]);
            db_value n[] = {db_text(name)};
            if (round == 0 || i != 1) /* round 1: nobody holds 1's lock */
                assert_int_equal(testdb_int(holder, "SELECT GET_LOCK(?, 0)", n, 1), 1);
            a[i] = (pipeline_transition_req){.id = all_ids[i],
                                             .from = PS_INITIALIZED,
                                             .to = i == 2 ? PS_ERROR : PS_RUNNING,
                                             .message = app[i]};
        }
        long long outbox1 = testdb_int(c, "SELECT COUNT(*) FROM outbox", NULL, 0);
        pipeline_store_transitions(c, a, A, "s1", "s1", mine);
        int made = round == 0 ? A : A - 1;
        assert_int_equal(testdb_int(c, "SELECT COUNT(*) FROM outbox", NULL, 0) - outbox1, made);
        for (int i = 0; i < A; i++) {
            int want = round == 1 && i == 1 ? 0 : 1;
            assert_int_equal(a[i].rc, want);
            db_value e[] = {db_text(all_ids[i]), db_text(a[i].message),
                            db_text(pipeline_status_name(a[i].to))};
            assert_int_equal(
                testdb_int(c,
                           "SELECT COUNT(*) FROM pipeline_event e JOIN outbox o ON "
                           "o.ref_id = e.id AND o.event_id = CONCAT('pipeline-event-', "
                           "e.id) JOIN pipeline p ON p.id = e.pipeline_id "
                           "AND p.status = e.to_status AND p.message = e.message "
                           "WHERE e.pipeline_id = ? AND e.message = ? AND e.to_status = ?",
                           e, 3),
                want);
        }
    }
}

/* Several transitions in one transaction (pipeline_store_transitions): each
 * made exactly when it would be made alone — in its `from` status, its lock
 * held by the fencing session — with one event and one outbox row for each
 * made; the others change nothing. */
static void a_batch_of_transitions_makes_each_as_alone_would(void **state)
{
    (void)state;
    db_conn *c = testdb_open(), *holder = testdb_open();
    enum { N = 9 };
    char ids[N][25], name[256], err[512];
    uint64_t mine = db_connection_id(holder);
    db_value s1[] = {db_text("oops:server:s1")};
    assert_int_equal(testdb_int(holder, "SELECT GET_LOCK(?, 0)", s1, 1), 1);
    for (int i = 0; i < N; i++) {
        char app[32];
        snprintf(app, sizeof app, "batch%d", i);
        create_app(c, app, "prod", ids[i]);
        snprintf(name, sizeof name, "oops:pipeline:%s", ids[i]);
        db_value n[] = {db_text(name)};
        if (i != 3) /* 3: nobody holds its lock */
            assert_int_equal(testdb_int(holder, "SELECT GET_LOCK(?, 0)", n, 1), 1);
    }
    /* 5 has moved on already: not in its `from` any more. */
    assert_int_equal(pipeline_store_transition(c, ids[5], PS_INITIALIZED, PS_RUNNING, "b", "s1",
                                               NULL, mine, err, sizeof err),
                     1);
    pipeline_transition_req v[N];
    for (int i = 0; i < N; i++)
        v[i] = (pipeline_transition_req){
            .id = ids[i], .from = PS_INITIALIZED, .to = PS_RUNNING, .message = "Build started."};
    v[7].to = PS_ERROR;
    v[7].message = "it's \"quoted\"";
    db_value cnt[] = {db_text("s1")};
    long long outbox0 = testdb_int(c, "SELECT COUNT(*) FROM outbox", NULL, 0);
    long long events0 =
        testdb_int(c, "SELECT COUNT(*) FROM pipeline_event WHERE server = ?", cnt, 1);
    pipeline_store_transitions(c, v, N, "s1", "s1", mine);
    for (int i = 0; i < N; i++) {
        int want = i == 3 || i == 5 ? 0 : 1;
        assert_int_equal(v[i].rc, want);
        pipeline p = {0};
        assert_int_equal(pipeline_store_get(c, ids[i], &p, err, sizeof err), 1);
        assert_string_equal(pipeline_status_name(p.status), i == 3   ? "INITIALIZED"
                                                            : i == 7 ? "ERROR"
                                                                     : "RUNNING");
        if (want) {
            assert_string_equal(p.message, v[i].message);
            assert_string_equal(p.driven_by, "s1");
        }
        pipeline_clear(&p);
    }
    /* One event and one notification per transition made (7), each event's
     * own, with the session that fenced it. */
    assert_int_equal(
        testdb_int(c, "SELECT COUNT(*) FROM pipeline_event WHERE server = ?", cnt, 1) - events0, 7);
    assert_int_equal(testdb_int(c, "SELECT COUNT(*) FROM outbox", NULL, 0) - outbox0, 7);
    for (int i = 0; i < N; i++) {
        if (i == 3 || i == 5)
            continue;
        db_value e[] = {db_text(ids[i])};
        assert_int_equal(testdb_int(c,
                                    "SELECT COUNT(*) FROM pipeline_event e JOIN outbox o ON "
                                    "o.ref_id = e.id AND o.event_id = CONCAT('pipeline-event-', "
                                    "e.id) WHERE e.pipeline_id = ? AND e.from_status = "
                                    "'INITIALIZED' AND e.server = 's1'",
                                    e, 1),
                         1);
    }
    db_value e7[] = {db_text(ids[7])};
    assert_int_equal(testdb_int(c,
                                "SELECT lock_session FROM pipeline_event WHERE pipeline_id = ? "
                                "AND to_status = 'ERROR' AND event_type = 'FAILED' "
                                "AND message = 'it''s \"quoted\"'",
                                e7, 1),
                     (long long)mine);
    /* Fenced by a session that holds their locks but not the driver's name
     * lock (s9's): a number that is another server's session now. Nothing made. */
    char other_ids[2][25];
    pipeline_transition_req o[2];
    for (int i = 0; i < 2; i++) {
        char app[32];
        snprintf(app, sizeof app, "batchother%d", i);
        create_app(c, app, "prod", other_ids[i]);
        snprintf(name, sizeof name, "oops:pipeline:%s", other_ids[i]);
        db_value n[] = {db_text(name)};
        assert_int_equal(testdb_int(holder, "SELECT GET_LOCK(?, 0)", n, 1), 1);
        o[i] = (pipeline_transition_req){
            .id = other_ids[i], .from = PS_INITIALIZED, .to = PS_RUNNING, .message = "b"};
    }
    pipeline_store_transitions(c, o, 2, "s9", "s9", mine);
    assert_int_equal(o[0].rc, 0);
    assert_int_equal(o[1].rc, 0);
    every_one_of_a_batch_made(c, holder, mine, "batchall");
    /* A batch where one would make a second unfinished pipeline: made one
     * by one, that one answers PSTORE_EXISTS and the others are made. */
    char again[25], dup[25];
    create_app(c, "batch7", "prod", again); /* 7 is finished (ERROR): batch7 is free again */
    create_app(c, "batchdup", "prod", dup);
    assert_int_equal(pipeline_store_transition(c, dup, PS_INITIALIZED, PS_RUNNING, "b", NULL, "op",
                                               0, err, sizeof err),
                     1);
    /* (a manual one: an automatic one waiting in BUILD_SUCCEEDED is unfinished, schema 12) */
    db_exec(c,
            "UPDATE pipeline SET status = 'BUILD_SUCCEEDED', deploy_mode = 'manual' WHERE id = ?",
            (db_value[]){db_text(dup)}, 1, NULL, err, sizeof err);
    char dup2[25];
    create_app(c, "batchdup", "prod", dup2); /* unfinished beside the BUILD_SUCCEEDED one */
    pipeline_transition_req w[3] = {
        {.id = dup, .from = PS_BUILD_SUCCEEDED, .to = PS_DEPLOYING, .message = "d"},
        {.id = again, .from = PS_INITIALIZED, .to = PS_RUNNING, .message = "b"},
        {.id = dup2, .from = PS_INITIALIZED, .to = PS_RUNNING, .message = "b"},
    };
    pipeline_store_transitions(c, w, 3, "op", "op", 0);
    assert_int_equal(w[0].rc, PSTORE_EXISTS);
    assert_int_equal(w[1].rc, 1);
    assert_int_equal(w[2].rc, 1);
    db_close(holder);
    db_close(c);
}

/* On a database that refuses INSERT ... RETURNING (MySQL, MariaDB before
 * 10.5) a batch reads its events' ids back: the same rows result. */
static void a_batch_without_returning_reads_its_event_ids_back(void **state)
{
    (void)state;
    db_conn *c = testdb_open(), *holder = testdb_open();
    uint64_t mine = db_connection_id(holder);
    db_value s1[] = {db_text("oops:server:s1")};
    assert_int_equal(testdb_int(holder, "SELECT GET_LOCK(?, 0)", s1, 1), 1);
    pipeline_store_batch_returning(false);
    every_one_of_a_batch_made(c, holder, mine, "noreturning");
    pipeline_store_batch_returning(true);
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
                                                   NULL, 0, err, sizeof err),
                         1);
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
        db_result *r =
            testdb_q(c,
                     "SELECT p.driven_by, e.server FROM pipeline p JOIN pipeline_event e"
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
    pipeline_new n = {
        .namespace = "shop", .application = r->app, .environment = "prod", .actor = r->server};
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
    assert_int_equal(
        testdb_int(c, "SELECT COUNT(*) FROM pipeline WHERE application = 'together'", NULL, 0), 1);
    db_close(c);
}

static void a_finished_pipeline_frees_its_app_and_env_for_the_next(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char id[25], id2[25], err[512];
    create_app(c, "again", "prod", id);
    pipeline_new n = {
        .namespace = "shop", .application = "again", .environment = "prod", .actor = "t"};
    assert_int_equal(pipeline_store_create(c, &n, id2, err, sizeof err), PSTORE_EXISTS);
    assert_non_null(strstr(err, "shop/again in prod"));
    n.environment = "staging"; /* another environment is independent */
    assert_int_equal(pipeline_store_create(c, &n, id2, err, sizeof err), 0);
    n.environment = "prod";
    assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_STOPPED, "s", NULL, "t", 0,
                                               err, sizeof err),
                     1);
    assert_int_equal(pipeline_store_create(c, &n, id2, err, sizeof err), 0);
    db_close(c);
}

static void a_build_succeeded_pipeline_cannot_deploy_beside_an_unfinished_one(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char a[25], b[25], err[512];
    create_app(c, "manual", "prod", a);
    db_exec(c, "UPDATE pipeline SET deploy_mode = 'manual' WHERE id = ?", (db_value[]){db_text(a)},
            1, NULL, err, sizeof err);
    assert_int_equal(pipeline_store_transition(c, a, PS_INITIALIZED, PS_RUNNING, "", "s", NULL, 0,
                                               err, sizeof err),
                     1);
    assert_int_equal(pipeline_store_transition(c, a, PS_RUNNING, PS_BUILD_SUCCEEDED, "", "s", NULL,
                                               0, err, sizeof err),
                     1);
    create_app(c, "manual", "prod", b); /* a manual BUILD_SUCCEEDED is not unfinished */
    int rc = pipeline_store_transition(c, a, PS_BUILD_SUCCEEDED, PS_DEPLOYING, "", "s", NULL, 0,
                                       err, sizeof err);
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
        assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_RUNNING, "", "s", NULL,
                                                   0, err, sizeof err),
                         1);
        assert_int_equal(pipeline_store_transition(c, id, PS_RUNNING, PS_DEPLOYING, "", "s", NULL,
                                                   0, err, sizeof err),
                         1);
    }
    /* Age one of them by moving its status_changed_at back ten minutes. */
    db_value p[] = {db_text(old)};
    db_result_free(testdb_q(c,
                            "UPDATE pipeline SET status_changed_at = NOW(6) - INTERVAL 601 SECOND"
                            " WHERE id = ?",
                            p, 1));
    pipeline *v;
    size_t n;
    assert_int_equal(pipeline_store_list(c, 1u << PS_DEPLOYING, 600, 0, &v, &n, err, sizeof err),
                     0);
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
    assert_string_equal(err, "application \"\": " PIPELINE_LABEL_RULE);
    n.application = "json";
    n.source = "{not json";
    assert_int_equal(pipeline_store_create(c, &n, id, err, sizeof err), PSTORE_BAD);
    assert_string_equal(err, "source is not valid JSON");
    n.source = "{\"git\":\"https://example.invalid/shop.git\",\"branch\":\"main\"}";
    assert_int_equal(pipeline_store_create(c, &n, id, err, sizeof err), 0);
    db_close(c);
}

/* Names follow the policy's rule (lowercase DNS labels), for every field and
 * every kind of bad name, and a refused name sends no SQL at all. */
static void every_name_that_is_not_a_lowercase_dns_label_is_refused(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char long63[64], long64[65], err[512], id[25];
    memset(long63, 'a', 63), long63[63] = '\0';
    memset(long64, 'b', 64), long64[64] = '\0';
    static const char *bad[] = {
        "",         "SHOP",           "Shop",      "shoP",     "shop ",    " shop",
        "sh op",    "-shop",          "shop-",     "-",        "sh_op",    "sh.op",
        "sh/op",    "shop\n",         "shop\t",    "\x1b[31m", "sh\x7fop", "caf\xc3\xa9",
        "\xc2\x9b", "--force-delete", "prod;drop", "a\\b",     "\"q\"",
    };
    const char *fields[] = {"namespace", "application", "environment"};
    for (size_t f = 0; f < 3; f++) {
        for (size_t i = 0; i < sizeof bad / sizeof *bad + 1; i++) {
            const char *v = i < sizeof bad / sizeof *bad ? bad[i] : long64;
            pipeline_new n = {
                .namespace = "shop", .application = "names", .environment = "prod", .actor = "t"};
            if (f == 0)
                n.namespace = v;
            if (f == 1)
                n.application = v;
            if (f == 2)
                n.environment = v;
            uint64_t before = db_statement_count(c);
            assert_int_equal(pipeline_store_create(c, &n, id, err, sizeof err), PSTORE_BAD);
            assert_int_equal(db_statement_count(c), before);
            assert_true(strncmp(err, fields[f], strlen(fields[f])) == 0);
            assert_non_null(strstr(err, PIPELINE_LABEL_RULE));
            for (const char *e = err; *e; e++) /* the message is safe to print */
                assert_true(*e >= 0x20 && *e < 0x7f);
        }
    }
    /* The class, one byte at a time: inside a label only [a-z0-9-], at
     * either end only [a-z0-9]. */
    for (int b = 1; b < 256; b++) {
        char mid[4] = {'a', (char)b, 'a', '\0'}, one[2] = {(char)b, '\0'};
        bool inner = (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9'), dash = b == '-';
        assert_int_equal(pipeline_label_valid(mid), inner || dash);
        assert_int_equal(pipeline_label_valid(one), inner);
        assert_int_equal(pipeline_id_valid(one), inner);
    }
    assert_true(pipeline_label_valid(long63));
    assert_false(pipeline_label_valid(long64));
    assert_true(pipeline_label_valid("a--b") && pipeline_label_valid("0") &&
                pipeline_label_valid("9-z"));
    assert_false(pipeline_label_valid(NULL));
    /* Ids: 1 to 64 of [a-z0-9]. */
    assert_true(pipeline_id_valid(long64));
    char long65[66];
    memset(long65, 'c', 65), long65[65] = '\0';
    assert_false(pipeline_id_valid(long65));
    assert_false(pipeline_id_valid("") || pipeline_id_valid(NULL) || pipeline_id_valid("abc123 ") ||
                 pipeline_id_valid("ABC123") || pipeline_id_valid("abc-123"));
    /* Good names go through, the longest included. */
    pipeline_new ok = {
        .namespace = "a", .application = long63, .environment = "pre-prod-2", .actor = "t"};
    assert_int_equal(pipeline_store_create(c, &ok, id, err, sizeof err), 0);
    db_close(c);
}

/* Identifiers compare byte for byte (utf8mb4_nopad_bin): a case-different
 * or trailing-space name or id is another one. The names are written here
 * with SQL, as another tool might, since the store refuses such names. */
static void ids_and_names_differing_in_case_or_trailing_space_are_different(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char id[25], err[512];
    create_app(c, "api", "prod", id); /* shop/api in prod, unfinished */
    static const char *const others[][3] = {
        {"SHOP", "api", "prod"},  {"shop", "API", "prod"},  {"shop", "api", "PROD"},
        {"shop ", "api", "prod"}, {"shop", "api ", "prod"}, {"shop", "api", "prod "},
        {"Shop", "Api", "Prod"},
    };
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        char other[25];
        pipeline_new_id(other, 12);
        db_value p[] = {db_text(other), db_text(others[i][0]), db_text(others[i][1]),
                        db_text(others[i][2])};
        /* Beside the unfinished shop/api/prod: no collision on the unique key. */
        char e[512];
        if (db_exec(c,
                    "INSERT INTO pipeline (id, namespace, application, environment, status)"
                    " VALUES (?, ?, ?, ?, 'INITIALIZED')",
                    p, 4, NULL, e, sizeof e) != 0)
            fail_msg("\"%s/%s/%s\" beside shop/api/prod: %s", others[i][0], others[i][1],
                     others[i][2], e);
    }
    db_value q[] = {db_text("shop"), db_text("api"), db_text("prod")};
    assert_int_equal(testdb_int(c,
                                "SELECT COUNT(*) FROM pipeline WHERE namespace = ? AND"
                                " application = ? AND environment = ?",
                                q, 3),
                     1);
    /* An id with a trailing space, or in another case, finds nothing. */
    char spaced[32], upper[32];
    snprintf(spaced, sizeof spaced, "%s ", id);
    snprintf(upper, sizeof upper, "%s", id);
    for (char *u = upper; *u; u++)
        if (*u >= 'a' && *u <= 'z')
            *u = (char)(*u - 'a' + 'A');
    pipeline p;
    pipeline_event_row *ev;
    size_t nev;
    for (int k = 0; k < 2; k++) {
        const char *wrong = k ? upper : spaced;
        assert_int_equal(pipeline_store_get(c, wrong, &p, err, sizeof err), 0);
        assert_int_equal(pipeline_store_events(c, wrong, &ev, &nev, err, sizeof err), 0);
        assert_int_equal(nev, 0);
        pipeline_events_free(ev, nev);
        assert_int_equal(pipeline_store_transition(c, wrong, PS_INITIALIZED, PS_STOPPED, "s", NULL,
                                                   "t", 0, err, sizeof err),
                         0);
        assert_int_equal(pipeline_store_request_deploy(c, wrong, err, sizeof err), 0);
    }
    assert_int_equal(pipeline_store_get(c, id, &p, err, sizeof err), 1);
    assert_int_equal(p.status, PS_INITIALIZED); /* untouched */
    pipeline_clear(&p);
    /* A status in another case is no status at all (the CHECK is exact now). */
    db_value s[] = {db_text(id)};
    char e2[512];
    db_result *r = NULL;
    assert_int_not_equal(
        db_exec(c, "UPDATE pipeline SET status = 'stopped' WHERE id = ?", s, 1, &r, e2, sizeof e2),
        0);
    db_close(c);
}

/* Every text column of every table is an exact name (utf8mb4_nopad_bin),
 * except the free text listed here; every table's default is exact too, so
 * a column added later is exact unless it says otherwise. */
static void every_identifier_column_is_binary_and_no_pad(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    static const char *const free_text[] = {
        "pipeline.source",
        "pipeline.message",
        "pipeline_event.message",
        "server.host",
        "sim_job.outcome",
        "pipeline_log.argv",
        "pipeline_log.result",
        "pipeline_log.output",
        "restart_run.outcome",
        "alert_state.pods",
        "outbox.payload",
        "outbox.last_error",
        "schema_version.description",
    };
    db_result *r = testdb_q(c,
                            "SELECT CONCAT(TABLE_NAME, '.', COLUMN_NAME), COLLATION_NAME"
                            " FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
                            " AND COLLATION_NAME IS NOT NULL ORDER BY 1",
                            NULL, 0);
    size_t names = 0;
    for (size_t i = 0; i < r->nrows; i++) {
        const char *col = db_get(r, i, 0), *coll = db_get(r, i, 1);
        bool free = false;
        for (size_t k = 0; k < sizeof free_text / sizeof *free_text; k++)
            free |= strcmp(col, free_text[k]) == 0;
        if (!free) {
            if (strcmp(coll, "utf8mb4_nopad_bin") != 0)
                fail_msg("%s is %s, not utf8mb4_nopad_bin", col, coll);
            names++;
        }
    }
    db_result_free(r);
    assert_true(names >= 40); /* the pipeline ids, names, servers, statuses, ... */
    r = testdb_q(c,
                 "SELECT TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES"
                 " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> 'schema_version'"
                 " AND TABLE_TYPE = 'BASE TABLE'",
                 NULL, 0);
    assert_true(r->nrows >= 12);
    for (size_t i = 0; i < r->nrows; i++)
        if (strcmp(db_get(r, i, 1), "utf8mb4_nopad_bin") != 0)
            fail_msg("table %s defaults to %s", db_get(r, i, 0), db_get(r, i, 1));
    db_result_free(r);
    db_close(c);
}

/* ---- ctl_args (the pure parts of oopsctl; no database) ----------------- */

static char *escaped(const char *s, size_t len, int mode)
{
    buf b = {0};
    ctl_escape(&b, s, len, mode);
    return buf_take(&b);
}

/* Valid UTF-8 with no C0 (but \n and \t in lines mode), no DEL, no C1. */
static void assert_terminal_safe(const char *s, int mode)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; p[i];) {
        unsigned c = p[i];
        if (c < 0x80) {
            if (c < 0x20 || c == 0x7f)
                assert_true(mode == CTL_TEXT_LINES && (c == '\n' || c == '\t'));
            i++;
            continue;
        }
        size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
        assert_true(c >= 0xc2 && c <= 0xf4);
        for (size_t k = 1; k < n; k++)
            assert_int_equal(p[i + k] & 0xc0, 0x80);
        assert_false(c == 0xc2 && p[i + 1] < 0xa0); /* U+0080..U+009F */
        i += n;
    }
}

static void text_output_escapes_every_control_character_and_invalid_utf8(void **state)
{
    (void)state;
    char *e;
    /* Every C0 byte (NUL included, the length is given) and DEL. */
    for (int b = 0; b < 0x20; b++) {
        char in[3] = {'a', (char)b, 'z'}, want[16];
        if (b == '\n')
            snprintf(want, sizeof want, "a\\nz");
        else if (b == '\t')
            snprintf(want, sizeof want, "a\\tz");
        else if (b == '\r')
            snprintf(want, sizeof want, "a\\rz");
        else
            snprintf(want, sizeof want, "a\\x%02xz", b);
        e = escaped(in, 3, CTL_TEXT_LINE);
        assert_string_equal(e, want);
        free(e);
        e = escaped(in, 3, CTL_TEXT_LINES);
        if (b == '\n' || b == '\t')
            assert_memory_equal(e, in, 3);
        else
            assert_string_equal(e, want);
        free(e);
    }
    e = escaped("a\x7fz", 3, CTL_TEXT_LINE);
    assert_string_equal(e, "a\\x7fz");
    free(e);
    e = escaped("\x1b]0;pwned\x07\x1b[2J", 14, CTL_TEXT_LINES);
    assert_string_equal(e, "\\x1b]0;pwned\\x07\\x1b[2J");
    free(e);
    /* Every C1 code point, U+0080 to U+009F, as UTF-8. */
    for (unsigned cp = 0x80; cp <= 0x9f; cp++) {
        char in[2] = {(char)0xc2, (char)cp}, want[16];
        snprintf(want, sizeof want, "\\u%04x", cp);
        e = escaped(in, 2, CTL_TEXT_LINE);
        assert_string_equal(e, want);
        free(e);
    }
    /* Invisible reordering controls. */
    e = escaped("a\xe2\x80\xaez\xe2\x81\xa6", 8, CTL_TEXT_LINE);
    assert_string_equal(e, "a\\u202ez\\u2066");
    free(e);
    /* Invalid UTF-8: each byte that is not part of a valid sequence. */
    static const struct {
        const char *in;
        size_t len;
        const char *want;
    } bad[] = {
        {"\x80", 1, "\\x80"},                            /* a lone continuation byte */
        {"\xc0\xaf", 2, "\\xc0\\xaf"},                   /* overlong '/' */
        {"\xe0\x80\xaf", 3, "\\xe0\\x80\\xaf"},          /* overlong, 3 bytes */
        {"\xed\xa0\x80", 3, "\\xed\\xa0\\x80"},          /* a surrogate */
        {"\xf4\x90\x80\x80", 4, "\\xf4\\x90\\x80\\x80"}, /* above U+10FFFF */
        {"\xf5\x80", 2, "\\xf5\\x80"},
        {"\xff\xfe", 2, "\\xff\\xfe"},
        {"ok\xe2\x82", 4, "ok\\xe2\\x82"}, /* cut at the end */
        {"\xc3(", 2, "\\xc3("},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        e = escaped(bad[i].in, bad[i].len, CTL_TEXT_LINE);
        assert_string_equal(e, bad[i].want);
        free(e);
    }
    /* Ordinary text, backslashes and non-ASCII letters included, is kept. */
    static const char plain[] =
        "caf\xc3\xa9 \xe2\x82\xac 5 \xf0\x9f\x98\x80 \xc2\xa0 C:\\dir \\x1b";
    e = escaped(plain, sizeof plain - 1, CTL_TEXT_LINE);
    assert_string_equal(e, plain);
    free(e);
    e = escaped("", 0, CTL_TEXT_LINE);
    assert_string_equal(e, "");
    free(e);
    /* The whole class: every string of one or two bytes, and of three bytes
     * starting with 0xe2 (U+2000..U+2FFF), comes out safe. */
    for (int a = 0; a < 256; a++) {
        for (int b = -1; b < 256; b++) {
            char in[2] = {(char)a, (char)b};
            for (int mode = 0; mode < 2; mode++) {
                e = escaped(in, b < 0 ? 1 : 2, mode);
                assert_terminal_safe(e, mode);
                free(e);
            }
            char in3[3] = {(char)0xe2, (char)a, (char)(b < 0 ? 0 : b)};
            e = escaped(in3, 3, CTL_TEXT_LINE);
            assert_terminal_safe(e, CTL_TEXT_LINE);
            free(e);
        }
    }
}

static void flags_are_parsed_exactly(void **state)
{
    (void)state;
    char err[512];
    const char *pos[2];
    size_t npos;
    int used;
    /* ok: both forms, positionals anywhere, "--" */
    {
        ctl_flag f[] = {{"--env", true, false, NULL}, {"--manual", false, false, NULL}};
        char *argv[] = {"ID", "--env=prod", "--manual", "--", "--x"};
        assert_int_equal(
            ctl_parse_flags(5, argv, f, 2, false, pos, 2, &npos, NULL, err, sizeof err), 0);
        assert_string_equal(f[0].value, "prod");
        assert_true(f[1].given);
        assert_int_equal(npos, 2);
        assert_string_equal(pos[1], "--x");
    }
    static const struct {
        int argc;
        char *argv[3];
        const char *want;
    } bad[] = {
        {2, {"--env", "a", NULL}, NULL}, /* a plain value: accepted */
        {1, {"--env", NULL, NULL}, "--env needs a value"},
        {1, {"--env=", NULL, NULL}, "--env \"\": the value is empty"},
        {2, {"--env", "", NULL}, "--env \"\": the value is empty"},
        {3, {"--env", "a", "--env=b"}, "--env is given more than once"},
        {2, {"--manual", "--manual", NULL}, "--manual is given more than once"},
        {1, {"--manual=yes", NULL, NULL}, "--manual takes no value (got \"yes\")"},
        {1, {"--en", NULL, NULL}, "unknown option \"--en\""},
        {1, {"-e", NULL, NULL}, "unknown option \"-e\""},
        {1, {"--Env", NULL, NULL}, "unknown option \"--Env\""},
        {2, {"x", "y", NULL}, "unexpected argument \"y\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ctl_flag f[] = {{"--env", true, false, NULL}, {"--manual", false, false, NULL}};
        int rc = ctl_parse_flags(bad[i].argc, (char *const *)bad[i].argv, f, 2, false, pos, 1,
                                 &npos, NULL, err, sizeof err);
        if (!bad[i].want) {
            assert_int_equal(rc, 0);
            continue;
        }
        assert_int_equal(rc, -1);
        assert_string_equal(err, bad[i].want);
    }
    /* A name listed N times is a flag that may be given N times, in order. */
    {
        ctl_flag r[] = {{"--host", true, false, NULL},
                        {"--host", true, false, NULL},
                        {"--manual", false, false, NULL}};
        char *argv[] = {"--host", "a", "--manual", "--host=b", "--host", "c"};
        assert_int_equal(
            ctl_parse_flags(4, argv, r, 3, false, pos, 1, &npos, NULL, err, sizeof err), 0);
        assert_string_equal(r[0].value, "a");
        assert_string_equal(r[1].value, "b");
        assert_true(r[2].given);
        r[0].given = r[1].given = r[2].given = false;
        assert_int_equal(
            ctl_parse_flags(6, argv, r, 3, false, pos, 1, &npos, NULL, err, sizeof err), -1);
        assert_string_equal(err, "--host is given more than 2 times");
    }
    /* Global flags before the command: stops at the command, not consumed. */
    {
        ctl_flag g[] = {{"--db", true, false, NULL}, {"--json", false, false, NULL}};
        char *argv[] = {"--db", "mysql://x", "--json", "list", "--limit"};
        assert_int_equal(
            ctl_parse_flags(5, argv, g, 2, true, NULL, 0, NULL, &used, err, sizeof err), 0);
        assert_int_equal(used, 3);
    }
    /* Statuses: any case, every name, a list of any length; empty parts refused. */
    unsigned mask;
    pipeline_status st;
    for (int s = 0; s < PS__COUNT; s++) {
        char lower[32];
        snprintf(lower, sizeof lower, "%s", pipeline_status_name(s));
        for (char *l = lower; *l; l++)
            if (*l >= 'A' && *l <= 'Z')
                *l = (char)(*l - 'A' + 'a');
        assert_int_equal(ctl_parse_status("--expect", lower, &st, err, sizeof err), 0);
        assert_int_equal(st, s);
        assert_int_equal(
            ctl_parse_status("--expect", pipeline_status_name(s), &st, err, sizeof err), 0);
        assert_int_equal(ctl_parse_statuses("--status", lower, &mask, err, sizeof err), 0);
        assert_int_equal(mask, 1u << s);
    }
    static const char *const bad_lists[] = {
        "",         ",",        "RUNNING,", ",RUNNING", "RUNNING,,ERROR",
        "RUNNING ", " RUNNING", "RUN",      "RUNNINGX", "R\xc3\xbcNNING"};
    for (size_t i = 0; i < sizeof bad_lists / sizeof *bad_lists; i++)
        assert_int_equal(ctl_parse_statuses("--status", bad_lists[i], &mask, err, sizeof err), -1);
    buf longlist = {0};
    for (int k = 0; k < 200; k++)
        buf_puts(&longlist, k ? ",stopped" : "running");
    assert_int_equal(ctl_parse_statuses("--status", longlist.p, &mask, err, sizeof err), 0);
    assert_int_equal(mask, (1u << PS_RUNNING) | (1u << PS_STOPPED));
    buf_puts(&longlist, ",NOPE");
    assert_int_equal(ctl_parse_statuses("--status", longlist.p, &mask, err, sizeof err), -1);
    assert_non_null(strstr(err, "\"NOPE\" is not a status"));
    buf_free(&longlist);
    /* Numbers: digits only, within the range. */
    unsigned long long v;
    static const char *const bad_numbers[] = {"",
                                              "-5",
                                              "+5",
                                              " 5",
                                              "5 ",
                                              "5ms",
                                              "1.5",
                                              "0x10",
                                              "abc",
                                              "0",
                                              "3600001",
                                              "18446744073709551616",
                                              "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad_numbers / sizeof *bad_numbers; i++)
        assert_int_equal(ctl_parse_number("--drain", bad_numbers[i], 1, CTL_DRAIN_MAX,
                                          "milliseconds", &v, err, sizeof err),
                         -1);
    assert_int_equal(ctl_parse_number("--drain", "3600000", 1, CTL_DRAIN_MAX, "milliseconds", &v,
                                      err, sizeof err),
                     0);
    assert_int_equal(v, 3600000);
    assert_int_equal(
        ctl_parse_number("--drain", "007", 1, CTL_DRAIN_MAX, NULL, &v, err, sizeof err), 0);
    assert_int_equal(v, 7);
    /* NS/APP */
    char ns[64], app[64];
    assert_int_equal(ctl_parse_app("--app", "shop/api", ns, app, err, sizeof err), 0);
    assert_string_equal(ns, "shop");
    assert_string_equal(app, "api");
    static const char *const bad_apps[] = {"shop",      "/api",      "shop/",
                                           "a/b/c",     "SHOP/API",  "shop/api ",
                                           "shop /api", "shop/-api", "sh_op/api"};
    for (size_t i = 0; i < sizeof bad_apps / sizeof *bad_apps; i++)
        assert_int_equal(ctl_parse_app("--app", bad_apps[i], ns, app, err, sizeof err), -1);
    char longns[200];
    memset(longns, 'n', 150), snprintf(longns + 150, 50, "/api");
    assert_int_equal(ctl_parse_app("--app", longns, ns, app, err, sizeof err), -1);
    assert_non_null(strstr(err, "namespace"));
}

static void manual_deploy_request_is_conditional(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char id[25], err[512];
    create_app(c, "request", "prod", id);
    assert_int_equal(pipeline_store_request_deploy(c, id, err, sizeof err), 0); /* INITIALIZED */
    assert_int_equal(pipeline_store_transition(c, id, PS_INITIALIZED, PS_RUNNING, "", "s", NULL, 0,
                                               err, sizeof err),
                     1);
    assert_int_equal(pipeline_store_transition(c, id, PS_RUNNING, PS_BUILD_SUCCEEDED, "", "s", NULL,
                                               0, err, sizeof err),
                     1);
    assert_int_equal(pipeline_store_request_deploy(c, id, err, sizeof err), 1);
    assert_int_equal(pipeline_store_request_deploy(c, id, err, sizeof err), 0); /* once */
    db_close(c);
}

/* A pipeline of shop/APP in ENV that reached `status` `minutes` ago (on the
 * database's clock) with `artifact` (NULL: none). */
static void finished(db_conn *c, const char *app, const char *env, const char *artifact,
                     const char *status, int minutes, char id[25])
{
    char err[512];
    pipeline_new n = {.namespace = "shop",
                      .application = app,
                      .environment = env,
                      .artifact = artifact,
                      .manual = strcmp(status, "BUILD_SUCCEEDED") == 0, /* waiting, manual */
                      .actor = "test"};
    assert_int_equal(pipeline_store_create(c, &n, id, err, sizeof err), 0);
    db_value p[] = {db_text(status), db_int(minutes), db_text(id)};
    db_result_free(testdb_q(c,
                            "UPDATE pipeline SET status = ?, status_changed_at = NOW(6) - "
                            "INTERVAL ? MINUTE WHERE id = ?",
                            p, 3));
}

static void assert_target(db_conn *c, const char *app, const char *to, const char *want_id,
                          const char *want_artifact)
{
    pipeline t;
    char err[512] = "";
    int rc = pipeline_store_rollback_target(c, "shop", app, "prod", to, &t, err, sizeof err);
    if (rc != 0)
        fail_msg("rollback target of shop/%s: %d %s", app, rc, err);
    assert_string_equal(t.id, want_id);
    assert_string_equal(t.artifact, want_artifact);
    assert_int_equal(t.status, PS_SUCCEEDED);
    pipeline_clear(&t);
}

static void assert_no_target(db_conn *c, const char *app, const char *env, const char *to,
                             const char *want_err)
{
    pipeline t;
    char err[512] = "";
    long long rows = testdb_int(c, "SELECT COUNT(*) FROM pipeline", NULL, 0);
    assert_int_equal(pipeline_store_rollback_target(c, "shop", app, env, to, &t, err, sizeof err),
                     PSTORE_BAD);
    assert_string_equal(err, want_err);
    assert_null(t.artifact); /* nothing to free */
    assert_int_equal(testdb_int(c, "SELECT COUNT(*) FROM pipeline", NULL, 0), rows);
}

/* REFERENCE.md 9: the default target of a rollback is the last SUCCEEDED
 * release before the current one that shipped another artifact. */
static void the_default_rollback_target_is_the_last_other_artifact_that_succeeded(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char cur[25], a[25], ign[25], err[512];
    /* Created first, but it succeeded last: the current release. */
    finished(c, "rb", "prod", "v2", "SUCCEEDED", 10, cur);
    finished(c, "rb", "prod", "v1", "SUCCEEDED", 60, a);
    finished(c, "rb", "prod", "v0", "ERROR", 55, ign);        /* not SUCCEEDED */
    finished(c, "rb", "prod", "v0", "STOPPED", 54, ign);      /* not SUCCEEDED */
    finished(c, "rb", "prod", "", "SUCCEEDED", 50, ign);      /* empty artifact */
    finished(c, "rb", "prod", NULL, "SUCCEEDED", 45, ign);    /* no artifact */
    finished(c, "rb", "prod", "v2", "SUCCEEDED", 40, ign);    /* the current artifact */
    finished(c, "rb", "prod", "v2", "SUCCEEDED", 30, ign);    /* the current artifact */
    finished(c, "rb", "staging", "v3", "SUCCEEDED", 35, ign); /* another environment */
    finished(c, "rb2", "prod", "v3", "SUCCEEDED", 35, ign);   /* another application */
    char in_flight[25];
    finished(c, "rb", "prod", "v9", "ROLLING_OUT", 1, in_flight); /* unfinished */
    assert_target(c, "rb", NULL, a, "v1");
    /* The one in flight is what an unfinished rollback collides with. */
    pipeline u;
    assert_int_equal(pipeline_store_unfinished(c, "shop", "rb", "prod", &u, err, sizeof err), 1);
    assert_string_equal(u.id, in_flight);
    pipeline_clear(&u);
    assert_int_equal(pipeline_store_unfinished(c, "shop", "rb", "staging", &u, err, sizeof err), 0);
    /* Nothing earlier with another artifact: refused, naming the current one. */
    db_value p[] = {db_text(a)};
    db_result_free(testdb_q(c, "UPDATE pipeline SET artifact = 'v2' WHERE id = ?", p, 1));
    char want[512];
    snprintf(want, sizeof want,
             "shop/rb prod has no earlier SUCCEEDED release to roll back to (current: %s, "
             "artifact \"v2\")",
             cur);
    assert_no_target(c, "rb", "prod", NULL, want);
    assert_no_target(c, "rbnone", "prod", NULL, "shop/rbnone prod has no SUCCEEDED release");
    finished(c, "rbnone", "prod", "v1", "ERROR", 5, ign);
    assert_no_target(c, "rbnone", "prod", NULL, "shop/rbnone prod has no SUCCEEDED release");
    /* A single release has nothing before it. */
    finished(c, "rbone", "prod", "v1", "SUCCEEDED", 5, ign);
    snprintf(want, sizeof want,
             "shop/rbone prod has no earlier SUCCEEDED release to roll back to (current: %s, "
             "artifact \"v1\")",
             ign);
    assert_no_target(c, "rbone", "prod", NULL, want);
    db_close(c);
}

/* The order is status_changed_at, then created_at, then id; a current
 * release without an artifact differs from every artifact. */
static void rollback_target_ties_are_broken_by_created_at_then_id(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char x[25], y[25], z[25];
    finished(c, "rbtie", "prod", "v1", "SUCCEEDED", 0, x);
    finished(c, "rbtie", "prod", "v2", "SUCCEEDED", 0, y);
    finished(c, "rbtie", "prod", "v3", "SUCCEEDED", 0, z);
    /* All three at one instant; x and y also created at one instant. */
    db_value p[] = {db_text(z), db_text(x), db_text(y), db_text(z)};
    db_result_free(testdb_q(c,
                            "UPDATE pipeline SET status_changed_at = '2020-01-01 00:00:00', "
                            "created_at = IF(id = ?, '2019-12-31 23:00:00', "
                            "'2019-12-31 22:00:00') WHERE id IN (?, ?, ?)",
                            p, 4));
    /* z was created last: the current release. Of x and y, the larger id. */
    const char *later = strcmp(x, y) > 0 ? x : y;
    assert_target(c, "rbtie", NULL, later, later == x ? "v1" : "v2");
    /* A current release without an artifact: the one before it counts. */
    char none[25];
    finished(c, "rbtie", "prod", NULL, "SUCCEEDED", 0, none);
    assert_target(c, "rbtie", NULL, z, "v3");
    db_close(c);
}

/* --to ID: that pipeline, refused unless it is a SUCCEEDED release of the
 * same application and environment with an artifact. */
static void rollback_to_an_id_is_refused_unless_it_is_a_release_of_that_app_and_env(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char ok[25], cur[25], err_id[25], stopped[25], empty[25], null[25], env[25], app[25];
    char want[512], err[512];
    finished(c, "rbto", "prod", "v1", "SUCCEEDED", 60, ok);
    finished(c, "rbto", "prod", "v2", "SUCCEEDED", 10, cur);
    finished(c, "rbto", "prod", "v3", "ERROR", 50, err_id);
    finished(c, "rbto", "prod", "v4", "STOPPED", 45, stopped);
    finished(c, "rbto", "prod", "", "SUCCEEDED", 40, empty);
    finished(c, "rbto", "prod", NULL, "SUCCEEDED", 35, null);
    finished(c, "rbto", "staging", "v5", "SUCCEEDED", 30, env);
    finished(c, "rbother", "prod", "v6", "SUCCEEDED", 30, app);
    assert_target(c, "rbto", ok, ok, "v1");
    assert_target(c, "rbto", cur, cur, "v2"); /* the current one: a redeploy, allowed */
    assert_no_target(c, "rbto", "prod", "nosuchid0000", "no pipeline with id nosuchid0000");
    snprintf(want, sizeof want,
             "pipeline %s is ERROR, not SUCCEEDED: only a release that succeeded can be rolled "
             "back to",
             err_id);
    assert_no_target(c, "rbto", "prod", err_id, want);
    snprintf(want, sizeof want,
             "pipeline %s is STOPPED, not SUCCEEDED: only a release that succeeded can be rolled "
             "back to",
             stopped);
    assert_no_target(c, "rbto", "prod", stopped, want);
    snprintf(want, sizeof want, "pipeline %s has no artifact to redeploy", empty);
    assert_no_target(c, "rbto", "prod", empty, want);
    snprintf(want, sizeof want, "pipeline %s has no artifact to redeploy", null);
    assert_no_target(c, "rbto", "prod", null, want);
    snprintf(want, sizeof want, "pipeline %s belongs to shop/rbto staging, not shop/rbto prod",
             env);
    assert_no_target(c, "rbto", "prod", env, want);
    snprintf(want, sizeof want, "pipeline %s belongs to shop/rbother prod, not shop/rbto prod",
             app);
    assert_no_target(c, "rbto", "prod", app, want);
    /* The same one from its own environment is fine. */
    pipeline t;
    assert_int_equal(
        pipeline_store_rollback_target(c, "shop", "rbto", "staging", env, &t, err, sizeof err), 0);
    pipeline_clear(&t);
    /* A name that is not a DNS label: refused before any SQL. */
    uint64_t before = db_statement_count(c);
    assert_int_equal(
        pipeline_store_rollback_target(c, "shop", "RBTO", "prod", NULL, &t, err, sizeof err),
        PSTORE_BAD);
    assert_non_null(strstr(err, "application \"RBTO\": " PIPELINE_LABEL_RULE));
    assert_int_equal(db_statement_count(c), before);
    db_close(c);
}

/* ---- oopsctl list and history (issue 14) ---------------------------------- */

static void durations_are_read_as_oops_duration_reads_them(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        unsigned long long ms;
    } good[] = {{"7d", 604800000ULL}, {"2h", 7200000ULL}, {"1h30m", 5400000ULL},
                {"90m", 5400000ULL},  {"500ms", 500},     {"1d2h3m4s5ms", 93784005ULL},
                {"1s", 1000},         {"0h1m", 60000ULL}, {"36600d", CTL_SINCE_MAX_MS}};
    char err[512];
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        unsigned long long ms = 0;
        if (ctl_parse_duration("--since", good[i].s, CTL_SINCE_MAX_MS, &ms, err, sizeof err))
            fail_msg("%s refused: %s", good[i].s, err);
        assert_int_equal(ms, good[i].ms);
    }
    static const char *bad[] = {"",
                                "5",
                                "0s",
                                "0d0h",
                                "1m1h",
                                "1h1h",
                                "5x",
                                "5M",
                                "-1s",
                                " 1s",
                                "1s ",
                                "1.5h",
                                "h",
                                "1h-",
                                "1 h",
                                "1hh",
                                "1msm",
                                "36601d",
                                "99999999999999999999999d",
                                "1sms"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned long long ms = 0;
        if (ctl_parse_duration("--since", bad[i], CTL_SINCE_MAX_MS, &ms, err, sizeof err) == 0)
            fail_msg("\"%s\" accepted as %llu ms", bad[i], ms);
        assert_non_null(strstr(err, "--since \""));
        assert_non_null(strstr(err, "not a duration"));
        assert_null(strchr(err, '\n'));
    }
    unsigned long long ms = 0;
    assert_int_equal(ctl_parse_duration("--x", "1s", 1000, &ms, err, sizeof err), 0);
    assert_int_equal(ctl_parse_duration("--x", "1001ms", 1000, &ms, err, sizeof err), -1);
    assert_int_equal(ctl_parse_duration("--x", NULL, 1000, &ms, err, sizeof err), -1);
}

static void created_minutes_ago(db_conn *c, const char *id, int minutes)
{
    db_value p[] = {db_int(minutes), db_text(id)};
    db_result_free(testdb_q(
        c, "UPDATE pipeline SET created_at = NOW(6) - INTERVAL ? MINUTE WHERE id = ?", p, 2));
}

static void assert_ids(pipeline *v, size_t n, const char *const *want, size_t nwant)
{
    char got[512] = "";
    for (size_t i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s ", v[i].id);
    if (n != nwant)
        fail_msg("%zu rows, want %zu: %s", n, nwant, got);
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].id, want[i]))
            fail_msg("row %zu is %s, want %s (got %s)", i, v[i].id, want[i], got);
}

static void run_query(db_conn *c, const pipeline_query *q, const char *const *want, size_t nwant)
{
    pipeline *v = NULL;
    size_t n = 0;
    char err[512] = "";
    int rc = pipeline_store_query(c, q, &v, &n, err, sizeof err);
    if (rc != 0)
        fail_msg("query: %d %s", rc, err);
    assert_ids(v, n, want, nwant);
    pipeline_list_free(v, n);
}
#define QUERY(c, q, ...)                                                                           \
    do {                                                                                           \
        const char *const want_[] = {__VA_ARGS__};                                                 \
        run_query(c, q, want_, sizeof want_ / sizeof want_[0]);                                    \
    } while (0)

static void query_filters_and_the_default_view_newest_first(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char f[5][25], run[25], wait[25], other[25], err[512];
    for (int i = 0; i < 5; i++) {
        finished(c, "lq", "prod", "v1", i == 2 ? "ERROR" : "SUCCEEDED", i + 1, f[i]);
        created_minutes_ago(c, f[i], i + 1); /* f[0] newest */
    }
    finished(c, "lq", "staging", "v1", "RUNNING", 0, run);
    created_minutes_ago(c, run, 50);
    finished(c, "lq2", "prod", "v1", "BUILD_SUCCEEDED", 0, wait);
    created_minutes_ago(c, wait, 60);
    finished(c, "lq3", "prod", "v1", "STOPPED", 0, other);
    created_minutes_ago(c, other, 70);

    /* Default view: every unfinished one (BUILD_SUCCEEDED counts) and the
     * `recent` newest finished ones, newest first. */
    pipeline_query q = {.namespace = "shop", .application = "lq", .recent = 2};
    QUERY(c, &q, f[0], f[1], run);
    q.application = "lq2";
    QUERY(c, &q, wait);
    q = (pipeline_query){.namespace = "shop", .application = "lq", .environment = "prod"};
    QUERY(c, &q, f[0], f[1], f[2], f[3], f[4]);
    q.limit = 3;
    QUERY(c, &q, f[0], f[1], f[2]);
    q = (pipeline_query){.application = "lq", .status_mask = 1u << PS_ERROR};
    QUERY(c, &q, f[2]);
    q = (pipeline_query){.application = "lq", .since_ms = 150000}; /* 2.5 minutes */
    QUERY(c, &q, f[0], f[1]);
    q = (pipeline_query){.environment = "staging", .application = "lq", .recent = 20};
    QUERY(c, &q, run);
    /* Equal creation times: the higher id first. */
    db_value p[] = {db_text(f[1]), db_text(f[0])};
    db_result_free(testdb_q(c,
                            "UPDATE pipeline SET created_at = (SELECT t.c FROM (SELECT "
                            "created_at AS c FROM pipeline WHERE id = ?) t) WHERE id = ?",
                            p, 2));
    q = (pipeline_query){.namespace = "shop", .application = "lq", .limit = 2};
    if (strcmp(f[0], f[1]) > 0)
        QUERY(c, &q, f[0], f[1]);
    else
        QUERY(c, &q, f[1], f[0]);
    /* Names are checked before any SQL. */
    pipeline *v = (pipeline *)1;
    size_t n = 99;
    q = (pipeline_query){.namespace = "Shop"};
    assert_int_equal(pipeline_store_query(c, &q, &v, &n, err, sizeof err), PSTORE_BAD);
    assert_null(v);
    assert_int_equal(n, 0);
    q = (pipeline_query){.environment = "a_b"};
    assert_int_equal(pipeline_store_query(c, &q, &v, &n, err, sizeof err), PSTORE_BAD);
    /* The old list is still oldest first, every status. */
    assert_int_equal(
        pipeline_store_list(c, 1u << PS_BUILD_SUCCEEDED, 0, 0, &v, &n, err, sizeof err), 0);
    assert_true(n >= 1);
    pipeline_list_free(v, n);
    db_close(c);
}

static void set_trigger(db_conn *c, const char *id, const char *trigger)
{
    db_value p[] = {db_text(trigger), db_text(id)};
    db_result_free(testdb_q(c, "UPDATE pipeline SET trigger_type = ? WHERE id = ?", p, 2));
}

static void history_is_what_went_live_newest_first_after_the_one_in_progress(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char h1[25], h2[25], h3[25], h4[25], h5[25], h6[25], u[25], o[25], err[512];
    finished(c, "hist", "prod", "v1", "SUCCEEDED", 50, h1);
    finished(c, "hist", "prod", "v2", "SUCCEEDED", 40, h2);
    finished(c, "hist", "prod", "v3", "ERROR", 30, h3);
    finished(c, "hist", "prod", "v4", "STOPPED", 25, h4);
    finished(c, "hist", "prod", "v1", "SUCCEEDED", 20, h5);
    set_trigger(c, h5, "rollback");
    finished(c, "hist", "prod", "v5", "BUILD_SUCCEEDED", 15, h6); /* waiting, manual */
    finished(c, "hist", "staging", "v9", "SUCCEEDED", 5, o);
    pipeline *v = NULL;
    size_t n = 0;
    assert_int_equal(pipeline_store_history(c, "shop", "hist", "prod", 0, &v, &n, err, sizeof err),
                     0);
    {
        const char *const want[] = {h5, h2, h1};
        assert_ids(v, n, want, 3);
    }
    assert_string_equal(v[0].trigger_type, "rollback");
    assert_string_equal(v[0].artifact, "v1");
    pipeline_list_free(v, n);
    /* The first SUCCEEDED is the rollback target's current release. */
    pipeline t;
    assert_int_equal(
        pipeline_store_rollback_target(c, "shop", "hist", "prod", NULL, &t, err, sizeof err), 0);
    assert_string_equal(t.id, h2); /* current h5 (v1): back to v2 */
    pipeline_clear(&t);
    /* One in progress comes first; it finishes and is the newest live one. */
    finished(c, "hist", "prod", "v2", "ROLLING_OUT", 0, u);
    assert_int_equal(pipeline_store_history(c, "shop", "hist", "prod", 2, &v, &n, err, sizeof err),
                     0);
    {
        const char *const want[] = {u, h5};
        assert_ids(v, n, want, 2);
    }
    pipeline_list_free(v, n);
    db_value p[] = {db_text(u)};
    db_result_free(testdb_q(
        c, "UPDATE pipeline SET status = 'SUCCEEDED', status_changed_at = NOW(6) WHERE id = ?", p,
        1));
    assert_int_equal(pipeline_store_history(c, "shop", "hist", "prod", 0, &v, &n, err, sizeof err),
                     0);
    {
        const char *const want[] = {u, h5, h2, h1};
        assert_ids(v, n, want, 4);
    }
    pipeline_list_free(v, n);
    assert_int_equal(
        pipeline_store_history(c, "shop", "nohist", "prod", 0, &v, &n, err, sizeof err), 0);
    assert_int_equal(n, 0);
    pipeline_list_free(v, n);
    assert_int_equal(pipeline_store_history(c, "shop", "hist", "Prod", 0, &v, &n, err, sizeof err),
                     PSTORE_BAD);
    assert_non_null(strstr(err, "environment"));
    (void)h3;
    (void)h4;
    (void)h6;
    db_close(c);
}

/* A pipeline of app in env at status (created minutes ago, manual so that
 * BUILD_SUCCEEDED is a legal resting place), its id into id. */
static void at_status(db_conn *c, const char *app, const char *env, const char *status, int minutes,
                      char id[25])
{
    char err[512];
    pipeline_new n = {.namespace = "shop",
                      .application = app,
                      .environment = env,
                      .artifact = "v2",
                      .manual = true,
                      .actor = "test"};
    assert_int_equal(pipeline_store_create(c, &n, id, err, sizeof err), 0);
    db_value p[] = {db_text(status), db_int(minutes), db_text(id)};
    db_result_free(testdb_q(c,
                            "UPDATE pipeline SET status = ?, created_at = NOW(6) - INTERVAL ? "
                            "MINUTE WHERE id = ?",
                            p, 3));
}

static int deploy_with_slot(db_conn *c, const char *id, const char *env, unsigned count,
                            pipeline_transition_extra *x)
{
    char err[512];
    *x = (pipeline_transition_extra){.slot_env = env, .slot_count = count};
    return pipeline_store_transition_ex(c, id, PS_BUILD_SUCCEEDED, PS_DEPLOYING, "d", "s", NULL, 0,
                                        x, err, sizeof err);
}

static long long deploying_in(db_conn *c, const char *env)
{
    db_value p[] = {db_text(env)};
    return testdb_int(c,
                      "SELECT COUNT(*) FROM pipeline WHERE environment = ? AND status IN "
                      "('DEPLOYING','ROLLING_OUT')",
                      p, 1);
}

static void deploy_slots_bound_the_deploys_of_an_environment(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char a[25], b[25], d[25], err[512];
    at_status(c, "slota", "slotenv", "BUILD_SUCCEEDED", 3, a);
    at_status(c, "slotb", "slotenv", "BUILD_SUCCEEDED", 2, b);
    at_status(c, "slotc", "slotenv", "BUILD_SUCCEEDED", 1, d);
    pipeline_transition_extra x;
    assert_int_equal(deploy_with_slot(c, a, "slotenv", 2, &x), 1);
    assert_int_equal(x.slot, 1);
    assert_int_equal(deploy_with_slot(c, b, "slotenv", 2, &x), 1);
    assert_int_equal(x.slot, 2);
    /* Both in use: the third waits, nothing changed. */
    assert_int_equal(deploy_with_slot(c, d, "slotenv", 2, &x), 0);
    assert_true(x.no_slot);
    assert_int_equal(x.slots_in_use, 2);
    assert_int_equal(deploying_in(c, "slotenv"), 2);
    assert_int_equal(events_of(c, d, "DEPLOYING"), 0);
    /* A ROLLING_OUT one still holds its slot; a finished one frees it. */
    assert_int_equal(pipeline_store_transition(c, a, PS_DEPLOYING, PS_ROLLING_OUT, "r", "s", NULL,
                                               0, err, sizeof err),
                     1);
    assert_int_equal(deploy_with_slot(c, d, "slotenv", 2, &x), 0);
    assert_int_equal(pipeline_store_transition(c, a, PS_ROLLING_OUT, PS_ERROR, "e", "s", NULL, 0,
                                               err, sizeof err),
                     1);
    assert_int_equal(deploy_with_slot(c, d, "slotenv", 2, &x), 1);
    assert_int_equal(x.slot, 1); /* a's slot, reused */
    assert_int_equal(deploying_in(c, "slotenv"), 2);
    /* Bad requests are refused before any SQL. */
    x = (pipeline_transition_extra){.slot_env = "slotenv", .slot_count = 0};
    assert_int_equal(pipeline_store_transition_ex(c, d, PS_DEPLOYING, PS_ROLLING_OUT, "r", "s",
                                                  NULL, 0, &x, err, sizeof err),
                     PSTORE_BAD);
    db_close(c);
}

static void a_slot_goes_to_the_rollback_then_the_oldest_waiting(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char busy[25], old[25], young[25], rb[25], err[512];
    at_status(c, "qbusy", "qenv", "BUILD_SUCCEEDED", 9, busy);
    at_status(c, "qold", "qenv", "BUILD_SUCCEEDED", 5, old);
    at_status(c, "qyoung", "qenv", "BUILD_SUCCEEDED", 1, young);
    at_status(c, "qrb", "qenv", "INITIALIZED", 0, rb);
    set_trigger(c, rb, "rollback");
    pipeline_transition_extra x;
    assert_int_equal(deploy_with_slot(c, busy, "qenv", 1, &x), 1);
    db_value w[] = {db_text(old), db_text(young), db_text(rb)};
    db_result_free(testdb_q(c, "UPDATE pipeline SET hold = 'slot' WHERE id IN (?, ?, ?)", w, 3));
    assert_int_equal(pipeline_store_transition(c, busy, PS_DEPLOYING, PS_ERROR, "e", "s", NULL, 0,
                                               err, sizeof err),
                     1);
    /* The slot is free, but the rollback waits ahead of both releases and
     * the older release ahead of the younger. */
    assert_int_equal(deploy_with_slot(c, young, "qenv", 1, &x), 0);
    assert_true(x.no_slot);
    assert_int_equal(x.slots_ahead, 2);
    assert_int_equal(deploy_with_slot(c, old, "qenv", 1, &x), 0);
    assert_int_equal(x.slots_ahead, 1);
    x = (pipeline_transition_extra){.slot_env = "qenv", .slot_count = 1};
    assert_int_equal(pipeline_store_transition_ex(c, rb, PS_INITIALIZED, PS_DEPLOYING, "d", "s",
                                                  NULL, 0, &x, err, sizeof err),
                     1);
    db_close(c);
}

/* Fail id (ROLLING_OUT) asking for the automatic rollback: the call's
 * result, the rollback's id into rid ("" when none). */
static int fail_with_rollback(db_conn *c, const char *id, char rid[25])
{
    char err[512];
    pipeline_transition_extra x = {.rollback_message = "Automatic rollback after X failed: y."};
    int rc = pipeline_store_transition_ex(c, id, PS_ROLLING_OUT, PS_ERROR, "y", "s", NULL, 0, &x,
                                          err, sizeof err);
    snprintf(rid, 25, "%s", x.rollback_id);
    return rc;
}

static void a_failed_release_makes_one_rollback_to_the_live_release(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char live[25], failed[25], rid[25], again[25], err[512];
    finished(c, "arb", "prod", "v1", "SUCCEEDED", 30, live);
    at_status(c, "arb", "prod", "ROLLING_OUT", 0, failed);
    assert_int_equal(fail_with_rollback(c, failed, rid), 1);
    assert_int_not_equal(rid[0], '\0');
    pipeline r;
    assert_int_equal(pipeline_store_get(c, rid, &r, err, sizeof err), 1);
    assert_int_equal(r.status, PS_INITIALIZED);
    assert_string_equal(r.trigger_type, "rollback");
    assert_string_equal(r.artifact, "v1");
    assert_string_equal(r.rollback_of, failed);
    assert_string_equal(r.message, "Automatic rollback after X failed: y.");
    pipeline_clear(&r);
    assert_int_equal(events_of(c, rid, "INITIALIZED"), 1);
    /* Failing it again changes nothing and makes no second rollback. */
    assert_int_equal(fail_with_rollback(c, failed, again), 0);
    db_value p[] = {db_text(failed)};
    assert_int_equal(testdb_int(c, "SELECT COUNT(*) FROM pipeline WHERE rollback_of = ?", p, 1), 1);
    /* The rollback failing never triggers another. */
    db_value q[] = {db_text(rid)};
    db_result_free(testdb_q(c, "UPDATE pipeline SET status = 'ROLLING_OUT' WHERE id = ?", q, 1));
    assert_int_equal(fail_with_rollback(c, rid, again), 1);
    assert_string_equal(again, "");
    /* No live release: nothing. A newer pipeline for the target: nothing. */
    char lone[25], old[25], newer[25];
    at_status(c, "arbnone", "prod", "ROLLING_OUT", 0, lone);
    assert_int_equal(fail_with_rollback(c, lone, again), 1);
    assert_string_equal(again, "");
    finished(c, "arbnew", "prod", "v1", "SUCCEEDED", 30, live);
    finished(c, "arbnew", "prod", "v3", "BUILD_SUCCEEDED", 0, newer); /* manual, waiting */
    at_status(c, "arbnew", "prod", "ROLLING_OUT", 5, old);            /* created before it */
    assert_int_equal(fail_with_rollback(c, old, again), 1);
    assert_string_equal(again, "");
    db_close(c);
}

static void an_override_is_recorded_once_with_its_actor_and_reason(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char id[25], err[512];
    at_status(c, "ovr", "prod", "BUILD_SUCCEEDED", 0, id);
    assert_int_equal(pipeline_store_override(c, id, "alice@host", "hotfix", err, sizeof err), 1);
    assert_int_equal(pipeline_store_override(c, id, "alice@host", "again", err, sizeof err), 0);
    pipeline p;
    assert_int_equal(pipeline_store_get(c, id, &p, err, sizeof err), 1);
    assert_non_null(p.override_at);
    assert_non_null(p.deploy_requested_at);
    pipeline_clear(&p);
    db_value q[] = {db_text(id)};
    assert_int_equal(testdb_int(c,
                                "SELECT COUNT(*) FROM pipeline_event WHERE pipeline_id = ? AND "
                                "event_type = 'OVERRIDE' AND server = 'alice@host' AND message = "
                                "'Deploy override by alice@host: hotfix'",
                                q, 1),
                     1);
    char run[25];
    at_status(c, "ovr2", "prod", "RUNNING", 0, run);
    assert_int_equal(pipeline_store_override(c, run, "a", "b", err, sizeof err), 0);
    db_close(c);
}

/* Issue 39: a release promoted once, whoever tries (the unique
 * promoted_from); only the newest SUCCEEDED release or promotion of its
 * target; an unfinished pipeline in the destination: try later. */
static void a_release_is_promoted_once_and_only_while_it_is_the_newest(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char src[25], id[25], again[25], err[512];
    finished(c, "prm", "staging", "img:7", "SUCCEEDED", 5, src);
    assert_int_equal(
        pipeline_store_promote(c, src, "prod", "Promoted.", "s1", NULL, id, err, sizeof err), 0);
    pipeline p;
    assert_int_equal(pipeline_store_get(c, id, &p, err, sizeof err), 1);
    assert_string_equal(p.trigger_type, "promotion");
    assert_string_equal(p.promoted_from, src);
    assert_string_equal(p.environment, "prod");
    assert_string_equal(p.artifact, "img:7");
    assert_int_equal(p.status, PS_INITIALIZED);
    pipeline_clear(&p);
    assert_int_equal(events_of(c, id, "INITIALIZED"), 1);
    /* Again (by anyone): refused by the database, told which one was made. */
    assert_int_equal(
        pipeline_store_promote(c, src, "prod", "Promoted.", "s2", NULL, again, err, sizeof err),
        PSTORE_PROMOTED);
    assert_string_equal(again, id);
    db_value q[] = {db_text(src)};
    assert_int_equal(testdb_int(c, "SELECT COUNT(*) FROM pipeline WHERE promoted_from = ?", q, 1),
                     1);
    /* A newer pipeline of the source target: not a candidate any more. */
    char old[25], newer[25];
    finished(c, "prm2", "staging", "img:1", "SUCCEEDED", 10, old);
    finished(c, "prm2", "staging", "img:2", "ERROR", 1, newer);
    assert_int_equal(pipeline_store_promote(c, old, "prod", "P.", "s1", NULL, id, err, sizeof err),
                     PSTORE_STALE);
    /* Neither a rollback nor a release that did not go live. */
    char rb[25];
    finished(c, "prm3", "staging", "img:3", "SUCCEEDED", 1, rb);
    db_value r[] = {db_text(rb)};
    db_result_free(testdb_q(c, "UPDATE pipeline SET trigger_type = 'rollback' WHERE id = ?", r, 1));
    assert_int_equal(pipeline_store_promote(c, rb, "prod", "P.", "s1", NULL, id, err, sizeof err),
                     PSTORE_STALE);
    assert_int_equal(
        pipeline_store_promote(c, newer, "prod", "P.", "s1", NULL, id, err, sizeof err),
        PSTORE_STALE);
    /* An unfinished pipeline in the destination: later. */
    char busy[25], src4[25];
    finished(c, "prm4", "staging", "img:4", "SUCCEEDED", 1, src4);
    finished(c, "prm4", "prod", "img:0", "RUNNING", 1, busy);
    assert_int_equal(pipeline_store_promote(c, src4, "prod", "P.", "s1", NULL, id, err, sizeof err),
                     PSTORE_EXISTS);
    assert_int_equal(pipeline_store_promote(c, src4, "Prod", "P.", "s1", NULL, id, err, sizeof err),
                     PSTORE_BAD);
    db_close(c);
}

/* The two-person rule follows a promotion back to whoever created the
 * release it came from, and to whoever promoted it. */
static void who_made_a_release_follows_its_promotions(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char src[25], mid[25], top[25], err[512];
    pipeline_operator carol = {.actor = "carol@host", .reason = "ship"};
    pipeline_new n = {.namespace = "shop",
                      .application = "mdb",
                      .environment = "dev",
                      .artifact = "m1",
                      .actor = "oopsctl@host",
                      .op = &carol};
    assert_int_equal(pipeline_store_create(c, &n, src, err, sizeof err), 0);
    db_value p[] = {db_text(src)};
    db_result_free(testdb_q(c, "UPDATE pipeline SET status = 'SUCCEEDED' WHERE id = ?", p, 1));
    assert_int_equal(
        pipeline_store_promote(c, src, "staging", "P.", "s1", NULL, mid, err, sizeof err), 0);
    db_value m[] = {db_text(mid)};
    db_result_free(testdb_q(c, "UPDATE pipeline SET status = 'SUCCEEDED' WHERE id = ?", m, 1));
    pipeline_operator dave = {.actor = "dave@page", .reason = "now"};
    assert_int_equal(
        pipeline_store_promote(c, mid, "prod", "P.", "oopsctl@host", &dave, top, err, sizeof err),
        0);
    assert_int_equal(pipeline_store_made_by(c, top, "carol", err, sizeof err), 1);
    assert_int_equal(pipeline_store_made_by(c, top, "dave", err, sizeof err), 1);
    assert_int_equal(pipeline_store_made_by(c, top, "bob", err, sizeof err), 0);
    assert_int_equal(pipeline_store_made_by(c, mid, "dave", err, sizeof err), 0);
    /* promote-now is in the audit log, naming the new pipeline. */
    db_value t[] = {db_text(top)};
    assert_int_equal(testdb_int(c,
                                "SELECT COUNT(*) FROM operator_action WHERE action = 'promote-now' "
                                "AND pipeline_id = ? AND actor = 'dave@page'",
                                t, 1),
                     1);
    /* Held INITIALIZED (no build), a promotion is overridden there. */
    assert_int_equal(
        pipeline_store_override_by(c, top, PS_INITIALIZED, "oopsctl@host", &dave, err, sizeof err),
        1);
    assert_int_equal(
        pipeline_store_override_by(c, top, PS_INITIALIZED, "oopsctl@host", &dave, err, sizeof err),
        0);
    db_close(c);
}

static void a_reason_is_bounded_utf8_without_control_characters(void **state)
{
    (void)state;
    char err[256], big[PIPELINE_REASON_MAX + 2];
    assert_int_equal(pipeline_reason_check("--reason", "hotfix 42", err, sizeof err), 0);
    assert_int_equal(pipeline_reason_check("--reason", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x80",
                                           err, sizeof err),
                     0);
    const char *bad[] = {
        "",                 /* empty */
        "a\tb",             /* C0 control */
        "a\x7f",            /* DEL */
        "a\xc2\x85",        /* C1 control (NEL) */
        "caf\xe9",          /* Latin-1, not UTF-8 */
        "\xc0\xaf",         /* overlong "/" */
        "\xed\xa0\x80",     /* a surrogate */
        "\xf4\x90\x80\x80", /* beyond U+10FFFF */
        "\xe2\x82",         /* cut short */
        NULL,
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(pipeline_reason_check("--reason", bad[i], err, sizeof err), -1);
    assert_non_null(strstr(err, "--reason"));
    memset(big, 'a', PIPELINE_REASON_MAX);
    big[PIPELINE_REASON_MAX] = '\0';
    assert_int_equal(pipeline_reason_check("--reason", big, err, sizeof err), 0);
    big[PIPELINE_REASON_MAX] = 'a', big[PIPELINE_REASON_MAX + 1] = '\0';
    assert_int_equal(pipeline_reason_check("--reason", big, err, sizeof err), -1);
    assert_string_equal(err, "--reason must be 1 to 500 bytes, not 501");
}

static void an_operators_action_is_on_its_event_and_in_the_audit_log(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char id[25], err[512];
    at_status(c, "aud", "prod", "BUILD_SUCCEEDED", 0, id);
    pipeline_operator op = {.actor = "alice@build-7", .reason = "ship it"};
    assert_int_equal(
        pipeline_store_request_deploy_by(c, id, "oopsctl@build-7", &op, err, sizeof err), 1);
    assert_int_equal(
        pipeline_store_request_deploy_by(c, id, "oopsctl@build-7", &op, err, sizeof err),
        0); /* requested already: nothing, no second row */
    db_value q[] = {db_text(id)};
    assert_int_equal(testdb_int(c,
                                "SELECT COUNT(*) FROM pipeline_event WHERE pipeline_id = ? AND "
                                "event_type = 'DEPLOY_REQUESTED' AND from_status = to_status AND "
                                "actor = 'alice@build-7' AND reason = 'ship it' AND server = "
                                "'oopsctl@build-7' AND message = 'Deploy requested by "
                                "alice@build-7: ship it'",
                                q, 1),
                     1);
    assert_int_equal(testdb_int(c,
                                "SELECT COUNT(*) FROM operator_action WHERE pipeline_id = ? AND "
                                "action = 'release' AND outcome = 'done' AND namespace = 'shop' "
                                "AND application = 'aud' AND environment = 'prod' AND via = "
                                "'oopsctl@build-7'",
                                q, 1),
                     1);
    /* a stop through transition_ex with the operator: event and audit row, one transaction */
    pipeline_transition_extra x = {.op = &op};
    assert_int_equal(pipeline_store_transition_ex(c, id, PS_BUILD_SUCCEEDED, PS_STOPPED, "Stopped.",
                                                  NULL, "h1", 0, &x, err, sizeof err),
                     1);
    assert_int_equal(testdb_int(c,
                                "SELECT COUNT(*) FROM operator_action WHERE pipeline_id = ? AND "
                                "action = 'stop' AND reason = 'ship it' AND via = 'h1'",
                                q, 1),
                     1);
    /* a refusal: recorded with what the operator was told */
    assert_int_equal(pipeline_store_audit_refusal(c, &op, "stop", id, NULL, NULL, NULL, "refused",
                                                  "already finished", "h1", err, sizeof err),
                     0);
    pipeline_audit_query aq = {.actor = "alice@build-7", .limit = 10};
    pipeline_audit_row *v = NULL;
    size_t n = 0;
    assert_int_equal(pipeline_store_audit(c, &aq, &v, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    assert_string_equal(v[0].outcome, "refused"); /* newest first */
    assert_string_equal(v[0].detail, "already finished");
    assert_string_equal(v[0].environment, "prod");
    assert_string_equal(v[2].action, "release");
    pipeline_audit_free(v, n);
    aq.actor = "nobody@x";
    assert_int_equal(pipeline_store_audit(c, &aq, &v, &n, err, sizeof err), 0);
    assert_int_equal(n, 0);
    pipeline_audit_free(v, n);
    db_close(c);
}

/* The detail is VARCHAR(300): a refusal whose message has a multi-byte
 * character across byte 300 keeps its row in strict mode (issue 34), cut
 * before that character. */
static void an_audit_detail_is_cut_at_a_character_boundary(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    char err[512];
    db_result_free(testdb_q(c, "SET SESSION sql_mode = 'STRICT_ALL_TABLES'", NULL, 0));
    pipeline_operator op = {.actor = "carol@build-7", .reason = "ünïcode"};
    const char *chars[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
    for (size_t k = 0; k < 3; k++) {
        for (size_t lead = 297; lead <= 300; lead++) {
            char detail[400];
            db_result_free(
                testdb_q(c, "DELETE FROM operator_action WHERE actor = 'carol@build-7'", NULL, 0));
            memset(detail, 'x', lead);
            snprintf(detail + lead, sizeof detail - lead, "%s tail", chars[k]);
            assert_int_equal(pipeline_store_audit_refusal(c, &op, "create", NULL, "shop", "utf",
                                                          "prod", "refused", detail, "h1", err,
                                                          sizeof err),
                             0);
            size_t w = strlen(chars[k]);
            detail[lead + w <= 300 ? 300 : lead] = '\0'; /* ASCII follows the character */
            db_value q[] = {db_text(detail)};
            assert_int_equal(testdb_int(c,
                                        "SELECT COUNT(*) FROM operator_action WHERE actor = "
                                        "'carol@build-7' AND detail = ?",
                                        q, 1),
                             1);
        }
    }
    db_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_allowed_transition_is_in_the_table_and_nothing_else),
        cmocka_unit_test(an_illegal_transition_sends_no_sql),
        cmocka_unit_test(a_transition_records_its_event_time_and_driver),
        cmocka_unit_test(a_fenced_transition_needs_the_lock_held_by_that_session),
        cmocka_unit_test(a_batch_of_transitions_makes_each_as_alone_would),
        cmocka_unit_test(a_batch_without_returning_reads_its_event_ids_back),
        cmocka_unit_test(two_connections_race_one_transition_and_exactly_one_wins),
        cmocka_unit_test(concurrent_creates_for_one_app_and_env_leave_exactly_one),
        cmocka_unit_test(a_finished_pipeline_frees_its_app_and_env_for_the_next),
        cmocka_unit_test(a_build_succeeded_pipeline_cannot_deploy_beside_an_unfinished_one),
        cmocka_unit_test(pipelines_in_a_status_longer_than_n_seconds_on_the_database_clock),
        cmocka_unit_test(bad_fields_are_refused_before_insert),
        cmocka_unit_test(every_name_that_is_not_a_lowercase_dns_label_is_refused),
        cmocka_unit_test(ids_and_names_differing_in_case_or_trailing_space_are_different),
        cmocka_unit_test(every_identifier_column_is_binary_and_no_pad),
        cmocka_unit_test(text_output_escapes_every_control_character_and_invalid_utf8),
        cmocka_unit_test(flags_are_parsed_exactly),
        cmocka_unit_test(manual_deploy_request_is_conditional),
        cmocka_unit_test(the_default_rollback_target_is_the_last_other_artifact_that_succeeded),
        cmocka_unit_test(rollback_target_ties_are_broken_by_created_at_then_id),
        cmocka_unit_test(rollback_to_an_id_is_refused_unless_it_is_a_release_of_that_app_and_env),
        cmocka_unit_test(durations_are_read_as_oops_duration_reads_them),
        cmocka_unit_test(query_filters_and_the_default_view_newest_first),
        cmocka_unit_test(history_is_what_went_live_newest_first_after_the_one_in_progress),
        cmocka_unit_test(deploy_slots_bound_the_deploys_of_an_environment),
        cmocka_unit_test(a_slot_goes_to_the_rollback_then_the_oldest_waiting),
        cmocka_unit_test(a_failed_release_makes_one_rollback_to_the_live_release),
        cmocka_unit_test(an_override_is_recorded_once_with_its_actor_and_reason),
        cmocka_unit_test(a_release_is_promoted_once_and_only_while_it_is_the_newest),
        cmocka_unit_test(who_made_a_release_follows_its_promotions),
        cmocka_unit_test(a_reason_is_bounded_utf8_without_control_characters),
        cmocka_unit_test(an_operators_action_is_on_its_event_and_in_the_audit_log),
        cmocka_unit_test(an_audit_detail_is_cut_at_a_character_boundary),
    };
    int rc = cmocka_run_group_tests(tests, setup, NULL);
    mysql_library_end();
    return rc;
}
