/* oops.cron: parse / match / next, in the policy's time zone (default: the server's). */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cron.h"
#include "error_names.h"
#include "runtime.h"

#define CRON_MT "oops.cron"

typedef struct lcron {
    cron_expr e;
} lcron; /* the text is the userdata's user value */

/* Evaluate in zone tz (NULL = the process's): TZ is switched around the call.
 * The daemon is single-threaded, so nothing else reads TZ meanwhile. */
typedef struct tzswap {
    char *old;
    bool changed;
} tzswap;

static void tz_enter(tzswap *s, const char *tz)
{
    s->changed = tz && *tz;
    s->old = NULL;
    if (!s->changed)
        return;
    const char *o = getenv("TZ");
    s->old = o ? strdup(o) : NULL;
    setenv("TZ", tz, 1);
    tzset();
}

static void tz_leave(tzswap *s)
{
    if (!s->changed)
        return;
    if (s->old)
        setenv("TZ", s->old, 1);
    else
        unsetenv("TZ");
    tzset();
    free(s->old);
}

/* parse(text) -> cron | nil, "minute 61 out of range 0-59", "invalid" */
static int l_parse(lua_State *L)
{
    const char *text = luaL_checkstring(L, 1);
    lcron *c = lua_newuserdatauv(L, sizeof *c, 1);
    char err[256];
    if (cron_parse(text, &c->e, err, sizeof err) != 0)
        return oops_fail(L, err, OOPS_E_INVALID);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    luaL_setmetatable(L, CRON_MT);
    return 1;
}

/* cron:matches(epoch [, tz]) -> does it fire at this second? */
static int m_matches(lua_State *L)
{
    lcron *c = luaL_checkudata(L, 1, CRON_MT);
    time_t t = (time_t)luaL_checkinteger(L, 2);
    const char *tz = luaL_optstring(L, 3, NULL);
    tzswap s;
    tz_enter(&s, tz);
    struct tm tm;
    localtime_r(&t, &tm);
    bool m = cron_matches(&c->e, &tm);
    tz_leave(&s);
    lua_pushboolean(L, m);
    return 1;
}

/* cron:next(epoch [, tz]) -> the first firing strictly after epoch, or nil */
static int m_next(lua_State *L)
{
    lcron *c = luaL_checkudata(L, 1, CRON_MT);
    time_t t = (time_t)luaL_checkinteger(L, 2);
    const char *tz = luaL_optstring(L, 3, NULL);
    tzswap s;
    tz_enter(&s, tz);
    time_t n = cron_next(&c->e, t);
    tz_leave(&s);
    if (n == (time_t)-1)
        lua_pushnil(L);
    else
        lua_pushinteger(L, (lua_Integer)n);
    return 1;
}

static int m_has_seconds(lua_State *L)
{
    lcron *c = luaL_checkudata(L, 1, CRON_MT);
    lua_pushboolean(L, c->e.has_seconds);
    return 1;
}

static int m_tostring(lua_State *L)
{
    luaL_checkudata(L, 1, CRON_MT);
    lua_getiuservalue(L, 1, 1);
    return 1;
}

/* valid_timezone(name) -> true | false, why */
static int l_valid_timezone(lua_State *L)
{
    const char *tz = luaL_checkstring(L, 1);
    if (!*tz || tz[0] == '/' || strstr(tz, "..")) {
        lua_pushboolean(L, 0);
        lua_pushstring(L, "not a time zone name like Europe/Paris or UTC");
        return 2;
    }
    const char *dir = getenv("TZDIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "/usr/share/zoneinfo", tz);
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    bool ok = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "TZif", 4) == 0;
    if (f)
        fclose(f);
    if (!ok && strcmp(tz, "UTC") != 0) {
        lua_pushboolean(L, 0);
        lua_pushfstring(L, "unknown time zone (no %s)", path);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

void oops_open_cron(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"matches", m_matches}, {"next", m_next}, {"has_seconds", m_has_seconds},
        {"text", m_tostring},   {NULL, NULL},
    };
    if (luaL_newmetatable(L, CRON_MT)) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, m_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {
        {"parse", l_parse},
        {"valid_timezone", l_valid_timezone},
        {NULL, NULL},
    };
    oops_setfuncs_in(L, "cron", fns);
}
