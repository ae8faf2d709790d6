/*
 * http_client: libcurl multi-socket API glued to a libuv loop.
 *
 * libcurl tells us which sockets to watch (CURLMOPT_SOCKETFUNCTION) and when
 * to wake it up (CURLMOPT_TIMERFUNCTION); we map those onto one uv_poll_t per
 * socket and one uv_timer_t, feed readiness back through
 * curl_multi_socket_action() and collect finished transfers with
 * curl_multi_info_read(). User callbacks are only ever invoked from
 * drain_completed() or http_client_close(), never from inside a libcurl
 * callback, so they may freely start requests or close the client.
 */
#include "http_client.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_MS 10000u
#define DEFAULT_MAX_BODY ((size_t)4 << 20)
/* How long libcurl keeps a parsed CA file: a replaced ca_file counts within a
 * minute (libcurl's default is a day). */
#define CA_CACHE_S 60L

typedef struct http_sock http_sock;
typedef struct http_req http_req;

struct http_client {
    uv_loop_t *loop;
    CURLM *multi;          /* NULL once closing has torn it down */
    uv_timer_t timer;      /* libcurl's single timeout */
    http_req *reqs;        /* in flight, doubly linked */
    http_sock *socks;      /* watched sockets whose poll handle is not closing */
    unsigned open_handles; /* uv handles whose close callback has not run yet */
    int closing;
};

/* One socket libcurl asked us to watch; attached to it with curl_multi_assign. */
struct http_sock {
    http_client *c;
    uv_poll_t poll;
    curl_socket_t fd;
    http_sock *prev, *next;
};

struct http_req {
    http_client *c;
    CURL *easy;
    struct curl_slist *headers;
    http_done_cb done;
    void *ud;
    uint64_t timeout_ms;
    size_t max_body;
    char *buf; /* response body, NUL-terminated once non-NULL */
    size_t len, cap;
    bool truncate;   /* keep the first max_body bytes rather than fail */
    bool too_large;  /* the write callback refused data beyond max_body */
    bool truncated;  /* ... and kept the first max_body bytes (truncate) */
    bool no_memory;  /* the write callback could not grow buf */
    char *authority; /* "host:port" from the URL, for error messages */
    char *ca_file;   /* the caller's CA bundle, NULL for the system store */
    char errbuf[CURL_ERROR_SIZE];
    http_req *prev, *next;
};

/* ------------------------------------------------------------------ misc */

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Error text must stay one line: libcurl's messages sometimes end in '\n'. */
static void one_line(char *s)
{
    char *p = s;
    for (; *p; p++)
        if (*p == '\r' || *p == '\n')
            *p = ' ';
    while (p > s && p[-1] == ' ')
        *--p = '\0';
}

/* Called for every uv handle we own; the client goes when the last one does. */
static void handle_closed(http_client *c)
{
    c->open_handles--;
    if (c->closing && c->open_handles == 0)
        free(c);
}

/* ------------------------------------------------------- socket watching */

static void sock_link(http_client *c, http_sock *s)
{
    s->prev = NULL;
    s->next = c->socks;
    if (c->socks)
        c->socks->prev = s;
    c->socks = s;
}

static void sock_unlink(http_client *c, http_sock *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        c->socks = s->next;
    if (s->next)
        s->next->prev = s->prev;
}

static void on_sock_closed(uv_handle_t *h)
{
    http_sock *s = h->data;
    http_client *c = s->c;
    free(s);
    handle_closed(c);
}

/* uv_close stops polling immediately, so libcurl may close or reuse the fd
 * right after this returns even though the memory lives a bit longer. */
static void sock_close(http_sock *s)
{
    http_client *c = s->c;
    if (!c->closing) /* while closing, the multi handle is being destroyed */
        curl_multi_assign(c->multi, s->fd, NULL);
    sock_unlink(c, s);
    uv_close((uv_handle_t *)&s->poll, on_sock_closed);
}

static void drain_completed(http_client *c);

static void on_poll(uv_poll_t *h, int status, int events)
{
    http_sock *s = h->data;
    http_client *c = s->c;
    int flags = 0, running;
    if (status < 0)
        flags = CURL_CSELECT_ERR;
    else {
        if (events & UV_READABLE)
            flags |= CURL_CSELECT_IN;
        if (events & UV_WRITABLE)
            flags |= CURL_CSELECT_OUT;
    }
    /* s may be closed by the socket callback during this call: use the fd copy. */
    curl_socket_t fd = s->fd;
    curl_multi_socket_action(c->multi, fd, flags, &running);
    drain_completed(c);
}

