/*
 * strset — a set of strings (open addressing, owned copies). Small and
 * boring on purpose: the lock registry's held set.
 */
#ifndef OOPS_STRSET_H
#define OOPS_STRSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct strset {
    char **slots; /* NULL = empty, STRSET_TOMB = deleted */
    size_t cap, len, used;
} strset;

/*
 * 64-bit FNV-1a's step (xor the byte, multiply by 1099511628211) from offset
 * basis 1469598103934665603 — not FNV's published basis, whose last digit it
 * lacks. Long lock names are shortened with it (lock_name_shorten), so every
 * server must compute the same value: it must never change (test_strset pins
 * it).
 */
uint64_t strset_hash(const char *s);
bool strset_has(const strset *s, const char *k);
/* true when added, false when already present (or out of memory). */
bool strset_add(strset *s, const char *k);
bool strset_del(strset *s, const char *k);
void strset_clear(strset *s);
/* Copies of the members into a new array (free each and the array). */
size_t strset_items(const strset *s, char ***out);

#endif
