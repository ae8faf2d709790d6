/*
 * oops.db (statements on a work connection) and oops.store (pipelines).
 * From a task in the daemon, each call runs on a borrowed connection of the
 * pool without blocking the loop and the task waits for it (dbcall.h);
 * elsewhere it blocks for its round trips (bounded by the connection's
 * timeouts).
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "db_stmt.h"
#include "error_names.h"
#include "buf.h"
#include "log.h"
#include "dbcall.h"
#include "pipeline_store.h"
#include "operator.h"
#include "runtime.h"
#include "schema.h"

/* ---- running a call (dbcall.h) ---- */

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

/* ---- oops.db ---- */

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
    lua_createtable(L, 0, 21);
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
    set_str(L, "hold", p->hold);
    set_str(L, "override_at", p->override_at);
    set_str(L, "rollback_of", p->rollback_of);
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

/* A store call: what it asked, what it got. Strings it reads are copied. */
typedef struct store_call {
    db_call base;
    int rc;              /* the store's result (PSTORE_* when negative) */
    unsigned last_error; /* the connection's error number after a PSTORE_DB */
    char err[512];
    char *strs[8];
    /* create */
    pipeline_new n;
    char id[25];
    /* get, events */
    char *pid;
    /* get */
    pipeline one;
    /* list */
    pipeline_list_opts opts;
    pipeline *v;
    size_t nv;
    /* events */
    pipeline_event_row *ev;
    /* list's ids (its own copies), free's answer */
    char **idv;
    size_t nidv;
    bool requested;
    /* transition with extras */
    pipeline_status from, to;
    pipeline_transition_extra x;
    oops_ctx *ctx;
} store_call;

static const char *keep(store_call *s, const char *v)
{
    if (!v)
        return NULL;
    for (size_t i = 0; i < sizeof s->strs / sizeof *s->strs; i++) {
        if (!s->strs[i]) {
            if (!(s->strs[i] = strdup(v)))
                abort();
            return s->strs[i];
        }
    }
    abort(); /* more strings than a call has room for: a bug */
}

static void store_free(db_call *b)
{
    store_call *s = (store_call *)b;
    for (size_t i = 0; i < sizeof s->strs / sizeof *s->strs; i++)
        free(s->strs[i]);
    free(s->pid);
    pipeline_clear(&s->one);
    pipeline_list_free(s->v, s->nv);
    pipeline_events_free(s->ev, s->nv);
    pipeline_ids_free(s->idv, s->nidv);
    free(s);
}

static store_call *store_new(void (*run)(db_call *))
{
    store_call *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    s->base.lane = DB_CALL_WORK;
    s->base.run = run;
    return s;
}

/* After a store function on b->conn: remember what push needs. */
static void store_ran(db_call *b, int rc)
{
    store_call *s = (store_call *)b;
    s->rc = rc;
    s->last_error = rc < 0 ? db_last_error(b->conn) : 0;
    b->rc = rc < 0 ? (s->last_error ? s->last_error : 1) : 0;
}

/* nil, msg, name for a PSTORE_* failure; PSTORE_DB is named by the error
 * number the connection last saw (PSTORE_ILLEGAL does not get here:
 * l_transition raises first). */
static int store_fail(lua_State *L, const store_call *s)
{
    const char *name = s->rc == PSTORE_EXISTS ? OOPS_E_EXISTS
                       : s->rc == PSTORE_BAD || s->rc == PSTORE_ILLEGAL
                           ? OOPS_E_INVALID
                           : db_error_name(s->last_error);
    return oops_fail(L, s->err, name);
}

static void create_run(db_call *b)
{
    store_call *s = (store_call *)b;
    store_ran(b, pipeline_store_create(b->conn, &s->n, s->id, s->err, sizeof s->err));
}

static int create_push(lua_State *L, db_call *b)
{
    store_call *s = (store_call *)b;
    if (s->rc != 0)
        return store_fail(L, s);
    lua_pushstring(L, s->id);
    return 1;
}

/* oops.store.create{namespace=, application=, environment=, manual=, artifact=, source=, trigger=}
 * -> id */
