/* log: one key=value line per event on stderr (captured here through a pipe). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* ---- capturing stderr ------------------------------------------------------ */

static int saved_stderr = -1, pipe_rd = -1;

/* Everything written to stderr from here to capture_end() goes to a pipe
 * (small outputs only: nothing reads it until capture_end). */
static void capture_begin(void)
{
    int p[2];
    fflush(stderr);
    if (pipe(p) != 0)
        abort();
    saved_stderr = dup(2);
    dup2(p[1], 2);
    close(p[1]);
    pipe_rd = p[0];
}

/* What was written (caller frees); stderr is restored before any assertion. */
static char *capture_end(void)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    ssize_t n;
    while ((n = read(pipe_rd, s + len, cap - len - 1)) > 0) {
        len += (size_t)n;
        if (cap - len < 2)
            s = realloc(s, cap *= 2);
    }
    close(pipe_rd);
    s[len] = '\0';
    return s;
}

static char *log_one(log_level l, const char *msg, const char *const *kv)
{
    capture_begin();
    log_event(l, msg, kv);
    return capture_end();
}

/* The line after its "ts=... level=..." head, without the newline. */
static char *fields(const char *line, const char *level)
{
    char head[64];
    const char *p = strstr(line, " level=");
    assert_non_null(p);
    snprintf(head, sizeof head, " level=%s", level);
    assert_memory_equal(p, head, strlen(head));
    p += strlen(head);
    size_t n = strlen(p);
    assert_true(n > 0 && p[n - 1] == '\n');
    char *out = strndup(p, n - 1);
    assert_null(strchr(out, '\n')); /* one event, one line */
    return out;
}

/* The value logged for msg (msg= comes last). */
static char *msg_value(const char *msg)
{
    char *line = log_one(LOG_INFO, msg, NULL);
    char *f = fields(line, "info");
    free(line);
    assert_memory_equal(f, " msg=", 5);
    char *v = strdup(f + 5);
    free(f);
    return v;
}

static int reset(void **state)
{
    (void)state;
    log_set_server(NULL);
    log_set_min_level(LOG_INFO);
    return 0;
}

/* ---- tests ------------------------------------------------------------------ */

static void a_line_has_ts_level_then_fields_then_msg(void **state)
{
    (void)state;
    const char *kv[] = {"scan", "build", "pipeline", "ab12cd34ef56", NULL};
    char *line = log_one(LOG_WARN, "lock lost", kv);
    regex_t re;
    assert_int_equal(
        regcomp(&re,
                "^ts=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "
                "level=warn scan=build pipeline=ab12cd34ef56 msg=\"lock lost\"\n$",
                REG_EXTENDED | REG_NOSUB),
        0);
    if (regexec(&re, line, 0, NULL, 0) != 0)
        fail_msg("unexpected line: %s", line);
    regfree(&re);
    free(line);
}

static void server_name_follows_the_level(void **state)
{
    (void)state;
    log_set_server("s1");
    const char *kv[] = {"scan", "build", NULL};
    char *line = log_one(LOG_INFO, "tick", kv);
    char *f = fields(line, "info");
    assert_string_equal(f, " server=s1 scan=build msg=tick");
    free(f);
    free(line);
    log_set_server("two words"); /* quoted like any value */
    line = log_one(LOG_ERROR, "x", NULL);
    f = fields(line, "error");
    assert_string_equal(f, " server=\"two words\" msg=x");
    free(f);
    free(line);
    log_set_server(NULL); /* left out again */
    line = log_one(LOG_INFO, "x", NULL);
    f = fields(line, "info");
    assert_string_equal(f, " msg=x");
    free(f);
    free(line);
}

static void null_values_are_skipped_and_msg_goes_last(void **state)
{
    (void)state;
    const char *kv[] = {"a", "1", "skipped", NULL, "b", "2", NULL};
    char *line = log_one(LOG_INFO, NULL, kv); /* NULL msg: empty */
    char *f = fields(line, "info");
    assert_string_equal(f, " a=1 b=2 msg=\"\"");
    free(f);
    free(line);
}

