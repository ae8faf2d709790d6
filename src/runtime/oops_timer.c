/* oops.task, oops.sleep, oops.now_ms, oops.time, oops.wait, oops.run_once */
#include <lauxlib.h>
#include <sys/time.h>
#include <uv.h>

#include "runtime.h"

/* oops.task(name, fn, ...): run fn(...) as a task. */
static int l_task(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    int nargs = lua_gettop(L) - 2;
    char what[128];
    snprintf(what, sizeof what, "%s", name);
    lua_remove(L, 1);
    runtime_spawn(L, nargs, what);
    return 0;
}

static int l_now_ms(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)(uv_hrtime() / 1000000));
    return 1;
}

static int l_time(lua_State *L)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    lua_pushnumber(L, (lua_Number)tv.tv_sec + tv.tv_usec / 1e6);
    return 1;
}

/* Registry table: thread -> true while suspended by oops.suspend. */
static const char K_SUSPENDED = 0;

/* oops.suspend(): yield this task until oops.wake(thread, ...) hands it values. */
static int l_suspend(lua_State *L)
{
    runtime_check_task(L, "oops.suspend");
    lua_rawgetp(L, LUA_REGISTRYINDEX, &K_SUSPENDED);
    lua_pushthread(L);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    return lua_yield(L, 0);
}

/* oops.wake(thread, ...) -> true when the thread was suspended (it resumes
 * with the values as soon as the running task yields), false otherwise. */
static int l_wake(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTHREAD);
    lua_State *co = lua_tothread(L, 1);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &K_SUSPENDED);
    lua_pushvalue(L, 1);
    lua_rawget(L, -2);
    bool suspended = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (!suspended) {
        lua_pop(L, 1);
        lua_pushboolean(L, 0);
        return 1;
    }
    lua_pushvalue(L, 1);
    lua_pushnil(L);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    int n = lua_gettop(L) - 1;
    lua_xmove(L, co, n);
    runtime_resume(co, n);
    lua_pushboolean(L, 1);
    return 1;
}

/* oops.current() -> the running task's thread, or nil outside a task. */
static int l_current(lua_State *L)
{
    if (lua_pushthread(L)) { /* the main thread is never a task */
        lua_pop(L, 1);
        lua_pushnil(L);
    }
    return 1;
}

/* oops.run_once(): one turn of the loop (scripts only). true while anything is pending. */
static int l_run_once(lua_State *L)
{
    oops_ctx *c = runtime_ctx(L);
    lua_pushboolean(L, uv_run(c->loop, UV_RUN_ONCE) != 0);
    return 1;
}

/* oops.wait(fn, ...) for scripts and specs: run fn as a task, turn the loop
 * until it ends, return its results or raise its error. */
static const char wait_src[] =
    "local oops = ...\n"
    "return function(fn, ...)\n"
    "  local box = {}\n"
    "  oops.task('wait', function(...)\n"
    "    box.r = table.pack(xpcall(fn, debug.traceback, ...)); box.done = true\n"
    "  end, ...)\n"
    "  while not box.done do\n"
    "    if not oops.run_once() and not box.done then\n"
    "      error('oops.wait: the task is waiting for something that will never come', 2)\n"
    "    end\n"
    "  end\n"
    "  if box.r[1] then return table.unpack(box.r, 2, box.r.n) end\n"
    "  error(box.r[2], 0)\n"
    "end\n";

void oops_open_timer(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"task", l_task}, {"sleep", runtime_l_sleep}, {"now_ms", l_now_ms},
        {"time", l_time}, {"run_once", l_run_once},   {"suspend", l_suspend},
        {"wake", l_wake}, {"current", l_current},     {"interrupt", runtime_l_interrupt},
        {NULL, NULL},
    };
    luaL_setfuncs(L, fns, 0);
    lua_newtable(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &K_SUSPENDED);
    if (luaL_loadbuffer(L, wait_src, sizeof wait_src - 1, "=oops.wait") == LUA_OK) {
        lua_pushvalue(L, -2);
        lua_call(L, 1, 1);
        lua_setfield(L, -2, "wait");
    } else {
        lua_pop(L, 1);
    }
}
