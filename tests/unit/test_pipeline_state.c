/* pipeline_state: statuses, the transition table of DESIGN.md, event types, names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_state.h"

/* DESIGN.md "The pipeline store and state machine", written out by name. */
static const struct {
    const char *from, *to; /* to: space-separated targets */
} design_table[] = {
    {"INITIALIZED", "RUNNING DEPLOYING ERROR STOPPED"},
    {"RUNNING", "BUILD_SUCCEEDED DEPLOYING ERROR STOPPED"},
    {"BUILD_SUCCEEDED", "DEPLOYING STOPPED"},
    {"DEPLOYING", "ROLLING_OUT ERROR STOPPED"},
    {"ROLLING_OUT", "SUCCEEDED ERROR"},
    {"SUCCEEDED", ""},
    {"ERROR", ""},
    {"STOPPED", ""},
};

static bool design_allows(const char *from, const char *to)
{
    for (size_t i = 0; i < sizeof design_table / sizeof design_table[0]; i++) {
        if (strcmp(design_table[i].from, from) != 0)
            continue;
        char targets[128];
        snprintf(targets, sizeof targets, " %s ", design_table[i].to);
        char word[40];
        snprintf(word, sizeof word, " %s ", to);
        return strstr(targets, word) != NULL;
    }
    fail_msg("status %s is not in DESIGN.md's table", from);
    return false;
}

static void every_pair_follows_the_design_table(void **state)
{
    (void)state;
    int allowed = 0;
    for (int f = 0; f < PS__COUNT; f++) {
        for (int t = 0; t < PS__COUNT; t++) {
            const char *fn = pipeline_status_name((pipeline_status)f);
            const char *tn = pipeline_status_name((pipeline_status)t);
            bool want = design_allows(fn, tn);
            if (pipeline_transition_allowed((pipeline_status)f, (pipeline_status)t) != want)
                fail_msg("%s -> %s: %s by the table, the code says otherwise", fn, tn,
                         want ? "allowed" : "refused");
            allowed += want;
        }
    }
    assert_int_equal(allowed, 15);
    /* Out of range either side: refused. */
    assert_false(pipeline_transition_allowed(PS__COUNT, PS_RUNNING));
    assert_false(pipeline_transition_allowed(PS_INITIALIZED, PS__COUNT));
    assert_false(pipeline_transition_allowed((pipeline_status)-1, PS_RUNNING));
    assert_false(pipeline_transition_allowed(PS_INITIALIZED, (pipeline_status)-1));
}

static void terminal_and_unfinished(void **state)
{
    (void)state;
    for (int s = 0; s < PS__COUNT; s++) {
        const char *n = pipeline_status_name((pipeline_status)s);
        bool terminal = !strcmp(n, "SUCCEEDED") || !strcmp(n, "ERROR") || !strcmp(n, "STOPPED");
        bool unfinished = !strcmp(n, "INITIALIZED") || !strcmp(n, "RUNNING") ||
                          !strcmp(n, "DEPLOYING") || !strcmp(n, "ROLLING_OUT");
        assert_int_equal(pipeline_status_terminal((pipeline_status)s), terminal);
        assert_int_equal(pipeline_status_unfinished((pipeline_status)s), unfinished);
        /* A terminal status goes nowhere; every other status goes somewhere. */
        bool any = false;
        for (int t = 0; t < PS__COUNT; t++)
            any |= pipeline_transition_allowed((pipeline_status)s, (pipeline_status)t);
        assert_int_equal(any, !terminal);
        /* No status moves to itself, and nothing goes back to INITIALIZED. */
        assert_false(pipeline_transition_allowed((pipeline_status)s, (pipeline_status)s));
        assert_false(pipeline_transition_allowed((pipeline_status)s, PS_INITIALIZED));
    }
    /* BUILD_SUCCEEDED is neither: it waits for a release. */
    assert_false(pipeline_status_terminal(PS_BUILD_SUCCEEDED));
    assert_false(pipeline_status_unfinished(PS_BUILD_SUCCEEDED));
}

static void names_round_trip(void **state)
{
    (void)state;
    const char *const names[PS__COUNT] = {"INITIALIZED", "RUNNING",     "BUILD_SUCCEEDED",
                                          "DEPLOYING",   "ROLLING_OUT", "SUCCEEDED",
                                          "ERROR",       "STOPPED"};
    for (int s = 0; s < PS__COUNT; s++) {
        assert_string_equal(pipeline_status_name((pipeline_status)s), names[s]);
        pipeline_status out = PS__COUNT;
        assert_int_equal(pipeline_status_parse(names[s], &out), 0);
        assert_int_equal(out, s);
    }
    assert_null(pipeline_status_name(PS__COUNT));
    assert_null(pipeline_status_name((pipeline_status)-1));
    /* Case-sensitive, whole names only; a failure leaves *out as it was. */
    const char *bad[] = {"running", "Running", "RUNNING ", " RUNNING",
                         "RUN",     "",        "FAILED",   "CREATED"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pipeline_status out = PS_STOPPED;
        assert_int_equal(pipeline_status_parse(bad[i], &out), -1);
        assert_int_equal(out, PS_STOPPED);
    }
    pipeline_status out = PS_STOPPED;
    assert_int_equal(pipeline_status_parse(NULL, &out), -1);
    assert_int_equal(out, PS_STOPPED);
}

