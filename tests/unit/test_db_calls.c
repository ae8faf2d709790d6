/* db_calls and db_stmt on the real database: calls alone and in batches, the
 * one-by-one fallback, the reconnect fan-out, transactions kept for their
 * owner, calls that finish before their caller waits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "db_calls.h"
#include "db_fiber.h"
#include "db_stmt.h"
#include "testdb.h"

typedef struct {
    uv_loop_t loop;
    db_config cfg;
    metrics *m;
    db_calls s;
    db_conn *held[DB_POOL_MAX]; /* connections the test keeps lent, so calls must wait */
    size_t nheld;
    int finished; /* calls whose done ran */
} fixture;

static void on_done(db_call *call)
{
    fixture *f = call->ud;
    f->finished++;
}

static void got_held(db_conn *c, void *ud)
{
    fixture *f = ud;
    f->held[f->nheld++] = c;
}

/* Lend the pool's connections (all of them) to the test. */
static void hold_all(fixture *f)
{
    for (size_t i = 0; i < db_pool_size(f->s.pool); i++)
        db_pool_get(f->s.pool, got_held, f);
    assert_int_equal(db_pool_lent(f->s.pool), db_pool_size(f->s.pool));
}

static void release_all(fixture *f)
{
    while (f->nheld)
        db_pool_put(f->s.pool, f->held[--f->nheld]);
}

static void run_until(fixture *f, int finished)
{
    for (int i = 0; i < 100000 && f->finished < finished; i++)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_int_equal(f->finished, finished);
}

static fixture *setup(size_t pool_size, const db_config *cfg)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    uv_loop_init(&f->loop);
    if (cfg)
        f->cfg = *cfg;
    else
        testdb_config(&f->cfg);
    f->m = metrics_new();
    db_calls_init(&f->s, &f->loop, f->m);
    f->s.pool = db_pool_new(&f->cfg, pool_size);
    f->s.lane = db_pool_new_lane();
    assert_non_null(f->s.pool);
    return f;
}

static void teardown(fixture *f, bool free_cfg)
{
    assert_false(db_calls_busy(&f->s));
    db_pool_free(f->s.pool);
    db_pool_free(f->s.lane);
    db_calls_fini(&f->s);
    db_fiber_forget_all();
    uv_run(&f->loop, UV_RUN_NOWAIT);
    uv_loop_close(&f->loop);
    metrics_free(f->m);
    if (free_cfg)
        db_config_free(&f->cfg);
    free(f);
}

static db_stmt *stmt(fixture *f, const char *sql)
{
    db_stmt *st = db_stmt_new(sql, 0, true);
    st->call.done = on_done;
    st->call.ud = f;
    return st;
}

static db_stmt *insert(fixture *f, const char *row, const char *k)
{
    db_stmt *st = db_stmt_insert("INSERT INTO calls_t (k, v)", row, "", 1);
    db_stmt_text(st, 0, k, strlen(k));
    st->call.done = on_done;
    st->call.ud = f;
    return st;
}

static db_stmt *lookup(fixture *f, const char *k)
{
    db_stmt *st = db_stmt_lookup("SELECT k, v FROM calls_t WHERE k IN (?) ORDER BY v");
    assert_non_null(st);
    db_stmt_text(st, 0, k, strlen(k));
    st->call.done = on_done;
    st->call.ud = f;
    return st;
}

static double metric(fixture *f, const char *name, const char *labels)
{
    return metrics_get(f->m, name, labels);
}

static void reset_table(void)
{
    db_conn *c = testdb_open();
    db_result_free(testdb_q(c, "DROP TABLE IF EXISTS calls_t", NULL, 0));
    db_result_free(testdb_q(
        c, "CREATE TABLE calls_t (k VARCHAR(40) COLLATE utf8mb4_bin PRIMARY KEY, v INT)", NULL, 0));
    db_close(c);
}

static long long rows_in_table(void)
{
    db_conn *c = testdb_open();
    long long n = testdb_int(c, "SELECT COUNT(*) FROM calls_t", NULL, 0);
    db_close(c);
    return n;
}

