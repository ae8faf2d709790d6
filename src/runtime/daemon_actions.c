/*
 * daemon_actions — the page's actions: POST /api/... from an operator
 * (lua/oops/web.lua, M.post), after the role and CSRF checks, answered when
 * its task is done (deferred: the handler never waits on the database).
 */
#include "daemon_actions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "buf.h"
#include "runtime.h"

static void json_error(http_response *out, int status, const char *text)
{
    buf b = {0};
    bool first = true;
    buf_puts(&b, "{");
    json_kv_str(&b, "error", text, &first);
    buf_puts(&b, "}\n");
    out->status = status;
    out->content_type = "application/json";
    out->len = b.len;
    out->body = buf_take(&b);
}

/* CSRF (issue 27): an action from another origin is refused. A browser
 * sends Origin with every POST and Sec-Fetch-Site with every request (a
 * script cannot change them); what they say must be this page's own origin.
 * (The token travels in the Authorization header only, which no other
 * origin's page can make a browser send, so this is the second fence.)
 * NULL when allowed, else why. */
static const char *foreign_origin(const http_incoming *in)
{
    const char *site = http_incoming_header(in, "Sec-Fetch-Site");
    if (site && strcasecmp(site, "same-origin") != 0 && strcasecmp(site, "none") != 0)
        return "refused: the request comes from another site (Sec-Fetch-Site)";
    const char *origin = http_incoming_header(in, "Origin");
    if (!origin)
        return NULL;
    const char *host = http_incoming_header(in, "Host");
    const char *rest = strncmp(origin, "http://", 7) == 0    ? origin + 7
                       : strncmp(origin, "https://", 8) == 0 ? origin + 8
                                                             : NULL;
    if (!rest || !host || strcasecmp(rest, host) != 0)
        return "refused: the request comes from another origin (Origin)";
    return NULL;
}

int daemon_answer_deferred(void *ud, uint64_t ticket, int status, const char *body, size_t len)
{
    server_state *d = ud;
    http_response r = {.status = status, .content_type = "application/json"};
    r.body = malloc(len ? len : 1);
    if (!r.body)
        return -1;
    memcpy(r.body, body, len);
    r.len = len;
    return d->http ? http_server_answer(d->http, ticket, &r) : (free(r.body), -1);
}

/* POST /api/...: an operator's action (lua/oops/web.lua, M.post), deferred
 * until its task is done: the handler never waits on the database. */
void daemon_web_action(server_state *d, const http_incoming *in, const web_user *who,
                       http_response *out)
{
    if (!d->http_users || !d->o.http_users_file) {
        json_error(out, 403, "actions need named operators: start oopsd with --http-users FILE");
        return;
    }
    if (who->role != WEB_ROLE_OPERATOR) {
        char t[128];
        snprintf(t, sizeof t, "%s is a viewer: only operators may act", who->name);
        json_error(out, 403, t);
        return;
    }
    const char *why = foreign_origin(in);
    if (why) {
        json_error(out, 403, why);
        return;
    }
    const char *type = http_incoming_header(in, "Content-Type");
    if (!type || strncasecmp(type, "application/json", 16) != 0) {
        json_error(out, 415, "the body must be JSON (Content-Type: application/json)");
        return;
    }
    lua_State *L = runtime_state(d->ctx.rt);
    if (!d->ctx.rt || !daemon_engine_fn(d, "http_post")) {
        json_error(out, 503, "no engine");
        return;
    }
    uint64_t ticket = http_defer(in);
    if (!ticket) {
        lua_pop(L, 1);
        json_error(out, 503, "too many requests waiting; try again");
        return;
    }
    char actor[64];
    snprintf(actor, sizeof actor, "%s@page", who->name);
    lua_pushstring(L, in->path);
    lua_pushlstring(L, in->body, in->body_len);
    lua_pushstring(L, actor);
    lua_pushinteger(L, (lua_Integer)ticket);
    if (runtime_call(L, 4, 2, "engine.http_post", NULL, 0) != 0) {
        daemon_answer_deferred(d, ticket, 500, "{\"error\":\"internal error (logged)\"}\n", 35);
        return;
    }
    if (lua_isinteger(L, -2)) { /* answered now: a bad request, or too many at once */
        size_t len = 0;
        const char *body = lua_tolstring(L, -1, &len);
        daemon_answer_deferred(d, ticket, (int)lua_tointeger(L, -2), body ? body : "{}",
                               body ? len : 2);
    }
    lua_pop(L, 2);
}
