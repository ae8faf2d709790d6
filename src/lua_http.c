/*
 * oops.http.request{method=, url=, headers=, body=, timeout_ms=} waits (in a
 * task) and returns {status=, body=}, or nil, "why" when no response came.
 * headers: {["Name"] = "value"} or {"Name: value", ...}.
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "http_client.h"
#include "runtime.h"

typedef struct lreq {
    lua_State *co;
} lreq;

static void done(void *ud, const http_result *r)
{
    lreq *q = ud;
    lua_State *co = q->co;
    free(q);
    if (r->error) {
        lua_push_fail(co, r->error, 0);
        runtime_resume(co, 3);
        return;
    }
    lua_createtable(co, 0, 2);
    lua_pushinteger(co, r->status);
    lua_setfield(co, -2, "status");
    lua_pushlstring(co, r->body, r->body_len);
    lua_setfield(co, -2, "body");
    runtime_resume(co, 1);
}

static int l_request(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    runtime_check_task(L, "oops.http.request");
    oops_ctx *c = runtime_ctx(L);
    http_request req = {0};
    lua_getfield(L, 1, "method");
    req.method = luaL_optstring(L, -1, "GET");
    lua_getfield(L, 1, "url");
    req.url = luaL_checkstring(L, -1);
    lua_getfield(L, 1, "body");
    size_t blen = 0;
    req.body = luaL_optlstring(L, -1, NULL, &blen);
    req.body_len = blen;
    lua_getfield(L, 1, "timeout_ms");
    req.timeout_ms = (uint64_t)luaL_optinteger(L, -1, 0);
    /* headers as "Name: value" strings, anchored on the stack until the request copied them */
    lua_getfield(L, 1, "headers");
    int ht = lua_gettop(L);
    enum { MAXH = 32 };
    const char *hv[MAXH + 1];
    int nh = 0;
    luaL_checkstack(L, MAXH + 4, "too many headers");
    if (lua_istable(L, ht)) {
        lua_pushnil(L);
        while (nh < MAXH && lua_next(L, ht)) {
            if (lua_type(L, -2) == LUA_TSTRING)
                lua_pushfstring(L, "%s: %s", lua_tostring(L, -2), luaL_checkstring(L, -1));
            else
                lua_pushvalue(L, -1);
            hv[nh++] = lua_tostring(L, -1);
            lua_insert(L, ht + 1); /* keep it below the iteration pair */
            lua_pop(L, 1);
        }
    }
    hv[nh] = NULL;
    req.headers = nh ? hv : NULL;
    if (!c->http && !(c->http = http_client_new(c->loop)))
        return luaL_error(L, "cannot create the HTTP client");
    lreq *q = malloc(sizeof *q);
    q->co = L;
    char err[512];
    if (http_client_request(c->http, &req, done, q, err, sizeof err) != 0) {
        free(q);
        lua_push_fail(L, err, 0);
        return 3;
    }
    return lua_yield(L, 0);
}

void lua_register_http(lua_State *L)
{
    static const luaL_Reg fns[] = {{"request", l_request}, {NULL, NULL}};
    lua_setfuncs_in(L, "http", fns);
}
