/*
 * runtime — the one Lua 5.4 state of the process, its module path, and the
 * tasks (coroutines) that scans and callbacks run in.
 *
 * Calls that wait (child processes, HTTP, sleep) are made from a task and
 * yield it; the C side resumes the task from the loop when the result is
 * there. An error inside a task or a callback is caught, logged with a
 * traceback naming the Lua file and line, and never exits the process.
 *
 * Caller mistakes raise (luaL_error); runtime failures return nil, msg, code.
 */
#ifndef OOPS_RUNTIME_H
#define OOPS_RUNTIME_H

#include <lauxlib.h>
#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctx.h"

typedef struct runtime runtime;

/*
 * Policy code (files as they load, hooks as they run) runs in a sandbox
 * (oops.sandbox.run, src/runtime/oops_sandbox.c) with a memory cap, an instruction
 * budget and a wall-clock deadline. The state's allocator keeps the account;
 * the pattern functions of `string` check their cost while depth > 0.
 */
typedef struct runtime_sandbox {
    size_t mem_used;      /* bytes the state holds now */
    size_t mem_limit;     /* 0 = no cap; else the allocator refuses growth past it */
    bool mem_refused;     /* the allocator refused since the sandbox began */
    uint64_t deadline_ns; /* uv_hrtime() past which sandboxed code is stopped; 0 = none */
    int depth;            /* sandboxes now running */
} runtime_sandbox;

runtime_sandbox *runtime_sandbox_of(runtime *rt);

/* The Lua engine's directory for this process (paths_lua_dir, src/paths.h),
 * absolute: $OOPS_LUA_DIR, else PREFIX/share/oopsd/lua beside an installed
 * binary (PREFIX/bin/oopsd) when no one but its owner may write to it, else
 * the source tree's lua/ compiled in. 0, or -1 with a one-line message in err
 * (a relative $OOPS_LUA_DIR, an installed copy others may write to). */
int runtime_lua_dir(char *out, size_t outlen, char *err, size_t errlen);

/* A new state with the standard libraries, runtime_lua_dir() first on
 * package.path, no relative entry on package.path or package.cpath (nothing
 * is ever loaded from the current directory), and the `oops` module
 * preloaded. NULL with a one-line message in err on allocation failure or
 * when runtime_lua_dir refuses. */
runtime *runtime_new(oops_ctx *ctx, char *err, size_t errlen);
void runtime_free(runtime *rt);
lua_State *runtime_state(runtime *rt);
/* The context the runtime was created with; from any thread of the state. */
oops_ctx *runtime_ctx(lua_State *L);
runtime *runtime_of(lua_State *L);

/*
 * Call the function below nargs arguments on L's stack, protected, with a
 * traceback. 0 with nres results left; -1 after logging "WHAT failed: msg"
 * with the traceback (nothing left on the stack). The error text (without
 * traceback) is copied to err when err is non-NULL.
 */
int runtime_call(lua_State *L, int nargs, int nres, const char *what, char *err, size_t errlen);

/* Start the function below nargs arguments as a task named `what`. It runs
 * right away, or as soon as the task now running yields. */
void runtime_spawn(lua_State *L, int nargs, const char *what);
/* True when L is a task (not the main state, not a coroutine of its own). */
bool runtime_is_task(lua_State *L);
/* Raise a Lua error unless L is a task (a call that waits must run in one). */
void runtime_check_task(lua_State *L, const char *fname);
/* Resume a waiting task (tasks stay referenced for their whole life) with nargs values already
 * pushed on its stack. Safe from any loop callback; resumes requested while Lua runs are queued. */
void runtime_resume(lua_State *co, int nargs);
/* Live tasks (running or waiting). */
size_t runtime_task_count(const runtime *rt);
/* oops.sleep(ms): yields the task; true after ms, false when woken for shutdown. */
int runtime_l_sleep(lua_State *L);
/* oops.interrupt(thread): ends that task's oops.sleep now (it returns true, as if it had slept);
 * true when the task was sleeping, false otherwise (nothing happens). */
int runtime_l_interrupt(lua_State *L);
/* Wake every task blocked in oops.sleep (shutdown): its sleep returns false. */
void runtime_wake_sleepers(runtime *rt);

/* Register the `oops` module's parts: each lua_<concept>.c provides one. */
void oops_open_log(lua_State *L);
void oops_open_timer(lua_State *L);
void oops_open_db(lua_State *L);
void oops_open_store(lua_State *L);
void oops_open_locks(lua_State *L);
void oops_open_cron(lua_State *L);
void oops_open_proc(lua_State *L);
void oops_open_http(lua_State *L);
void oops_open_metrics(lua_State *L);
void oops_open_daemon(lua_State *L);
void oops_open_sandbox(lua_State *L);
void oops_open_fs(lua_State *L);
/* Wrap string.find/match/gmatch/gsub (also reached as string methods) with
 * the sandbox's cost check; outside a sandbox they are the originals. */
void sandbox_guard_patterns(lua_State *L);

/* Helpers for bindings. */
/* For the bindings (oops_errors.c): push nil, msg, name (error_names.h) and return 3. */
int oops_fail(lua_State *L, const char *msg, const char *name);
/* oops.error_names = { every name of error_names.h }, into the table at the top. */
void oops_set_error_names(lua_State *L);

void oops_setfuncs_in(lua_State *L, const char *field,
                      const luaL_Reg *fns); /* oops.<field> = { fns } */

#endif
