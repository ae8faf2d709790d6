/* oops.log(level, msg [, fields]) and oops.log_level(level) */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "runtime.h"

/* Fields that read best first; the rest follow in name order. */
static const char *const first[] = {"scan", "pipeline", "app", "env", NULL};

static int rank(const char *k)
{
    for (int i = 0; first[i]; i++)
        if (strcmp(first[i], k) == 0)
            return i;
    return 100;
}

static int cmp_keys(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    int rx = rank(x), ry = rank(y);
    return rx != ry ? rx - ry : strcmp(x, y);
}

static int l_log(lua_State *L)
{
    int lvl = log_level_parse(luaL_checkstring(L, 1));
    luaL_argcheck(L, lvl >= 0, 1, "level must be debug, info, warn or error");
    const char *msg = luaL_checkstring(L, 2);
    enum { MAXF = 32 };
    const char *keys[MAXF];
    const char *kv[2 * MAXF + 1];
    int n = 0;
    if (lua_istable(L, 3)) {
        lua_pushnil(L);
        while (n < MAXF && lua_next(L, 3)) {
            if (lua_type(L, -2) == LUA_TSTRING)
                keys[n++] = lua_tostring(L, -2);
            lua_pop(L, 1);
        }
        qsort(keys, (size_t)n, sizeof *keys, cmp_keys);
    }
    luaL_checkstack(L, n + 2, "too many log fields");
    int top = lua_gettop(L);
    for (int i = 0; i < n; i++) {
        lua_getfield(L, 3, keys[i]);
        kv[2 * i] = keys[i];
        kv[2 * i + 1] = luaL_tolstring(L, -1, NULL); /* stays on the stack until we return */
        lua_remove(L, -2);
    }
    kv[2 * n] = NULL;
    log_event((log_level)lvl, msg, kv);
    lua_settop(L, top);
    return 0;
}

static int l_log_level(lua_State *L)
{
    int lvl = log_level_parse(luaL_checkstring(L, 1));
    luaL_argcheck(L, lvl >= 0, 1, "level must be debug, info, warn or error");
    log_set_min_level((log_level)lvl);
    return 0;
}

void oops_open_log(lua_State *L)
{
    static const luaL_Reg fns[] = {{"log", l_log}, {"log_level", l_log_level}, {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
