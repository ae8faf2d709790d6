/* http_server: libmicrohttpd in "external epoll" mode, driven by libuv.
 *
 * MHD keeps all its sockets in one epoll set of its own. That epoll fd
 * becomes readable whenever any of them is ready, so a single uv_poll_t
 * on it tells us when to call MHD_run(). MHD_run() never blocks here; a
 * uv_timer_t re-armed after every run covers MHD_get_timeout() (idle
 * timeouts, work MHD left pending: its inner set is edge-triggered), our
 * own per-connection deadlines, and one more run after any connection
 * closed.
 *
 * That last one is what keeps the listener alive. At its connection limit
 * (or when accept() hits EMFILE) MHD takes the listening socket out of its
 * epoll set, and puts it back only at the start of a later MHD_run(). When
 * the connections then close, nothing else would ever call MHD_run()
 * again: MHD_get_timeout() says "nothing to wait for" once the last one is
 * gone and the epoll set holds no socket any more, so the listener stayed
 * dead for good (issue 10). We also cap connections ourselves below MHD's
 * limit (on_accept), so in practice MHD never reaches it.
 *
 * Connections are tracked from MHD's "started" to its "closed"
 * notification (http_conn). We close one by shutdown() on its socket: the
 * fd stays MHD's (no fd number is freed under its feet), MHD sees the
 * hang-up on its next run, closes the connection and tells us.
 *
 * Deferred answers (http_defer) suspend the connection in the access
 * handler (MHD_ALLOW_SUSPEND_RESUME). A suspended connection is out of
 * MHD's epoll set and its timeout list: MHD neither reads, writes, times
 * out nor closes it, so shutting it down would do nothing until it is
 * resumed. Hence a deferred connection is skipped by the cap and by our
 * deadlines (http_conn.deferred) and bound instead by its request's own
 * deadline (504). Answering stores the answer in the request (req_state),
 * resumes the connection and runs MHD at once (timer at 0 ms): MHD calls
 * the access handler again for that request, which then queues the
 * stored answer. MHD 0.9.75 must not be stopped with a connection still
 * suspended (it panics): teardown answers every waiting request 503 first
 * and runs MHD a few times so that those answers go out. The request stays
 * in s->deferred until MHD reports it ended (on_completed), whatever the
 * path (answered, the client gone, MHD stopping), and is freed only there.
 */
#include "http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "buf.h"

/* The limits (HTTP_MAX_CONNECTIONS, the timeouts) are in http_server.h.
 * The backlog only has to absorb a burst between two loop iterations:
 * connections over the cap are accepted and closed, not left queued. */
#define HTTP_BACKLOG 128
#define HTTP_DEFAULT_CONTENT_TYPE "text/plain; charset=utf-8"
/* MHD runs at teardown for the 503s of requests still deferred: resuming
 * takes one, queueing the answer and sending it one or two more. */
#define HTTP_SETTLE_RUNS 8

/* One open connection, from MHD's "started" to its "closed" notification;
 * kept in accept order. Times are ms on the monotonic clock. */
typedef struct http_conn {
    struct http_conn *prev, *next;
    int fd;                 /* MHD's socket: only ever shutdown(), never closed */
    bool waiting;           /* waiting for a request's headers: may be evicted */
    bool shut;              /* shut down by us; no longer counted */
    bool deferred;          /* its request waits for http_server_answer: no deadline */
    uint64_t waiting_since; /* accepted, or its previous response sent */
    uint64_t deadline;      /* headers (waiting) or the request done by then */
} http_conn;

typedef struct req_state req_state;

struct http_server {
    uv_poll_t poll;   /* watches MHD's epoll fd */
    uv_timer_t timer; /* runs MHD again: its timeouts, our deadlines, reruns */
    struct MHD_Daemon *mhd;
    http_serve_handler handler;
    void *ud;
    http_handler get_handler; /* http_server_start's handler (GET only) */
    void *get_ud;
    bool get_only; /* non-GET: 405, body dropped, handler not called */
    size_t max_body;
    const char *const *headers; /* http_serve_options.headers: on every response */
    int port;
    bool in_run;                   /* MHD_run is on the stack: stopping MHD must wait */
    bool closing;                  /* http_server_close was called */
    int open_handles;              /* uv handles not yet closed; free at 0 */
    http_conn *conns, *conns_tail; /* open connections, oldest first */
    unsigned int nconns;           /* of those, not shut down by us */
    http_server_stats stats;
    bool rerun;                /* a connection closed: run MHD once more, now */
    req_state *deferred;       /* deferred requests, from http_defer to on_completed */
    unsigned int ndeferred;    /* of those, not yet handed to MHD (HTTP_DEFER_MAX) */
    uint64_t last_ticket;      /* tickets are 1, 2, ...: never reused */
    uint64_t defer_timeout_ms; /* HTTP_DEFER_TIMEOUT_S, or a test's */
};

