#include "strset.h"

#include <stdlib.h>
#include <string.h>

static char tomb_marker;
#define STRSET_TOMB (&tomb_marker)

uint64_t strset_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

static size_t find(const strset *s, const char *k)
{
    size_t mask = s->cap - 1, i = (size_t)strset_hash(k) & mask;
    while (s->slots[i]) {
        if (s->slots[i] != STRSET_TOMB && strcmp(s->slots[i], k) == 0)
            return i;
        i = (i + 1) & mask;
    }
    return (size_t)-1;
}

bool strset_has(const strset *s, const char *k) { return s->cap && find(s, k) != (size_t)-1; }

/* Rehash when live members and tombstones fill 3/4 of the slots: into a table
 * where the live members fill at most half, so a set that sees many names come
 * and go (the held locks) drops its tombstones instead of doubling each time. */
static bool grow(strset *s)
{
    size_t ncap = s->cap ? s->cap : 16;
    while ((s->len + 1) * 2 > ncap)
        ncap *= 2;
    char **old = s->slots;
    size_t ocap = s->cap;
    s->slots = calloc(ncap, sizeof *s->slots);
    if (!s->slots) {
        s->slots = old;
        return false;
    }
    s->cap = ncap;
    s->used = 0;
    for (size_t i = 0; i < ocap; i++) {
        if (!old[i] || old[i] == STRSET_TOMB)
            continue;
        size_t j = (size_t)strset_hash(old[i]) & (ncap - 1);
        while (s->slots[j])
            j = (j + 1) & (ncap - 1);
        s->slots[j] = old[i];
        s->used++;
    }
    free(old);
    return true;
}

bool strset_add(strset *s, const char *k)
{
    if (strset_has(s, k))
        return false;
    if ((s->used + 1) * 4 >= s->cap * 3 && !grow(s))
        return false;
    size_t i = (size_t)strset_hash(k) & (s->cap - 1);
    while (s->slots[i] && s->slots[i] != STRSET_TOMB)
        i = (i + 1) & (s->cap - 1);
    char *copy = strdup(k);
    if (!copy)
        return false;
    if (!s->slots[i])
        s->used++;
    s->slots[i] = copy;
    s->len++;
    return true;
}

bool strset_del(strset *s, const char *k)
{
    if (!s->cap)
        return false;
    size_t i = find(s, k);
    if (i == (size_t)-1)
        return false;
    free(s->slots[i]);
    s->slots[i] = STRSET_TOMB;
    s->len--;
    return true;
}

void strset_clear(strset *s)
{
    for (size_t i = 0; i < s->cap; i++)
        if (s->slots[i] && s->slots[i] != STRSET_TOMB)
            free(s->slots[i]);
    free(s->slots);
    memset(s, 0, sizeof *s);
}

size_t strset_items(const strset *s, char ***out)
{
    char **v = calloc(s->len ? s->len : 1, sizeof *v);
    size_t n = 0;
    for (size_t i = 0; v && i < s->cap; i++)
        if (s->slots[i] && s->slots[i] != STRSET_TOMB)
            v[n++] = strdup(s->slots[i]);
    *out = v;
    return n;
}
