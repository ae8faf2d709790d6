#include "log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "buf.h"

static char server[80];
static log_level min_level = LOG_INFO;

static const char *const names[] = {"debug", "info", "warn", "error"};

void log_set_server(const char *name) { snprintf(server, sizeof server, "%s", name ? name : ""); }
void log_set_min_level(log_level l) { min_level = l; }
const char *log_level_name(log_level l) { return (unsigned)l <= LOG_ERROR ? names[l] : "info"; }

int log_level_parse(const char *s)
{
    for (int i = 0; s && i <= LOG_ERROR; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

/* A C1 control character (U+0080-U+009F) in UTF-8: C2 80 .. C2 9F. NEL (U+0085)
 * ends a line for some readers, CSI (U+009B) drives some terminals. */
static bool c1_at(const unsigned char *c) { return c[0] == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f; }

static bool needs_quotes(const char *v)
{
    if (!*v)
        return true;
    for (const unsigned char *c = (const unsigned char *)v; *c; c++)
        if (*c <= ' ' || *c == '"' || *c == '=' || *c == '\\' || *c == 0x7f || c1_at(c))
            return true;
    return false;
}

static void put_value(buf *b, const char *v)
{
    if (!needs_quotes(v)) {
        buf_puts(b, v);
        return;
    }
    buf_add(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
        switch (*c) {
        case '"': buf_puts(b, "\\\""); break;
        case '\\': buf_puts(b, "\\\\"); break;
        case '\n': buf_puts(b, "\\n"); break;
        case '\t': buf_puts(b, "\\t"); break;
        case '\r': buf_puts(b, "\\r"); break;
        default:
            if (*c < 0x20 || *c == 0x7f)
                buf_printf(b, "\\x%02x", *c);
            else if (c1_at(c)) {
                buf_printf(b, "\\xc2\\x%02x", c[1]);
                c++;
            } else
                buf_add(b, (const char *)c, 1);
        }
    }
    buf_add(b, "\"", 1);
}

static void put_kv(buf *b, const char *k, const char *v)
{
    buf_add(b, " ", 1);
    buf_puts(b, k);
    buf_add(b, "=", 1);
    put_value(b, v);
}

void log_event(log_level l, const char *msg, const char *const *kv)
{
    if (l < min_level)
        return;
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    char ts[40];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    buf b = {0};
    buf_printf(&b, "ts=%s.%03ldZ level=%s", ts, (long)(tv.tv_usec / 1000), log_level_name(l));
    if (server[0])
        put_kv(&b, "server", server);
    for (size_t i = 0; kv && kv[i]; i += 2) {
        if (kv[i + 1])
            put_kv(&b, kv[i], kv[i + 1]);
    }
    put_kv(&b, "msg", msg ? msg : "");
    buf_add(&b, "\n", 1);
    /* One write per line: lines from several processes sharing a file do not interleave. */
    if (b.p)
        fwrite(b.p, 1, b.len, stderr);
    fflush(stderr);
    buf_free(&b);
}

void log_msg(log_level l, const char *fmt, ...)
{
    if (l < min_level)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_event(l, msg, NULL);
}