static void a_call_alone_goes_at_once(void **state)
{
    (void)state;
    fixture *f = setup(2, NULL);
    db_stmt *st = stmt(f, "SELECT 41 + 1 AS v");
    db_calls_submit(&f->s, &st->call, true);
    /* Not queued behind anything: it holds a connection and waits for its answer. */
    assert_int_equal(db_pool_lent(f->s.pool), 1);
    assert_false(st->call.finished);
    run_until(f, 1);
    assert_int_equal(st->call.rc, 0);
    assert_string_equal(db_get(st->r, 0, 0), "42");
    assert_int_equal(db_pool_lent(f->s.pool), 0);
    db_stmt_free(st);
    teardown(f, true);
}

/* n inserts of rows ("k0", v) ... submitted at once, none over yet. */
static void submit_inserts(fixture *f, db_stmt **v, int n, const char *row)
{
    char k[16];
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof k, "k%d", i);
        v[i] = insert(f, row, k);
        db_calls_submit(&f->s, &v[i]->call, true);
        assert_false(v[i]->call.finished);
    }
}

/* ... run to their end: each succeeded (and is freed), n rows written. */
static void inserts_done(fixture *f, db_stmt **v, int n)
{
    run_until(f, n);
    for (int i = 0; i < n; i++) {
        assert_int_equal(v[i]->call.rc, 0);
        db_stmt_free(v[i]);
    }
    assert_int_equal(rows_in_table(), n);
}

static void calls_made_while_the_pool_is_lent_form_one_batch(void **state)
{
    (void)state;
    reset_table();
    fixture *f = setup(1, NULL);
    hold_all(f);
    db_stmt *v[10];
    submit_inserts(f, v, 10, "(?, 1)");
    /* The runner starts once the loop has run the callbacks at hand. */
    assert_int_equal(db_pool_waiting(f->s.pool), 0);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(db_pool_waiting(f->s.pool), 1); /* one runner waits, for all of them */
    release_all(f);
    inserts_done(f, v, 10);
    /* One batch of 10, sent as chunks of a power of two: 8 + 2 rows, two statements. */
    assert_true(metric(f, "oops_db_insert_batches_total", NULL) == 1);
    assert_true(metric(f, "oops_db_insert_batched_total", NULL) == 10);
    assert_true(metric(f, "oops_db_insert_statements_total", "table=\"calls_t\"") == 2);
    teardown(f, true);
}

/* Calls submitted together (one callback's, one tick's) while connections
 * are free go as one batch, not one alone per free connection and the rest
 * together (issue 36: 1,900 of 3,400 batches were of one). */
static void calls_submitted_together_form_one_batch_while_connections_are_free(void **state)
{
    (void)state;
    reset_table();
    fixture *f = setup(4, NULL);
    db_stmt *v[10];
    submit_inserts(f, v, 10, "(?, 1)");
    inserts_done(f, v, 10);
    assert_true(metric(f, "oops_db_insert_batches_total", NULL) == 1);
    assert_true(metric(f, "oops_db_insert_batched_total", NULL) == 10);
    teardown(f, true);
}

static void sixty_five_calls_go_as_64_and_1(void **state)
{
    (void)state;
    reset_table();
    fixture *f = setup(1, NULL);
    hold_all(f);
    db_stmt *v[65];
    submit_inserts(f, v, 65, "(?, 2)");
    release_all(f);
    inserts_done(f, v, 65);
    /* One batch of 64 (one statement), then the last alone. */
    assert_true(metric(f, "oops_db_insert_batches_total", NULL) == 1);
    assert_true(metric(f, "oops_db_insert_batched_total", NULL) == 64);
    assert_true(metric(f, "oops_db_insert_statements_total", "table=\"calls_t\"") == 2);
    teardown(f, true);
}

