/* The lock registry against the real MariaDB of tests/run.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <mysql.h>

#include "lock_registry.h"
#include "testdb.h"

static lock_registry *new_registry(unsigned validate_ms)
{
    db_config cfg;
    char err[512];
    testdb_config(&cfg);
    lock_registry_options o = {
        .validate_interval_ms = validate_ms, .backoff_initial_ms = 50, .backoff_max_ms = 200};
    lock_registry *r = lock_registry_new(&cfg, &o);
    db_config_free(&cfg);
    assert_int_equal(lock_registry_connect(r, err, sizeof err), 0);
    assert_true(lock_registry_is_up(r));
    return r;
}

/* Who holds `name` on the server, seen from an independent session. */
static long long holder(db_conn *c, const char *name)
{
    char shortn[LOCK_NAME_MAX + 1];
    lock_name_shorten(name, shortn);
    db_value p[] = {db_text(shortn)};
    return testdb_int(c, "SELECT COALESCE(IS_USED_LOCK(?), 0)", p, 1);
}

static void two_registries_contend_for_one_name(void **state)
{
    (void)state;
    lock_registry *a = new_registry(30000), *b = new_registry(30000);
    db_conn *spy = testdb_open();
    assert_int_equal(lock_registry_acquire(a, "oops:pipeline:one"), 1);
    assert_int_equal(lock_registry_acquire(b, "oops:pipeline:one"), 0);
    assert_true(lock_registry_holds(a, "oops:pipeline:one"));
    assert_false(lock_registry_holds(b, "oops:pipeline:one"));
    assert_int_equal(holder(spy, "oops:pipeline:one"), (long long)lock_registry_connection_id(a));
    lock_registry_free(a);
    lock_registry_free(b);
    db_close(spy);
}

static void acquiring_a_held_name_is_a_noop_not_a_second_count(void **state)
{
    (void)state;
    lock_registry *a = new_registry(30000), *b = new_registry(30000);
    assert_int_equal(lock_registry_acquire(a, "oops:x"), 1);
    uint64_t before = lock_registry_statements(a);
    assert_int_equal(lock_registry_acquire(a, "oops:x"), 1);
    assert_int_equal(lock_registry_statements(a), before); /* no SQL sent */
    /* One release frees it: a stacked second GET_LOCK would keep it held. */
    assert_int_equal(lock_registry_release(a, "oops:x"), 1);
    assert_int_equal(lock_registry_acquire(b, "oops:x"), 1);
    lock_registry_free(a);
    lock_registry_free(b);
}

static void release_frees_the_name_for_the_other_registry(void **state)
{
    (void)state;
    lock_registry *a = new_registry(30000), *b = new_registry(30000);
    assert_int_equal(lock_registry_acquire(a, "oops:leader:restart"), 1);
    assert_int_equal(lock_registry_acquire(b, "oops:leader:restart"), 0);
    assert_int_equal(lock_registry_release(a, "oops:leader:restart"), 1);
    assert_false(lock_registry_holds(a, "oops:leader:restart"));
    assert_int_equal(lock_registry_release(a, "oops:leader:restart"), 0);
    assert_int_equal(lock_registry_acquire(b, "oops:leader:restart"), 1);
    lock_registry_free(a);
    lock_registry_free(b);
}

static void a_batch_is_split_between_contenders_in_one_statement(void **state)
{
    (void)state;
    enum { N = 300 };
    lock_registry *a = new_registry(30000), *b = new_registry(30000);
    char names[N][40];
    const char *pn[N];
    bool got_a[N], got_b[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "oops:pipeline:batch%03d", i);
        pn[i] = names[i];
    }
    /* a takes the even ones first, one by one */
    for (int i = 0; i < N; i += 2)
        assert_int_equal(lock_registry_acquire(a, pn[i]), 1);
    uint64_t before = lock_registry_statements(b);
    assert_int_equal(lock_registry_acquire_many(b, pn, N, got_b), N / 2);
    assert_int_equal(lock_registry_statements(b) - before, 1);
    for (int i = 0; i < N; i++)
        assert_int_equal(got_b[i], i % 2 == 1);
    /* a asks for all: it already holds its own (no SQL for those), gets none of b's */
    before = lock_registry_statements(a);
    assert_int_equal(lock_registry_acquire_many(a, pn, N, got_a), N / 2);
    assert_int_equal(lock_registry_statements(a) - before, 1);
    for (int i = 0; i < N; i++)
        assert_int_equal(got_a[i], i % 2 == 0);
    char **held;
    size_t n = lock_registry_held(b, &held);
    assert_int_equal(n, N / 2);
    lock_names_free(held, n);
    lock_registry_free(a);
    lock_registry_free(b);
}

