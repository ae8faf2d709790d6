/* Small helpers shared by the harnesses. */
#ifndef OOPS_FUZZ_COMMON_H
#define OOPS_FUZZ_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An invariant does not hold: say which, show the input, and crash so
 * libFuzzer saves it. */
__attribute__((noreturn, format(printf, 3, 4))) static inline void
fuzz_fail(const uint8_t *data, size_t size, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "\n==FUZZ INVARIANT== ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n==FUZZ INPUT (%zu bytes)== ", size);
    for (size_t i = 0; i < size && i < 512; i++) {
        unsigned char c = data[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            fputc(c, stderr);
        else
            fprintf(stderr, "\\x%02x", c);
    }
    fputc('\n', stderr);
    abort();
}

/* A NUL-terminated copy of the input (malloc'd). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

#endif
