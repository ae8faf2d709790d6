/*
 * oops.http.request{method=, url=, headers=, body=, timeout_ms=, max_body=,
 * truncate=, ca=, allow_userinfo=} waits (in a task) and returns {status=,
 * body=, truncated=}, or nil, "why", "io" when no response came ("invalid"
 * when the request was refused before sending: scheme, method, header,
 * userinfo, a CA file that cannot be read).
 * headers: {["Name"] = "value"} or {"Name: value", ...}.
 *
 * oops.http.serve{listen=, handler=, max_body=} returns a server (methods
 * port, url, close) whose handler(req) runs on the loop thread for every
 * request, req = {method=, path=, body=, headers={lower-case name = value}},
 * and returns status [, body [, content_type]].
 */
#include <ctype.h>
#include <lauxlib.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "http_client.h"
#include "error_names.h"
#include "http_server.h"
#include "runtime.h"

typedef struct lreq {
    lua_State *co;
} lreq;

static void request_done(void *ud, const http_result *r)
{
    lreq *q = ud;
    lua_State *co = q->co;
    free(q);
    if (r->error) {
        runtime_resume(co, oops_fail(co, r->error, OOPS_E_IO));
        return;
    }
    lua_createtable(co, 0, 3);
    lua_pushinteger(co, r->status);
    lua_setfield(co, -2, "status");
    lua_pushlstring(co, r->body, r->body_len);
    lua_setfield(co, -2, "body");
    lua_pushboolean(co, r->truncated);
    lua_setfield(co, -2, "truncated");
    runtime_resume(co, 1);
}

/* The largest max_body oops.http.request takes: the body becomes a string. */
#define LUA_MAX_BODY ((lua_Integer)64 << 20)

/* opts[name]: nil (false) or a boolean, else raises. */
static bool opt_boolean(lua_State *L, const char *name)
{
    int t = lua_getfield(L, 1, name);
    if (t != LUA_TNIL && t != LUA_TBOOLEAN)
        luaL_error(L, "%s must be true or false, not a %s", name, lua_typename(L, t));
    return lua_toboolean(L, -1);
}

/* The options past the request itself: max_body, truncate, ca,
 * allow_userinfo. Type errors raise; NULL, or why the request is refused. */
static const char *request_limits(lua_State *L, http_request *req)
{
    if (lua_getfield(L, 1, "max_body") != LUA_TNIL) {
        lua_Integer n = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
        if (n < 1 || n > LUA_MAX_BODY)
            luaL_error(L, "max_body must be a whole number of bytes from 1 to %d",
                       (int)LUA_MAX_BODY);
        req->max_body = (size_t)n;
    }
    req->truncate = opt_boolean(L, "truncate");
    req->allow_userinfo = opt_boolean(L, "allow_userinfo");
    int t = lua_getfield(L, 1, "ca");
    if (t != LUA_TNIL) {
        size_t len = 0;
        if (t != LUA_TSTRING)
            luaL_error(L, "ca must be a string (a PEM file's path), not a %s", lua_typename(L, t));
        req->ca_file = lua_tolstring(L, -1, &len); /* its length: http_client_request */
        if (strlen(req->ca_file) != len)
            return "CA file: path contains a NUL byte";
    }
    return NULL;
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
    const char *refused = request_limits(L, &req); /* values anchored in opts */
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
    if (refused)
        return oops_fail(L, refused, OOPS_E_INVALID);
    if (!c->http && c->closing) /* its client is closed for good: nothing may start now */
        return oops_fail(L, "the process is shutting down", OOPS_E_IO);
    if (!c->http && !(c->http = http_client_new(c->loop)))
        return luaL_error(L, "cannot create the HTTP client");
    lreq *q = malloc(sizeof *q);
    q->co = L;
    char err[512];
    if (http_client_request(c->http, &req, request_done, q, err, sizeof err) != 0) {
        free(q); /* refused before sending: scheme, method, URL, header or CA file */
        return oops_fail(L, err, OOPS_E_INVALID);
    }
    return lua_yield(L, 0);
}

/* ---- oops.http.serve ----------------------------------------------------- */

#define SERVER_MT "oops.http.server"
#define CTYPE_MAX 128

/* The userdata. The handler is its first user value (not a registry ref),
 * so a handler that refers to its own server does not keep it alive. */
typedef struct lserver {
    http_server *srv;      /* NULL once closed */
    lua_State *L;          /* the main state: handlers run there */
    int port;              /* kept after close */
    char host[64];         /* for :url() */
    char ctype[CTYPE_MAX]; /* content type of the response being sent */
} lserver;

