/*
 * oops.db (statements on a work connection) and oops.store (pipelines).
 * From a task in the daemon, each call runs on a borrowed connection of the
 * pool without blocking the loop and the task waits for it (lua_dbcall.h);
 * elsewhere it blocks for its round trips (bounded by the connection's
 * timeouts).
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db_fiber.h"
#include "error_names.h"
#include "buf.h"
#include "log.h"
#include "lua_dbcall.h"
#include "pipeline_store.h"
#include "runtime.h"
#include "schema.h"

/* ---- running a call (lua_dbcall.h) ---- */

/* Transactions open in tasks: the connection each keeps until COMMIT/ROLLBACK. */
static struct {
    lua_State *co;
    db_conn *c;
} txs[DB_POOL_MAX];

static db_conn *tx_of(lua_State *co)
{
    for (size_t i = 0; i < DB_POOL_MAX; i++)
        if (txs[i].co == co)
            return txs[i].c;
    return NULL;
}

static void tx_set(lua_State *co, db_conn *c)
{
    for (size_t i = 0; i < DB_POOL_MAX; i++) {
        if (c ? !txs[i].co : txs[i].co == co) {
            txs[i].co = c ? co : NULL;
            txs[i].c = c;
            return;
        }
    }
}

static int finish(lua_State *L, db_call *call)
{
    int n = call->conn_rc ? lua_fail(L, call->conn_err, db_error_name(call->conn_rc))
                          : call->push(L, call);
    if (call->release)
        call->release(call);
    free(call);
    return n;
}

static void body(void *arg)
{
    db_call *call = arg;
    if (call->kind == DBCALL_WORK) {
        unsigned rc = db_conn_ensure(call->conn, call->conn_err, sizeof call->conn_err);
        if (rc) {
            call->conn_rc = call->rc = rc;
            return;
        }
    }
    call->run(call);
}

static void done(void *arg)
{
    db_call *call = arg;
    oops_ctx *c = call->ctx;
    if (call->kind == DBCALL_LOCK) {
        db_pool_put(c->lock_lane, NULL);
    } else if (call->borrowed) {
        if (call->tx == DBCALL_BEGIN && !call->rc)
            tx_set(call->co, call->conn); /* the task's until COMMIT or ROLLBACK */
        else
            db_pool_put(c->pool, call->conn);
    } else if (call->tx == DBCALL_END) {
        tx_set(call->co, NULL);
        db_pool_put(c->pool, call->conn);
    }
    call->finished = true;
    if (call->yielded) {
        lua_State *co = call->co;
        runtime_resume(co, finish(co, call));
    }
}

static void start(db_call *call)
{
    if (db_fiber_run(call->ctx->loop, body, done, call) != 0) {
        body(call); /* no memory for a fiber: block rather than lose the call */
        done(call);
    }
}

static void got_slot(db_conn *conn, void *ud)
{
    db_call *call = ud;
    if (call->kind == DBCALL_WORK) {
        call->conn = conn;
        call->borrowed = true;
    }
    start(call);
}

static bool in_task(lua_State *L) { return lua_isyieldable(L) && runtime_is_task(L); }

int dbcall(lua_State *L, db_call *call)
{
    oops_ctx *c = runtime_ctx(L);
    call->ctx = c;
    call->co = L;
    if (!c->pool || !in_task(L)) {
        /* Blocking, on the connection itself. */
        if (call->kind == DBCALL_WORK) {
            if (!c->work) {
                call->conn_rc = DB_CR_CONNECTION_ERROR;
                snprintf(call->conn_err, sizeof call->conn_err, "not connected to a database");
            } else if (c->work_busy) {
                call->conn_rc = 2000; /* CR_UNKNOWN_ERROR: "db" */
                snprintf(call->conn_err, sizeof call->conn_err,
                         "the work connection is busy: call the database from a task");
            } else {
                call->conn = c->work;
                body(call);
                return finish(L, call);
            }
            return finish(L, call);
        }
        if (c->lock_lane && db_pool_lent(c->lock_lane)) {
            call->conn_rc = 2000;
            snprintf(call->conn_err, sizeof call->conn_err,
                     "the lock session is busy: call oops.locks from a task");
            return finish(L, call);
        }
        call->run(call);
        return finish(L, call);
    }
    if (call->kind == DBCALL_WORK) {
        db_conn *tx = tx_of(L);
        if (call->tx == DBCALL_BEGIN && tx) {
            if (call->release)
                call->release(call);
            free(call);
            return luaL_error(L, "oops.db.begin: this task has a transaction open already");
        }
        if (call->tx == DBCALL_END && !tx)
            call->tx = DBCALL_PLAIN; /* COMMIT/ROLLBACK outside a transaction: a no-op */
        if (tx) {
            call->conn = tx;
            start(call);
        } else {
            db_pool_get(c->pool, got_slot, call);
        }
    } else {
        db_pool_get(c->lock_lane, got_slot, call);
    }
    if (call->finished)
        return finish(L, call);
    call->yielded = true;
    return lua_yield(L, 0);
}

