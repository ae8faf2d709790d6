/* fuzz_oopsctl — the command-line parsing of oopsctl and oopsd
 * (src/ctl_args.c: flags, statuses, numbers, application names, pipeline
 * ids, server names) and the terminal-safe escaping of what they print.
 *
 * The input is split at NUL bytes into words, an argv (at most 32). It is
 * parsed as oopsctl does: the global flags up to the command, then the
 * command's flags and positionals; every flag value goes through its own
 * parser, and every word also goes through each parser directly. The whole
 * input is escaped in both modes. Asserted:
 *  - every parser returns 0 or -1, and on -1 writes a non-empty message made
 *    only of printable ASCII (values are quoted escaped: nothing in a
 *    message can move the terminal's cursor or change its state);
 *  - ctl_parse_flags: the flags given have a non-empty value exactly when
 *    they take one, each pointing into argv; positionals are at most maxpos,
 *    and *used is within argv;
 *  - a status parses only from its name in any case; a status list gives a
 *    non-empty mask of known statuses; a number is within its bounds, and
 *    so is a duration (--since: more than 0, at most CTL_SINCE_MAX_MS); an
 *    application's two parts and an accepted environment are valid labels
 *    (pipeline_label_check); an accepted id is a valid
 *    pipeline id; an accepted server name is 1-40 printable ASCII;
 *  - ctl_escape's output is valid UTF-8 with no C0 control (but \n and \t in
 *    CTL_TEXT_LINES mode), no DEL, no C1 control and none of the invisible
 *    bidirectional or line-separator characters, and is empty only for an
 *    empty input.
 */
#include <strings.h>

#include "buf.h"
#include "ctl_args.h"
#include "fuzz_common.h"
#include "pipeline_state.h"

#define MAX_WORDS 32
#define ERRLEN 512

static const uint8_t *cur;
static size_t cur_size;

static void check_err(int rc, const char *err, const char *what)
{
    if (rc != 0 && rc != -1)
        fuzz_fail(cur, cur_size, "%s returned %d", what, rc);
    if (rc == 0)
        return;
    if (!err[0])
        fuzz_fail(cur, cur_size, "%s failed without a message", what);
    for (const unsigned char *p = (const unsigned char *)err; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            fuzz_fail(cur, cur_size, "%s: message holds byte 0x%02x: %s", what, *p, err);
}

/* Decode one UTF-8 sequence strictly; its length, or 0 if invalid. */
static size_t utf8_strict(const unsigned char *p, size_t n, unsigned *cp)
{
    unsigned c = p[0];
    size_t len;
    unsigned min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
        len = 2, min = 0x80, *cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, min = 0x800, *cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, min = 0x10000, *cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        *cp = (*cp << 6) | (p[i] & 0x3f);
    }
    if (*cp < min || *cp > 0x10ffff || (*cp >= 0xd800 && *cp <= 0xdfff))
        return 0;
    return len;
}

