/*
 * oops.db (statements on the work connection) and oops.store (pipelines).
 * Calls block for at most one database round trip (bounded by the
 * connection's timeouts). They are meant to be called from tasks so that a
 * later non-blocking implementation can yield without changing a caller.
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "error_names.h"
#include "pipeline_store.h"
#include "runtime.h"
#include "schema.h"

/* The work connection, reopened when the last statement lost it. NULL with
 * nil, msg, name pushed (3 values) when it cannot be had. */
static db_conn *work(lua_State *L, int *pushed)
{
    oops_ctx *c = runtime_ctx(L);
    *pushed = 0;
    if (!c->work) {
        *pushed = lua_fail(L, "not connected to a database", OOPS_E_UNREACHABLE);
        return NULL;
    }
    char err[512];
    unsigned rc = db_conn_ensure(c->work, err, sizeof err);
    if (rc) {
        *pushed = lua_fail(L, err, db_error_name(rc));
        return NULL;
    }
    return c->work;
}

static void push_cell(lua_State *L, const db_result *r, size_t row, size_t col)
{
    const char *s = db_get(r, row, col);
    if (!s) {
        lua_pushnil(L);
        return;
    }
    if (r->types[col] == DB_INT) {
        lua_pushinteger(L, (lua_Integer)strtoll(s, NULL, 10));
    } else if (r->types[col] == DB_DOUBLE) {
        lua_pushnumber(L, strtod(s, NULL));
    } else {
        lua_pushlstring(L, s, r->cells[row * r->ncols + col].len);
    }
}

/* oops.db.exec(sql, ...) -> rows (array of {column = value}) for a query,
 * {affected = n, insert_id = n} for a change; nil, msg, name on failure. */
