#include "db_pool.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct waiter {
    db_pool_cb cb;
    void *ud;
    struct waiter *next;
} waiter;

struct db_pool {
    size_t size;
    bool is_lane;
    db_conn *conns[DB_POOL_MAX]; /* NULL for a lane */
    bool lent[DB_POOL_MAX];
    bool lent_closed[DB_POOL_MAX]; /* lent while not open: its borrower opens it */
    uint64_t put_seq[DB_POOL_MAX]; /* when given back, in puts: the newest is lent first */
    uint64_t put_ms[DB_POOL_MAX];  /* when given back: idle since */
    uint64_t puts;
    size_t nlent;
    waiter *head, *tail;
    size_t nwaiting;
    /* a busy database */
    unsigned backoff_initial_ms, backoff_max_ms;
    unsigned backoff_ms;   /* the next backoff, before jitter */
    uint64_t hold_until;   /* no new connection before (ms) */
    uint64_t refused_ms;   /* the last refusal */
    unsigned busy_code;    /* its error number */
    char why[400];         /* its message */
    bool busy;             /* refused, and no open since */
    bool busy_reported;    /* what db_pool_busy_news said last */
    size_t busy_open;      /* open connections when the period began */
    unsigned busy_hold_ms; /* the backoff then */
    uint64_t refusals;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

db_pool *db_pool_new(const db_config *cfg, size_t size)
{
    if (size < 1 || size > DB_POOL_MAX)
        return NULL;
    db_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->size = size;
    db_pool_set_backoff(p, 0, 0);
    for (size_t i = 0; i < size; i++) {
        p->conns[i] = db_conn_new(cfg);
        if (!p->conns[i]) {
            db_pool_free(p);
            return NULL;
        }
    }
    return p;
}

db_pool *db_pool_new_lane(void)
{
    db_pool *p = calloc(1, sizeof *p);
    if (p) {
        p->size = 1;
        p->is_lane = true;
    }
    return p;
}

void db_pool_set_backoff(db_pool *p, unsigned initial_ms, unsigned max_ms)
{
    p->backoff_initial_ms = initial_ms ? initial_ms : DB_POOL_BACKOFF_MS;
    p->backoff_max_ms = max_ms ? max_ms : DB_POOL_BACKOFF_MAX_MS;
    if (p->backoff_max_ms < p->backoff_initial_ms)
        p->backoff_max_ms = p->backoff_initial_ms;
    p->backoff_ms = p->backoff_initial_ms;
}

void db_pool_free(db_pool *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->size; i++)
        db_close(p->conns[i]);
    for (waiter *w = p->head, *next; w; w = next) {
        next = w->next;
        free(w);
    }
    free(p);
}

size_t db_pool_open(const db_pool *p)
{
    size_t n = 0;
    for (size_t i = 0; p && i < p->size; i++)
        n += db_is_alive(p->conns[i]);
    return n;
}

/*
 * The slot the next borrower gets, or -1 (it waits): the open connection
 * given back last; else a closed one, when no connection is open at all (its
 * borrower tries, or fails at once during a backoff), or when the pool may
 * grow: not during a backoff, and while busy only one opening at a time.
 */
static int pick(const db_pool *p)
{
    if (p->is_lane)
        return p->lent[0] ? -1 : 0;
    int best = -1, closed = -1;
    size_t open = 0, opening = 0;
    for (size_t i = 0; i < p->size; i++) {
        bool alive = db_is_alive(p->conns[i]);
        open += alive;
        opening += p->lent[i] && p->lent_closed[i];
        if (p->lent[i])
            continue;
        if (alive && (best < 0 || p->put_seq[i] > p->put_seq[best]))
            best = (int)i;
        else if (!alive && closed < 0)
            closed = (int)i;
    }
    if (best >= 0 || closed < 0 || open == 0)
        return best >= 0 ? best : closed;
    if (!db_pool_may_open(p) || (p->busy && opening))
        return -1;
    return closed;
}

/* Lend slots to waiters, first come first served, while pick finds one. A
 * borrower's callback may give back or borrow (nested calls): each round
 * reads the state anew. */
static void dispatch(db_pool *p)
{
    while (p->head) {
        int i = pick(p);
        if (i < 0)
            return;
        waiter *w = p->head;
        p->head = w->next;
        if (!p->head)
            p->tail = NULL;
        p->nwaiting--;
        p->lent[i] = true;
        p->lent_closed[i] = !p->is_lane && !db_is_alive(p->conns[i]);
        p->nlent++;
        db_pool_cb cb = w->cb;
        void *ud = w->ud;
        free(w);
        cb(p->conns[i], ud);
    }
}

static void wait_in_line(db_pool *p, db_pool_cb cb, void *ud, bool first)
{
    waiter *w = malloc(sizeof *w);
    if (!w)
        abort(); /* a borrower lost would wait forever */
    *w = (waiter){cb, ud, NULL};
    if (first) {
        w->next = p->head;
        p->head = w;
        if (!p->tail)
            p->tail = w;
    } else {
        if (p->tail)
            p->tail->next = w;
        else
            p->head = w;
        p->tail = w;
    }
    p->nwaiting++;
    dispatch(p);
}

