/* http_server: a tiny HTTP/1.1 server on the libuv loop.
 *
 * Built on libmicrohttpd (HTTP parsing, keep-alive, timeouts) and driven
 * from the daemon's libuv loop: no extra threads. The handler therefore
 * runs on the loop thread and may read daemon state without locks.
 *
 * Two ways to start one:
 *   - http_server_start: GET only (the daemon's /healthz, /metrics,
 *     /status); any other method is answered 405 without the handler.
 *   - http_server_serve: every method reaches the handler, with the
 *     request body (bounded: a bigger one is answered 413) and its headers
 *     (oops.http.serve, webhook receivers in tests and scenarios).
 *
 * Listen addresses: "IPV4:PORT", "[IPV6]:PORT" (a bracketed literal, the
 * socket is IPv6-only) or "localhost:PORT" (127.0.0.1, never resolved);
 * PORT 0 = any free port.
 *
 * Limits. The clients are scrapers, probes and webhook senders that need
 * a handful of short connections; the limits keep a flood of idle or slow
 * connections (slowloris) from taking the listener away from them, and
 * the listener recovers as soon as connections go away:
 *   - at most HTTP_MAX_CONNECTIONS (128) connections at once. When a new
 *     one arrives at the cap, the connection that has waited longest for
 *     a request's headers (just opened, or idle between keep-alive
 *     requests) is closed to make room; if every connection is busy with
 *     a request, the new one is closed at once (the client sees the
 *     connection closed, it never hangs in the backlog). So a probe still
 *     gets an answer while a slowloris holds the cap.
 *   - a new connection must deliver a complete request line and headers
 *     within HTTP_HEADER_TIMEOUT_S (10 s) of being accepted, however
 *     slowly it trickles them; else it is closed.
 *   - HTTP_IDLE_TIMEOUT_S (30 s) bounds the rest: a kept-alive connection
 *     must deliver its next request's headers within 30 s of the previous
 *     response (keep-alive idle time); a request must be read and answered
 *     within 30 s of its headers (a trickled body); and 30 s without any
 *     traffic closes a connection whatever it is doing.
 *   - request line + headers are bounded by the per-connection memory,
 *     HTTP_CONNECTION_MEMORY (32 KiB): a bigger header block is answered
 *     431 by libmicrohttpd without reaching the handler. Bodies are
 *     bounded separately (http_serve_options.max_body).
 *   - no per-IP limit: the default listener is loopback, where every
 *     client (probe, scraper, a local flood) has the same address, so it
 *     would only be a lower global cap; eviction is what protects probes.
 *   - at most HTTP_DEFER_MAX (32) deferred requests at once (see below):
 *     http_defer returns 0 for more, and the handler answers at once. A
 *     deferred request is a request in progress: never evicted at the cap,
 *     and not bound by the header, idle and request deadlines above while
 *     it waits (libmicrohttpd does not time a suspended connection out
 *     either) but by its own, HTTP_DEFER_TIMEOUT_S (30 s) from
 *     http_defer: then the server answers it 504 itself. Once answered,
 *     the answer must go out within HTTP_IDLE_TIMEOUT_S.
 * A server thus holds at most HTTP_MAX_CONNECTIONS + HTTP_CLOSING_SLACK
 * (160) sockets (connections closed by the cap but not yet reaped by
 * libmicrohttpd's next run), plus its listening socket and epoll fd (and
 * for http_server_serve the eventfd libmicrohttpd resumes through), and
 * at most 160 x 32 KiB = 5 MiB of connection buffers.
 *
 * Deferred answers (http_server_serve servers only). A handler whose answer
 * needs work on the loop (a database call) must not wait for it: it calls
 * http_defer(in), keeps the ticket, returns, and the request waits
 * (libmicrohttpd suspends the connection) until http_server_answer(s,
 * ticket, r) from any later loop callback. A ticket is never 0 and never
 * reused within a server's life; answering a ticket that is no longer
 * waiting (answered, timed out 504, the client gone and the request ended)
 * is harmless: -1. The server's headers (http_serve_options.headers) go on
 * deferred answers too. http_server_close answers 503 every request still
 * waiting (sent while it closes, as far as the socket takes it at once);
 * the server must not be used afterwards, so a caller that closes it
 * forgets its tickets. A client that goes away while its request waits is
 * not noticed (libmicrohttpd does not watch a suspended connection): its
 * answer is accepted (0) and written to the dead socket, then the
 * connection closes as usual.
 */
