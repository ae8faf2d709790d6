/* oops.cron: parse / match / next, and civil time (civil / epoch), in the policy's time zone
 * (default: the server's). */
#include <lauxlib.h>
#include <stdio.h>
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

/* Seconds from 1970-01-01 00:00 to the given date and time of day, read as
 * if it were UTC: a wall clock as a number, comparable across the days. */
static long long wall_seconds(int year, int mon, int mday, int hour, int min, int sec)
{
    /* days_from_civil (H. Hinnant): the proleptic Gregorian calendar */
    long long y = (long long)year - (mon <= 2);
    long long era = (y >= 0 ? y : y - 399) / 400;
    long long yoe = y - era * 400;
    long long doy = (153 * (mon + (mon > 2 ? -3 : 9)) + 2) / 5 + mday - 1;
    long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    long long days = era * 146097 + doe - 719468;
    return days * 86400 + hour * 3600 + min * 60 + sec;
}

static long long wall_of(time_t t)
{
    struct tm tm;
    if (!localtime_r(&t, &tm))
        return 0;
    return wall_seconds(tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                        tm.tm_sec);
}

/* civil(epoch [, tz]) -> { year, month, day, hour, min, sec, wday (1 = Monday),
 * isdst, zone } */
static int l_civil(lua_State *L)
{
    time_t t = (time_t)luaL_checkinteger(L, 1);
    const char *tz = luaL_optstring(L, 2, NULL);
    tzswap s;
    tz_enter(&s, tz);
    struct tm tm;
    bool ok = localtime_r(&t, &tm) != NULL;
    char zone[64] = "";
    if (ok && strftime(zone, sizeof zone, "%Z", &tm) == 0)
        zone[0] = '\0';
    tz_leave(&s);
    if (!ok)
        return luaL_error(L, "oops.cron.civil: epoch %I out of range", (lua_Integer)t);
    lua_createtable(L, 0, 9);
    const struct {
        const char *k;
        int v;
    } f[] = {
        {"year", tm.tm_year + 1900},
        {"month", tm.tm_mon + 1},
        {"day", tm.tm_mday},
        {"hour", tm.tm_hour},
        {"min", tm.tm_min},
        {"sec", tm.tm_sec},
        {"wday", tm.tm_wday == 0 ? 7 : tm.tm_wday},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        lua_pushinteger(L, f[i].v);
        lua_setfield(L, -2, f[i].k);
    }
    lua_pushboolean(L, tm.tm_isdst > 0);
    lua_setfield(L, -2, "isdst");
    lua_pushstring(L, zone);
    lua_setfield(L, -2, "zone");
    return 1;
}

static int wall_field(lua_State *L, const char *k, int lo, int hi)
{
    lua_getfield(L, 1, k);
    int isnum = 0;
    lua_Integer v = lua_tointegerx(L, -1, &isnum);
    lua_pop(L, 1);
    if (!isnum || v < lo || v > hi)
        return luaL_error(L, "oops.cron.epoch: %s must be a whole number from %d to %d", k, lo, hi);
    return (int)v;
}

static int days_in_month(int year, int mon)
{
    static const int n[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return mon == 2 && leap ? 29 : n[mon - 1];
}

/* The first instant after a gap holding wall clock `want`: the smallest
 * epoch in [lo, hi] whose wall clock is past `want`. The wall clock only
 * jumps forward at the gap, so this is where it lands; -1 when the zone
 * shows no such jump there. */
static time_t gap_end(long long want)
{
    /* Every zone's offset is within 26 hours of UTC. */
    time_t lo = (time_t)(want - 30 * 3600), hi = (time_t)(want + 30 * 3600);
    if (wall_of(lo) > want || wall_of(hi) <= want)
        return (time_t)-1;
    while (hi - lo > 1) {
        time_t mid = lo + (hi - lo) / 2;
        if (wall_of(mid) > want)
            hi = mid;
        else
            lo = mid;
    }
    return hi;
}

/* epoch({ year, month, day, hour, min } [, tz]) -> earliest, latest
 *
 * The epochs at which that wall-clock minute starts in zone tz. Normally
 * one (both results equal). In a fall-back overlap the minute occurs twice:
 * earliest is its first occurrence (before the clocks go back), latest its
 * second. In a spring-forward gap it never occurs: both are the first
 * instant after the gap (02:30 on a day whose clocks jump 02:00 -> 03:00
 * gives 03:00). Candidates come from mktime with tm_isdst 0, 1 and -1, each
 * kept only when localtime_r gives the wanted wall clock back; with none,
 * the gap's end is searched for with localtime_r alone. */
static int l_epoch(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *tz = luaL_optstring(L, 2, NULL);
    int year = wall_field(L, "year", 1, 9999);
    int mon = wall_field(L, "month", 1, 12);
    int mday = wall_field(L, "day", 1, days_in_month(year, mon));
    int hour = wall_field(L, "hour", 0, 23);
    int min = wall_field(L, "min", 0, 59);
    long long want = wall_seconds(year, mon, mday, hour, min, 0);
    tzswap s;
    tz_enter(&s, tz);
    time_t first = (time_t)-1, last = (time_t)-1;
    bool found = false;
    for (int dst = -1; dst <= 1; dst++) {
        struct tm tm = {.tm_year = year - 1900,
                        .tm_mon = mon - 1,
                        .tm_mday = mday,
                        .tm_hour = hour,
                        .tm_min = min,
                        .tm_isdst = dst};
        time_t t = mktime(&tm);
        if (wall_of(t) != want)
            continue;
        if (!found || t < first)
            first = t;
        if (!found || t > last)
            last = t;
        found = true;
    }
    if (!found) {
        first = last = gap_end(want);
        found = first != (time_t)-1;
    }
    tz_leave(&s);
    if (!found) {
        lua_pushnil(L);
        lua_pushnil(L);
        return 2;
    }
    lua_pushinteger(L, (lua_Integer)first);
    lua_pushinteger(L, (lua_Integer)last);
    return 2;
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
        {"parse", l_parse}, {"valid_timezone", l_valid_timezone},
        {"civil", l_civil}, {"epoch", l_epoch},
        {NULL, NULL},
    };
    oops_setfuncs_in(L, "cron", fns);
}
