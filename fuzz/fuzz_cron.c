/* fuzz_cron — cron_parse, cron_matches and cron_next (src/cron.h).
 *
 * The input (up to its first NUL) is a cron expression. Asserted:
 *  - a failed parse returns -1, leaves *out untouched and writes a
 *    non-empty one-line message;
 *  - a parsed expression only allows values in range (seconds/minutes 0-59,
 *    hours 0-23, days 1-31, months 1-12, weekdays 0-6), allows at least one
 *    value per field, and a 5-field one fires at second 0 only;
 *  - from several starting instants (in Europe/Paris, so across both DST
 *    changes, plus a leap day and a year end), cron_next returns -1 or an
 *    instant strictly later and within the 5-year horizon; that instant
 *    matches the expression (cron_matches on its local time), unless it is
 *    the re-normalised time of a wall-clock time skipped by spring forward
 *    (cron.c moves 02:30 to 03:30); and when no DST change lies between the
 *    two, no earlier instant matches (from one of the starts, chosen by the
 *    input: second by second for gaps up to two hours, minute by minute for
 *    5-field expressions up to two days).
 */
#include <time.h>

#include "cron.h"
#include "fuzz_common.h"

static const time_t STARTS[] = {
    1711846799, /* 2024-03-31 01:59:59 CET, a second before spring forward */
    1729989000, /* 2024-10-27 02:30:00 CEST, inside the hour repeated at fall back */
    1709160000, /* 2024-02-28 23:40:00 CET, before a leap day */
    1704063599, /* 2023-12-31 23:59:59 CET */
    1700000000, /* 2023-11-14 23:13:20 CET */
    0,          /* 1970-01-01 01:00:00 CET */
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("TZ", "Europe/Paris", 1);
    tzset();
    return 0;
}

static int fires_at(const cron_expr *c, time_t t)
{
    struct tm tm;
    return localtime_r(&t, &tm) && cron_matches(c, &tm);
}

static long offset_at(time_t t)
{
    struct tm tm;
    return localtime_r(&t, &tm) ? tm.tm_gmtoff : 0;
}

/* Does the expression fire at t, given that t's UTC offset is `off`?
 * (gmtime_r of the shifted instant: much faster than localtime_r.) */
static int fires_at_offset(const cron_expr *c, time_t t, long off)
{
    struct tm tm;
    time_t wall = t + off;
    return gmtime_r(&wall, &tm) && cron_matches(c, &tm);
}

static void check_next(const uint8_t *data, size_t size, const cron_expr *c, time_t now,
                       int exhaustive)
{
    time_t next = cron_next(c, now);
    if (next == (time_t)-1)
        return;
    if (next <= now)
        fuzz_fail(data, size, "cron_next(%lld) = %lld is not later", (long long)now,
                  (long long)next);
    if (next - now > (time_t)(5 * 366 + 2) * 86400)
        fuzz_fail(data, size, "cron_next(%lld) = %lld is past the 5-year horizon", (long long)now,
                  (long long)next);
    if (!fires_at(c, next) && !(offset_at(next - 3600) < offset_at(next)))
        fuzz_fail(data, size, "cron_next(%lld) = %lld does not match the expression",
                  (long long)now, (long long)next);
    long off = offset_at(now);
    if (!exhaustive || off != offset_at(next))
        return; /* a DST change in between: the wall clock is not the instant order */
    time_t step = c->has_seconds ? 1 : 60;
    time_t span = c->has_seconds ? 2 * 3600 : 2 * 86400;
    if (next - now > span)
        return;
    /* CET/CEST offsets are whole minutes: second 0 is t % 60 == 0. */
    time_t t = c->has_seconds ? now + 1 : now + 60 - ((now % 60) + 60) % 60;
    for (; t < next; t += step)
        if (fires_at_offset(c, t, off))
            fuzz_fail(data, size, "cron_next(%lld) = %lld skipped %lld", (long long)now,
                      (long long)next, (long long)t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    cron_expr c, before;
    char err[256];
    memset(&c, 0xA5, sizeof c);
    before = c;
    err[0] = '\0';
    int rc = cron_parse(text, &c, err, sizeof err);
    if (rc != 0) {
        if (rc != -1)
            fuzz_fail(data, size, "cron_parse returned %d", rc);
        if (memcmp(&c, &before, sizeof c) != 0)
            fuzz_fail(data, size, "a failed parse wrote *out");
        if (!err[0] || strchr(err, '\n'))
            fuzz_fail(data, size, "bad error message \"%s\"", err);
        /* The message must not depend on err's size beyond truncation. */
        char small[8];
        cron_parse(text, &c, small, sizeof small);
        if (strncmp(small, err, sizeof small - 1) != 0)
            fuzz_fail(data, size, "truncated message differs");
        free(text);
        return 0;
    }
    if (!c.seconds || (c.seconds >> 60) || !c.minutes || (c.minutes >> 60) || !c.hours ||
        (c.hours >> 24) || !c.days || (c.days & 1) || !c.months || (c.months & 1) ||
        (c.months >> 13) || !c.weekdays || (c.weekdays >> 7))
        fuzz_fail(data, size, "field masks out of range: s=%llx m=%llx h=%x d=%x mo=%x w=%x",
                  (unsigned long long)c.seconds, (unsigned long long)c.minutes, c.hours, c.days,
                  c.months, c.weekdays);
    if (!c.has_seconds && c.seconds != 1)
        fuzz_fail(data, size, "a 5-field expression fires at other seconds than 0");
    /* Every start for the cheap checks; one (chosen by the input) for the
     * exhaustive search of an earlier match. */
    size_t nstarts = sizeof STARTS / sizeof STARTS[0], pick = 0;
    for (size_t i = 0; i < size; i++)
        pick += data[i];
    for (size_t i = 0; i < nstarts; i++)
        check_next(data, size, &c, STARTS[i], i == pick % nstarts);
    free(text);
    return 0;
}