static int l_exec(lua_State *L)
{
    const char *sql = luaL_checkstring(L, 1);
    int n = lua_gettop(L) - 1;
    db_value *p = calloc((size_t)(n ? n : 1), sizeof *p);
    for (int i = 0; i < n; i++) {
        int idx = i + 2;
        switch (lua_type(L, idx)) {
        case LUA_TNIL: p[i] = db_null(); break;
        case LUA_TBOOLEAN: p[i] = db_int(lua_toboolean(L, idx)); break;
        case LUA_TNUMBER:
            p[i] = lua_isinteger(L, idx) ? db_int((long long)lua_tointeger(L, idx))
                                         : db_double(lua_tonumber(L, idx));
            break;
        case LUA_TSTRING: {
            size_t len;
            p[i].type = DB_TEXT;
            p[i].s = lua_tolstring(L, idx, &len);
            p[i].len = len;
            break;
        }
        default:
            free(p);
            return luaL_argerror(L, idx, "parameters are nil, booleans, numbers or strings");
        }
    }
    int pushed;
    db_conn *c = work(L, &pushed);
    if (!c) {
        free(p);
        return pushed;
    }
    db_result *r = NULL;
    char err[512];
    unsigned rc = db_exec(c, sql, p, (size_t)n, &r, err, sizeof err);
    free(p);
    if (rc)
        return lua_fail(L, err, db_error_name(rc));
    if (r->ncols) {
        lua_createtable(L, (int)r->nrows, 0);
        for (size_t i = 0; i < r->nrows; i++) {
            lua_createtable(L, 0, (int)r->ncols);
            for (size_t j = 0; j < r->ncols; j++) {
                push_cell(L, r, i, j);
                lua_setfield(L, -2, r->names[j]);
            }
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
    } else {
        lua_createtable(L, 0, 2);
        lua_pushinteger(L, (lua_Integer)r->affected);
        lua_setfield(L, -2, "affected");
        lua_pushinteger(L, (lua_Integer)r->insert_id);
        lua_setfield(L, -2, "insert_id");
    }
    db_result_free(r);
    return 1;
}

static int tx(lua_State *L, unsigned (*fn)(db_conn *, char *, size_t))
{
    int pushed;
    db_conn *c = work(L, &pushed);
    if (!c)
        return pushed;
    char err[512];
    unsigned rc = fn(c, err, sizeof err);
    if (rc)
        return lua_fail(L, err, db_error_name(rc));
    lua_pushboolean(L, 1);
    return 1;
}

static int l_begin(lua_State *L) { return tx(L, db_begin); }
static int l_commit(lua_State *L) { return tx(L, db_commit); }
static int l_rollback(lua_State *L)
{
    oops_ctx *c = runtime_ctx(L);
    if (c->work)
        db_rollback(c->work);
    return 0;
}

/* oops.db.now() -> epoch seconds (float), "YYYY-MM-DD HH:MM:SS.ffffff" (UTC), on the database's
 * clock. */
static int l_now(lua_State *L)
{
    int pushed;
    db_conn *c = work(L, &pushed);
    if (!c)
        return pushed;
    db_result *r = NULL;
    char err[512];
    unsigned rc = db_exec(c, "SELECT UNIX_TIMESTAMP(NOW(6)), NOW(6)", NULL, 0, &r, err, sizeof err);
    if (rc)
        return lua_fail(L, err, db_error_name(rc));
    lua_pushnumber(L, strtod(db_get(r, 0, 0), NULL));
    lua_pushstring(L, db_get(r, 0, 1));
    db_result_free(r);
    return 2;
}

static int l_statements(lua_State *L)
{
    oops_ctx *c = runtime_ctx(L);
    lua_pushinteger(L, (lua_Integer)db_statement_count(c->work));
    return 1;
}

/* ---- oops.store ---- */

static void set_str(lua_State *L, const char *k, const char *v)
{
    if (v) {
        lua_pushstring(L, v);
        lua_setfield(L, -2, k);
    }
}

static void push_pipeline(lua_State *L, const pipeline *p)
{
    lua_createtable(L, 0, 18);
    set_str(L, "id", p->id);
    set_str(L, "namespace", p->namespace);
    set_str(L, "application", p->application);
    set_str(L, "environment", p->environment);
    lua_pushfstring(L, "%s/%s", p->namespace, p->application);
    lua_setfield(L, -2, "app");
    set_str(L, "status", pipeline_status_name(p->status));
    lua_pushboolean(L, p->manual);
    lua_setfield(L, -2, "manual");
    set_str(L, "deploy_mode", p->manual ? "manual" : "auto");
    set_str(L, "artifact", p->artifact);
    set_str(L, "source", p->source);
    set_str(L, "message", p->message);
    set_str(L, "trigger", p->trigger_type);
    set_str(L, "deploy_requested_at", p->deploy_requested_at);
    set_str(L, "created_at", p->created_at);
    set_str(L, "status_changed_at", p->status_changed_at);
    set_str(L, "driven_by", p->driven_by);
    lua_pushnumber(L, p->status_age_s);
    lua_setfield(L, -2, "status_age");
    if (p->lock_owner) {
        lua_pushinteger(L, p->lock_owner);
        lua_setfield(L, -2, "lock_owner");
    }
}

static pipeline_status check_status(lua_State *L, int idx)
{
    pipeline_status s;
    const char *name = luaL_checkstring(L, idx);
    if (pipeline_status_parse(name, &s) != 0)
        luaL_argerror(L, idx, lua_pushfstring(L, "unknown status \"%s\"", name));
    return s;
}

static const char *opt_field(lua_State *L, int t, const char *k)
{
    lua_getfield(L, t, k);
    const char *v = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
    lua_pop(L, 1); /* the string stays alive in the table */
    return v;
}

/* nil, msg, name for a PSTORE_* failure; PSTORE_DB is named by the error
 * number the connection last saw (PSTORE_ILLEGAL does not get here:
 * l_transition raises first). */
static int store_fail(lua_State *L, db_conn *db, int rc, const char *err)
{
    const char *name = rc == PSTORE_EXISTS ? OOPS_E_EXISTS
                       : rc == PSTORE_BAD || rc == PSTORE_ILLEGAL
                           ? OOPS_E_INVALID
                           : db_error_name(db_last_error(db));
    return lua_fail(L, err, name);
}

/* oops.store.create{namespace=, application=, environment=, manual=, artifact=, source=, trigger=}
 * -> id */
static int l_create(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    oops_ctx *c = runtime_ctx(L);
    pipeline_new n = {
        .namespace = opt_field(L, 1, "namespace"),
        .application = opt_field(L, 1, "application"),
        .environment = opt_field(L, 1, "environment"),
        .artifact = opt_field(L, 1, "artifact"),
        .source = opt_field(L, 1, "source"),
        .trigger = opt_field(L, 1, "trigger"),
        .actor = c->server_name,
    };
    lua_getfield(L, 1, "manual");
    n.manual = lua_toboolean(L, -1);
    lua_pop(L, 1);
    int pushed;
    db_conn *db = work(L, &pushed);
    if (!db)
        return pushed;
    char id[25], err[512];
    int rc = pipeline_store_create(db, &n, id, err, sizeof err);
    if (rc != 0)
        return store_fail(L, db, rc, err);
    lua_pushstring(L, id);
    return 1;
}

/* oops.store.transition(id, from, to, message) -> true (this call made it) |
 * false (it was not in `from`, or our lock session does not hold its lock) */
static int l_transition(lua_State *L)
{
    const char *id = luaL_checkstring(L, 1);
    pipeline_status from = check_status(L, 2), to = check_status(L, 3);
    const char *msg = luaL_optstring(L, 4, NULL);
    oops_ctx *c = runtime_ctx(L);
    if (!pipeline_transition_allowed(from, to)) /* a caller's mistake: raise */
        return luaL_error(L, "illegal transition %s -> %s", pipeline_status_name(from),
                          pipeline_status_name(to));
    int pushed;
    db_conn *db = work(L, &pushed);
    if (!db)
        return pushed;
    char err[512];
    /* Fenced by our lock session when we have one (a server; not oopsctl).
     * While it is down, a fence no session matches: nothing is changed. */
    uint64_t session = 0;
    if (c->locks) {
        session = lock_registry_connection_id(c->locks);
        if (!session)
            session = UINT64_MAX;
    }
    int rc = pipeline_store_transition(db, id, from, to, msg, c->server_name, c->server_name,
                                       session, err, sizeof err);
    if (rc < 0)
        return store_fail(L, db, rc, err);
    if (rc == 1) {
        char labels[64];
        snprintf(labels, sizeof labels, "to=\"%s\"", pipeline_status_name(to));
        metrics_add(c->metrics, "oops_transitions_total", labels, 1);
    }
    lua_pushboolean(L, rc == 1);
    return 1;
}

/* oops.store.get(id) -> pipeline | false */
static int l_get(lua_State *L)
{
    const char *id = luaL_checkstring(L, 1);
    int pushed;
    db_conn *db = work(L, &pushed);
    if (!db)
        return pushed;
    pipeline p;
    char err[512];
    int rc = pipeline_store_get(db, id, &p, err, sizeof err);
    if (rc < 0)
        return store_fail(L, db, rc, err);
    if (rc == 0) {
        lua_pushboolean(L, 0);
        return 1;
    }
    push_pipeline(L, &p);
    pipeline_clear(&p);
    return 1;
}

/* oops.store.list{statuses = {...}, min_age = seconds, limit = n, lock_owner = bool,
 * after = {created_at = , id = }} -> array of pipelines, oldest first (with lock_owner =
 * connection id holding oops:pipeline:ID, absent when free). `after` (the last row of the
 * previous page) and `limit` read a long list a page at a time. */
static int l_list(lua_State *L)
{
    pipeline_list_opts o = {0};
    if (lua_istable(L, 1)) {
        lua_getfield(L, 1, "lock_owner");
        o.owned = lua_toboolean(L, -1);
        lua_pop(L, 1);
        lua_getfield(L, 1, "statuses");
        if (lua_istable(L, -1)) {
            lua_Integer n = luaL_len(L, -1);
            for (lua_Integer i = 1; i <= n; i++) {
                lua_rawgeti(L, -1, i);
                o.status_mask |= 1u << check_status(L, lua_gettop(L));
                lua_pop(L, 1);
            }
        }
        lua_pop(L, 1);
        lua_getfield(L, 1, "min_age");
        o.min_age_s = luaL_optnumber(L, -1, 0);
        lua_pop(L, 1);
        lua_getfield(L, 1, "limit");
        lua_Integer limit = luaL_optinteger(L, -1, 0);
        if (limit < 0)
            return luaL_error(L, "oops.store.list: limit must be >= 0");
        o.limit = (size_t)limit;
        lua_pop(L, 1);
        lua_getfield(L, 1, "after");
        if (lua_istable(L, -1)) {
            int a = lua_gettop(L);
            o.after_created = opt_field(L, a, "created_at");
            o.after_id = opt_field(L, a, "id");
            if (!o.after_created || !o.after_id)
                return luaL_error(L, "oops.store.list: after needs created_at and id");
        } else if (!lua_isnil(L, -1)) {
            return luaL_error(L, "oops.store.list: after must be a pipeline (created_at, id)");
        }
        /* the table stays on the stack: its strings are used below */
    }
    int pushed;
    db_conn *db = work(L, &pushed);
    if (!db)
        return pushed;
    pipeline *v;
    size_t n;
    char err[512];
    int rc = pipeline_store_scan(db, &o, &v, &n, err, sizeof err);
    if (rc < 0)
        return store_fail(L, db, rc, err);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        push_pipeline(L, &v[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    pipeline_list_free(v, n);
    return 1;
}

static int l_events(lua_State *L)
{
    const char *id = luaL_checkstring(L, 1);
    int pushed;
    db_conn *db = work(L, &pushed);
    if (!db)
        return pushed;
    pipeline_event_row *v;
    size_t n;
    char err[512];
    int rc = pipeline_store_events(db, id, &v, &n, err, sizeof err);
    if (rc < 0)
        return store_fail(L, db, rc, err);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 0, 7);
        lua_pushinteger(L, v[i].id);
        lua_setfield(L, -2, "id");
        set_str(L, "type", v[i].event_type);
        set_str(L, "from", v[i].from_status);
        set_str(L, "to", v[i].to_status);
        set_str(L, "message", v[i].message);
        set_str(L, "server", v[i].server);
        set_str(L, "created_at", v[i].created_at);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    pipeline_events_free(v, n);
    return 1;
}

void lua_register_db(lua_State *L)
{
    static const luaL_Reg db[] = {
        {"exec", l_exec},     {"begin", l_begin},
        {"commit", l_commit}, {"rollback", l_rollback},
        {"now", l_now},       {"statements", l_statements},
        {NULL, NULL},
    };
    static const luaL_Reg store[] = {
        {"create", l_create}, {"transition", l_transition}, {"get", l_get},
        {"list", l_list},     {"events", l_events},         {NULL, NULL},
    };
    lua_setfuncs_in(L, "db", db);
    lua_setfuncs_in(L, "store", store);
}
