/* buf: a growable buffer that is always NUL-terminated, and the JSON writer on
 * top of it (exact and terminal-safe strings, key/value helpers). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <cmocka.h>

#include "buf.h"

static char *json_of(const char *s)
{
    buf b = {0};
    json_str(&b, s);
    return buf_take(&b);
}

static void control_characters_del_and_c1_are_escaped(void **state)
{
    (void)state;
    /* Every C0 byte, DEL and every C1 code point come out as \uXXXX (or the
     * short escapes); nothing a terminal would act on is left raw. */
    for (unsigned c = 1; c < 0x20; c++) {
        char in[2] = {(char)c, 0};
        char *out = json_of(in);
        for (const char *p = out; *p; p++)
            assert_true((unsigned char)*p >= 0x20 && (unsigned char)*p != 0x7f);
        free(out);
    }
    char *out = json_of("a\x7f"
                        "b");
    assert_string_equal(out, "\"a\\u007fb\"");
    free(out);
    for (unsigned cp = 0x80; cp <= 0x9f; cp++) {
        char in[3] = {(char)0xc2, (char)cp, 0}, want[16];
        snprintf(want, sizeof want, "\"\\u%04x\"", cp);
        out = json_of(in);
        assert_string_equal(out, want);
        free(out);
    }
    /* Printable UTF-8 (U+00A0 and beyond) stays as it is. */
    out = json_of("caf\xc3\xa9 \xc2\xa0x \"q\" \\");
    assert_string_equal(out, "\"caf\xc3\xa9 \xc2\xa0x \\\"q\\\" \\\\\"");
    free(out);
    out = json_of("\x1b]0;pwned\x07");
    assert_string_equal(out, "\"\\u001b]0;pwned\\u0007\"");
    free(out);
}

/* ---- the buffer ---------------------------------------------------------- */

static void grows_and_stays_nul_terminated(void **state)
{
    (void)state;
    buf b = {0};
    assert_null(b.p); /* a zeroed buf is an empty one */
    char expect[20001];
    for (int i = 0; i < 20000; i++) {
        char c = (char)('a' + i % 26);
        buf_add(&b, &c, 1);
        expect[i] = c;
        assert_int_equal(b.len, (size_t)i + 1);
        assert_true(b.cap >= b.len + 1);
        assert_int_equal(b.p[b.len], '\0');
    }
    expect[20000] = '\0';
    assert_string_equal(b.p, expect);
    assert_false(b.oom);
    /* One large add past the current capacity. */
    char big[100000];
    memset(big, 'z', sizeof big);
    buf_add(&b, big, sizeof big);
    assert_int_equal(b.len, 120000);
    assert_int_equal(b.p[119999], 'z');
    assert_int_equal(b.p[120000], '\0');
    assert_int_equal(memcmp(b.p, expect, 20000), 0);
    buf_free(&b);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    /* Usable again after buf_free. */
    buf_puts(&b, "again");
    assert_string_equal(b.p, "again");
    buf_free(&b);
}

static void add_takes_bytes_not_strings(void **state)
{
    (void)state;
    buf b = {0};
    buf_add(&b, "ab\0cd", 5); /* a NUL inside is kept; len counts it */
    assert_int_equal(b.len, 5);
    assert_memory_equal(b.p, "ab\0cd", 6);
    buf_add(&b, "xyz", 0); /* nothing */
    assert_int_equal(b.len, 5);
    buf_puts(&b, "");
    assert_int_equal(b.len, 5);
    buf_puts(&b, "ef");
    assert_memory_equal(b.p, "ab\0cdef", 8);
    buf_free(&b);
}

