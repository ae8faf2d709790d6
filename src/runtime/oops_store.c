/*
 * oops.store: pipelines as the engine reads and changes them — create,
 * transition (batched in the daemon; with a deploy slot or an automatic
 * rollback), get, list, free, events — and the operator's actions
 * (oops.store.act: operator.c's stop, deploy, rollback for the page). Each
 * call runs through dbcall (dbcall.h).
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "db.h"
#include "dbcall.h"
#include "error_names.h"
#include "operator.h"
#include "pipeline_store.h"
#include "runtime.h"

static void set_str(lua_State *L, const char *k, const char *v)
{
    if (v) {
        lua_pushstring(L, v);
        lua_setfield(L, -2, k);
    }
}

static void push_pipeline(lua_State *L, const pipeline *p)
{
    lua_createtable(L, 0, 28);
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
    set_str(L, "promoted_from", p->promoted_from);
    lua_pushinteger(L, p->step);
    lua_setfield(L, -2, "step");
    if (p->step_at) {
        set_str(L, "step_at", p->step_at);
        lua_pushnumber(L, p->step_age_s);
        lua_setfield(L, -2, "step_age");
    }
    if (p->weight >= 0) {
        lua_pushinteger(L, p->weight);
        lua_setfield(L, -2, "weight");
    }
    if (p->weight_step >= 0) {
        lua_pushinteger(L, p->weight_step);
        lua_setfield(L, -2, "weight_step");
    }
    set_str(L, "paused", p->paused);
    set_str(L, "canary_request", p->canary_request);
    if (p->approvals > 0) { /* (absent when none: most pipelines' tables stay as small) */
        lua_pushinteger(L, p->approvals);
        lua_setfield(L, -2, "approvals");
    }
    set_str(L, "approved_by", p->approved_by);
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
    pipeline_status *statusv; /* free's: each id's status */
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
    free(s->statusv);
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

static void promote_run(db_call *b)
{
    store_call *s = (store_call *)b;
    const char *from = s->strs[0], *to = s->strs[1], *msg = s->strs[2], *actor = s->strs[3];
    store_ran(b, pipeline_store_promote(b->conn, from, to, msg, actor, NULL, s->id, s->err,
                                        sizeof s->err));
    if (s->rc == PSTORE_PROMOTED || s->rc == PSTORE_STALE || s->rc == PSTORE_EXISTS)
        b->rc = 0; /* answers, not failures */
}

static int promote_push(lua_State *L, db_call *b)
{
    store_call *s = (store_call *)b;
    if (s->rc == 0 || s->rc == PSTORE_PROMOTED) {
        lua_pushstring(L, s->id);
        lua_pushstring(L, s->rc == 0 ? "made" : "promoted");
        return 2;
    }
    if (s->rc == PSTORE_STALE || s->rc == PSTORE_EXISTS) {
        lua_pushboolean(L, 0);
        lua_pushstring(L, s->err);
        lua_pushstring(L, s->rc == PSTORE_STALE ? "stale" : OOPS_E_EXISTS);
        return 3;
    }
    return store_fail(L, s);
}

/* oops.store.promote{from=ID, to=ENV, message=TEXT} -> id, "made" | id,
 * "promoted" (made before, by anyone) | false, why, "stale" (not a release
 * to promote now) | false, why, "exists" (an unfinished pipeline in ENV) |
 * nil, err, name. pipeline_store_promote: once per release, whoever tries. */
static int l_promote(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *from = opt_field(L, 1, "from"), *to = opt_field(L, 1, "to"),
               *msg = opt_field(L, 1, "message");
    luaL_argcheck(L, from && to, 1, "from and to are required");
    store_call *s = store_new(promote_run);
    keep(s, from);
    keep(s, to);
    keep(s, msg ? msg : "Promoted.");
    keep(s, runtime_ctx(L)->server_name);
    return dbcall(L, &s->base, promote_push, store_free);
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
                                     &s->idv, &s->statusv, &s->nidv, s->err, sizeof s->err));
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
    lua_createtable(L, (int)s->nidv, 0);
    for (size_t i = 0; i < s->nidv; i++) {
        lua_pushstring(L, pipeline_status_name(s->statusv[i]));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 2;
}

/* oops.store.free{statuses = {...}, limit = n, deploy_requested = bool} -> ids of the oldest
 * pipelines in those statuses whose lock nobody holds, oldest first, at most n (1..65535),
 * and each one's status (a second array, in the same order);
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
    char action[16]; /* stop, deploy, rollback, abort, promote, approve, reject, promote_now */
    char *id, *actor, *reason, *via, *ns, *app, *env, *to;
    bool override, has_expect, full;
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
    else if (strcmp(a->action, "abort") == 0)
        op_canary(b->conn, a->id, "abort", &who, &a->r);
    else if (strcmp(a->action, "promote") == 0)
        op_canary(b->conn, a->id, a->full ? "promote_full" : "promote", &who, &a->r);
    else if (strcmp(a->action, "approve") == 0)
        op_approve(b->conn, a->id, &who, &a->r);
    else if (strcmp(a->action, "reject") == 0)
        op_reject(b->conn, a->id, &who, &a->r);
    else if (strcmp(a->action, "promote_now") == 0)
        op_promote_now(b->conn, a->id, a->to ? a->to : "", &who, &a->r);
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
 * oops.store.act(action, {id =, expect =, override =, full =, app = "ns/app",
 * env =, to =, actor =, reason =}) -> code, text: an operator's action
 * (operator.c: the rules and answers of oopsctl stop, deploy, rollback,
 * abort, promote [--full], approve, reject, promote-now: promote_now with
 * `to`), the event's
 * server this server's name. code "ok" with the answer's JSON text, else
 * "input", "notfound", "stale" or "db" with the one-line message. The caller
 * checked the fields (names, the reason's bounds); a nil connection
 * (nothing reachable) returns nil, msg, name as every call does.
 */
static int l_act(lua_State *L)
{
    const char *action = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    if (strcmp(action, "stop") && strcmp(action, "deploy") && strcmp(action, "rollback") &&
        strcmp(action, "abort") && strcmp(action, "promote") && strcmp(action, "approve") &&
        strcmp(action, "reject") && strcmp(action, "promote_now"))
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
    lua_getfield(L, 2, "full");
    a->full = lua_toboolean(L, -1);
    lua_pop(L, 1);
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

void oops_open_store(lua_State *L)
{
    static const luaL_Reg store[] = {
        {"create", l_create}, {"transition", l_transition}, {"get", l_get},
        {"list", l_list},     {"events", l_events},         {"free", l_free},
        {"act", l_act},       {"promote", l_promote},       {NULL, NULL},
    };
    oops_setfuncs_in(L, "store", store);
}