/* A scan's batch at 10,000 pipelines (the bench's largest) is still one
 * GET_LOCK statement: only MariaDB's 65,535 placeholders would split it. */
static void ten_thousand_names_are_one_statement(void **state)
{
    (void)state;
    enum { N = 10000 };
    lock_registry *a = new_registry(30000), *b = new_registry(30000);
    db_conn *spy = testdb_open();
    char(*names)[40] = calloc(N, sizeof *names);
    const char **pn = calloc(N, sizeof *pn);
    bool *got = calloc(N, sizeof *got);
    assert_non_null(names);
    assert_non_null(pn);
    assert_non_null(got);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "oops:pipeline:many%05d", i);
        pn[i] = names[i];
    }
    assert_int_equal(lock_registry_acquire(b, pn[N - 1]), 1); /* the last one is taken */
    uint64_t before = lock_registry_statements(a);
    assert_int_equal(lock_registry_acquire_many(a, pn, N, got), N - 1);
    assert_int_equal(lock_registry_statements(a) - before, 1);
    assert_true(got[0] && got[N / 2] && got[N - 2]);
    assert_false(got[N - 1]);
    assert_int_equal(holder(spy, pn[N / 2]), (long long)lock_registry_connection_id(a));
    assert_int_equal(holder(spy, pn[N - 1]), (long long)lock_registry_connection_id(b));
    free(names);
    free(pn);
    free(got);
    db_close(spy);
    lock_registry_free(a);
    lock_registry_free(b);
}

static void killed_session_is_noticed_within_one_validation_and_reacquires(void **state)
{
    (void)state;
    lock_registry *a = new_registry(200), *b = new_registry(30000);
    db_conn *admin = testdb_open();
    char err[512];
    assert_int_equal(lock_registry_acquire(a, "oops:pipeline:killed"), 1);
    uint64_t old_id = lock_registry_connection_id(a);

    db_value p[] = {db_int((long long)old_id)};
    db_result_free(testdb_q(admin, "KILL ?", p, 1));
    /* The lock is free on the server at once: the session that held it is gone. */
    for (int i = 0; i < 50 && holder(admin, "oops:pipeline:killed") != 0; i++)
        usleep(20000);
    assert_int_equal(holder(admin, "oops:pipeline:killed"), 0);
    assert_int_equal(lock_registry_acquire(b, "oops:pipeline:killed"), 1);

    /* One validation interval later, the registry knows it lost everything. */
    uint64_t now = 1000000;
    int ev = lock_registry_tick(a, now, err, sizeof err);
    ev |= lock_registry_tick(a, now + 200, err, sizeof err);
    assert_true(ev & LOCK_EV_LOST);
    assert_false(lock_registry_holds(a, "oops:pipeline:killed"));
    char **held;
    size_t n = lock_registry_held(a, &held);
    assert_int_equal(n, 0);
    lock_names_free(held, n);

    /* It reconnected in the same tick, on a new session, and acquires again. */
    assert_true(ev & LOCK_EV_RECONNECTED);
    assert_true(lock_registry_is_up(a));
    assert_int_not_equal(lock_registry_connection_id(a), old_id);
    assert_int_equal(lock_registry_reconnects(a), 1);
    assert_int_equal(lock_registry_acquire(a, "oops:pipeline:killed"), 0); /* b has it now */
    assert_int_equal(lock_registry_release(b, "oops:pipeline:killed"), 1);
    lock_registry_free(b);
    assert_int_equal(lock_registry_acquire(a, "oops:pipeline:killed"), 1);
    lock_registry_free(a);
    db_close(admin);
}

/* A loss found by a statement (here an acquire) rather than by validation is
 * reported by the next tick all the same: operators see every loss. */
