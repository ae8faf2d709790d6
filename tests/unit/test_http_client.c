/*
 * Unit tests for http_client against a libmicrohttpd server running in its own
 * threads on 127.0.0.1 (port chosen by the kernel).
 *
 * The server is steered by query arguments:
 *   status=N   answer with status N (default 200)
 *   delay=MS   wait MS milliseconds before answering (cut short at shutdown)
 *   size=N     answer N bytes of 'x' instead of "<METHOD> <path>"
 *   chunked=1  with size: send chunked, without Content-Length
 *   endless=1  send 'x' chunked without end (until the client goes)
 *   trickle=1  send one byte every 20 ms without end
 * It records the last request's method, path, a few headers and its body, and
 * counts the TCP connections it accepted. The same server speaks TLS for the
 * https tests (a CA and a certificate for 127.0.0.1 made with openssl in a
 * temporary directory). A second, raw server accepts connections and never
 * answers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <curl/curl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "http_client.h"

#define MAX_OUT 32

/* ------------------------------------------------------------ the server */

typedef struct server {
    struct MHD_Daemon *d;
    uint16_t port;
    atomic_int stopping;
    atomic_int started;    /* requests whose handler has begun answering */
    atomic_int in_handler; /* ... and have not finished yet */
    atomic_int max_in_handler;
    atomic_int connections; /* TCP connections accepted */
    int tls;                /* serve https with the test certificate */
    pthread_mutex_t mu;     /* guards the record below */
    char method[16];
    char path[256];
    char *content_type, *authorization, *expect;
    char *body;
    size_t body_len;
} server;

typedef struct upload {
    char *data;
    size_t len;
} upload;

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static void record_request(server *s, struct MHD_Connection *conn, const char *path,
                           const char *method, upload *up)
{
    pthread_mutex_lock(&s->mu);
    snprintf(s->method, sizeof s->method, "%s", method);
    snprintf(s->path, sizeof s->path, "%s", path);
    free(s->content_type);
    free(s->authorization);
    free(s->expect);
    free(s->body);
    s->content_type =
        dup_or_null(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type"));
    s->authorization =
        dup_or_null(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"));
    s->expect = dup_or_null(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Expect"));
    s->body = up->data; /* ownership moves to the record */
    s->body_len = up->len;
    up->data = NULL;
    up->len = 0;
    pthread_mutex_unlock(&s->mu);
}

static long query_long(struct MHD_Connection *conn, const char *name, long dflt)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
    return v ? strtol(v, NULL, 10) : dflt;
}

/* Sleeps in slices so MHD_stop_daemon does not wait for long delays. */
static void delay_ms(server *s, long ms)
{
    struct timespec slice = {0, 5 * 1000 * 1000};
    for (long waited = 0; waited < ms && !atomic_load(&s->stopping); waited += 5)
        nanosleep(&slice, NULL);
}

static void note_busy(server *s)
{
    atomic_fetch_add(&s->started, 1);
    int now = atomic_fetch_add(&s->in_handler, 1) + 1;
    int max = atomic_load(&s->max_in_handler);
    while (now > max && !atomic_compare_exchange_weak(&s->max_in_handler, &max, now))
        ;
}

static ssize_t chunk_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    size_t total = *(size_t *)cls;
    if (pos >= total)
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = total - pos < max ? total - pos : max;
    n = n > 700 ? 700 : n; /* several chunks */
    memset(buf, 'x', n);
    return (ssize_t)n;
}

/* Endless 'x', in slices, until the client goes or the server stops. */
static ssize_t endless_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    server *s = cls;
    (void)pos;
    if (atomic_load(&s->stopping))
        return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t n = max > 4096 ? 4096 : max;
    memset(buf, 'x', n);
    return (ssize_t)n;
}

/* One byte every 20 ms without end. */
static ssize_t trickle_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    server *s = cls;
    struct timespec slice = {0, 20 * 1000 * 1000};
    (void)pos, (void)max;
    nanosleep(&slice, NULL);
    if (atomic_load(&s->stopping))
        return MHD_CONTENT_READER_END_WITH_ERROR;
    buf[0] = 'x';
    return 1;
}

static struct MHD_Response *make_response(server *s, struct MHD_Connection *conn, const char *path,
                                          const char *method)
{
    long size = query_long(conn, "size", -1);
    if (query_long(conn, "endless", 0))
        return MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, endless_reader, s, NULL);
    if (query_long(conn, "trickle", 0))
        return MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16, trickle_reader, s, NULL);
    if (size >= 0 && query_long(conn, "chunked", 0)) {
        size_t *total = malloc(sizeof *total);
        *total = (size_t)size;
        return MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024, chunk_reader, total, free);
    }
    if (size >= 0) {
        char *data = malloc((size_t)size + 1);
        memset(data, 'x', (size_t)size);
        return MHD_create_response_from_buffer((size_t)size, data, MHD_RESPMEM_MUST_FREE);
    }
    char text[300];
    int n = snprintf(text, sizeof text, "%s %s", method, path);
    return MHD_create_response_from_buffer((size_t)n, text, MHD_RESPMEM_MUST_COPY);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *path,
                               const char *method, const char *version, const char *data,
                               size_t *data_size, void **con_cls)
{
    server *s = cls;
    upload *up = *con_cls;
    (void)version;
    if (!up) { /* first call: headers only */
        *con_cls = calloc(1, sizeof *up);
        return MHD_YES;
    }
    if (*data_size) {
        up->data = realloc(up->data, up->len + *data_size);
        memcpy(up->data + up->len, data, *data_size);
        up->len += *data_size;
        *data_size = 0;
        return MHD_YES;
    }
    record_request(s, conn, path, method, up);
    note_busy(s);
    delay_ms(s, query_long(conn, "delay", 0));
    struct MHD_Response *resp = make_response(s, conn, path, method);
    enum MHD_Result rc = MHD_queue_response(conn, (unsigned)query_long(conn, "status", 200), resp);
    MHD_destroy_response(resp);
    atomic_fetch_sub(&s->in_handler, 1);
    return rc;
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    upload *up = *con_cls;
    (void)cls, (void)conn, (void)toe;
    if (up) {
        free(up->data);
        free(up);
        *con_cls = NULL;
    }
}

