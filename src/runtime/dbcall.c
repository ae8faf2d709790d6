/*
 * dbcall (dbcall.h): how a Lua binding runs a database call — the one
 * await/resume pair over db_calls, shared by oops.db, oops.store and
 * oops.locks. From a task in the daemon the call runs on a borrowed
 * connection of the pool without blocking the loop and the task waits for
 * it; elsewhere it blocks for its round trips (bounded by the connection's
 * timeouts).
 */
#include <lauxlib.h>
#include <stdlib.h>

#include "db.h"
#include "dbcall.h"
#include "runtime.h"

/* What the binding needs when its call is over. */
typedef struct {
    lua_State *co;
    bool yielded;
    dbcall_push push;
    dbcall_free release;
} awaiting;

static int call_results(lua_State *L, db_call *call)
{
    awaiting *aw = call->ud;
    int n = call->conn_rc ? oops_fail(L, call->conn_err, db_error_name(call->conn_rc))
                          : aw->push(L, call);
    aw->release(call);
    free(aw);
    return n;
}

static void call_over(db_call *call)
{
    awaiting *aw = call->ud;
    lua_State *co = aw->co; /* call_results frees aw */
    if (aw->yielded)        /* else it finished before its task yielded: dbcall reads it */
        runtime_resume(co, call_results(co, call));
}

static bool in_task(lua_State *L) { return lua_isyieldable(L) && runtime_is_task(L); }

int dbcall(lua_State *L, db_call *call, dbcall_push push, dbcall_free release)
{
    db_calls *s = &runtime_ctx(L)->calls;
    bool can_wait = in_task(L);
    if (call->tx == DB_CALL_BEGIN && s->pool && can_wait && db_calls_in_tx(s, L)) {
        release(call);
        return luaL_error(L, "oops.db.begin: this task has a transaction open already");
    }
    awaiting *aw = malloc(sizeof *aw);
    if (!aw)
        abort(); /* out of memory */
    *aw = (awaiting){.co = L, .push = push, .release = release};
    call->owner = L;
    call->done = call_over;
    call->ud = aw;
    db_calls_submit(s, call, can_wait);
    if (call->finished)
        return call_results(L, call);
    aw->yielded = true;
    return lua_yield(L, 0);
}

void dbcall_task_ended(lua_State *co) { db_calls_owner_ended(&runtime_ctx(co)->calls, co); }
