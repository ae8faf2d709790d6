#include "db_pool.h"

#include <stdbool.h>
#include <stdlib.h>

typedef struct waiter {
    db_pool_cb cb;
    void *ud;
    struct waiter *next;
} waiter;

struct db_pool {
    size_t size;
    db_conn *conns[DB_POOL_MAX]; /* NULL for a lane */
    bool lent[DB_POOL_MAX];
    size_t nlent;
    waiter *head, *tail;
    size_t nwaiting;
};

db_pool *db_pool_new(const db_config *cfg, size_t size)
{
    if (size < 1 || size > DB_POOL_MAX)
        return NULL;
    db_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->size = size;
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
    if (p)
        p->size = 1;
    return p;
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

void db_pool_get(db_pool *p, db_pool_cb cb, void *ud)
{
    if (!p->head) {
        for (size_t i = 0; i < p->size; i++) {
            if (!p->lent[i]) {
                p->lent[i] = true;
                p->nlent++;
                cb(p->conns[i], ud);
                return;
            }
        }
    }
    waiter *w = malloc(sizeof *w);
    if (!w)
        abort(); /* a borrower lost would wait forever */
    *w = (waiter){cb, ud, NULL};
    if (p->tail)
        p->tail->next = w;
    else
        p->head = w;
    p->tail = w;
    p->nwaiting++;
}

void db_pool_put(db_pool *p, db_conn *c)
{
    size_t i = 0;
    if (c)
        while (i < p->size && p->conns[i] != c)
            i++;
    if (i >= p->size || !p->lent[i])
        abort(); /* not ours, or given back twice: a bug that would lend one connection twice */
    waiter *w = p->head;
    if (!w) {
        p->lent[i] = false;
        p->nlent--;
        return;
    }
    p->head = w->next;
    if (!p->head)
        p->tail = NULL;
    p->nwaiting--;
    db_pool_cb cb = w->cb;
    void *ud = w->ud;
    free(w);
    cb(p->conns[i], ud); /* the slot stays lent, to the next borrower */
}

size_t db_pool_size(const db_pool *p) { return p ? p->size : 0; }
size_t db_pool_lent(const db_pool *p) { return p ? p->nlent : 0; }
size_t db_pool_waiting(const db_pool *p) { return p ? p->nwaiting : 0; }

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
