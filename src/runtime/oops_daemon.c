/* oops.server_name, oops.stopping, oops.connect (scripts), oops.migrate,
 * oops.error_names */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "error_names.h"
#include "lock_names.h"
#include "lock_registry.h"
#include "runtime.h"
#include "schema.h"

static int l_server_name(lua_State *L)
{
    lua_pushstring(L, runtime_ctx(L)->server_name);
    return 1;
}

/* oops.http_answer(ticket, status, json) -> true | false (the request is
 * gone: answered, timed out, its server closed). The daemon's deferred
 * answers (engine.http_post). */
static int l_http_answer(lua_State *L)
{
    lua_Integer ticket = luaL_checkinteger(L, 1), status = luaL_checkinteger(L, 2);
    size_t len = 0;
    const char *body = luaL_checklstring(L, 3, &len);
    oops_ctx *c = runtime_ctx(L);
    bool ok = c->http_answer && ticket > 0 && status >= 100 && status <= 599 &&
              c->http_answer(c->http_answer_ud, (uint64_t)ticket, (int)status, body, len) == 0;
    lua_pushboolean(L, ok);
    return 1;
}

static int l_stopping(lua_State *L)
{
    lua_pushboolean(L, runtime_ctx(L)->stopping);
    return 1;
}

/*
 * connect{db = URL (default $OOPS_DB), name = "server name", locks = true,
 *         validate_ms = 30000} -> true | nil, msg, name
 * For scripts and specs run with `oopsd lua`: the daemon connects by itself.
 */
static int l_connect(lua_State *L)
{
    oops_ctx *c = runtime_ctx(L);
    luaL_checktype(L, 1, LUA_TTABLE);
    if (c->calls.work)
        return luaL_error(L, "oops.connect: already connected");
    lua_getfield(L, 1, "db");
    const char *url = luaL_optstring(L, -1, NULL);
    lua_getfield(L, 1, "name");
    const char *name = luaL_optstring(L, -1, NULL);
    lua_getfield(L, 1, "locks");
    bool locks = lua_isnil(L, -1) || lua_toboolean(L, -1);
    lua_getfield(L, 1, "validate_ms");
    lua_Integer validate = luaL_optinteger(L, -1, 30000);
    char err[512];
    if (name)
        snprintf(c->server_name, sizeof c->server_name, "%s", name);
    if (db_config_resolve(&c->dbcfg, url, err, sizeof err) != 0)
        return luaL_error(L, "oops.connect: %s", err);
    c->have_db = true;
    c->calls.work = db_open(&c->dbcfg, err, sizeof err);
    if (!c->calls.work)
        return oops_fail(L, err, OOPS_E_UNREACHABLE);
    if (locks) {
        lock_registry_options o = {.validate_interval_ms = (unsigned)validate,
                                   .backoff_initial_ms = 100,
                                   .backoff_max_ms = 2000};
        c->locks = lock_registry_new(&c->dbcfg, &o);
        int rc = lock_registry_connect(c->locks, err, sizeof err);
        if (rc != 0) /* LOCK_REFUSED: the server cannot share locks (Galera, read-only) */
            return oops_fail(L, err, rc == LOCK_REFUSED ? OOPS_E_DB : OOPS_E_UNREACHABLE);
        /* A named script's lock session holds its name lock, as a server's does:
         * its fenced transitions name it (pipeline_store.h). */
        if (name && *name) {
            char lock[sizeof c->server_name + 32];
            snprintf(lock, sizeof lock, OOPS_LOCK_SERVER_PREFIX "%s", name);
            if (lock_registry_acquire(c->locks, lock) != 1)
                return oops_fail(L,
                                 "oops.connect: another session holds this name's lock (two "
                                 "processes must not share a name)",
                                 OOPS_E_EXISTS);
            lock_registry_pin(c->locks, lock);
        }
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* migrate() -> number of migrations applied | nil, msg, name */
static int l_migrate(lua_State *L)
{
    oops_ctx *c = runtime_ctx(L);
    if (!c->calls.work)
        return luaL_error(L, "oops.migrate: not connected");
    char err[512];
    int applied = 0;
    unsigned rc = schema_migrate(c->calls.work, &applied, err, sizeof err);
    if (rc)
        return oops_fail(L, err, db_error_name(rc));
    lua_pushinteger(L, applied);
    return 1;
}

void oops_open_daemon(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"server_name", l_server_name}, {"stopping", l_stopping}, {"http_answer", l_http_answer},
        {"connect", l_connect},         {"migrate", l_migrate},   {NULL, NULL},
    };
    luaL_setfuncs(L, fns, 0);
    oops_set_error_names(L);
}