/* The request whose handler is running, for http_defer's check: set on
 * the loop thread around each handler call. */
typedef struct handler_call {
    const http_incoming *in;
    http_server *s;
    req_state *rs;
} handler_call;
static _Thread_local handler_call calling;

static void set_err(char *err, size_t errlen, const char *where, const char *why)
{
    if (err && errlen > 0)
        snprintf(err, errlen, "cannot listen on %s: %s", where, why);
}

/* ---- listen address --------------------------------------------------- */

static int parse_port(const char *s, in_port_t *port)
{
    char *end;
    long v;

    if (*s < '0' || *s > '9') /* strtol would accept " +7" */
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > 65535)
        return -1;
    *port = htons((in_port_t)v);
    return 0;
}

/* "IPV4:PORT", "[IPV6]:PORT" or "localhost:PORT" -> sockaddr. "localhost"
 * is mapped by hand: resolving it would be a blocking lookup that may also
 * answer ::1. An IPv6 literal must be bracketed: "::1:80" is ambiguous. */
static int parse_listen(const char *where, struct sockaddr_storage *ss, socklen_t *sslen)
{
    const char *colon = strrchr(where, ':');
    char host[INET6_ADDRSTRLEN + 2];
    size_t hlen;

    if (!colon)
        return -1;
    hlen = (size_t)(colon - where);
    if (hlen == 0 || hlen >= sizeof host)
        return -1;
    memcpy(host, where, hlen);
    host[hlen] = '\0';
    memset(ss, 0, sizeof *ss);

    if (host[0] == '[') {
        struct sockaddr_in6 *sa6 = (struct sockaddr_in6 *)ss;

        if (hlen < 3 || host[hlen - 1] != ']')
            return -1;
        host[hlen - 1] = '\0';
        sa6->sin6_family = AF_INET6;
        if (inet_pton(AF_INET6, host + 1, &sa6->sin6_addr) != 1)
            return -1;
        *sslen = sizeof *sa6;
        return parse_port(colon + 1, &sa6->sin6_port);
    } else {
        struct sockaddr_in *sa = (struct sockaddr_in *)ss;

        if (strcmp(host, "localhost") == 0)
            strcpy(host, "127.0.0.1");
        sa->sin_family = AF_INET;
        if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
            return -1;
        *sslen = sizeof *sa;
        return parse_port(colon + 1, &sa->sin_port);
    }
}

/* We bind the socket ourselves (instead of MHD_OPTION_SOCK_ADDR) because
 * MHD_start_daemon only returns NULL: this way the caller gets the real
 * errno. Returns the listening fd, or -errno. */
static int open_listener(const struct sockaddr_storage *ss, socklen_t sslen, int *port)
{
    struct sockaddr_storage bound;
    socklen_t blen = sizeof bound;
    int one = 1;
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -errno;
    /* SO_REUSEADDR so a restarted daemon is not refused because of
     * TIME_WAIT leftovers; a live listener still yields EADDRINUSE.
     * [::]:PORT means IPv6 only, whatever net.ipv6.bindv6only says. */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        (ss->ss_family == AF_INET6 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0) ||
        bind(fd, (const struct sockaddr *)ss, sslen) != 0 || listen(fd, HTTP_BACKLOG) != 0 ||
        getsockname(fd, (struct sockaddr *)&bound, &blen) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    *port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    return fd;
}

/* ---- responses --------------------------------------------------------- */

/* Turns out->body into an MHD response and takes it over: whatever
 * happens, out->body is owned by MHD or freed when this returns. */
static struct MHD_Response *body_response(http_response *out)
{
    struct MHD_Response *r;
    char *body = out->body;

    out->body = NULL;
    if (!body || out->len == 0) {
        free(body);
        return MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    }
    r = MHD_create_response_from_buffer(out->len, body, MHD_RESPMEM_MUST_FREE);
    if (!r)
        free(body); /* MHD takes ownership only on success */
    return r;
}

