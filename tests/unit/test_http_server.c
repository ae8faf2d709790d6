/* Tests for http_server: a real uv loop runs on the test's main thread,
 * a second thread makes real HTTP requests with libcurl and then wakes
 * the loop through a uv_async_t, which closes the server so uv_run ends.
 * The client thread only records results; all assertions happen on the
 * main thread after it has been joined (cmocka is not thread-safe). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "http_server.h"

#define MAX_REPLIES 4

typedef struct reply {
    CURLcode rc;
    long status;
    long new_connections; /* CURLINFO_NUM_CONNECTS: 0 = keep-alive reuse */
    char body[256];
    size_t body_len;
    char content_type[128];
    char allow[32];
    char always[32]; /* X-Always: http_serve_options.headers */
    char answer[32]; /* X-Answer: a deferred answer's own header */
} reply;

typedef struct fixture fixture;
typedef void (*client_fn)(fixture *f);

struct fixture {
    uv_loop_t loop;
    uv_async_t done; /* client thread -> loop: "finished, shut down" */
    http_server *srv;
    int port;
    char host[64]; /* as in a URL: "127.0.0.1", "[::1]" */
    client_fn client;
    atomic_int server_closed; /* set on the loop thread, read by client */

    /* written by the handler (loop thread) */
    int calls;
    pthread_t handler_thread;
    char last_path[128];
    char last_method[16];
    char *last_body; /* malloc'd copy of the body (serve handler) */
    size_t last_body_len;
    int last_body_terminated; /* body[body_len] was NUL */
    char event_id[64];        /* header looked up as "x-oops-event-id" */
    int has_missing_header;   /* lookup of an absent header was not NULL */
    char x_headers[256];      /* "Name=value;" for each X-* header, in order */
    int nheaders;             /* what http_incoming_headers returned */
    char version[16];         /* in->version */
    char local[64], peer[64]; /* http_incoming_local_addr, _peer_addr */

    /* written by the client thread, read after join */
    pthread_t client_thread;
    reply replies[MAX_REPLIES];
    int nreplies;
    CURLcode after_close_rc;
    int opened;             /* raw connections the client got connected */
    int server_closed_them; /* ... of which the server closed (EOF/reset) */
    int continued;          /* ... that got "100 Continue" */

    /* deferred answers (setup_defer): the handler is defer_handler */
    int defer_handles; /* later and kick are open */
    uv_timer_t later;  /* answers "/defer-timer" */
    uv_async_t kick;   /* client -> loop: answer every ticket, last first */
    uint64_t tickets[HTTP_DEFER_MAX + 4];
    int ntickets;                      /* deferred so far */
    int not_deferred;                  /* http_defer returned 0 */
    int answer_rc[HTTP_DEFER_MAX + 4]; /* http_server_answer for tickets[i] */
    int again_rc, unknown_rc, zero_rc; /* answered twice, unknown ticket, ticket 0 */
    atomic_int deferred;               /* = ntickets, for the client thread */
    atomic_int answered;               /* kick ran */
    int waits_failed;                  /* the client gave up waiting for one of those */
    int distinct_answers;              /* 200 "answer I" read, each I once */
};

/* ---- the handler under test ------------------------------------------- */

static char *dup_str(const char *s, size_t *len)
{
    *len = strlen(s);
    char *p = malloc(*len + 1);
    memcpy(p, s, *len + 1);
    return p;
}

static void handler(void *ud, const char *method, const char *path, http_response *out)
{
    fixture *f = ud;

    (void)method;
    f->calls++;
    f->handler_thread = pthread_self();
    snprintf(f->last_path, sizeof f->last_path, "%s", path);

    if (strcmp(path, "/healthz") == 0) {
        out->status = 200;
        out->content_type = "application/json";
        out->body = dup_str("{\"ok\":true}", &out->len);
    } else if (strcmp(path, "/down") == 0) {
        out->status = 503;
        out->content_type = "text/plain";
        out->body = dup_str("down\n", &out->len);
    } else if (strcmp(path, "/count") == 0) {
        char buf[32];
        snprintf(buf, sizeof buf, "call %d", f->calls);
        out->body = dup_str(buf, &out->len); /* status 0 -> 200 */
    } else if (strcmp(path, "/quit") == 0) {
        http_server_close(f->srv); /* closing from inside a request */
        f->srv = NULL;
        atomic_store(&f->server_closed, 1);
    }
    /* anything else: body left NULL -> 404 */
}

/* The handler of servers started with http_server_serve. */
static void add_x_header(void *ud, const char *name, const char *value)
{
    fixture *f = ud;
    size_t used = strlen(f->x_headers);

    if (strncasecmp(name, "X-", 2) == 0)
        snprintf(f->x_headers + used, sizeof f->x_headers - used, "%s=%s;", name, value);
}

static void serve_handler(void *ud, const http_incoming *in, http_response *out)
{
    fixture *f = ud;
    const char *id = http_incoming_header(in, "x-oops-event-id");

    f->calls++;
    f->handler_thread = pthread_self();
    snprintf(f->last_path, sizeof f->last_path, "%s", in->path);
    snprintf(f->last_method, sizeof f->last_method, "%s", in->method);
    free(f->last_body);
    f->last_body = malloc(in->body_len + 1);
    memcpy(f->last_body, in->body, in->body_len + 1);
    f->last_body_len = in->body_len;
    f->last_body_terminated = in->body[in->body_len] == '\0';
    snprintf(f->event_id, sizeof f->event_id, "%s", id ? id : "-");
    f->has_missing_header = http_incoming_header(in, "X-Not-Sent") != NULL;
    f->x_headers[0] = '\0';
    f->nheaders = http_incoming_headers(in, add_x_header, f);
    snprintf(f->version, sizeof f->version, "%s", in->version);
    if (http_incoming_local_addr(in, f->local, sizeof f->local) != 0)
        snprintf(f->local, sizeof f->local, "?");
    if (http_incoming_peer_addr(in, f->peer, sizeof f->peer) != 0)
        snprintf(f->peer, sizeof f->peer, "?");

    if (strcmp(in->path, "/echo") == 0) { /* 201 with the body back */
        out->status = 201;
        out->content_type = "application/octet-stream";
        out->body = malloc(in->body_len + 1);
        memcpy(out->body, in->body, in->body_len);
        out->len = in->body_len;
    } else if (strcmp(in->path, "/quit") == 0) {
        http_server_close(f->srv);
        f->srv = NULL;
        atomic_store(&f->server_closed, 1);
    } else {
        out->status = 204;
    }
}

/* ---- client side (runs on the second thread) ----------------------------- */

static size_t on_body(char *data, size_t size, size_t n, void *ud)
{
    reply *r = ud;
    size_t len = size * n;
    size_t room = sizeof r->body - 1 - r->body_len;
    size_t take = len < room ? len : room;

    memcpy(r->body + r->body_len, data, take);
    r->body_len += take;
    r->body[r->body_len] = '\0';
    return len;
}

/* The value of header line `line` into dst when it is header `name:`. */
static void header_value(const char *line, size_t len, const char *name, char *dst, size_t dstlen)
{
    size_t start = strlen(name), end = len;

    if (len <= start || strncasecmp(line, name, start) != 0)
        return;
    while (start < end && line[start] == ' ')
        start++;
    while (end > start && (line[end - 1] == '\r' || line[end - 1] == '\n'))
        end--;
    snprintf(dst, dstlen, "%.*s", (int)(end - start), line + start);
}