static void a_loss_found_by_a_statement_is_reported_by_the_next_tick(void **state)
{
    (void)state;
    lock_registry *a = new_registry(30000);
    db_conn *admin = testdb_open();
    char err[512];
    assert_int_equal(lock_registry_acquire(a, "oops:pipeline:stmt-lost"), 1);
    db_value p[] = {db_int((long long)lock_registry_connection_id(a))};
    db_result_free(testdb_q(admin, "KILL ?", p, 1));
    for (int i = 0; i < 50 && holder(admin, "oops:pipeline:stmt-lost") != 0; i++)
        usleep(20000);
    assert_true(lock_registry_acquire(a, "oops:pipeline:other") < 0); /* finds the loss */
    assert_false(lock_registry_is_up(a));
    int ev = lock_registry_tick(a, 5000000, err, sizeof err);
    assert_true(ev & LOCK_EV_LOST);
    assert_true(ev & LOCK_EV_RECONNECTED);
    assert_int_equal(lock_registry_tick(a, 5000001, err, sizeof err) & LOCK_EV_LOST, 0);
    lock_registry_free(a);
    db_close(admin);
}

static void while_down_acquire_fails_closed(void **state)
{
    (void)state;
    db_config cfg;
    char err[512];
    testdb_config(&cfg);
    free(cfg.host);
    cfg.host = strdup("127.0.0.1");
    cfg.port = 1; /* nothing listens there */
    cfg.connect_timeout_s = 2;
    lock_registry_options o = {.validate_interval_ms = 100, .backoff_initial_ms = 100};
    lock_registry *r = lock_registry_new(&cfg, &o);
    db_config_free(&cfg);
    assert_int_equal(lock_registry_connect(r, err, sizeof err), LOCK_DOWN);
    assert_non_null(strstr(err, "127.0.0.1:1"));
    assert_false(lock_registry_is_up(r));
    assert_int_equal(lock_registry_acquire(r, "oops:pipeline:down"), LOCK_DOWN);
    const char *names[] = {"oops:a", "oops:b"};
    bool got[2] = {true, true};
    assert_int_equal(lock_registry_acquire_many(r, names, 2, got), LOCK_DOWN);
    assert_false(got[0]);
    assert_false(got[1]);
    lock_registry_free(r);
}

static void long_names_map_to_one_name_of_at_most_64_characters(void **state)
{
    (void)state;
    const char *longname =
        "oops:pipeline:this-is-a-very-long-application-name-in-a-very-long-namespace-prod";
    char s1[LOCK_NAME_MAX + 1], s2[LOCK_NAME_MAX + 1], s3[LOCK_NAME_MAX + 1];
    lock_name_shorten(longname, s1);
    lock_name_shorten(longname, s2);
    assert_true(strlen(s1) <= 64);
    assert_string_equal(s1, s2);
    assert_memory_equal(s1, longname, 47); /* readable prefix */
    char other[128];
    snprintf(other, sizeof other, "%sX", longname);
    lock_name_shorten(other, s3);
    assert_string_not_equal(s1, s3);
    lock_name_shorten("oops:short", s3);
    assert_string_equal(s3, "oops:short");
    /* Two registries contend for the long name as for any other. */
    lock_registry *a = new_registry(30000), *b = new_registry(30000);
    db_conn *spy = testdb_open();
    assert_int_equal(lock_registry_acquire(a, longname), 1);
    assert_int_equal(lock_registry_acquire(b, longname), 0);
    db_value p[] = {db_text(s1)};
    assert_int_equal(testdb_int(spy, "SELECT IS_USED_LOCK(?)", p, 1),
                     (long long)lock_registry_connection_id(a));
    lock_registry_free(a);
    lock_registry_free(b);
    db_close(spy);
}

static void read_only_server_is_refused(void **state)
{
    (void)state;
    db_conn *admin = testdb_open();
    db_result_free(testdb_q(admin, "SET GLOBAL read_only = 1", NULL, 0));
    db_config cfg;
    char err[512];
    testdb_config(&cfg);
    lock_registry *r = lock_registry_new(&cfg, NULL);
    db_config_free(&cfg);
    int rc = lock_registry_connect(r, err, sizeof err);
    db_result_free(testdb_q(admin, "SET GLOBAL read_only = 0", NULL, 0));
    assert_int_equal(rc, LOCK_REFUSED);
    assert_non_null(strstr(err, "read-only"));
    assert_false(lock_registry_is_up(r));
    lock_registry_free(r);
    db_close(admin);
}

/* locks { session_timeout }: the session's wait_timeout follows the choice,
 * each change is set on the open session with its next statement (here the
 * validation; a failed SET would take the registry down). */
