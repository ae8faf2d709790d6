/* oops.locks: the lock registry of this server (DESIGN.md, "The lock registry"),
 * and oops.locks.names: the lock names of lock_names.h. */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "error_names.h"
#include "lock_names.h"
#include "dbcall.h"
#include "runtime.h"

static lock_registry *registry_of(lua_State *L) { return runtime_ctx(L)->locks; }

static int session_down(lua_State *L) { return oops_fail(L, "lock session down", OOPS_E_GONE); }

/* A call on the lock session (dbcall.h: one at a time, yielding in a task). */
typedef struct {
    db_call base;
    lock_registry *const *reg; /* the context's, read when it runs */
    char **names;
    size_t n;
    bool *got;
    int rc;
    uint64_t statements; /* ACQ_MANY: statements the call sent */
    int what;            /* ACQ_ONE, ACQ_MANY, REL_ONE, REL_ALL */
} lock_call;

enum { ACQ_ONE, ACQ_MANY, REL_ONE, REL_MANY, REL_ALL };

static void lock_run(db_call *b)
{
    lock_call *k = (lock_call *)b;
    lock_registry *r = *k->reg;
    if (!r) {
        k->rc = LOCK_DOWN;
        return;
    }
    switch (k->what) {
    case ACQ_ONE:
    case ACQ_MANY: {
        /* Exact: the lane lets no other call onto the session meanwhile. */
        uint64_t before = lock_registry_statements(r);
        k->rc = lock_registry_acquire_many(r, (const char *const *)k->names, k->n, k->got);
        k->statements = lock_registry_statements(r) - before;
        break;
    }
    case REL_ONE: k->rc = lock_registry_release(r, k->names[0]); break;
    case REL_MANY:
        k->rc = lock_registry_release_many(r, (const char *const *)k->names, k->n);
        break;
    default: lock_registry_release_all(r); k->rc = 0;
    }
}

static int lock_push(lua_State *L, db_call *b)
{
    lock_call *k = (lock_call *)b;
    if (k->what == REL_ALL)
        return 0;
    if (k->rc < 0)
        return session_down(L);
    if (k->what == ACQ_MANY) {
        lua_createtable(L, 0, (int)k->n);
        for (size_t i = 0; i < k->n; i++) {
            lua_pushboolean(L, k->got[i]);
            lua_setfield(L, -2, k->names[i]);
        }
        lua_pushinteger(L, (lua_Integer)k->statements);
        return 2;
    }
    if (k->what == REL_MANY) {
        lua_pushinteger(L, k->rc);
        return 1;
    }
    lua_pushboolean(L, k->what == ACQ_ONE ? k->got[0] : k->rc == 1);
    return 1;
}

static void lock_free(db_call *b)
{
    lock_call *k = (lock_call *)b;
    for (size_t i = 0; i < k->n; i++)
        free(k->names[i]);
    free(k->names);
    free(k->got);
    free(k);
}

static lock_call *lock_new(lua_State *L, int what, size_t n)
{
    lock_call *k = calloc(1, sizeof *k);
    if (!k || !(k->names = calloc(n ? n : 1, sizeof *k->names)) ||
        !(k->got = calloc(n ? n : 1, sizeof *k->got)))
        abort(); /* out of memory */
    k->base.lane = DB_CALL_LOCK;
    k->base.run = lock_run;
    k->reg = &runtime_ctx(L)->locks;
    k->what = what;
    return k;
}

static void lock_name(lock_call *k, size_t i, const char *name)
{
    if (!(k->names[i] = strdup(name)))
        abort();
    k->n = i + 1;
}

/* acquire(name) -> true | false (held elsewhere) | nil, "lock session down", "gone" */
static int l_acquire(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    if (!registry_of(L))
        return session_down(L);
    lock_call *k = lock_new(L, ACQ_ONE, 1);
    lock_name(k, 0, name);
    return dbcall(L, &k->base, lock_push, lock_free);
}

/* acquire_many({names}) -> {name = true|false}, statements sent (one up to 65,535 names) |
 * nil, "lock session down", "gone" */
static int l_acquire_many(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 1);
    if (n < 0)
        n = 0;
    for (lua_Integer i = 1; i <= n; i++) { /* raise before allocating */
        if (lua_rawgeti(L, 1, i) != LUA_TSTRING)
            luaL_error(L, "names[%d] is a %s, not a string", (int)i, luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    if (!registry_of(L))
        return session_down(L);
    lock_call *k = lock_new(L, ACQ_MANY, (size_t)n);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, 1, i);
        lock_name(k, (size_t)i - 1, lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    return dbcall(L, &k->base, lock_push, lock_free);
}

static int l_release(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    if (!registry_of(L))
        return session_down(L);
    lock_call *k = lock_new(L, REL_ONE, 1);
    lock_name(k, 0, name);
    return dbcall(L, &k->base, lock_push, lock_free);
}

/* release_many({names}) -> how many were released (one statement per 1,000 names; names
 * not held here are skipped) | nil, "lock session down", "gone" */
static int l_release_many(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 1);
    if (n < 0)
        n = 0;
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_rawgeti(L, 1, i) != LUA_TSTRING)
            luaL_error(L, "names[%d] is a %s, not a string", (int)i, luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    if (!registry_of(L))
        return session_down(L);
    lock_call *k = lock_new(L, REL_MANY, (size_t)n);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, 1, i);
        lock_name(k, (size_t)i - 1, lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    return dbcall(L, &k->base, lock_push, lock_free);
}

