/* cron.h - cron expressions for scheduled restarts.
 *
 * Syntax: 5 fields "minute hour day-of-month month day-of-week" or 6 fields
 * with seconds first (Spring style). Each field is a comma list of items:
 * "*" or "?" (every value), "a" or "a-b", each optionally followed by "/n"
 * to take every n-th value ("a/n" runs from a up to the field's maximum).
 * Months accept JAN-DEC, days SUN-SAT (any case, also in ranges such as
 * MON-FRI or FRI-SUN); day-of-week 0 and 7 are both Sunday. Macros:
 * @yearly @annually @monthly @weekly @daily @midnight @hourly (any case).
 * Day-of-month and day-of-week are ANDed: both must match.
 */
#ifndef OOPS_CRON_H
#define OOPS_CRON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef struct cron_expr {
    uint64_t seconds; /* bit n set = second n allowed (0-59) */
    uint64_t minutes; /* 0-59 */
    uint32_t hours;   /* 0-23 */
    uint32_t days;    /* day-of-month 1-31, bit n */
    uint16_t months;  /* 1-12, bit n */
    uint8_t weekdays; /* 0-6, 0 = Sunday */
    bool has_seconds; /* written with 6 fields */
} cron_expr;

/* Parse `text` into `*out`. The expression is plain data: no allocation,
 * nothing to free. Returns 0 on success. On failure returns -1, leaves `*out`
 * untouched and writes a one-line, operator-facing message into `err`
 * (truncated to errlen-1 characters; err may be NULL or errlen 0). Messages
 * name the field and the offending value, e.g.
 *   "empty expression", "expected 5 or 6 fields, got 4",
 *   "minute 61 out of range 0-59", "hour step 0 must be at least 1",
 *   "month range 12-3 is reversed", "unknown macro @sometimes",
 *   "day-of-week \"FOO\": not a number or name". */
int cron_parse(const char *text, cron_expr *out, char *err, size_t errlen);

/* Does the expression fire at this exact second? `t` is a broken-down local
 * time; only tm_sec, tm_min, tm_hour, tm_mday, tm_mon (0-11) and tm_wday
 * (0-6) are read, and out-of-range values never match. A 5-field expression
 * fires only at second 0 of a matching minute. */
bool cron_matches(const cron_expr *c, const struct tm *t);

/* The first time strictly after `after` at which the expression fires, in
 * the process's local time zone (localtime_r/mktime), or (time_t)-1 if there
 * is none within 5 years (e.g. "0 0 30 2 *"). Across DST changes, wall-clock
 * times that do not exist (spring forward) are skipped and times that occur
 * twice (fall back) fire only on their first occurrence. */
time_t cron_next(const cron_expr *c, time_t after);

#endif /* OOPS_CRON_H */
