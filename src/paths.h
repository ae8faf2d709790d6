/*
 * paths — where a binary finds what is shipped beside it. No Lua here (the
 * core): the runtime and oopsctl ask runtime_lua_dir(), which calls this.
 */
#ifndef OOPS_PATHS_H
#define OOPS_PATHS_H

#include <stddef.h>
#include <sys/types.h>

/* Below an install prefix: PREFIX/bin/oopsd finds PREFIX/share/oopsd/lua. */
#define PATHS_LUA_SUBDIR "share/oopsd/lua"

typedef enum {
    PATHS_LUA_REFUSED = -2,  /* why says what is wrong; out is "" */
    PATHS_LUA_TOO_LONG = -1, /* out was too small; out is "" */
    PATHS_LUA_ENV = 0,       /* $OOPS_LUA_DIR, as given */
    PATHS_LUA_INSTALLED,     /* beside the binary: an installed copy */
    PATHS_LUA_BUILTIN,       /* the directory compiled in: the source tree */
} paths_lua_from;

/*
 * The Lua engine's directory (the one holding oops/engine.lua), always an
 * absolute path (Lua would search a relative one from the current directory,
 * wherever the binary is started), the first of:
 *   env, when non-NULL and non-empty (the value of $OOPS_LUA_DIR), as given;
 *     refused when it is not absolute or holds ';' or '?' (package.path's
 *     separators);
 *   PREFIX/share/oopsd/lua when exe is an absolute PREFIX/BINDIR/NAME (exe's
 *     directory's parent is PREFIX) and that directory holds a readable
 *     oops/engine.lua; refused (not passed over) when paths_lua_tree_safe
 *     finds an entry others may write to;
 *   builtin (the source tree's lua/ compiled in; build-tree runs), refused
 *     when NULL or not absolute.
 * exe may be NULL or "" (no installed copy is looked for). Writes the path
 * into out and says which one it is; a refusal's one-line reason, naming the
 * directory, goes to why (may be NULL).
 */
paths_lua_from paths_lua_dir(const char *env, const char *exe, const char *builtin, char *out,
                             size_t outlen, char *why, size_t whylen);

/*
 * Whether an installed Lua engine may be loaded: PREFIX and every directory
 * from it down to luadir (luadir below prefix), and every directory and file
 * under luadir (oops/, oops/scans/, ...; symbolic links followed, at most 16
 * levels deep), are writable by no one but their owner (no group or other
 * write bit), and owned by root or by owner_uid (the binary's owner; when that
 * is root, by root alone). 0, or -1 with a one-line reason in why naming the
 * first entry that fails and why.
 */
int paths_lua_tree_safe(const char *prefix, const char *luadir, uid_t owner_uid, char *why,
                        size_t whylen);

/* This process's binary (/proc/self/exe: absolute, symlinks resolved) into
 * out. 0, or -1 with out "" when it cannot be read or does not fit. */
int paths_self_exe(char *out, size_t outlen);

#endif
