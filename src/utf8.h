/* utf8: reading UTF-8 one character at a time, and cutting text to a byte
 * bound without splitting a character. Pure; no allocation.
 *
 * "Valid" is RFC 3629's: no overlong form, no surrogate (U+D800..U+DFFF),
 * nothing above U+10FFFF, no sequence cut short. */
#ifndef OOPS_UTF8_H
#define OOPS_UTF8_H

#include <stddef.h>

/* The length (1..4) of the valid UTF-8 character at s, of which n bytes may
 * be read (n >= 1), with its code point in *cp when cp is not NULL; 0 when
 * the byte at s starts none. */
size_t utf8_seq(const unsigned char *s, size_t n, unsigned *cp);

/* The length of the longest prefix of s (NUL-terminated) that is at most max
 * bytes and ends on a character boundary: a character that would cross max
 * is left out whole. Bytes that start no valid character count as one byte
 * each (they are the caller's to refuse). */
size_t utf8_cut_len(const char *s, size_t max);

#endif
