/* utf8: one character at a time, and cutting text without splitting one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "utf8.h"

static size_t seq(const char *s, unsigned *cp)
{
    return utf8_seq((const unsigned char *)s, strlen(s) ? strlen(s) : 1, cp);
}

static void every_valid_length_with_its_code_point(void **state)
{
    (void)state;
    unsigned cp = 0;
    assert_int_equal(seq("a", &cp), 1);
    assert_int_equal(cp, 'a');
    assert_int_equal(seq("\xc3\xa9", &cp), 2); /* é */
    assert_int_equal(cp, 0xe9);
    assert_int_equal(seq("\xe2\x82\xac", &cp), 3); /* € */
    assert_int_equal(cp, 0x20ac);
    assert_int_equal(seq("\xf0\x9f\x98\x80", &cp), 4); /* U+1F600 */
    assert_int_equal(cp, 0x1f600);
    assert_int_equal(seq("\xf4\x8f\xbf\xbf", NULL), 4); /* U+10FFFF, no cp asked */
}

static void invalid_sequences_start_nothing(void **state)
{
    (void)state;
    const char *bad[] = {
        "\x80",             /* a continuation byte alone */
        "\xc0\xaf",         /* overlong '/' */
        "\xc1\xbf",         /* overlong */
        "\xe0\x80\xaf",     /* overlong */
        "\xed\xa0\x80",     /* a surrogate */
        "\xf4\x90\x80\x80", /* above U+10FFFF */
        "\xf5\x80\x80\x80", /* no such lead byte */
        "\xc3",             /* cut short */
        "\xe2\x82",         /* cut short */
        "\xc3\x28",         /* not a continuation */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(seq(bad[i], NULL), 0);
}

static void a_cut_never_splits_a_character(void **state)
{
    (void)state;
    /* each width of character placed across the bound at each offset */
    const char *chars[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
    char s[64];
    for (size_t k = 0; k < 3; k++) {
        size_t w = strlen(chars[k]);
        for (size_t lead = 6; lead <= 10; lead++) {
            memset(s, 'a', lead);
            memcpy(s + lead, chars[k], w + 1);
            size_t n = utf8_cut_len(s, 8);
            /* the whole character fits, or it is left out whole */
            assert_int_equal(n, lead + w <= 8 ? lead + w : (lead <= 8 ? lead : 8));
        }
    }
    assert_int_equal(utf8_cut_len("short", 300), 5);
    assert_int_equal(utf8_cut_len("", 3), 0);
    assert_int_equal(utf8_cut_len("\xc3\xa9\xc3\xa9", 3), 2);
    assert_int_equal(utf8_cut_len("\x80\x80\x80\x80", 3), 3); /* invalid bytes: one each */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_valid_length_with_its_code_point),
        cmocka_unit_test(invalid_sequences_start_nothing),
        cmocka_unit_test(a_cut_never_splits_a_character),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
