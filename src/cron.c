/* cron.c - parse cron expressions and find when they fire.
 *
 * Parsing turns each field into a bit mask. Finding the next firing time is
 * done in two layers: a search over wall-clock times (calendar arithmetic
 * with timegm/gmtime_r, so no DST can interfere with skipping), then a
 * conversion of the wall-clock time found to an instant with mktime.
 */
#include "cron.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define HORIZON_YEARS 5
#define SHOW_MAX 32        /* quote at most this much of a bad token */
#define NUMBER_CAP 1000000 /* longer numbers saturate; all are out of range */

typedef struct span {
    const char *p;
    size_t n;
} span;

typedef struct errbuf {
    char *buf;
    size_t len;
} errbuf;

typedef struct field_spec {
    const char *name;
    int min, max;             /* values an operator may write */
    int star_max;             /* where "*" and "a/n" stop */
    int range_end_zero_is;    /* a range ending at 0 ends here instead (-1: never) */
    const char *const *names; /* 3-letter names, NULL-terminated, or NULL */
    int name_base;            /* value of names[0] */
} field_spec;

static const char *const MONTH_NAMES[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL",
                                          "AUG", "SEP", "OCT", "NOV", "DEC", NULL};
static const char *const DAY_NAMES[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", NULL};

/* Day-of-week: "*" stops at 6 so that 7 (a second Sunday) is only used when
 * written; "FRI-SUN" ends at 7 so it is not a reversed range. */
enum { F_SECOND, F_MINUTE, F_HOUR, F_MDAY, F_MONTH, F_WDAY, F_COUNT };
static const field_spec FIELDS[F_COUNT] = {
    [F_SECOND] = {"second", 0, 59, 59, -1, NULL, 0},
    [F_MINUTE] = {"minute", 0, 59, 59, -1, NULL, 0},
    [F_HOUR] = {"hour", 0, 23, 23, -1, NULL, 0},
    [F_MDAY] = {"day-of-month", 1, 31, 31, -1, NULL, 0},
    [F_MONTH] = {"month", 1, 12, 12, -1, MONTH_NAMES, 1},
    [F_WDAY] = {"day-of-week", 0, 7, 6, 7, DAY_NAMES, 0},
};

typedef struct macro {
    const char *name;
    const char *expansion;
} macro;

static const macro MACROS[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
    {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"},
};

/* ---- errors ------------------------------------------------------------ */

__attribute__((format(printf, 2, 3))) static int fail(errbuf *e, const char *fmt, ...)
{
    if (e->buf && e->len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->buf, e->len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* printf arguments for "%.*s" that keep a pasted-in token from flooding the line */
#define SHOW(s) (int)((s).n < SHOW_MAX ? (s).n : SHOW_MAX), (s).p

/* ---- small text helpers ---------------------------------------------------- */

/* Take the next whitespace-separated token from *cur; false at the end. */
static bool next_token(const char **cur, span *tok)
{
    const char *p = *cur;
    while (*p && isspace((unsigned char)*p))
        p++;
    if (!*p)
        return false;
    tok->p = p;
    while (*p && !isspace((unsigned char)*p))
        p++;
    tok->n = (size_t)(p - tok->p);
    *cur = p;
    return true;
}

/* Split s at the first c; false (and nothing written) if c is absent. */
static bool split_at(span s, char c, span *before, span *after)
{
    const char *hit = memchr(s.p, c, s.n);
    if (!hit)
        return false;
    before->p = s.p;
    before->n = (size_t)(hit - s.p);
    after->p = hit + 1;
    after->n = s.n - before->n - 1;
    return true;
}

static bool span_is(span s, const char *lit)
{
    return s.n == strlen(lit) && memcmp(s.p, lit, s.n) == 0;
}

/* Decimal digits only; no sign, so "-1" cannot sneak past as a range. */
static bool parse_number(span s, int *out)
{
    if (s.n == 0)
        return false;
    long v = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (!isdigit((unsigned char)s.p[i]))
            return false;
        v = v * 10 + (s.p[i] - '0');
        if (v > NUMBER_CAP)
            v = NUMBER_CAP;
    }
    *out = (int)v;
    return true;
}

static bool lookup_name(const field_spec *f, span s, int *out)
{
    if (!f->names)
        return false;
    for (int i = 0; f->names[i]; i++) {
        if (s.n == 3 && strncasecmp(s.p, f->names[i], 3) == 0) {
            *out = f->name_base + i;
            return true;
        }
    }
    return false;
}

/* ---- one field ------------------------------------------------------------- */

/* A single value, by number or name, within the field's range. `field` is
 * the whole field text, quoted when the value is missing altogether. */
static int parse_value(const field_spec *f, span tok, span field, int *out, errbuf *e)
{
    if (tok.n == 0)
        return fail(e, "%s value missing in \"%.*s\"", f->name, SHOW(field));
    if (!parse_number(tok, out) && !lookup_name(f, tok, out)) {
        return fail(e, "%s \"%.*s\": %s", f->name, SHOW(tok),
                    f->names ? "not a number or name" : "not a number");
    }
    if (*out < f->min || *out > f->max)
        return fail(e, "%s %.*s out of range %d-%d", f->name, SHOW(tok), f->min, f->max);
    return 0;
}

static int parse_step(const field_spec *f, span tok, span field, int *out, errbuf *e)
{
    if (tok.n == 0)
        return fail(e, "%s step missing in \"%.*s\"", f->name, SHOW(field));
    if (!parse_number(tok, out))
        return fail(e, "%s step \"%.*s\": not a number", f->name, SHOW(tok));
    if (*out < 1)
        return fail(e, "%s step %.*s must be at least 1", f->name, SHOW(tok));
    return 0;
}

/* The lo..hi bounds of an item's base: "*", "?", "a" or "a-b". A lone "a"
 * followed by a step runs to the field's end, as in "5/15". */
static int parse_base(const field_spec *f, span base, bool stepped, span field, int *lo, int *hi,
                      errbuf *e)
{
    span a, b;
    if (span_is(base, "*") || span_is(base, "?")) {
        *lo = f->min;
        *hi = f->star_max;
        return 0;
    }
    if (split_at(base, '-', &a, &b)) {
        if (parse_value(f, a, field, lo, e) || parse_value(f, b, field, hi, e))
            return -1;
        if (*hi == 0 && *lo > 0 && f->range_end_zero_is >= 0)
            *hi = f->range_end_zero_is;
        if (*lo > *hi)
            return fail(e, "%s range %.*s is reversed", f->name, SHOW(base));
        return 0;
    }
    if (parse_value(f, base, field, lo, e))
        return -1;
    *hi = stepped && *lo < f->star_max ? f->star_max : *lo;
    return 0;
}

/* One comma-separated item: base with an optional "/step". */
static int parse_item(const field_spec *f, span item, span field, uint64_t *mask, errbuf *e)
{
    span base = item, step_text;
    int lo, hi, step = 1;
    bool stepped = split_at(item, '/', &base, &step_text);
    if (stepped && parse_step(f, step_text, field, &step, e))
        return -1;
    if (parse_base(f, base, stepped, field, &lo, &hi, e))
        return -1;
    for (int v = lo; v <= hi; v += step)
        *mask |= UINT64_C(1) << v;
    return 0;
}

static int parse_field(const field_spec *f, span field, uint64_t *mask, errbuf *e)
{
    span rest = field, item;
    *mask = 0;
    while (split_at(rest, ',', &item, &rest)) {
        if (parse_item(f, item, field, mask, e))
            return -1;
    }
    return parse_item(f, rest, field, mask, e);
}

/* ---- whole expression ------------------------------------------------------ */

static int expand_macro(span tok, const char **expansion, errbuf *e)
{
    for (size_t i = 0; i < sizeof MACROS / sizeof MACROS[0]; i++) {
        if (tok.n == strlen(MACROS[i].name) && strncasecmp(tok.p, MACROS[i].name, tok.n) == 0) {
            *expansion = MACROS[i].expansion;
            return 0;
        }
    }
    return fail(e, "unknown macro %.*s", SHOW(tok));
}

static void store_field(cron_expr *c, int which, uint64_t mask)
{
    switch (which) {
    case F_SECOND: c->seconds = mask; break;
    case F_MINUTE: c->minutes = mask; break;
    case F_HOUR: c->hours = (uint32_t)mask; break;
    case F_MDAY: c->days = (uint32_t)mask; break;
    case F_MONTH: c->months = (uint16_t)mask; break;
    default:
        /* 7 is another way to write Sunday; fold it into bit 0. */
        c->weekdays = (uint8_t)((mask | (mask >> 7)) & 0x7f);
        break;
    }
}

static int parse_fields(const char *text, cron_expr *c, errbuf *e)
{
    span tok[F_COUNT];
    span extra;
    int count = 0;
    const char *cur = text;
    while (count < F_COUNT && next_token(&cur, &tok[count]))
        count++;
    while (next_token(&cur, &extra))
        count++;
    if (count != 5 && count != 6)
        return fail(e, "expected 5 or 6 fields, got %d", count);

    /* Spring style: a sixth field is seconds, written first. */
    int first = count == 6 ? F_SECOND : F_MINUTE;
    memset(c, 0, sizeof *c);
    c->has_seconds = count == 6;
    c->seconds = 1; /* 5 fields fire at second 0 */
    for (int i = 0; i < count; i++) {
        uint64_t mask;
        if (parse_field(&FIELDS[first + i], tok[i], &mask, e))
            return -1;
        store_field(c, first + i, mask);
    }
    return 0;
}

int cron_parse(const char *text, cron_expr *out, char *err, size_t errlen)
{
    errbuf e = {err, errlen};
    cron_expr c;
    span first, extra;
    const char *cur = text ? text : "";

    if (!next_token(&cur, &first))
        return fail(&e, "empty expression");
    if (first.p[0] == '@') {
        if (next_token(&cur, &extra))
            return fail(&e, "macro %.*s takes no fields", SHOW(first));
        if (expand_macro(first, &text, &e))
            return -1;
    }
    if (parse_fields(text, &c, &e))
        return -1;
    *out = c;
    return 0;
}

/* ---- matching ------------------------------------------------------------ */

static bool bit(uint64_t mask, int n, int lo, int hi)
{
    return n >= lo && n <= hi && (mask >> n) & 1;
}

static bool month_ok(const cron_expr *c, const struct tm *t)
{
    return bit(c->months, t->tm_mon + 1, 1, 12);
}

/* Both day fields must agree (Spring), not either (Vixie). */
static bool day_ok(const cron_expr *c, const struct tm *t)
{
    return bit(c->days, t->tm_mday, 1, 31) && bit(c->weekdays, t->tm_wday, 0, 6);
}

static bool hour_ok(const cron_expr *c, const struct tm *t)
{
    return bit(c->hours, t->tm_hour, 0, 23);
}

static bool minute_ok(const cron_expr *c, const struct tm *t)
{
    return bit(c->minutes, t->tm_min, 0, 59);
}

static bool second_ok(const cron_expr *c, const struct tm *t)
{
    return bit(c->seconds, t->tm_sec, 0, 59);
}

bool cron_matches(const cron_expr *c, const struct tm *t)
{
    return month_ok(c, t) && day_ok(c, t) && hour_ok(c, t) && minute_ok(c, t) && second_ok(c, t);
}

/* ---- next firing time ------------------------------------------------------- */

/* Wall-clock times are handled as "pseudo-UTC" counts (timegm of the local
 * broken-down time) so calendar stepping never meets a DST transition. */

static bool add_years(time_t wall, int years, time_t *out)
{
    struct tm tm;
    if (!gmtime_r(&wall, &tm))
        return false;
    tm.tm_year += years;
    *out = timegm(&tm);
    return true;
}

/* Start of the next month or day, re-normalised by timegm. */
static time_t wall_next_month(struct tm *tm)
{
    tm->tm_mon++;
    tm->tm_mday = 1;
    tm->tm_hour = tm->tm_min = tm->tm_sec = 0;
    return timegm(tm);
}

static time_t wall_next_day(struct tm *tm)
{
    tm->tm_mday++;
    tm->tm_hour = tm->tm_min = tm->tm_sec = 0;
    return timegm(tm);
}

/* A leap second (tm_sec 60, "right/" zones) must not stall the search. */
static int step_at_least_one(int seconds) { return seconds > 0 ? seconds : 1; }

/* First matching wall-clock time in [from, limit]. Skips whole months, days,
 * hours and minutes that cannot match, so years are crossed in a few hundred
 * steps rather than millions of seconds. */
static bool wall_next(const cron_expr *c, time_t from, time_t limit, time_t *out)
{
    struct tm tm;
    time_t w = from;
    while (w <= limit) {
        if (!gmtime_r(&w, &tm))
            return false;
        if (!month_ok(c, &tm))
            w = wall_next_month(&tm);
        else if (!day_ok(c, &tm))
            w = wall_next_day(&tm);
        else if (!hour_ok(c, &tm))
            w += step_at_least_one(3600 - tm.tm_min * 60 - tm.tm_sec);
        else if (!minute_ok(c, &tm))
            w += step_at_least_one(60 - tm.tm_sec);
        else if (!second_ok(c, &tm))
            w += 1;
        else {
            *out = w;
            return true;
        }
    }
    return false;
}

static bool same_wall(const struct tm *a, const struct tm *b)
{
    return a->tm_year == b->tm_year && a->tm_mon == b->tm_mon && a->tm_mday == b->tm_mday &&
           a->tm_hour == b->tm_hour && a->tm_min == b->tm_min && a->tm_sec == b->tm_sec;
}

/* The instant a local wall-clock time denotes. mktime is asked under each
 * DST assumption: if the time exists we take its earliest occurrence (so a
 * time repeated at fall-back fires once); if it falls in a spring-forward gap
 * no answer reproduces it, and the latest re-normalisation (02:30 -> 03:30)
 * is used so the job still runs that day. */
static time_t wall_to_instant(time_t wall)
{
    struct tm want, probe, back;
    time_t best_real = (time_t)-1, best_gap = (time_t)-1;
    bool have_real = false, have_gap = false;
    if (!gmtime_r(&wall, &want))
        return (time_t)-1;
    for (int isdst = -1; isdst <= 1; isdst++) {
        probe = want;
        probe.tm_isdst = isdst;
        time_t t = mktime(&probe);
        if (t == (time_t)-1 || !localtime_r(&t, &back))
            continue;
        if (same_wall(&back, &want)) {
            if (!have_real || t < best_real)
                best_real = t;
            have_real = true;
        } else {
            if (!have_gap || t > best_gap)
                best_gap = t;
            have_gap = true;
        }
    }
    return have_real ? best_real : best_gap;
}

time_t cron_next(const cron_expr *c, time_t after)
{
    struct tm lt;
    time_t wall, limit;
    if (!localtime_r(&after, &lt))
        return (time_t)-1;
    wall = timegm(&lt);
    if (!add_years(wall, HORIZON_YEARS, &limit))
        return (time_t)-1;
    /* Wall-clock order and instant order differ around DST changes, so keep
     * going until a candidate lies strictly after `after`. */
    while (wall_next(c, wall + 1, limit, &wall)) {
        time_t t = wall_to_instant(wall);
        if (t != (time_t)-1 && t > after)
            return t;
    }
    return (time_t)-1;
}