/* Status defaults: 200 with a body, 404 without; nonsense becomes 500. */
static unsigned int final_status(http_response *out)
{
    if (out->status == 0)
        return out->body ? 200u : 404u;
    if (out->status < 100 || out->status > 599) {
        free(out->body);
        out->body = NULL;
        out->len = 0;
        return 500u;
    }
    return (unsigned int)out->status;
}

/* The server's own headers (http_serve_options.headers), then `more`. */
static void add_headers(const http_server *s, struct MHD_Response *r, const char *const *more)
{
    for (const char *const *h = s->headers; h && h[0] && h[1]; h += 2)
        MHD_add_response_header(r, h[0], h[1]);
    for (const char *const *h = more; h && h[0] && h[1]; h += 2)
        MHD_add_response_header(r, h[0], h[1]);
}

static enum MHD_Result send_response(const http_server *s, struct MHD_Connection *conn,
                                     http_response *out)
{
    unsigned int status = final_status(out);
    bool has_body = out->body && out->len > 0;
    struct MHD_Response *r = body_response(out);
    enum MHD_Result ok;

    if (!r)
        return MHD_NO; /* out of memory: MHD drops the connection */
    if (has_body)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                out->content_type ? out->content_type : HTTP_DEFAULT_CONTENT_TYPE);
    add_headers(s, r, out->headers);
    ok = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r); /* the queued connection holds its own ref */
    return ok;
}

static enum MHD_Result send_empty(const http_server *s, struct MHD_Connection *conn,
                                  unsigned int status, const char *allow)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ok;

    if (!r)
        return MHD_NO;
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    add_headers(s, r, NULL);
    ok = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ok;
}

/* ---- connections ------------------------------------------------------- */

static uint64_t now_ms(void) { return uv_hrtime() / 1000000u; }

static void wait_for_headers(http_conn *c, uint64_t now, unsigned int secs)
{
    c->waiting = true;
    c->waiting_since = now;
    c->deadline = now + (uint64_t)secs * 1000u;
}

/* The connection's state, or NULL when it is not tracked. */
static http_conn *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return i ? i->socket_context : NULL;
}

/* Closes c as far as we are concerned: MHD sees the hang-up on its next
 * run (shutdown wakes its epoll set) and then closes the fd itself. */
static void shut_conn(http_server *s, http_conn *c)
{
    if (c->shut)
        return;
    c->shut = true;
    s->nconns--;
    shutdown(c->fd, SHUT_RDWR);
}

static void unlink_conn(http_server *s, http_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        s->conns_tail = c->prev;
    if (!c->shut)
        s->nconns--;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode code)
{
    http_server *s = cls;
    http_conn *c = *socket_ctx;
    const union MHD_ConnectionInfo *fd;

    if (code != MHD_CONNECTION_NOTIFY_STARTED) { /* closed */
        s->rerun = true; /* MHD may have to take its listening socket back */
        if (c) {
            unlink_conn(s, c);
            free(c);
            *socket_ctx = NULL;
        }
        return;
    }
    fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!fd)
        return; /* cannot happen in MHD 0.9.75; MHD's own timeout applies */
    c = calloc(1, sizeof *c);
    if (!c) { /* a connection we cannot bound is not kept */
        shutdown(fd->connect_fd, SHUT_RDWR);
        return;
    }
    c->fd = fd->connect_fd;
    wait_for_headers(c, now_ms(), HTTP_HEADER_TIMEOUT_S);
    c->prev = s->conns_tail;
    if (s->conns_tail)
        s->conns_tail->next = c;
    else
        s->conns = c;
    s->conns_tail = c;
    s->nconns++;
    s->stats.accepted++;
    *socket_ctx = c;
}

/* MHD asks before it sets up each accepted connection. Under the cap: yes.
 * At the cap: the connection that has waited longest for a request's
 * headers is shut down to make room (a slowloris or an idle keep-alive
 * one, never a request in progress); when there is none, MHD_NO makes MHD
 * close the new one at once. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    http_server *s = cls;
    http_conn *c, *oldest = NULL;

    (void)addr;
    (void)addrlen;
    if (s->closing) /* teardown's last runs */
        return MHD_NO;
    if (s->nconns < HTTP_MAX_CONNECTIONS)
        return MHD_YES;
    for (c = s->conns; c; c = c->next)
        if (!c->shut && c->waiting && (!oldest || c->waiting_since < oldest->waiting_since))
            oldest = c;
    if (!oldest) {
        s->stats.refused++;
        return MHD_NO;
    }
    shut_conn(s, oldest);
    s->stats.evicted++;
    return MHD_YES;
}

