/* db_pool on the real database: open connections lent first (the newest),
 * growth only when every open one is lent, idle connections closed by trim,
 * the busy backoff and its news. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include <unistd.h>

#include "db_pool.h"
#include "testdb.h"

typedef struct {
    db_conn *got[DB_POOL_MAX];
    size_t n;
} borrowed;

static void got(db_conn *c, void *ud)
{
    borrowed *b = ud;
    b->got[b->n++] = c;
}

static db_pool *new_pool(size_t size)
{
    db_config cfg;
    testdb_config(&cfg);
    db_pool *p = db_pool_new(&cfg, size);
    db_config_free(&cfg);
    assert_non_null(p);
    return p;
}

/* Borrow one (it must be lent at once) and open it (blocking: no fiber here). */
static db_conn *borrow_open(db_pool *p)
{
    borrowed b = {0};
    db_pool_get(p, got, &b);
    assert_int_equal(b.n, 1);
    char err[512];
    assert_int_equal(db_conn_ensure(b.got[0], err, sizeof err), 0);
    return b.got[0];
}

static db_conn *borrow(db_pool *p)
{
    borrowed b = {0};
    db_pool_get(p, got, &b);
    assert_int_equal(b.n, 1);
    return b.got[0];
}

static void sleep_ms(unsigned ms) { usleep(ms * 1000u); }

static void the_open_connection_given_back_last_is_lent_first(void **state)
{
    (void)state;
    db_pool *p = new_pool(3);
    assert_int_equal(db_pool_open(p), 0);
    db_conn *a = borrow_open(p), *b = borrow_open(p);
    assert_ptr_not_equal(a, b);
    assert_int_equal(db_pool_open(p), 2);
    db_pool_put(p, a);
    db_pool_put(p, b);
    /* b came back last: it goes first, again and again, and a goes idle. */
    for (int i = 0; i < 3; i++) {
        db_conn *c = borrow(p);
        assert_ptr_equal(c, b);
        assert_true(db_is_alive(c));
        db_pool_put(p, c);
    }
    /* Two at once: both open ones, never the closed third slot. */
    db_conn *x = borrow(p), *y = borrow(p);
    assert_true(db_is_alive(x) && db_is_alive(y));
    assert_int_equal(db_pool_open(p), 2);
    db_pool_put(p, x);
    db_pool_put(p, y);
    db_pool_free(p);
}

static void a_new_connection_only_when_every_open_one_is_lent(void **state)
{
    (void)state;
    db_pool *p = new_pool(2);
    db_conn *a = borrow_open(p);
    db_pool_put(p, a);
    /* One open and free: that one, not a new one. */
    db_conn *c = borrow(p);
    assert_ptr_equal(c, a);
    /* It is lent: the next borrower gets a slot to open. */
    db_conn *d = borrow(p);
    assert_ptr_not_equal(d, a);
    assert_false(db_is_alive(d));
    /* Both lent: a third waits, and gets the first one given back. */
    borrowed w = {0};
    db_pool_get(p, got, &w);
    assert_int_equal(w.n, 0);
    assert_int_equal(db_pool_waiting(p), 1);
    db_pool_put(p, d);
    assert_int_equal(w.n, 1);
    assert_ptr_equal(w.got[0], d);
    db_pool_put(p, d);
    db_pool_put(p, c);
    assert_int_equal(db_pool_open(p), 1);
    db_pool_free(p);
}

static long long sessions_with_id(db_conn *spy, uint64_t id)
{
    db_value v[] = {db_int((long long)id)};
    return testdb_int(spy, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", v,
                      1);
}