static void connection_event(void *cls, struct MHD_Connection *conn, void **socket_context,
                             enum MHD_ConnectionNotificationCode toe)
{
    server *s = cls;
    (void)conn, (void)socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED)
        atomic_fetch_add(&s->connections, 1);
}

/* The test CA and server certificate (tls_setup), PEM text. */
static char tls_dir[64];
static char tls_ca[128], tls_other_ca[128], tls_garbage[128];
static char *tls_cert_pem, *tls_key_pem;

/* libmicrohttpd's complaints (a client that went away on purpose, a refused
 * handshake) as TAP comments. */
static void server_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    (void)cls;
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\r\n")] = '\0';
    fprintf(stderr, "# test server: %s\n", line);
}

static void server_start(server *s)
{
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
    pthread_mutex_init(&s->mu, NULL);
    if (s->tls && (!tls_cert_pem || !tls_key_pem))
        fail_msg("no test certificate: making it with openssl failed (see above)");
    /* the logger first, or libmicrohttpd says so through its own */
    if (s->tls)
        s->d = MHD_start_daemon(
            flags | MHD_USE_TLS, 0, NULL, NULL, handler, s, MHD_OPTION_EXTERNAL_LOGGER, server_log,
            NULL, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_NOTIFY_COMPLETED, completed, s,
            MHD_OPTION_NOTIFY_CONNECTION, connection_event, s, MHD_OPTION_HTTPS_MEM_KEY,
            tls_key_pem, MHD_OPTION_HTTPS_MEM_CERT, tls_cert_pem, MHD_OPTION_END);
    else
        s->d = MHD_start_daemon(flags, 0, NULL, NULL, handler, s, MHD_OPTION_EXTERNAL_LOGGER,
                                server_log, NULL, MHD_OPTION_SOCK_ADDR, &sa,
                                MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                                MHD_OPTION_NOTIFY_CONNECTION, connection_event, s, MHD_OPTION_END);
    assert_non_null(s->d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    assert_non_null(info);
    s->port = info->port;
    assert_true(s->port > 0);
}

static void server_stop(server *s)
{
    atomic_store(&s->stopping, 1);
    MHD_stop_daemon(s->d);
    free(s->content_type);
    free(s->authorization);
    free(s->expect);
    free(s->body);
    pthread_mutex_destroy(&s->mu);
}

/* ------------------------------------------------------------ the client */

typedef struct fixture fixture;

typedef struct outcome {
    fixture *f;
    int calls;
    long status;
    char *body;
    size_t body_len;
    char *error;
    bool truncated;
    void (*then)(struct outcome *o); /* runs inside the done callback */
} outcome;

struct fixture {
    server srv;
    uv_loop_t loop;
    http_client *c;      /* NULL once closed */
    int expected;        /* requests started */
    int finished;        /* done callbacks seen */
    int close_when_done; /* close the client from the last callback */
    outcome out[MAX_OUT];
};

static void close_client(fixture *f)
{
    http_client *c = f->c;
    f->c = NULL;
    http_client_close(c);
}

static void on_done(void *ud, const http_result *r)
{
    outcome *o = ud;
    fixture *f = o->f;
    o->calls++;
    assert_int_equal(o->calls, 1);
    assert_non_null(r->body);
    assert_int_equal(r->body[r->body_len], '\0');
    o->status = r->status;
    o->body = malloc(r->body_len + 1);
    memcpy(o->body, r->body, r->body_len + 1);
    o->body_len = r->body_len;
    o->error = dup_or_null(r->error);
    o->truncated = r->truncated;
    f->finished++;
    if (o->then)
        o->then(o);
    else if (f->close_when_done && f->finished == f->expected && f->c)
        close_client(f);
}

static void url_for(const fixture *f, const char *path, char *url, size_t len)
{
    snprintf(url, len, "%s://127.0.0.1:%u%s", f->srv.tls ? "https" : "http", (unsigned)f->srv.port,
             path);
}

static outcome *start_req(fixture *f, const http_request *req)
{
    char err[256] = "";
    outcome *o = &f->out[f->expected];
    assert_true(f->expected < MAX_OUT);
    o->f = f;
    int rc = http_client_request(f->c, req, on_done, o, err, sizeof err);
    if (rc != 0)
        fail_msg("http_client_request failed: %s", err);
    f->expected++;
    return o;
}

static outcome *start_get(fixture *f, const char *path, uint64_t timeout_ms, size_t max_body)
{
    char url[300];
    url_for(f, path, url, sizeof url);
    http_request req = {
        .method = "GET", .url = url, .timeout_ms = timeout_ms, .max_body = max_body};
    return start_req(f, &req);
}

/* Runs the loop until the client's handles are closed and checks every
 * started request got exactly one callback. */
static void run(fixture *f)
{
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_null(f->c);
    assert_int_equal(f->finished, f->expected);
    for (int i = 0; i < f->expected; i++)
        assert_int_equal(f->out[i].calls, 1);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int setup_with(void **state, int tls)
{
    fixture *f = calloc(1, sizeof *f);
    f->srv.tls = tls;
    server_start(&f->srv);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->c = http_client_new(&f->loop);
    assert_non_null(f->c);
    f->close_when_done = 1;
    *state = f;
    return 0;
}

static int setup(void **state) { return setup_with(state, 0); }
static int setup_tls(void **state) { return setup_with(state, 1); }

static int teardown(void **state)
{
    fixture *f = *state;
    if (f->c) {
        close_client(f);
        uv_run(&f->loop, UV_RUN_DEFAULT);
    }
    /* UV_EBUSY here would mean the client leaked a handle. */
    assert_int_equal(uv_loop_close(&f->loop), 0);
    server_stop(&f->srv);
    for (int i = 0; i < MAX_OUT; i++) {
        free(f->out[i].body);
        free(f->out[i].error);
    }
    free(f);
    return 0;
}

/* ------------------------------------------------------------------ tests */

static void test_get_200_with_body(void **state)
{
    fixture *f = *state;
    outcome *o = start_get(f, "/hello?x=1", 0, 0);
    run(f);
    assert_null(o->error);
    assert_int_equal(o->status, 200);
    assert_string_equal(o->body, "GET /hello");
    assert_int_equal(o->body_len, 10);
    assert_string_equal(f->srv.method, "GET");
    assert_string_equal(f->srv.path, "/hello");
    assert_int_equal(f->srv.body_len, 0);
}

static void test_post_sends_body_and_headers(void **state)
{
    fixture *f = *state;
    static const char body[] = "{\"job\":\"backup\",\"ok\":true}";
    const char *const headers[] = {"Content-Type: application/json", "Authorization: Bearer x",
                                   NULL};
    char url[300];
    url_for(f, "/hook", url, sizeof url);
    http_request req = {.method = "POST",
                        .url = url,
                        .headers = headers,
                        .body = body,
                        .body_len = sizeof body - 1};
    outcome *o = start_req(f, &req);
    run(f);
    assert_null(o->error);
    assert_int_equal(o->status, 200);
    assert_string_equal(o->body, "POST /hook");
    assert_string_equal(f->srv.method, "POST");
    assert_string_equal(f->srv.content_type, "application/json");
    assert_string_equal(f->srv.authorization, "Bearer x");
    assert_int_equal(f->srv.body_len, sizeof body - 1);
    assert_memory_equal(f->srv.body, body, sizeof body - 1);
}

/* A big binary body arrives intact, without an "Expect: 100-continue" stall. */
static void test_post_large_binary_body(void **state)
{
    fixture *f = *state;
    size_t len = 300 * 1024;
    char *body = malloc(len);
    for (size_t i = 0; i < len; i++)
        body[i] = (char)(i * 31 % 251); /* includes NULs */
    char url[300];
    url_for(f, "/big", url, sizeof url);
    http_request req = {.method = "POST", .url = url, .body = body, .body_len = len};
    outcome *o = start_req(f, &req);
    memset(body, 0, len); /* the client must have copied it */
    for (size_t i = 0; i < len; i++)
        body[i] = (char)(i * 31 % 251);
    run(f);
    assert_null(o->error);
    assert_int_equal(o->status, 200);
    assert_null(f->srv.expect);
    assert_int_equal(f->srv.body_len, len);
    assert_memory_equal(f->srv.body, body, len);
    free(body);
}

static void test_empty_post(void **state)
{
    fixture *f = *state;
    char url[300];
    url_for(f, "/empty", url, sizeof url);
    http_request req = {.method = "POST", .url = url};
    outcome *o = start_req(f, &req);
    run(f);
    assert_null(o->error);
    assert_int_equal(o->status, 200);
    assert_string_equal(f->srv.method, "POST");
    assert_int_equal(f->srv.body_len, 0);
}

static void test_500_is_completed_exchange(void **state)
{
    fixture *f = *state;
    outcome *o500 = start_get(f, "/fail?status=500", 0, 0);
    outcome *o302 = start_get(f, "/moved?status=302", 0, 0);
    run(f);
    assert_null(o500->error);
    assert_int_equal(o500->status, 500);
    assert_string_equal(o500->body, "GET /fail");
    assert_null(o302->error); /* redirects are not followed */
    assert_int_equal(o302->status, 302);
}

static void test_connection_refused(void **state)
{
    fixture *f = *state;
    /* A bound but not listening socket refuses connections, and holding it
     * keeps anyone else from taking the port meanwhile. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t salen = sizeof sa;
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &salen), 0);
    unsigned port = ntohs(sa.sin_port);

    char url[100], want[200];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/x", port);
    snprintf(want, sizeof want, "connect to 127.0.0.1:%u failed: Connection refused", port);
    http_request req = {.method = "GET", .url = url};
    outcome *o = start_req(f, &req);
    run(f);
    close(fd);
    assert_int_equal(o->status, 0);
    assert_non_null(o->error);
    assert_string_equal(o->error, want);
}

static void test_timeout(void **state)
{
    fixture *f = *state;
    uint64_t t0 = now_ms();
    outcome *o = start_get(f, "/slow?delay=5000", 200, 0);
    run(f);
    uint64_t took = now_ms() - t0;
    assert_int_equal(o->status, 0);
    assert_non_null(o->error);
    assert_string_equal(o->error, "timed out after 200 ms");
    assert_true(took >= 190);
    assert_true(took < 3000);
}

static void test_20_concurrent(void **state)
{
    fixture *f = *state;
    uint64_t t0 = now_ms();
    for (int i = 0; i < 20; i++)
        start_get(f, "/c?delay=300", 0, 0);
    run(f);
    uint64_t took = now_ms() - t0;
    for (int i = 0; i < 20; i++) {
        assert_null(f->out[i].error);
        assert_int_equal(f->out[i].status, 200);
        assert_string_equal(f->out[i].body, "GET /c");
    }
    assert_int_equal(atomic_load(&f->srv.started), 20);
    /* Sequential would take 6 s; overlapping handlers prove concurrency. */
    assert_true(atomic_load(&f->srv.max_in_handler) > 1);
    assert_true(took < 3000);
}

static void close_when_all_started(uv_timer_t *t)
{
    fixture *f = t->data;
    if (atomic_load(&f->srv.started) < f->expected)
        return;
    uv_close((uv_handle_t *)t, NULL);
    close_client(f);
    assert_int_equal(f->finished, f->expected); /* synchronously, inside close */
}

static void test_close_with_requests_in_flight(void **state)
{
    fixture *f = *state;
    uv_timer_t poll_started;
    for (int i = 0; i < 5; i++)
        start_get(f, "/hang?delay=30000", 0, 0);
    /* Close only once every request is really waiting on the server. */
    uv_timer_init(&f->loop, &poll_started);
    poll_started.data = f;
    uv_timer_start(&poll_started, close_when_all_started, 5, 5);
    run(f);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(f->out[i].status, 0);
        assert_string_equal(f->out[i].error, "cancelled");
    }
}

static void test_close_before_loop_runs(void **state)
{
    fixture *f = *state;
    outcome *o = start_get(f, "/never", 0, 0);
    assert_int_equal(o->calls, 0); /* never called from inside request() */
    close_client(f);
    assert_int_equal(o->calls, 1);
    assert_string_equal(o->error, "cancelled");
    run(f);
}

static void close_from_callback(outcome *o) { close_client(o->f); }

/* Closing from a done callback cancels the remaining request exactly once. */
static void test_close_from_callback(void **state)
{
    fixture *f = *state;
    outcome *fast = start_get(f, "/fast", 0, 0);
    outcome *slow = start_get(f, "/slow?delay=30000", 0, 0);
    fast->then = close_from_callback;
    run(f);
    assert_null(fast->error);
    assert_int_equal(fast->status, 200);
    assert_string_equal(slow->error, "cancelled");
}

static void start_second(outcome *o)
{
    fixture *f = o->f;
    outcome *next = start_get(f, "/second", 0, 0);
    next->then = close_from_callback;
}

/* A done callback may start the next request (e.g. a retry). */
static void test_request_from_callback(void **state)
{
    fixture *f = *state;
    outcome *first = start_get(f, "/first", 0, 0);
    first->then = start_second;
    run(f);
    assert_int_equal(f->expected, 2);
    assert_string_equal(first->body, "GET /first");
    assert_null(f->out[1].error);
    assert_string_equal(f->out[1].body, "GET /second");
}

static void test_max_body(void **state)
{
    fixture *f = *state;
    outcome *fits = start_get(f, "/b?size=1000", 0, 1000);
    outcome *announced = start_get(f, "/b?size=5000", 0, 1000);
    outcome *chunked = start_get(f, "/b?size=5000&chunked=1", 0, 1000);
    outcome *dflt = start_get(f, "/b?size=100000&chunked=1", 0, 0);
    run(f);
    assert_null(fits->error);
    assert_int_equal(fits->body_len, 1000);
    assert_string_equal(announced->error, "response body exceeds 1000 bytes");
    assert_string_equal(chunked->error, "response body exceeds 1000 bytes");
    assert_null(dflt->error);
    assert_int_equal(dflt->body_len, 100000);
}

static void expect_rejected(fixture *f, const http_request *req, const char *want_substr)
{
    char err[256] = "";
    int rc = http_client_request(f->c, req, on_done, &f->out[0], err, sizeof err);
    assert_int_equal(rc, -1);
    if (!strstr(err, want_substr))
        fail_msg("error '%s' does not mention '%s'", err, want_substr);
}

static void test_rejects_bad_requests(void **state)
{
    fixture *f = *state;
    const char *const crlf[] = {"X-A: 1\r\nX-B: 2", NULL};
    const char *const nocolon[] = {"Authorization Bearer x", NULL};
    expect_rejected(f, &(http_request){.method = "GET", .url = "ftp://127.0.0.1/x"}, "scheme");
    expect_rejected(f, &(http_request){.method = "GET", .url = "file:///etc/passwd"}, "scheme");
    expect_rejected(f, &(http_request){.method = "GET", .url = "not a url"}, "URL");
    expect_rejected(f, &(http_request){.method = "PUT", .url = "http://127.0.0.1/"}, "method");
    expect_rejected(
        f, &(http_request){.method = "GET", .url = "http://127.0.0.1/", .headers = crlf}, "header");
    expect_rejected(
        f, &(http_request){.method = "GET", .url = "http://127.0.0.1/", .headers = nocolon},
        "header");
    expect_rejected(
        f, &(http_request){.method = "GET", .url = "http://127.0.0.1/", .body = "x", .body_len = 1},
        "body");
    /* A tiny err buffer is truncated, not overrun. */
    char tiny[4];
    assert_int_equal(http_client_request(f->c, &(http_request){.method = "PUT", .url = "http://a/"},
                                         on_done, NULL, tiny, sizeof tiny),
                     -1);
    assert_int_equal(strlen(tiny), 3);
    close_client(f);
    run(f);
    assert_int_equal(f->out[0].calls, 0);
}

static void test_close_idle_client(void **state)
{
    fixture *f = *state;
    close_client(f);
    run(f);
}

/* ------------------------------------------------------------- truncate */

static outcome *start_truncated(fixture *f, const char *path, size_t max_body)
{
    char url[300];
    url_for(f, path, url, sizeof url);
    http_request req = {.method = "GET", .url = url, .max_body = max_body, .truncate = true};
    return start_req(f, &req);
}

static void assert_all_x(const outcome *o, size_t len)
{
    assert_int_equal(o->body_len, len);
    for (size_t i = 0; i < len; i++)
        if (o->body[i] != 'x')
            fail_msg("byte %zu of the body is %d", i, o->body[i]);
}

/* With truncate, a body past max_body is cut there: the status counts, the
 * first max_body bytes are kept, no error. Announced or chunked, 2xx or not,
 * and an endless one (the client stops reading). One that fits is whole. */
static void test_truncate(void **state)
{
    fixture *f = *state;
    outcome *fits = start_truncated(f, "/t?size=1000", 1000);
    outcome *announced = start_truncated(f, "/t?size=5000", 1000);
    start_truncated(f, "/t?size=5000&chunked=1", 1000);
    outcome *err500 = start_truncated(f, "/t?size=5000&status=500", 1000);
    outcome *endless = start_truncated(f, "/t?endless=1", 1000);
    outcome *dflt = start_truncated(f, "/t?endless=1&status=202", 0);
    uint64_t t0 = now_ms();
    run(f);
    assert_true(now_ms() - t0 < 10000);
    assert_null(fits->error);
    assert_int_equal(fits->status, 200);
    assert_false(fits->truncated);
    assert_all_x(fits, 1000);
    for (outcome *o = announced; o <= endless; o++) { /* announced, chunked, 500, endless */
        if (o->error)
            fail_msg("request %d: %s", (int)(o - f->out), o->error);
        assert_int_equal(o->status, o == err500 ? 500 : 200);
        assert_true(o->truncated);
        assert_all_x(o, 1000);
    }
    assert_null(dflt->error); /* the default bound, 4 MiB */
    assert_int_equal(dflt->status, 202);
    assert_true(dflt->truncated);
    assert_int_equal(dflt->body_len, (size_t)4 << 20);
}

/* Without truncate the old rule holds (test_max_body): truncated stays false. */
static void test_no_truncate_by_default(void **state)
{
    fixture *f = *state;
    outcome *o = start_get(f, "/t?size=5000&chunked=1", 0, 1000);
    run(f);
    assert_string_equal(o->error, "response body exceeds 1000 bytes");
    assert_int_equal(o->truncated, 0);
}

/* -------------------------------------------------------------- userinfo */

static void test_userinfo_refused(void **state)
{
    fixture *f = *state;
    static const char *const urls[] = {"http://hookuser:SECRET-PW@127.0.0.1:9/hook",
                                       "http://hookuser@127.0.0.1:9/",
                                       "https://:SECRET-PW@hooks.example/x", "http://@127.0.0.1:9/",
                                       "http://hookuser:SECRET%40PW@[::1]:9/"};
    for (size_t i = 0; i < sizeof urls / sizeof *urls; i++) {
        char err[512] = "";
        http_request req = {.method = "POST", .url = urls[i]};
        assert_int_equal(http_client_request(f->c, &req, on_done, &f->out[0], err, sizeof err), -1);
        if (!strstr(err, "URL with userinfo refused"))
            fail_msg("%s: %s", urls[i], err);
        if (strstr(err, "hookuser") || strstr(err, "SECRET") || strchr(err, '\n'))
            fail_msg("%s: the error shows the userinfo: %s", urls[i], err);
    }
    char err[512] = "";
    http_request req = {.method = "GET", .url = urls[0]};
    http_client_request(f->c, &req, on_done, &f->out[0], err, sizeof err);
    assert_string_equal(err, "URL with userinfo refused (http://***@127.0.0.1:9): credentials in "
                             "a URL end up in logs; send them in a header");
    close_client(f);
    run(f);
    assert_int_equal(f->out[0].calls, 0);
}

/* allow_userinfo: sent, as Basic authentication. */
static void test_userinfo_allowed(void **state)
{
    fixture *f = *state;
    char url[300];
    snprintf(url, sizeof url, "http://hookuser:pw@127.0.0.1:%u/auth", (unsigned)f->srv.port);
    http_request req = {.method = "GET", .url = url, .allow_userinfo = true};
    outcome *o = start_req(f, &req);
    run(f);
    assert_null(o->error);
    assert_int_equal(o->status, 200);
    assert_string_equal(f->srv.authorization, "Basic aG9va3VzZXI6cHc="); /* hookuser:pw */
}

/* ------------------------------------------------------------- timeouts */

/* A raw server that accepts connections and never reads nor answers. */
typedef struct silent {
    int fd;
    uint16_t port;
    pthread_t thread;
    int conns[MAX_OUT];
    atomic_int n;
} silent;

static void *silent_accept(void *ud)
{
    silent *sv = ud;
    for (;;) {
        int fd = accept(sv->fd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            return NULL; /* shutdown: the test is over */
        }
        int i = atomic_load(&sv->n);
        if (i < MAX_OUT) {
            sv->conns[i] = fd;
            atomic_store(&sv->n, i + 1);
        } else
            close(fd);
    }
}

static void silent_start(silent *sv)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t salen = sizeof sa;
    memset(sv, 0, sizeof *sv);
    sv->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(sv->fd >= 0);
    assert_int_equal(bind(sv->fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(sv->fd, 16), 0);
    assert_int_equal(getsockname(sv->fd, (struct sockaddr *)&sa, &salen), 0);
    sv->port = ntohs(sa.sin_port);
    assert_int_equal(pthread_create(&sv->thread, NULL, silent_accept, sv), 0);
}

static void silent_stop(silent *sv)
{
    shutdown(sv->fd, SHUT_RDWR); /* wakes accept() */
    pthread_join(sv->thread, NULL);
    close(sv->fd);
    for (int i = 0; i < atomic_load(&sv->n); i++)
        close(sv->conns[i]);
}

/* Accepted, then silence: cut at timeout_ms, plain HTTP (request sent, no
 * answer) and TLS (no handshake answer), a POST too. */
static void test_silent_server_timeout(void **state)
{
    fixture *f = *state;
    silent sv;
    silent_start(&sv);
    char http[100], https[100];
    snprintf(http, sizeof http, "http://127.0.0.1:%u/hook", (unsigned)sv.port);
    snprintf(https, sizeof https, "https://127.0.0.1:%u/hook", (unsigned)sv.port);
    uint64_t t0 = now_ms();
    outcome *get = start_req(f, &(http_request){.method = "GET", .url = http, .timeout_ms = 300});
    start_req(f, &(http_request){.method = "POST",
                                 .url = http,
                                 .body = "{}",
                                 .body_len = 2,
                                 .timeout_ms = 300,
                                 .truncate = true});
    outcome *tls = start_req(f, &(http_request){.method = "GET", .url = https, .timeout_ms = 300});
    run(f);
    uint64_t took = now_ms() - t0;
    silent_stop(&sv);
    assert_true(atomic_load(&sv.n) >= 3);   /* each was accepted */
    for (outcome *o = get; o <= tls; o++) { /* GET, POST, TLS */
        assert_int_equal(o->status, 0);
        assert_non_null(o->error);
        assert_string_equal(o->error, "timed out after 300 ms");
    }
    assert_true(took >= 290);
    assert_true(took < 5000);
}

/* A body trickling forever is cut at the timeout too (status received, error
 * set), with truncate as without. */
static void test_trickle_timeout(void **state)
{
    fixture *f = *state;
    uint64_t t0 = now_ms();
    outcome *plain = start_get(f, "/trickle?trickle=1", 400, 0);
    char url[300];
    url_for(f, "/trickle?trickle=1", url, sizeof url);
    outcome *cut = start_req(
        f, &(http_request){.method = "GET", .url = url, .timeout_ms = 400, .truncate = true});
    run(f);
    uint64_t took = now_ms() - t0;
    for (outcome *o = plain; o <= cut; o++) {
        assert_non_null(o->error);
        assert_string_equal(o->error, "timed out after 400 ms");
        assert_int_equal(o->status, 200);
        assert_true(o->body_len > 0); /* some bytes came */
        assert_true(o->body_len < 400);
    }
    assert_true(took >= 390);
    assert_true(took < 5000);
}

/* ---------------------------------------------------- connection reuse */

static void start_next_of_chain(outcome *o);

/* Requests one after the other (each started from the previous one's
 * callback) go over one TCP connection. */
static void test_sequential_requests_reuse_connection(void **state)
{
    fixture *f = *state;
    outcome *o = start_get(f, "/seq", 0, 0);
    o->then = start_next_of_chain;
    run(f);
    assert_int_equal(f->expected, 4);
    for (int i = 0; i < 4; i++) {
        assert_null(f->out[i].error);
        assert_int_equal(f->out[i].status, 200);
    }
    assert_int_equal(atomic_load(&f->srv.started), 4);
    assert_int_equal(atomic_load(&f->srv.connections), 1);
}

static void start_next_of_chain(outcome *o)
{
    fixture *f = o->f;
    if (f->expected == 4) {
        close_client(f);
        return;
    }
    /* a POST too: the kept connection serves any method */
    char url[300];
    url_for(f, "/seq", url, sizeof url);
    http_request req = {.method = f->expected % 2 ? "POST" : "GET", .url = url};
    start_req(f, &req)->then = start_next_of_chain;
}

/* After a pause (the loop idle in between, the kept connection unwatched),
 * the next request still takes the kept connection. */
static void second_after_pause(uv_timer_t *t)
{
    fixture *f = t->data;
    uv_close((uv_handle_t *)t, NULL);
    start_get(f, "/later", 0, 0);
}

static void pause_then_second(outcome *o)
{
    fixture *f = o->f;
    static uv_timer_t pause;
    uv_timer_init(&f->loop, &pause);
    pause.data = f;
    uv_timer_start(&pause, second_after_pause, 300, 0);
}

static void test_reuse_after_idle_pause(void **state)
{
    fixture *f = *state;
    start_get(f, "/first", 0, 0)->then = pause_then_second;
    run(f); /* the second closes the client: f->expected == f->finished */
    assert_int_equal(f->expected, 2);
    assert_null(f->out[0].error);
    assert_null(f->out[1].error);
    assert_int_equal(f->out[1].status, 200);
    assert_int_equal(atomic_load(&f->srv.connections), 1);
}

/* 8 at once to one host all complete; the 8 connections they open are kept
 * and a second round of 8 takes them. */
static void start_round(fixture *f)
{
    for (int i = 0; i < 8; i++)
        start_get(f, "/p?delay=100", 0, 0);
}

/* the first round's callbacks: the last one starts the second round, whose
 * last callback closes the client (close_when_done) */
static void second_round(outcome *o)
{
    if (o->f->finished == 8)
        start_round(o->f);
}

static void test_8_parallel_then_reused(void **state)
{
    fixture *f = *state;
    start_round(f);
    for (int i = 0; i < 8; i++)
        f->out[i].then = second_round;
    run(f);
    assert_int_equal(f->expected, 16);
    for (int i = 0; i < 16; i++) {
        assert_null(f->out[i].error);
        assert_int_equal(f->out[i].status, 200);
    }
    assert_int_equal(atomic_load(&f->srv.started), 16);
    assert_true(atomic_load(&f->srv.max_in_handler) > 1);
    int conns = atomic_load(&f->srv.connections);
    if (conns > 8)
        fail_msg("16 requests, 8 at a time, opened %d connections", conns);
}

/* One request at a time to 6 receivers, twice round: each keeps its one
 * connection (libcurl's default cache, 4 per transfer in flight, would
 * close the oldest when the 5th came back). */
#define ROUND_HOSTS 6
static server round_srv[ROUND_HOSTS - 1];

static void next_host(outcome *o);

static void start_host(fixture *f)
{
    int i = f->expected;
    if (i == 2 * ROUND_HOSTS) {
        close_client(f);
        return;
    }
    int h = i % ROUND_HOSTS;
    uint16_t port = h == 0 ? f->srv.port : round_srv[h - 1].port;
    char url[100];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/round", (unsigned)port);
    start_req(f, &(http_request){.method = "POST", .url = url, .body = "{}", .body_len = 2})->then =
        next_host;
}

static void next_host(outcome *o) { start_host(o->f); }

static void test_idle_connections_to_6_hosts_kept(void **state)
{
    fixture *f = *state;
    for (int h = 0; h < ROUND_HOSTS - 1; h++) {
        memset(&round_srv[h], 0, sizeof round_srv[h]);
        server_start(&round_srv[h]);
    }
    start_host(f);
    run(f);
    int conns[ROUND_HOSTS] = {atomic_load(&f->srv.connections)};
    for (int h = 1; h < ROUND_HOSTS; h++) {
        conns[h] = atomic_load(&round_srv[h - 1].connections);
        server_stop(&round_srv[h - 1]);
    }
    assert_int_equal(f->expected, 2 * ROUND_HOSTS);
    for (int i = 0; i < 2 * ROUND_HOSTS; i++)
        assert_null(f->out[i].error);
    for (int h = 0; h < ROUND_HOSTS; h++)
        if (conns[h] != 1)
            fail_msg("receiver %d: 2 requests over %d connections", h, conns[h]);
}

/* ------------------------------------------------------------------ TLS */

static outcome *start_tls(fixture *f, const char *host, const char *ca_file)
{
    char url[300];
    snprintf(url, sizeof url, "https://%s:%u/tls", host, (unsigned)f->srv.port);
    http_request req = {.method = "GET", .url = url, .ca_file = ca_file, .timeout_ms = 10000};
    return start_req(f, &req);
}

static void test_tls_with_ca_file(void **state)
{
    fixture *f = *state;
    outcome *a = start_tls(f, "127.0.0.1", tls_ca);
    outcome *b = start_tls(f, "127.0.0.1", tls_ca);
    run(f);
    assert_null(a->error);
    assert_int_equal(a->status, 200);
    assert_string_equal(a->body, "GET /tls");
    assert_null(b->error);
}

static void test_tls_refused_without_ca_file(void **state)
{
    fixture *f = *state;
    outcome *o = start_tls(f, "127.0.0.1", NULL);
    run(f);
    assert_int_equal(o->status, 0);
    assert_non_null(o->error);
    char want[200];
    snprintf(want, sizeof want,
             "TLS certificate of 127.0.0.1:%u refused (system CA store): ", (unsigned)f->srv.port);
    if (strncmp(o->error, want, strlen(want)) != 0 || strchr(o->error, '\n'))
        fail_msg("unexpected error: %s", o->error);
    assert_int_equal(atomic_load(&f->srv.started), 0);
}

static void test_tls_refused_by_another_ca(void **state)
{
    fixture *f = *state;
    outcome *o = start_tls(f, "127.0.0.1", tls_other_ca);
    run(f);
    assert_int_equal(o->status, 0);
    if (!o->error || !strstr(o->error, "refused (CA file given): SSL certificate problem"))
        fail_msg("unexpected error: %s", o->error ? o->error : "(none)");
    assert_int_equal(atomic_load(&f->srv.started), 0);
}

/* The certificate is for 127.0.0.1 only: "localhost" is the wrong name, even
 * signed by the CA given. */
static void test_tls_wrong_host_refused(void **state)
{
    fixture *f = *state;
    outcome *o = start_tls(f, "localhost", tls_ca);
    run(f);
    assert_int_equal(o->status, 0);
    assert_non_null(o->error);
    if (!strstr(o->error, "refused (CA file given)") || !strstr(o->error, "'localhost'"))
        fail_msg("unexpected error: %s", o->error);
    assert_int_equal(atomic_load(&f->srv.started), 0);
}

static void test_ca_file_errors(void **state)
{
    fixture *f = *state;
    char url[300], err[512], missing[600], longpath[HTTP_CLIENT_CA_PATH_MAX + 2];
    url_for(f, "/x", url, sizeof url);
    snprintf(missing, sizeof missing, "%s/no-such.pem", tls_dir);
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[sizeof longpath - 1] = '\0';
    struct {
        const char *ca, *want;
    } cases[] = {
        {missing, "cannot read CA file "},
        {tls_dir, "cannot read CA file "},
        {"", "CA file: empty path"},
        {longpath, "CA file: path longer than 4095 bytes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        http_request req = {.method = "GET", .url = url, .ca_file = cases[i].ca};
        assert_int_equal(http_client_request(f->c, &req, on_done, &f->out[0], err, sizeof err), -1);
        if (strncmp(err, cases[i].want, strlen(cases[i].want)) != 0)
            fail_msg("case %zu: %s", i, err);
    }
    char want[700];
    snprintf(want, sizeof want, "cannot read CA file %s: No such file or directory", missing);
    http_request req = {.method = "GET", .url = url, .ca_file = missing};
    http_client_request(f->c, &req, on_done, &f->out[0], err, sizeof err);
    assert_string_equal(err, want);
    snprintf(want, sizeof want, "cannot read CA file %s: not a regular file", tls_dir);
    req.ca_file = tls_dir;
    http_client_request(f->c, &req, on_done, &f->out[0], err, sizeof err);
    assert_string_equal(err, want);
    close_client(f);
    run(f);
    assert_int_equal(f->out[0].calls, 0);
}

/* A readable file that holds no certificate fails at the handshake, saying so. */
static void test_ca_file_not_pem(void **state)
{
    fixture *f = *state;
    outcome *o = start_tls(f, "127.0.0.1", tls_garbage);
    run(f);
    assert_int_equal(o->status, 0);
    char want[300];
    snprintf(want, sizeof want, "cannot use CA file %s: ", tls_garbage);
    if (!o->error || strncmp(o->error, want, strlen(want)) != 0)
        fail_msg("unexpected error: %s", o->error ? o->error : "(none)");
}

static void start_next_tls(outcome *o)
{
    fixture *f = o->f;
    if (f->expected == 3) {
        close_client(f);
        return;
    }
    start_tls(f, "127.0.0.1", tls_ca)->then = start_next_tls;
}

static void test_tls_reuses_connection(void **state)
{
    fixture *f = *state;
    outcome *o = start_tls(f, "127.0.0.1", tls_ca);
    o->then = start_next_tls;
    run(f);
    assert_int_equal(f->expected, 3);
    for (int i = 0; i < 3; i++)
        assert_null(f->out[i].error);
    assert_int_equal(atomic_load(&f->srv.connections), 1);
}

/* The CA, a second CA and a certificate for IP 127.0.0.1 only (so
 * "localhost" is a wrong name), signed by the first, in a temporary
 * directory; and a file that is not PEM. */
static char *read_text(const char *dir, const char *name)
{
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return NULL;
    char *text = calloc(1, 16384);
    size_t n = fread(text, 1, 16383, fp);
    fclose(fp);
    text[n] = '\0';
    return text;
}

static void tls_make(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(tls_dir, sizeof tls_dir, "%s/oops-http-tls.XXXXXX",
             tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
    if (!mkdtemp(tls_dir)) {
        perror("mkdtemp");
        tls_dir[0] = '\0';
        return;
    }
    snprintf(tls_ca, sizeof tls_ca, "%s/ca.pem", tls_dir);
    snprintf(tls_other_ca, sizeof tls_other_ca, "%s/other-ca.pem", tls_dir);
    snprintf(tls_garbage, sizeof tls_garbage, "%s/garbage.pem", tls_dir);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "set -e; cd '%s'; exec >openssl.log 2>&1\n"
             "k='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'\n"
             "for ca in ca other-ca; do openssl req -x509 $k -days 2 -subj \"/CN=oops test $ca\" "
             "-addext basicConstraints=critical,CA:TRUE "
             "-addext keyUsage=critical,keyCertSign,cRLSign -keyout $ca.key -out $ca.pem; done\n"
             "openssl req -new $k -subj /CN=127.0.0.1 -keyout server.key -out server.csr\n"
             "printf '%%s\\n' basicConstraints=CA:FALSE "
             "keyUsage=critical,digitalSignature,keyEncipherment extendedKeyUsage=serverAuth "
             "subjectAltName=IP:127.0.0.1 >server.ext\n"
             "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
             "-out server.pem -extfile server.ext\n"
             "echo 'not a certificate' >garbage.pem\n",
             tls_dir);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "sed 's/^/# openssl: /' '%s/openssl.log' >&2", tls_dir);
        fprintf(stderr, "# making the test certificates with openssl failed:\n");
        if (system(cmd) != 0)
            fprintf(stderr, "# (no openssl.log)\n");
        return;
    }
    tls_cert_pem = read_text(tls_dir, "server.pem");
    tls_key_pem = read_text(tls_dir, "server.key");
}

