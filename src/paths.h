/*
 * paths — where a binary finds what is shipped beside it. No Lua here (the
 * core): the runtime and oopsctl ask runtime_lua_dir(), which calls this.
 */
#ifndef OOPS_PATHS_H
#define OOPS_PATHS_H

#include <stddef.h>

/* Below an install prefix: PREFIX/bin/oopsd finds PREFIX/share/oopsd/lua. */
#define PATHS_LUA_SUBDIR "share/oopsd/lua"

typedef enum {
    PATHS_LUA_TOO_LONG = -1, /* out was too small; out is "" */
    PATHS_LUA_ENV = 0,       /* $OOPS_LUA_DIR, as given */
    PATHS_LUA_INSTALLED,     /* beside the binary: an installed copy */
    PATHS_LUA_BUILTIN,       /* the directory compiled in: the source tree */
} paths_lua_from;

/*
 * The Lua engine's directory (the one holding oops/engine.lua), the first of:
 *   env, when non-NULL and non-empty (the value of $OOPS_LUA_DIR), as given;
 *   PREFIX/share/oopsd/lua when exe is PREFIX/BINDIR/NAME (exe's directory's
 *     parent is PREFIX) and that directory holds a readable oops/engine.lua;
 *   builtin (the source tree's lua/ compiled in; build-tree runs).
 * exe may be NULL or "" (no installed copy is looked for). Writes the path
 * into out and says which one it is.
 */
paths_lua_from paths_lua_dir(const char *env, const char *exe, const char *builtin, char *out,
                             size_t outlen);

/* This process's binary (/proc/self/exe: absolute, symlinks resolved) into
 * out. 0, or -1 with out "" when it cannot be read or does not fit. */
int paths_self_exe(char *out, size_t outlen);

#endif