static http_sock *sock_open(http_client *c, curl_socket_t fd)
{
    http_sock *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    if (uv_poll_init_socket(c->loop, &s->poll, fd) != 0) {
        free(s);
        return NULL;
    }
    s->c = c;
    s->fd = fd;
    s->poll.data = s;
    c->open_handles++;
    sock_link(c, s);
    curl_multi_assign(c->multi, fd, s);
    return s;
}

/* CURLMOPT_SOCKETFUNCTION. Always returns 0: returning -1 would mark the whole
 * multi handle dead for good, so on a (practically impossible) setup failure
 * we let just the affected transfer run into its timeout instead. */
static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    http_client *c = userp;
    http_sock *s = socketp;
    (void)easy;
    if (what == CURL_POLL_REMOVE) {
        if (s)
            sock_close(s);
        return 0;
    }
    if (c->closing)
        return 0;
    if (!s && !(s = sock_open(c, fd)))
        return 0;
    int events = 0;
    if (what & CURL_POLL_IN)
        events |= UV_READABLE;
    if (what & CURL_POLL_OUT)
        events |= UV_WRITABLE;
    uv_poll_start(&s->poll, events, on_poll);
    return 0;
}

/* ---------------------------------------------------------------- timer */

static void on_timer(uv_timer_t *t)
{
    http_client *c = t->data;
    int running;
    curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    drain_completed(c);
}

/* CURLMOPT_TIMERFUNCTION. A 0 ms timeout still goes through the loop: calling
 * curl_multi_socket_action from inside this callback is forbidden. */
static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    http_client *c = userp;
    (void)multi;
    if (c->closing || timeout_ms < 0)
        uv_timer_stop(&c->timer);
    else
        uv_timer_start(&c->timer, on_timer, (uint64_t)timeout_ms, 0);
    return 0;
}

static void on_timer_closed(uv_handle_t *h) { handle_closed(h->data); }

/* ------------------------------------------------------------- requests */

static void req_link(http_client *c, http_req *r)
{
    r->prev = NULL;
    r->next = c->reqs;
    if (c->reqs)
        c->reqs->prev = r;
    c->reqs = r;
}

static void req_unlink(http_client *c, http_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        c->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

static void req_free(http_req *r)
{
    if (r->easy)
        curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->headers);
    free(r->authority);
    free(r->ca_file);
    free(r->buf);
    free(r);
}

/* CURLOPT_WRITEFUNCTION: accumulate the body up to max_body. Past it the
 * transfer is aborted (returning short makes libcurl stop with
 * CURLE_WRITE_ERROR); with truncate, after keeping what fits. */
static size_t on_body(char *data, size_t size, size_t nmemb, void *ud)
{
    http_req *r = ud;
    size_t n = size * nmemb, keep = n;
    if (n > r->max_body - r->len) {
        if (!r->truncate) {
            r->too_large = true;
            return 0;
        }
        r->truncated = true;
        keep = r->max_body - r->len;
    }
    if (r->len + keep + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 1024;
        while (cap < r->len + keep + 1)
            cap *= 2;
        char *buf = realloc(r->buf, cap);
        if (!buf) {
            r->no_memory = true;
            return 0;
        }
        r->buf = buf;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, data, keep);
    r->len += keep;
    r->buf[r->len] = '\0';
    return r->truncated ? 0 : n;
}

/* "ip:port" of the address libcurl last tried, else the URL's host:port. */
static void peer_name(const http_req *r, char *out, size_t outlen)
{
    char *ip = NULL;
    long port = 0;
    curl_easy_getinfo(r->easy, CURLINFO_PRIMARY_IP, &ip);
    curl_easy_getinfo(r->easy, CURLINFO_PRIMARY_PORT, &port);
    if (ip && *ip && port > 0)
        snprintf(out, outlen, strchr(ip, ':') ? "[%s]:%ld" : "%s:%ld", ip, port);
    else
        snprintf(out, outlen, "%s", r->authority);
}

