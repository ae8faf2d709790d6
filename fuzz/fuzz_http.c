/* fuzz_http — the HTTP request path: src/http_server.c (libmicrohttpd on
 * the libuv loop) with a handler like the daemon's and oops.http.serve's.
 *
 * Two servers listen on 127.0.0.1:0 on one uv loop in this process:
 * http_server_serve (every method, body up to 1024 bytes, headers) and
 * http_server_start (GET only, as /healthz /metrics /status). Each input is
 * written, as raw bytes, on a new connection to one of them (the serve one
 * for inputs of even length, the GET one for odd), and the loop runs until
 * the connection is closed or nothing moves for a few rounds (an
 * incomplete request just waits); then the connection is reset and the
 * loop runs once more so the server drops it.
 *
 * Asserted: the handler sees a method, an HTTP/1.x version and a path, a
 * body no longer than the limit, NUL-terminated at body_len, headers whose
 * names and values are strings, and the connection's addresses
 * (127.0.0.1 both); the daemon's Host check (web_host_allowed, src/web.c)
 * never accepts a Host header web_host_parse refuses; whatever comes back
 * starts with "HTTP/1." and a
 * three-digit status. ASan/UBSan watch http_server.c (libmicrohttpd itself
 * is the system's library: not instrumented, so its parsing gives no
 * coverage; its memory errors on heap blocks are still caught).
 *
 * Paths steer the handler: /status/N answers status N (0, 99, 600 and
 * negative values exercise the 404/500 mapping), /empty answers no body,
 * /close closes the server from inside the handler (it is restarted after
 * that input).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "http_server.h"
#include "web.h"

#define MAX_BODY 1024
#define IDLE_ROUNDS 4
#define MAX_ROUNDS 2000

static uv_loop_t loop;
static web_hosts hosts; /* as the daemon's: --listen 127.0.0.1, one --http-host */
static http_server *serve_srv, *get_srv;
static int serve_port, get_port;
static int closed_by_handler;
static const uint8_t *cur_data;
static size_t cur_size;

static void header_seen(void *ud, const char *name, const char *value)
{
    size_t *n = ud;
    if (!name || !value)
        fuzz_fail(cur_data, cur_size, "header callback without a name or value");
    *n += strlen(name) + strlen(value);
}

static void answer(const char *path, http_response *out, http_server *self)
{
    if (strncmp(path, "/status/", 8) == 0) {
        out->status = atoi(path + 8);
    } else if (strcmp(path, "/close") == 0) {
        http_server_close(self);
        closed_by_handler = 1;
    }
    if (strcmp(path, "/empty") != 0) {
        size_t n = strlen(path);
        out->body = malloc(n + 1);
        if (!out->body)
            abort();
        memcpy(out->body, path, n + 1);
        out->len = n;
        out->content_type = n % 2 ? "application/json" : NULL;
    }
}

static void on_serve(void *ud, const http_incoming *in, http_response *out)
{
    (void)ud;
    if (!in->method || !in->path || !in->body)
        fuzz_fail(cur_data, cur_size, "handler without a method, path or body");
    if (in->body_len > MAX_BODY)
        fuzz_fail(cur_data, cur_size, "body of %zu bytes passed the %d-byte limit", in->body_len,
                  MAX_BODY);
    if (in->body[in->body_len] != '\0')
        fuzz_fail(cur_data, cur_size, "body not NUL-terminated at body_len");
    size_t total = 0;
    int n = http_incoming_headers(in, header_seen, &total);
    if (n < 0)
        fuzz_fail(cur_data, cur_size, "http_incoming_headers returned %d", n);
    const char *host = http_incoming_header(in, "host");
    const char *again = http_incoming_header(in, "HOST");
    if (!host != !again)
        fuzz_fail(cur_data, cur_size, "header lookup depends on the name's case");
    /* The daemon's Host check (src/web.c) on what libmicrohttpd hands over. */
    char local[64], peer[64], canon[WEB_HOST_NAME_MAX + 1];
    if (http_incoming_local_addr(in, local, sizeof local) != 0 || strcmp(local, "127.0.0.1") != 0 ||
        http_incoming_peer_addr(in, peer, sizeof peer) != 0 || strcmp(peer, "127.0.0.1") != 0)
        fuzz_fail(cur_data, cur_size, "connection addresses unknown or not 127.0.0.1");
    if (!in->version || strncmp(in->version, "HTTP/1.", 7) != 0)
        fuzz_fail(cur_data, cur_size, "handler without an HTTP/1.x version");
    bool allowed = web_host_allowed(&hosts, host, local);
    if (host && allowed && web_host_parse(host, canon, sizeof canon) == WEB_HOST_BAD)
        fuzz_fail(cur_data, cur_size, "a malformed Host is allowed");
    answer(in->path, out, serve_srv);
}