static void trim_closes_what_was_not_lent_for_the_idle_time(void **state)
{
    (void)state;
    db_pool *p = new_pool(3);
    db_conn *spy = testdb_open();
    db_conn *a = borrow_open(p), *b = borrow_open(p), *kept = borrow_open(p);
    uint64_t ida = db_connection_id(a), idb = db_connection_id(b);
    db_pool_put(p, a);
    db_pool_put(p, b);
    assert_int_equal(db_pool_trim(p, 60000), 0); /* not idle long enough */
    assert_int_equal(db_pool_open(p), 3);
    sleep_ms(120);
    /* Idle 100 ms: both given back go; the one still lent stays open. */
    assert_int_equal(db_pool_trim(p, 100), 2);
    assert_int_equal(db_pool_open(p), 1);
    assert_true(db_is_alive(kept));
    for (int i = 0; i < 100 && sessions_with_id(spy, ida) + sessions_with_id(spy, idb); i++)
        sleep_ms(20); /* the server ends a session when it reads the quit */
    assert_int_equal(sessions_with_id(spy, ida) + sessions_with_id(spy, idb), 0);
    db_pool_put(p, kept);
    sleep_ms(120);
    assert_int_equal(db_pool_trim(p, 100), 1); /* down to none */
    assert_int_equal(db_pool_open(p), 0);
    /* A closed slot opens again for its next borrower. */
    db_conn *again = borrow_open(p);
    assert_int_equal(db_pool_open(p), 1);
    db_pool_put(p, again);
    db_close(spy);
    db_pool_free(p);
}

static void a_busy_database_holds_growth_back_and_says_so_once(void **state)
{
    (void)state;
    db_pool *p = new_pool(3);
    db_pool_set_backoff(p, 200, 800);
    char msg[512];
    db_conn *a = borrow_open(p);
    db_conn *b = borrow(p); /* a closed slot: its open is refused */
    assert_false(db_is_alive(b));
    assert_false(db_pool_refused(p, 2003, "cannot connect: refused")); /* not busy: no backoff */
    assert_true(db_pool_may_open(p));
    assert_false(db_pool_busy(p));
    /* Busy, with a open: the borrower is told to wait for it. */
    assert_true(db_pool_refused(p, DB_ER_CON_COUNT,
                                "cannot connect to database at here: the database refuses new "
                                "connections (too many connections)"));
    assert_true(db_pool_busy(p));
    assert_false(db_pool_may_open(p));
    borrowed w = {0};
    db_pool_get_first(p, got, &w);
    db_pool_put(p, b);
    assert_int_equal(w.n, 0); /* the closed slot is not lent during the backoff */
    assert_int_equal(db_pool_busy_news(p, msg, sizeof msg), DB_POOL_BUSY_BEGAN);
    assert_non_null(strstr(msg, "database busy: too many connections; the pool stays at 1"));
    assert_non_null(strstr(msg, "backoff"));
    assert_int_equal(db_pool_busy_news(p, msg, sizeof msg), 0); /* once */
    db_pool_refusal(p, msg, sizeof msg);
    assert_non_null(strstr(msg, "refuses new connections"));
    assert_non_null(strstr(msg, "no new connection tried for"));
    /* The open connection comes back: the waiter gets it. */
    db_pool_put(p, a);
    assert_int_equal(w.n, 1);
    assert_ptr_equal(w.got[0], a);
    /* Two more waiters, two closed slots: after the backoff (200 ms ± 25 %)
     * trim lends one of them a closed slot, and only one: while busy, one
     * new connection is tried at a time. */
    borrowed w2 = {0}, w3 = {0};
    db_pool_get(p, got, &w2);
    db_pool_get(p, got, &w3);
    assert_int_equal(w2.n + w3.n, 0);
    for (int i = 0; i < 100 && !w2.n; i++) {
        sleep_ms(10);
        db_pool_trim(p, 60000);
    }
    assert_int_equal(w2.n, 1);
    assert_int_equal(w3.n, 0);
    assert_false(db_is_alive(w2.got[0]));
    assert_true(db_pool_may_open(p));
    /* Its open succeeds: the busy period ends, and w3 gets that one, open. */
    char err[512];
    assert_int_equal(db_conn_ensure(w2.got[0], err, sizeof err), 0);
    db_pool_put(p, w2.got[0]);
    assert_false(db_pool_busy(p));
    assert_int_equal(w3.n, 1);
    assert_ptr_equal(w3.got[0], w2.got[0]);
    db_pool_put(p, w3.got[0]);
    assert_int_equal(db_pool_busy_news(p, msg, sizeof msg), DB_POOL_BUSY_ENDED);
    assert_non_null(strstr(msg, "accepts new connections again"));
    db_pool_put(p, a);
    assert_int_equal(db_pool_refusals(p), 1);
    db_pool_free(p);
}

