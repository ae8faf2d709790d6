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

#include <curl/curl.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
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
} reply;

typedef struct fixture fixture;
typedef void (*client_fn)(fixture *f);

struct fixture {
    uv_loop_t loop;
    uv_async_t done; /* client thread -> loop: "finished, shut down" */
    http_server *srv;
    int port;
    client_fn client;
    atomic_int server_closed; /* set on the loop thread, read by client */

    /* written by the handler (loop thread) */
    int calls;
    pthread_t handler_thread;
    char last_path[128];

    /* written by the client thread, read after join */
    pthread_t client_thread;
    reply replies[MAX_REPLIES];
    int nreplies;
    CURLcode after_close_rc;
};

/* ---- the handler under test ------------------------------------------- */

static char *dup_str(const char *s, size_t *len)
{
    *len = strlen(s);
    char *p = malloc(*len + 1);
    memcpy(p, s, *len + 1);
    return p;
}

static void handler(void *ud, const char *method, const char *path,
                    http_response *out)
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

static size_t on_header(char *line, size_t size, size_t n, void *ud)
{
    reply *r = ud;
    size_t len = size * n;

    if (len > 6 && strncasecmp(line, "Allow:", 6) == 0) {
        size_t start = 6, end = len;
        while (start < end && line[start] == ' ')
            start++;
        while (end > start && (line[end - 1] == '\r' || line[end - 1] == '\n'))
            end--;
        snprintf(r->allow, sizeof r->allow, "%.*s", (int)(end - start),
                 line + start);
    }
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

    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", f->port, path);
    memset(r, 0, sizeof *r);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    r->rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &r->new_connections);
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    if (ct != NULL)
        snprintf(r->content_type, sizeof r->content_type, "%s", ct);
    return r->rc;
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

    if (d == NULL)
        return -1;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

static int setup(void **state)
{
    char err[256] = "";
    fixture *f = calloc(1, sizeof *f);

    if (f == NULL || uv_loop_init(&f->loop) != 0)
        return -1;
    uv_async_init(&f->loop, &f->done, on_done);
    f->done.data = f;
    f->srv = http_server_start(&f->loop, "127.0.0.1:0", handler, f, err,
                               sizeof err);
    if (f->srv == NULL) {
        fprintf(stderr, "setup: %s\n", err);
        return -1;
    }
    f->port = http_server_port(f->srv);
    *state = f;
    return 0;
}

/* uv_loop_close fails with UV_EBUSY if any handle were still open, so this
 * checks that http_server_close released its handles. */
static int teardown(void **state)
{
    fixture *f = *state;
    int rc = uv_loop_close(&f->loop);

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
    snprintf(want, sizeof want, "cannot listen on %s: Address already in use",
             listen);
    assert_string_equal(err, want);
    run_without_client(f);
}

static void test_bad_listen_address_gives_error(void **state)
{
    fixture *f = *state;
    const char *bad[] = {"nonsense", ":80", "127.0.0.1:", "127.0.0.1:99999",
                         "127.0.0.1:-1", "example.com:80", "::1:80"};
    char err[256];

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char want[160];
        err[0] = '\0';
        assert_null(http_server_start(&f->loop, bad[i], handler, f, err,
                                      sizeof err));
        snprintf(want, sizeof want, "cannot listen on %s: ", bad[i]);
        assert_memory_equal(err, want, strlen(want));
    }
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
    f->srv = http_server_start(&f->loop, "localhost:0", handler, f, err,
                               sizeof err);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_get_200_with_body_and_content_type,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_handler_status_is_returned, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unknown_path_is_404_empty, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_post_is_405_without_calling_handler,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_handler_runs_on_loop_thread, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_two_sequential_requests, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_query_string_is_not_in_path, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_busy_port_gives_error, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bad_listen_address_gives_error,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_listen_on_localhost, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_close_releases_everything, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_close_from_inside_handler, setup,
                                        teardown),
    };
    int failed;

    /* must precede any thread using libcurl */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return 1;
    failed = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return failed;
}
