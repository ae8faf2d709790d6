#include "db_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_fiber.h"

/* The calls of one kind and key waiting for a connection. Lives while it
 * holds a call, a runner waits for a connection for it, or a batch of it
 * runs; freed after. */
struct db_queue {
    const db_batch_kind *kind;
    char *key; /* NULL: the kind's one queue */
    db_call *first, *last;
    bool runner_waiting;
    bool start_due; /* a runner starts at the starter's next run */
    size_t running; /* its batches in flight */
    db_queue *next;
};

/* One batch: the calls a runner took from its queue, and their connection. */
typedef struct {
    db_calls *s;
    db_queue *q;
    db_conn *conn;
    bool own; /* conn is `work`, lent through work_lane */
    db_call *m[DB_BATCH_MAX];
    size_t n;
    bool held; /* its connection was not even tried: the pool backs off */
} runner;

void db_calls_init(db_calls *s, uv_loop_t *loop, metrics *m)
{
    *s = (db_calls){.loop = loop, .metrics = m};
}

void db_calls_fini(db_calls *s)
{
    if (s->starter_init && !uv_is_closing((uv_handle_t *)&s->starter))
        uv_close((uv_handle_t *)&s->starter, NULL); /* the owner's loop runs once more */
    for (db_queue *q = s->queues, *next; q; q = next) {
        next = q->next;
        free(q->key);
        free(q);
    }
    s->queues = NULL;
}

/* ---- transactions: the connection each owner keeps until its END ---- */

static db_conn *tx_of(const db_calls *s, const void *owner)
{
    for (size_t i = 0; owner && i < DB_POOL_MAX; i++)
        if (s->txs[i].owner == owner)
            return s->txs[i].conn;
    return NULL;
}

static void tx_keep(db_calls *s, const void *owner, db_conn *conn)
{
    for (size_t i = 0; i < DB_POOL_MAX; i++) {
        if (!s->txs[i].owner) {
            s->txs[i].owner = owner;
            s->txs[i].conn = conn;
            return;
        }
    }
    abort(); /* more transactions than connections: cannot be */
}

static void tx_drop(db_calls *s, const void *owner)
{
    for (size_t i = 0; i < DB_POOL_MAX; i++)
        if (s->txs[i].owner == owner)
            s->txs[i].owner = NULL, s->txs[i].conn = NULL;
}

bool db_calls_in_tx(const db_calls *s, const void *owner) { return tx_of(s, owner) != NULL; }

bool db_calls_busy(const db_calls *s)
{
    for (size_t i = 0; i < DB_POOL_MAX; i++)
        if (s->txs[i].owner)
            return true;
    return s->queues || (s->pool && db_pool_lent(s->pool)) || (s->lane && db_pool_lent(s->lane)) ||
           (s->work_lane && db_pool_lent(s->work_lane));
}

uint64_t db_calls_work_idle_ms(const db_calls *s)
{
    if (!s->work_lane || db_pool_lent(s->work_lane) || !s->loop)
        return 0;
    return uv_now(s->loop) - s->work_lane_free_ms;
}

/* `work` goes back to its lane (the next user, if any, gets it at once). */
static void put_work(db_calls *s)
{
    if (s->loop)
        s->work_lane_free_ms = uv_now(s->loop);
    db_pool_put(s->work_lane, NULL);
}

/* Is `work` parked in a wait with more than DB_CALLS_PARK_ENDING_MS still
 * ahead (nobody queues behind that)? */
static bool work_long_wait(const db_calls *s)
{
    return s->work_parked && uv_now(s->loop) + DB_CALLS_PARK_ENDING_MS < s->work_park_ends_ms;
}

bool db_calls_work_long_wait(const db_calls *s) { return s->loop && work_long_wait(s); }

/* Should a WORK call run on `work` now? When nobody uses or waits for
 * `work` (an open pool connection left idle then ages out), or when no open
 * pool connection is free: no connect for a call an idle server makes now
 * and then. While a short call (not a parked wait) uses it, wait
 * behind it too: with no pool connection open at all, up to
 * DB_CALLS_OWN_QUEUE_MAX calls (an idle tick's scans, stats, heartbeat and
 * orphan checks meet here, each a millisecond or so), else only one. */
