/*
 * db_calls — database calls made for the loop without making it wait: alone
 * or in batches, with transactions that belong to their owner. No Lua here
 * (the core): a binding describes a call, submits it, and is told when it is
 * over; everything about queues, runners and connections is written here once.
 *
 * A call runs in a fiber (db_fiber.h) on a work connection borrowed from the
 * pool, or on the lock session through its lane (one call at a time), and
 * its `done` runs on the loop afterwards. A call of a batch kind joins the
 * queue of its kind and key instead; the first runner to get a connection
 * takes every call waiting there (up to the kind's limit; a runner for the
 * rest is queued at once) and makes them with the kind's `run`, which answers
 * each call on its own. Nobody waits for a batch to fill: a call alone goes as
 * soon as a connection is free, and batches form only while the connections
 * are busy.
 *
 * A call that BEGINs keeps its connection for its owner until a call of the
 * same owner ENDs (COMMIT or ROLLBACK); meanwhile every call of that owner runs
 * there, alone (never in a batch: a batch is its own transaction).
 *
 * A WORK call (alone or a batch) that finds no open pool connection free while
 * `work` is free runs on `work` (through `work_lane`) rather than open one: an
 * idle server's occasional calls need no second work connection (issue 24).
 * While a short call uses `work`, the next waits behind it; with no pool
 * connection open at all, up to DB_CALLS_OWN_QUEUE_MAX do (the calls an idle
 * tick makes at one moment), and only more open a pool connection. A parked
 * call (oops.db.park: a long wait on purpose) sends every WORK call to the
 * pool, except in its last DB_CALLS_PARK_ENDING_MS (or once late). A BEGIN always takes a pool connection (it keeps it until its END).
 *
 * A borrowed connection the database refuses to open because it is busy
 * (too many connections: db_pool.h) does not fail the calls while another
 * connection of the pool is open: they wait for one again, first in line.
 *
 * Without a pool, or when the caller cannot wait (db_calls_submit's
 * can_wait), a call runs at once, blocking, on `work` (refused while a fiber
 * uses it: `work_lane` lent) or on the lock session.
 *
 * `done` may run before db_calls_submit returns (a call that never waited, a
 * blocking one): the caller reads `finished` after submitting. Single-threaded
 * (the loop's thread).
 */
#ifndef OOPS_DB_CALLS_H
#define OOPS_DB_CALLS_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "buf.h"
#include "db.h"
#include "db_pool.h"
#include "metrics.h"

/* With no pool connection open, how many WORK calls may wait for `work`
 * (in use by a short call) before one opens a pool connection. */
#define DB_CALLS_OWN_QUEUE_MAX 8

/* A parked call due to end within this (or late: a loaded database answers
 * a timed-out wait late) is waited for like a short one: the calls a scan
 * tick makes just after the watcher's wait ends need no pool connection. */
#define DB_CALLS_PARK_ENDING_MS 50

/* The most calls one batch makes (a kind's limit is at most this). */
#define DB_BATCH_MAX 64

/* WORK: a pool connection; LOCK: the lock session, through `lane`; OWN: `work`
 * itself (the daemon's own connection, between its own uses), through `work_lane`. */
typedef enum { DB_CALL_WORK, DB_CALL_LOCK, DB_CALL_OWN } db_call_lane;
/* BEGIN: on success the connection stays the owner's; END: given back after. */
typedef enum { DB_CALL_PLAIN, DB_CALL_BEGIN, DB_CALL_END } db_call_tx;

typedef struct db_call db_call;
typedef struct db_calls db_calls;

/* A batch kind: calls that can be made together. Static, never freed. */
typedef struct db_batch_kind {
    const char *name; /* for log lines */
    size_t limit;     /* most calls per batch, 1..DB_BATCH_MAX */
    /*
     * Make calls[0..n) (n >= 1; all of this kind and one key) on conn, open,
     * in a fiber or blocking: set each call's rc and results. What cannot be
     * made together is made one by one, so every call gets its own answer.
     */
    void (*run)(db_calls *s, db_conn *conn, db_call **calls, size_t n);
} db_batch_kind;

