#include "paths.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static paths_lua_from put(char *out, size_t outlen, const char *dir, paths_lua_from from)
{
    int n = snprintf(out, outlen, "%s", dir);
    if (n < 0 || (size_t)n >= outlen) {
        if (outlen)
            out[0] = '\0';
        return PATHS_LUA_TOO_LONG;
    }
    return from;
}

/* PREFIX of exe = PREFIX/BINDIR/NAME into out ("" for /bin/NAME, "." for
 * bin/NAME, ".." for NAME); false when it does not fit. */
static bool prefix_of(const char *exe, char *out, size_t outlen)
{
    const char *slash = strrchr(exe, '/');
    if (!slash) /* NAME: the binary's directory is ".", its parent ".." */
        return snprintf(out, outlen, "..") < (int)outlen;
    size_t dirlen = (size_t)(slash - exe);
    const char *up = NULL;
    for (size_t i = dirlen; i-- > 0;)
        if (exe[i] == '/') {
            up = exe + i;
            break;
        }
    if (!up) /* DIR/NAME: the prefix is the current directory */
        return snprintf(out, outlen, "%s", dirlen ? "." : "") < (int)outlen;
    int n = snprintf(out, outlen, "%.*s", (int)(up - exe), exe);
    return n >= 0 && (size_t)n < outlen;
}

paths_lua_from paths_lua_dir(const char *env, const char *exe, const char *builtin, char *out,
                             size_t outlen)
{
    if (env && *env)
        return put(out, outlen, env, PATHS_LUA_ENV);
    if (exe && *exe) {
        char prefix[4096], dir[4200], probe[4300];
        if (prefix_of(exe, prefix, sizeof prefix)) {
            snprintf(dir, sizeof dir, "%s/%s", prefix, PATHS_LUA_SUBDIR);
            snprintf(probe, sizeof probe, "%s/oops/engine.lua", dir);
            if (access(probe, R_OK) == 0)
                return put(out, outlen, dir, PATHS_LUA_INSTALLED);
        }
    }
    return put(out, outlen, builtin ? builtin : "lua", PATHS_LUA_BUILTIN);
}

int paths_self_exe(char *out, size_t outlen)
{
    if (!outlen)
        return -1;
    ssize_t n = readlink("/proc/self/exe", out, outlen - 1);
    if (n <= 0 || (size_t)n >= outlen - 1) {
        out[0] = '\0';
        return -1;
    }
    out[n] = '\0';
    return 0;
}