static bool work_is_better(const db_calls *s)
{
    if (!s->work || !s->work_lane)
        return false;
    size_t waiting = db_pool_waiting(s->work_lane);
    if (!db_pool_lent(s->work_lane))
        return waiting == 0; /* free now: the pool's idle connections age out (30 s) */
    if (db_pool_idle_open(s->pool) > 0)
        return false;
    if (work_long_wait(s))
        return false;
    return waiting == 0 || (db_pool_open(s->pool) == 0 && waiting < DB_CALLS_OWN_QUEUE_MAX);
}

/* Should a batch runner take `work`? Only when it is free this moment: a
 * batch is load, tens of calls at once, and must not queue behind another
 * call there. Queued there, every batch of a busy server ran one after
 * another on that one connection and the pool never opened: the
 * 10,000-pipeline drive waited on it for half its time (bench/README.md,
 * issue 36). Free, it is taken even when a pool connection is open and idle:
 * preferring the pool kept that connection alive for good on an idle server
 * (a third connection after every drive). An idle tick's lone calls still
 * meet there (work_is_better). */
static bool work_is_free(const db_calls *s)
{
    if (!s->work || !s->work_lane || db_pool_waiting(s->work_lane) > 0)
        return false;
    if (!db_pool_lent(s->work_lane))
        return true;
    /* Busy: one batch may wait behind a short call there when no pool
     * connection is open at all (a lightly loaded server opens none for it);
     * a second one opens the pool. Never behind a long parked wait. */
    if (db_pool_open(s->pool) > 0)
        return false;
    return !work_long_wait(s);
}

/* ---- running ---- */

static void fail_conn(db_call *call, unsigned rc, const char *why)
{
    call->conn_rc = call->rc = rc;
    snprintf(call->conn_err, sizeof call->conn_err, "%s", why);
}

/*
 * Open (or reopen) conn: 0, or the error number with why in err. A closed
 * connection of the pool is not even tried during a busy backoff (*held
 * set): the pool's refusal is the answer.
 */
static unsigned open_conn(db_calls *s, db_conn *conn, bool pooled, char *err, size_t errlen,
                          bool *held)
{
    *held = pooled && !db_is_alive(conn) && !db_pool_may_open(s->pool);
    if (*held)
        return db_pool_refusal(s->pool, err, errlen);
    return db_conn_ensure(conn, err, errlen);
}

/* Open (or reopen) the call's connection: false, with the call failed, when it cannot be. */
static bool ensure(db_call *call)
{
    char err[sizeof call->conn_err];
    unsigned rc = open_conn(call->calls, call->conn, call->borrowed, err, sizeof err, &call->held);
    if (rc)
        fail_conn(call, rc, err);
    return rc == 0;
}

/*
 * A borrowed connection that could not be opened because the database is
 * busy (tried, not held back) makes the pool back off; while another of its
 * connections is open the borrower waits for one instead of failing
 * (db_pool_refused says whether). Then: wait again, first in line (got(ud)
 * on the next connection lent), and give back the one that could not open,
 * in this order so that it is not lent again.
 */
static void wait_again(db_calls *s, db_conn *conn, db_pool_cb got, void *ud)
{
    db_pool_get_first(s->pool, got, ud);
    db_pool_put(s->pool, conn);
}

/* May a WORK call whose pool connection the database refused (busy, and no
 * other pool connection open) wait for `work` instead of failing? Yes, even
 * behind a parked wait (it ends before the next scan tick, and the watcher
 * parks no more while the pool is busy: oops.db.busy); not a BEGIN (it
 * keeps its connection). */
static bool work_takes_refused(const db_calls *s, unsigned code, bool begins)
{
    return db_errno_is_busy(code) && !begins && s->work && s->work_lane;
}

static void run_alone(db_call *call)
{
    if (call->run)
        call->run(call);
    else
        call->kind->run(call->calls, call->conn, &call, 1);
}

static void call_finished(db_call *call)
{
    call->finished = true;
    call->done(call); /* may free it */
}

/* Start body(arg) in a fiber, then after(arg); both at once, blocking, when
 * no fiber can be made (out of memory): blocking beats losing the call. */
static void in_fiber(db_calls *s, db_fiber_fn body, db_fiber_fn after, void *arg)
{
    if (db_fiber_run(s->loop, body, after, arg) != 0) {
        body(arg);
        after(arg);
    }
}