static void tls_remove(void)
{
    char cmd[200];
    free(tls_cert_pem);
    free(tls_key_pem);
    if (!tls_dir[0])
        return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tls_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "# could not remove %s\n", tls_dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_get_200_with_body, setup, teardown),
        cmocka_unit_test_setup_teardown(test_post_sends_body_and_headers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_post_large_binary_body, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_post, setup, teardown),
        cmocka_unit_test_setup_teardown(test_500_is_completed_exchange, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connection_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_20_concurrent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_with_requests_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_before_loop_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_from_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_from_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_body, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rejects_bad_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_idle_client, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_truncate_by_default, setup, teardown),
        cmocka_unit_test_setup_teardown(test_userinfo_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_userinfo_allowed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_silent_server_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trickle_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sequential_requests_reuse_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reuse_after_idle_pause, setup, teardown),
        cmocka_unit_test_setup_teardown(test_8_parallel_then_reused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_connections_to_6_hosts_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tls_with_ca_file, setup_tls, teardown),
        cmocka_unit_test_setup_teardown(test_tls_refused_without_ca_file, setup_tls, teardown),
        cmocka_unit_test_setup_teardown(test_tls_refused_by_another_ca, setup_tls, teardown),
        cmocka_unit_test_setup_teardown(test_tls_wrong_host_refused, setup_tls, teardown),
        cmocka_unit_test_setup_teardown(test_ca_file_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ca_file_not_pem, setup_tls, teardown),
        cmocka_unit_test_setup_teardown(test_tls_reuses_connection, setup_tls, teardown),
    };
    alarm(120); /* a hung loop should fail the run, not stall it */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    tls_make();
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tls_remove();
    curl_global_cleanup();
    return failed;
}
