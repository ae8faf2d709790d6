/*
 * db_pool — connections lent one at a time, first come first served.
 *
 * A pool of work connections lets several tasks' round trips be in flight at
 * once: a task borrows one for a statement (or from BEGIN to COMMIT) and
 * gives it back. The connections are opened lazily by their first borrower
 * (db_conn_ensure, inside its fiber: db_fiber.h), and reopened the same way
 * after a loss.
 *
 * A lane (db_pool_new_lane) is the same queue over one slot with no
 * connection of its own: it serialises the users of something that must see
 * one statement at a time, like the lock session.
 *
 * Single-threaded (the loop's thread).
 */
#ifndef OOPS_DB_POOL_H
#define OOPS_DB_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "db.h"

#define DB_POOL_MAX 64

typedef struct db_pool db_pool;
/* Called when the borrower's turn comes: c is the connection lent (NULL for a lane). */
typedef void (*db_pool_cb)(db_conn *c, void *ud);

/* size connections (1..DB_POOL_MAX) with settings cfg (copied), none open yet. */
db_pool *db_pool_new(const db_config *cfg, size_t size);
/* One slot, no connection. */
db_pool *db_pool_new_lane(void);
/* Closes the connections; none may be lent. Safe with NULL. */
void db_pool_free(db_pool *p);

/* cb(c, ud) runs now when a slot is free, else when one is given back (FIFO). */
void db_pool_get(db_pool *p, db_pool_cb cb, void *ud);
/* Give c back (NULL for a lane); the first waiter, if any, gets it at once. */
void db_pool_put(db_pool *p, db_conn *c);

size_t db_pool_size(const db_pool *p);
size_t db_pool_lent(const db_pool *p);    /* slots in use now */
size_t db_pool_waiting(const db_pool *p); /* borrowers waiting for a slot */
/* Open connections not lent now (a borrower would get one without a connect). */
size_t db_pool_idle_open(const db_pool *p);
/* Round trips of every connection of the pool (db_round_trips), closed sessions included. */
uint64_t db_pool_round_trips(const db_pool *p);
uint64_t db_pool_statements(const db_pool *p);

#endif
