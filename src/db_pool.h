/*
 * db_pool — connections lent one at a time, first come first served, opened
 * on demand and given back to the database when idle.
 *
 * A pool of work connections lets several tasks' round trips be in flight at
 * once: a task borrows one for a statement (or from BEGIN to COMMIT) and
 * gives it back. A borrower gets an open connection when one is free (the
 * one given back last, so that the others go idle); only when none is free
 * does it get a slot whose connection is not open, and opens it itself
 * (db_conn_ensure, inside its fiber: db_fiber.h). So the pool grows, up to
 * its size, only while calls are waiting, and db_pool_trim closes what has
 * not been lent for a while, down to none.
 *
 * A busy database (db_errno_is_busy: 1040 too many connections; 1203, 1226 too many
 * for the account) is not a broken one. A borrower whose open was refused so
 * tells the pool (db_pool_refused): the pool stops growing for a backoff
 * period (1 s doubling to 30 s, ±25 % jitter, back to 1 s after an open that
 * succeeds) and, while other connections are open, the borrower waits for one
 * of them (db_pool_get_first) instead of failing. With none open it fails;
 * until the backoff ends every borrower of a closed slot fails at once
 * without trying (db_pool_may_open false, db_pool_refusal says why): never a
 * connect per call. While busy, one borrower at a time tries to grow the pool.
 *
 * A lane (db_pool_new_lane) is the same queue over one slot with no
 * connection of its own: it serialises the users of something that must see
 * one statement at a time, like the lock session.
 *
 * Single-threaded (the loop's thread). Times are CLOCK_MONOTONIC.
 */
#ifndef OOPS_DB_POOL_H
#define OOPS_DB_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db.h"

#define DB_POOL_MAX 64
/* How long the daemon lets a pool connection sit unlent before closing it. */
#define DB_POOL_IDLE_MS 30000
/* The busy backoff: first wait, and the cap of its doubling. */
#define DB_POOL_BACKOFF_MS 1000
#define DB_POOL_BACKOFF_MAX_MS 30000

typedef struct db_pool db_pool;
/* Called when the borrower's turn comes: c is the connection lent (NULL for a
 * lane); it may not be open yet (db_is_alive false): the borrower opens it. */
typedef void (*db_pool_cb)(db_conn *c, void *ud);

/* size connections (1..DB_POOL_MAX) with settings cfg (copied), none open yet. */
db_pool *db_pool_new(const db_config *cfg, size_t size);
/* One slot, no connection. */
db_pool *db_pool_new_lane(void);
/* Closes the connections; none may be lent. Safe with NULL. */
void db_pool_free(db_pool *p);

/* cb(c, ud) runs now when a connection can be lent, else when one can (FIFO). */
void db_pool_get(db_pool *p, db_pool_cb cb, void *ud);
/* The same, ahead of every waiting borrower: for one whose open was refused
 * (db_pool_refused returned true), who has waited longest. */
void db_pool_get_first(db_pool *p, db_pool_cb cb, void *ud);
/* Give c back (NULL for a lane), open or not; the first waiter, if any, may get it at once. */
void db_pool_put(db_pool *p, db_conn *c);

/*
 * The borrower of a connection that is not open may try to open it: false
 * during a busy backoff (with no other connection open, db_pool_get lends a
 * closed slot anyway, so that its borrower fails at once with
 * db_pool_refusal's message rather than wait out the backoff).
 */
bool db_pool_may_open(const db_pool *p);
/* How long until the pool may grow again, in ms (0: it may now). */
uint64_t db_pool_hold_ms(const db_pool *p);
/* Why a borrower may not open now: the last refusal's error number, its
 * message in err with when the pool tries again. */
unsigned db_pool_refusal(const db_pool *p, char *err, size_t errlen);
/*
 * A borrower's open failed with code and why. For a busy database
 * (db_errno_is_busy) the pool stops growing for a backoff period (unless
 * one runs already) and this returns true when another connection of the
 * pool is open: the borrower should wait for it (db_pool_get_first, then put
 * back the one it could not open) rather than fail. False otherwise.
 */
bool db_pool_refused(db_pool *p, unsigned code, const char *why);

/*
 * Close every connection not lent for idle_ms or more (down to none), end a
 * busy period nobody needed the pool to grow for in DB_POOL_BACKOFF_MAX_MS,
 * and serve waiters whose backoff is over. The daemon calls it every tick.
 * Returns how many it closed.
 */
size_t db_pool_trim(db_pool *p, uint64_t idle_ms);
/* The first backoff and its cap (tests; defaults DB_POOL_BACKOFF_MS, _MAX_MS). */
void db_pool_set_backoff(db_pool *p, unsigned initial_ms, unsigned max_ms);

/* The database refused to open a connection (busy) and none has opened since. */
bool db_pool_busy(const db_pool *p);
enum { DB_POOL_BUSY_BEGAN = 1, DB_POOL_BUSY_ENDED = -1 };
/*
 * What changed since the last call, for a log line once per busy period:
 * DB_POOL_BUSY_BEGAN ("database busy: too many connections; the pool stays
 * at N (backoff M s)" in msg), DB_POOL_BUSY_ENDED (msg says so), or 0.
 */
int db_pool_busy_news(db_pool *p, char *msg, size_t n);

size_t db_pool_size(const db_pool *p);
size_t db_pool_open(const db_pool *p);       /* connections open now (lent or not) */
size_t db_pool_lent(const db_pool *p);       /* slots in use now */
size_t db_pool_waiting(const db_pool *p);    /* borrowers waiting for a slot */
uint64_t db_pool_refusals(const db_pool *p); /* opens refused by a busy database, ever */
/* Open connections not lent now (a borrower would get one without a connect). */
size_t db_pool_idle_open(const db_pool *p);
/* Round trips of every connection of the pool (db_round_trips), closed sessions included. */
uint64_t db_pool_round_trips(const db_pool *p);
uint64_t db_pool_statements(const db_pool *p);

#endif