static size_t on_header(char *line, size_t size, size_t n, void *ud)
{
    reply *r = ud;
    size_t len = size * n;

    header_value(line, len, "Allow:", r->allow, sizeof r->allow);
    header_value(line, len, "X-Always:", r->always, sizeof r->always);
    header_value(line, len, "X-Answer:", r->answer, sizeof r->answer);
    header_value(line, len, "Content-Type:", r->content_type, sizeof r->content_type);
    return len;
}

static CURL *client_new(void)
{
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROXY, ""); /* ignore http_proxy env */
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    return c;
}

static CURLcode perform(fixture *f, CURL *c, const char *path, reply *r)
{
    char url[256];
    char *ct = NULL;

    snprintf(url, sizeof url, "http://%s:%d%s", f->host, f->port, path);
    memset(r, 0, sizeof *r);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    r->rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &r->new_connections);
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    if (ct)
        snprintf(r->content_type, sizeof r->content_type, "%s", ct);
    return r->rc;
}

/* A request with a body: method "POST" or "PUT"; chunked = no
 * Content-Length (Transfer-Encoding: chunked); headers NULL-terminated. */
typedef struct upload {
    const char *data;
    size_t len, off;
} upload;

static size_t on_read(char *dst, size_t size, size_t n, void *ud)
{
    upload *u = ud;
    size_t room = size * n, left = u->len - u->off;
    size_t take = left < room ? left : room;

    if (take > 7)
        take = 7; /* several chunks */
    memcpy(dst, u->data + u->off, take);
    u->off += take;
    return take;
}

static CURLcode send_body(fixture *f, CURL *c, const char *method, const char *path,
                          const char *body, size_t len, int chunked, const char *const *headers)
{
    struct curl_slist *h = NULL;
    upload u = {body, len, 0};
    CURLcode rc;

    for (; headers && *headers; headers++)
        h = curl_slist_append(h, *headers);
    if (chunked) {
        h = curl_slist_append(h, "Transfer-Encoding: chunked");
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(c, CURLOPT_READDATA, &u);
    } else {
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    }
    if (strcmp(method, "POST") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    rc = perform(f, c, path, &f->replies[f->nreplies++]);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(h);
    return rc;
}

static void send_one(fixture *f, const char *method, const char *path, const char *body, size_t len,
                     int chunked, const char *const *headers)
{
    CURL *c = client_new();

    send_body(f, c, method, path, body, len, chunked, headers);
    curl_easy_cleanup(c);
}

static void get_one(fixture *f, const char *path)
{
    CURL *c = client_new();
    perform(f, c, path, &f->replies[f->nreplies++]);
    curl_easy_cleanup(c);
}

static void *client_main(void *arg)
{
    fixture *f = arg;

    f->client_thread = pthread_self();
    f->client(f);
    uv_async_send(&f->done);
    return NULL;
}

/* ---- loop side ----------------------------------------------------------- */

static void on_done(uv_async_t *a)
{
    fixture *f = a->data;

    if (f->defer_handles) {
        uv_close((uv_handle_t *)&f->later, NULL);
        uv_close((uv_handle_t *)&f->kick, NULL);
        f->defer_handles = 0;
    }
    http_server_close(f->srv);
    f->srv = NULL;
    atomic_store(&f->server_closed, 1);
    uv_close((uv_handle_t *)a, NULL);
}

/* Runs the loop on this thread until the client is done and the server
 * and async handles are closed, i.e. until nothing is left on the loop. */
static void run_client(fixture *f, client_fn client)
{
    pthread_t t;

    f->client = client;
    assert_int_equal(pthread_create(&t, NULL, client_main, f), 0);
    assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
}

static void run_without_client(fixture *f)
{
    uv_async_send(&f->done);
    assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
}

static int count_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;

    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* max_body < 0: a GET-only server (http_server_start); else one from
 * http_server_serve with that limit (0 = the default). */
static int setup_with(void **state, long max_body)
{
    char err[256] = "";
    fixture *f = calloc(1, sizeof *f);

    if (!f || uv_loop_init(&f->loop) != 0)
        return -1;
    snprintf(f->host, sizeof f->host, "127.0.0.1");
    uv_async_init(&f->loop, &f->done, on_done);
    f->done.data = f;
    if (max_body < 0) {
        f->srv = http_server_start(&f->loop, "127.0.0.1:0", handler, f, err, sizeof err);
    } else {
        static const char *const always[] = {"X-Always", "yes", NULL};
        http_serve_options o = {
            .handler = serve_handler, .ud = f, .max_body = (size_t)max_body, .headers = always};
        f->srv = http_server_serve(&f->loop, "127.0.0.1:0", &o, err, sizeof err);
    }
    if (!f->srv) {
        fprintf(stderr, "setup: %s\n", err);
        return -1;
    }
    f->port = http_server_port(f->srv);
    *state = f;
    return 0;
}

static int setup(void **state) { return setup_with(state, -1); }
static int setup_serve(void **state) { return setup_with(state, 0); }
#define SMALL_LIMIT 16
static int setup_serve_small(void **state) { return setup_with(state, SMALL_LIMIT); }

/* uv_loop_close fails with UV_EBUSY if any handle were still open, so this
 * checks that http_server_close released its handles. */
static int teardown(void **state)
{
    fixture *f = *state;
    int rc = uv_loop_close(&f->loop);

    free(f->last_body);
    free(f);
    return rc == 0 ? 0 : -1;
}

/* ---- tests --------------------------------------------------------------- */

static void client_healthz(fixture *f) { get_one(f, "/healthz"); }

static void test_get_200_with_body_and_content_type(void **state)
{
    fixture *f = *state;

    assert_true(f->port > 0);
    run_client(f, client_healthz);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 200);
    assert_string_equal(f->replies[0].body, "{\"ok\":true}");
    assert_string_equal(f->replies[0].content_type, "application/json");
    assert_int_equal(f->calls, 1);
}

static void client_down(fixture *f) { get_one(f, "/down"); }

static void test_handler_status_is_returned(void **state)
{
    fixture *f = *state;

    run_client(f, client_down);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 503);
    assert_string_equal(f->replies[0].body, "down\n");
}

static void client_unknown(fixture *f) { get_one(f, "/nope"); }

static void test_unknown_path_is_404_empty(void **state)
{
    fixture *f = *state;

    run_client(f, client_unknown);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 404);
    assert_int_equal(f->replies[0].body_len, 0);
    assert_int_equal(f->calls, 1);
    assert_string_equal(f->last_path, "/nope");
}

static void client_post(fixture *f)
{
    CURL *c = client_new();

    curl_easy_setopt(c, CURLOPT_POSTFIELDS, "a=1&b=2");
    perform(f, c, "/healthz", &f->replies[f->nreplies++]);
    curl_easy_cleanup(c);
}

static void test_post_is_405_without_calling_handler(void **state)
{
    fixture *f = *state;

    run_client(f, client_post);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 405);
    assert_string_equal(f->replies[0].allow, "GET");
    assert_int_equal(f->calls, 0);
}