static void a_failing_batch_is_made_one_by_one_each_with_its_answer(void **state)
{
    (void)state;
    reset_table();
    fixture *f = setup(1, NULL);
    db_stmt *first = insert(f, "(?, 3)", "dup");
    db_calls_submit(&f->s, &first->call, true);
    run_until(f, 1);
    assert_int_equal(first->call.rc, 0);
    db_stmt_free(first);
    hold_all(f);
    const char *keys[8] = {"a", "b", "dup", "c", "d", "dup", "e", "f"};
    db_stmt *v[8];
    for (int i = 0; i < 8; i++) {
        v[i] = insert(f, "(?, 3)", keys[i]);
        db_calls_submit(&f->s, &v[i]->call, true);
    }
    release_all(f);
    run_until(f, 9);
    for (int i = 0; i < 8; i++) {
        if (strcmp(keys[i], "dup") == 0) {
            assert_int_equal(v[i]->call.rc, DB_ER_DUP_ENTRY);
            assert_non_null(strstr(v[i]->err, "Duplicate"));
        } else {
            assert_int_equal(v[i]->call.rc, 0);
        }
        db_stmt_free(v[i]);
    }
    assert_int_equal(rows_in_table(), 7);
    /* The first alone, the batch that failed, then each of the 8 alone. */
    assert_true(metric(f, "oops_db_insert_statements_total", "table=\"calls_t\"") == 1 + 1 + 8);
    teardown(f, true);
}

static void lookups_waiting_together_are_one_statement_each_gets_its_rows(void **state)
{
    (void)state;
    reset_table();
    fixture *f = setup(1, NULL);
    db_conn *c = testdb_open();
    db_result_free(
        testdb_q(c, "INSERT INTO calls_t VALUES ('x', 1), ('y', 2), ('x2', 3), ('Y', 4)", NULL, 0));
    db_close(c);
    hold_all(f);
    const char *keys[5] = {"x", "y", "nobody", "x", "Y"};
    const char *want[5] = {"1", "2", NULL, "1", "4"};
    db_stmt *v[5];
    for (int i = 0; i < 5; i++) {
        v[i] = lookup(f, keys[i]);
        db_calls_submit(&f->s, &v[i]->call, true);
    }
    release_all(f);
    run_until(f, 5);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(v[i]->call.rc, 0);
        assert_int_equal(v[i]->r->nrows, want[i] ? 1 : 0);
        if (want[i])
            assert_string_equal(db_get(v[i]->r, 0, 1), want[i]);
        db_stmt_free(v[i]);
    }
    assert_true(metric(f, "oops_db_lookup_statements_total", "table=\"calls_t\"") == 1);
    teardown(f, true);
}

static void kinds_are_not_slots_forty_shapes_each_batch(void **state)
{
    (void)state;
    reset_table();
    fixture *f = setup(1, NULL);
    hold_all(f);
    db_stmt *v[80];
    char row[32], k[16];
    for (int i = 0; i < 80; i++) {
        snprintf(row, sizeof row, "(?, %d)", i % 40); /* 40 statement shapes */
        snprintf(k, sizeof k, "k%d", i);
        v[i] = insert(f, row, k);
        db_calls_submit(&f->s, &v[i]->call, true);
    }
    release_all(f);
    run_until(f, 80);
    for (int i = 0; i < 80; i++) {
        assert_int_equal(v[i]->call.rc, 0);
        db_stmt_free(v[i]);
    }
    /* Each shape's two rows in one statement: 40, not 80; and every queue is gone after. */
    assert_true(metric(f, "oops_db_insert_statements_total", "table=\"calls_t\"") == 40);
    assert_true(metric(f, "oops_db_insert_batches_total", NULL) == 40);
    assert_null(f->s.queues);
    teardown(f, true);
}

/* A loopback port nothing listens on. */
static int closed_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &len), 0);
    close(s);
    return ntohs(a.sin_port);
}

static void a_connection_that_cannot_open_fails_every_waiting_call(void **state)
{
    (void)state;
    db_config cfg;
    testdb_config(&cfg);
    cfg.port = (unsigned)closed_port();
    fixture *f = setup(1, &cfg);
    hold_all(f);
    db_stmt *v[7];
    for (int i = 0; i < 7; i++) {
        v[i] = i < 3 ? insert(f, "(?, 5)", "k") : i < 6 ? lookup(f, "k") : stmt(f, "SELECT 1");
        db_calls_submit(&f->s, &v[i]->call, true);
    }
    release_all(f);
    run_until(f, 7);
    for (int i = 0; i < 7; i++) {
        assert_int_not_equal(v[i]->call.conn_rc, 0);
        assert_true(db_errno_is_connection(v[i]->call.conn_rc));
        assert_non_null(strstr(v[i]->call.conn_err, "127.0.0.1"));
        db_stmt_free(v[i]);
    }
    teardown(f, true);
}