struct db_call {
    /* the caller's, set before db_calls_submit */
    db_call_lane lane;
    db_call_tx tx;
    const void *owner;           /* whose transaction it takes part in (a task); NULL: nobody's */
    const db_batch_kind *kind;   /* NULL: made alone by `run` */
    const char *key;             /* a kind's calls batch together only with the same key
                                    (NULL: all of them); compared byte for byte, copied */
    void (*run)(db_call *call);  /* the work alone (DB_CALL_WORK: on `conn`); a kind's
                                    call without it is made alone by kind->run(.., 1) */
    void (*done)(db_call *call); /* on the loop when it is over; may free the call */
    void *ud;                    /* the caller's */
    bool parks;                  /* DB_CALL_OWN: it waits long on purpose (the watcher's
                                    GET_LOCK): other calls do not queue behind it... */
    uint64_t park_ms;            /* ...unless it is due to end (it waits at most this) */
    /* set by db_calls */
    db_calls *calls;
    db_conn *conn;    /* DB_CALL_WORK: the connection it runs on, open */
    unsigned rc;      /* the work's error number, 0 = success (a BEGIN keeps its
                         connection only when 0) */
    unsigned conn_rc; /* no connection could be (re)opened, or none may be used now:
                         nothing ran; conn_err says why */
    char conn_err[256];
    bool finished; /* done has been called (or is being called) */
    /* db_calls' own */
    db_call *next;
    bool borrowed;
    bool held; /* its closed connection was not tried: the pool backs off */
};

typedef struct db_queue db_queue;

/* The scheduler. The owner sets the public fields (and may swap pool and
 * lane while db_calls_busy() is false). */
struct db_calls {
    uv_loop_t *loop;
    db_pool *pool;      /* the work connections; NULL: every call blocks on `work` */
    db_pool *lane;      /* the lock session's lane (with pool) */
    db_conn *work;      /* the connection blocking calls use; NULL: not connected */
    db_pool *work_lane; /* one user of `work` at a time (with pool): DB_CALL_OWN calls and the
                           daemon's own statements; while lent, blocking calls are refused */
    metrics *metrics;   /* may be NULL */
    /* private */
    uint64_t work_lane_free_ms; /* uv_now when `work_lane` was last given back */
    bool work_parked;           /* `work` is lent to a call that parks */
    uint64_t work_park_ends_ms; /* uv_now when that wait ends at the latest */
    db_queue *queues;
    struct {
        const void *owner;
        db_conn *conn;
    } txs[DB_POOL_MAX];
    /* Batches start once the loop has run the callbacks at hand (a scan
     * tick's, the calls that just ended): every call those submit is in the
     * queue by then, and a burst becomes one batch, not a batch of one per
     * free connection and the rest together. Closed with the loop's handles. */
    uv_idle_t starter;
    bool starter_init;
};

/* s's private state zeroed, the public fields as given. */
void db_calls_init(db_calls *s, uv_loop_t *loop, metrics *m);
/* Frees the queues (none may hold a call). */
void db_calls_fini(db_calls *s);

/*
 * Run call (its caller's fields set): now, in a batch, or blocking (without a
 * pool, or when !can_wait). done(call) is called exactly once, perhaps before
 * this returns. A BEGIN while its owner has a transaction open, or a call
 * with neither run nor kind, is a caller's bug: it aborts.
 */
void db_calls_submit(db_calls *s, db_call *call, bool can_wait);

/* owner has a transaction open (a BEGIN done, its END not yet). */
bool db_calls_in_tx(const db_calls *s, const void *owner);
/* owner is gone: a transaction it left open is rolled back, its connection given back. */
void db_calls_owner_ended(db_calls *s, const void *owner);
/* A call is queued, running, or a connection is kept by a transaction. */
bool db_calls_busy(const db_calls *s);
/* Milliseconds since `work` was last given back (0 while it is in use). */
uint64_t db_calls_work_idle_ms(const db_calls *s);
/* `work` is parked in a wait (oops.db.park) that has more than
 * DB_CALLS_PARK_ENDING_MS still ahead: nothing else can be running on it. */
bool db_calls_work_long_wait(const db_calls *s);

/* ---- for batch kinds: lists padded to a few statement shapes ---- */

/* The next power of two from 2 at or above n: the statements of a batch come
 * in a few shapes (lists padded by repeating their last item), so a
 * connection's statement cache holds them all. */
size_t db_batch_shape(size_t n);
/* How many of `left` (>= 1) items the next chunk takes: the largest power of
 * two at most min(left, max). */
size_t db_batch_chunk(size_t left, size_t max);
/* " IN (?, ...)" with `shape` placeholders (shape >= n >= 1), binding
 * v[0..n) and then v[n-1] again, as text, at p[*np...]. */
void db_batch_in_list(buf *sql, db_value *p, size_t *np, const char *const *v, size_t n,
                      size_t shape);

#endif