static void connect_error(const http_req *r, char *out, size_t outlen)
{
    char peer[300], tmp[256];
    const char *why = r->errbuf[0] ? r->errbuf : "connection failed";
    long os_errno = 0;
    peer_name(r, peer, sizeof peer);
    curl_easy_getinfo(r->easy, CURLINFO_OS_ERRNO, &os_errno);
    if (os_errno > 0) /* GNU strerror_r: returns the message; strerror is not thread-safe */
        why = strerror_r((int)os_errno, tmp, sizeof tmp);
    snprintf(out, outlen, "connect to %s failed: %s", peer, why);
}

/* Turns a failed transfer into the one-line message of http_result.error. */
static const char *describe_error(const http_req *r, CURLcode code, char *out, size_t outlen)
{
    const char *why = r->errbuf[0] ? r->errbuf : curl_easy_strerror(code);
    if (r->too_large || code == CURLE_FILESIZE_EXCEEDED)
        snprintf(out, outlen, "response body exceeds %zu bytes", r->max_body);
    else if (r->no_memory)
        snprintf(out, outlen, "out of memory for the response body");
    else if (code == CURLE_OPERATION_TIMEDOUT)
        snprintf(out, outlen, "timed out after %" PRIu64 " ms", r->timeout_ms);
    else if (code == CURLE_COULDNT_CONNECT)
        connect_error(r, out, outlen);
    else if (code == CURLE_PEER_FAILED_VERIFICATION)
        snprintf(out, outlen, "TLS certificate of %s refused%s: %s", r->authority,
                 r->ca_file ? " (CA file given)" : " (system CA store)", why);
    else if (code == CURLE_SSL_CACERT_BADFILE)
        snprintf(out, outlen, "cannot use CA file %s: %s", r->ca_file ? r->ca_file : "(system)",
                 why);
    else
        snprintf(out, outlen, "%s", why);
    one_line(out);
    return out;
}

/* Hands the outcome to the user and frees the request. The request is out of
 * the list and the multi handle first, so a close() from the callback cannot
 * see it again. */
static void req_finish(http_req *r, CURLcode code, const char *forced_error)
{
    http_client *c = r->c;
    char msg[CURL_ERROR_SIZE + HTTP_CLIENT_CA_PATH_MAX + 320];
    http_result res = {0};
    req_unlink(c, r);
    curl_multi_remove_handle(c->multi, r->easy);
    if (forced_error)
        res.error = forced_error;
    else {
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &res.status);
        /* A truncation is the abort we asked for, once the headers were in. */
        res.truncated = r->truncated && code == CURLE_WRITE_ERROR && res.status > 0;
        if (code != CURLE_OK && !res.truncated)
            res.error = describe_error(r, code, msg, sizeof msg);
    }
    res.body = r->buf ? r->buf : "";
    res.body_len = r->len;
    r->done(r->ud, &res);
    req_free(r);
}

static void drain_completed(http_client *c)
{
    CURLMsg *m;
    int left;
    /* A callback may close the client; stop touching the multi handle then. */
    while (!c->closing && (m = curl_multi_info_read(c->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        char *priv = NULL;
        CURLcode code = m->data.result; /* m dies with remove_handle */
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
        req_finish((http_req *)priv, code, NULL);
    }
}

/* ------------------------------------------------------ request building */

/* True when the URL carries a user or password: "http://user:pw@host",
 * "http://user@host", "http://:pw@host", "http://@host". */
static bool has_userinfo(CURLU *u)
{
    char *part = NULL;
    bool has = curl_url_get(u, CURLUPART_USER, &part, 0) == CURLUE_OK;
    curl_free(part);
    part = NULL;
    has = has || curl_url_get(u, CURLUPART_PASSWORD, &part, 0) == CURLUE_OK;
    curl_free(part);
    return has;
}

/* Checks scheme and syntax up front (libcurl would only fail later, inside
 * the loop) and records "host:port" for error messages. No error names the
 * URL beyond its scheme, host and port: the rest may be a secret. */
static int parse_url(http_req *r, const http_request *req, char *err, size_t errlen)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL;
    int rc = -1;
    if (!u)
        return fail(err, errlen, "out of memory");
    CURLUcode uc = curl_url_set(u, CURLUPART_URL, req->url, CURLU_NON_SUPPORT_SCHEME);
    if (uc != CURLUE_OK)
        fail(err, errlen, "malformed URL: %s", curl_url_strerror(uc));
    else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
             (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0))
        fail(err, errlen, "unsupported URL scheme '%.16s' (only http and https)",
             scheme ? scheme : "");
    else if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
             curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK)
        fail(err, errlen, "malformed URL: missing host");
    else if (!req->allow_userinfo && has_userinfo(u))
        fail(err, errlen,
             "URL with userinfo refused (%s://***@%.300s:%s): credentials in a URL end up in "
             "logs; send them in a header",
             scheme, host, port);
    else if (!(r->authority = malloc(strlen(host) + strlen(port) + 2)))
        fail(err, errlen, "out of memory");
    else {
        sprintf(r->authority, "%s:%s", host, port);
        rc = 0;
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return rc;
}

