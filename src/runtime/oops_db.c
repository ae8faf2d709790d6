/*
 * oops.db: statements on a work connection — exec, own, park, lookup and
 * insert (batched), transactions, the database's clock, the pool. Each call
 * runs through dbcall (dbcall.h): from a task in the daemon, on a borrowed
 * connection of the pool without blocking the loop, the task waiting for
 * it; elsewhere it blocks for its round trips (bounded by the connection's
 * timeouts).
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "db_stmt.h"
#include "dbcall.h"
#include "runtime.h"

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

static void stmt_free(db_call *call) { db_stmt_free((db_stmt *)call); }

/* A statement's rows (array of {column = value}), or {affected =, insert_id =} for a change. */
static int push_rows(lua_State *L, db_call *call)
{
    db_stmt *st = (db_stmt *)call;
    if (call->rc)
        return oops_fail(L, st->err, db_error_name(call->rc));
    const db_result *r = st->r;
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
    return 1;
}

static int push_ok(lua_State *L, db_call *call)
{
    db_stmt *st = (db_stmt *)call;
    if (call->rc)
        return oops_fail(L, st->err, db_error_name(call->rc));
    lua_pushboolean(L, 1);
    return 1;
}

/* Parameters first..first+n-1 of L, checked: nil, booleans, numbers, strings. */
static void check_params(lua_State *L, int first, int n)
{
    for (int i = 0; i < n; i++) {
        int t = lua_type(L, first + i);
        if (t != LUA_TNIL && t != LUA_TBOOLEAN && t != LUA_TNUMBER && t != LUA_TSTRING)
            luaL_argerror(L, first + i, "parameters are nil, booleans, numbers or strings");
    }
}

/* Lua values first..first+n-1 (checked already) as st's parameters, copied. */
static void take_params(lua_State *L, db_stmt *st, int first)
{
    for (size_t i = 0; i < st->n; i++) {
        int idx = (int)i + first;
        switch (lua_type(L, idx)) {
        case LUA_TBOOLEAN: st->p[i] = db_int(lua_toboolean(L, idx)); break;
        case LUA_TNUMBER:
            st->p[i] = lua_isinteger(L, idx) ? db_int((long long)lua_tointeger(L, idx))
                                             : db_double(lua_tonumber(L, idx));
            break;
        case LUA_TSTRING: {
            size_t len;
            const char *v = lua_tolstring(L, idx, &len);
            db_stmt_text(st, i, v, len);
            break;
        }
        default: st->p[i] = db_null(); break;
        }
    }
}

/* oops.db.exec(sql, ...) -> rows (array of {column = value}) for a query,
 * {affected = n, insert_id = n} for a change; nil, msg, name on failure. */
static int l_exec(lua_State *L)
{
    const char *sql = luaL_checkstring(L, 1);
    int n = lua_gettop(L) - 1;
    check_params(L, 2, n); /* raise before allocating */
    db_stmt *st = db_stmt_new(sql, (size_t)n, true);
    take_params(L, st, 2);
    return dbcall(L, &st->call, push_rows, stmt_free);
}

/* oops.db.own(sql, ...) -> as oops.db.exec, on the server's own connection
 * (calls.work, one statement at a time through its lane) rather than the
 * pool: the watcher parks it in a GET_LOCK wait between ticks, so an idle
 * server needs no other work connection (issue 24). */
/* sql at index first, its parameters after it. */
static int own_call(lua_State *L, int first, bool parks, uint64_t park_ms)
{
    const char *sql = luaL_checkstring(L, first);
    int n = lua_gettop(L) - first;
    check_params(L, first + 1, n);
    db_stmt *st = db_stmt_new(sql, (size_t)n, true);
    st->call.lane = DB_CALL_OWN;
    st->call.parks = parks;
    st->call.park_ms = park_ms;
    take_params(L, st, first + 1);
    return dbcall(L, &st->call, push_rows, stmt_free);
}

static int l_own(lua_State *L) { return own_call(L, 1, false, 0); }

