/* http_sink: a tiny loopback HTTP receiver for tests.
 *
 *   http_sink --port P --record FILE [--fail-first N] [--body FILE] [--header NAME]
 *             [--hang 1] [--redirect URL] [--huge BYTES]
 *
 * Listens on 127.0.0.1:P and answers every request: the first N with 500,
 * later ones with 200 (and the --body file's content, to fake another
 * server's answers). --hang 1: never answers (each request is recorded, then
 * held until the sink stops); --redirect URL: answers 302 to URL; --huge
 * BYTES: answers 200 with that many bytes. Each request is appended to the record FILE as one line,
 * flushed at once so a test can read it while the sink runs:
 *
 *   METHOD PATH STATUS BODY                 (without --header)
 *   METHOD PATH STATUS VALUE BODY           (with --header NAME; "-" when absent)
 *
 * with backslashes, newlines, carriage returns and tabs in BODY escaped as
 * \\ \n \r \t, so one request is always one line. Prints "listening on
 * 127.0.0.1:P" on stdout once it accepts connections; exits 0 on SIGTERM or
 * SIGINT. libmicrohttpd's internal polling thread (one thread) runs every
 * handler, so the counter needs no lock.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BODY (8u << 20) /* a bigger request is answered 413 */

typedef struct sink {
    FILE *record;
    long fail_first;
    long seen;
    const char *header; /* recorded when set */
    char *body;         /* the 200 answer */
    size_t body_len;
    int hang;             /* never answer */
    const char *redirect; /* answer 302 to it */
} sink;

static volatile int stopping; /* set by main before MHD_stop_daemon: hung handlers return */

typedef struct request {
    char *data;
    size_t len;
    int too_big;
} request;

static void usage(void)
{
    fprintf(stderr, "usage: http_sink --port P --record FILE [--fail-first N] [--body FILE] "
                    "[--header NAME] [--hang 1] [--redirect URL] [--huge BYTES]\n");
    exit(2);
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "http_sink: cannot read %s: %s\n", path, strerror(errno));
        exit(2);
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "http_sink: out of memory\n");
        exit(2);
    }
    *len = n;
    return buf;
}

/* Append s[0..len) to f with the escapes that keep it on one line. */
static void write_escaped(FILE *f, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        switch (s[i]) {
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default: fputc(s[i], f);
        }
    }
}

static void record(sink *s, struct MHD_Connection *conn, const char *method, const char *url,
                   unsigned status, const request *r)
{
    fprintf(s->record, "%s %s %u ", method, url, status);
    if (s->header) {
        const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, s->header);
        fputs(v && *v != '\0' ? v : "-", s->record);
        fputc(' ', s->record);
    }
    write_escaped(s->record, r->data ? r->data : "", r->len);
    fputc('\n', s->record);
    fflush(s->record);
}

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, const char *body,
                               size_t len)
{
    struct MHD_Response *res =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!res)
        return MHD_NO;
    enum MHD_Result ret = MHD_queue_response(conn, status, res);
    MHD_destroy_response(res);
    return ret;
}

/* Called once with *con_cls NULL, then once per chunk of the body, then once
 * more with no data: answer on that last call. */
static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    (void)version;
    sink *s = cls;
    request *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        *con_cls = r;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (r->len + *upload_size > MAX_BODY) {
            r->too_big = 1;
        } else if (!r->too_big) {
            char *d = realloc(r->data, r->len + *upload_size + 1);
            if (!d)
                return MHD_NO;
            memcpy(d + r->len, upload, *upload_size);
            r->data = d;
            r->len += *upload_size;
            r->data[r->len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->too_big)
        return respond(conn, 413, "too large\n", 10);
    s->seen++;
    if (s->seen <= s->fail_first) {
        record(s, conn, method, url, 500, r);
        return respond(conn, 500, "failing on purpose\n", 19);
    }
    if (s->hang) {
        record(s, conn, method, url, 0, r);
        while (!stopping) /* one polling thread: this sink answers nothing any more */
            usleep(100000);
        return MHD_NO;
    }
    if (s->redirect) {
        record(s, conn, method, url, 302, r);
        struct MHD_Response *res =
            MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!res)
            return MHD_NO;
        MHD_add_response_header(res, "Location", s->redirect);
        enum MHD_Result ret = MHD_queue_response(conn, 302, res);
        MHD_destroy_response(res);
        return ret;
    }
    record(s, conn, method, url, 200, r);
    return respond(conn, 200, s->body ? s->body : "ok\n", s->body ? s->body_len : 3);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode why)
{
    (void)cls, (void)conn, (void)why;
    request *r = *con_cls;
    if (r) {
        free(r->data);
        free(r);
        *con_cls = NULL;
    }
}

static long number(const char *s, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *s == '\0' || *end != '\0' || v < 0 || v > max)
        usage();
    return v;
}

int main(int argc, char **argv)
{
    sink s = {0};
    long port = -1;
    const char *record_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        const char *opt = argv[i], *val = argv[++i];
        if (strcmp(opt, "--port") == 0)
            port = number(val, 65535);
        else if (strcmp(opt, "--fail-first") == 0)
            s.fail_first = number(val, 1000000000);
        else if (strcmp(opt, "--record") == 0)
            record_path = val;
        else if (strcmp(opt, "--body") == 0)
            s.body = read_file(val, &s.body_len);
        else if (strcmp(opt, "--header") == 0)
            s.header = val;
        else if (strcmp(opt, "--hang") == 0)
            s.hang = (int)number(val, 1);
        else if (strcmp(opt, "--redirect") == 0)
            s.redirect = val;
        else if (strcmp(opt, "--huge") == 0) {
            s.body_len = (size_t)number(val, 256L << 20);
            s.body = malloc(s.body_len ? s.body_len : 1);
            if (!s.body)
                return 2;
            memset(s.body, 'x', s.body_len);
        } else
            usage();
    }
    if (port < 1 || !record_path)
        usage();
    s.record = fopen(record_path, "a");
    if (!s.record) {
        fprintf(stderr, "http_sink: cannot open %s: %s\n", record_path, strerror(errno));
        return 2;
    }

    /* Blocked before MHD starts its thread, so only sigwait below sees them. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct MHD_Daemon *d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, (uint16_t)port, NULL,
                         NULL, handle, &s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                         MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "http_sink: cannot listen on 127.0.0.1:%ld\n", port);
        return 2;
    }
    printf("listening on 127.0.0.1:%ld\n", port);
    fflush(stdout);

    int sig;
    sigwait(&stop, &sig);
    stopping = 1;
    MHD_stop_daemon(d);
    fclose(s.record);
    free(s.body);
    return 0;
}
