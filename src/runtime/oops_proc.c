/*
 * oops.proc: child processes as argv (never through a shell), on the loop.
 *   run{argv=, env=, inherit_env=, clear_env=, cwd=, stdin=, timeout_ms=, max_output=}
 *       waits (in a task) and returns the result;
 *   start{..., on_exit=fn(result), on_output=fn(stream, data)}
 *       returns a handle at once;
 *   result = {ok=, status=, signal=, timed_out=, stdout=, stderr=}
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "error_names.h"
#include "proc.h"
#include "runtime.h"

extern char **environ;

#define PROC_MT "oops.proc"

typedef struct lproc {
    proc *p; /* NULL once exited */
    int pid;
    lua_State *co;          /* run(): the task waiting */
    lua_State *L;           /* start(): the main state, for callbacks */
    int on_exit, on_output; /* registry refs, LUA_NOREF when absent */
    bool has_handle;        /* a Lua handle points here: it frees us */
    bool exited;
} lproc;

typedef struct spawn_args {
    const char **argv;
    const char **env;
    char **env_owned;
    size_t nenv;
} spawn_args;

static void spawn_args_free(spawn_args *a)
{
    free(a->argv);
    for (size_t i = 0; i < a->nenv; i++)
        free(a->env_owned[i]);
    free(a->env_owned);
    free(a->env);
}

/* The argv table of options t (checked by check_opts: a list of strings). */
static void read_argv(lua_State *L, int t, spawn_args *a)
{
    lua_getfield(L, t, "argv");
    lua_Integer n = luaL_len(L, -1);
    a->argv = calloc((size_t)n + 1, sizeof *a->argv);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        a->argv[i - 1] = lua_tostring(L, -1); /* anchored by the argv table */
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/*
 * The environment a child gets:
 *   default           the allow-list below, taken from oopsd's own environment
 *   inherit_env=true  all of oopsd's environment (tools: scenario servers, specs)
 *   clear_env=true    nothing
 * then env = {K = V} on top. Whatever the route, nothing named OOPS_DB* is
 * ever inherited; in the daemon (ctx->daemon) an env table naming one is a
 * mistake that raises. The database password lives in the daemon only.
 */
static const char *const ENV_ALLOW[] = {"PATH",     "HOME", "USER",   "LOGNAME", "LANG",
                                        "LANGUAGE", "TZ",   "TMPDIR", NULL};

static bool is_db_secret_name(const char *name, size_t n)
{
    return n >= 7 && strncasecmp(name, "OOPS_DB", 7) == 0;
}

static bool env_allowed(const char *entry, size_t kl)
{
    if (kl > 3 && strncmp(entry, "LC_", 3) == 0)
        return true;
    for (int i = 0; ENV_ALLOW[i]; i++)
        if (strlen(ENV_ALLOW[i]) == kl && strncmp(entry, ENV_ALLOW[i], kl) == 0)
            return true;
    return false;
}

static void read_env(lua_State *L, int t, spawn_args *a)
{
    lua_getfield(L, t, "clear_env");
    bool clear = lua_toboolean(L, -1);
    lua_getfield(L, t, "inherit_env");
    bool inherit_all = lua_toboolean(L, -1);
    lua_pop(L, 2);
    lua_getfield(L, t, "env");
    size_t cap = 16, n = 0;
    char **v = malloc(cap * sizeof *v);
    if (lua_istable(L, -1)) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            if (n + 1 >= cap)
                v = realloc(v, (cap *= 2) * sizeof *v);
            const char *k = lua_tostring(L, -2), *val = lua_tostring(L, -1);
            size_t len = strlen(k) + strlen(val) + 2;
            v[n] = malloc(len);
            snprintf(v[n++], len, "%s=%s", k, val);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    if (!clear) {
        for (char **e = environ; *e; e++) {
            const char *eq = strchr(*e, '=');
            size_t kl = eq ? (size_t)(eq - *e) : strlen(*e);
            if (is_db_secret_name(*e, kl) || (!inherit_all && !env_allowed(*e, kl)))
                continue;
            bool overridden = false;
            for (size_t i = 0; i < n && !overridden; i++)
                overridden = strncmp(v[i], *e, kl) == 0 && v[i][kl] == '=';
            if (overridden)
                continue;
            if (n + 1 >= cap)
                v = realloc(v, (cap *= 2) * sizeof *v);
            v[n++] = strdup(*e);
        }
    }
    a->env_owned = v;
    a->nenv = n;
    a->env = calloc(n + 1, sizeof *a->env);
    for (size_t i = 0; i < n; i++)
        a->env[i] = v[i];
}

static void push_result(lua_State *L, const proc_result *r)
{
    lua_createtable(L, 0, 6);
    lua_pushboolean(L, r->exit_status == 0 && r->term_signal == 0 && !r->timed_out);
    lua_setfield(L, -2, "ok");
    lua_pushinteger(L, r->exit_status);
    lua_setfield(L, -2, "status");
    lua_pushinteger(L, r->term_signal);
    lua_setfield(L, -2, "signal");
    lua_pushboolean(L, r->timed_out);
    lua_setfield(L, -2, "timed_out");
    lua_pushlstring(L, r->out ? r->out : "", r->out_len);
    lua_setfield(L, -2, "stdout");
    lua_pushlstring(L, r->err ? r->err : "", r->err_len);
    lua_setfield(L, -2, "stderr");
}

static void release(lproc *lp)
{
    if (lp->L) {
        luaL_unref(lp->L, LUA_REGISTRYINDEX, lp->on_exit);
        luaL_unref(lp->L, LUA_REGISTRYINDEX, lp->on_output);
        lp->on_exit = lp->on_output = LUA_NOREF;
    }
}

static void on_exit_cb(void *ud, const proc_result *r)
{
    lproc *lp = ud;
    lp->p = NULL;
    lp->exited = true;
    if (lp->co) { /* run(): hand the result to the waiting task */
        lua_State *co = lp->co;
        push_result(co, r);
        free(lp);
        runtime_resume(co, 1);
        return;
    }
    /* start(): the callback runs as a task of its own. It may drop the last
     * reference to the handle, whose __gc then frees lp: so lp is finished
     * with (refs released, freed if no handle) before the task runs. */
    lua_State *L = lp->L;
    bool callback = lp->on_exit != LUA_NOREF;
    if (callback) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, lp->on_exit);
        push_result(L, r);
    }
    release(lp);
    if (!lp->has_handle)
        free(lp);
    if (callback)
        runtime_spawn(L, 1, "process exit callback");
}