static int l_create(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    oops_ctx *c = runtime_ctx(L);
    const char *ns = opt_field(L, 1, "namespace"), *app = opt_field(L, 1, "application"),
               *env = opt_field(L, 1, "environment"), *art = opt_field(L, 1, "artifact"),
               *src = opt_field(L, 1, "source"), *trig = opt_field(L, 1, "trigger");
    lua_getfield(L, 1, "manual");
    bool manual = lua_toboolean(L, -1);
    lua_pop(L, 1);
    store_call *s = store_new(create_run);
    s->n = (pipeline_new){
        .namespace = keep(s, ns),
        .application = keep(s, app),
        .environment = keep(s, env),
        .artifact = keep(s, art),
        .source = keep(s, src),
        .trigger = keep(s, trig),
        .actor = keep(s, c->server_name),
        .manual = manual,
    };
    return dbcall(L, &s->base, create_push, store_free);
}

/* Fenced by our lock session when we have one (a server; not oopsctl).
 * While it is down, a fence no session matches: nothing is changed. */
static uint64_t transition_fence(void *ud)
{
    oops_ctx *c = ud;
    uint64_t session = 0;
    if (c->locks) {
        session = lock_registry_connection_id(c->locks);
        if (!session)
            session = UINT64_MAX;
    }
    return session;
}

typedef struct {
    pipeline_transition_call t; /* first */
    char *id, *message;         /* t.req's, copied */
    metrics *metrics;
} transition_call;

static void transition_free(db_call *b)
{
    transition_call *tc = (transition_call *)b;
    free(tc->id);
    free(tc->message);
    free(tc);
}

static int transition_push(lua_State *L, db_call *b)
{
    transition_call *tc = (transition_call *)b;
    const pipeline_transition_req *r = &tc->t.req;
    if (r->rc < 0) {
        const char *name = r->rc == PSTORE_EXISTS ? OOPS_E_EXISTS
                           : r->rc == PSTORE_BAD || r->rc == PSTORE_ILLEGAL
                               ? OOPS_E_INVALID
                               : db_error_name(r->last_error);
        return oops_fail(L, r->err, name);
    }
    if (r->rc == 1) {
        char labels[64];
        snprintf(labels, sizeof labels, "to=\"%s\"", pipeline_status_name(r->to));
        metrics_add(tc->metrics, "oops_transitions_total", labels, 1);
    }
    lua_pushboolean(L, r->rc == 1);
    return 1;
}

static int transition_ex(lua_State *L, const char *id, pipeline_status from, pipeline_status to,
                         const char *msg);

/* oops.store.transition(id, from, to, message) -> true (this call made it) |
 * false (it was not in `from`, or our lock session does not hold its lock).
 * In the daemon the transitions of tasks waiting for a connection together
 * are made in one transaction (pipeline_store.h). */
static int l_transition(lua_State *L)
{
    const char *id = luaL_checkstring(L, 1);
    pipeline_status from = check_status(L, 2), to = check_status(L, 3);
    const char *msg = luaL_optstring(L, 4, NULL);
    if (!pipeline_transition_allowed(from, to)) /* a caller's mistake: raise */
        return luaL_error(L, "illegal transition %s -> %s", pipeline_status_name(from),
                          pipeline_status_name(to));
    if (lua_istable(L, 5))
        return transition_ex(L, id, from, to, msg);
    oops_ctx *c = runtime_ctx(L);
    transition_call *tc = calloc(1, sizeof *tc);
    if (!tc || !(tc->id = strdup(id)) || (msg && !(tc->message = strdup(msg))))
        abort();
    pipeline_transition_call_init(&tc->t);
    tc->t.req =
        (pipeline_transition_req){.id = tc->id, .from = from, .to = to, .message = tc->message};
    tc->t.driver = tc->t.actor = c->server_name;
    tc->t.fence = transition_fence;
    tc->t.fence_ud = c;
    tc->metrics = c->metrics;
    return dbcall(L, &tc->t.call, transition_push, transition_free);
}

static void transition_ex_run(db_call *b)
{
    store_call *s = (store_call *)b;
    oops_ctx *c = s->ctx;
    store_ran(b, pipeline_store_transition_ex(b->conn, s->pid, s->from, s->to, s->strs[0],
                                              c->server_name, c->server_name, transition_fence(c),
                                              &s->x, s->err, sizeof s->err));
}

