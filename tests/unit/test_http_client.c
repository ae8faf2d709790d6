/*
 * Unit tests for http_client against a libmicrohttpd server running in its own
 * threads on 127.0.0.1 (port chosen by the kernel).
 *
 * The server is steered by query arguments:
 *   status=N   answer with status N (default 200)
 *   delay=MS   wait MS milliseconds before answering (cut short at shutdown)
 *   size=N     answer N bytes of 'x' instead of "<METHOD> <path>"
 *   chunked=1  with size: send chunked, without Content-Length
 * It records the last request's method, path, a few headers and its body.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
    pthread_mutex_t mu; /* guards the record below */
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

static struct MHD_Response *make_response(struct MHD_Connection *conn, const char *path,
                                          const char *method)
{
    long size = query_long(conn, "size", -1);
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
    struct MHD_Response *resp = make_response(conn, path, method);
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

static void server_start(server *s)
{
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    pthread_mutex_init(&s->mu, NULL);
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                                MHD_USE_ERROR_LOG,
                            0, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, &sa,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_END);
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
    f->finished++;
    if (o->then)
        o->then(o);
    else if (f->close_when_done && f->finished == f->expected && f->c)
        close_client(f);
}

static void url_for(const fixture *f, const char *path, char *url, size_t len)
{
    snprintf(url, len, "http://127.0.0.1:%u%s", (unsigned)f->srv.port, path);
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

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    server_start(&f->srv);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->c = http_client_new(&f->loop);
    assert_non_null(f->c);
    f->close_when_done = 1;
    *state = f;
    return 0;
}

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
    };
    alarm(120); /* a hung loop should fail the run, not stall it */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return failed;
}