static void test_handler_runs_on_loop_thread(void **state)
{
    fixture *f = *state;

    run_client(f, client_healthz);
    assert_int_equal(f->calls, 1);
    assert_true(pthread_equal(f->handler_thread, pthread_self()));
    assert_false(pthread_equal(f->handler_thread, f->client_thread));
}

/* Same easy handle twice: the second request must reuse the keep-alive
 * connection, which exercises MHD's edge-triggered epoll via uv_poll. */
static void client_two_requests(fixture *f)
{
    CURL *c = client_new();

    perform(f, c, "/count", &f->replies[f->nreplies++]);
    perform(f, c, "/count", &f->replies[f->nreplies++]);
    curl_easy_cleanup(c);
}

static void test_two_sequential_requests(void **state)
{
    fixture *f = *state;

    run_client(f, client_two_requests);
    assert_int_equal(f->nreplies, 2);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 200);
    assert_string_equal(f->replies[0].body, "call 1");
    assert_string_equal(f->replies[0].content_type, "text/plain; charset=utf-8");
    assert_int_equal(f->replies[1].rc, CURLE_OK);
    assert_int_equal(f->replies[1].status, 200);
    assert_string_equal(f->replies[1].body, "call 2");
    assert_int_equal(f->replies[1].new_connections, 0);
    assert_int_equal(f->calls, 2);
}

static void client_query(fixture *f) { get_one(f, "/healthz?verbose=1&x=%2F"); }

static void test_query_string_is_not_in_path(void **state)
{
    fixture *f = *state;

    run_client(f, client_query);
    assert_int_equal(f->replies[0].status, 200);
    assert_string_equal(f->last_path, "/healthz");
}

static void test_busy_port_gives_error(void **state)
{
    fixture *f = *state;
    char listen[64], err[256] = "", want[160];
    http_server *second;

    snprintf(listen, sizeof listen, "127.0.0.1:%d", f->port);
    second = http_server_start(&f->loop, listen, handler, f, err, sizeof err);
    assert_null(second);
    snprintf(want, sizeof want, "cannot listen on %s: Address already in use", listen);
    assert_string_equal(err, want);
    run_without_client(f);
}

static void test_bad_listen_address_gives_error(void **state)
{
    fixture *f = *state;
    const char *bad[] = {
        "nonsense",        ":80",         "127.0.0.1:",     "127.0.0.1:99999", "127.0.0.1:-1",
        "example.com:80",  "::1:80",      "[::1]",          "[::1]:",          "[::1:80",
        "::1]:80",         "[]:80",       "[127.0.0.1]:80", "[::1]x:80",       "[::g]:80",
        "[fe80::1%lo]:80", "[::1]:99999", "[::1]:http",     "[localhost]:80"};
    char err[256];

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char want[160];
        err[0] = '\0';
        assert_null(http_server_start(&f->loop, bad[i], handler, f, err, sizeof err));
        snprintf(want, sizeof want, "cannot listen on %s: ", bad[i]);
        assert_memory_equal(err, want, strlen(want));
    }
    /* the whole message names the address and the accepted forms */
    assert_null(http_server_start(&f->loop, "::1:7070", handler, f, err, sizeof err));
    assert_string_equal(err, "cannot listen on ::1:7070: invalid address "
                             "(want IPV4:PORT, [IPV6]:PORT or localhost:PORT)");
    /* err is optional */
    assert_null(http_server_start(&f->loop, "nonsense", handler, f, NULL, 0));
    run_without_client(f);
}

static void test_listen_on_localhost(void **state)
{
    fixture *f = *state;
    char err[256] = "";

    /* Swap the fixture's server for one on "localhost"; the client still
     * talks to 127.0.0.1. */
    http_server_close(f->srv);
    f->srv = http_server_start(&f->loop, "localhost:0", handler, f, err, sizeof err);
    assert_non_null(f->srv);
    f->port = http_server_port(f->srv);
    run_client(f, client_healthz);
    assert_int_equal(f->replies[0].status, 200);
}

/* Holds a keep-alive connection open while the server closes, then checks
 * that the port no longer accepts connections. */
static void client_hold_connection(fixture *f)
{
    CURL *c = client_new();
    reply r;

    perform(f, c, "/healthz", &f->replies[f->nreplies++]);
    uv_async_send(&f->done);
    for (int i = 0; i < 5000 && !atomic_load(&f->server_closed); i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    curl_easy_cleanup(c);

    c = client_new();
    f->after_close_rc = perform(f, c, "/healthz", &r);
    curl_easy_cleanup(c);
}

static void test_close_releases_everything(void **state)
{
    fixture *f = *state;
    int fds_with_server = count_open_fds();

    run_client(f, client_hold_connection);
    assert_int_equal(f->replies[0].status, 200);
    assert_int_equal(f->after_close_rc, CURLE_COULDNT_CONNECT);
    /* listening socket and MHD's epoll fd are gone (the client is joined,
     * so its sockets are closed too) */
    assert_int_equal(count_open_fds(), fds_with_server - 2);
    /* memory: checked by ASan/LSan; handles: by teardown's uv_loop_close */
    http_server_close(NULL);
}

static void client_quit(fixture *f)
{
    CURL *c = client_new();

    perform(f, c, "/quit", &f->replies[f->nreplies++]);
    curl_easy_cleanup(c);
}

static void test_close_from_inside_handler(void **state)
{
    fixture *f = *state;

    run_client(f, client_quit);
    assert_int_equal(f->calls, 1);
    assert_null(f->srv);
    /* The in-flight response may or may not make it out; what matters is
     * that nothing crashes or leaks and the loop winds down. */
}

/* ---- servers from http_server_serve ----------------------------------- */

#define WEBHOOK_BODY "{\"id\":\"e1\",\"type\":\"x\"}"

static void client_post_webhook(fixture *f)
{
    const char *const headers[] = {"Content-Type: application/json", "X-Oops-Event-Id: e1",
                                   "X-Oops-Server: s-1", "Expect:", NULL};

    send_one(f, "POST", "/echo", WEBHOOK_BODY, strlen(WEBHOOK_BODY), 0, headers);
}

static void test_serve_post_body_and_headers_reach_handler(void **state)
{
    fixture *f = *state;

    run_client(f, client_post_webhook);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 201);
    assert_string_equal(f->replies[0].body, WEBHOOK_BODY);
    assert_string_equal(f->replies[0].content_type, "application/octet-stream");
    assert_int_equal(f->calls, 1);
    assert_true(pthread_equal(f->handler_thread, pthread_self()));
    assert_string_equal(f->last_method, "POST");
    assert_string_equal(f->last_path, "/echo");
    assert_int_equal(f->last_body_len, strlen(WEBHOOK_BODY));
    assert_string_equal(f->last_body, WEBHOOK_BODY);
    assert_true(f->last_body_terminated);
    /* looked up in lower case, sent as X-Oops-Event-Id */
    assert_string_equal(f->event_id, "e1");
    assert_false(f->has_missing_header);
    /* the walk sees every header with its spelling, in order */
    assert_string_equal(f->x_headers, "X-Oops-Event-Id=e1;X-Oops-Server=s-1;");
    /* Host, Accept, Content-Type, Content-Length and the two X- ones */
    assert_true(f->nheaders >= 6);
    assert_string_equal(f->version, "HTTP/1.1");
    assert_string_equal(f->local, "127.0.0.1");
    assert_string_equal(f->peer, "127.0.0.1");
    assert_string_equal(f->replies[0].always, "yes"); /* http_serve_options.headers */
}

