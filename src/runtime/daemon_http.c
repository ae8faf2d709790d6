/*
 * daemon_http — the daemon's HTTP surface: the listener on --listen and the
 * flags that shape it (--http-host, --http-token-file, --http-users), the
 * routing of every request, the Host check (DNS rebinding), sign-in (bearer
 * tokens), /healthz, /status, the page's assets and its /api/... reads.
 * /metrics is in daemon_metrics.c, the page's actions in daemon_actions.c.
 */
#include "daemon_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "buf.h"
#include "daemon_actions.h"
#include "daemon_metrics.h"
#include "lock_names.h"
#include "log.h"
#include "oops_version.h"
#include "runtime.h"

/* ---- the flags and the users --------------------------------------------- */

/* --listen, --http-host, --http-token-file: checked (and the token read)
 * before anything else is done. 0, or -1 after printing why. */
int daemon_http_flags(server_state *d)
{
    char err[1024];
    if (strcmp(d->o.listen, "off") != 0 && http_listen_check(d->o.listen, err, sizeof err) != 0) {
        fprintf(stderr, "oopsd: %s\n", err);
        return -1;
    }
    if (d->o.http_token_file && d->o.http_users_file) {
        fprintf(stderr, "oopsd: --http-users and --http-token-file: give one of them (a token "
                        "file is one viewer; a users file names each viewer and operator)\n");
        return -1;
    }
    if (!web_listen_is_loopback(d->o.listen) && !d->o.http_token_file && !d->o.http_users_file) {
        fprintf(
            stderr,
            "oopsd: --listen %s is not a loopback address: the fleet page and its data would be "
            "open to the network; give --http-users FILE or --http-token-file FILE (the bearer "
            "tokens every request but /healthz and the page's own code must carry) and put "
            "oopsd behind a reverse proxy (doc/guide/security.md)\n",
            d->o.listen);
        return -1;
    }
    web_hosts_listen(&d->http_hosts, d->o.listen);
    for (unsigned i = 0; i < d->o.n_http_hosts; i++)
        if (web_hosts_add(&d->http_hosts, d->o.http_hosts[i], err, sizeof err) != 0) {
            fprintf(stderr, "oopsd: %s\n", err);
            return -1;
        }
    if (d->o.http_token_file) {
        char *token = NULL;
        int rc = web_token_read(d->o.http_token_file, &token, err, sizeof err);
        if (rc == 0 && web_users_single(token, &d->http_users) != 0) {
            snprintf(err, sizeof err, "--http-token-file %s: out of memory", d->o.http_token_file);
            rc = -1;
        }
        web_token_free(token);
        if (rc != 0) {
            fprintf(stderr, "oopsd: %s\n", err);
            return -1;
        }
    }
    if (d->o.http_users_file &&
        web_users_read(d->o.http_users_file, &d->http_users, err, sizeof err) != 0) {
        fprintf(stderr, "oopsd: %s\n", err);
        return -1;
    }
    return 0;
}

/* SIGHUP: --http-users is read again; a file that is now refused keeps the
 * users read before (logged, never its content). */
void daemon_reload_users(server_state *d)
{
    if (!d->o.http_users_file)
        return;
    web_users *u = NULL;
    char err[1024];
    if (web_users_read(d->o.http_users_file, &u, err, sizeof err) != 0) {
        log_msg(LOG_ERROR, "http users not reloaded, keeping the %zu read before: %s",
                web_users_count(d->http_users), err);
        return;
    }
    web_users_free(d->http_users);
    d->http_users = u;
    log_msg(LOG_INFO, "http users reloaded from %s: %zu", d->o.http_users_file, web_users_count(u));
}

/* ---- /healthz /status ---------------------------------------------------- */

static void healthz(server_state *d, http_response *out)
{
    bool up = lock_registry_is_up(d->ctx.locks);
    const char *reason = daemon_health_reason(d);
    buf b = {0};
    bool first = true;
    buf_puts(&b, "{");
    json_kv_str(&b, "status", reason ? "unavailable" : "ok", &first);
    if (reason)
        json_kv_str(&b, "reason", reason, &first);
    json_kv_str(&b, "server", d->ctx.server_name, &first);
    json_kv_bool(&b, "lock_session_up", up, &first);
    /* Busy: the database refuses new connections (too many). A pool held at
     * its open connections still works: 200 unless the lock session is down. */
    json_kv_bool(&b, "db_busy", db_pool_busy(d->ctx.calls.pool) || lock_registry_busy(d->ctx.locks),
                 &first);
    json_kv_int(&b, "policy_version", d->ctx.policy_version, &first);
    json_kv_str(&b, "policy_error", d->ctx.policy_error, &first);
    buf_puts(&b, "}\n");
    out->status = reason ? 503 : 200;
    out->content_type = "application/json";
    out->len = b.len;
    out->body = buf_take(&b);
}