/* A session of the busy account kept open by the test: one fewer for the pool. */
static db_conn *take_one(const db_config *cfg)
{
    char err[512];
    db_conn *c = db_open(cfg, err, sizeof err);
    if (!c)
        fail_msg("%s", err);
    return c;
}

/* An account each: a test that fails leaves its sessions behind, and the next must not count them. */
#define BUSY_WAIT_USER "oops_busy_wait"
#define BUSY_NONE_USER "oops_busy_none"

/* A lookup the busy account may make (no privilege needed): a character set's longest character. */
static db_stmt *charset(fixture *f, const char *name)
{
    db_stmt *st =
        db_stmt_lookup("SELECT CHARACTER_SET_NAME, MAXLEN FROM "
                       "information_schema.CHARACTER_SETS WHERE CHARACTER_SET_NAME IN (?)");
    assert_non_null(st);
    db_stmt_text(st, 0, name, strlen(name));
    st->call.done = on_done;
    st->call.ud = f;
    return st;
}

static void calls_wait_for_the_open_connection_while_the_database_is_busy(void **state)
{
    (void)state;
    db_config cfg;
    testdb_limited_user(&cfg, BUSY_WAIT_USER, 2);
    fixture *f = setup(4, &cfg);
    db_pool_set_backoff(f->s.pool, 200, 400);
    /* One call: the pool opens one connection. */
    db_stmt *first = stmt(f, "SELECT 1");
    db_calls_submit(&f->s, &first->call, true);
    run_until(f, 1);
    assert_int_equal(first->call.rc, 0);
    db_stmt_free(first);
    assert_int_equal(db_pool_open(f->s.pool), 1);
    db_conn *other = take_one(&cfg); /* the account's second and last session */
    long long aborted0 = testdb_aborted_connects();
    /* At once: the first gets the open connection, the others find the
     * database refusing a new one (1226) and wait for that one instead of
     * failing; so does a batch (two lookups in one statement). */
    db_stmt *v[5] = {stmt(f, "SELECT SLEEP(0.05)"), stmt(f, "SELECT 2"), stmt(f, "SELECT 3"),
                     charset(f, "utf8mb4"), charset(f, "latin1")};
    for (int i = 0; i < 5; i++)
        db_calls_submit(&f->s, &v[i]->call, true);
    run_until(f, 6);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(v[i]->call.conn_rc, 0);
        assert_int_equal(v[i]->call.rc, 0);
    }
    assert_string_equal(db_get(v[2]->r, 0, 0), "3");
    assert_string_equal(db_get(v[3]->r, 0, 1), "4");
    assert_string_equal(db_get(v[4]->r, 0, 1), "1");
    assert_true(db_pool_busy(f->s.pool));
    assert_int_equal(db_pool_open(f->s.pool), 1);
    for (int i = 0; i < 5; i++)
        db_stmt_free(v[i]);
    /* No connect storm: rounds of three calls for a second, with the
     * backoff at 200 ms doubling to 400 ms: at most one attempt per
     * backoff, one at a time (about 4), not two per round (40). */
    uint64_t refused0 = db_pool_refusals(f->s.pool);
    int done = 6;
    for (int round = 0; round < 20; round++) {
        db_stmt *r[3];
        for (int i = 0; i < 3; i++) {
            r[i] = stmt(f, "SELECT 4");
            db_calls_submit(&f->s, &r[i]->call, true);
        }
        run_until(f, done += 3);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(r[i]->call.rc, 0);
            db_stmt_free(r[i]);
        }
        usleep(50 * 1000);
    }
    uint64_t refused = db_pool_refusals(f->s.pool) - refused0;
    long long aborted = testdb_aborted_connects() - aborted0;
    print_message("busy for ~1.5 s: %llu refused opens, %lld aborted connects on the server\n",
                  (unsigned long long)refused, aborted);
    assert_in_range(refused, 1, 8);
    assert_in_range(aborted, 2, 10);
    /* The other session goes: the next calls that need a second connection open it. */
    db_close(other);
    for (int i = 0; i < 200 && db_pool_open(f->s.pool) < 2; i++) {
        db_stmt *r[2] = {stmt(f, "SELECT SLEEP(0.01)"), stmt(f, "SELECT SLEEP(0.01)")};
        db_calls_submit(&f->s, &r[0]->call, true);
        db_calls_submit(&f->s, &r[1]->call, true);
        run_until(f, done += 2);
        db_stmt_free(r[0]);
        db_stmt_free(r[1]);
        usleep(20 * 1000);
    }
    assert_int_equal(db_pool_open(f->s.pool), 2);
    assert_false(db_pool_busy(f->s.pool));
    teardown(f, false);
    db_config_free(&cfg);
    testdb_drop_limited_user(BUSY_WAIT_USER);
}