static uint64_t expire_deferred(http_server *s, uint64_t now);

/* Shuts down the connections past their deadline (not those of deferred
 * requests, which answers 504 at theirs). Returns the earliest deadline
 * among the others, or 0 when there is none. */
static uint64_t reap(http_server *s, uint64_t now)
{
    uint64_t next = expire_deferred(s, now);

    for (http_conn *c = s->conns; c; c = c->next) {
        if (c->shut || c->deferred)
            continue;
        if (c->deadline <= now) {
            shut_conn(s, c);
            s->stats.timed_out++;
        } else if (next == 0 || c->deadline < next)
            next = c->deadline;
    }
    return next;
}

/* After MHD_stop_daemon: anything it did not report closed. */
static void free_conns(http_server *s)
{
    while (s->conns) {
        http_conn *c = s->conns;
        unlink_conn(s, c);
        free(c);
    }
}

/* ---- requests ---------------------------------------------------------- */

/* What we keep per request between MHD's calls; freed by on_completed. */
struct req_state {
    buf body;
    bool too_large; /* the body passed max_body: dropped, answered 413 */
    /* deferred (http_defer), ticket != 0: in s->deferred until freed */
    uint64_t ticket;
    struct req_state *dprev, *dnext;
    struct MHD_Connection *conn;
    uint64_t deadline;    /* ms: answered 504 by then */
    bool suspended;       /* MHD_suspend_connection'd, not resumed yet */
    bool answered;        /* `answer` holds the answer (the caller's or ours) */
    bool delivered;       /* `answer` was handed to MHD */
    http_response answer; /* its body is ours until delivered */
};

/* Content-Length above max? (Unparsable: MHD itself refuses the request.) */
static int declared_too_large(struct MHD_Connection *conn, size_t max)
{
    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    char *end;
    unsigned long long n;

    if (!cl || *cl < '0' || *cl > '9')
        return 0;
    errno = 0;
    n = strtoull(cl, &end, 10);
    return errno == ERANGE || n > (unsigned long long)max;
}

/* One chunk of the body: kept while the total fits in max_body, dropped
 * after. Returns 0, or -1 when out of memory. */
static int take_chunk(http_server *s, req_state *rs, const char *data, size_t len)
{
    if (s->get_only || rs->too_large)
        return 0;
    if (len > s->max_body - rs->body.len) {
        rs->too_large = true;
        buf_free(&rs->body);
        return 0;
    }
    buf_add(&rs->body, data, len);
    return rs->body.oom ? -1 : 0;
}

/* ---- deferred answers -------------------------------------------------- */

static void on_timer(uv_timer_t *t);

static void unlink_deferred(http_server *s, req_state *rs)
{
    if (rs->dprev)
        rs->dprev->dnext = rs->dnext;
    else
        s->deferred = rs->dnext;
    if (rs->dnext)
        rs->dnext->dprev = rs->dprev;
    rs->dprev = rs->dnext = NULL;
    if (!rs->delivered)
        s->ndeferred--;
}

/* Takes r over as rs's answer and wakes its connection: MHD calls
 * on_request for it again in its next run, which is made to come at once
 * (MHD's ITC would wake its epoll fd too). */
static void set_answer(http_server *s, req_state *rs, http_response *r)
{
    http_conn *c = conn_of(rs->conn);

    rs->answer = *r;
    r->body = NULL;
    rs->answered = true;
    if (c) { /* from now on an answer to send like any other */
        c->deferred = false;
        c->deadline = now_ms() + (uint64_t)HTTP_IDLE_TIMEOUT_S * 1000u;
    }
    if (!rs->suspended)
        return; /* still in the handler that deferred it: sent when it returns */
    rs->suspended = false;
    MHD_resume_connection(rs->conn);
    s->rerun = true;
    if (!s->in_run) /* else run_mhd arms the timer at 0 ms (rerun) */
        uv_timer_start(&s->timer, on_timer, 0, 0);
}