static void status(server_state *d, http_response *out)
{
    buf b = {0};
    bool first = true;
    buf_puts(&b, "{");
    json_kv_str(&b, "server", d->ctx.server_name, &first);
    json_kv_str(&b, "version", OOPS_VERSION, &first);
    json_kv_str(&b, "commit", OOPS_COMMIT, &first);
    json_kv_int(&b, "lock_connection_id", (long long)lock_registry_connection_id(d->ctx.locks),
                &first);
    json_kv_bool(&b, "lock_session_up", lock_registry_is_up(d->ctx.locks), &first);
    json_kv_int(&b, "policy_version", d->ctx.policy_version, &first);
    json_kv_str(&b, "policy_hash", d->policy_hash, &first);
    json_kv_str(&b, "policy_dir", d->o.policies, &first);
    json_kv_str(&b, "policy_error", d->ctx.policy_error, &first);
    char **names;
    size_t n = lock_registry_held(d->ctx.locks, &names);
    json_key(&b, "held_locks", &first);
    buf_puts(&b, "[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            buf_puts(&b, ",");
        json_str(&b, names[i]);
    }
    buf_puts(&b, "]");
    /* The pipelines this server drives are exactly the pipeline locks it holds. */
    json_key(&b, "driving", &first);
    buf_puts(&b, "[");
    static const char prefix[] = OOPS_LOCK_PIPELINE_PREFIX;
    bool f2 = true;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(names[i], prefix, sizeof prefix - 1) != 0)
            continue;
        if (!f2)
            buf_puts(&b, ",");
        f2 = false;
        json_str(&b, names[i] + sizeof prefix - 1);
    }
    buf_puts(&b, "]");
    lock_names_free(names, n);
    json_kv_int(&b, "tasks", (long long)runtime_task_count(d->ctx.rt), &first);
    json_kv_bool(&b, "stopping", d->draining, &first);
    buf_puts(&b, "}\n");
    out->status = 200;
    out->content_type = "application/json";
    out->len = b.len;
    out->body = buf_take(&b);
}

/* ---- the page's reads and the Host check --------------------------------- */

/* Headers of every response (http_serve_options.headers: the listener's own
 * 405/413/503 too): never cached (it is live, and may sit behind a token),
 * never sniffed as another type, never framed, no script or style but our
 * own. */
static const char *const PAGE_HEADERS[] = {
    "Cache-Control",
    "no-store",
    "X-Content-Type-Options",
    "nosniff",
    "Referrer-Policy",
    "no-referrer",
    "Content-Security-Policy",
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    NULL,
};
static const char *const ALLOW_GET[] = {"Allow", "GET", NULL};
static const char *const AUTH_HEADERS[] = {"WWW-Authenticate", "Bearer realm=\"oopsd\"", NULL};

static void http_text(http_response *out, int status, const char *text)
{
    out->status = status;
    out->body = strdup(text);
    out->len = out->body ? strlen(text) : 0;
}

static const char *const RETRY_AFTER[] = {"Retry-After", "1", NULL};

/* engine.http(path, client) -> status, json: the fleet's JSON from the
 * engine's in-memory snapshot (lua/oops/web.lua), the client's address for
 * its rate limits. It never waits on the database. */
static void web_api(server_state *d, const http_incoming *in, http_response *out)
{
    lua_State *L = runtime_state(d->ctx.rt);
    if (!d->ctx.rt || !daemon_engine_fn(d, "http")) {
        http_text(out, 503, "no engine\n");
        return;
    }
    char peer[64];
    lua_pushstring(L, in->path);
    if (http_incoming_peer_addr(in, peer, sizeof peer) == 0)
        lua_pushstring(L, peer);
    else
        lua_pushnil(L);
    if (runtime_call(L, 2, 2, "engine.http", NULL, 0) != 0) {
        http_text(out, 500, "internal error (logged)\n");
        return;
    }
    size_t len = 0;
    const char *body = lua_tolstring(L, -1, &len);
    out->status = (int)lua_tointeger(L, -2);
    if (body) {
        out->body = malloc(len ? len : 1);
        if (out->body)
            memcpy(out->body, body, len);
        out->len = out->body ? len : 0;
    }
    lua_pop(L, 2);
    out->content_type = "application/json";
    if (out->status == 429)
        out->headers = RETRY_AFTER;
}

/* engine.metrics_scraped(): gauges computed only while someone scrapes
 * (lua/oops/stats/live.lua: the delivery figures, read again in a task when
 * older than their TTL; this scrape shows the ones kept). Never waits. */
static void metrics_scraped(server_state *d)
{
    if (!d->ctx.rt || !daemon_engine_fn(d, "metrics_scraped"))
        return;
    (void)runtime_call(runtime_state(d->ctx.rt), 0, 0, "engine.metrics_scraped", NULL, 0);
}

static void count_host(void *ud, const char *name, const char *value)
{
    (void)value;
    if (strcasecmp(name, "Host") == 0)
        ++*(int *)ud;
}