#define BUSY_OWN_USER "oops_busy_own"

/* SELECT whether the call runs on f->s.work (taking 10 ms: it waits for its
 * answer, so the calls submitted after it find `work` in use). */
static db_stmt *on_work(fixture *f)
{
    db_stmt *st = stmt(f, "SELECT CONNECTION_ID() = ? AS same, SLEEP(0.01)");
    st->p = realloc(st->p, sizeof *st->p);
    assert_non_null(st->p);
    st->n = 1;
    st->p[0] = db_int((long long)db_connection_id(f->s.work));
    return st;
}

static void a_refused_pool_sends_its_calls_to_the_servers_own_connection(void **state)
{
    (void)state;
    db_config cfg;
    testdb_limited_user(&cfg, BUSY_OWN_USER, 1);
    db_conn *other = take_one(&cfg); /* the account's only session: the pool can open none */
    fixture *f = setup(2, &cfg);
    f->s.work = testdb_open(); /* the server's own connection, open since its start */
    f->s.work_lane = db_pool_new_lane();
    /* More at once than wait for `work` on their own: the rest try the pool,
     * are refused (1226) with none of it open, and wait for `work` too,
     * instead of failing. */
    enum { N = DB_CALLS_OWN_QUEUE_MAX + 4 };
    db_stmt *v[N];
    for (int i = 0; i < N; i++) {
        v[i] = on_work(f);
        db_calls_submit(&f->s, &v[i]->call, true);
    }
    run_until(f, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(v[i]->call.conn_rc, 0);
        assert_int_equal(v[i]->call.rc, 0);
        assert_string_equal(db_get(v[i]->r, 0, 0), "1");
        db_stmt_free(v[i]);
    }
    assert_true(db_pool_refusals(f->s.pool) >= 1);
    assert_int_equal(db_pool_open(f->s.pool), 0);
    db_pool_free(f->s.work_lane);
    f->s.work_lane = NULL;
    db_close(f->s.work);
    db_close(other);
    teardown(f, false);
    db_config_free(&cfg);
    testdb_drop_limited_user(BUSY_OWN_USER);
}

static void with_no_connection_open_a_busy_database_fails_calls_saying_so(void **state)
{
    (void)state;
    db_config cfg;
    testdb_limited_user(&cfg, BUSY_NONE_USER, 1);
    db_conn *other = take_one(&cfg); /* the account's only session */
    fixture *f = setup(2, &cfg);
    long long aborted0 = testdb_aborted_connects();
    db_stmt *a = stmt(f, "SELECT 1");
    db_calls_submit(&f->s, &a->call, true);
    run_until(f, 1);
    assert_int_equal(a->call.conn_rc, DB_ER_USER_LIMIT_REACHED);
    assert_string_equal(db_error_name(a->call.conn_rc), "unreachable");
    assert_non_null(strstr(a->call.conn_err, "127.0.0.1"));
    assert_non_null(strstr(a->call.conn_err, "the database refuses new connections (too many"));
    /* Within the backoff (1 s): failed at once, without a connect attempt. */
    db_stmt *b = stmt(f, "SELECT 1");
    db_calls_submit(&f->s, &b->call, true);
    run_until(f, 2);
    assert_int_equal(b->call.conn_rc, DB_ER_USER_LIMIT_REACHED);
    assert_non_null(strstr(b->call.conn_err, "refuses new connections"));
    assert_non_null(strstr(b->call.conn_err, "no new connection tried for"));
    assert_int_equal(db_pool_refusals(f->s.pool), 1);
    assert_int_equal(testdb_aborted_connects() - aborted0, 1);
    db_stmt_free(a);
    db_stmt_free(b);
    db_close(other);
    teardown(f, false);
    db_config_free(&cfg);
    testdb_drop_limited_user(BUSY_NONE_USER);
}