static void client_put_binary(fixture *f)
{
    const char *const headers[] = {"Expect:", NULL};

    send_one(f, "PUT", "/echo", "a\0b\0c", 5, 0, headers);
}

static void test_serve_put_binary_body(void **state)
{
    fixture *f = *state;

    run_client(f, client_put_binary);
    assert_int_equal(f->replies[0].status, 201);
    assert_int_equal(f->replies[0].body_len, 5);
    assert_memory_equal(f->replies[0].body, "a\0b\0c", 5);
    assert_string_equal(f->last_method, "PUT");
    assert_int_equal(f->last_body_len, 5);
    assert_memory_equal(f->last_body, "a\0b\0c", 5);
    assert_true(f->last_body_terminated);
}

static void client_get_plain(fixture *f) { get_one(f, "/plain?q=1"); }

static void test_serve_get_has_empty_body(void **state)
{
    fixture *f = *state;

    run_client(f, client_get_plain);
    assert_int_equal(f->replies[0].status, 204);
    assert_string_equal(f->last_method, "GET");
    assert_string_equal(f->last_path, "/plain");
    assert_int_equal(f->last_body_len, 0);
    assert_string_equal(f->last_body, "");
    assert_string_equal(f->event_id, "-");
    assert_string_equal(f->x_headers, "");
}

/* SMALL_LIMIT bytes pass, one more is 413 without the handler. */
static void client_at_and_over_small_limit(fixture *f)
{
    const char *const headers[] = {"Expect:", NULL};
    char body[SMALL_LIMIT + 2];

    memset(body, 'x', sizeof body);
    send_one(f, "POST", "/echo", body, SMALL_LIMIT, 0, headers);
    send_one(f, "POST", "/echo", body, SMALL_LIMIT + 1, 0, headers);
}

static void test_serve_body_limit_with_content_length(void **state)
{
    fixture *f = *state;

    run_client(f, client_at_and_over_small_limit);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 201);
    assert_int_equal(f->replies[0].body_len, SMALL_LIMIT);
    assert_int_equal(f->replies[1].rc, CURLE_OK);
    assert_int_equal(f->replies[1].status, 413);
    assert_int_equal(f->calls, 1);
    assert_int_equal(f->last_body_len, SMALL_LIMIT);
    /* the options' headers are on every response, the server's own 413 too */
    assert_string_equal(f->replies[0].always, "yes");
    assert_string_equal(f->replies[1].always, "yes");
}

/* Chunked: the size is known only while reading. Over the limit: read,
 * dropped, 413; the connection stays usable for the next request. */
static void client_chunked(fixture *f)
{
    const char *const headers[] = {"Expect:", NULL};
    const char *big = "0123456789012345678901234567890123456789"; /* 40 */
    CURL *c = client_new();

    send_body(f, c, "POST", "/echo", big, strlen(big), 1, headers);
    send_body(f, c, "POST", "/echo", "chunked ok", 10, 1, headers);
    curl_easy_cleanup(c);
}

static void test_serve_body_limit_chunked(void **state)
{
    fixture *f = *state;

    run_client(f, client_chunked);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 413);
    assert_int_equal(f->replies[1].rc, CURLE_OK);
    assert_int_equal(f->replies[1].status, 201);
    assert_string_equal(f->replies[1].body, "chunked ok");
    assert_int_equal(f->calls, 1);
    assert_string_equal(f->last_body, "chunked ok");
}

/* The default limit is 1 MiB: exactly that passes, one byte more is 413
 * (curl sends Expect: 100-continue for these sizes, so the 413 comes
 * before the body). */
static void client_default_limit(fixture *f)
{
    size_t n = HTTP_DEFAULT_MAX_BODY + 1;
    char *body = malloc(n);

    memset(body, 'y', n);
    send_one(f, "POST", "/big", body, n - 1, 0, NULL);
    send_one(f, "POST", "/big", body, n, 0, NULL);
    free(body);
}

static void test_serve_default_limit_is_1mib(void **state)
{
    fixture *f = *state;

    assert_int_equal(HTTP_DEFAULT_MAX_BODY, 1048576);
    run_client(f, client_default_limit);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 204);
    assert_int_equal(f->replies[1].status, 413);
    assert_int_equal(f->calls, 1);
    assert_int_equal(f->last_body_len, HTTP_DEFAULT_MAX_BODY);
    assert_int_equal(f->last_body[HTTP_DEFAULT_MAX_BODY - 1], 'y');
}

static void client_quit_post(fixture *f)
{
    const char *const headers[] = {"Expect:", NULL};

    send_one(f, "POST", "/quit", "bye", 3, 0, headers);
}

static void test_serve_close_from_inside_handler(void **state)
{
    fixture *f = *state;

    run_client(f, client_quit_post);
    assert_int_equal(f->calls, 1);
    assert_null(f->srv);
    assert_string_equal(f->last_body, "bye");
}

static void client_put(fixture *f)
{
    CURL *c = client_new();

    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, "x");
    perform(f, c, "/healthz", &f->replies[f->nreplies++]);
    curl_easy_cleanup(c);
}

static void test_get_only_server_refuses_put(void **state)
{
    fixture *f = *state;

    run_client(f, client_put);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 405);
    assert_string_equal(f->replies[0].allow, "GET");
    assert_int_equal(f->calls, 0);
}

static void test_serve_without_handler_gives_error(void **state)
{
    fixture *f = *state;
    http_serve_options o = {0};
    char err[256] = "";

    assert_null(http_server_serve(&f->loop, "127.0.0.1:0", &o, err, sizeof err));
    assert_string_equal(err, "cannot listen on 127.0.0.1:0: no loop or handler given");
    assert_null(http_server_serve(&f->loop, "127.0.0.1:0", NULL, err, sizeof err));
    run_without_client(f);
}

/* An unref'd server does not keep the loop alive by itself... */
static void test_unref_server_does_not_keep_loop_alive(void **state)
{
    fixture *f = *state;

    uv_close((uv_handle_t *)&f->done, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT);      /* the async handle is gone */
    assert_true(uv_loop_alive(&f->loop)); /* the server keeps it alive */
    http_server_unref(f->srv);
    assert_false(uv_loop_alive(&f->loop));
    http_server_close(f->srv);
    f->srv = NULL;
    assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
}

/* ...but still answers while something else does. */
static void test_unref_server_still_answers(void **state)
{
    fixture *f = *state;

    http_server_unref(f->srv);
    run_client(f, client_post_webhook);
    assert_int_equal(f->replies[0].status, 201);
    assert_int_equal(f->calls, 1);
}

/* ---- limits: floods of idle and slow connections (issue 10) ---------- */

/* Bounds that only stop a hung test, never timed assertions. */
#define CONNECT_BOUND_MS 20000
#define DROP_BOUND_MS ((HTTP_HEADER_TIMEOUT_S + HTTP_IDLE_TIMEOUT_S + 30) * 1000)

static long long mono_ms(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000}, NULL);
}