/* A task ended with its transaction open (an error, a forgotten commit): roll it back. */
typedef struct {
    oops_ctx *ctx;
    db_conn *c;
} orphan_tx;

static void orphan_run(void *arg)
{
    orphan_tx *o = arg;
    db_rollback(o->c);
}

static void orphan_done(void *arg)
{
    orphan_tx *o = arg;
    db_pool_put(o->ctx->pool, o->c);
    free(o);
}

void lua_db_task_ended(lua_State *co)
{
    db_conn *c = tx_of(co);
    if (!c)
        return;
    tx_set(co, NULL);
    orphan_tx *o = malloc(sizeof *o);
    if (!o)
        abort();
    *o = (orphan_tx){runtime_ctx(co), c};
    if (db_fiber_run(o->ctx->loop, orphan_run, orphan_done, o) != 0) {
        orphan_run(o);
        orphan_done(o);
    }
}

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

/* One statement: its text and parameters copied (the task may wait), its result. */
typedef struct exec_call {
    db_call base;
    char *sql;
    db_value *p;
    size_t n;
    db_result *r;
    char err[512];
    int what;               /* EXEC_ROWS, EXEC_KEYED, EXEC_OK (true), EXEC_NOW */
    double sent, answered;  /* EXEC_NOW: this host's clock around the statement itself */
    struct exec_call *next; /* oops.db.insert: the next row waiting for its batch */
} exec_call;

static double wall_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* EXEC_KEYED (oops.db.lookup): the rows whose first column is the key
 * p[0] byte for byte, alone as in a batch (lookup_body), so the column's
 * collation (case, PAD SPACE) never makes a batch answer otherwise. */
enum { EXEC_ROWS, EXEC_KEYED, EXEC_OK, EXEC_NOW };

static void exec_run(db_call *b)
{
    exec_call *e = (exec_call *)b;
    e->sent = wall_clock();
    b->rc = db_exec(b->conn, e->sql, e->p, e->n, e->what == EXEC_OK ? NULL : &e->r, e->err,
                    sizeof e->err);
    e->answered = wall_clock();
    if (b->rc == 0 && e->what == EXEC_KEYED) {
        db_result *all = e->r;
        e->r = db_result_rows_keyed(all, e->p[0].s);
        db_result_free(all);
    }
}