static void nothing(db_call *call) { (void)call; }

/* Submit n calls of sql at once on WORK and run them to their end: the pool
 * connections opened meanwhile. */
static size_t opened_by(fixture *f, int n, const char *sql)
{
    db_stmt *v[16];
    for (int i = 0; i < n; i++) {
        v[i] = stmt(f, sql);
        db_calls_submit(&f->s, &v[i]->call, true);
    }
    for (int i = 0; i < n; i++) /* these, whatever else finishes meanwhile */
        for (int k = 0; k < 100000 && !v[i]->call.finished; k++)
            uv_run(&f->loop, UV_RUN_ONCE);
    for (int i = 0; i < n; i++) {
        assert_true(v[i]->call.finished);
        assert_int_equal(v[i]->call.rc, 0);
        db_stmt_free(v[i]);
    }
    return db_pool_open(f->s.pool);
}

static void an_idle_servers_calls_at_one_moment_share_its_own_connection(void **state)
{
    (void)state;
    fixture *f = setup(4, NULL);
    f->s.work = testdb_open();
    f->s.work_lane = db_pool_new_lane();
    /* An idle tick's calls, all at once (scans, stats, orphan checks): they
     * wait their turn on `work`, and no pool connection opens. */
    assert_int_equal(opened_by(f, DB_CALLS_OWN_QUEUE_MAX, "SELECT SLEEP(0.005)"), 0);
    /* More than that at once is load: the pool grows. */
    assert_true(opened_by(f, DB_CALLS_OWN_QUEUE_MAX + 4, "SELECT SLEEP(0.02)") >= 1);
    db_pool_trim(f->s.pool, 0);
    assert_int_equal(db_pool_open(f->s.pool), 0);
    /* While `work` waits on purpose (parked: the watcher's GET_LOCK), a call
     * takes a pool connection instead of queueing behind the wait. */
    db_stmt *park = stmt(f, "SELECT SLEEP(0.3)");
    park->call.lane = DB_CALL_OWN;
    park->call.parks = true;
    park->call.park_ms = 300;
    int before = f->finished;
    db_calls_submit(&f->s, &park->call, true);
    assert_int_equal(opened_by(f, 1, "SELECT 1"), 1);
    assert_int_equal(f->finished, before + 1); /* the short call did not wait for the park */
    run_until(f, before + 2);
    assert_int_equal(park->call.rc, 0);
    db_stmt_free(park);
    /* A park due to end (or late: the database answers a timed-out wait
     * late when loaded) is waited for like a short call. */
    db_pool_trim(f->s.pool, 0);
    park = stmt(f, "SELECT SLEEP(0.2)");
    park->call.lane = DB_CALL_OWN;
    park->call.parks = true;
    park->call.park_ms = 10;
    before = f->finished;
    db_calls_submit(&f->s, &park->call, true);
    assert_int_equal(opened_by(f, 3, "SELECT 1"), 0);
    run_until(f, before + 4);
    assert_int_equal(park->call.rc, 0);
    db_stmt_free(park);
    db_pool_free(f->s.work_lane);
    f->s.work_lane = NULL;
    db_close(f->s.work);
    teardown(f, true);
}

/* A batch due (submitted, its runner not started yet) when the watcher's
 * park comes, in the same callback: the batch goes first, on `work`, as it
 * would have had it started at once; it does not open a pool connection for
 * itself behind the park (an idle server kept a third connection so). */