/* Opens n raw TCP connections to the server at once (non-blocking) and
 * waits until they are connected; those that are not within the bound are
 * closed and left at -1. Sends `payload` on each one connected. Returns
 * how many are connected. */
static int open_many(fixture *f, int *fds, int n, const char *payload)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->port)};
    long long end = mono_ms() + CONNECT_BOUND_MS;
    int connected = 0;

    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fds[i] >= 0 && connect(fds[i], (struct sockaddr *)&sa, sizeof sa) != 0 &&
            errno != EINPROGRESS) {
            close(fds[i]);
            fds[i] = -1;
        }
    }
    for (int i = 0; i < n; i++) {
        struct pollfd p = {fds[i], POLLOUT, 0};
        int e = 0;
        socklen_t elen = sizeof e;
        long long left = end - mono_ms();

        if (fds[i] < 0)
            continue;
        if (poll(&p, 1, left > 0 ? (int)left : 0) != 1 ||
            getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &e, &elen) != 0 || e != 0) {
            close(fds[i]);
            fds[i] = -1;
            continue;
        }
        connected++;
        if (payload)
            send(fds[i], payload, strlen(payload), MSG_NOSIGNAL);
    }
    return connected;
}

/* GETs path until the server answers it, within a bound: connections the
 * client just closed may still count against the cap until the server's
 * next run reaps them, and a new one arriving meanwhile is refused. */
static void get_until_answered(fixture *f, const char *path)
{
    long long end = mono_ms() + CONNECT_BOUND_MS;
    reply *r = &f->replies[f->nreplies++];
    CURL *c = client_new();

    while (perform(f, c, path, r) != CURLE_OK && mono_ms() < end)
        sleep_ms(100);
    curl_easy_cleanup(c);
}

static void close_many(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Has the server closed this connection (EOF or reset)? Data is read and
 * dropped. */
static int closed_by_server(int fd)
{
    char buf[512];
    ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);

    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* More idle connections than MHD's old limit (64), opened and closed
 * without a byte sent: the server must keep answering. */
#define IDLE_FLOOD 100

static void client_idle_flood(fixture *f)
{
    int fds[IDLE_FLOOD];

    f->opened = open_many(f, fds, IDLE_FLOOD, NULL);
    get_one(f, "/healthz"); /* while they are open */
    close_many(fds, IDLE_FLOOD);
    get_one(f, "/healthz"); /* once they are closed */
    get_one(f, "/healthz");
}

static void test_idle_connections_opened_and_closed_do_not_exhaust(void **state)
{
    fixture *f = *state;

    run_client(f, client_idle_flood);
    assert_int_equal(f->opened, IDLE_FLOOD);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(f->replies[i].rc, CURLE_OK);
        assert_int_equal(f->replies[i].status, 200);
    }
    assert_int_equal(f->calls, 3);
}

/* A slowloris: more connections than the cap, each sending a request line
 * and then one header line now and then, never the end of the headers. A
 * normal request is still answered while they are open, the server
 * itself drops every one of them (the oldest to make room at the cap, the
 * rest after the header timeout, however they trickle), and it answers
 * afterwards. */
#define SLOW_FLOOD 200

static void client_slowloris(fixture *f)
{
    int fds[SLOW_FLOOD];
    int open;
    long long end, next_trickle = 0;

    f->opened = open_many(f, fds, SLOW_FLOOD, "GET /healthz HTTP/1.1\r\nHost: slow\r\n");
    get_one(f, "/healthz");
    open = f->opened;
    end = mono_ms() + DROP_BOUND_MS;
    while (open > 0 && mono_ms() < end) {
        int trickle = mono_ms() >= next_trickle;

        for (int i = 0; i < SLOW_FLOOD; i++) {
            if (fds[i] < 0)
                continue;
            if (closed_by_server(fds[i]) ||
                (trickle && send(fds[i], "X-Slow: 1\r\n", 11, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
                 errno != EAGAIN)) {
                close(fds[i]);
                fds[i] = -1;
                f->server_closed_them++;
                open--;
            }
        }
        if (trickle)
            next_trickle = mono_ms() + 1000;
        sleep_ms(100);
    }
    close_many(fds, SLOW_FLOOD);
    get_one(f, "/healthz");
}

static void test_slowloris_is_dropped_and_requests_still_answered(void **state)
{
    fixture *f = *state;

    assert_true(SLOW_FLOOD > HTTP_MAX_CONNECTIONS);
    run_client(f, client_slowloris);
    assert_int_equal(f->opened, SLOW_FLOOD);
    assert_int_equal(f->replies[0].rc, CURLE_OK); /* during the slowloris */
    assert_int_equal(f->replies[0].status, 200);
    assert_int_equal(f->server_closed_them, SLOW_FLOOD);
    assert_int_equal(f->replies[1].rc, CURLE_OK); /* after it */
    assert_int_equal(f->replies[1].status, 200);
    assert_int_equal(f->calls, 2); /* no slow request reached the handler */
}

/* At the cap with every connection busy in a request (headers complete,
 * body still coming: "100 Continue" proves the server has read the
 * headers), a new connection is closed at once rather than left hanging;
 * once those requests go away the server answers again. */
static void client_cap_full_of_uploads(fixture *f)
{
    int fds[HTTP_MAX_CONNECTIONS];
    long long end;

    f->opened = open_many(f, fds, HTTP_MAX_CONNECTIONS,
                          "POST /slow HTTP/1.1\r\nHost: up\r\n"
                          "Content-Length: 1000\r\nExpect: 100-continue\r\n\r\n");
    end = mono_ms() + CONNECT_BOUND_MS;
    for (int i = 0; i < (int)HTTP_MAX_CONNECTIONS; i++) {
        char buf[64];
        struct pollfd p = {fds[i], POLLIN, 0};
        long long left = end - mono_ms();
        ssize_t r;

        if (fds[i] < 0 || poll(&p, 1, left > 0 ? (int)left : 0) != 1)
            continue;
        r = recv(fds[i], buf, sizeof buf - 1, 0);
        if (r > 0) {
            buf[r] = '\0';
            f->continued += strstr(buf, " 100 ") != NULL;
        }
    }
    get_one(f, "/healthz"); /* refused */
    close_many(fds, HTTP_MAX_CONNECTIONS);
    get_until_answered(f, "/healthz");
}

static void test_cap_full_of_requests_closes_new_connections_at_once(void **state)
{
    fixture *f = *state;

    run_client(f, client_cap_full_of_uploads);
    assert_int_equal(f->opened, HTTP_MAX_CONNECTIONS);
    assert_int_equal(f->continued, HTTP_MAX_CONNECTIONS);
    /* closed by the server, not timed out by the client */
    assert_int_not_equal(f->replies[0].rc, CURLE_OK);
    assert_int_not_equal(f->replies[0].rc, CURLE_OPERATION_TIMEDOUT);
    assert_int_equal(f->replies[0].status, 0);
    assert_int_equal(f->replies[1].rc, CURLE_OK);
    assert_int_equal(f->replies[1].status, 204);
    assert_int_equal(f->calls, 1); /* the uploads never completed */
}

/* Request line + headers over the per-connection memory: 431, without the
 * handler, and the server goes on. */
static void client_big_header(fixture *f)
{
    size_t n = HTTP_CONNECTION_MEMORY + 1024;
    char *line = malloc(n + 8);
    struct curl_slist *h;
    CURL *c = client_new();

    memcpy(line, "X-Big: ", 7);
    memset(line + 7, 'a', n);
    line[n + 7] = '\0';
    h = curl_slist_append(NULL, line);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    perform(f, c, "/healthz", &f->replies[f->nreplies++]);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    free(line);
    get_one(f, "/healthz");
}

static void test_header_block_over_the_limit_is_431(void **state)
{
    fixture *f = *state;

    run_client(f, client_big_header);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 431);
    assert_int_equal(f->replies[1].status, 200);
    assert_int_equal(f->calls, 1);
}

