/* oops.fs: the files of the project's own tools (scenarios, campaigns, the demo),
 * private to the user who runs them. Lua's io and lfs create with the process's
 * umask (0755 directories, 0644 files), which other local users may read. */
#include <errno.h>
#include <lauxlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime.h"
#include "web.h"

/* oops.fs.mkdir_private(path): a new directory, 0700 whatever the umask. true, or
 * nil, "PATH: why" (it exists already, no such parent, ...). */
static int l_mkdir_private(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    if (mkdir(path, 0700) != 0 || chmod(path, 0700) != 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", path, strerror(errno));
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* oops.fs.read_token(path): the bearer token a file holds (a canary analysis'
 * `token`), read as --http-token-file is (web_token_read: a regular file its
 * owner alone may read, bounded, one trailing newline stripped). The token,
 * or nil and a one-line message naming the file, never its content. */
static int l_read_token(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    char *token = NULL;
    char err[512];
    if (web_token_read(path, &token, err, sizeof err) != 0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushstring(L, token);
    web_token_free(token);
    return 1;
}

void oops_open_fs(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"mkdir_private", l_mkdir_private},
        {"read_token", l_read_token},
        {NULL, NULL},
    };
    oops_setfuncs_in(L, "fs", fns);
}