static void a_batch_due_goes_before_a_park_on_the_own_connection(void **state)
{
    (void)state;
    reset_table();
    fixture *f = setup(4, NULL);
    f->s.work = testdb_open();
    f->s.work_lane = db_pool_new_lane();
    db_stmt *ins = insert(f, "(?, 1)", "before-park");
    db_calls_submit(&f->s, &ins->call, true);
    db_stmt *park = stmt(f, "SELECT SLEEP(0.2)");
    park->call.lane = DB_CALL_OWN;
    park->call.parks = true;
    park->call.park_ms = 200;
    db_calls_submit(&f->s, &park->call, true);
    run_until(f, 2);
    assert_int_equal(ins->call.rc, 0);
    assert_int_equal(park->call.rc, 0);
    assert_int_equal(rows_in_table(), 1);
    assert_true(metric(f, "oops_db_batches_total", "conn=\"own\"") == 1);
    assert_true(metric(f, "oops_db_batches_total", "conn=\"pool\"") == 0);
    assert_int_equal(db_pool_open(f->s.pool), 0);
    db_stmt_free(ins);
    db_stmt_free(park);
    db_pool_free(f->s.work_lane);
    f->s.work_lane = NULL;
    db_close(f->s.work);
    teardown(f, true);
}

static void a_call_can_finish_before_its_caller_waits(void **state)
{
    (void)state;
    fixture *f = setup(1, NULL);
    /* On the lock lane, work that never waits for a socket: over inside submit. */
    db_call lane_call = {.lane = DB_CALL_LOCK, .run = nothing, .done = on_done, .ud = f};
    db_calls_submit(&f->s, &lane_call, true);
    assert_true(lane_call.finished);
    assert_int_equal(f->finished, 1);
    /* A caller that cannot wait: blocking, on `work`. */
    f->s.work = testdb_open();
    db_stmt *st = stmt(f, "SELECT 7");
    db_calls_submit(&f->s, &st->call, false);
    assert_true(st->call.finished);
    assert_string_equal(db_get(st->r, 0, 0), "7");
    db_stmt_free(st);
    /* ... refused while a fiber uses `work` (its lane is lent). */
    f->s.work_lane = db_pool_new_lane();
    db_pool_get(f->s.work_lane, got_held, f);
    f->nheld = 0;
    st = stmt(f, "SELECT 7");
    db_calls_submit(&f->s, &st->call, false);
    assert_true(st->call.finished);
    assert_int_not_equal(st->call.conn_rc, 0);
    db_stmt_free(st);
    db_pool_put(f->s.work_lane, NULL);
    /* A call on the server's own connection (DB_CALL_OWN) waits for the lane, then runs on `work`. */
    db_pool_get(f->s.work_lane, got_held, f);
    f->nheld = 0;
    st = stmt(f, "SELECT CONNECTION_ID() = ? AS same");
    st->call.lane = DB_CALL_OWN;
    st->p = realloc(st->p, sizeof *st->p);
    st->n = 1;
    st->p[0] = db_int((long long)db_connection_id(f->s.work));
    int before = f->finished;
    db_calls_submit(&f->s, &st->call, true);
    assert_false(st->call.finished); /* the lane is lent: it waits */
    db_pool_put(f->s.work_lane, NULL);
    run_until(f, before + 1);
    assert_int_equal(st->call.rc, 0);
    assert_string_equal(db_get(st->r, 0, 0), "1");
    assert_int_equal(db_pool_lent(f->s.work_lane), 0);
    db_stmt_free(st);
    db_pool_free(f->s.work_lane);
    f->s.work_lane = NULL;
    db_close(f->s.work);
    teardown(f, true);
}

static db_stmt *owned(fixture *f, const void *owner, const char *sql, db_call_tx tx)
{
    db_stmt *st = stmt(f, sql);
    st->call.owner = owner;
    st->call.tx = tx;
    st->want_rows = false;
    return st;
}

