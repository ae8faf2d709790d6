/* oops.metrics: counters, gauges and summaries kept in C (they survive a reload). */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

/* Labels table {k = v} → Prometheus label string, keys sorted for a stable series. */
static char *labels(lua_State *L, int idx)
{
    buf b = {0};
    if (lua_istable(L, idx)) {
        enum { MAXL = 16 };
        const char *keys[MAXL];
        int n = 0;
        lua_pushnil(L);
        while (n < MAXL && lua_next(L, idx)) {
            if (lua_type(L, -2) == LUA_TSTRING)
                keys[n++] = lua_tostring(L, -2);
            lua_pop(L, 1);
        }
        for (int i = 1; i < n; i++) /* insertion sort: a handful of keys */
            for (int j = i; j > 0 && strcmp(keys[j - 1], keys[j]) > 0; j--) {
                const char *t = keys[j];
                keys[j] = keys[j - 1];
                keys[j - 1] = t;
            }
        const char *kv[2 * MAXL + 1];
        for (int i = 0; i < n; i++) {
            lua_getfield(L, idx, keys[i]);
            kv[2 * i] = keys[i];
            kv[2 * i + 1] = luaL_tolstring(L, -1, NULL);
            lua_remove(L, -2);
        }
        kv[2 * n] = NULL;
        metrics_labels(&b, kv);
        lua_pop(L, n);
    }
    return buf_take(&b);
}

static int update(lua_State *L, void (*fn)(metrics *, const char *, const char *, double),
                  double dflt)
{
    const char *name = luaL_checkstring(L, 1);
    double v = luaL_optnumber(L, 3, dflt);
    char *l = labels(L, 2);
    fn(runtime_ctx(L)->metrics, name, l, v);
    free(l);
    return 0;
}

static int l_inc(lua_State *L) { return update(L, metrics_add, 1); }
static int l_set(lua_State *L) { return update(L, metrics_set, 0); }
static int l_observe(lua_State *L) { return update(L, metrics_observe, 0); }

static int l_get(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    char *l = labels(L, 2);
    lua_pushnumber(L, metrics_get(runtime_ctx(L)->metrics, name, l));
    free(l);
    return 1;
}

/* describe(name, kind, help): a metric's kind ("counter", "gauge", "summary",
 * "histogram") and HELP text, for metrics only Lua code updates. */
/* oops.metrics.read_ago_ms() -> ms since /metrics was last served, or nil
 * when it never was; 0 outside the serving daemon (tools and specs read the
 * gauges themselves). */
static int l_read_ago_ms(lua_State *L)
{
    oops_ctx *c = runtime_ctx(L);
    if (!c->daemon) {
        lua_pushinteger(L, 0);
        return 1;
    }
    if (!c->metrics_read_ms || !c->loop) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushinteger(L, (lua_Integer)(uv_now(c->loop) - c->metrics_read_ms));
    return 1;
}

static int l_describe(lua_State *L)
{
    static const char *const kinds[] = {"counter", "gauge", "summary", "histogram", NULL};
    static const metric_kind values[] = {METRIC_COUNTER, METRIC_GAUGE, METRIC_SUMMARY,
                                         METRIC_HISTOGRAM};
    const char *name = luaL_checkstring(L, 1);
    int kind = luaL_checkoption(L, 2, NULL, kinds);
    const char *help = luaL_checkstring(L, 3);
    if (strchr(help, '\n'))
        return luaL_error(L, "oops.metrics.describe: the help text is one line");
    metrics_describe(runtime_ctx(L)->metrics, name, values[kind], help);
    return 0;
}

void oops_open_metrics(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"inc", l_inc}, {"set", l_set},           {"observe", l_observe},
        {"get", l_get}, {"describe", l_describe}, {"read_ago_ms", l_read_ago_ms},
        {NULL, NULL},
    };
    oops_setfuncs_in(L, "metrics", fns);
}