/* -- a call alone -- */

static void alone_body(void *arg)
{
    db_call *call = arg;
    if (call->lane != DB_CALL_LOCK && !ensure(call))
        return;
    run_alone(call);
}

static void alone_got(db_conn *conn, void *ud);

static void alone_done(void *arg)
{
    db_call *call = arg;
    db_calls *s = call->calls;
    if (call->borrowed && call->conn_rc) {
        bool again = !call->held && db_pool_refused(s->pool, call->conn_rc, call->conn_err);
        bool to_work = !again && work_takes_refused(s, call->conn_rc, call->tx == DB_CALL_BEGIN);
        if (again || to_work) {
            db_conn *conn = call->conn;
            call->rc = call->conn_rc = 0; /* as if it had not run: it has not */
            call->conn_err[0] = '\0';
            call->borrowed = false;
            if (again) {
                wait_again(s, conn, alone_got, call);
            } else { /* none of the pool's open: the server's own connection */
                call->lane = DB_CALL_OWN;
                db_pool_put(s->pool, conn);
                db_pool_get(s->work_lane, alone_got, call);
            }
            return;
        }
    }
    if (call->lane == DB_CALL_LOCK) {
        db_pool_put(s->lane, NULL);
    } else if (call->lane == DB_CALL_OWN) {
        if (call->parks)
            s->work_parked = false;
        put_work(s);
    } else if (call->borrowed) {
        if (call->tx == DB_CALL_BEGIN && !call->rc)
            tx_keep(s, call->owner, call->conn); /* the owner's until its END */
        else
            db_pool_put(s->pool, call->conn);
    } else if (call->tx == DB_CALL_END) {
        tx_drop(s, call->owner);
        db_pool_put(s->pool, call->conn);
    }
    call_finished(call);
}

static void alone_got(db_conn *conn, void *ud)
{
    db_call *call = ud;
    if (call->lane == DB_CALL_WORK) {
        call->conn = conn;
        call->borrowed = true;
    } else if (call->lane == DB_CALL_OWN) {
        call->conn = call->calls->work;
        if (call->parks) {
            call->calls->work_parked = true;
            call->calls->work_park_ends_ms = uv_now(call->calls->loop) + call->park_ms;
        }
    }
    in_fiber(call->calls, alone_body, alone_done, call);
}

/* -- blocking: no pool, or a caller that cannot wait -- */

static void blocking(db_calls *s, db_call *call)
{
    if (call->lane == DB_CALL_LOCK) {
        if (s->lane && db_pool_lent(s->lane))
            fail_conn(call, 2000 /* CR_UNKNOWN_ERROR: "db" */,
                      "the lock session is busy: call oops.locks from a task");
        else
            run_alone(call);
    } else if (!s->work) {
        fail_conn(call, DB_CR_CONNECTION_ERROR, "not connected to a database");
    } else if (s->work_lane && db_pool_lent(s->work_lane)) {
        fail_conn(call, 2000, "the work connection is busy: call the database from a task");
    } else {
        call->conn = s->work;
        if (ensure(call))
            run_alone(call);
    }
    call_finished(call);
}

/* -- batches -- */

static db_queue *queue_of(db_calls *s, const db_batch_kind *kind, const char *key)
{
    for (db_queue *q = s->queues; q; q = q->next)
        if (q->kind == kind && (q->key && key ? strcmp(q->key, key) == 0 : q->key == key))
            return q;
    db_queue *q = calloc(1, sizeof *q);
    if (!q || (key && !(q->key = strdup(key))))
        abort(); /* out of memory */
    q->kind = kind;
    q->next = s->queues;
    s->queues = q;
    return q;
}

static void queue_drop_if_idle(db_calls *s, db_queue *q)
{
    if (q->first || q->runner_waiting || q->running || q->start_due)
        return;
    for (db_queue **p = &s->queues; *p; p = &(*p)->next) {
        if (*p == q) {
            *p = q->next;
            break;
        }
    }
    free(q->key);
    free(q);
}

static void runner_start(db_calls *s, db_queue *q);

static void runner_body(void *arg)
{
    runner *r = arg;
    char err[sizeof r->m[0]->conn_err];
    unsigned rc = open_conn(r->s, r->conn, true, err, sizeof err, &r->held);
    if (rc) { /* every call of the batch hears why */
        for (size_t i = 0; i < r->n; i++)
            fail_conn(r->m[i], rc, err);
        return;
    }
    r->q->kind->run(r->s, r->conn, r->m, r->n);
}

