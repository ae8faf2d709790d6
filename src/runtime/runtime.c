#include "runtime.h"
#include "dbcall.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "paths.h"

#ifndef OOPS_LUA_DIR
#define OOPS_LUA_DIR "lua"
#endif

typedef struct pending {
    lua_State *co;
    int nargs;
    struct pending *next;
} pending;

struct runtime {
    lua_State *L;
    runtime_sandbox sandbox; /* the memory account and the active sandbox's limits */
    oops_ctx *ctx;
    size_t tasks;
    int depth; /* lua_resume frames of ours now running */
    pending *queue, *queue_tail;
    struct sleeper *sleepers; /* tasks blocked in oops.sleep */
};

typedef struct sleeper {
    uv_timer_t timer;
    lua_State *co;
    runtime *rt;
    struct sleeper *prev, *next;
} sleeper;

/* Registry keys (addresses are unique). */
static const char K_RUNTIME = 0;
static const char K_TASKS = 0; /* table: thread -> what (string) */

runtime *runtime_of(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &K_RUNTIME);
    runtime *rt = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return rt;
}

oops_ctx *runtime_ctx(lua_State *L) { return runtime_of(L)->ctx; }
lua_State *runtime_state(runtime *rt) { return rt->L; }
size_t runtime_task_count(const runtime *rt) { return rt->tasks; }

void oops_setfuncs_in(lua_State *L, const char *field, const luaL_Reg *fns)
{
    /* expects the oops table at the top */
    lua_getfield(L, -1, field);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, field);
    }
    luaL_setfuncs(L, fns, 0);
    lua_pop(L, 1);
}

static int traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg)
        msg = luaL_tolstring(L, 1, NULL);
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* Split "msg\nstack traceback:..." into the message and the traceback, and log. */
static void log_failure(const char *what, const char *full, char *err, size_t errlen)
{
    const char *tb = strstr(full, "\nstack traceback:");
    size_t mlen = tb ? (size_t)(tb - full) : strlen(full);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s failed: %.*s", what, (int)mlen, full);
    if (err)
        snprintf(err, errlen, "%.*s", (int)mlen, full);
    const char *kv[] = {"traceback", tb ? tb + 1 : NULL, NULL};
    log_event(LOG_ERROR, msg, kv);
}

int runtime_call(lua_State *L, int nargs, int nres, const char *what, char *err, size_t errlen)
{
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, traceback);
    lua_insert(L, base);
    int rc = lua_pcall(L, nargs, nres, base);
    lua_remove(L, base);
    if (rc != LUA_OK) {
        log_failure(what, lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error object)", err,
                    errlen);
        lua_pop(L, 1);
        return -1;
    }
    return 0;
}

static void unpin(runtime *rt, lua_State *co)
{
    lua_State *L = rt->L;
    lua_rawgetp(L, LUA_REGISTRYINDEX, &K_TASKS);
    lua_pushthread(co);
    lua_xmove(co, L, 1);
    lua_pushnil(L);
    lua_rawset(L, -3);
    lua_pop(L, 1);
}

static const char *task_name(runtime *rt, lua_State *co, char *out, size_t n)
{
    lua_State *L = rt->L;
    lua_rawgetp(L, LUA_REGISTRYINDEX, &K_TASKS);
    lua_pushthread(co);
    lua_xmove(co, L, 1);
    lua_rawget(L, -2);
    snprintf(out, n, "%s", lua_isstring(L, -1) ? lua_tostring(L, -1) : "task");
    lua_pop(L, 2);
    return out;
}

/* One resume; handles the task's end (ok or error). */
static void resume_one(runtime *rt, lua_State *co, int nargs)
{
    int nres = 0;
    rt->depth++;
    int st = lua_resume(co, NULL, nargs, &nres);
    rt->depth--;
    if (st == LUA_YIELD) {
        /* Waiting for an async result that will resume it; a plain
         * coroutine.yield() from a task would wait forever, so say so. */
        lua_pop(co, nres);
        return;
    }
    char what[128];
    task_name(rt, co, what, sizeof what);
    if (st != LUA_OK) {
        const char *msg = lua_tostring(co, -1);
        luaL_traceback(rt->L, co, msg ? msg : "(error object)", 0);
        log_failure(what, lua_tostring(rt->L, -1), NULL, 0);
        lua_pop(rt->L, 1);
    } else {
        lua_pop(co, nres);
    }
    dbcall_task_ended(co); /* a transaction it left open is rolled back */
    unpin(rt, co);
    rt->tasks--;
}