#ifndef OOPS_HTTP_SERVER_H
#define OOPS_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define HTTP_MAX_CONNECTIONS 128u
#define HTTP_HEADER_TIMEOUT_S 10u
#define HTTP_IDLE_TIMEOUT_S 30u
#define HTTP_CONNECTION_MEMORY ((size_t)32 << 10) /* 32 KiB */
#define HTTP_CLOSING_SLACK 32u
#define HTTP_DEFER_MAX 32u
#define HTTP_DEFER_TIMEOUT_S 30u

/* What a handler answers. The server pre-fills it with status 0, a NULL
 * content_type, a NULL body and len 0 before calling the handler. */
typedef struct http_response {
    int status;                 /* e.g. 200, 503, 404; 0 = 200 with a body, 404 without;
                                   outside 100..599 = answered as 500 */
    const char *content_type;   /* static string, e.g. "application/json";
                                   NULL = "text/plain; charset=utf-8" */
    char *body;                 /* malloc'd by the handler; the server frees it
                                   (also on error paths) */
    size_t len;                 /* bytes of body to send */
    const char *const *headers; /* NULL, or static "Name", "value" pairs ended by NULL:
                                   more response headers (Cache-Control, Allow, ...) */
} http_response;

/* Called on the loop thread for every GET request; fill *out.
 * method and path are valid only during the call. path excludes the query
 * string and is already percent-decoded. The handler must not block: the
 * whole daemon waits for it. It may call http_server_close() on its own
 * server; later requests in flight are then answered 503 without it. */
typedef void (*http_handler)(void *ud, const char *method, const char *path, http_response *out);

typedef struct http_server http_server;

/* A request as http_server_serve's handler sees it. Everything here is
 * valid only during the handler call. */
struct MHD_Connection;
typedef struct http_incoming {
    const char *method;          /* "GET", "POST", "PUT", ... as sent */
    const char *version;         /* "HTTP/1.1", "HTTP/1.0" */
    const char *path;            /* percent-decoded, without the query string */
    const char *body;            /* the whole body, NUL-terminated; "" when none */
    size_t body_len;             /* bytes of body (it may hold NUL bytes) */
    struct MHD_Connection *conn; /* private: read headers with the functions below */
} http_incoming;

/* The value of request header `name` (case-insensitive), or NULL when the
 * request has none. With a repeated header, the first one. */
const char *http_incoming_header(const http_incoming *in, const char *name);

/* Calls fn once per request header, in the order received, with the name
 * as the client spelled it. Returns the number of headers. */
typedef void (*http_header_fn)(void *ud, const char *name, const char *value);
int http_incoming_headers(const http_incoming *in, http_header_fn fn, void *ud);

/* The connection's addresses as text, as inet_ntop writes them ("127.0.0.1",
 * "::1": IPv6 without brackets): the client's (peer) and the one it
 * connected to (local: with a wildcard listener, the address dialled).
 * 0, or -1 with out "" when unknown. */
int http_incoming_peer_addr(const http_incoming *in, char *out, size_t len);
int http_incoming_local_addr(const http_incoming *in, char *out, size_t len);

/* Called on the loop thread for every complete request; fill *out, or
 * defer the answer (http_defer) when it needs more work (same
 * contract as http_handler: must not block, may close its own server;
 * out->content_type must stay valid until the handler returns and the
 * response is queued, i.e. must not be freed by the handler). */
typedef void (*http_serve_handler)(void *ud, const http_incoming *in, http_response *out);

/* In a http_serve_handler: answer this request later, from the loop
 * thread, with http_server_answer(). Returns a ticket (never 0; the same
 * one when called again for the same request), or 0 when the request
 * cannot be deferred (HTTP_DEFER_MAX requests of this server are already
 * waiting, the server is closing, or `in` is not the request whose handler
 * is running now): then the handler fills *out now as usual. After a
 * non-zero ticket, whatever the handler puts in *out is ignored (a body
 * there is freed). */
uint64_t http_defer(const http_incoming *in);

