/* How every binding reports a runtime failure: nil, msg, name (error_names.h). */
#include <lauxlib.h>

#include "error_names.h"

int oops_fail(lua_State *L, const char *msg, const char *name)
{
    lua_pushnil(L);
    lua_pushstring(L, msg);
    lua_pushstring(L, name);
    return 3;
}

void oops_set_error_names(lua_State *L)
{
    static const char *const names[] = {OOPS_E_ALL};
    int n = (int)(sizeof names / sizeof *names);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "error_names");
}