/* The caller's CA bundle must be a file we can open now: a path mistake is
 * reported when the request is made, not as a TLS failure later. Its
 * contents are for the TLS library to judge (CURLE_SSL_CACERT_BADFILE). */
static int check_ca_file(http_req *r, const char *path, char *err, size_t errlen)
{
    struct stat st;
    size_t n = strlen(path);
    if (n == 0)
        return fail(err, errlen, "CA file: empty path");
    if (n > HTTP_CLIENT_CA_PATH_MAX)
        return fail(err, errlen, "CA file: path longer than %d bytes", HTTP_CLIENT_CA_PATH_MAX);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        char tmp[128];
        return fail(err, errlen, "cannot read CA file %.300s: %s", path,
                    strerror_r(errno, tmp, sizeof tmp));
    }
    int regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    close(fd);
    if (!regular)
        return fail(err, errlen, "cannot read CA file %.300s: not a regular file", path);
    if (!(r->ca_file = strdup(path)))
        return fail(err, errlen, "out of memory");
    return 0;
}

static int has_header(const char *const *headers, const char *name)
{
    size_t n = strlen(name);
    for (; headers && *headers; headers++)
        if (strncasecmp(*headers, name, n) == 0 && (*headers)[n] == ':')
            return 1;
    return 0;
}

/* Copies the caller's headers. A CR/LF would let a value smuggle in extra
 * header lines, so it is refused rather than passed on. Errors name the line
 * by index only: values are often credentials. */
static int build_headers(http_req *r, const http_request *req, char *err, size_t errlen)
{
    struct curl_slist *l;
    /* libcurl would otherwise add "Expect: 100-continue" to bigger POSTs and
     * stall a round trip waiting for the server's go-ahead. */
    if (!strcmp(req->method, "POST") && !has_header(req->headers, "Expect")) {
        if (!(l = curl_slist_append(r->headers, "Expect:")))
            return fail(err, errlen, "out of memory");
        r->headers = l;
    }
    for (const char *const *h = req->headers; h && *h; h++) {
        const char *colon = strchr(*h, ':');
        int idx = (int)(h - req->headers);
        if (!colon || colon == *h)
            return fail(err, errlen, "header %d is not a 'Name: value' line", idx);
        if (strpbrk(*h, "\r\n"))
            return fail(err, errlen, "header %d contains CR or LF", idx);
        if (!(l = curl_slist_append(r->headers, *h)))
            return fail(err, errlen, "out of memory");
        r->headers = l;
    }
    return 0;
}

static CURLcode set_method(CURL *e, const http_request *req)
{
    CURLcode rc;
    if (!strcmp(req->method, "GET"))
        return curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    /* The size must be set before COPYPOSTFIELDS so binary bodies copy fully. */
    rc = curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, req->body_len ? req->body : "");
    return rc;
}

/* Verification always on; a ca_file replaces the system store (CA file and
 * CA directory both: the caller's CAs alone are trusted then). */
static CURLcode set_tls(http_req *r)
{
    CURL *e = r->easy;
    CURLcode rc = curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    if (!rc)
        rc = curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!rc && r->ca_file)
        rc = curl_easy_setopt(e, CURLOPT_CAINFO, r->ca_file);
    if (!rc && r->ca_file)
        rc = curl_easy_setopt(e, CURLOPT_CAPATH, NULL);
#if LIBCURL_VERSION_NUM >= 0x075700 /* 7.87.0 */
    if (!rc && r->ca_file)
        rc = curl_easy_setopt(e, CURLOPT_CA_CACHE_TIMEOUT, CA_CACHE_S);
#endif
    return rc;
}