/* Registry: lightuserdata(lserver) -> its userdata, weak values: how the C
 * handler finds the Lua object (and so its handler function). */
static const char K_SERVERS = 0;

static void push_servers(lua_State *L)
{
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &K_SERVERS) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_createtable(L, 0, 1);
        lua_pushstring(L, "v");
        lua_setfield(L, -2, "__mode");
        lua_setmetatable(L, -2);
        lua_pushvalue(L, -1);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &K_SERVERS);
    }
}

/* headers[lower(name)] = value; a repeated header joined with ", ". */
static void add_header(void *ud, const char *name, const char *value)
{
    lua_State *L = ud; /* the headers table on top */
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (const char *c = name; *c; c++)
        luaL_addchar(&b, (char)tolower((unsigned char)*c));
    luaL_pushresult(&b);
    lua_pushvalue(L, -1);
    if (lua_rawget(L, -3) == LUA_TSTRING) {
        lua_pushliteral(L, ", ");
        lua_pushstring(L, value);
        lua_concat(L, 3);
    } else {
        lua_pop(L, 1);
        lua_pushstring(L, value);
    }
    lua_rawset(L, -3);
}

/* Run under runtime_call (protected): (handler, in, out, ls) -> nothing.
 * Builds req, calls the handler and fills out from what it returned; any
 * error (in the handler or in its results) is raised, so logged, and the
 * caller answers 500. Nothing is allocated outside Lua before the last
 * check has passed. */
static int call_handler(lua_State *L)
{
    const http_incoming *in = lua_touserdata(L, 2);
    http_response *out = lua_touserdata(L, 3);
    lserver *ls = lua_touserdata(L, 4);
    lua_settop(L, 1);
    lua_createtable(L, 0, 4);
    lua_pushstring(L, in->method);
    lua_setfield(L, -2, "method");
    lua_pushstring(L, in->path);
    lua_setfield(L, -2, "path");
    lua_pushlstring(L, in->body, in->body_len);
    lua_setfield(L, -2, "body");
    lua_newtable(L);
    http_incoming_headers(in, add_header, L);
    lua_setfield(L, -2, "headers");
    lua_call(L, 1, 3); /* status, body, content_type at 1, 2, 3 */
    int isnum = 0;
    lua_Integer status = lua_type(L, 1) == LUA_TNUMBER ? lua_tointegerx(L, 1, &isnum) : 0;
    if (!isnum || status < 200 || status > 599)
        return luaL_error(L,
                          "the handler returned status %s: want an integer 200-599 "
                          "(return status [, body [, content_type]])",
                          luaL_tolstring(L, 1, NULL));
    if (!lua_isnil(L, 2) && lua_type(L, 2) != LUA_TSTRING)
        return luaL_error(L, "the handler returned a %s body: want a string or nil",
                          luaL_typename(L, 2));
    if (!lua_isnil(L, 3) && lua_type(L, 3) != LUA_TSTRING)
        return luaL_error(L, "the handler returned a %s content type: want a string or nil",
                          luaL_typename(L, 3));
    size_t clen = 0;
    const char *ctype = lua_tolstring(L, 3, &clen);
    if (ctype &&
        (clen == 0 || clen >= CTYPE_MAX || strlen(ctype) != clen || strpbrk(ctype, "\r\n")))
        return luaL_error(
            L, "the handler returned content type \"%s\": want one line of 1 to %d characters",
            ctype, CTYPE_MAX - 1);
    size_t blen = 0;
    const char *body = lua_tolstring(L, 2, &blen);
    if (body && blen > 0) {
        out->body = malloc(blen);
        if (!out->body)
            return luaL_error(L, "out of memory for a %d-byte response", (int)blen);
        memcpy(out->body, body, blen);
        out->len = blen;
    }
    if (ctype) {
        memcpy(ls->ctype, ctype, clen + 1);
        out->content_type = ls->ctype; /* valid until the response is queued: no Lua runs before */
    }
    out->status = (int)status;
    return 0;
}