static int l_release_all(lua_State *L)
{
    if (!registry_of(L))
        return 0;
    return dbcall(L, &lock_new(L, REL_ALL, 0)->base, lock_push, lock_free);
}

static int l_holds(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    lua_pushboolean(L, registry_of(L) && lock_registry_holds(registry_of(L), name));
    return 1;
}

/* held() -> array of names (a snapshot) */
static int l_held(lua_State *L)
{
    char **names = NULL;
    size_t n = registry_of(L) ? lock_registry_held(registry_of(L), &names) : 0;
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lock_names_free(names, n);
    return 1;
}

static int l_is_up(lua_State *L)
{
    lua_pushboolean(L, registry_of(L) && lock_registry_is_up(registry_of(L)));
    return 1;
}

static int l_connection_id(lua_State *L)
{
    lua_pushinteger(L,
                    registry_of(L) ? (lua_Integer)lock_registry_connection_id(registry_of(L)) : 0);
    return 1;
}

static int l_statements(lua_State *L)
{
    lua_pushinteger(L, registry_of(L) ? (lua_Integer)lock_registry_statements(registry_of(L)) : 0);
    return 1;
}

/* set_validate_interval(ms [, session_timeout]): from the policy's
 * locks { validate_every, session_timeout }; session_timeout is seconds,
 * "server" (the database's own wait_timeout) or nil (3 intervals). */
static int l_set_validate_interval(lua_State *L)
{
    lua_Integer ms = luaL_checkinteger(L, 1);
    luaL_argcheck(L, ms >= 100, 1, "must be at least 100 ms");
    unsigned wait = 0;
    if (lua_type(L, 2) == LUA_TSTRING) {
        luaL_argcheck(L, strcmp(lua_tostring(L, 2), "server") == 0, 2,
                      "must be seconds, \"server\" or nil");
        wait = LOCK_WAIT_TIMEOUT_SERVER;
    } else if (!lua_isnoneornil(L, 2)) {
        lua_Integer s = luaL_checkinteger(L, 2);
        luaL_argcheck(L, s >= 1 && s < 31536000, 2, "must be from 1 s to a year");
        wait = (unsigned)s;
    }
    if (registry_of(L)) {
        lock_registry_set_session_timeout(registry_of(L), wait);
        lock_registry_set_validate_interval(registry_of(L), (unsigned)ms);
    }
    return 0;
}

/* oops.locks.names = {pipeline_prefix=, server_prefix=, leader_prefix=, migrate=,
 * leaders = {SCAN = "oops:leader:SCAN", ...}}, into the oops.locks table at the top. */
static void set_names(lua_State *L)
{
    static const struct {
        const char *k, *v;
    } fixed[] = {
        {"pipeline_prefix", OOPS_LOCK_PIPELINE_PREFIX},
        {"server_prefix", OOPS_LOCK_SERVER_PREFIX},
        {"leader_prefix", OOPS_LOCK_LEADER_PREFIX},
        {"migrate", OOPS_LOCK_MIGRATE},
    };
    static const char *const leaders[] = {OOPS_LEADER_SCANS};
    lua_createtable(L, 0, 5);
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
        lua_pushstring(L, fixed[i].v);
        lua_setfield(L, -2, fixed[i].k);
    }
    lua_createtable(L, 0, (int)(sizeof leaders / sizeof *leaders));
    for (size_t i = 0; i < sizeof leaders / sizeof *leaders; i++) {
        lua_pushstring(L, OOPS_LOCK_LEADER_PREFIX);
        lua_pushstring(L, leaders[i]);
        lua_concat(L, 2);
        lua_setfield(L, -2, leaders[i]);
    }
    lua_setfield(L, -2, "leaders");
    lua_setfield(L, -2, "names");
}

void oops_open_locks(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"acquire", l_acquire},
        {"acquire_many", l_acquire_many},
        {"release", l_release},
        {"release_many", l_release_many},
        {"release_all", l_release_all},
        {"holds", l_holds},
        {"held", l_held},
        {"is_up", l_is_up},
        {"connection_id", l_connection_id},
        {"statements", l_statements},
        {"set_validate_interval", l_set_validate_interval},
        {NULL, NULL},
    };
    oops_setfuncs_in(L, "locks", fns);
    lua_getfield(L, -1, "locks");
    set_names(L);
    lua_pop(L, 1);
}