static void session_timeout_follows_the_policy(void **state)
{
    (void)state;
    lock_registry *r = new_registry(1000);
    assert_int_equal(lock_registry_wait_timeout(r), 3);
    lock_registry_set_validate_interval(r, 10000);
    assert_int_equal(lock_registry_wait_timeout(r), 30);
    lock_registry_set_session_timeout(r, 45);
    lock_registry_set_validate_interval(r, 2000);
    assert_int_equal(lock_registry_wait_timeout(r), 45);
    lock_registry_set_session_timeout(r, LOCK_WAIT_TIMEOUT_SERVER);
    assert_int_equal(lock_registry_wait_timeout(r), LOCK_WAIT_TIMEOUT_SERVER);
    assert_true(lock_registry_is_up(r));
    lock_registry_set_session_timeout(r, 0);
    assert_int_equal(lock_registry_wait_timeout(r), 6);
    assert_true(lock_registry_is_up(r));
    assert_int_equal(lock_registry_validate(r), 1);
    lock_registry_free(r);
}

#define BUSY_USER "oops_busy_locks"

static void a_busy_database_is_said_once_and_retried_with_jittered_backoff(void **state)
{
    (void)state;
    db_config cfg;
    char err[1024];
    testdb_limited_user(&cfg, BUSY_USER, 1);
    db_conn *other = db_open(&cfg, err, sizeof err); /* the account's only session */
    assert_non_null(other);
    lock_registry_options o = {
        .validate_interval_ms = 30000, .backoff_initial_ms = 1000, .backoff_max_ms = 8000};
    lock_registry *r = lock_registry_new(&cfg, &o);
    assert_int_equal(lock_registry_connect(r, err, sizeof err), LOCK_DOWN);
    assert_non_null(strstr(err, "the database refuses new connections (too many connections"));
    assert_true(lock_registry_busy(r));
    /* Each failed reconnect waits 1, 2, 4, 8 s ± 25 %; the first says busy, once. */
    uint64_t now = 1000000;
    double ratio[4];
    bool jittered = false;
    for (int k = 0; k < 4; k++) {
        err[0] = '\0';
        int ev = lock_registry_tick(r, now, err, sizeof err);
        assert_int_equal(ev & LOCK_EV_BUSY, k == 0 ? LOCK_EV_BUSY : 0);
        if (k == 0) {
            assert_non_null(strstr(err, "refuses new connections"));
            assert_non_null(strstr(err, "the lock session tries again in"));
        }
        assert_false(lock_registry_is_up(r));
        uint64_t wait = lock_registry_retry_at(r) - now;
        ratio[k] = (double)wait / (1000.0 * (1 << k));
        assert_true(ratio[k] >= 0.75 && ratio[k] < 1.25);
        jittered = jittered || ratio[k] != 1.0;
        assert_int_equal(lock_registry_tick(r, now + 1, err, sizeof err), 0); /* not before */
        now = lock_registry_retry_at(r);
    }
    assert_true(jittered);
    /* Room again: the next attempt reconnects, and busy is over. */
    db_close(other);
    int ev = 0;
    for (int i = 0; i < 50 && !(ev & LOCK_EV_RECONNECTED); i++) {
        ev = lock_registry_tick(r, now, err, sizeof err);
        now = lock_registry_retry_at(r) + 1;
        usleep(20 * 1000);
    }
    assert_true(ev & LOCK_EV_RECONNECTED);
    assert_true(lock_registry_is_up(r));
    assert_false(lock_registry_busy(r));
    lock_registry_free(r);
    db_config_free(&cfg);
    testdb_drop_limited_user(BUSY_USER);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(two_registries_contend_for_one_name),
        cmocka_unit_test(acquiring_a_held_name_is_a_noop_not_a_second_count),
        cmocka_unit_test(release_frees_the_name_for_the_other_registry),
        cmocka_unit_test(a_batch_is_split_between_contenders_in_one_statement),
        cmocka_unit_test(ten_thousand_names_are_one_statement),
        cmocka_unit_test(killed_session_is_noticed_within_one_validation_and_reacquires),
        cmocka_unit_test(a_loss_found_by_a_statement_is_reported_by_the_next_tick),
        cmocka_unit_test(while_down_acquire_fails_closed),
        cmocka_unit_test(long_names_map_to_one_name_of_at_most_64_characters),
        cmocka_unit_test(read_only_server_is_refused),
        cmocka_unit_test(session_timeout_follows_the_policy),
        cmocka_unit_test(a_busy_database_is_said_once_and_retried_with_jittered_backoff),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mysql_library_end();
    return rc;
}