/* ---- deferred answers (http_defer, http_server_answer) ----------------- */

#define HOLD_REQUEST "GET /defer-hold HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"

static const char *const answer_headers[] = {"X-Answer", "later", NULL};

/* Answers ticket with status and a copy of body, as JSON with X-Answer. */
static int answer(fixture *f, uint64_t ticket, int status, const char *body)
{
    http_response r = {
        .status = status, .content_type = "application/json", .headers = answer_headers};

    r.body = dup_str(body, &r.len);
    return http_server_answer(f->srv, ticket, &r);
}

/* "/defer-timer" is answered by this, 20 ms later; then it tries the same
 * ticket again, one never given and 0. */
static void on_later(uv_timer_t *t)
{
    fixture *f = t->data;

    f->answer_rc[0] = answer(f, f->tickets[0], 202, "{\"done\":1}");
    f->again_rc = answer(f, f->tickets[0], 200, "again");
    f->unknown_rc = answer(f, f->tickets[0] + 1000, 200, "unknown");
    f->zero_rc = answer(f, 0, 200, "zero");
}

/* Every ticket so far, the last one first: "answer I" for tickets[I]. */
static void answer_all(fixture *f)
{
    for (int i = f->ntickets - 1; i >= 0; i--) {
        char body[32];
        snprintf(body, sizeof body, "answer %d", i);
        f->answer_rc[i] = answer(f, f->tickets[i], 200, body);
    }
    atomic_store(&f->answered, 1);
}

static void on_kick(uv_async_t *a) { answer_all(a->data); }

/* Defers every request but "/plain" (204 at once) and "/release" (answers
 * every ticket, then 204): "/defer-timer" is answered by on_later,
 * "/defer-now" by the handler itself, "/defer-quit" is followed by closing
 * the server, "/defer-hold" only by a kick or "/release" (or the server:
 * 504, 503). Not deferred: 429. */
static void defer_handler(void *ud, const http_incoming *in, http_response *out)
{
    fixture *f = ud;
    uint64_t t;

    f->calls++;
    if (strcmp(in->path, "/plain") == 0 || strcmp(in->path, "/release") == 0) {
        if (strcmp(in->path, "/release") == 0)
            answer_all(f);
        out->status = 204;
        return;
    }
    t = http_defer(in);
    if (t == 0) {
        f->not_deferred++;
        out->status = 429;
        out->body = dup_str("not deferred\n", &out->len);
        return;
    }
    assert_true(http_defer(in) == t); /* the same request: the same ticket */
    f->tickets[f->ntickets++] = t;
    out->status = 500; /* ignored after a ticket, its body freed */
    out->body = dup_str("ignored", &out->len);
    if (strcmp(in->path, "/defer-now") == 0)
        f->answer_rc[f->ntickets - 1] = answer(f, t, 200, "now");
    else if (strcmp(in->path, "/defer-timer") == 0)
        uv_timer_start(&f->later, on_later, 20, 0);
    else if (strcmp(in->path, "/defer-quit") == 0) {
        http_server_close(f->srv);
        f->srv = NULL;
        atomic_store(&f->server_closed, 1);
    }
    atomic_store(&f->deferred, f->ntickets);
}

static int setup_defer_with(void **state, unsigned int timeout_ms)
{
    static const char *const always[] = {"X-Always", "yes", NULL};
    http_serve_options o = {.headers = always};
    char err[256] = "";
    fixture *f = calloc(1, sizeof *f);

    if (!f || uv_loop_init(&f->loop) != 0)
        return -1;
    snprintf(f->host, sizeof f->host, "127.0.0.1");
    uv_async_init(&f->loop, &f->done, on_done);
    f->done.data = f;
    uv_timer_init(&f->loop, &f->later);
    f->later.data = f;
    uv_async_init(&f->loop, &f->kick, on_kick);
    f->kick.data = f;
    f->defer_handles = 1;
    o.handler = defer_handler;
    o.ud = f;
    f->srv = http_server_serve(&f->loop, "127.0.0.1:0", &o, err, sizeof err);
    if (!f->srv) {
        fprintf(stderr, "setup: %s\n", err);
        return -1;
    }
    if (timeout_ms != 0)
        http_server_set_defer_timeout_ms(f->srv, timeout_ms);
    f->port = http_server_port(f->srv);
    *state = f;
    return 0;
}

static int setup_defer(void **state) { return setup_defer_with(state, 0); }
#define SHORT_DEFER_MS 200
static int setup_defer_short(void **state) { return setup_defer_with(state, SHORT_DEFER_MS); }

/* Waits (bounded) until *v >= n; counts a wait given up in f. */
static void wait_for(fixture *f, atomic_int *v, int n)
{
    long long end = mono_ms() + CONNECT_BOUND_MS;

    while (atomic_load(v) < n && mono_ms() < end)
        sleep_ms(5);
    f->waits_failed += atomic_load(v) < n;
}

/* One raw connection with `payload` sent, or -1. */
static int raw_request(fixture *f, const char *payload)
{
    int fd;

    return open_many(f, &fd, 1, payload) == 1 ? fd : -1;
}

/* Reads an answer on a raw connection until the server closes it (the
 * requests say Connection: close), within a bound: r->status, body and
 * headers as on_header takes them; r->rc CURLE_OK when a status line came. */
static void read_reply(int fd, reply *r)
{
    char buf[2048];
    size_t used = 0;
    long long end = mono_ms() + CONNECT_BOUND_MS;
    char *line, *head_end;

    memset(r, 0, sizeof *r);
    r->rc = CURLE_RECV_ERROR;
    while (fd >= 0 && used < sizeof buf - 1) {
        struct pollfd p = {fd, POLLIN, 0};
        long long left = end - mono_ms();
        ssize_t n;

        if (left <= 0 || poll(&p, 1, (int)left) != 1)
            break;
        n = recv(fd, buf + used, sizeof buf - 1 - used, 0);
        if (n <= 0)
            break;
        used += (size_t)n;
    }
    buf[used] = '\0';
    head_end = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/1.%*d %ld", &r->status) != 1 || !head_end)
        return;
    r->rc = CURLE_OK;
    for (line = strstr(buf, "\r\n") + 2; line < head_end; line = strstr(line, "\r\n") + 2)
        on_header(line, 1, (size_t)(strstr(line, "\r\n") + 2 - line), r);
    snprintf(r->body, sizeof r->body, "%s", head_end + 4);
    r->body_len = strlen(r->body);
}