static int hidden(unsigned cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0x61c || cp == 0x200e || cp == 0x200f ||
           (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

static void check_escape(int mode)
{
    buf b = {0};
    ctl_escape(&b, (const char *)cur, cur_size, mode);
    if (b.oom)
        abort();
    if (!b.p || (b.len == 0) != (cur_size == 0))
        fuzz_fail(cur, cur_size, "ctl_escape: %zu bytes out for %zu in", b.len, cur_size);
    const unsigned char *p = (const unsigned char *)b.p;
    for (size_t i = 0; i < b.len;) {
        unsigned cp;
        size_t n = utf8_strict(p + i, b.len - i, &cp);
        if (n == 0)
            fuzz_fail(cur, cur_size, "ctl_escape (mode %d): invalid UTF-8 at output byte %zu", mode,
                      i);
        int kept = mode == CTL_TEXT_LINES && (cp == '\n' || cp == '\t');
        if ((cp < 0x20 && !kept) || cp == 0x7f || hidden(cp))
            fuzz_fail(cur, cur_size, "ctl_escape (mode %d): U+%04X left in the output at byte %zu",
                      mode, cp, i);
        i += n;
    }
    buf_free(&b);
}

static void each_parser(const char *w)
{
    char err[ERRLEN];
    int rc;

    pipeline_status st;
    err[0] = '\0';
    rc = ctl_parse_status("--expect", w, &st, err, sizeof err);
    check_err(rc, err, "ctl_parse_status");
    if (rc == 0 && (st >= PS__COUNT || strcasecmp(pipeline_status_name(st), w) != 0))
        fuzz_fail(cur, cur_size, "ctl_parse_status(\"%s\") gave status %d", w, (int)st);

    unsigned mask = 0;
    err[0] = '\0';
    rc = ctl_parse_statuses("--status", w, &mask, err, sizeof err);
    check_err(rc, err, "ctl_parse_statuses");
    if (rc == 0 && (mask == 0 || (mask >> PS__COUNT) != 0))
        fuzz_fail(cur, cur_size, "ctl_parse_statuses gave mask 0x%x", mask);

    unsigned long long n = 0;
    err[0] = '\0';
    rc = ctl_parse_number("--limit", w, 1, CTL_LIMIT_MAX, NULL, &n, err, sizeof err);
    check_err(rc, err, "ctl_parse_number");
    if (rc == 0 && (n < 1 || n > CTL_LIMIT_MAX))
        fuzz_fail(cur, cur_size, "ctl_parse_number gave %llu", n);
    err[0] = '\0';
    rc = ctl_parse_number("--drain", w, 1, CTL_DRAIN_MAX, "milliseconds", &n, err, sizeof err);
    check_err(rc, err, "ctl_parse_number");

    unsigned long long ms = 0;
    err[0] = '\0';
    rc = ctl_parse_duration("--since", w, CTL_SINCE_MAX_MS, &ms, err, sizeof err);
    check_err(rc, err, "ctl_parse_duration");
    if (rc == 0 && (ms < 1 || ms > CTL_SINCE_MAX_MS))
        fuzz_fail(cur, cur_size, "ctl_parse_duration gave %llu ms", ms);

    char ns[PIPELINE_LABEL_MAX + 1], app[PIPELINE_LABEL_MAX + 1];
    err[0] = '\0';
    rc = ctl_parse_app("--app", w, ns, app, err, sizeof err);
    check_err(rc, err, "ctl_parse_app");
    if (rc == 0 && (!pipeline_label_valid(ns) || !pipeline_label_valid(app)))
        fuzz_fail(cur, cur_size, "ctl_parse_app accepted \"%s\" / \"%s\"", ns, app);

    err[0] = '\0';
    rc = pipeline_label_check("--env", w, err, sizeof err);
    check_err(rc, err, "pipeline_label_check");
    if (rc == 0 && !pipeline_label_valid(w))
        fuzz_fail(cur, cur_size, "pipeline_label_check accepted an invalid label");

    err[0] = '\0';
    rc = ctl_check_id(w, err, sizeof err);
    check_err(rc, err, "ctl_check_id");
    if (rc == 0 && !pipeline_id_valid(w))
        fuzz_fail(cur, cur_size, "ctl_check_id accepted an invalid id");

    err[0] = '\0';
    rc = ctl_parse_step("--step", w, err, sizeof err);
    check_err(rc, err, "ctl_parse_step");
    if (rc == 0 && strcmp(w, "build") != 0 && strcmp(w, "deploy") != 0 && strcmp(w, "health") != 0)
        fuzz_fail(cur, cur_size, "ctl_parse_step accepted \"%s\"", w);

    err[0] = '\0';
    rc = ctl_parse_server_name("--name", w, err, sizeof err);
    check_err(rc, err, "ctl_parse_server_name");
    if (rc == 0) {
        size_t len = strlen(w);
        if (len < 1 || len > CTL_SERVER_NAME_MAX)
            fuzz_fail(cur, cur_size, "ctl_parse_server_name accepted %zu bytes", len);
        for (size_t i = 0; i < len; i++)
            if (w[i] <= 0x20 || w[i] > 0x7e)
                fuzz_fail(cur, cur_size, "ctl_parse_server_name accepted byte 0x%02x",
                          (unsigned char)w[i]);
    }
}

static int points_into(const char *v, char *const *argv, int argc)
{
    for (int i = 0; i < argc; i++)
        if (v >= argv[i] && v <= argv[i] + strlen(argv[i]))
            return 1;
    return 0;
}

static void check_flags(const ctl_flag *f, size_t nf, char *const *argv, int argc)
{
    for (size_t i = 0; i < nf; i++) {
        if (!f[i].given)
            continue;
        if (f[i].has_value && (!f[i].value || !*f[i].value || !points_into(f[i].value, argv, argc)))
            fuzz_fail(cur, cur_size, "%s given without a proper value", f[i].name);
        if (!f[i].has_value && f[i].value)
            fuzz_fail(cur, cur_size, "%s takes no value but got one", f[i].name);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cur = data;
    cur_size = size;
    char *copy = malloc(size + 1);
    if (!copy)
        abort();
    memcpy(copy, data, size);
    copy[size] = '\0';
    char *argv[MAX_WORDS + 1];
    int argc = 0;
    for (size_t i = 0; argc < MAX_WORDS && i <= size; i += strlen(copy + i) + 1)
        argv[argc++] = copy + i;
    argv[argc] = NULL;

    /* oopsctl [global flags] COMMAND [flags and positionals] */
    ctl_flag globals[] = {{"--db", true, false, NULL},
                          {"--json", false, false, NULL},
                          {"--help", false, false, NULL},
                          {"-h", false, false, NULL}};
    char err[ERRLEN] = "";
    int used = -1;
    int rc = ctl_parse_flags(argc, argv, globals, 4, true, NULL, 0, NULL, &used, err, sizeof err);
    check_err(rc, err, "ctl_parse_flags (globals)");
    if (rc == 0) {
        check_flags(globals, 4, argv, argc);
        if (used < 0 || used > argc)
            fuzz_fail(data, size, "*used = %d of %d words", used, argc);
        ctl_flag cmd[] = {{"--app", true, false, NULL},      {"--env", true, false, NULL},
                          {"--artifact", true, false, NULL}, {"--manual", false, false, NULL},
                          {"--status", true, false, NULL},   {"--limit", true, false, NULL},
                          {"--expect", true, false, NULL},   {"--step", true, false, NULL},
                          {"--source", true, false, NULL},   {"--rollback", false, false, NULL},
                          {"--policies", true, false, NULL}};
        size_t ncmd = sizeof cmd / sizeof cmd[0];
        const char *pos[2];
        size_t npos = 99;
        err[0] = '\0';
        if (used < argc) {
            rc = ctl_parse_flags(argc - used - 1, argv + used + 1, cmd, ncmd, false, pos, 2, &npos,
                                 NULL, err, sizeof err);
            check_err(rc, err, "ctl_parse_flags (command)");
            if (rc == 0) {
                check_flags(cmd, ncmd, argv, argc);
                if (npos > 2)
                    fuzz_fail(data, size, "%zu positionals for at most 2", npos);
                for (size_t i = 0; i < npos; i++)
                    if (!points_into(pos[i], argv, argc))
                        fuzz_fail(data, size, "positional %zu does not point into argv", i);
            }
        }
    }
    for (int i = 0; i < argc; i++)
        each_parser(argv[i]);
    check_escape(CTL_TEXT_LINE);
    check_escape(CTL_TEXT_LINES);
    free(copy);
    return 0;
}