static int transition_ex_push(lua_State *L, db_call *b)
{
    store_call *s = (store_call *)b;
    if (s->rc < 0)
        return store_fail(L, s);
    if (s->rc == 1) {
        char labels[64];
        snprintf(labels, sizeof labels, "to=\"%s\"", pipeline_status_name(s->to));
        metrics_add(s->ctx->metrics, "oops_transitions_total", labels, 1);
    }
    lua_pushboolean(L, s->rc == 1);
    lua_createtable(L, 0, 5);
    lua_pushboolean(L, s->x.no_slot);
    lua_setfield(L, -2, "no_slot");
    lua_pushinteger(L, s->x.slots_in_use);
    lua_setfield(L, -2, "slots_in_use");
    lua_pushinteger(L, s->x.slots_ahead);
    lua_setfield(L, -2, "slots_ahead");
    lua_pushinteger(L, s->x.slot);
    lua_setfield(L, -2, "slot");
    if (s->x.rollback_id[0]) {
        lua_pushstring(L, s->x.rollback_id);
        lua_setfield(L, -2, "rollback");
    }
    return 2;
}

/* oops.store.transition(id, from, to, message, {slot = {environment =, count =},
 * rollback = message}): the transition with a deploy slot claimed first or an
 * automatic rollback made after it, in one transaction
 * (pipeline_store_transition_ex); never batched. */
static int transition_ex(lua_State *L, const char *id, pipeline_status from, pipeline_status to,
                         const char *msg)
{
    oops_ctx *c = runtime_ctx(L);
    store_call *s = store_new(transition_ex_run);
    if (!(s->pid = strdup(id)))
        abort();
    s->strs[0] = msg ? strdup(msg) : NULL;
    if (msg && !s->strs[0])
        abort();
    s->from = from, s->to = to, s->ctx = c;
    lua_getfield(L, 5, "slot");
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "environment");
        s->x.slot_env = keep(s, luaL_checkstring(L, -1));
        lua_getfield(L, -2, "count");
        lua_Integer n = luaL_checkinteger(L, -1);
        s->x.slot_count = n < 0 || n > 100000 ? 0 : (unsigned)n;
        lua_pop(L, 2);
    }
    lua_pop(L, 1);
    lua_getfield(L, 5, "rollback");
    if (!lua_isnil(L, -1))
        s->x.rollback_message = keep(s, luaL_checkstring(L, -1));
    lua_pop(L, 1);
    return dbcall(L, &s->base, transition_ex_push, store_free);
}

static void get_run(db_call *b)
{
    store_call *s = (store_call *)b;
    store_ran(b, pipeline_store_get(b->conn, s->pid, &s->one, s->err, sizeof s->err));
}

static int get_push(lua_State *L, db_call *b)
{
    store_call *s = (store_call *)b;
    if (s->rc < 0)
        return store_fail(L, s);
    if (s->rc == 0) {
        lua_pushboolean(L, 0);
        return 1;
    }
    push_pipeline(L, &s->one);
    return 1;
}

/* oops.store.get(id) -> pipeline | false */
static int l_get(lua_State *L)
{
    const char *id = luaL_checkstring(L, 1);
    store_call *s = store_new(get_run);
    if (!(s->pid = strdup(id)))
        abort();
    return dbcall(L, &s->base, get_push, store_free);
}

static void list_run(db_call *b)
{
    store_call *s = (store_call *)b;
    store_ran(b, pipeline_store_scan(b->conn, &s->opts, &s->v, &s->nv, s->err, sizeof s->err));
}