static void runner_got_again(db_conn *conn, void *ud);
static void runner_got_work_again(db_conn *unused, void *ud);

static void runner_done(void *arg)
{
    runner *r = arg;
    db_calls *s = r->s;
    db_call *first = r->m[0];
    bool again = first->conn_rc && !r->own && !r->held &&
                 db_pool_refused(s->pool, first->conn_rc, first->conn_err);
    bool to_work =
        first->conn_rc && !r->own && !again && work_takes_refused(s, first->conn_rc, false);
    if (again || to_work) {
        for (size_t i = 0; i < r->n; i++) { /* as if they had not run: they have not */
            r->m[i]->rc = r->m[i]->conn_rc = 0;
            r->m[i]->conn_err[0] = '\0';
        }
        if (again) {
            wait_again(s, r->conn, runner_got_again, r);
        } else { /* none of the pool's open: the server's own connection */
            db_pool_put(s->pool, r->conn);
            r->own = true;
            db_pool_get(s->work_lane, runner_got_work_again, r);
        }
        return;
    }
    if (r->own)
        put_work(s);
    else
        db_pool_put(s->pool, r->conn);
    r->q->running--;
    queue_drop_if_idle(s, r->q);
    for (size_t i = 0; i < r->n; i++)
        call_finished(r->m[i]);
    free(r);
}

/* The same batch, on the connection lent after its first could not open. */
static void runner_got_again(db_conn *conn, void *ud)
{
    runner *r = ud;
    r->conn = conn;
    for (size_t i = 0; i < r->n; i++)
        r->m[i]->conn = conn;
    in_fiber(r->s, runner_body, runner_done, r);
}

/* ... or on `work`, when the pool could open none (work_takes_refused). */
static void runner_got_work_again(db_conn *unused, void *ud)
{
    (void)unused;
    runner *r = ud;
    runner_got_again(r->s->work, r);
}

static void runner_got(db_conn *conn, void *ud)
{
    runner *r = ud;
    db_queue *q = r->q;
    r->conn = conn;
    q->runner_waiting = false;
    if (r->s->metrics) /* bench/README.md and tests/integration/drive_counts.sh read these */
        metrics_add(r->s->metrics, "oops_db_batches_total",
                    r->own ? "conn=\"own\"" : "conn=\"pool\"", 1);
    while (q->first && r->n < q->kind->limit) {
        db_call *call = q->first;
        q->first = call->next;
        call->next = NULL;
        call->conn = conn;
        r->m[r->n++] = call;
    }
    /* Counted before the next runner starts: it may be lent a connection at
     * once and end at once (a busy pool's refusal), and must not find the
     * queue idle and free it under this one. */
    q->running++;
    if (!q->first)
        q->last = NULL;
    else
        runner_start(r->s, q); /* more than one batch's worth: the next one waits */
    in_fiber(r->s, runner_body, runner_done, r);
}

static void runner_got_work(db_conn *unused, void *ud)
{
    (void)unused;
    runner *r = ud;
    runner_got(r->s->work, r);
}

static void runner_start(db_calls *s, db_queue *q)
{
    runner *r = calloc(1, sizeof *r);
    if (!r)
        abort();
    r->s = s;
    r->q = q;
    q->runner_waiting = true;
    if ((r->own = work_is_free(s)))
        db_pool_get(s->work_lane, runner_got_work, r);
    else
        db_pool_get(s->pool, runner_got, r);
}

/* The starter (db_calls.starter): a runner for each queue that waits for one. */
static void starter_run(uv_idle_t *h)
{
    db_calls *s = h->data;
    uv_idle_stop(h);
    /* From the first queue again after each start: a runner may end at once
     * (a busy pool's refusal) and drop a queue. */
    for (bool started = true; started;) {
        started = false;
        for (db_queue *q = s->queues; q && !started; q = q->next) {
            if (q->start_due) {
                q->start_due = false;
                started = true;
                if (q->first && !q->runner_waiting)
                    runner_start(s, q);
            }
        }
    }
    for (db_queue *q = s->queues, *next; q; q = next) {
        next = q->next;
        queue_drop_if_idle(s, q);
    }
}

