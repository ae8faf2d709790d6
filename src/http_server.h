/* http_server: a tiny HTTP/1.1 server for /healthz, /metrics and /status.
 *
 * Built on libmicrohttpd (HTTP parsing, keep-alive, timeouts) and driven
 * from the daemon's libuv loop: no extra threads. The handler therefore
 * runs on the loop thread and may read daemon state without locks.
 */
#ifndef OOPS_HTTP_SERVER_H
#define OOPS_HTTP_SERVER_H

#include <stddef.h>
#include <uv.h>

/* What a handler answers. The server pre-fills it with status 0, a NULL
 * content_type, a NULL body and len 0 before calling the handler. */
typedef struct http_response {
    int status;               /* e.g. 200, 503, 404; 0 = 200 with a body, 404 without;
                                 outside 100..599 = answered as 500 */
    const char *content_type; /* static string, e.g. "application/json";
                                 NULL = "text/plain; charset=utf-8" */
    char *body;               /* malloc'd by the handler; the server frees it
                                 (also on error paths) */
    size_t len;               /* bytes of body to send */
} http_response;

/* Called on the loop thread for every GET request; fill *out.
 * method and path are valid only during the call. path excludes the query
 * string and is already percent-decoded. The handler must not block: the
 * whole daemon waits for it. It may call http_server_close() on its own
 * server; later requests in flight are then answered 503 without it. */
typedef void (*http_handler)(void *ud, const char *method, const char *path,
                             http_response *out);

typedef struct http_server http_server;

/* Starts listening on `listen` ("HOST:PORT", HOST an IPv4 literal or
 * "localhost"; PORT 0 = any free port) and serves requests on `loop`.
 * Non-GET requests are answered 405 without calling the handler.
 * `handler` and `ud` are borrowed and must stay valid until the server is
 * closed. Returns a server owned by the caller (release it with
 * http_server_close), or NULL with a one-line message in err (when
 * err != NULL and errlen > 0), e.g.
 * "cannot listen on 127.0.0.1:7070: Address already in use". */
http_server *http_server_start(uv_loop_t *loop, const char *listen,
                               http_handler handler, void *ud,
                               char *err, size_t errlen);

/* The port actually bound (useful after asking for port 0). */
int http_server_port(const http_server *s);

/* Stops accepting, drops open connections, closes the listening socket
 * and the uv handles. The struct is freed once the handles' close
 * callbacks have run, so keep running the loop (uv_run) afterwards.
 * After this call `s` must not be used again, and the handler is not
 * called any more. Safe with NULL. */
void http_server_close(http_server *s);

#endif
