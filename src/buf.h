/*
 * buf — a growable byte buffer, and a JSON writer on top of it for the
 * C side's machine-readable output (oopsctl --json, /status, /healthz).
 */
#ifndef OOPS_BUF_H
#define OOPS_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct buf {
    char *p; /* NUL-terminated, may be NULL while empty */
    size_t len, cap;
    bool oom; /* an allocation failed; contents are truncated */
} buf;

void buf_add(buf *b, const char *s, size_t n);
void buf_puts(buf *b, const char *s);
void buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hand the contents over (caller frees); the buffer is left empty. Never NULL. */
char *buf_take(buf *b);
void buf_free(buf *b);

/* A JSON string literal (quotes included) for s; NULL writes null. */
void json_str(buf *b, const char *s);
/* "key": — with a leading comma unless first. */
void json_key(buf *b, const char *key, bool *first);
void json_kv_str(buf *b, const char *key, const char *val, bool *first);
void json_kv_int(buf *b, const char *key, long long val, bool *first);
void json_kv_bool(buf *b, const char *key, bool val, bool *first);

#endif