/* The server's own answer to a deferred request (504, 503): a short text. */
static void answer_self(http_server *s, req_state *rs, unsigned int status, const char *text)
{
    http_response r = {.status = (int)status, .body = strdup(text)};

    r.len = r.body ? strlen(r.body) : 0;
    set_answer(s, rs, &r);
}

/* Answers 504 the deferred requests waiting past their deadline. Returns
 * the earliest deadline among those still waiting, or 0 when none is. */
static uint64_t expire_deferred(http_server *s, uint64_t now)
{
    uint64_t next = 0;

    for (req_state *rs = s->deferred; rs; rs = rs->dnext) {
        if (rs->answered)
            continue;
        if (rs->deadline <= now)
            answer_self(s, rs, MHD_HTTP_GATEWAY_TIMEOUT, "no answer in time\n");
        else if (next == 0 || rs->deadline < next)
            next = rs->deadline;
    }
    return next;
}

/* Before MHD_stop_daemon: every request still deferred is answered 503,
 * and MHD runs until the deferred answers are out or HTTP_SETTLE_RUNS
 * runs are over (a client that does not read: MHD_stop_daemon closes it).
 * Either way none is suspended any more. */
static void settle_deferred(http_server *s)
{
    s->in_run = true;
    for (req_state *rs = s->deferred; rs; rs = rs->dnext)
        if (!rs->answered)
            answer_self(s, rs, MHD_HTTP_SERVICE_UNAVAILABLE, "server closing\n");
    for (int i = 0; i < HTTP_SETTLE_RUNS && s->deferred; i++)
        MHD_run(s->mhd);
    s->in_run = false;
}

static enum MHD_Result park(http_server *s, struct MHD_Connection *conn, req_state *rs);

/* MHD calls on_request again for a resumed request: its answer. */
static enum MHD_Result deliver(http_server *s, struct MHD_Connection *conn, req_state *rs)
{
    if (!rs->answered) /* not resumed by us (cannot happen): wait again */
        return park(s, conn, rs);
    rs->delivered = true;
    s->ndeferred--;
    return send_response(s, conn, &rs->answer);
}

/* Its handler deferred rs: its connection waits, suspended, for the
 * answer. Unless the answer is there already (from the handler itself) or
 * the handler closed the server: then it goes out now. */
static enum MHD_Result park(http_server *s, struct MHD_Connection *conn, req_state *rs)
{
    if (!rs->answered && !s->closing) {
        rs->suspended = true;
        MHD_suspend_connection(conn);
        return MHD_YES;
    }
    if (!rs->answered)
        answer_self(s, rs, MHD_HTTP_SERVICE_UNAVAILABLE, "server closing\n");
    return deliver(s, conn, rs);
}

uint64_t http_defer(const http_incoming *in)
{
    http_server *s = calling.s;
    req_state *rs = calling.rs;
    http_conn *c;

    if (!in || in != calling.in || !s || !rs)
        return 0;
    if (rs->ticket != 0)
        return rs->ticket;
    c = conn_of(in->conn);
    if (s->get_only || s->closing || s->ndeferred >= HTTP_DEFER_MAX || (c && c->shut))
        return 0; /* shut: past its deadline, MHD would not see it while suspended */
    rs->ticket = ++s->last_ticket;
    rs->conn = in->conn;
    rs->deadline = now_ms() + s->defer_timeout_ms;
    rs->dnext = s->deferred;
    if (s->deferred)
        s->deferred->dprev = rs;
    s->deferred = rs;
    s->ndeferred++;
    if (c)
        c->deferred = true;
    return rs->ticket;
}

static req_state *find_waiting(http_server *s, uint64_t ticket)
{
    for (req_state *rs = s->deferred; rs; rs = rs->dnext)
        if (rs->ticket == ticket)
            return rs->answered ? NULL : rs;
    return NULL;
}

int http_server_answer(http_server *s, uint64_t ticket, http_response *r)
{
    req_state *rs;

    if (!r)
        return -1;
    rs = s && !s->closing && ticket != 0 ? find_waiting(s, ticket) : NULL;
    if (!rs) {
        free(r->body);
        r->body = NULL;
        return -1;
    }
    set_answer(s, rs, r);
    return 0;
}

void http_server_set_defer_timeout_ms(http_server *s, unsigned int ms)
{
    if (s)
        s->defer_timeout_ms = ms;
}

/* ---- the access handler ------------------------------------------------ */