static void values_are_quoted_and_escaped(void **state)
{
    (void)state;
    struct {
        const char *in, *out;
    } cases[] = {
        {"plain", "plain"},
        {"caf\xc3\xa9-\xe2\x9c\x93", "caf\xc3\xa9-\xe2\x9c\x93"}, /* UTF-8 needs no quotes */
        {"path/to:x,y", "path/to:x,y"},
        {"", "\"\""},
        {"two words", "\"two words\""},
        {"say \"hi\"", "\"say \\\"hi\\\"\""},
        {"k=v", "\"k=v\""}, /* '=' would read as another field */
        {"C:\\dir", "\"C:\\\\dir\""},
        {"line1\nline2", "\"line1\\nline2\""},
        {"a\tb\rc", "\"a\\tb\\rc\""},
        {"bell\x07", "\"bell\\x07\""},
        {"\x1b[31mred", "\"\\x1b[31mred\""},
        {"del\x7f", "\"del\\x7f\""},
        {"\x01", "\"\\x01\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *v = msg_value(cases[i].in);
        if (strcmp(v, cases[i].out) != 0)
            fail_msg("case %zu: got %s, want %s", i, v, cases[i].out);
        free(v);
        /* Field values are treated like msg. */
        const char *kv[] = {"k", cases[i].in, NULL};
        char *line = log_one(LOG_INFO, "m", kv);
        char *f = fields(line, "info");
        char want[128];
        snprintf(want, sizeof want, " k=%s msg=m", cases[i].out);
        assert_string_equal(f, want);
        free(f);
        free(line);
    }
    /* A traceback stays on one line. */
    char *v = msg_value("stack traceback:\n\t[C]: in ?\n\tpolicies/apps.lua:3: in main chunk");
    assert_string_equal(
        v, "\"stack traceback:\\n\\t[C]: in ?\\n\\tpolicies/apps.lua:3: in main chunk\"");
    free(v);
}

/* No raw C0, DEL or C1 control byte ever reaches the line but its final
 * newline: a value cannot break the line or drive a terminal. */
static void no_control_character_reaches_the_line(void **state)
{
    (void)state;
    char in[4];
    for (unsigned c = 1; c < 0x100; c++) {
        bool c1 = false;
        if (c >= 0x80 && c <= 0x9f) { /* C1 as UTF-8: C2 80..C2 9F */
            in[0] = (char)0xc2, in[1] = (char)c, in[2] = 0;
            c1 = true;
        } else if (c < 0x80) {
            in[0] = (char)c, in[1] = 0;
        } else {
            continue;
        }
        char *line = log_one(LOG_INFO, in, NULL);
        size_t n = strlen(line);
        for (size_t i = 0; i + 1 < n; i++) {
            unsigned char b = (unsigned char)line[i];
            if (b < 0x20 || b == 0x7f ||
                (b == 0xc2 && (unsigned char)line[i + 1] >= 0x80 &&
                 (unsigned char)line[i + 1] <= 0x9f))
                fail_msg("byte %02x of the value (%s) left raw in: %s", c, c1 ? "C1" : "C0/DEL",
                         line);
        }
        free(line);
    }
    /* A C1 character is escaped as its bytes, quoted. */
    char *v = msg_value("next\xc2\x85line \xc2\x9b"
                        "31m");
    assert_string_equal(v, "\"next\\xc2\\x85line \\xc2\\x9b31m\"");
    free(v);
}

static void levels_below_the_minimum_are_dropped(void **state)
{
    (void)state;
    log_set_min_level(LOG_WARN);
    capture_begin();
    log_event(LOG_DEBUG, "d", NULL);
    log_event(LOG_INFO, "i", NULL);
    log_msg(LOG_INFO, "i%d", 2);
    log_event(LOG_WARN, "w", NULL);
    log_msg(LOG_ERROR, "e%d", 1);
    char *out = capture_end();
    regex_t re;
    assert_int_equal(regcomp(&re, "^ts=[^ ]+ level=warn msg=w\nts=[^ ]+ level=error msg=e1\n$",
                             REG_EXTENDED | REG_NOSUB),
                     0);
    if (regexec(&re, out, 0, NULL, 0) != 0)
        fail_msg("unexpected output: %s", out);
    regfree(&re);
    free(out);

    log_set_min_level(LOG_DEBUG);
    char *line = log_one(LOG_DEBUG, "d", NULL);
    char *f = fields(line, "debug");
    assert_string_equal(f, " msg=d");
    free(f);
    free(line);

    log_set_min_level(LOG_ERROR);
    line = log_one(LOG_WARN, "w", NULL);
    assert_string_equal(line, "");
    free(line);
}

static void log_msg_formats(void **state)
{
    (void)state;
    capture_begin();
    log_msg(LOG_INFO, "pipeline %s moved to %s after %d tries", "ab12", "RUNNING", 3);
    char *line = capture_end();
    char *f = fields(line, "info");
    assert_string_equal(f, " msg=\"pipeline ab12 moved to RUNNING after 3 tries\"");
    free(f);
    free(line);
}

static void level_names_round_trip(void **state)
{
    (void)state;
    const char *names[] = {"debug", "info", "warn", "error"};
    log_level levels[] = {LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR};
    for (int i = 0; i < 4; i++) {
        assert_string_equal(log_level_name(levels[i]), names[i]);
        assert_int_equal(log_level_parse(names[i]), levels[i]);
    }
    assert_true(LOG_DEBUG < LOG_INFO && LOG_INFO < LOG_WARN && LOG_WARN < LOG_ERROR);
    assert_int_equal(log_level_parse("warning"), -1);
    assert_int_equal(log_level_parse("INFO"), -1);
    assert_int_equal(log_level_parse(""), -1);
    assert_int_equal(log_level_parse(NULL), -1);
    assert_string_equal(log_level_name((log_level)42), "info");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(a_line_has_ts_level_then_fields_then_msg, reset),
        cmocka_unit_test_setup(server_name_follows_the_level, reset),
        cmocka_unit_test_setup(null_values_are_skipped_and_msg_goes_last, reset),
        cmocka_unit_test_setup(values_are_quoted_and_escaped, reset),
        cmocka_unit_test_setup(no_control_character_reaches_the_line, reset),
        cmocka_unit_test_setup(levels_below_the_minimum_are_dropped, reset),
        cmocka_unit_test_setup(log_msg_formats, reset),
        cmocka_unit_test_setup(level_names_round_trip, reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
