/* lua_cov — Lua line coverage fed to libFuzzer, for harnesses that drive
 * Lua code: the system's liblua is not instrumented, so without this
 * libFuzzer would see none of the branches taken in lua/oops/ files.
 *
 * lua_cov_install(L, dir) hooks every line that runs in a Lua file under
 * `dir` and counts (previous line, this line) edges in libFuzzer's extra
 * counters. Code that sets hooks of its own (policy/sandbox.lua's instruction
 * limit through debug.sethook, the sandbox's C hook) keeps working: this
 * file interposes lua_sethook/lua_gethook* (the harness exports them, so
 * liblua's own calls land here too), installs one hook per thread that
 * records coverage and then calls the hook that was asked for, with the
 * events and count that were asked for. The one difference: a thread
 * created by a thread that has a hook inherits only the coverage hook, not
 * the other one (policy code cannot create coroutines). */
#ifndef OOPS_FUZZ_LUA_COV_H
#define OOPS_FUZZ_LUA_COV_H

#include <lua.h>

void lua_cov_install(lua_State *L, const char *lua_dir);

#endif