static int list_push(lua_State *L, db_call *b)
{
    store_call *s = (store_call *)b;
    if (s->rc < 0)
        return store_fail(L, s);
    lua_createtable(L, (int)s->nv, 0);
    for (size_t i = 0; i < s->nv; i++) {
        push_pipeline(L, &s->v[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
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
        lua_pop(L, 1);
    }
    char **ids = NULL;
    size_t nids = 0;
    if (lua_istable(L, 1) && lua_getfield(L, 1, "ids") != LUA_TNIL) {
        if (!lua_istable(L, -1))
            return luaL_error(L, "oops.store.list: ids must be an array of pipeline ids");
        lua_Integer k = luaL_len(L, -1);
        if (k < 1 || k > PIPELINE_IDS_MAX)
            return luaL_error(L, "oops.store.list: ids holds 1 to %d ids, not %d", PIPELINE_IDS_MAX,
                              (int)k);
        for (lua_Integer i = 1; i <= k; i++)
            if (lua_rawgeti(L, -1, i) != LUA_TSTRING)
                return luaL_error(L, "oops.store.list: ids[%d] is not a string", (int)i);
            else
                lua_pop(L, 1);
        if (!(ids = calloc((size_t)k, sizeof *ids)))
            abort();
        for (lua_Integer i = 1; i <= k; i++) {
            lua_rawgeti(L, -1, i);
            if (!(ids[nids++] = strdup(lua_tostring(L, -1))))
                abort();
            lua_pop(L, 1);
        }
    }
    store_call *s = store_new(list_run);
    s->opts = o;
    s->opts.after_created = keep(s, o.after_created);
    s->opts.after_id = keep(s, o.after_id);
    s->idv = ids;
    s->nidv = nids;
    s->opts.ids = (const char *const *)ids;
    s->opts.nids = nids;
    return dbcall(L, &s->base, list_push, store_free);
}

static void free_run(db_call *b)
{
    store_call *s = (store_call *)b;
    store_ran(b, pipeline_store_free(b->conn, s->opts.status_mask, s->requested, s->opts.limit,
                                     &s->idv, &s->nidv, s->err, sizeof s->err));
}

static int free_push(lua_State *L, db_call *b)
{
    store_call *s = (store_call *)b;
    if (s->rc < 0)
        return store_fail(L, s);
    lua_createtable(L, (int)s->nidv, 0);
    for (size_t i = 0; i < s->nidv; i++) {
        lua_pushstring(L, s->idv[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

/* oops.store.free{statuses = {...}, limit = n, deploy_requested = bool} -> ids of the oldest
 * pipelines in those statuses whose lock nobody holds, oldest first, at most n (1..65535);
 * deploy_requested: BUILD_SUCCEEDED ones only with a deploy request, or automatic (held by a
 * window, freeze or slot). */
static int l_free(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    unsigned mask = 0;
    if (lua_getfield(L, 1, "statuses") != LUA_TTABLE)
        return luaL_error(L, "oops.store.free: statuses must be an array of statuses");
    lua_Integer k = luaL_len(L, -1);
    for (lua_Integer i = 1; i <= k; i++) {
        lua_rawgeti(L, -1, i);
        mask |= 1u << check_status(L, lua_gettop(L));
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    if (!mask)
        return luaL_error(L, "oops.store.free: statuses is empty");
    lua_getfield(L, 1, "limit");
    lua_Integer limit = luaL_checkinteger(L, -1);
    if (limit < 1 || limit > 65535)
        return luaL_error(L, "oops.store.free: limit must be 1 to 65535");
    lua_pop(L, 1);
    lua_getfield(L, 1, "deploy_requested");
    bool requested = lua_toboolean(L, -1);
    lua_pop(L, 1);
    store_call *s = store_new(free_run);
    s->opts.status_mask = mask;
    s->opts.limit = (size_t)limit;
    s->requested = requested;
    return dbcall(L, &s->base, free_push, store_free);
}

static void events_run(db_call *b)
{
    store_call *s = (store_call *)b;
    store_ran(b, pipeline_store_events(b->conn, s->pid, &s->ev, &s->nv, s->err, sizeof s->err));
}

static int events_push(lua_State *L, db_call *b)
{
    store_call *s = (store_call *)b;
    if (s->rc < 0)
        return store_fail(L, s);
    lua_createtable(L, (int)s->nv, 0);
    for (size_t i = 0; i < s->nv; i++) {
        pipeline_event_row *e = &s->ev[i];
        lua_createtable(L, 0, 7);
        lua_pushinteger(L, e->id);
        lua_setfield(L, -2, "id");
        set_str(L, "type", e->event_type);
        set_str(L, "from", e->from_status);
        set_str(L, "to", e->to_status);
        set_str(L, "message", e->message);
        set_str(L, "server", e->server);
        set_str(L, "actor", e->actor);
        set_str(L, "reason", e->reason);
        set_str(L, "created_at", e->created_at);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

static int l_events(lua_State *L)
{
    const char *id = luaL_checkstring(L, 1);
    store_call *s = store_new(events_run);
    if (!(s->pid = strdup(id)))
        abort();
    return dbcall(L, &s->base, events_push, store_free);
}

/* ---- operator actions (issue 27) --------------------------------------- */

typedef struct act_call {
    db_call base;
    char action[16]; /* stop, deploy, rollback */
    char *id, *actor, *reason, *via, *ns, *app, *env, *to;
    bool override, has_expect;
    pipeline_status expect;
    op_result r;
    metrics *metrics;
} act_call;

static void act_free(db_call *b)
{
    act_call *a = (act_call *)b;
    char *f[] = {a->id, a->actor, a->reason, a->via, a->ns, a->app, a->env, a->to};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        free(f[i]);
    free(a);
}

static void act_run(db_call *b)
{
    act_call *a = (act_call *)b;
    op_who who = {.op = {.actor = a->actor, .reason = a->reason}, .via = a->via};
    if (strcmp(a->action, "stop") == 0)
        op_stop(b->conn, a->id, a->has_expect ? &a->expect : NULL, &who, &a->r);
    else if (strcmp(a->action, "deploy") == 0)
        op_deploy(b->conn, a->id, a->override, &who, &a->r);
    else
        op_rollback(b->conn, a->ns, a->app, a->env, a->to, &who, &a->r);
    b->rc = a->r.code == OP_DB ? (db_last_error(b->conn) ? db_last_error(b->conn) : 1) : 0;
}

static int act_push(lua_State *L, db_call *b)
{
    act_call *a = (act_call *)b;
    static const char *const codes[] = {"ok", "input", "db", "stale", "notfound"};
    if (a->r.audit_error[0]) /* operator.c logged it */
        metrics_add(a->metrics, "oops_audit_write_failures_total", "", 1);
    lua_pushstring(L, codes[a->r.code]);
    if (a->r.code == OP_OK) {
        buf j = {0};
        op_result_json(&j, a->action, &a->r);
        lua_pushlstring(L, j.p, j.len);
        buf_free(&j);
    } else {
        lua_pushstring(L, a->r.error);
    }
    return 2;
}

static char *opt_dup(lua_State *L, int t, const char *key)
{
    lua_getfield(L, t, key);
    const char *v = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
    char *d = v ? strdup(v) : NULL;
    if (v && !d)
        abort();
    lua_pop(L, 1);
    return d;
}

/*
 * oops.store.act(action, {id =, expect =, override =, app = "ns/app", env =,
 * to =, actor =, reason =}) -> code, text: an operator's action (operator.c:
 * the rules and answers of oopsctl stop, deploy, rollback), the event's
 * server this server's name. code "ok" with the answer's JSON text, else
 * "input", "notfound", "stale" or "db" with the one-line message. The caller
 * checked the fields (names, the reason's bounds); a nil connection
 * (nothing reachable) returns nil, msg, name as every call does.
 */
static int l_act(lua_State *L)
{
    const char *action = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    if (strcmp(action, "stop") && strcmp(action, "deploy") && strcmp(action, "rollback"))
        return luaL_error(L, "oops.store.act: unknown action %s", action);
    act_call *a = calloc(1, sizeof *a);
    if (!a)
        abort();
    snprintf(a->action, sizeof a->action, "%s", action);
    a->metrics = runtime_ctx(L)->metrics;
    a->id = opt_dup(L, 2, "id");
    a->actor = opt_dup(L, 2, "actor");
    a->reason = opt_dup(L, 2, "reason");
    a->ns = opt_dup(L, 2, "namespace");
    a->app = opt_dup(L, 2, "application");
    a->env = opt_dup(L, 2, "environment");
    a->to = opt_dup(L, 2, "to");
    lua_getfield(L, 2, "override");
    a->override = lua_toboolean(L, -1);
    lua_getfield(L, 2, "expect");
    if (!lua_isnil(L, -1)) {
        a->expect = check_status(L, lua_gettop(L));
        a->has_expect = true;
    }
    lua_pop(L, 2);
    oops_ctx *c = runtime_ctx(L);
    if (!(a->via = strdup(c->server_name[0] ? c->server_name : "oopsd")))
        abort();
    bool ok = a->actor && (strcmp(action, "rollback") ? a->id != NULL : a->ns && a->app && a->env);
    if (!ok) {
        act_free(&a->base);
        return luaL_error(L, "oops.store.act: %s needs actor and %s", action,
                          strcmp(action, "rollback") ? "id"
                                                     : "namespace, application, environment");
    }
    char why[256];
    if (a->reason && pipeline_reason_check("reason", a->reason, why, sizeof why) != 0) {
        act_free(&a->base);
        lua_pushstring(L, "input");
        lua_pushstring(L, why);
        return 2;
    }
    a->base.lane = DB_CALL_WORK;
    a->base.run = act_run;
    return dbcall(L, &a->base, act_push, act_free);
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
    static const luaL_Reg store[] = {
        {"create", l_create}, {"transition", l_transition},
        {"get", l_get},       {"list", l_list},
        {"events", l_events}, {"free", l_free},
        {"act", l_act},       {NULL, NULL},
    };
    oops_setfuncs_in(L, "db", db);
    oops_setfuncs_in(L, "store", store);
}