/* oops.db.park(ms, sql, ...): as oops.db.own, for a statement that waits up
 * to ms on purpose (the watcher's GET_LOCK): other calls take a pool
 * connection rather than queue behind it, except near its end (db_calls.h). */
static int l_park(lua_State *L)
{
    lua_Integer ms = luaL_checkinteger(L, 1);
    luaL_argcheck(L, ms >= 0, 1, "must be >= 0");
    return own_call(L, 2, true, (uint64_t)ms);
}

/* oops.db.own_idle_ms() -> ms since the server's own connection was last
 * given back (0 while in use, or with no pool): the watcher parks it only
 * after it has rested. */
static int l_own_idle_ms(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)db_calls_work_idle_ms(&runtime_ctx(L)->calls));
    return 1;
}

/* oops.db.lookup(sql, key) -> rows, as oops.db.exec(sql, key) | nil, msg, name.
 * sql holds one placeholder, in "IN (?)", and its first column is the key:
 * only the rows whose first column equals the key byte for byte are
 * returned, alone as in a batch (db_stmt.h), e.g.
 *   oops.db.lookup("SELECT pipeline_id, outcome FROM sim_job WHERE pipeline_id IN (?)", id)
 * Lookups that tasks make meanwhile with the same sql go in one statement
 * (each key once); each gets the rows of its own key (db_stmt.h). */
static int l_lookup(lua_State *L)
{
    const char *sql = luaL_checkstring(L, 1);
    size_t klen;
    const char *key = luaL_checklstring(L, 2, &klen);
    if (lua_gettop(L) != 2)
        return luaL_error(L, "oops.db.lookup: one key");
    if (strlen(key) != klen)
        return luaL_error(L, "oops.db.lookup: the key holds a NUL byte");
    db_stmt *st = db_stmt_lookup(sql);
    if (!st)
        return luaL_error(L, "oops.db.lookup: the statement holds one placeholder, in \"IN (?)\"");
    take_params(L, st, 2);
    return dbcall(L, &st->call, push_rows, stmt_free);
}

/* oops.db.insert(head, row, tail, ...) -> true | nil, msg, name: the row
 * `head VALUES row tail` with the row's parameters `...`, e.g.
 *   oops.db.insert("INSERT INTO t (a, b)", "(?, NOW(6))", "", a)
 * Rows that tasks insert meanwhile with the same head, row and tail go in the
 * same statement (tail may be ON DUPLICATE KEY UPDATE ... with VALUES(col));
 * when that statement fails, each row is inserted on its own and answered
 * on its own. Only the row may hold placeholders. */
static int l_insert(lua_State *L)
{
    const char *head = luaL_checkstring(L, 1), *row = luaL_checkstring(L, 2);
    const char *tail = luaL_optstring(L, 3, "");
    if (strchr(head, '?') || strchr(tail, '?'))
        return luaL_error(L, "oops.db.insert: only the row may hold placeholders");
    int n = lua_gettop(L) - 3, marks = 0;
    for (const char *q = row; *q; q++)
        marks += *q == '?';
    if (n < 0)
        n = 0;
    if (marks != n)
        return luaL_error(L, "oops.db.insert: the row has %d placeholders for %d values", marks, n);
    check_params(L, 4, n);
    db_stmt *st = db_stmt_insert(head, row, tail, (size_t)n);
    take_params(L, st, 4);
    return dbcall(L, &st->call, push_ok, stmt_free);
}

/* COMMIT, or ROLLBACK: a failed COMMIT leaves nothing open either. */
static void end_tx(db_call *call)
{
    db_stmt *st = (db_stmt *)call;
    if (strcmp(st->sql, "ROLLBACK") == 0) {
        db_rollback(call->conn);
        call->rc = 0;
    } else if ((call->rc = db_exec(call->conn, st->sql, NULL, 0, NULL, st->err, sizeof st->err)))
        db_rollback(call->conn);
}

static db_stmt *tx_stmt(const char *sql, db_call_tx tx)
{
    db_stmt *st = db_stmt_new(sql, 0, false);
    st->call.tx = tx;
    if (tx == DB_CALL_END)
        st->call.run = end_tx;
    return st;
}