static void on_output_cb(void *ud, int stream, const char *data, size_t len)
{
    lproc *lp = ud;
    if (!lp->L || lp->on_output == LUA_NOREF)
        return;
    lua_rawgeti(lp->L, LUA_REGISTRYINDEX, lp->on_output);
    lua_pushinteger(lp->L, stream);
    lua_pushlstring(lp->L, data, len);
    runtime_call(lp->L, 2, 0, "process output callback", NULL, 0);
}

/* Every caller mistake in the options, raised before anything is allocated
 * (a raise after would leak it). */
static void check_opts(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "argv");
    if (!lua_istable(L, -1))
        luaL_error(
            L, "argv must be a list of strings like {\"make\", \"image\"} (never a shell string)");
    lua_Integer n = luaL_len(L, -1);
    if (n < 1)
        luaL_error(L, "argv is empty");
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_rawgeti(L, -1, i) != LUA_TSTRING)
            luaL_error(L, "argv[%d] is a %s, not a string", (int)i, luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_getfield(L, 1, "env");
    if (!lua_isnil(L, -1) && !lua_istable(L, -1))
        luaL_error(L, "env must map names to strings");
    if (lua_istable(L, -1)) {
        bool daemon = runtime_ctx(L)->daemon;
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
                luaL_error(L, "env must map names to strings");
            size_t kl, vl;
            const char *k = lua_tolstring(L, -2, &kl);
            lua_tolstring(L, -1, &vl);
            if (kl == 0 || memchr(k, '=', kl) || strlen(k) != kl)
                luaL_error(L, "env: a variable name must be non-empty, without '=' or NUL");
            if (strlen(lua_tostring(L, -1)) != vl)
                luaL_error(L, "env: the value of %s holds a NUL byte", k);
            if (daemon && is_db_secret_name(k, kl))
                luaL_error(L, "env: %s: the database settings never reach a command", k);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    static const char *const bools[] = {"clear_env", "inherit_env", NULL};
    for (int i = 0; bools[i]; i++) {
        lua_getfield(L, 1, bools[i]);
        if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
            luaL_error(L, "%s must be true or false", bools[i]);
        lua_pop(L, 1);
    }
    static const char *const strs[] = {"cwd", "stdin", NULL}, *const ints[] = {"timeout_ms",
                                                                               "max_output", NULL};
    for (int i = 0; strs[i]; i++) {
        lua_getfield(L, 1, strs[i]);
        if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "%s must be a string", strs[i]);
        lua_pop(L, 1);
    }
    for (int i = 0; ints[i]; i++) {
        lua_getfield(L, 1, ints[i]);
        if (!lua_isnil(L, -1) && (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0))
            luaL_error(L, "%s must be a whole number >= 0", ints[i]);
        lua_pop(L, 1);
    }
}