static void get_trampoline(void *ud, const http_incoming *in, http_response *out)
{
    http_server *s = ud;

    s->get_handler(s->get_ud, in->method, in->path, out);
}

/* MHD calls this once after the headers, once per body chunk, and once
 * more when the request is complete. We answer only on that last call so
 * the body is consumed and the connection can stay alive; except a body
 * whose Content-Length is over the limit, answered 413 at once (MHD then
 * drops the rest and closes the connection). `url` is already the
 * percent-decoded path without the query string. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_ptr)
{
    http_server *s = cls;
    req_state *rs = *req_ptr;
    http_response out = {0};
    http_incoming in;
    handler_call saved = calling;

    if (!rs) { /* headers seen */
        http_conn *c = conn_of(conn);
        if (c) { /* the request must now be read and answered */
            c->waiting = false;
            c->deadline = now_ms() + (uint64_t)HTTP_IDLE_TIMEOUT_S * 1000u;
        }
        rs = calloc(1, sizeof *rs);
        if (!rs)
            return MHD_NO;
        *req_ptr = rs;
        if (!s->get_only && !s->closing && declared_too_large(conn, s->max_body)) {
            rs->too_large = true;
            return send_empty(s, conn, 413u, NULL);
        }
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return take_chunk(s, rs, upload_data, n) == 0 ? MHD_YES : MHD_NO;
    }
    if (rs->ticket != 0) /* deferred, resumed by its answer */
        return deliver(s, conn, rs);
    if (s->closing) /* closed from a handler earlier in this MHD_run */
        return send_empty(s, conn, MHD_HTTP_SERVICE_UNAVAILABLE, NULL);
    if (s->get_only && strcmp(method, MHD_HTTP_METHOD_GET) != 0)
        return send_empty(s, conn, MHD_HTTP_METHOD_NOT_ALLOWED, MHD_HTTP_METHOD_GET);
    if (rs->too_large)
        return send_empty(s, conn, 413u, NULL);
    in.method = method;
    in.version = version ? version : "";
    in.path = url;
    in.body = rs->body.p ? rs->body.p : "";
    in.body_len = rs->body.len;
    in.conn = conn;
    calling = (handler_call){&in, s, rs};
    s->handler(s->ud, &in, &out);
    calling = saved;
    if (rs->ticket != 0) { /* deferred: what the handler put in out is ignored */
        free(out.body);
        return park(s, conn, rs);
    }
    return send_response(s, conn, &out);
}

/* Every request ends here (answered, aborted, or the server stopping). */
static void on_completed(void *cls, struct MHD_Connection *conn, void **req_ptr,
                         enum MHD_RequestTerminationCode toe)
{
    http_server *s = cls;
    req_state *rs = *req_ptr;
    http_conn *c = conn_of(conn);

    if (c)
        c->deferred = false;
    if (c && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        wait_for_headers(c, now_ms(), HTTP_IDLE_TIMEOUT_S); /* keep-alive */
    if (rs) {
        if (rs->ticket != 0) /* its ticket is unknown from now on */
            unlink_deferred(s, rs);
        free(rs->answer.body); /* not delivered: the client went away */
        buf_free(&rs->body);
        free(rs);
        *req_ptr = NULL;
    }
}

const char *http_incoming_header(const http_incoming *in, const char *name)
{
    if (!in || !in->conn || !name)
        return NULL;
    return MHD_lookup_connection_value(in->conn, MHD_HEADER_KIND, name);
}

typedef struct header_walk {
    http_header_fn fn;
    void *ud;
} header_walk;

static enum MHD_Result each_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    header_walk *w = cls;

    (void)kind;
    if (w->fn && key)
        w->fn(w->ud, key, value ? value : "");
    return MHD_YES;
}

/* inet_ntop of an IPv4 or IPv6 socket address into out; 0 or -1 (out ""). */
static int addr_text(const struct sockaddr *sa, char *out, size_t len)
{
    const void *a = NULL;

    if (len > 0)
        out[0] = '\0';
    if (sa && sa->sa_family == AF_INET)
        a = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
    else if (sa && sa->sa_family == AF_INET6)
        a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    if (!a || !inet_ntop(sa->sa_family, a, out, (socklen_t)len)) {
        if (len > 0)
            out[0] = '\0';
        return -1;
    }
    return 0;
}

