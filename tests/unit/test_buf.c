/* buf: the JSON string writer keeps text exact and terminal-safe. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
    char *out = json_of("a\x7f" "b");
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(control_characters_del_and_c1_are_escaped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