static void a_transaction_keeps_its_connection_for_its_owner(void **state)
{
    (void)state;
    reset_table();
    fixture *f = setup(1, NULL);
    int a, b; /* two owners */
    db_stmt *begin = owned(f, &a, "START TRANSACTION", DB_CALL_BEGIN);
    db_calls_submit(&f->s, &begin->call, true);
    run_until(f, 1);
    assert_true(db_calls_in_tx(&f->s, &a));
    assert_false(db_calls_in_tx(&f->s, &b));
    /* b waits for the connection a keeps; a's own calls run on it meanwhile. */
    db_stmt *other = owned(f, &b, "SELECT 1", DB_CALL_PLAIN);
    db_calls_submit(&f->s, &other->call, true);
    db_stmt *mine = insert(f, "(?, 6)", "in-tx");
    mine->call.owner = &a;
    db_calls_submit(&f->s, &mine->call, true);
    run_until(f, 2);
    assert_int_equal(mine->call.rc, 0);
    assert_false(other->call.finished);
    assert_int_equal(rows_in_table(), 0); /* not committed yet */
    db_stmt *commit = owned(f, &a, "COMMIT", DB_CALL_END);
    db_calls_submit(&f->s, &commit->call, true);
    run_until(f, 4);
    assert_int_equal(commit->call.rc, 0);
    assert_true(other->call.finished);
    assert_false(db_calls_in_tx(&f->s, &a));
    assert_int_equal(rows_in_table(), 1);
    /* An owner that ends with its transaction open: rolled back. */
    db_stmt *begin2 = owned(f, &b, "START TRANSACTION", DB_CALL_BEGIN);
    db_calls_submit(&f->s, &begin2->call, true);
    run_until(f, 5); /* an owner waits for each of its calls (a task yields) */
    db_stmt *lost = insert(f, "(?, 6)", "rolled-back");
    lost->call.owner = &b;
    db_calls_submit(&f->s, &lost->call, true);
    run_until(f, 6);
    assert_int_equal(lost->call.rc, 0);
    db_calls_owner_ended(&f->s, &b);
    for (int i = 0; i < 1000 && db_calls_busy(&f->s); i++)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_false(db_calls_busy(&f->s));
    assert_int_equal(rows_in_table(), 1);
    db_stmt *all[] = {begin, other, mine, commit, begin2, lost};
    for (size_t i = 0; i < 6; i++)
        db_stmt_free(all[i]);
    teardown(f, true);
}

static void chunks_and_shapes(void **state)
{
    (void)state;
    assert_int_equal(db_batch_shape(1), 2);
    assert_int_equal(db_batch_shape(2), 2);
    assert_int_equal(db_batch_shape(3), 4);
    assert_int_equal(db_batch_shape(64), 64);
    assert_int_equal(db_batch_chunk(1, 64), 1);
    assert_int_equal(db_batch_chunk(7, 64), 4);
    assert_int_equal(db_batch_chunk(65, 64), 64);
    assert_int_equal(db_batch_chunk(100, 32), 32);
    buf sql = {0};
    db_value p[4];
    size_t np = 0;
    const char *v[] = {"a", "b", "c"};
    db_batch_in_list(&sql, p, &np, v, 3, 4);
    assert_string_equal(sql.p, " IN (?, ?, ?, ?)");
    assert_int_equal(np, 4);
    assert_string_equal(p[3].s, "c");
    buf_free(&sql);
    assert_null(db_stmt_lookup("SELECT a FROM t WHERE a = ?"));
    assert_null(db_stmt_lookup("SELECT a FROM t WHERE a IN (?) AND b = ?"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chunks_and_shapes),
        cmocka_unit_test(a_call_alone_goes_at_once),
        cmocka_unit_test(calls_made_while_the_pool_is_lent_form_one_batch),
        cmocka_unit_test(calls_submitted_together_form_one_batch_while_connections_are_free),
        cmocka_unit_test(a_batch_due_goes_before_a_park_on_the_own_connection),
        cmocka_unit_test(sixty_five_calls_go_as_64_and_1),
        cmocka_unit_test(a_failing_batch_is_made_one_by_one_each_with_its_answer),
        cmocka_unit_test(lookups_waiting_together_are_one_statement_each_gets_its_rows),
        cmocka_unit_test(kinds_are_not_slots_forty_shapes_each_batch),
        cmocka_unit_test(a_connection_that_cannot_open_fails_every_waiting_call),
        cmocka_unit_test(a_call_can_finish_before_its_caller_waits),
        cmocka_unit_test(an_idle_servers_calls_at_one_moment_share_its_own_connection),
        cmocka_unit_test(a_transaction_keeps_its_connection_for_its_owner),
        cmocka_unit_test(calls_wait_for_the_open_connection_while_the_database_is_busy),
        cmocka_unit_test(with_no_connection_open_a_busy_database_fails_calls_saying_so),
        cmocka_unit_test(a_refused_pool_sends_its_calls_to_the_servers_own_connection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