static void on_serve(void *ud, const http_incoming *in, http_response *out)
{
    lserver *ls = ud;
    lua_State *L = ls->L;
    int top = lua_gettop(L);
    push_servers(L);
    if (lua_rawgetp(L, -1, ls) !=
        LUA_TUSERDATA) { /* unreachable, its __gc (closing it) still to run */
        lua_settop(L, top);
        out->status = 503;
        return;
    }
    lua_pushcfunction(L, call_handler);
    lua_getiuservalue(L, -2, 1);
    lua_pushlightuserdata(L, (void *)in);
    lua_pushlightuserdata(L, out);
    lua_pushlightuserdata(L, ls);
    char what[160];
    snprintf(what, sizeof what, "HTTP handler for %.16s %.120s", in->method, in->path);
    if (runtime_call(L, 4, 0, what, NULL, 0) != 0) {
        free(out->body);
        *out = (http_response){.status = 500};
        out->body = strdup("the handler failed; see the server's log\n");
        out->len = out->body ? strlen(out->body) : 0;
    }
    lua_settop(L, top);
}

static lserver *check_server(lua_State *L) { return luaL_checkudata(L, 1, SERVER_MT); }

static void close_server(lserver *ls)
{
    if (ls->srv) {
        http_server_close(ls->srv); /* from inside its own handler too: the server defers it */
        ls->srv = NULL;
    }
}

static int l_serve(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "listen");
    if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING)
        return luaL_error(L, "listen must be a string like \"127.0.0.1:0\"");
    const char *listen = lua_isnil(L, -1) ? "127.0.0.1:0" : lua_tostring(L, -1);
    lua_getfield(L, 1, "handler");
    if (!lua_isfunction(L, -1))
        return luaL_error(
            L, "handler must be a function(req) returning status [, body [, content_type]]");
    int handler = lua_gettop(L);
    lua_getfield(L, 1, "max_body");
    lua_Integer max_body = 0;
    if (!lua_isnil(L, -1)) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1)
            return luaL_error(L, "max_body must be a whole number of bytes > 0");
        max_body = lua_tointeger(L, -1);
    }
    lserver *ls = lua_newuserdatauv(L, sizeof *ls, 1);
    memset(ls, 0, sizeof *ls);
    ls->L = runtime_state(runtime_of(L));
    luaL_setmetatable(L, SERVER_MT);
    lua_pushvalue(L, handler);
    lua_setiuservalue(L, -2, 1);
    /* the URL's host: where we listen; any address means this host */
    const char *colon = strrchr(listen, ':');
    size_t hlen = colon ? (size_t)(colon - listen) : 0;
    /* The address a client uses: a wildcard becomes its loopback ("[::]" →
     * "[::1]", "0.0.0.0" → 127.0.0.1); an IPv6 host keeps its brackets. A
     * host too long to keep is refused by http_server_serve below anyway. */
    if (hlen == 4 && !strncmp(listen, "[::]", 4))
        snprintf(ls->host, sizeof ls->host, "[::1]");
    else if (hlen == 0 || hlen >= sizeof ls->host ||
             (hlen == 9 && !strncmp(listen, "localhost", 9)) ||
             (hlen == 7 && !strncmp(listen, "0.0.0.0", 7)))
        snprintf(ls->host, sizeof ls->host, "127.0.0.1");
    else
        snprintf(ls->host, sizeof ls->host, "%.*s", (int)hlen, listen);
    http_serve_options o = {.handler = on_serve, .ud = ls, .max_body = (size_t)max_body};
    char err[512];
    http_server *srv = http_server_serve(runtime_ctx(L)->loop, listen, &o, err, sizeof err);
    if (!srv)
        return oops_fail(L, err, OOPS_E_IO);
    /* A server alone does not keep `oopsd lua` or oops.wait going. */
    http_server_unref(srv);
    ls->srv = srv;
    ls->port = http_server_port(srv);
    push_servers(L);
    lua_pushvalue(L, -2);
    lua_rawsetp(L, -2, ls);
    lua_pop(L, 1);
    return 1;
}

static int m_port(lua_State *L)
{
    lua_pushinteger(L, check_server(L)->port);
    return 1;
}

static int m_url(lua_State *L)
{
    lserver *ls = check_server(L);
    lua_pushfstring(L, "http://%s:%d", ls->host, ls->port);
    return 1;
}

static int m_close(lua_State *L)
{
    close_server(check_server(L));
    return 0;
}

static int m_gc(lua_State *L)
{
    close_server(check_server(L));
    return 0;
}

void oops_open_http(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"port", m_port},
        {"url", m_url},
        {"close", m_close},
        {NULL, NULL},
    };
    if (luaL_newmetatable(L, SERVER_MT)) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, m_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, m_close);
        lua_setfield(L, -2, "__close");
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"request", l_request}, {"serve", l_serve}, {NULL, NULL}};
    oops_setfuncs_in(L, "http", fns);
}