static proc *spawn(lua_State *L, lproc *lp, char *err, size_t errlen)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    spawn_args a = {0};
    read_argv(L, 1, &a);
    read_env(L, 1, &a);
    proc_options o = {.argv = a.argv, .env = a.env, .on_exit = on_exit_cb, .ud = lp};
    lua_getfield(L, 1, "cwd");
    o.cwd = luaL_optstring(L, -1, NULL);
    lua_getfield(L, 1, "stdin");
    size_t len = 0;
    o.stdin_data = luaL_optlstring(L, -1, NULL, &len);
    o.stdin_len = len;
    lua_getfield(L, 1, "timeout_ms");
    o.timeout_ms = (uint64_t)luaL_optinteger(L, -1, 0);
    lua_getfield(L, 1, "max_output");
    o.max_output = (size_t)luaL_optinteger(L, -1, 0);
    if (lp->on_output != LUA_NOREF)
        o.on_output = on_output_cb;
    proc *p = NULL;
    if (runtime_ctx(L)->closing) /* a task resumed during teardown: it would outlive us */
        snprintf(err, errlen, "%s: not started: oopsd is stopping", a.argv[0]);
    else
        p = proc_spawn(runtime_ctx(L)->loop, &o, err, errlen);
    lua_pop(L, 4);
    spawn_args_free(&a);
    return p;
}

static int l_run(lua_State *L)
{
    runtime_check_task(L, "oops.proc.run");
    check_opts(L);
    lproc *lp = calloc(1, sizeof *lp);
    lp->on_exit = lp->on_output = LUA_NOREF;
    lp->co = L;
    char err[512];
    proc *p = spawn(L, lp, err, sizeof err);
    if (!p) {
        free(lp);
        return oops_fail(L, err, OOPS_E_IO);
    }
    lp->p = p;
    return lua_yield(L, 0);
}

static int l_start(lua_State *L)
{
    check_opts(L);
    lproc **ud = lua_newuserdatauv(L, sizeof *ud, 0);
    *ud = NULL;
    lproc *lp = calloc(1, sizeof *lp);
    lp->L = runtime_state(runtime_of(L));
    lp->on_exit = lp->on_output = LUA_NOREF;
    lua_getfield(L, 1, "on_exit");
    lp->on_exit =
        lua_isfunction(L, -1) ? luaL_ref(L, LUA_REGISTRYINDEX) : (lua_pop(L, 1), LUA_NOREF);
    lua_getfield(L, 1, "on_output");
    lp->on_output =
        lua_isfunction(L, -1) ? luaL_ref(L, LUA_REGISTRYINDEX) : (lua_pop(L, 1), LUA_NOREF);
    char err[512];
    proc *p = spawn(L, lp, err, sizeof err);
    if (!p) {
        release(lp);
        free(lp);
        return oops_fail(L, err, OOPS_E_IO);
    }
    lp->p = p;
    lp->pid = proc_pid(p);
    lp->has_handle = true;
    *ud = lp;
    luaL_setmetatable(L, PROC_MT);
    return 1;
}

static lproc *check(lua_State *L)
{
    lproc **ud = luaL_checkudata(L, 1, PROC_MT);
    return *ud;
}

static int m_kill(lua_State *L)
{
    lproc *lp = check(L);
    int sig = (int)luaL_optinteger(L, 2, 15);
    if (lp && lp->p)
        proc_kill(lp->p, sig);
    return 0;
}

static int m_pid(lua_State *L)
{
    lproc *lp = check(L);
    lua_pushinteger(L, lp ? lp->pid : 0);
    return 1;
}

static int m_running(lua_State *L)
{
    lproc *lp = check(L);
    lua_pushboolean(L, lp && !lp->exited);
    return 1;
}

static int m_gc(lua_State *L)
{
    lproc **ud = luaL_checkudata(L, 1, PROC_MT);
    lproc *lp = *ud;
    *ud = NULL;
    if (!lp)
        return 0;
    if (lp->exited)
        free(lp);
    else
        lp->has_handle = false; /* the exit callback frees it */
    return 0;
}

void oops_open_proc(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"kill", m_kill},
        {"pid", m_pid},
        {"running", m_running},
        {NULL, NULL},
    };
    if (luaL_newmetatable(L, PROC_MT)) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, m_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"run", l_run}, {"start", l_start}, {NULL, NULL}};
    oops_setfuncs_in(L, "proc", fns);
}
