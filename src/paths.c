#include "paths.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TREE_MAX_DEPTH 16

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

__attribute__((format(printf, 5, 6))) static paths_lua_from
refuse(char *out, size_t outlen, char *why, size_t whylen, const char *fmt, ...);

static paths_lua_from refuse(char *out, size_t outlen, char *why, size_t whylen, const char *fmt,
                             ...)
{
    if (outlen)
        out[0] = '\0';
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return PATHS_LUA_REFUSED;
}

/* PREFIX of an absolute exe = PREFIX/BINDIR/NAME into out ("" for /bin/NAME
 * and /NAME); false when exe is not absolute or it does not fit. */
static bool prefix_of(const char *exe, char *out, size_t outlen)
{
    if (exe[0] != '/')
        return false; /* a relative prefix would be searched from the cwd */
    const char *slash = strrchr(exe, '/');
    size_t dirlen = (size_t)(slash - exe);
    size_t up = 0;
    for (size_t i = dirlen; i-- > 0;)
        if (exe[i] == '/') {
            up = i;
            break;
        }
    int n = snprintf(out, outlen, "%.*s", (int)up, exe);
    return n >= 0 && (size_t)n < outlen;
}

/* Why st (of path) lets someone but its owner, root or owner_uid change it; NULL if nothing. */
static const char *unsafe(const struct stat *st, uid_t owner_uid, char *buf, size_t n)
{
    unsigned mode = (unsigned)st->st_mode & 07777;
    if (st->st_mode & S_IWOTH) {
        snprintf(buf, n, "is writable by every user (mode %04o)", mode);
    } else if (st->st_mode & S_IWGRP) {
        struct group *g = getgrgid(st->st_gid);
        if (g)
            snprintf(buf, n, "is writable by group %.64s (mode %04o)", g->gr_name, mode);
        else
            snprintf(buf, n, "is writable by group %u (mode %04o)", (unsigned)st->st_gid, mode);
    } else if (st->st_uid != 0 && st->st_uid != owner_uid) {
        if (owner_uid == 0)
            snprintf(buf, n, "is owned by uid %u, not root (the binary is root's)",
                     (unsigned)st->st_uid);
        else
            snprintf(buf, n, "is owned by uid %u, neither root nor the binary's owner (uid %u)",
                     (unsigned)st->st_uid, (unsigned)owner_uid);
    } else {
        return NULL;
    }
    return buf;
}

static int check_one(const char *path, uid_t owner_uid, char *why, size_t whylen)
{
    struct stat st;
    char what[200];
    if (stat(path, &st) != 0) {
        snprintf(why, whylen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!unsafe(&st, owner_uid, what, sizeof what))
        return 0;
    snprintf(why, whylen, "%s %s", path, what);
    return -1;
}

/* path (a directory, already checked) and everything under it. */
static int check_tree(const char *path, uid_t owner_uid, int depth, char *why, size_t whylen)
{
    if (depth > TREE_MAX_DEPTH) {
        snprintf(why, whylen, "%s: more than %d directories deep", path, TREE_MAX_DEPTH);
        return -1;
    }
    DIR *d = opendir(path);
    if (!d) {
        snprintf(why, whylen, "%s: %s", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char sub[4096];
        if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= (int)sizeof sub) {
            snprintf(why, whylen, "%.200s/...: path too long", path);
            rc = -1;
            break;
        }
        struct stat st;
        rc = check_one(sub, owner_uid, why, whylen);
        if (rc == 0 && stat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            rc = check_tree(sub, owner_uid, depth + 1, why, whylen);
    }
    closedir(d);
    return rc;
}

int paths_lua_tree_safe(const char *prefix, const char *luadir, uid_t owner_uid, char *why,
                        size_t whylen)
{
    char part[4096];
    size_t plen = strlen(prefix);
    if (strncmp(luadir, prefix, plen) != 0 || (luadir[plen] != '/' && luadir[plen] != '\0') ||
        snprintf(part, sizeof part, "%s", luadir) >= (int)sizeof part) {
        snprintf(why, whylen, "%.200s is not below %.200s", luadir, prefix);
        return -1;
    }
    if (check_one(plen ? prefix : "/", owner_uid, why, whylen) != 0)
        return -1;
    /* Every directory from PREFIX down to luadir, luadir included. */
    for (size_t i = plen + 1; part[i - 1]; i++) {
        if (part[i] != '/' && part[i] != '\0')
            continue;
        char c = part[i];
        part[i] = '\0';
        int rc = check_one(part, owner_uid, why, whylen);
        part[i] = c;
        if (rc != 0)
            return -1;
        if (!c)
            break;
    }
    return check_tree(luadir, owner_uid, 0, why, whylen);
}

static paths_lua_from from_env(const char *env, char *out, size_t outlen, char *why, size_t whylen)
{
    if (env[0] != '/')
        return refuse(out, outlen, why, whylen,
                      "OOPS_LUA_DIR=%.200s is not an absolute path (it would be searched from "
                      "the current directory): give the full path",
                      env);
    if (strpbrk(env, ";?"))
        return refuse(out, outlen, why, whylen,
                      "OOPS_LUA_DIR=%.200s holds ';' or '?', which Lua's module path reserves",
                      env);
    return put(out, outlen, env, PATHS_LUA_ENV);
}

paths_lua_from paths_lua_dir(const char *env, const char *exe, const char *builtin, char *out,
                             size_t outlen, char *why, size_t whylen)
{
    if (env && *env)
        return from_env(env, out, outlen, why, whylen);
    char prefix[4096], dir[4200], probe[4300];
    if (exe && *exe && prefix_of(exe, prefix, sizeof prefix)) {
        snprintf(dir, sizeof dir, "%s/%s", prefix, PATHS_LUA_SUBDIR);
        snprintf(probe, sizeof probe, "%s/oops/engine.lua", dir);
        if (access(probe, R_OK) == 0) {
            struct stat st;
            uid_t owner = stat(exe, &st) == 0 ? st.st_uid : 0; /* unknown: the strictest */
            char reason[4400];
            if (paths_lua_tree_safe(prefix, dir, owner, reason, sizeof reason) != 0)
                return refuse(out, outlen, why, whylen,
                              "refusing the Lua engine installed beside %.1024s: %s (%s, what "
                              "it holds and the directories above it up to %s must be writable "
                              "by their owner alone: fix the modes, or set OOPS_LUA_DIR)",
                              exe, reason, dir, *prefix ? prefix : "/");
            return put(out, outlen, dir, PATHS_LUA_INSTALLED);
        }
    }
    if (!builtin || builtin[0] != '/')
        return refuse(out, outlen, why, whylen,
                      "the Lua engine's directory compiled in (%.200s) is not an absolute path: "
                      "set OOPS_LUA_DIR",
                      builtin ? builtin : "none");
    return put(out, outlen, builtin, PATHS_LUA_BUILTIN);
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