static void printf_appends_formatted_text(void **state)
{
    (void)state;
    buf b = {0};
    buf_puts(&b, "x=");
    buf_printf(&b, "%d %s %.2f %05u|%-3s|", -42, "two", 1.5, 7u, "a");
    assert_string_equal(b.p, "x=-42 two 1.50 00007|a  |");
    assert_int_equal(b.len, strlen(b.p));
    buf_printf(&b, "%s", ""); /* nothing added */
    assert_int_equal(b.len, strlen("x=-42 two 1.50 00007|a  |"));
    /* Longer than any capacity so far, in one call. */
    char *long_s = malloc(70001);
    memset(long_s, 'q', 70000);
    long_s[70000] = '\0';
    buf_printf(&b, "[%s]", long_s);
    assert_int_equal(b.len, strlen("x=-42 two 1.50 00007|a  |") + 70002);
    assert_int_equal(b.p[b.len - 1], ']');
    assert_int_equal(b.p[b.len], '\0');
    assert_int_equal(strlen(b.p), b.len);
    free(long_s);
    buf_free(&b);
}

static void take_hands_over_and_empties(void **state)
{
    (void)state;
    buf b = {0};
    char *p = buf_take(&b); /* never NULL, even when nothing was written */
    assert_non_null(p);
    assert_string_equal(p, "");
    free(p);
    buf_printf(&b, "%s-%d", "id", 7);
    p = buf_take(&b);
    assert_string_equal(p, "id-7");
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    buf_puts(&b, "next"); /* the buffer starts over; the taken string is untouched */
    assert_string_equal(b.p, "next");
    assert_string_equal(p, "id-7");
    free(p);
    buf_free(&b);
}

/* ---- the JSON writer ---------------------------------------------------- */

static void json_strings(void **state)
{
    (void)state;
    struct {
        const char *in, *out;
    } cases[] = {
        {"", "\"\""},
        {"plain", "\"plain\""},
        {"say \"hi\"", "\"say \\\"hi\\\"\""},
        {"C:\\dir", "\"C:\\\\dir\""},
        {"a\nb\rc\td", "\"a\\nb\\rc\\td\""},
        {"\x01\x1f", "\"\\u0001\\u001f\""},
        {"/ stays", "\"/ stays\""},
        {"\xe2\x9c\x93", "\"\xe2\x9c\x93\""}, /* UTF-8 as it is */
        {"\xc2", "\"\xc2\""},                 /* a lone lead byte at the end is no C1 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = json_of(cases[i].in);
        assert_string_equal(out, cases[i].out);
        free(out);
    }
    char *out = json_of(NULL);
    assert_string_equal(out, "null");
    free(out);
}

static void json_object_with_the_kv_helpers(void **state)
{
    (void)state;
    buf b = {0};
    bool first = true;
    buf_add(&b, "{", 1);
    json_kv_str(&b, "id", "ab12", &first);
    assert_false(first);
    json_kv_int(&b, "n", -5, &first);
    json_kv_bool(&b, "on", true, &first);
    json_kv_bool(&b, "off", false, &first);
    json_kv_str(&b, "none", NULL, &first);
    json_kv_int(&b, "max", LLONG_MAX, &first);
    json_kv_int(&b, "min", LLONG_MIN, &first);
    json_kv_str(&b, "k\"ey", "v\nal", &first); /* keys are escaped like values */
    json_key(&b, "nested", &first);
    bool inner = true;
    buf_add(&b, "{", 1);
    json_kv_int(&b, "zero", 0, &inner);
    buf_add(&b, "}}", 2);
    assert_string_equal(b.p, "{\"id\":\"ab12\",\"n\":-5,\"on\":true,\"off\":false,\"none\":null,"
                             "\"max\":9223372036854775807,\"min\":-9223372036854775808,"
                             "\"k\\\"ey\":\"v\\nal\",\"nested\":{\"zero\":0}}");
    buf_free(&b);

    /* The first key gets no comma, whichever helper writes it. */
    first = true;
    json_kv_bool(&b, "a", true, &first);
    assert_string_equal(b.p, "\"a\":true");
    buf_free(&b);
    first = true;
    json_key(&b, "a", &first);
    json_key(&b, "b", &first);
    assert_string_equal(b.p, "\"a\":,\"b\":");
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(control_characters_del_and_c1_are_escaped),
        cmocka_unit_test(grows_and_stays_nul_terminated),
        cmocka_unit_test(add_takes_bytes_not_strings),
        cmocka_unit_test(printf_appends_formatted_text),
        cmocka_unit_test(take_hands_over_and_empties),
        cmocka_unit_test(json_strings),
        cmocka_unit_test(json_object_with_the_kv_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