/* 0 when the request's Host is one this server answers for (web.h: DNS
 * rebinding), else the status to answer: 421, or 400 for an HTTP/1.1
 * request without one (RFC 9112 3.2; HTTP/1.0 may omit it). A repeated Host
 * header is refused: which one a proxy reads is unknown. */
static int host_check(server_state *d, const http_incoming *in)
{
    int n = 0;
    http_incoming_headers(in, count_host, &n);
    const char *host = http_incoming_header(in, "Host");
    if (!host && strcmp(in->version, "HTTP/1.0") != 0)
        return 400;
    char local[64];
    bool known = http_incoming_local_addr(in, local, sizeof local) == 0;
    return n <= 1 && web_host_allowed(&d->http_hosts, host, known ? local : NULL) ? 0 : 421;
}

/* /api/me: who the request's token names, and whether it may act. */
static void whoami(server_state *d, const web_user *who, bool authed, http_response *out)
{
    buf b = {0};
    bool first = true;
    buf_puts(&b, "{");
    json_kv_str(&b, "name", authed ? who->name : NULL, &first);
    json_kv_str(&b, "role", authed ? web_role_name(who->role) : "viewer", &first);
    json_kv_bool(&b, "actions", authed && who->role == WEB_ROLE_OPERATOR, &first);
    json_kv_bool(&b, "users", d->o.http_users_file != NULL, &first);
    buf_puts(&b, "}\n");
    out->status = 200;
    out->content_type = "application/json";
    out->len = b.len;
    out->body = buf_take(&b);
}

/* ---- routing and sign-in ------------------------------------------------- */

static const char *const ALLOW_API[] = {"Allow", "GET, POST", NULL};

static bool action_path(const char *path)
{
    return strncmp(path, "/api/pipeline/", 14) == 0 || strcmp(path, "/api/rollback") == 0;
}

static void on_http(void *ud, const http_incoming *in, http_response *out)
{
    server_state *d = ud;
    const char *path = in->path;
    int refused = host_check(d, in); /* every request, /healthz too: probes send the address */
    if (refused) {
        d->http_host_refused++;
        http_text(out, refused,
                  refused == 400 ? "400 Bad Request: an HTTP/1.1 request needs a Host header\n"
                                 : "421 Misdirected Request: this oopsd does not answer for that "
                                   "Host (a name of its own is added with --http-host NAME)\n");
        return;
    }
    bool get = strcmp(in->method, "GET") == 0, post = strcmp(in->method, "POST") == 0;
    if (!get && !(post && action_path(path))) {
        out->status = 405;
        out->headers = action_path(path) ? ALLOW_API : ALLOW_GET;
        return;
    }
    if (get && strcmp(path, "/healthz") == 0) { /* open: probes carry no token */
        healthz(d, out);
        return;
    }
    /* The page's own code (no data in it) is served to anyone: the sign-in
     * form is in it. Everything else needs a token when tokens are asked. */
    const web_asset *a = get && strncmp(path, "/api/", 5) != 0 ? web_asset_find(path) : NULL;
    if (a) {
        out->body = malloc(a->len);
        if (!out->body) {
            out->status = 503;
            return;
        }
        memcpy(out->body, a->data, a->len);
        out->len = a->len;
        out->status = 200;
        out->content_type = a->content_type;
        return;
    }
    web_user who = {0};
    bool authed = d->http_users &&
                  web_users_check(d->http_users, http_incoming_header(in, "Authorization"), &who);
    if (d->http_users && !authed) {
        http_text(out, 401, "a bearer token is required (Authorization: Bearer TOKEN)\n");
        out->headers = AUTH_HEADERS;
        return;
    }
    if (post) {
        daemon_web_action(d, in, &who, out);
    } else if (strcmp(path, "/metrics") == 0) {
        metrics_scraped(d);
        daemon_prom_metrics(d, out);
    } else if (strcmp(path, "/status") == 0) {
        status(d, out);
    } else if (strcmp(path, "/api/me") == 0) {
        whoami(d, &who, authed, out);
    } else if (strncmp(path, "/api/", 5) == 0) {
        web_api(d, in, out);
    } /* else 404 */
}

/* The HTTP listener on --listen (none for "off"): OOPSD_OK, or the reason said. */
int daemon_listen_http(server_state *d)
{
    if (strcmp(d->o.listen, "off") == 0)
        return OOPSD_OK;
    /* Every method reaches on_http (it answers 405 but to GET) so that it
     * sees the Authorization header; a request has no business with a body. */
    char err[1024];
    http_serve_options so = {
        .handler = on_http, .ud = d, .max_body = 4096, .headers = PAGE_HEADERS};
    d->http = http_server_serve(&d->loop, d->o.listen, &so, err, sizeof err);
    if (!d->http) {
        fprintf(stderr, "oopsd: %s\n", err);
        return OOPSD_BAD_INPUT;
    }
    return OOPSD_OK;
}