void db_pool_get(db_pool *p, db_pool_cb cb, void *ud) { wait_in_line(p, cb, ud, false); }
void db_pool_get_first(db_pool *p, db_pool_cb cb, void *ud) { wait_in_line(p, cb, ud, true); }

/* An open succeeded after the last refusal: the database takes connections again. */
static void opened(db_pool *p)
{
    p->busy = false;
    p->backoff_ms = p->backoff_initial_ms;
    p->hold_until = 0;
}

void db_pool_put(db_pool *p, db_conn *c)
{
    size_t i = 0;
    if (c)
        while (i < p->size && p->conns[i] != c)
            i++;
    if (i >= p->size || !p->lent[i] || (!c) != p->is_lane)
        abort(); /* not ours, or given back twice: a bug that would lend one connection twice */
    p->lent[i] = false;
    p->nlent--;
    if (!p->is_lane) {
        p->put_seq[i] = ++p->puts;
        p->put_ms[i] = now_ms();
        if (db_is_alive(c) && db_conn_opened_ms(c) > p->refused_ms)
            opened(p); /* a session opened since the last refusal: the database takes them again */
        p->lent_closed[i] = false;
    }
    dispatch(p);
}

bool db_pool_may_open(const db_pool *p) { return now_ms() >= p->hold_until; }

uint64_t db_pool_hold_ms(const db_pool *p)
{
    uint64_t now = now_ms();
    return p && p->hold_until > now ? p->hold_until - now : 0;
}

unsigned db_pool_refusal(const db_pool *p, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s; no new connection tried for %.1f s", p->why,
             (double)db_pool_hold_ms(p) / 1000.0);
    return p->busy_code ? p->busy_code : DB_ER_CON_COUNT;
}

bool db_pool_refused(db_pool *p, unsigned code, const char *why)
{
    if (!db_errno_is_busy(code))
        return false;
    uint64_t now = now_ms();
    p->refusals++;
    p->refused_ms = now;
    p->busy_code = code;
    snprintf(p->why, sizeof p->why, "%s", why);
    if (now >= p->hold_until) { /* refusals of one backoff period count once */
        unsigned hold = db_jitter_ms(p->backoff_ms);
        p->hold_until = now + hold;
        p->backoff_ms =
            p->backoff_ms * 2 > p->backoff_max_ms ? p->backoff_max_ms : p->backoff_ms * 2;
        if (!p->busy) {
            p->busy = true;
            p->busy_open = db_pool_open(p);
            p->busy_hold_ms = hold;
        }
    }
    p->busy = true;
    return db_pool_open(p) > 0;
}

size_t db_pool_trim(db_pool *p, uint64_t idle_ms)
{
    if (!p || p->is_lane)
        return 0;
    uint64_t now = now_ms();
    size_t closed = 0;
    for (size_t i = 0; i < p->size; i++) {
        if (!p->lent[i] && db_is_alive(p->conns[i]) && now - p->put_ms[i] >= idle_ms) {
            db_conn_disconnect(p->conns[i]);
            closed++;
        }
    }
    /* Nobody has needed more connections for a while: the period is over (a
     * refusal later starts a new one, with the backoff from the start). */
    if (p->busy && !p->head && now >= p->hold_until && now - p->refused_ms >= p->backoff_max_ms) {
        p->busy = false;
        p->backoff_ms = p->backoff_initial_ms;
    }
    dispatch(p); /* a backoff over: waiters may get a new connection */
    return closed;
}

bool db_pool_busy(const db_pool *p) { return p && p->busy; }

int db_pool_busy_news(db_pool *p, char *msg, size_t n)
{
    if (!p || p->busy == p->busy_reported)
        return 0;
    p->busy_reported = p->busy;
    if (!p->busy) {
        snprintf(msg, n, "database accepts new connections again: the pool has %zu open",
                 db_pool_open(p));
        return DB_POOL_BUSY_ENDED;
    }
    const char *what = p->busy_code != DB_ER_CON_COUNT ? "too many connections for this account"
                                                       : "too many connections";
    snprintf(msg, n, "database busy: %s; the pool stays at %zu%s (backoff %.1f s)", what,
             p->busy_open, p->busy_open ? "" : ", calls wait for the server's own connection",
             (double)p->busy_hold_ms / 1000.0);
    return DB_POOL_BUSY_BEGAN;
}

size_t db_pool_size(const db_pool *p) { return p ? p->size : 0; }
size_t db_pool_lent(const db_pool *p) { return p ? p->nlent : 0; }
size_t db_pool_waiting(const db_pool *p) { return p ? p->nwaiting : 0; }
uint64_t db_pool_refusals(const db_pool *p) { return p ? p->refusals : 0; }

size_t db_pool_idle_open(const db_pool *p)
{
    size_t n = 0;
    for (size_t i = 0; p && i < p->size; i++)
        n += p->conns[i] && !p->lent[i] && db_is_alive(p->conns[i]);
    return n;
}

uint64_t db_pool_round_trips(const db_pool *p)
{
    uint64_t n = 0;
    for (size_t i = 0; p && i < p->size; i++)
        n += db_round_trips(p->conns[i]);
    return n;
}

uint64_t db_pool_statements(const db_pool *p)
{
    uint64_t n = 0;
    for (size_t i = 0; p && i < p->size; i++)
        n += db_statement_count(p->conns[i]);
    return n;
}