int http_incoming_peer_addr(const http_incoming *in, char *out, size_t len)
{
    const union MHD_ConnectionInfo *i =
        in && in->conn ? MHD_get_connection_info(in->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS)
                       : NULL;

    return addr_text(i ? i->client_addr : NULL, out, len);
}

int http_incoming_local_addr(const http_incoming *in, char *out, size_t len)
{
    const union MHD_ConnectionInfo *i =
        in && in->conn ? MHD_get_connection_info(in->conn, MHD_CONNECTION_INFO_CONNECTION_FD)
                       : NULL;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;

    if (!i || getsockname(i->connect_fd, (struct sockaddr *)&ss, &sl) != 0) {
        if (len > 0)
            out[0] = '\0';
        return -1;
    }
    return addr_text((const struct sockaddr *)&ss, out, len);
}

int http_incoming_headers(const http_incoming *in, http_header_fn fn, void *ud)
{
    header_walk w = {fn, ud};

    if (!in || !in->conn)
        return 0;
    return MHD_get_connection_values(in->conn, MHD_HEADER_KIND, each_header, &w);
}

/* ---- loop integration -------------------------------------------------- */

static void teardown(http_server *s);

/* MHD must run again: at once after a connection closed (so it takes its
 * listening socket back if it had dropped it), within MHD_get_timeout()
 * ms (MHD_NO: nothing pending, no timeout of its own to enforce), and at
 * our earliest connection deadline. */
static void arm_timer(http_server *s)
{
    MHD_UNSIGNED_LONG_LONG ms;
    uint64_t delay = UINT64_MAX, now = now_ms(), next = reap(s, now);

    if (s->rerun) {
        s->rerun = false;
        delay = 0;
    }
    if (MHD_get_timeout(s->mhd, &ms) == MHD_YES && (uint64_t)ms < delay)
        delay = (uint64_t)ms;
    if (next != 0 && next - now < delay)
        delay = next - now;
    if (delay != UINT64_MAX)
        uv_timer_start(&s->timer, on_timer, delay, 0);
    else
        uv_timer_stop(&s->timer);
}

static void run_mhd(http_server *s)
{
    reap(s, now_ms()); /* what it shuts down, this very run closes */
    s->in_run = true;
    MHD_run(s->mhd);
    s->in_run = false;
    if (s->closing)
        teardown(s); /* http_server_close was called by a handler */
    else
        arm_timer(s);
}

static void on_poll(uv_poll_t *p, int status, int events)
{
    (void)status; /* even on error, MHD_run is the one to sort it out */
    (void)events;
    run_mhd(p->data);
}

static void on_timer(uv_timer_t *t) { run_mhd(t->data); }

static void on_handle_closed(uv_handle_t *h)
{
    http_server *s = h->data;

    if (--s->open_handles == 0)
        free(s);
}

/* Order matters: closing the poll handle takes the epoll fd out of
 * libuv's own epoll set synchronously; only then may MHD_stop_daemon
 * close it (a reused fd number would otherwise confuse libuv). */
static void teardown(http_server *s)
{
    settle_deferred(s); /* before MHD_stop_daemon: none left suspended */
    uv_close((uv_handle_t *)&s->poll, on_handle_closed);
    uv_close((uv_handle_t *)&s->timer, on_handle_closed);
    MHD_stop_daemon(s->mhd); /* also closes the listening socket */
    s->mhd = NULL;
    free_conns(s);
}

static struct MHD_Daemon *start_mhd(http_server *s, int listen_fd)
{
    /* No MHD_USE_INTERNAL_POLLING_THREAD: MHD only does work inside
     * MHD_run(), i.e. on the loop thread. */
    /* MHD's own limit sits above our cap (on_accept) by the connections
     * we shut down that MHD has not reaped yet; it is only a backstop. */
    /* Suspend/resume (http_defer) costs an eventfd of MHD's (its ITC, in
     * its epoll set): only for http_server_serve servers. */
    unsigned int flags =
        MHD_USE_EPOLL | (s->get_only ? 0u : (unsigned int)MHD_ALLOW_SUSPEND_RESUME);

    return MHD_start_daemon(flags, 0, on_accept, s, on_request, s, MHD_OPTION_LISTEN_SOCKET,
                            (MHD_socket)listen_fd, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned int)HTTP_IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned int)(HTTP_MAX_CONNECTIONS + HTTP_CLOSING_SLACK),
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONNECTION_MEMORY,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_END);
}