/* The answer to a deferred request, as a handler would have filled it
 * (the same defaults: status 0, NULL content_type, ...). The server takes
 * r->body over whatever happens (malloc'd; r->body is NULL on return);
 * r->content_type and r->headers are kept as pointers until the answer is
 * sent, so they must be static. Returns 0, or -1 when `ticket` is not
 * waiting for an answer (unknown, already answered, answered 504 at
 * HTTP_DEFER_TIMEOUT_S, its request ended, the server closing): then the
 * body is freed. Safe from any loop callback, a handler of the same server
 * included (even the deferring handler itself: its answer is then sent
 * when it returns), and after the client went away. */
int http_server_answer(http_server *s, uint64_t ticket, http_response *r);

/* For tests only: the deferred-answer timeout of `s` in ms instead of
 * HTTP_DEFER_TIMEOUT_S, for requests deferred from now on. */
void http_server_set_defer_timeout_ms(http_server *s, unsigned int ms);

/* The request body limit when http_serve_options.max_body is 0. */
#define HTTP_DEFAULT_MAX_BODY ((size_t)1 << 20) /* 1 MiB */

typedef struct http_serve_options {
    http_serve_handler handler; /* required; borrowed like ud */
    void *ud;
    size_t max_body;            /* bytes; 0 = HTTP_DEFAULT_MAX_BODY. A longer
                                   body is answered 413 without calling the
                                   handler (at once when Content-Length says
                                   so, then the connection is closed; after
                                   reading and dropping it when chunked) */
    const char *const *headers; /* NULL, or static "Name", "value" pairs ended
                                   by NULL: added to every response this
                                   server sends, its own 405/413/503 included
                                   (not libmicrohttpd's own 400/431 answers),
                                   before the handler's http_response.headers */
} http_serve_options;

/* Starts listening on `listen` ("IPV4:PORT", "[IPV6]:PORT" or
 * "localhost:PORT"; PORT 0 = any free port) and serves requests on `loop`.
 * Non-GET requests are answered 405 without calling the handler.
 * `handler` and `ud` are borrowed and must stay valid until the server is
 * closed. Returns a server owned by the caller (release it with
 * http_server_close), or NULL with a one-line message in err (when
 * err != NULL and errlen > 0), e.g.
 * "cannot listen on 127.0.0.1:7070: Address already in use", or for a
 * malformed address "cannot listen on ADDR: invalid address (want
 * IPV4:PORT, [IPV6]:PORT or localhost:PORT)". */
http_server *http_server_start(uv_loop_t *loop, const char *listen, http_handler handler, void *ud,
                               char *err, size_t errlen);

/* Like http_server_start, but every method reaches o->handler with the
 * request's body and headers (see http_serve_options). Same errors, plus
 * "no loop or handler given" when o or o->handler is NULL. */
http_server *http_server_serve(uv_loop_t *loop, const char *listen, const http_serve_options *o,
                               char *err, size_t errlen);

/* The server's uv handles stop keeping uv_run going: the loop ends when
 * nothing else is pending, while the server still answers whenever the
 * loop runs. For servers owned by scripts (oops.http.serve). */
void http_server_unref(http_server *s);

/* 0 when `listen` is an address http_server_start would accept, else -1
 * with the same one-line message it would give (nothing is opened): lets a
 * caller refuse a bad flag before doing anything else. */
int http_listen_check(const char *listen, char *err, size_t errlen);

/* What the limits did so far, for /metrics. */
typedef struct http_server_stats {
    unsigned int open;  /* connections open now (not closed by us) */
    uint64_t accepted;  /* connections taken on */
    uint64_t evicted;   /* closed at the cap to make room (waiting for headers longest) */
    uint64_t refused;   /* closed at once: the cap was full of requests in progress */
    uint64_t timed_out; /* closed by a deadline (headers, idle, request) */
} http_server_stats;

http_server_stats http_server_get_stats(const http_server *s);

/* The port actually bound (useful after asking for port 0). */
int http_server_port(const http_server *s);

/* Stops accepting, answers 503 the deferred requests still waiting, drops
 * open connections, closes the listening socket and the uv handles. The struct is freed once the handles' close
 * callbacks have run, so keep running the loop (uv_run) afterwards.
 * After this call `s` must not be used again, and the handler is not
 * called any more. Safe with NULL. */
void http_server_close(http_server *s);

#endif