static void drain(runtime *rt)
{
    while (rt->queue && rt->depth == 0) {
        pending *p = rt->queue;
        rt->queue = p->next;
        if (!rt->queue)
            rt->queue_tail = NULL;
        lua_State *co = p->co;
        int nargs = p->nargs;
        free(p);
        resume_one(rt, co, nargs);
    }
}

void runtime_resume(lua_State *co, int nargs)
{
    runtime *rt = runtime_of(co);
    pending *p = malloc(sizeof *p);
    if (!p)
        abort(); /* cannot lose a task silently */
    *p = (pending){co, nargs, NULL};
    if (rt->queue_tail)
        rt->queue_tail->next = p;
    else
        rt->queue = p;
    rt->queue_tail = p;
    drain(rt);
}

void runtime_spawn(lua_State *L, int nargs, const char *what)
{
    runtime *rt = runtime_of(L);
    luaL_checktype(L, -nargs - 1, LUA_TFUNCTION);
    lua_State *co = lua_newthread(L);
    /* K_TASKS[co] = what keeps it from being collected while it waits. */
    lua_rawgetp(L, LUA_REGISTRYINDEX, &K_TASKS);
    lua_pushvalue(L, -2);
    lua_pushstring(L, what ? what : "task");
    lua_rawset(L, -3);
    lua_pop(L, 1);
    lua_insert(L, -nargs - 2); /* thread below the function */
    lua_xmove(L, co, nargs + 1);
    lua_pop(L, 1); /* the thread */
    rt->tasks++;
    runtime_resume(co, nargs);
}

bool runtime_is_task(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &K_TASKS);
    lua_pushthread(L);
    lua_rawget(L, -2);
    bool task = !lua_isnil(L, -1);
    lua_pop(L, 2);
    return task;
}

void runtime_check_task(lua_State *L, const char *fname)
{
    if (!runtime_is_task(L))
        luaL_error(L, "%s waits, so it must be called from a task (oops.task or a scan)", fname);
}

static void sleeper_closed(uv_handle_t *h) { free(h->data); }

static void sleeper_done(sleeper *s, bool slept)
{
    runtime *rt = s->rt;
    if (s->prev)
        s->prev->next = s->next;
    else
        rt->sleepers = s->next;
    if (s->next)
        s->next->prev = s->prev;
    uv_timer_stop(&s->timer);
    uv_close((uv_handle_t *)&s->timer, sleeper_closed);
    lua_pushboolean(s->co, slept);
    runtime_resume(s->co, 1);
}

static void sleeper_fired(uv_timer_t *t) { sleeper_done(t->data, true); }

int runtime_l_sleep(lua_State *L)
{
    lua_Integer ms = luaL_checkinteger(L, 1);
    luaL_argcheck(L, ms >= 0, 1, "must be >= 0 milliseconds");
    runtime_check_task(L, "oops.sleep");
    runtime *rt = runtime_of(L);
    if (rt->ctx->stopping) { /* shutting down: do not wait */
        lua_pushboolean(L, 0);
        return 1;
    }
    sleeper *s = calloc(1, sizeof *s);
    if (!s)
        return luaL_error(L, "out of memory");
    s->co = L;
    s->rt = rt;
    uv_timer_init(rt->ctx->loop, &s->timer);
    s->timer.data = s;
    s->next = rt->sleepers;
    if (s->next)
        s->next->prev = s;
    rt->sleepers = s;
    uv_update_time(
        rt->ctx->loop); /* the loop's cached time is stale after Lua ran: sleep would end early */
    uv_timer_start(&s->timer, sleeper_fired, (uint64_t)ms, 0);
    return lua_yield(L, 0);
}

int runtime_l_interrupt(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTHREAD);
    lua_State *co = lua_tothread(L, 1);
    runtime *rt = runtime_of(L);
    sleeper *s = rt->sleepers;
    while (s && s->co != co) /* the sleeping tasks: a few per scan, its requests' waits */
        s = s->next;
    if (s)
        sleeper_done(s, true);
    lua_pushboolean(L, s != NULL);
    return 1;
}

void runtime_wake_sleepers(runtime *rt)
{
    while (rt->sleepers)
        sleeper_done(rt->sleepers, false);
}

static int luaopen_oops(lua_State *L)
{
    lua_newtable(L);
    oops_open_log(L);
    oops_open_timer(L);
    oops_open_db(L);
    oops_open_store(L);
    oops_open_locks(L);
    oops_open_cron(L);
    oops_open_proc(L);
    oops_open_http(L);
    oops_open_metrics(L);
    oops_open_daemon(L);
    oops_open_sandbox(L);
    oops_open_fs(L);
    return 1;
}

