/*
 * lua_dbcall — how a Lua binding runs database work (oops.db, oops.store,
 * oops.locks).
 *
 * From a task, with the daemon's pool (ctx->pool): the work runs in a fiber
 * (db_fiber.h) on a borrowed work connection — or on the lock session, one
 * call at a time (ctx->lock_lane) — and the task yields until it is done;
 * the loop goes on meanwhile. A task that began a transaction keeps its
 * connection until it commits or rolls back (or ends: then it is rolled
 * back). Anywhere else (no pool: oopsctl, `oopsd lua`, specs; or outside a
 * task) the work runs at once on ctx->work / the lock session and blocks.
 */
#ifndef OOPS_LUA_DBCALL_H
#define OOPS_LUA_DBCALL_H

#include <lua.h>
#include <stdbool.h>

#include "runtime.h"

typedef enum { DBCALL_WORK, DBCALL_LOCK } dbcall_kind;
typedef enum { DBCALL_PLAIN, DBCALL_BEGIN, DBCALL_END } dbcall_tx;

typedef struct db_call db_call;
struct db_call {
    dbcall_kind kind;
    dbcall_tx tx;           /* BEGIN: on success the connection stays the task's; END: given back */
    oops_ctx *ctx;          /* set by dbcall() */
    db_conn *conn;          /* DBCALL_WORK: the connection to use, open (set by dbcall()) */
    void (*run)(db_call *); /* the work; on a fiber's stack or the loop's */
    int (*push)(lua_State *L, db_call *); /* its results onto L (on the loop's stack) */
    void (*release)(db_call *);           /* frees what run and push left (may be NULL) */
    unsigned rc;                          /* run's error number, 0 = success (BEGIN reads it) */
    /* dbcall's own */
    lua_State *co;
    unsigned conn_rc; /* the connection could not be (re)opened: push is not called */
    char conn_err[512];
    bool yielded, finished, borrowed;
};

/*
 * Run call (heap-allocated, db_call first in its struct; dbcall frees it with
 * release + free). Returns what the binding returns: push's results, or
 * lua_yield (the task resumes with them). On a connection that cannot be
 * opened: nil, msg, name.
 */
int dbcall(lua_State *L, db_call *call);

/* The runtime's news that a task ended: a transaction it left open is rolled back. */
void lua_db_task_ended(lua_State *co);

#endif
