/*
 * http_client: asynchronous HTTP(S) client driven by the daemon's libuv loop.
 *
 * Built on libcurl's multi-socket API: every socket libcurl wants watched gets
 * a uv_poll_t, libcurl's single timeout is a uv_timer_t, and completions are
 * delivered through a callback on the loop thread. Nothing here blocks and no
 * extra threads are started (libcurl's threaded resolver aside).
 *
 * Prerequisite: the caller must have called curl_global_init() (e.g.
 * curl_global_init(CURL_GLOBAL_DEFAULT)) before http_client_new(), and must not
 * call curl_global_cleanup() while any client is open. libcurl's global init
 * is not thread-safe, so it belongs in main(), not in this module.
 *
 * Policy applied to every request: only http:// and https:// URLs, and no
 * userinfo in them (http://user:pw@host is refused unless allow_userinfo is
 * set: credentials in a URL end up in logs; the refusal never shows them),
 * redirects are never followed (a 3xx is a completed exchange), no signals
 * are used (CURLOPT_NOSIGNAL), TLS peers are verified, certificate chain and
 * host name, against the system CA store or the caller's ca_file (never
 * switched off), the whole exchange is bounded by timeout_ms (a peer that
 * accepts and stays silent, or trickles its body, is cut there), the response
 * body by max_body (the request fails past it, or with truncate the first
 * max_body bytes are kept and the status reported), and POSTs go out without
 * "Expect: 100-continue" unless the caller sets Expect. Connections are kept
 * alive and reused by later requests to the same host (and TLS settings):
 * up to HTTP_CLIENT_MAX_IDLE idle ones per client.
 *
 * Threading: all functions must be called on the loop's thread.
 */
#ifndef OOPS_HTTP_CLIENT_H
#define OOPS_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct http_client http_client;

/* Idle connections a client keeps for reuse (CURLMOPT_MAXCONNECTS); past it
 * the oldest idle one is closed. */
#define HTTP_CLIENT_MAX_IDLE 16

/* Longest ca_file path accepted, in bytes. */
#define HTTP_CLIENT_CA_PATH_MAX 4095

/* Outcome of one request, handed to http_done_cb. Every pointer in it is owned
 * by the client and valid only for the duration of the callback: copy what you
 * need to keep. */
typedef struct http_result {
    long status;       /* HTTP status of the final response, 0 when none was received
                          (set with some errors too: a timeout while the body came) */
    const char *body;  /* response body received (complete when error is NULL and
                          truncated is false); never NULL, always NUL-terminated
                          (may contain NULs) */
    size_t body_len;   /* bytes in body, excluding the terminating NUL */
    bool truncated;    /* with http_request.truncate only: the body went past
                          max_body, body holds its first max_body bytes, the rest
                          was not read (the connection is closed) and error is
                          NULL: status and headers had been received */
    const char *error; /* NULL when the exchange completed, whatever the status
                          (a 404 or 500 is not an error here). Otherwise a
                          one-line transport error, e.g.
                          "connect to 127.0.0.1:9 failed: Connection refused",
                          "timed out after 2000 ms",
                          "response body exceeds 4194304 bytes" (without truncate),
                          "TLS certificate of localhost:8443 refused: SSL: no
                          alternative certificate subject name matches target
                          host name 'localhost'",
                          "cancelled" (http_client_close was called). */
} http_result;

/* Completion callback; ud is the pointer given to http_client_request. It may
 * start new requests or call http_client_close (even on its own client). */
typedef void (*http_done_cb)(void *ud, const http_result *r);

/* A request description. Everything is copied by http_client_request, so the
 * struct and the strings it points to may be freed as soon as it returns. */
typedef struct http_request {
    const char *method;         /* "GET" or "POST" (exact, upper case) */
    const char *url;            /* absolute http:// or https:// URL */
    const char *const *headers; /* NULL-terminated list of "Name: value" lines, may
                                   be NULL. Must not contain CR or LF. libcurl
                                   semantics: "Name:" with no value removes a
                                   header libcurl would otherwise send. */
    const char *body;           /* POST body (binary safe), may be NULL when body_len
                                   is 0; must be empty for GET */
    size_t body_len;
    uint64_t timeout_ms; /* whole exchange, connect included; 0 = 10000 */
    size_t max_body;     /* response body limit in bytes; 0 = 4 MiB. A larger
                            response fails with an error, unless truncate */
    bool truncate;       /* past max_body, stop reading and complete with the
                            status, the first max_body bytes and
                            http_result.truncated (for a notification the
                            status is what counts) */
    const char *ca_file; /* PEM bundle of the CAs trusted for https:// instead
                            of the system store (a private receiver's CA); NULL
                            = the system store. Peer and host name are verified
                            either way. At most HTTP_CLIENT_CA_PATH_MAX bytes;
                            it must be a readable file when the request is made */
    bool allow_userinfo; /* accept user[:password]@ in the URL (sent as Basic
                            authentication); refused by default */
} http_request;

/* Creates a client bound to loop. Returns NULL when out of memory or when
 * libcurl/libuv refuse to initialise. The client owns one uv_timer_t plus a
 * uv_poll_t per active socket; release it with http_client_close (not free). */
http_client *http_client_new(uv_loop_t *loop);

/* Starts the request described by req. On success returns 0 and done(ud, r) is
 * called exactly once, later, on the loop thread (never from inside this
 * call). On failure returns -1, writes a one-line reason into err (when err is
 * non-NULL and errlen > 0; truncated to fit) and done is never called.
 * Failures are argument errors (unsupported method or URL scheme, malformed
 * URL or header, userinfo in the URL, body on a GET, a ca_file that cannot be
 * read: "cannot read CA file /etc/x.pem: No such file or directory"), a
 * closing client, or resource exhaustion. */
int http_client_request(http_client *c, const http_request *req, http_done_cb done, void *ud,
                        char *err, size_t errlen);

/* Cancels every outstanding request - each done callback is called once,
 * before this returns, with status 0 and error "cancelled" - and closes all
 * sockets and uv handles. The memory is freed once the uv close callbacks have
 * run, so keep running the loop (uv_loop_close reports UV_EBUSY until then);
 * do not use c after this call. Safe to call from a done callback; calling it
 * again from one of the "cancelled" callbacks is a no-op. NULL is ignored. */
void http_client_close(http_client *c);

#endif /* OOPS_HTTP_CLIENT_H */