/* A deferred answer, then the next request on the same connection. */
static void client_defer_timer(fixture *f)
{
    CURL *c = client_new();

    perform(f, c, "/defer-timer", &f->replies[f->nreplies++]);
    perform(f, c, "/plain", &f->replies[f->nreplies++]);
    curl_easy_cleanup(c);
}

static void test_defer_answered_later_from_a_timer(void **state)
{
    fixture *f = *state;

    run_client(f, client_defer_timer);
    assert_int_equal(f->ntickets, 1);
    assert_true(f->tickets[0] != 0);
    assert_int_equal(f->answer_rc[0], 0);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 202);
    assert_string_equal(f->replies[0].body, "{\"done\":1}");
    assert_string_equal(f->replies[0].content_type, "application/json");
    assert_string_equal(f->replies[0].answer, "later");
    assert_string_equal(f->replies[0].always, "yes"); /* the server's headers too */
    /* the connection is kept alive and serves the next request */
    assert_int_equal(f->replies[1].rc, CURLE_OK);
    assert_int_equal(f->replies[1].status, 204);
    assert_int_equal(f->replies[1].new_connections, 0);
    assert_int_equal(f->calls, 2);
}

static void test_defer_answer_of_unknown_ticket_is_refused(void **state)
{
    fixture *f = *state;
    http_response r = {.status = 200};
    http_incoming fake = {0};

    /* outside any handler: nothing to defer; no server: -1, body freed */
    assert_true(http_defer(NULL) == 0);
    assert_true(http_defer(&fake) == 0);
    r.body = dup_str("freed", &r.len);
    assert_int_equal(http_server_answer(NULL, 1, &r), -1);
    assert_null(r.body);
    assert_int_equal(http_server_answer(f->srv, 1, NULL), -1);
    r.body = dup_str("freed", &r.len);
    assert_int_equal(http_server_answer(f->srv, 1, &r), -1); /* not given yet */
    assert_null(r.body);

    run_client(f, client_defer_timer);
    assert_int_equal(f->answer_rc[0], 0);
    assert_int_equal(f->again_rc, -1);   /* already answered */
    assert_int_equal(f->unknown_rc, -1); /* never given */
    assert_int_equal(f->zero_rc, -1);
    assert_int_equal(f->replies[0].status, 202);
    /* bodies of refused answers: LeakSanitizer checks they were freed */
}

static void client_defer_now(fixture *f) { get_one(f, "/defer-now"); }

static void test_defer_answered_inside_its_handler(void **state)
{
    fixture *f = *state;

    run_client(f, client_defer_now);
    assert_int_equal(f->answer_rc[0], 0);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 200);
    assert_string_equal(f->replies[0].body, "now");
    assert_string_equal(f->replies[0].always, "yes");
}

/* Two requests waiting at once, answered the other way round. */
static void client_two_deferred(fixture *f)
{
    int a = raw_request(f, HOLD_REQUEST), b;

    wait_for(f, &f->deferred, 1);
    b = raw_request(f, HOLD_REQUEST);
    wait_for(f, &f->deferred, 2);
    uv_async_send(&f->kick); /* answers b, then a */
    read_reply(a, &f->replies[f->nreplies++]);
    read_reply(b, &f->replies[f->nreplies++]);
    close(a);
    close(b);
}

static void test_two_deferred_answered_in_the_other_order(void **state)
{
    fixture *f = *state;

    run_client(f, client_two_deferred);
    assert_int_equal(f->waits_failed, 0);
    assert_int_equal(f->ntickets, 2);
    assert_true(f->tickets[0] != f->tickets[1]);
    assert_int_equal(f->answer_rc[1], 0);
    assert_int_equal(f->answer_rc[0], 0);
    assert_int_equal(f->replies[0].status, 200);
    assert_string_equal(f->replies[0].body, "answer 0");
    assert_int_equal(f->replies[1].status, 200);
    assert_string_equal(f->replies[1].body, "answer 1");
    assert_string_equal(f->replies[1].answer, "later");
    assert_string_equal(f->replies[1].always, "yes");
}

/* A request waiting, answered by the handler of another one. */
static void client_release(fixture *f)
{
    int fd = raw_request(f, HOLD_REQUEST);

    wait_for(f, &f->deferred, 1);
    get_one(f, "/release");
    read_reply(fd, &f->replies[f->nreplies++]);
    if (fd >= 0)
        close(fd);
}

static void test_defer_answered_from_another_handler(void **state)
{
    fixture *f = *state;

    run_client(f, client_release);
    assert_int_equal(f->waits_failed, 0);
    assert_int_equal(f->answer_rc[0], 0);
    assert_int_equal(f->replies[0].status, 204);
    assert_int_equal(f->replies[1].rc, CURLE_OK);
    assert_int_equal(f->replies[1].status, 200);
    assert_string_equal(f->replies[1].body, "answer 0");
}

/* HTTP_DEFER_MAX requests waiting: the next one is not deferred (the
 * handler answers it at once); once they are answered, deferring works
 * again. */
static void client_defer_max(fixture *f)
{
    int fds[HTTP_DEFER_MAX];
    int seen[HTTP_DEFER_MAX] = {0};

    f->opened = open_many(f, fds, HTTP_DEFER_MAX, HOLD_REQUEST);
    wait_for(f, &f->deferred, HTTP_DEFER_MAX);
    get_one(f, "/defer-hold"); /* the one too many */
    uv_async_send(&f->kick);
    for (int i = 0; i < (int)HTTP_DEFER_MAX; i++) {
        reply r;
        int k;

        read_reply(fds[i], &r);
        if (r.status == 200 && sscanf(r.body, "answer %d", &k) == 1 && k >= 0 &&
            k < (int)HTTP_DEFER_MAX && !seen[k]++)
            f->distinct_answers++;
    }
    close_many(fds, HTTP_DEFER_MAX);
    wait_for(f, &f->answered, 1);
    get_one(f, "/defer-now");
}

static void test_defer_max_then_not_deferred(void **state)
{
    fixture *f = *state;

    assert_int_equal(HTTP_DEFER_MAX, 32);
    run_client(f, client_defer_max);
    assert_int_equal(f->waits_failed, 0);
    assert_int_equal(f->opened, HTTP_DEFER_MAX);
    assert_int_equal(f->not_deferred, 1);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 429);
    assert_string_equal(f->replies[0].body, "not deferred\n");
    assert_int_equal(f->distinct_answers, HTTP_DEFER_MAX); /* each its own answer */
    for (int i = 0; i < (int)HTTP_DEFER_MAX; i++)
        assert_int_equal(f->answer_rc[i], 0);
    /* answered, they no longer count: the next one is deferred */
    assert_int_equal(f->ntickets, HTTP_DEFER_MAX + 1);
    assert_int_equal(f->replies[1].status, 200);
    assert_string_equal(f->replies[1].body, "now");
}

/* Never answered: the server answers 504 at the (shortened) timeout; the
 * answer that comes after is refused. */
static void client_defer_timeout(fixture *f)
{
    get_one(f, "/defer-hold");
    uv_async_send(&f->kick);
    wait_for(f, &f->answered, 1);
}

static void test_defer_not_answered_in_time_is_504(void **state)
{
    fixture *f = *state;

    run_client(f, client_defer_timeout);
    assert_int_equal(f->waits_failed, 0);
    assert_int_equal(f->ntickets, 1);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 504);
    assert_string_equal(f->replies[0].body, "no answer in time\n");
    assert_string_equal(f->replies[0].always, "yes");
    assert_int_equal(f->answer_rc[0], -1); /* too late */
}