static void event_types(void **state)
{
    (void)state;
    const char *const want[PS__COUNT] = {"CREATED",     "BUILDING",  "BUILD_SUCCEEDED", "DEPLOYING",
                                         "ROLLING_OUT", "SUCCEEDED", "FAILED",          "STOPPED"};
    for (int s = 0; s < PS__COUNT; s++)
        assert_string_equal(pipeline_event_type((pipeline_status)s), want[s]);
    assert_null(pipeline_event_type(PS__COUNT));
}

static void labels(void **state)
{
    (void)state;
    char l63[64], l64[65];
    memset(l63, 'a', 63), l63[63] = '\0';
    memset(l64, 'a', 64), l64[64] = '\0';
    const char *good[] = {"a", "0", "shop", "shop-eu", "a-b-c", "a--b", "9lives", "x1", l63};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (!pipeline_label_valid(good[i]))
            fail_msg("\"%s\" refused", good[i]);
    const char *bad[] = {"",      "-a",  "a-",  "-",   "Shop",        "SHOP", "shop ",
                         " shop", "a_b", "a.b", "a/b", "caf\xc3\xa9", "a\nb", l64};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (pipeline_label_valid(bad[i]))
            fail_msg("\"%s\" accepted", bad[i]);
    assert_false(pipeline_label_valid(NULL));

    char err[256];
    assert_int_equal(pipeline_label_check("application", "shop", err, sizeof err), 0);
    assert_int_equal(pipeline_label_check("application", "SHOP", err, sizeof err), -1);
    assert_string_equal(err, "application \"SHOP\": " PIPELINE_LABEL_RULE);
    /* The value is quoted escaped: nothing raw from it reaches the message. */
    assert_int_equal(pipeline_label_check("environment", "x\x1b[2J\"\\", err, sizeof err), -1);
    assert_string_equal(err, "environment \"x\\x1b[2J\\\"\\\\\": " PIPELINE_LABEL_RULE);
    assert_int_equal(pipeline_label_check("environment", NULL, err, sizeof err), -1);
    assert_string_equal(err, "environment \"\": " PIPELINE_LABEL_RULE);
    /* Cut after 64 bytes. */
    char long_v[200];
    memset(long_v, 'A', sizeof long_v - 1), long_v[sizeof long_v - 1] = '\0';
    assert_int_equal(pipeline_label_check("namespace", long_v, err, sizeof err), -1);
    char want[256];
    snprintf(want, sizeof want, "namespace \"%.64s\"...: %s", long_v, PIPELINE_LABEL_RULE);
    assert_string_equal(err, want);
}

static void ids(void **state)
{
    (void)state;
    char i64[65], i65[66];
    memset(i64, 'z', 64), i64[64] = '\0';
    memset(i65, '9', 65), i65[65] = '\0';
    const char *good[] = {"a", "ab12cd34ef56", "000000000000", i64};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        assert_true(pipeline_id_valid(good[i]));
    const char *bad[] = {"", "AB12", "ab-12", "ab_12", "ab 12", "ab12\n", i65};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (pipeline_id_valid(bad[i]))
            fail_msg("id \"%s\" accepted", bad[i]);
    assert_false(pipeline_id_valid(NULL));
}

static void quote_escapes_cuts_and_never_overflows(void **state)
{
    (void)state;
    char out[64];
    pipeline_quote(out, sizeof out, "a\"b\\c\x01\xff", 64);
    assert_string_equal(out, "\"a\\\"b\\\\c\\x01\\xff\"");
    pipeline_quote(out, sizeof out, "abcdef", 3);
    assert_string_equal(out, "\"abc\"...");
    pipeline_quote(out, sizeof out, "abc", 3); /* exactly max: nothing cut */
    assert_string_equal(out, "\"abc\"");
    pipeline_quote(out, sizeof out, NULL, 10);
    assert_string_equal(out, "\"\"");
    /* Small outputs: always NUL-terminated, never written past n. */
    for (size_t n = 1; n < 12; n++) {
        char small[16];
        memset(small, '#', sizeof small);
        pipeline_quote(small, n, "abcdefghij\x01", 64);
        assert_true(strlen(small) < n);
        for (size_t i = n; i < sizeof small; i++)
            assert_int_equal(small[i], '#');
        /* What fits is a prefix of the whole. */
        pipeline_quote(out, sizeof out, "abcdefghij\x01", 64);
        assert_memory_equal(small, out, strlen(small));
    }
    char untouched = '#';
    pipeline_quote(&untouched, 0, "abc", 3);
    assert_int_equal(untouched, '#');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_pair_follows_the_design_table),
        cmocka_unit_test(terminal_and_unfinished),
        cmocka_unit_test(names_round_trip),
        cmocka_unit_test(event_types),
        cmocka_unit_test(labels),
        cmocka_unit_test(ids),
        cmocka_unit_test(quote_escapes_cuts_and_never_overflows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