static int l_begin(lua_State *L)
{
    return dbcall(L, &tx_stmt("START TRANSACTION", DB_CALL_BEGIN)->call, push_ok, stmt_free);
}

static int l_commit(lua_State *L)
{
    return dbcall(L, &tx_stmt("COMMIT", DB_CALL_END)->call, push_ok, stmt_free);
}

static int push_nothing(lua_State *L, db_call *call)
{
    (void)L;
    (void)call;
    return 0;
}

static int l_rollback(lua_State *L)
{
    return dbcall(L, &tx_stmt("ROLLBACK", DB_CALL_END)->call, push_nothing, stmt_free);
}

static int push_now(lua_State *L, db_call *call)
{
    db_stmt *st = (db_stmt *)call;
    if (call->rc)
        return oops_fail(L, st->err, db_error_name(call->rc));
    lua_pushnumber(L, strtod(db_get(st->r, 0, 0), NULL));
    lua_pushstring(L, db_get(st->r, 0, 1));
    /* The moment the database read its clock, on ours: the midpoint of the
     * round trip itself (not of the wait for a connection). */
    lua_pushnumber(L, (st->sent + st->answered) / 2);
    return 3;
}

/* oops.db.now() -> epoch seconds (float), "YYYY-MM-DD HH:MM:SS.ffffff" (UTC), on the database's
 * clock, and this host's clock at the middle of the statement's round trip. */
static int l_now(lua_State *L)
{
    db_stmt *st = db_stmt_new("SELECT UNIX_TIMESTAMP(NOW(6)), NOW(6)", 0, true);
    return dbcall(L, &st->call, push_now, stmt_free);
}

/* oops.db.pool(n): calls from tasks borrow one of n work connections and
 * yield, as in the daemon (scripts and specs; the daemon has its own pool,
 * --db-connections). 0 goes back to blocking calls on the one connection;
 * raises while a call is out on the pool. -> true */
static int l_pool(lua_State *L)
{
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 0 && n <= DB_POOL_MAX, 1, "must be from 0 to 64");
    db_calls *s = &runtime_ctx(L)->calls;
    if (!s->work)
        return luaL_error(L, "oops.db.pool: not connected");
    if (db_calls_busy(s))
        return luaL_error(L, "oops.db.pool: a call is out on the pool");
    db_pool_free(s->pool);
    db_pool_free(s->lane);
    db_pool_free(s->work_lane);
    s->pool = s->lane = s->work_lane = NULL;
    if (n > 0) {
        s->pool = db_pool_new(&runtime_ctx(L)->dbcfg, (size_t)n);
        s->lane = db_pool_new_lane();
        s->work_lane = db_pool_new_lane();
        if (!s->pool || !s->lane || !s->work_lane)
            return luaL_error(L, "oops.db.pool: out of memory");
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* oops.db.busy() -> true while the database refuses the pool new
 * connections (a busy period, db_pool.h): the watcher then waits on nothing,
 * so that calls the pool cannot take have the server's own connection. */
static int l_busy(lua_State *L)
{
    lua_pushboolean(L, db_pool_busy(runtime_ctx(L)->calls.pool));
    return 1;
}

/* Statements sent on the work connections (bench). */
static int l_statements(lua_State *L)
{
    db_calls *s = &runtime_ctx(L)->calls;
    lua_pushinteger(L, (lua_Integer)(db_statement_count(s->work) + db_pool_statements(s->pool)));
    return 1;
}

void oops_open_db(lua_State *L)
{
    static const luaL_Reg db[] = {
        {"exec", l_exec},         {"insert", l_insert}, {"lookup", l_lookup},
        {"own", l_own},           {"park", l_park},     {"own_idle_ms", l_own_idle_ms},
        {"busy", l_busy},         {"begin", l_begin},   {"commit", l_commit},
        {"rollback", l_rollback}, {"now", l_now},       {"statements", l_statements},
        {"pool", l_pool},         {NULL, NULL},
    };
    oops_setfuncs_in(L, "db", db);
}