/* Hooks MHD's epoll fd into the loop. On failure s is released: at once
 * when nothing was registered with the loop, else by the close callbacks
 * (uv_poll_start cannot really fail in libuv 1.44; this is belt and braces). */
static int attach_to_loop(http_server *s, uv_loop_t *loop)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    int rc = info ? uv_poll_init(loop, &s->poll, info->epoll_fd) : UV_EINVAL;

    if (rc != 0) {
        MHD_stop_daemon(s->mhd);
        free(s);
        return rc;
    }
    uv_timer_init(loop, &s->timer);
    s->poll.data = s;
    s->timer.data = s;
    s->open_handles = 2;
    rc = uv_poll_start(&s->poll, UV_READABLE, on_poll);
    if (rc != 0)
        teardown(s);
    return rc;
}

/* Both start functions end here; `s` is freed on failure. */
static http_server *start_listening(http_server *s, uv_loop_t *loop, const char *where, char *err,
                                    size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sslen = 0;
    int fd, rc;

    if (parse_listen(where, &ss, &sslen) != 0) {
        set_err(err, errlen, where,
                "invalid address (want IPV4:PORT, [IPV6]:PORT or "
                "localhost:PORT)");
        free(s);
        return NULL;
    }
    s->defer_timeout_ms = (uint64_t)HTTP_DEFER_TIMEOUT_S * 1000u;
    fd = open_listener(&ss, sslen, &s->port);
    if (fd < 0) {
        set_err(err, errlen, where, strerror(-fd));
        free(s);
        return NULL;
    }
    s->mhd = start_mhd(s, fd);
    if (!s->mhd) {
        close(fd); /* MHD leaves a passed-in socket open when it fails */
        set_err(err, errlen, where, "cannot start HTTP daemon");
        free(s);
        return NULL;
    }
    rc = attach_to_loop(s, loop);
    if (rc != 0) {
        set_err(err, errlen, where, uv_strerror(rc));
        return NULL;
    }
    arm_timer(s);
    return s;
}

int http_listen_check(const char *where, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sslen = 0;

    if (where && parse_listen(where, &ss, &sslen) == 0)
        return 0;
    set_err(err, errlen, where ? where : "(null)",
            "invalid address (want IPV4:PORT, [IPV6]:PORT or localhost:PORT)");
    return -1;
}

http_server *http_server_start(uv_loop_t *loop, const char *where, http_handler handler, void *ud,
                               char *err, size_t errlen)
{
    http_server *s;

    if (!where)
        where = "(null)";
    if (!loop || !handler) {
        set_err(err, errlen, where, "no loop or handler given");
        return NULL;
    }
    s = calloc(1, sizeof *s);
    if (!s) {
        set_err(err, errlen, where, strerror(ENOMEM));
        return NULL;
    }
    s->handler = get_trampoline;
    s->ud = s;
    s->get_handler = handler;
    s->get_ud = ud;
    s->get_only = true;
    return start_listening(s, loop, where, err, errlen);
}

http_server *http_server_serve(uv_loop_t *loop, const char *where, const http_serve_options *o,
                               char *err, size_t errlen)
{
    http_server *s;

    if (!where)
        where = "(null)";
    if (!loop || !o || !o->handler) {
        set_err(err, errlen, where, "no loop or handler given");
        return NULL;
    }
    s = calloc(1, sizeof *s);
    if (!s) {
        set_err(err, errlen, where, strerror(ENOMEM));
        return NULL;
    }
    s->handler = o->handler;
    s->ud = o->ud;
    s->max_body = o->max_body != 0 ? o->max_body : HTTP_DEFAULT_MAX_BODY;
    s->headers = o->headers;
    return start_listening(s, loop, where, err, errlen);
}

void http_server_unref(http_server *s)
{
    if (!s || s->closing)
        return;
    uv_unref((uv_handle_t *)&s->poll);
    uv_unref((uv_handle_t *)&s->timer);
}

http_server_stats http_server_get_stats(const http_server *s)
{
    http_server_stats st = {0};

    if (s) {
        st = s->stats;
        st.open = s->nconns;
    }
    return st;
}

int http_server_port(const http_server *s) { return s ? s->port : 0; }

void http_server_close(http_server *s)
{
    if (!s || s->closing)
        return;
    s->closing = true;
    if (!s->in_run)
        teardown(s); /* else run_mhd tears down once MHD_run returns */
}