/* The server closes while a request waits: that one is answered 503. */
static void client_close_while_deferred(fixture *f)
{
    int fd = raw_request(f, HOLD_REQUEST);

    wait_for(f, &f->deferred, 1);
    uv_async_send(&f->done); /* the loop closes the server now */
    read_reply(fd, &f->replies[f->nreplies++]);
    if (fd >= 0)
        close(fd);
}

static void test_close_with_a_deferred_request_answers_503(void **state)
{
    fixture *f = *state;

    run_client(f, client_close_while_deferred);
    assert_int_equal(f->waits_failed, 0);
    assert_int_equal(f->ntickets, 1);
    assert_null(f->srv);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 503);
    assert_string_equal(f->replies[0].body, "server closing\n");
    assert_string_equal(f->replies[0].always, "yes");
}

/* The handler defers, then closes its server: that request is answered
 * 503 and nothing stays suspended. */
static void client_defer_quit(fixture *f) { get_one(f, "/defer-quit"); }

static void test_close_from_handler_after_defer_answers_503(void **state)
{
    fixture *f = *state;

    run_client(f, client_defer_quit);
    assert_int_equal(f->ntickets, 1);
    assert_null(f->srv);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 503);
    assert_string_equal(f->replies[0].body, "server closing\n");
}

/* Clients that go away while their request waits: one is answered after
 * (0 or -1, as the server may or may not have noticed), the other is still
 * waiting when the server closes. The server goes on serving meanwhile. */
static void client_gone_while_deferred(fixture *f)
{
    int fd = raw_request(f, HOLD_REQUEST);

    wait_for(f, &f->deferred, 1);
    close(fd);
    uv_async_send(&f->kick);
    wait_for(f, &f->answered, 1);
    fd = raw_request(f, HOLD_REQUEST);
    wait_for(f, &f->deferred, 2);
    close(fd);
    get_one(f, "/plain");
}

static void test_client_gone_while_deferred(void **state)
{
    fixture *f = *state;

    run_client(f, client_gone_while_deferred);
    assert_int_equal(f->waits_failed, 0);
    assert_int_equal(f->ntickets, 2);
    assert_true(f->answer_rc[0] == 0 || f->answer_rc[0] == -1);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 204);
    /* nothing crashed, leaked or stayed suspended: ASan/LSan, uv_loop_close */
}

/* ---- IPv6 ------------------------------------------------------------- */

static int have_ipv6_loopback(void)
{
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;

    if (fd >= 0)
        close(fd);
    return ok;
}

/* Swaps the fixture's server for one listening on `listen`; the client
 * talks to [::1]. */
static void listen_ipv6(fixture *f, const char *listen)
{
    char err[256] = "";

    http_server_close(f->srv);
    f->srv = http_server_start(&f->loop, listen, handler, f, err, sizeof err);
    if (!f->srv)
        fail_msg("%s", err);
    f->port = http_server_port(f->srv);
    assert_true(f->port > 0);
    snprintf(f->host, sizeof f->host, "[::1]");
}

static void test_listen_on_ipv6_loopback(void **state)
{
    fixture *f = *state;

    listen_ipv6(f, "[::1]:0");
    run_client(f, client_healthz);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 200);
}

static void test_listen_on_ipv6_any(void **state)
{
    fixture *f = *state;

    listen_ipv6(f, "[::]:0");
    run_client(f, client_healthz);
    assert_int_equal(f->replies[0].rc, CURLE_OK);
    assert_int_equal(f->replies[0].status, 200);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_get_200_with_body_and_content_type, setup, teardown),
        cmocka_unit_test_setup_teardown(test_handler_status_is_returned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_path_is_404_empty, setup, teardown),
        cmocka_unit_test_setup_teardown(test_post_is_405_without_calling_handler, setup, teardown),
        cmocka_unit_test_setup_teardown(test_handler_runs_on_loop_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_sequential_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_query_string_is_not_in_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy_port_gives_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_listen_address_gives_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_listen_on_localhost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_releases_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_from_inside_handler, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_only_server_refuses_put, setup, teardown),
        cmocka_unit_test_setup_teardown(test_serve_post_body_and_headers_reach_handler, setup_serve,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_serve_put_binary_body, setup_serve, teardown),
        cmocka_unit_test_setup_teardown(test_serve_get_has_empty_body, setup_serve, teardown),
        cmocka_unit_test_setup_teardown(test_serve_body_limit_with_content_length,
                                        setup_serve_small, teardown),
        cmocka_unit_test_setup_teardown(test_serve_body_limit_chunked, setup_serve_small, teardown),
        cmocka_unit_test_setup_teardown(test_serve_default_limit_is_1mib, setup_serve, teardown),
        cmocka_unit_test_setup_teardown(test_serve_close_from_inside_handler, setup_serve,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_serve_without_handler_gives_error, setup_serve,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unref_server_does_not_keep_loop_alive, setup_serve,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unref_server_still_answers, setup_serve, teardown),
        cmocka_unit_test_setup_teardown(test_idle_connections_opened_and_closed_do_not_exhaust,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_slowloris_is_dropped_and_requests_still_answered,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_cap_full_of_requests_closes_new_connections_at_once,
                                        setup_serve, teardown),
        cmocka_unit_test_setup_teardown(test_header_block_over_the_limit_is_431, setup, teardown),
        cmocka_unit_test_setup_teardown(test_defer_answered_later_from_a_timer, setup_defer,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_defer_answer_of_unknown_ticket_is_refused, setup_defer,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_defer_answered_inside_its_handler, setup_defer,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_two_deferred_answered_in_the_other_order, setup_defer,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_defer_answered_from_another_handler, setup_defer,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_defer_max_then_not_deferred, setup_defer, teardown),
        cmocka_unit_test_setup_teardown(test_defer_not_answered_in_time_is_504, setup_defer_short,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_close_with_a_deferred_request_answers_503, setup_defer,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_close_from_handler_after_defer_answers_503,
                                        setup_defer, teardown),
        cmocka_unit_test_setup_teardown(test_client_gone_while_deferred, setup_defer, teardown),
        /* the IPv6 ones last: left out without an IPv6 loopback */
        cmocka_unit_test_setup_teardown(test_listen_on_ipv6_loopback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_listen_on_ipv6_any, setup, teardown),
    };
    const size_t ipv6_tests = 2;
    size_t n = sizeof tests / sizeof tests[0];
    int ipv6 = have_ipv6_loopback();
    int failed;

    /* must precede any thread using libcurl */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return 1;
    if (!ipv6)
        n -= ipv6_tests;
    failed = _cmocka_run_group_tests("test_http_server", tests, n, NULL, NULL);
    /* cmocka 1.1's skip() prints "not ok # SKIP", which tests/run.sh counts
     * as a failure: report the skip in the form run.sh lists as skipped. */
    for (size_t i = 0; !ipv6 && i < ipv6_tests; i++)
        printf("ok %zu # SKIP %s: no IPv6 loopback (::1) on this machine\n", n + i + 1,
               tests[n + i].name);
    curl_global_cleanup();
    return failed;
}
