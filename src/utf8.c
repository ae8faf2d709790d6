#include "utf8.h"

#include <string.h>

size_t utf8_seq(const unsigned char *s, size_t n, unsigned *cp)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        len = 1, min = 0;
    else if (c >= 0xc2 && c <= 0xdf)
        len = 2, min = 0x80, c &= 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, min = 0x800, c &= 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, min = 0x10000, c &= 0x07;
    else
        return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    if (cp)
        *cp = c;
    return len;
}

size_t utf8_cut_len(const char *s, size_t max)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), i = 0;
    while (i < n) {
        size_t len = utf8_seq(p + i, n - i, NULL);
        if (!len)
            len = 1;
        if (i + len > max)
            break;
        i += len;
    }
    return i;
}