int runtime_lua_dir(char *out, size_t outlen, char *err, size_t errlen)
{
    char exe[4096], why[4096] = "";
    paths_self_exe(exe, sizeof exe);
    paths_lua_from from =
        paths_lua_dir(getenv("OOPS_LUA_DIR"), exe, OOPS_LUA_DIR, out, outlen, why, sizeof why);
    if (from == PATHS_LUA_REFUSED)
        snprintf(err, errlen, "%s", why);
    else if (from == PATHS_LUA_TOO_LONG)
        snprintf(err, errlen, "the Lua engine's directory is longer than %zu bytes", outlen - 1);
    return from < 0 ? -1 : 0;
}

/* package[field] ("path", "cpath") less every entry that is not absolute:
 * Lua's default "./?.lua" and "./?.so", and whatever LUA_PATH or LUA_CPATH
 * (read by luaL_openlibs) added, would find a module in whatever directory
 * the binary was started from. `front` (absolute entries) goes first. */
static void keep_absolute(lua_State *L, const char *field, const char *front)
{
    lua_getfield(L, -1, field);
    const char *s = lua_tostring(L, -1);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, front);
    while (s && *s) {
        const char *end = strchr(s, ';');
        size_t n = end ? (size_t)(end - s) : strlen(s);
        if (n && s[0] == '/') {
            if (luaL_bufflen(&b))
                luaL_addchar(&b, ';');
            luaL_addlstring(&b, s, n);
        }
        s += n + (end ? 1 : 0);
    }
    luaL_pushresult(&b);
    lua_setfield(L, -3, field);
    lua_pop(L, 1);
}

static int set_path(lua_State *L, char *err, size_t errlen)
{
    char dir[4096], front[8300];
    if (runtime_lua_dir(dir, sizeof dir, err, errlen) != 0)
        return -1;
    lua_getglobal(L, "package");
    snprintf(front, sizeof front, "%s/?.lua;%s/?/init.lua", dir, dir);
    keep_absolute(L, "path", front);
    keep_absolute(L, "cpath", "");
    lua_getfield(L, -1, "preload");
    lua_pushcfunction(L, luaopen_oops);
    lua_setfield(L, -2, "oops");
    lua_pop(L, 2);
    return 0;
}

/* The state's allocator: counts every byte, and while a sandbox runs with a
 * memory cap, refuses growth past it (Lua then collects garbage and, if
 * that is not enough, raises "not enough memory" in the sandboxed code). */
static void *rt_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    runtime_sandbox *sb = ud;
    size_t old = ptr ? osize : 0; /* without ptr, osize is a type tag */
    if (nsize == 0) {
        free(ptr);
        sb->mem_used -= old;
        return NULL;
    }
    if (sb->mem_limit && nsize > old && sb->mem_used - old + nsize > sb->mem_limit) {
        sb->mem_refused = true;
        return NULL;
    }
    void *p = realloc(ptr, nsize);
    if (p)
        sb->mem_used = sb->mem_used - old + nsize;
    return p;
}

static int at_panic(lua_State *L)
{
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "oopsd: unprotected error in Lua: %s\n", msg ? msg : "(error object)");
    return 0; /* Lua aborts */
}

runtime_sandbox *runtime_sandbox_of(runtime *rt) { return &rt->sandbox; }

runtime *runtime_new(oops_ctx *ctx, char *err, size_t errlen)
{
    runtime *rt = calloc(1, sizeof *rt);
    if (rt)
        rt->L = lua_newstate(rt_alloc, &rt->sandbox);
    if (!rt || !rt->L) {
        snprintf(err, errlen, "out of memory");
        free(rt);
        return NULL;
    }
    lua_atpanic(rt->L, at_panic);
    rt->ctx = ctx;
    ctx->rt = rt;
    lua_State *L = rt->L;
    /* A collection cycle starts when the heap reaches 1.5 times what the last
     * one left (Lua's default: 2): the 10,000-pipeline drive peaked at 25.3-27.1
     * MB RSS, over its 25 MB budget, and at 24.1-24.7 MB so, no slower
     * (bench/README.md, issue 36). Idle CPU 0.10 -> 0.13 % of a core. */
    lua_gc(L, LUA_GCINC, 150, 0, 0);
    luaL_openlibs(L);
    lua_pushlightuserdata(L, rt);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &K_RUNTIME);
    lua_newtable(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &K_TASKS);
    sandbox_guard_patterns(L);
    if (set_path(L, err, errlen) != 0) {
        lua_close(L);
        ctx->rt = NULL;
        free(rt);
        return NULL;
    }
    return rt;
}

void runtime_free(runtime *rt)
{
    if (!rt)
        return;
    while (rt->queue) {
        pending *p = rt->queue;
        rt->queue = p->next;
        free(p);
    }
    lua_close(rt->L);
    free(rt);
}