static void on_get(void *ud, const char *method, const char *path, http_response *out)
{
    (void)ud;
    if (!method || !path || strcmp(method, "GET") != 0)
        fuzz_fail(cur_data, cur_size, "GET-only handler called for %s", method ? method : "(null)");
    answer(path, out, get_srv);
}

static void start_servers(void)
{
    char err[256];
    if (!serve_srv) {
        http_serve_options o = {.handler = on_serve, .ud = NULL, .max_body = MAX_BODY};
        serve_srv = http_server_serve(&loop, "127.0.0.1:0", &o, err, sizeof err);
        if (!serve_srv) {
            fprintf(stderr, "fuzz_http: %s\n", err);
            abort();
        }
        serve_port = http_server_port(serve_srv);
    }
    if (!get_srv) {
        get_srv = http_server_start(&loop, "127.0.0.1:0", on_get, NULL, err, sizeof err);
        if (!get_srv) {
            fprintf(stderr, "fuzz_http: %s\n", err);
            abort();
        }
        get_port = http_server_port(get_srv);
    }
}

static int connect_to(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* Non-blocking from the start: libFuzzer's SIGALRM (its -timeout clock)
     * would interrupt a blocking connect. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        perror("fuzz_http: socket");
        abort();
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (errno != EINPROGRESS && errno != EINTR) {
            perror("fuzz_http: connect");
            abort();
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int e = 0;
        socklen_t elen = sizeof e;
        while (poll(&p, 1, 5000) < 0 && errno == EINTR)
            ;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) != 0 || e != 0 ||
            !(p.revents & POLLOUT)) {
            fprintf(stderr, "fuzz_http: connect: %s\n", strerror(e ? e : ETIMEDOUT));
            abort();
        }
    }
    /* Reset on close: no TIME_WAIT pile-up at thousands of inputs a second. */
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int started;
    if (!started) {
        started = 1;
        signal(SIGPIPE, SIG_IGN); /* as the daemon does */
        uv_loop_init(&loop);
        char err[256];
        web_hosts_listen(&hosts, "127.0.0.1:0");
        if (web_hosts_add(&hosts, "oops.example", err, sizeof err) != 0)
            abort();
    }
    start_servers();
    cur_data = data;
    cur_size = size;
    closed_by_handler = 0;
    http_server *target = size % 2 == 0 ? serve_srv : get_srv;
    int fd = connect_to(http_server_port(target));

    char head[16];
    size_t got = 0, sent = 0;
    int idle = 0, eof = 0;
    for (int round = 0; round < MAX_ROUNDS && idle < IDLE_ROUNDS && !eof; round++) {
        int moved = 0;
        if (sent < size) {
            ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
            if (n > 0) {
                sent += (size_t)n;
                moved = 1;
            } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                eof = 1; /* the server closed or reset the connection */
            }
        }
        uv_run(&loop, UV_RUN_NOWAIT);
        for (;;) {
            char buf[4096];
            ssize_t n = recv(fd, buf, sizeof buf, 0);
            if (n > 0) {
                if (got < sizeof head)
                    memcpy(head + got, buf,
                           (size_t)n < sizeof head - got ? (size_t)n : sizeof head - got);
                got += (size_t)n;
                moved = 1;
                continue;
            }
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                eof = 1;
            break;
        }
        idle = moved ? 0 : idle + 1;
    }
    if (got > 0) {
        size_t n = got < sizeof head ? got : sizeof head;
        const char *want = "HTTP/1.";
        if (memcmp(head, want, n < 7 ? n : 7) != 0 ||
            (n >= 12 && (head[8] != ' ' || head[9] < '1' || head[9] > '5' || head[10] < '0' ||
                         head[10] > '9' || head[11] < '0' || head[11] > '9')))
            fuzz_fail(data, size, "response starts with \"%.*s\"", (int)n, head);
    }
    close(fd);
    uv_run(&loop, UV_RUN_NOWAIT);
    uv_run(&loop, UV_RUN_NOWAIT);
    if (closed_by_handler) {
        /* The handler closed its server: let the close finish, start anew. */
        uv_run(&loop, UV_RUN_NOWAIT);
        if (target == serve_srv)
            serve_srv = NULL;
        else
            get_srv = NULL;
    }
    return 0;
}
