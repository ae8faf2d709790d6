#include "buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(buf *b, size_t extra)
{
    if (b->oom)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t ncap = b->cap ? b->cap : 64;
    while (ncap < b->len + extra + 1)
        ncap *= 2;
    char *np = realloc(b->p, ncap);
    if (!np) {
        b->oom = true;
        return false;
    }
    b->p = np;
    b->cap = ncap;
    return true;
}

void buf_add(buf *b, const char *s, size_t n)
{
    if (!reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void buf_puts(buf *b, const char *s) { buf_add(b, s, strlen(s)); }

void buf_printf(buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *buf_take(buf *b)
{
    char *p = b->p ? b->p : strdup("");
    b->p = NULL;
    b->len = b->cap = 0;
    b->oom = false;
    return p;
}

void buf_free(buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

void json_str(buf *b, const char *s)
{
    if (!s) {
        buf_puts(b, "null");
        return;
    }
    buf_add(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"': buf_puts(b, "\\\""); break;
        case '\\': buf_puts(b, "\\\\"); break;
        case '\n': buf_puts(b, "\\n"); break;
        case '\r': buf_puts(b, "\\r"); break;
        case '\t': buf_puts(b, "\\t"); break;
        default:
            /* Control characters escaped, C1 (U+0080-U+009F, UTF-8 C2 80-9F)
             * and DEL too: the JSON stays exact, and safe on a terminal. */
            if (*c < 0x20 || *c == 0x7f)
                buf_printf(b, "\\u%04x", *c);
            else if (*c == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f) {
                buf_printf(b, "\\u%04x", c[1]);
                c++;
            } else
                buf_add(b, (const char *)c, 1);
        }
    }
    buf_add(b, "\"", 1);
}

void json_key(buf *b, const char *key, bool *first)
{
    if (!*first)
        buf_add(b, ",", 1);
    *first = false;
    json_str(b, key);
    buf_add(b, ":", 1);
}

void json_kv_str(buf *b, const char *key, const char *val, bool *first)
{
    json_key(b, key, first);
    json_str(b, val);
}

void json_kv_int(buf *b, const char *key, long long val, bool *first)
{
    json_key(b, key, first);
    buf_printf(b, "%lld", val);
}

void json_kv_bool(buf *b, const char *key, bool val, bool *first)
{
    json_key(b, key, first);
    buf_puts(b, val ? "true" : "false");
}