static CURLcode set_options(http_req *r, const http_request *req)
{
    CURL *e = r->easy;
    long timeout = r->timeout_ms > LONG_MAX ? LONG_MAX : (long)r->timeout_ms;
    CURLcode rc = curl_easy_setopt(e, CURLOPT_URL, req->url);
    if (!rc)
        rc = curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    if (!rc)
        rc = curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    if (!rc)
        rc = curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    if (!rc)
        rc = curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout);
    /* Rejects an announced oversized body before any of it is read (with
     * truncate its first max_body bytes are wanted: on_body stops there). */
    if (!rc && !r->truncate)
        rc = curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)r->max_body);
    if (!rc)
        rc = set_tls(r);
    if (!rc)
        rc = curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    if (!rc)
        rc = curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    if (!rc)
        rc = curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    if (!rc)
        rc = curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    if (!rc)
        rc = curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    if (!rc)
        rc = set_method(e, req);
    return rc;
}

static int check_request(const http_client *c, const http_request *req, http_done_cb done,
                         char *err, size_t errlen)
{
    if (!c || !req || !req->method || !req->url || !done)
        return fail(err, errlen, "invalid argument");
    if (c->closing)
        return fail(err, errlen, "client is closing");
    if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "POST") != 0)
        return fail(err, errlen, "unsupported method '%.20s' (only GET and POST)", req->method);
    if (!strcmp(req->method, "GET") && req->body_len > 0)
        return fail(err, errlen, "a GET request cannot have a body");
    if (req->body_len > 0 && !req->body)
        return fail(err, errlen, "body is NULL but body_len is %zu", req->body_len);
    return 0;
}

static http_req *req_new(http_client *c, const http_request *req, http_done_cb done, void *ud,
                         char *err, size_t errlen)
{
    http_req *r = calloc(1, sizeof *r);
    if (!r) {
        fail(err, errlen, "out of memory");
        return NULL;
    }
    r->c = c;
    r->done = done;
    r->ud = ud;
    r->timeout_ms = req->timeout_ms ? req->timeout_ms : DEFAULT_TIMEOUT_MS;
    r->max_body = req->max_body ? req->max_body : DEFAULT_MAX_BODY;
    r->truncate = req->truncate;
    if (parse_url(r, req, err, errlen) != 0 || build_headers(r, req, err, errlen) != 0 ||
        (req->ca_file && check_ca_file(r, req->ca_file, err, errlen) != 0))
        goto bad;
    if (!(r->easy = curl_easy_init())) {
        fail(err, errlen, "curl_easy_init failed");
        goto bad;
    }
    CURLcode rc = set_options(r, req);
    if (rc != CURLE_OK) {
        fail(err, errlen, "cannot configure request: %s", curl_easy_strerror(rc));
        goto bad;
    }
    return r;
bad:
    req_free(r);
    return NULL;
}

/* ------------------------------------------------------------ public API */

http_client *http_client_new(uv_loop_t *loop)
{
    http_client *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->loop = loop;
    if (!(c->multi = curl_multi_init()) || uv_timer_init(loop, &c->timer) != 0) {
        if (c->multi)
            curl_multi_cleanup(c->multi);
        free(c);
        return NULL;
    }
    c->timer.data = c;
    c->open_handles = 1;
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    /* libcurl's default cache is 4 x the transfers in flight, so one at a
     * time keeps 4 idle connections: a fixed size keeps a few receivers'. */
    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, (long)HTTP_CLIENT_MAX_IDLE);
    return c;
}

int http_client_request(http_client *c, const http_request *req, http_done_cb done, void *ud,
                        char *err, size_t errlen)
{
    if (check_request(c, req, done, err, errlen) != 0)
        return -1;
    http_req *r = req_new(c, req, done, ud, err, errlen);
    if (!r)
        return -1;
    CURLMcode mc = curl_multi_add_handle(c->multi, r->easy);
    if (mc != CURLM_OK) {
        req_free(r);
        return fail(err, errlen, "cannot start request: %s", curl_multi_strerror(mc));
    }
    req_link(c, r);
    return 0;
}

void http_client_close(http_client *c)
{
    if (!c || c->closing)
        return;
    c->closing = 1;
    while (c->reqs)
        req_finish(c->reqs, CURLE_OK, "cancelled");
    /* Cleanup closes cached connections; their REMOVE notifications land in
     * on_curl_socket, anything left over is closed by hand below. */
    curl_multi_cleanup(c->multi);
    c->multi = NULL;
    while (c->socks)
        sock_close(c->socks);
    uv_close((uv_handle_t *)&c->timer, on_timer_closed);
}