static int exec_push(lua_State *L, db_call *b)
{
    exec_call *e = (exec_call *)b;
    if (b->rc)
        return lua_fail(L, e->err, db_error_name(b->rc));
    if (e->what == EXEC_OK) {
        lua_pushboolean(L, 1);
        return 1;
    }
    db_result *r = e->r;
    if (e->what == EXEC_NOW) {
        lua_pushnumber(L, strtod(db_get(r, 0, 0), NULL));
        lua_pushstring(L, db_get(r, 0, 1));
        /* The moment the database read its clock, on ours: the midpoint of
         * the round trip itself (not of the wait for a connection). */
        lua_pushnumber(L, (e->sent + e->answered) / 2);
        return 3;
    }
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

static void exec_release(db_call *b)
{
    exec_call *e = (exec_call *)b;
    for (size_t i = 0; i < e->n; i++)
        if (e->p[i].type == DB_TEXT)
            free((char *)e->p[i].s);
    free(e->p);
    free(e->sql);
    db_result_free(e->r);
}

static exec_call *exec_new(const char *sql, int what, dbcall_tx tx)
{
    exec_call *e = calloc(1, sizeof *e);
    if (!e || !(e->sql = strdup(sql)))
        abort(); /* out of memory */
    e->base.kind = DBCALL_WORK;
    e->base.tx = tx;
    e->base.run = exec_run;
    e->base.push = exec_push;
    e->base.release = exec_release;
    e->what = what;
    return e;
}

static void take_params(lua_State *L, exec_call *e, int first, int n);

/* oops.db.exec(sql, ...) -> rows (array of {column = value}) for a query,
 * {affected = n, insert_id = n} for a change; nil, msg, name on failure. */
static int l_exec(lua_State *L)
{
    const char *sql = luaL_checkstring(L, 1);
    int n = lua_gettop(L) - 1;
    for (int i = 0; i < n; i++) { /* raise before allocating */
        int t = lua_type(L, i + 2);
        if (t != LUA_TNIL && t != LUA_TBOOLEAN && t != LUA_TNUMBER && t != LUA_TSTRING)
            return luaL_argerror(L, i + 2, "parameters are nil, booleans, numbers or strings");
    }
    exec_call *e = exec_new(sql, EXEC_ROWS, DBCALL_PLAIN);
    take_params(L, e, 2, n);
    return dbcall(L, &e->base);
}

/* Lua values first..first+n-1 (checked already) as e's parameters, copied. */
static void take_params(lua_State *L, exec_call *e, int first, int n)
{
    e->p = calloc((size_t)(n ? n : 1), sizeof *e->p);
    if (!e->p)
        abort();
    e->n = (size_t)n;
    for (int i = 0; i < n; i++) {
        int idx = i + first;
        switch (lua_type(L, idx)) {
        case LUA_TBOOLEAN: e->p[i] = db_int(lua_toboolean(L, idx)); break;
        case LUA_TNUMBER:
            e->p[i] = lua_isinteger(L, idx) ? db_int((long long)lua_tointeger(L, idx))
                                            : db_double(lua_tonumber(L, idx));
            break;
        case LUA_TSTRING: {
            size_t len;
            const char *v = lua_tolstring(L, idx, &len);
            char *copy = malloc(len + 1);
            if (!copy)
                abort();
            memcpy(copy, v, len + 1);
            e->p[i] = (db_value){.type = DB_TEXT, .s = copy, .len = len};
            break;
        }
        default: e->p[i] = db_null(); break;
        }
    }
}

/* ---- rows inserted in batches (oops.db.insert) ----
 * The same single-row INSERT from several tasks while the connections are
 * busy is sent as one multi-row INSERT (like the transitions: nobody waits
 * for a batch to fill). Rows are grouped by their statement (head, row,
 * tail); a few kinds at once. */
#define INS_KINDS 32

/* The next power of two from 2 (statement shapes to cache: a few). */
static size_t batch_shape_of(size_t n)
{
    size_t b = 2;
    while (b < n)
        b *= 2;
    return b;
}
typedef struct {
    char *key;   /* head \x1f row \x1f tail; for a lookup: its SQL */
    bool lookup; /* oops.db.lookup: head is the SQL before "IN (?)", tail after it */
    char *head, *row, *tail;
    char label[80]; /* table="NAME", for oops_db_insert_statements_total */
    exec_call *first, *last;
    bool runner_waiting;
} ins_kind;
static ins_kind ins_kinds[INS_KINDS];

typedef struct {
    db_call base;
    ins_kind *kind;
    exec_call *m[PIPELINE_BATCH_MAX];
    size_t n;
} ins_batch;

static void ins_start(ins_kind *k, oops_ctx *c);

/* Rows m[0..n) in one statement; 0 or its error number. */
static unsigned ins_rows(db_conn *conn, ins_kind *k, exec_call **m, size_t n, char *err,
                         size_t errlen)
{
    buf sql = {0};
    size_t np = 0, per = m[0]->n;
    db_value *p = malloc((n * per > 0 ? n * per : 1) * sizeof *p);
    if (!p)
        abort();
    buf_printf(&sql, "%s VALUES ", k->head);
    for (size_t i = 0; i < n; i++) {
        buf_puts(&sql, i ? ", " : "");
        buf_puts(&sql, k->row);
        for (size_t j = 0; j < per; j++)
            p[np++] = m[i]->p[j];
    }
    if (*k->tail)
        buf_printf(&sql, " %s", k->tail);
    unsigned rc = db_exec(conn, sql.p, p, np, NULL, err, errlen);
    buf_free(&sql);
    free(p);
    return rc;
}

/* The lookups of bb in one statement: the keys (each once) padded to a
 * power of two in the IN list; each caller gets the rows of its key. */
static void lookup_body(ins_batch *bb, db_conn *conn)
{
    ins_kind *k = bb->kind;
    const char *keys[PIPELINE_BATCH_MAX];
    size_t nk = 0;
    for (size_t i = 0; i < bb->n; i++) {
        const char *key = bb->m[i]->p[0].s;
        bool seen = false;
        for (size_t j = 0; j < nk && !seen; j++)
            seen = strcmp(keys[j], key) == 0;
        if (!seen)
            keys[nk++] = key;
    }
    unsigned rc = 1;
    db_result *r = NULL;
    char err[512];
    if (bb->n > 1) {
        size_t shape = batch_shape_of(nk);
        buf sql = {0};
        db_value p[PIPELINE_BATCH_MAX];
        buf_printf(&sql, "%sIN (", k->head);
        for (size_t i = 0; i < shape; i++) {
            buf_puts(&sql, i ? ", ?" : "?");
            p[i] = db_text(keys[i < nk ? i : nk - 1]);
        }
        buf_printf(&sql, ")%s", k->tail);
        rc = db_exec(conn, sql.p, p, shape, &r, err, sizeof err);
        if (rc)
            log_msg(LOG_DEBUG, "a batch of %zu lookups is made one by one: %s", bb->n, err);
        buf_free(&sql);
        metrics_add(bb->base.ctx->metrics, "oops_db_lookup_batches_total", NULL, 1);
        metrics_add(bb->base.ctx->metrics, "oops_db_lookup_batched_total", NULL, (double)bb->n);
    }
    size_t statements = bb->n > 1;
    for (size_t i = 0; i < bb->n; i++) {
        exec_call *e = bb->m[i];
        e->base.conn = conn;
        if (rc == 0) {
            e->r = db_result_rows_keyed(r, e->p[0].s);
            e->base.rc = 0;
        } else {
            exec_run(&e->base); /* alone, or the batch failed: on its own */
            statements++;
        }
    }
    db_result_free(r);
    metrics_add(bb->base.ctx->metrics, "oops_db_lookup_statements_total", k->label,
                (double)statements);
}

static void ins_body(void *arg)
{
    ins_batch *bb = arg;
    db_conn *conn = bb->base.conn;
    char err[512];
    unsigned rc = db_conn_ensure(conn, err, sizeof err);
    if (rc) {
        for (size_t i = 0; i < bb->n; i++) {
            bb->m[i]->base.conn_rc = rc;
            snprintf(bb->m[i]->base.conn_err, sizeof bb->m[i]->base.conn_err, "%s", err);
        }
        return;
    }
    if (bb->kind->lookup) {
        lookup_body(bb, conn);
        return;
    }
    /* Chunks of a power of two rows: a few statement shapes to cache. */
    size_t statements = 0;
    for (size_t done = 0; done < bb->n;) {
        size_t k = PIPELINE_BATCH_MAX;
        while (k > bb->n - done)
            k /= 2;
        exec_call **m = bb->m + done;
        statements += k > 1;
        if (k == 1 || ins_rows(conn, bb->kind, m, k, err, sizeof err) != 0) {
            /* Alone, or the rows together failed: each on its own, for its own answer. */
            for (size_t i = 0; i < k; i++) {
                m[i]->base.conn = conn;
                exec_run(&m[i]->base);
            }
            statements += k;
        }
        done += k;
    }
    metrics_add(bb->base.ctx->metrics, "oops_db_insert_statements_total", bb->kind->label,
                (double)statements);
    if (bb->n > 1) {
        metrics_add(bb->base.ctx->metrics, "oops_db_insert_batches_total", NULL, 1);
        metrics_add(bb->base.ctx->metrics, "oops_db_insert_batched_total", NULL, (double)bb->n);
    }
}

static void ins_done(void *arg)
{
    ins_batch *bb = arg;
    db_pool_put(bb->base.ctx->pool, bb->base.conn);
    for (size_t i = 0; i < bb->n; i++) {
        exec_call *e = bb->m[i];
        e->base.finished = true;
        if (e->base.yielded) {
            lua_State *co = e->base.co;
            runtime_resume(co, finish(co, &e->base));
        }
    }
    free(bb);
}

static void ins_got(db_conn *conn, void *ud)
{
    ins_batch *bb = ud;
    ins_kind *k = bb->kind;
    bb->base.conn = conn;
    k->runner_waiting = false;
    while (k->first && bb->n < PIPELINE_BATCH_MAX) {
        exec_call *e = k->first;
        k->first = e->next;
        e->next = NULL;
        bb->m[bb->n++] = e;
    }
    if (!k->first)
        k->last = NULL;
    else
        ins_start(k, bb->base.ctx);
    if (db_fiber_run(bb->base.ctx->loop, ins_body, ins_done, bb) != 0) {
        ins_body(bb);
        ins_done(bb);
    }
}

static void ins_start(ins_kind *k, oops_ctx *c)
{
    ins_batch *bb = calloc(1, sizeof *bb);
    if (!bb)
        abort();
    bb->base.kind = DBCALL_WORK;
    bb->base.ctx = c;
    bb->kind = k;
    k->runner_waiting = true;
    db_pool_get(c->pool, ins_got, bb);
}

/* table="NAME": the word after `after` (INTO, FROM) in sql. */
static void insert_label(const char *sql, const char *after, char *out, size_t size)
{
    const char *t = strcasestr(sql, after);
    t = t ? t + strlen(after) : sql;
    while (*t == ' ')
        t++;
    size_t tl = strcspn(t, " (`\"\\");
    snprintf(out, size, "table=\"%.*s\"", (int)(tl < 60 ? tl : 60), t);
}

static ins_kind *ins_kind_of(const char *head, const char *row, const char *tail, bool lookup)
{
    size_t len = strlen(head) + strlen(row) + strlen(tail) + 3;
    char *key = malloc(len);
    if (!key)
        abort();
    snprintf(key, len, "%s\x1f%s\x1f%s", head, row, tail); /* a lookup's row is "" */
    ins_kind *free_slot = NULL;
    for (size_t i = 0; i < INS_KINDS; i++) {
        if (ins_kinds[i].key && strcmp(ins_kinds[i].key, key) == 0) {
            free(key);
            return &ins_kinds[i];
        }
        if (!ins_kinds[i].key && !free_slot)
            free_slot = &ins_kinds[i];
    }
    if (!free_slot) {
        free(key);
        return NULL; /* too many kinds: this one is not batched */
    }
    free_slot->key = key;
    free_slot->lookup = lookup;
    insert_label(head, lookup ? "FROM " : "INTO ", free_slot->label, sizeof free_slot->label);
    if (!(free_slot->head = strdup(head)) || !(free_slot->row = strdup(row)) ||
        !(free_slot->tail = strdup(tail)))
        abort();
    return free_slot;
}

/* oops.db.lookup(sql, key) -> rows, as oops.db.exec(sql, key) | nil, msg, name.
 * sql holds one placeholder, in "IN (?)", and its first column is the key:
 * only the rows whose first column equals the key byte for byte are
 * returned (alone or batched: EXEC_KEYED), e.g.
 *   oops.db.lookup("SELECT pipeline_id, outcome FROM sim_job WHERE kind = 'x' AND pipeline_id IN
 * (?)", id) Lookups that tasks make meanwhile with the same sql go in one statement (each key
 * once); each gets the rows of its own key. When that statement fails, each runs on its own. */
static int l_lookup(lua_State *L)
{
    const char *sql = luaL_checkstring(L, 1);
    size_t klen;
    const char *key = luaL_checklstring(L, 2, &klen);
    if (lua_gettop(L) != 2)
        return luaL_error(L, "oops.db.lookup: one key");
    if (strlen(key) != klen)
        return luaL_error(L, "oops.db.lookup: the key holds a NUL byte");
    const char *in = strstr(sql, "IN (?)");
    int marks = 0;
    for (const char *q = sql; *q; q++)
        marks += *q == '?';
    if (!in || marks != 1)
        return luaL_error(L, "oops.db.lookup: the statement holds one placeholder, in \"IN (?)\"");
    exec_call *e = exec_new(sql, EXEC_KEYED, DBCALL_PLAIN);
    take_params(L, e, 2, 1);
    oops_ctx *c = runtime_ctx(L);
    ins_kind *k = NULL;
    if (c->pool && in_task(L) && !tx_of(L)) {
        size_t hl = (size_t)(in - sql);
        char *head = malloc(hl + 1);
        if (!head)
            abort();
        memcpy(head, sql, hl);
        head[hl] = '\0';
        k = ins_kind_of(head, "", in + strlen("IN (?)"), true);
        free(head);
    }
    if (!k || !k->lookup) {
        char label[80];
        insert_label(sql, "FROM ", label, sizeof label);
        metrics_add(c->metrics, "oops_db_lookup_statements_total", label, 1);
        return dbcall(L, &e->base);
    }
    e->base.ctx = c;
    e->base.co = L;
    if (k->last)
        k->last->next = e;
    else
        k->first = e;
    k->last = e;
    if (!k->runner_waiting)
        ins_start(k, c);
    if (e->base.finished)
        return finish(L, &e->base);
    e->base.yielded = true;
    return lua_yield(L, 0);
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
    for (int i = 0; i < n; i++) {
        int t = lua_type(L, i + 4);
        if (t != LUA_TNIL && t != LUA_TBOOLEAN && t != LUA_TNUMBER && t != LUA_TSTRING)
            return luaL_argerror(L, i + 4, "parameters are nil, booleans, numbers or strings");
    }
    size_t len = strlen(head) + strlen(row) + strlen(tail) + 16;
    char *one = malloc(len);
    if (!one)
        abort();
    snprintf(one, len, "%s VALUES %s%s%s", head, row, *tail ? " " : "", tail);
    exec_call *e = exec_new(one, EXEC_OK, DBCALL_PLAIN);
    free(one);
    take_params(L, e, 4, n);
    oops_ctx *c = runtime_ctx(L);
    ins_kind *k = c->pool && in_task(L) && !tx_of(L) ? ins_kind_of(head, row, tail, false) : NULL;
    if (!k) {
        char label[80];
        insert_label(head, "INTO ", label, sizeof label);
        metrics_add(c->metrics, "oops_db_insert_statements_total", label, 1);
        return dbcall(L, &e->base);
    }
    e->base.ctx = c;
    e->base.co = L;
    if (k->last)
        k->last->next = e;
    else
        k->first = e;
    k->last = e;
    if (!k->runner_waiting)
        ins_start(k, c);
    if (e->base.finished)
        return finish(L, &e->base);
    e->base.yielded = true;
    return lua_yield(L, 0);
}

static void end_run(db_call *b)
{
    exec_call *e = (exec_call *)b;
    if (strcmp(e->sql, "ROLLBACK") == 0) {
        db_rollback(b->conn);
        b->rc = 0;
    } else {
        exec_run(b);
        if (b->rc)
            db_rollback(b->conn); /* a failed COMMIT leaves nothing open */
    }
}

static int l_begin(lua_State *L)
{
    return dbcall(L, &exec_new("START TRANSACTION", EXEC_OK, DBCALL_BEGIN)->base);
}

static int l_commit(lua_State *L)
{
    exec_call *e = exec_new("COMMIT", EXEC_OK, DBCALL_END);
    e->base.run = end_run;
    return dbcall(L, &e->base);
}

static int rollback_push(lua_State *L, db_call *b)
{
    (void)L;
    (void)b;
    return 0;
}

static int l_rollback(lua_State *L)
{
    exec_call *e = exec_new("ROLLBACK", EXEC_OK, DBCALL_END);
    e->base.run = end_run;
    e->base.push = rollback_push;
    return dbcall(L, &e->base);
}

/* oops.db.now() -> epoch seconds (float), "YYYY-MM-DD HH:MM:SS.ffffff" (UTC), on the database's
 * clock, and this host's clock at the middle of the statement's round trip. */
static int l_now(lua_State *L)
{
    return dbcall(L,
                  &exec_new("SELECT UNIX_TIMESTAMP(NOW(6)), NOW(6)", EXEC_NOW, DBCALL_PLAIN)->base);
}

/* oops.db.pool(n): calls from tasks borrow one of n work connections and
 * yield, as in the daemon (scripts and specs; the daemon has its own pool,
 * --db-connections). 0 goes back to blocking calls on the one connection;
 * raises while a connection of the pool is lent. -> true */
static int l_pool(lua_State *L)
{
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 0 && n <= DB_POOL_MAX, 1, "must be from 0 to 64");
    oops_ctx *c = runtime_ctx(L);
    if (!c->work)
        return luaL_error(L, "oops.db.pool: not connected");
    if (db_pool_lent(c->pool) || db_pool_lent(c->lock_lane))
        return luaL_error(L, "oops.db.pool: a call is out on the pool");
    db_pool_free(c->pool);
    db_pool_free(c->lock_lane);
    c->pool = c->lock_lane = NULL;
    if (n > 0) {
        c->pool = db_pool_new(&c->dbcfg, (size_t)n);
        c->lock_lane = db_pool_new_lane();
        if (!c->pool || !c->lock_lane)
            return luaL_error(L, "oops.db.pool: out of memory");
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* Statements sent on the work connections (bench). */
static int l_statements(lua_State *L)
{
    oops_ctx *c = runtime_ctx(L);
    lua_pushinteger(L, (lua_Integer)(db_statement_count(c->work) + db_pool_statements(c->pool)));
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
    /* transition, get, events */
    char *pid;
    pipeline_status from, to;
    const char *message;
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
    /* transition: the next one waiting for a batch */
    struct store_call *next;
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

static void store_release(db_call *b)
{
    store_call *s = (store_call *)b;
    for (size_t i = 0; i < sizeof s->strs / sizeof *s->strs; i++)
        free(s->strs[i]);
    free(s->pid);
    pipeline_clear(&s->one);
    pipeline_list_free(s->v, s->nv);
    pipeline_events_free(s->ev, s->nv);
    pipeline_ids_free(s->idv, s->nidv);
}

static store_call *store_new(void (*run)(db_call *), int (*push)(lua_State *, db_call *))
{
    store_call *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    s->base.kind = DBCALL_WORK;
    s->base.run = run;
    s->base.push = push;
    s->base.release = store_release;
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
    return lua_fail(L, s->err, name);
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
    store_call *s = store_new(create_run, create_push);
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
    return dbcall(L, &s->base);
}

/* Fenced by our lock session when we have one (a server; not oopsctl).
 * While it is down, a fence no session matches: nothing is changed. */
static uint64_t transition_fence(oops_ctx *c)
{
    uint64_t session = 0;
    if (c->locks) {
        session = lock_registry_connection_id(c->locks);
        if (!session)
            session = UINT64_MAX;
    }
    return session;
}

static void transition_run(db_call *b)
{
    store_call *s = (store_call *)b;
    oops_ctx *c = b->ctx;
    uint64_t session = transition_fence(c);
    store_ran(b,
              pipeline_store_transition(b->conn, s->pid, s->from, s->to, s->message, c->server_name,
                                        c->server_name, session, s->err, sizeof s->err));
}

static int transition_push(lua_State *L, db_call *b)
{
    store_call *s = (store_call *)b;
    if (s->rc < 0)
        return store_fail(L, s);
    if (s->rc == 1) {
        char labels[64];
        snprintf(labels, sizeof labels, "to=\"%s\"", pipeline_status_name(s->to));
        metrics_add(b->ctx->metrics, "oops_transitions_total", labels, 1);
    }
    lua_pushboolean(L, s->rc == 1);
    return 1;
}

/* ---- transitions in batches ----
 * In the daemon, a task's transition waits for a work connection like any
 * call; the transitions of other tasks that come meanwhile join it, and the
 * first to get a connection makes them all in one transaction
 * (pipeline_store_transitions: seven statements for up to 64). Nobody waits
 * for a batch to fill: a transition alone goes as soon as a connection is
 * free, and batches form only while the connections are busy. */
static store_call *pend_head, *pend_tail;
static size_t pend_n;
static bool runner_waiting; /* a batch runner is in the pool's queue */

typedef struct {
    db_call base;
    store_call *m[PIPELINE_BATCH_MAX];
    size_t n;
} batch_call;

static void batch_body(void *arg)
{
    batch_call *bc = arg;
    db_call *b = &bc->base;
    char err[512];
    unsigned rc = db_conn_ensure(b->conn, err, sizeof err);
    if (rc) {
        for (size_t i = 0; i < bc->n; i++) {
            bc->m[i]->base.conn_rc = rc;
            snprintf(bc->m[i]->base.conn_err, sizeof bc->m[i]->base.conn_err, "%s", err);
        }
        return;
    }
    pipeline_transition_req v[PIPELINE_BATCH_MAX];
    for (size_t i = 0; i < bc->n; i++) {
        store_call *s = bc->m[i];
        v[i] = (pipeline_transition_req){
            .id = s->pid, .from = s->from, .to = s->to, .message = s->message};
    }
    oops_ctx *c = b->ctx;
    pipeline_store_transitions(b->conn, v, bc->n, c->server_name, c->server_name,
                               transition_fence(c));
    for (size_t i = 0; i < bc->n; i++) {
        store_call *s = bc->m[i];
        s->rc = v[i].rc;
        s->last_error = v[i].last_error;
        snprintf(s->err, sizeof s->err, "%s", v[i].err);
        s->base.rc = s->rc < 0 ? (s->last_error ? s->last_error : 1) : 0;
    }
    if (bc->n > 1) {
        metrics_add(c->metrics, "oops_transition_batches_total", NULL, 1);
        metrics_add(c->metrics, "oops_transition_batched_total", NULL, (double)bc->n);
    }
}

static void batch_done(void *arg)
{
    batch_call *bc = arg;
    db_pool_put(bc->base.ctx->pool, bc->base.conn);
    for (size_t i = 0; i < bc->n; i++) {
        store_call *s = bc->m[i];
        s->base.finished = true;
        lua_State *co = s->base.co;
        if (s->base.yielded) /* else it finished before its task yielded: it reads it itself */
            runtime_resume(co, finish(co, &s->base));
    }
    free(bc);
}

static void batch_start(oops_ctx *c);

static void batch_got(db_conn *conn, void *ud)
{
    batch_call *bc = ud;
    bc->base.conn = conn;
    runner_waiting = false;
    while (pend_head && bc->n < PIPELINE_BATCH_MAX) {
        store_call *s = pend_head;
        pend_head = s->next;
        s->next = NULL;
        bc->m[bc->n++] = s;
        pend_n--;
    }
    if (!pend_head)
        pend_tail = NULL;
    else
        batch_start(bc->base.ctx); /* more than one batch's worth: the next waits */
    if (db_fiber_run(bc->base.ctx->loop, batch_body, batch_done, bc) != 0) {
        batch_body(bc);
        batch_done(bc);
    }
}

static void batch_start(oops_ctx *c)
{
    batch_call *bc = calloc(1, sizeof *bc);
    if (!bc)
        abort();
    bc->base.kind = DBCALL_WORK;
    bc->base.ctx = c;
    runner_waiting = true;
    db_pool_get(c->pool, batch_got, bc);
}

/* oops.store.transition(id, from, to, message) -> true (this call made it) |
 * false (it was not in `from`, or our lock session does not hold its lock) */
static int l_transition(lua_State *L)
{
    const char *id = luaL_checkstring(L, 1);
    pipeline_status from = check_status(L, 2), to = check_status(L, 3);
    const char *msg = luaL_optstring(L, 4, NULL);
    if (!pipeline_transition_allowed(from, to)) /* a caller's mistake: raise */
        return luaL_error(L, "illegal transition %s -> %s", pipeline_status_name(from),
                          pipeline_status_name(to));
    store_call *s = store_new(transition_run, transition_push);
    s->pid = strdup(id);
    if (!s->pid)
        abort();
    s->from = from;
    s->to = to;
    s->message = keep(s, msg);
    oops_ctx *c = runtime_ctx(L);
    if (c->pool && in_task(L) && !tx_of(L)) {
        /* Joins the batch waiting for a connection, or starts one. */
        s->base.ctx = c;
        s->base.co = L;
        if (pend_tail)
            pend_tail->next = s;
        else
            pend_head = s;
        pend_tail = s;
        pend_n++;
        if (!runner_waiting)
            batch_start(c);
        if (s->base.finished)
            return finish(L, &s->base);
        s->base.yielded = true;
        return lua_yield(L, 0);
    }
    return dbcall(L, &s->base);
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
    store_call *s = store_new(get_run, get_push);
    if (!(s->pid = strdup(id)))
        abort();
    return dbcall(L, &s->base);
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
    store_call *s = store_new(list_run, list_push);
    s->opts = o;
    s->opts.after_created = keep(s, o.after_created);
    s->opts.after_id = keep(s, o.after_id);
    s->idv = ids;
    s->nidv = nids;
    s->opts.ids = (const char *const *)ids;
    s->opts.nids = nids;
    return dbcall(L, &s->base);
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
 * deploy_requested: BUILD_SUCCEEDED ones only with a deploy request. */
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
    store_call *s = store_new(free_run, free_push);
    s->opts.status_mask = mask;
    s->opts.limit = (size_t)limit;
    s->requested = requested;
    return dbcall(L, &s->base);
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
        set_str(L, "created_at", e->created_at);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

static int l_events(lua_State *L)
{
    const char *id = luaL_checkstring(L, 1);
    store_call *s = store_new(events_run, events_push);
    if (!(s->pid = strdup(id)))
        abort();
    return dbcall(L, &s->base);
}

void lua_register_db(lua_State *L)
{
    static const luaL_Reg db[] = {
        {"exec", l_exec},   {"insert", l_insert},         {"lookup", l_lookup},
        {"begin", l_begin}, {"commit", l_commit},         {"rollback", l_rollback},
        {"now", l_now},     {"statements", l_statements}, {"pool", l_pool},
        {NULL, NULL},
    };
    static const luaL_Reg store[] = {
        {"create", l_create}, {"transition", l_transition}, {"get", l_get},
        {"list", l_list},     {"events", l_events},         {"free", l_free},
        {NULL, NULL},
    };
    lua_setfuncs_in(L, "db", db);
    lua_setfuncs_in(L, "store", store);
}
