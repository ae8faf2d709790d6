/* fuzz_lua_values — the policy's value parsers: lua/oops/duration.lua and
 * lua/oops/quantity.lua, in one plain Lua state per process (package.path
 * on the repository's lua/, Lua line coverage fed to libFuzzer).
 *
 * The input is one Lua string (NUL bytes included) given to
 * duration.parse, quantity.cpu and quantity.memory; when tonumber() reads
 * it as a number, that number is given too. Asserted:
 *  - none of them raises: each returns a value, or nil and a message;
 *  - a message starts with the value as written (duration.show(v) .. ":");
 *  - a duration is a whole number of ms, 0 .. 366 days * 100, and
 *    duration.format of it parses back to the same ms;
 *  - a CPU quantity is whole millicores >= 0, a memory quantity whole bytes
 *    >= 0 below 2^54 (no overflow wrapped around).
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "fuzz_common.h"
#include "lua_cov.h"

static lua_State *L;
static int check_ref;

static const char DRIVER[] =
    "local duration, quantity = require('oops.duration'), require('oops.quantity')\n"
    "local show = duration.show\n"
    "local MAX_MS = 366 * 86400000 * 100\n"
    "local function call(name, f, v)\n"
    "  local ok, r, err, extra = pcall(f, v)\n"
    "  if not ok then error(name .. ' raised: ' .. tostring(r), 0) end\n"
    "  if extra ~= nil then error(name .. ' returned a third value', 0) end\n"
    "  if r == nil then\n"
    "    local head = show(v) .. ':'\n"
    "    if type(err) ~= 'string' or err:sub(1, #head) ~= head then\n"
    "      error(name .. ': message does not start with the value: ' .. show(err), 0)\n"
    "    end\n"
    "  elseif err ~= nil then\n"
    "    error(name .. ' returned a value and a message', 0)\n"
    "  elseif math.type(r) ~= 'integer' or r < 0 then\n"
    "    error(name .. ' returned ' .. show(r), 0)\n"
    "  end\n"
    "  return r\n"
    "end\n"
    "local function one(v)\n"
    "  local ms = call('duration.parse', duration.parse, v)\n"
    "  if ms then\n"
    "    if ms > MAX_MS then error('duration.parse: ' .. ms .. ' above the maximum', 0) end\n"
    "    local ok, text = pcall(duration.format, ms)\n"
    "    if not ok then error('duration.format(' .. ms .. ') raised: ' .. tostring(text), 0) end\n"
    "    local back = call('duration.parse', duration.parse, text)\n"
    "    if back ~= ms then error('duration.format(' .. ms .. ') = ' .. show(text) .. ' parses as "
    "' .. tostring(back), 0) end\n"
    "  end\n"
    "  call('quantity.cpu', quantity.cpu, v)\n"
    "  local bytes = call('quantity.memory', quantity.memory, v)\n"
    "  if bytes and bytes >= 1 << 54 then error('quantity.memory: ' .. bytes .. ' bytes', 0) end\n"
    "end\n"
    "return function(s)\n"
    "  one(s)\n"
    "  local n = tonumber(s)\n"
    "  if n then one(n) end\n"
    "end\n";

static void init(void)
{
    L = luaL_newstate();
    if (!L)
        abort();
    luaL_openlibs(L);
    lua_getglobal(L, "package");
    lua_pushstring(L, OOPS_LUA_DIR "/?.lua;" OOPS_LUA_DIR "/?/init.lua");
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
    lua_cov_install(L, OOPS_LUA_DIR);
    if (luaL_loadstring(L, DRIVER) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK) {
        fprintf(stderr, "fuzz_lua_values: driver: %s\n", lua_tostring(L, -1));
        abort();
    }
    check_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!L)
        init();
    lua_rawgeti(L, LUA_REGISTRYINDEX, check_ref);
    lua_pushlstring(L, (const char *)data, size);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        fuzz_fail(data, size, "%s", msg ? msg : "(error object)");
    }
    return 0;
}