/* Start a runner for q once the loop is done with the callbacks at hand;
 * false when there is no loop to wait on (or it is closing): start it now. */
static bool start_soon(db_calls *s, db_queue *q)
{
    if (!s->loop)
        return false;
    if (!s->starter_init) {
        if (uv_idle_init(s->loop, &s->starter) != 0)
            return false;
        s->starter.data = s;
        s->starter_init = true;
    }
    if (uv_is_closing((uv_handle_t *)&s->starter) || uv_idle_start(&s->starter, starter_run) != 0)
        return false;
    q->start_due = true;
    return true;
}

static void enqueue(db_calls *s, db_call *call)
{
    db_queue *q = queue_of(s, call->kind, call->key);
    if (q->last)
        q->last->next = call;
    else
        q->first = call;
    q->last = call;
    if (!q->runner_waiting && !q->start_due && !start_soon(s, q))
        runner_start(s, q);
}

void db_calls_submit(db_calls *s, db_call *call, bool can_wait)
{
    if ((!call->run && !call->kind) || !call->done)
        abort(); /* a caller's bug */
    call->calls = s;
    call->next = NULL;
    call->finished = call->borrowed = false;
    call->rc = call->conn_rc = 0;
    call->conn_err[0] = '\0';
    if (!s->pool || !can_wait) {
        blocking(s, call);
        return;
    }
    if (call->lane == DB_CALL_OWN && (!s->work || !s->work_lane)) {
        blocking(s, call); /* on `work` at once, or says why it cannot run */
        return;
    }
    if (call->parks && s->starter_init && uv_is_active((uv_handle_t *)&s->starter))
        starter_run(&s->starter); /* batches due go first: not to the pool behind a park */
    if (call->lane != DB_CALL_WORK) {
        db_pool_get(call->lane == DB_CALL_LOCK ? s->lane : s->work_lane, alone_got, call);
        return;
    }
    db_conn *tx = tx_of(s, call->owner);
    if (call->tx == DB_CALL_BEGIN && tx)
        abort(); /* the caller checks db_calls_in_tx first */
    if (call->tx == DB_CALL_END && !tx)
        call->tx = DB_CALL_PLAIN; /* COMMIT/ROLLBACK outside a transaction: a plain call */
    if (tx) {
        call->conn = tx; /* in its owner's transaction: there, alone */
        in_fiber(s, alone_body, alone_done, call);
    } else if (call->kind && call->tx == DB_CALL_PLAIN) {
        enqueue(s, call);
    } else if (call->tx != DB_CALL_BEGIN && work_is_better(s)) {
        call->lane = DB_CALL_OWN;
        db_pool_get(s->work_lane, alone_got, call);
    } else {
        db_pool_get(s->pool, alone_got, call);
    }
}

/* -- an owner gone with its transaction open: rolled back -- */

typedef struct {
    db_calls *s;
    db_conn *conn;
} orphan;

static void orphan_body(void *arg) { db_rollback(((orphan *)arg)->conn); }

static void orphan_done(void *arg)
{
    orphan *o = arg;
    db_pool_put(o->s->pool, o->conn);
    free(o);
}

void db_calls_owner_ended(db_calls *s, const void *owner)
{
    db_conn *conn = tx_of(s, owner);
    if (!conn)
        return;
    tx_drop(s, owner);
    orphan *o = malloc(sizeof *o);
    if (!o)
        abort();
    *o = (orphan){s, conn};
    in_fiber(s, orphan_body, orphan_done, o);
}

/* ---- lists padded to a few shapes ---- */

size_t db_batch_shape(size_t n)
{
    size_t b = 2;
    while (b < n)
        b *= 2;
    return b;
}

size_t db_batch_chunk(size_t left, size_t max)
{
    size_t k = 1;
    while (k * 2 <= left && k * 2 <= max)
        k *= 2;
    return k;
}

void db_batch_in_list(buf *sql, db_value *p, size_t *np, const char *const *v, size_t n,
                      size_t shape)
{
    buf_puts(sql, " IN (");
    for (size_t i = 0; i < shape; i++) {
        buf_puts(sql, i ? ", ?" : "?");
        p[(*np)++] = db_text(v[i < n ? i : n - 1]);
    }
    buf_puts(sql, ")");
}
