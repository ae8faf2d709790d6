/*
 * dbcall — how a Lua binding runs a database call (oops.db, oops.store,
 * oops.locks): the one await/resume pair over db_calls.h.
 *
 * The binding fills a call (db_calls.h: its lane, its work or batch kind)
 * and hands it to dbcall with how to push its results and free it. From a
 * task, the call runs through the daemon's scheduler (ctx->calls) without
 * blocking the loop and the task yields until it is done; a task's
 * transaction is its own (the task is the call's owner). Anywhere else (no
 * pool: oopsctl, `oopsd lua`, specs; or outside a task) it runs at once and
 * blocks.
 */
#ifndef OOPS_LUA_DBCALL_H
#define OOPS_LUA_DBCALL_H

#include <lua.h>
#include <stdbool.h>

#include "db_calls.h"
#include "runtime.h"

/* Pushes a finished call's results onto L (on the loop's stack; never raises). */
typedef int (*dbcall_push)(lua_State *L, db_call *call);
/* Frees the call and what it owns. */
typedef void (*dbcall_free)(db_call *call);

/*
 * Run call for L; push and free it when it is over. Returns what the binding
 * returns: push's results, or lua_yield (the task resumes with them). When no
 * connection could be used: nil, msg, name. A BEGIN in a task that has a
 * transaction open raises.
 */
int dbcall(lua_State *L, db_call *call, dbcall_push push, dbcall_free release);

/* The runtime's news that a task ended: a transaction it left open is rolled back. */
void dbcall_task_ended(lua_State *co);

#endif
