/* strset: a set of owned strings (the lock registry's held set). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strset.h"

static int by_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_items(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void an_empty_set_holds_nothing(void **state)
{
    (void)state;
    strset s = {0};
    assert_false(strset_has(&s, "x"));
    assert_false(strset_has(&s, ""));
    assert_false(strset_del(&s, "x"));
    char **v = NULL;
    assert_int_equal(strset_items(&s, &v), 0);
    assert_non_null(v); /* an array all the same, freed like any other */
    free_items(v, 0);
    strset_clear(&s);
    assert_int_equal(s.len, 0);
}

static void add_has_del(void **state)
{
    (void)state;
    strset s = {0};
    assert_true(strset_add(&s, "oops:pipeline:a"));
    assert_false(strset_add(&s, "oops:pipeline:a")); /* already there */
    assert_true(strset_add(&s, "oops:pipeline:b"));
    assert_true(strset_add(&s, "")); /* the empty string is a member like any other */
    assert_int_equal(s.len, 3);
    assert_true(strset_has(&s, "oops:pipeline:a"));
    assert_true(strset_has(&s, "oops:pipeline:b"));
    assert_true(strset_has(&s, ""));
    assert_false(strset_has(&s, "oops:pipeline:"));
    assert_false(strset_has(&s, "oops:pipeline:ab"));
    assert_false(strset_has(&s, "OOPS:PIPELINE:A")); /* byte-exact */

    assert_true(strset_del(&s, "oops:pipeline:a"));
    assert_false(strset_del(&s, "oops:pipeline:a"));
    assert_false(strset_has(&s, "oops:pipeline:a"));
    assert_true(strset_has(&s, "oops:pipeline:b"));
    assert_int_equal(s.len, 2);
    /* Deleted, then added again. */
    assert_true(strset_add(&s, "oops:pipeline:a"));
    assert_true(strset_has(&s, "oops:pipeline:a"));
    assert_int_equal(s.len, 3);
    strset_clear(&s);
    assert_int_equal(s.len, 0);
    assert_false(strset_has(&s, "oops:pipeline:b"));
    /* Usable again after clear. */
    assert_true(strset_add(&s, "again"));
    assert_true(strset_has(&s, "again"));
    strset_clear(&s);
}

static void members_are_copies(void **state)
{
    (void)state;
    strset s = {0};
    char k[] = "oops:server:s1";
    assert_true(strset_add(&s, k));
    k[12] = 'X'; /* the caller's buffer changes; the member does not */
    assert_true(strset_has(&s, "oops:server:s1"));
    assert_false(strset_has(&s, k));

    char **v = NULL;
    assert_int_equal(strset_items(&s, &v), 1);
    assert_string_equal(v[0], "oops:server:s1");
    v[0][0] = 'X'; /* nor does changing a snapshot */
    assert_true(strset_has(&s, "oops:server:s1"));
    free_items(v, 1);
    strset_clear(&s);
}

/* Many members: every one is found, the snapshot lists each exactly once, and
 * lookups still work across the holes deletions leave. */
static void growth_and_snapshot(void **state)
{
    (void)state;
    enum { N = 5000 };
    strset s = {0};
    char k[48];
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof k, "oops:pipeline:%06d", i);
        assert_true(strset_add(&s, k));
    }
    assert_int_equal(s.len, N);
    assert_true(s.cap > (size_t)N);
    assert_int_equal(s.cap & (s.cap - 1), 0); /* a power of two (the probe masks with cap - 1) */
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof k, "oops:pipeline:%06d", i);
        assert_true(strset_has(&s, k));
    }
    char **v = NULL;
    size_t n = strset_items(&s, &v);
    assert_int_equal(n, N);
    qsort(v, n, sizeof *v, by_str);
    for (size_t i = 0; i < n; i++) {
        snprintf(k, sizeof k, "oops:pipeline:%06zu", i);
        assert_string_equal(v[i], k);
    }
    free_items(v, n);

    for (int i = 0; i < N; i += 2) {
        snprintf(k, sizeof k, "oops:pipeline:%06d", i);
        assert_true(strset_del(&s, k));
    }
    assert_int_equal(s.len, N / 2);
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof k, "oops:pipeline:%06d", i);
        assert_int_equal(strset_has(&s, k), i % 2 == 1);
    }
    n = strset_items(&s, &v);
    assert_int_equal(n, N / 2);
    for (size_t i = 0; i < n; i++)
        assert_true(strset_has(&s, v[i]));
    free_items(v, n);
    strset_clear(&s);
}

/* The held set sees every pipeline lock ever taken come and go: its size must
 * follow what it holds, not how many names went through it. */
static void churn_does_not_grow_the_table(void **state)
{
    (void)state;
    strset s = {0};
    char k[48];
    assert_true(strset_add(&s, "oops:server:s1")); /* held throughout */
    for (int i = 0; i < 100000; i++) {
        snprintf(k, sizeof k, "oops:pipeline:%d", i);
        assert_true(strset_add(&s, k));
        assert_true(strset_has(&s, k));
        assert_true(strset_del(&s, k));
    }
    assert_int_equal(s.len, 1);
    assert_true(strset_has(&s, "oops:server:s1"));
    assert_true(s.cap <= 64);
    strset_clear(&s);
}

/* Long lock names are shortened with this hash (lock_name_shorten), so it is
 * part of what servers of different versions must agree on: pinned. It is
 * FNV-1a's step with offset basis 1469598103934665603 (FNV's published basis,
 * 14695981039346656037, lacks its last digit), not the published FNV-1a: "a"
 * would be af63dc4c8601ec8c there. Never "fix" it; see strset.h. */
static void hash_never_changes(void **state)
{
    (void)state;
    assert_true(strset_hash("") == 0x14650fb0739d0383ULL);
    assert_true(strset_hash("a") == 0x44bd8ad473cd9906ULL);
    assert_true(strset_hash("foobar") == 0x88fad7c0a8ff07f2ULL);
    /* One step by hand: (basis ^ 'a') * FNV prime. */
    assert_true(strset_hash("a") == ((0x14650fb0739d0383ULL ^ 'a') * 1099511628211ULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_empty_set_holds_nothing),
        cmocka_unit_test(add_has_del),
        cmocka_unit_test(members_are_copies),
        cmocka_unit_test(growth_and_snapshot),
        cmocka_unit_test(churn_does_not_grow_the_table),
        cmocka_unit_test(hash_never_changes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