static void the_backoff_doubles_to_its_cap_and_a_quiet_pool_ends_the_period(void **state)
{
    (void)state;
    db_pool *p = new_pool(1);
    db_pool_set_backoff(p, 100, 300);
    char msg[512];
    uint64_t holds[5];
    for (int k = 0; k < 5; k++) { /* refused, no connection open: calls fail (false) */
        assert_false(db_pool_refused(p, DB_ER_TOO_MANY_USER_CONNECTIONS, "busy"));
        holds[k] = db_pool_hold_ms(p);
        /* Refused again within the backoff: the same period, no longer wait. */
        assert_false(db_pool_refused(p, DB_ER_TOO_MANY_USER_CONNECTIONS, "busy"));
        assert_true(db_pool_hold_ms(p) <= holds[k]);
        for (int i = 0; i < 1000 && !db_pool_may_open(p); i++)
            sleep_ms(5);
        assert_true(db_pool_may_open(p));
    }
    /* 100, 200, 300 (the cap), 300, 300 ms, each ± 25 % (a ms may have passed). */
    unsigned want[5] = {100, 200, 300, 300, 300};
    bool spread = false;
    for (int k = 0; k < 5; k++) {
        assert_in_range(holds[k], want[k] * 3 / 4 - 2, want[k] * 5 / 4);
        spread = spread || (k > 2 && holds[k] != holds[2]);
    }
    assert_true(spread); /* jitter: three draws of 300 ± 75 ms are not all equal */
    assert_int_equal(db_pool_busy_news(p, msg, sizeof msg), DB_POOL_BUSY_BEGAN);
    assert_non_null(strstr(msg, "too many connections for this account"));
    assert_non_null(strstr(msg, "the pool stays at 0, calls wait for the server's own connection"));
    /* Nobody needed a connection for the cap (300 ms) since the last refusal: over. */
    sleep_ms(320);
    db_pool_trim(p, 60000);
    assert_false(db_pool_busy(p));
    assert_int_equal(db_pool_busy_news(p, msg, sizeof msg), DB_POOL_BUSY_ENDED);
    db_pool_free(p);
}

static void a_lane_is_one_slot_without_a_connection(void **state)
{
    (void)state;
    db_pool *l = db_pool_new_lane();
    borrowed a = {0}, b = {0};
    db_pool_get(l, got, &a);
    db_pool_get(l, got, &b);
    assert_int_equal(a.n, 1);
    assert_null(a.got[0]);
    assert_int_equal(b.n, 0);
    db_pool_put(l, NULL);
    assert_int_equal(b.n, 1);
    db_pool_put(l, NULL);
    assert_int_equal(db_pool_open(l), 0);
    assert_int_equal(db_pool_trim(l, 0), 0);
    db_pool_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_open_connection_given_back_last_is_lent_first),
        cmocka_unit_test(a_new_connection_only_when_every_open_one_is_lent),
        cmocka_unit_test(trim_closes_what_was_not_lent_for_the_idle_time),
        cmocka_unit_test(a_busy_database_holds_growth_back_and_says_so_once),
        cmocka_unit_test(the_backoff_doubles_to_its_cap_and_a_quiet_pool_ends_the_period),
        cmocka_unit_test(a_lane_is_one_slot_without_a_connection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
