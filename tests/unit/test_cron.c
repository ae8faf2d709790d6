/* test_cron.c - cron expressions for scheduled restarts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cron.h"

/* A POSIX TZ rule, so the DST tests need no tzdata: US Eastern, 2007 rules. */
#define NEW_YORK "EST5EDT,M3.2.0,M11.1.0"

static int use_utc(void **state)
{
    (void)state;
    setenv("TZ", "UTC", 1);
    tzset();
    return 0;
}

static int use_new_york(void **state)
{
    (void)state;
    setenv("TZ", NEW_YORK, 1);
    tzset();
    return 0;
}

/* ---- helpers ------------------------------------------------------------------ */

static cron_expr parse_ok(const char *text)
{
    cron_expr c;
    char err[128] = "";
    if (cron_parse(text, &c, err, sizeof err) != 0)
        fail_msg("\"%s\" was rejected: %s", text, err);
    return c;
}

static void assert_rejected(const char *text, const char *want)
{
    cron_expr c;
    char err[128] = "";
    if (cron_parse(text, &c, err, sizeof err) != -1)
        fail_msg("\"%s\" was accepted", text);
    assert_string_equal(err, want);
}

static void assert_expr_equal(const cron_expr *x, const cron_expr *y)
{
    assert_true(x->seconds == y->seconds);
    assert_true(x->minutes == y->minutes);
    assert_int_equal(x->hours, y->hours);
    assert_int_equal(x->days, y->days);
    assert_int_equal(x->months, y->months);
    assert_int_equal(x->weekdays, y->weekdays);
    assert_int_equal(x->has_seconds, y->has_seconds);
}

static void assert_same_expr(const char *a, const char *b)
{
    cron_expr x = parse_ok(a), y = parse_ok(b);
    assert_expr_equal(&x, &y);
}

/* Local broken-down time with tm_wday filled in by mktime. */
static struct tm local_tm(int y, int mo, int d, int h, int mi, int s)
{
    struct tm t = {.tm_year = y - 1900,
                   .tm_mon = mo - 1,
                   .tm_mday = d,
                   .tm_hour = h,
                   .tm_min = mi,
                   .tm_sec = s,
                   .tm_isdst = -1};
    mktime(&t);
    return t;
}

static time_t local(int y, int mo, int d, int h, int mi, int s)
{
    struct tm t = local_tm(y, mo, d, h, mi, s);
    return mktime(&t);
}

static time_t utc(int y, int mo, int d, int h, int mi, int s)
{
    struct tm t = {.tm_year = y - 1900,
                   .tm_mon = mo - 1,
                   .tm_mday = d,
                   .tm_hour = h,
                   .tm_min = mi,
                   .tm_sec = s};
    return timegm(&t);
}

static bool fires(const char *text, int y, int mo, int d, int h, int mi, int s)
{
    cron_expr c = parse_ok(text);
    struct tm t = local_tm(y, mo, d, h, mi, s);
    return cron_matches(&c, &t);
}

static time_t next_after(const char *text, time_t after)
{
    cron_expr c = parse_ok(text);
    return cron_next(&c, after);
}

/* ---- the reference examples ------------------------------------------------------- */

static void test_daily_at_three_is_valid_and_fires_at_0300_only(void **state)
{
    (void)state;
    assert_true(fires("0 3 * * *", 2025, 6, 10, 3, 0, 0));
    assert_false(fires("0 3 * * *", 2025, 6, 10, 3, 1, 0));
    assert_false(fires("0 3 * * *", 2025, 6, 10, 4, 0, 0));
}

static void test_four_fields_are_rejected_with_count(void **state)
{
    (void)state;
    assert_rejected("99 * * *", "expected 5 or 6 fields, got 4");
}

static void test_empty_expression_is_rejected(void **state)
{
    (void)state;
    cron_expr c;
    char err[64] = "";
    assert_rejected("", "empty expression");
    assert_rejected(" \t\n", "empty expression");
    assert_int_equal(cron_parse(NULL, &c, err, sizeof err), -1);
    assert_string_equal(err, "empty expression");
}

/* ---- syntax ---------------------------------------------------------------------- */

static void test_star_fires_every_minute(void **state)
{
    (void)state;
    assert_true(fires("* * * * *", 2025, 6, 10, 0, 0, 0));
    assert_true(fires("* * * * *", 2025, 12, 31, 23, 59, 0));
}

static void test_range_includes_both_ends_and_nothing_outside(void **state)
{
    (void)state;
    assert_true(fires("10-20 * * * *", 2025, 6, 10, 3, 10, 0));
    assert_true(fires("10-20 * * * *", 2025, 6, 10, 3, 15, 0));
    assert_true(fires("10-20 * * * *", 2025, 6, 10, 3, 20, 0));
    assert_false(fires("10-20 * * * *", 2025, 6, 10, 3, 9, 0));
    assert_false(fires("10-20 * * * *", 2025, 6, 10, 3, 21, 0));
}

static void test_list_fires_on_each_listed_value_only(void **state)
{
    (void)state;
    cron_expr c = parse_ok("5,17,42 * * * *");
    assert_true(c.minutes == ((UINT64_C(1) << 5) | (UINT64_C(1) << 17) | (UINT64_C(1) << 42)));
}

static void test_star_step_takes_every_nth_from_field_start(void **state)
{
    (void)state;
    cron_expr c = parse_ok("*/15 */6 */10 */5 *");
    assert_true(c.minutes == ((UINT64_C(1) << 0) | (UINT64_C(1) << 15) | (UINT64_C(1) << 30) |
                              (UINT64_C(1) << 45)));
    assert_int_equal(c.hours, (1u << 0) | (1u << 6) | (1u << 12) | (1u << 18));
    assert_int_equal(c.days, (1u << 1) | (1u << 11) | (1u << 21) | (1u << 31));
    assert_int_equal(c.months, (1u << 1) | (1u << 6) | (1u << 11));
}

static void test_range_step_takes_every_nth_within_range(void **state)
{
    (void)state;
    cron_expr c = parse_ok("10-35/10 * * * *");
    assert_true(c.minutes == ((UINT64_C(1) << 10) | (UINT64_C(1) << 20) | (UINT64_C(1) << 30)));
}

static void test_start_step_runs_to_field_max_without_wrapping(void **state)
{
    (void)state;
    cron_expr c = parse_ok("5/20 20/2 * * *");
    assert_true(c.minutes == ((UINT64_C(1) << 5) | (UINT64_C(1) << 25) | (UINT64_C(1) << 45)));
    assert_int_equal(c.hours, (1u << 20) | (1u << 22));
}

static void test_list_mixes_values_ranges_and_steps(void **state)
{
    (void)state;
    cron_expr c = parse_ok("0,10-12,*/25 * * * *");
    assert_true(c.minutes == ((UINT64_C(1) << 0) | (UINT64_C(1) << 10) | (UINT64_C(1) << 11) |
                              (UINT64_C(1) << 12) | (UINT64_C(1) << 25) | (UINT64_C(1) << 50)));
}

static void test_question_mark_means_the_same_as_star(void **state)
{
    (void)state;
    assert_same_expr("0 0 ? * ?", "0 0 * * *");
    assert_same_expr("? ? ? ? ? ?", "* * * * * *");
}

static void test_month_names_are_case_insensitive(void **state)
{
    (void)state;
    static const char *const names[] = {"JAN", "feb", "Mar", "aPr", "MAY", "jun",
                                        "JUL", "aug", "SEP", "oct", "NOV", "dec"};
    char text[64];
    for (int m = 1; m <= 12; m++) {
        snprintf(text, sizeof text, "0 0 1 %s *", names[m - 1]);
        cron_expr c = parse_ok(text);
        assert_int_equal(c.months, 1u << m);
    }
}

static void test_day_names_are_case_insensitive(void **state)
{
    (void)state;
    static const char *const names[] = {"SUN", "mon", "Tue", "wED", "THU", "fri", "Sat"};
    char text[64];
    for (int d = 0; d <= 6; d++) {
        snprintf(text, sizeof text, "0 0 * * %s", names[d]);
        cron_expr c = parse_ok(text);
        assert_int_equal(c.weekdays, 1u << d);
    }
}

static void test_mon_fri_range_covers_weekdays_only(void **state)
{
    (void)state;
    assert_same_expr("0 9 * * MON-FRI", "0 9 * * 1-5");
    assert_true(fires("0 9 * * mon-fri", 2025, 6, 9, 9, 0, 0));   /* Monday */
    assert_true(fires("0 9 * * mon-fri", 2025, 6, 13, 9, 0, 0));  /* Friday */
    assert_false(fires("0 9 * * mon-fri", 2025, 6, 14, 9, 0, 0)); /* Saturday */
    assert_false(fires("0 9 * * mon-fri", 2025, 6, 15, 9, 0, 0)); /* Sunday */
}

static void test_name_ranges_take_steps_and_month_names(void **state)
{
    (void)state;
    assert_same_expr("0 0 * JUN-AUG MON-FRI/2", "0 0 * 6-8 1,3,5");
}

static void test_day_range_may_end_on_sunday(void **state)
{
    (void)state;
    assert_same_expr("0 0 * * FRI-SUN", "0 0 * * 0,5,6");
    assert_same_expr("0 0 * * MON-SUN", "0 0 * * *");
}

static void test_zero_and_seven_are_both_sunday(void **state)
{
    (void)state;
    assert_same_expr("0 0 * * 0", "0 0 * * 7");
    assert_same_expr("0 0 * * 7", "0 0 * * SUN");
    assert_same_expr("0 0 * * 5-7", "0 0 * * 0,5,6");
    assert_true(fires("0 0 * * 7", 2025, 6, 15, 0, 0, 0));  /* Sunday */
    assert_false(fires("0 0 * * 7", 2025, 6, 14, 0, 0, 0)); /* Saturday */
}

static void test_day_of_month_and_day_of_week_must_both_match(void **state)
{
    (void)state;
    assert_true(fires("0 0 13 * FRI", 2025, 6, 13, 0, 0, 0));  /* Friday 13th */
    assert_false(fires("0 0 13 * FRI", 2025, 3, 13, 0, 0, 0)); /* Thursday 13th */
    assert_false(fires("0 0 13 * FRI", 2025, 6, 20, 0, 0, 0)); /* Friday 20th */
}

static void test_matching_ignores_out_of_range_times(void **state)
{
    (void)state;
    cron_expr c = parse_ok("* * * * * *");
    struct tm t = local_tm(2025, 6, 10, 0, 0, 0);
    t.tm_sec = 60; /* a leap second */
    assert_false(cron_matches(&c, &t));
}

/* ---- seconds ------------------------------------------------------------------- */

static void test_six_fields_put_seconds_first(void **state)
{
    (void)state;
    assert_true(parse_ok("*/10 * * * * *").has_seconds);
    assert_true(fires("*/10 * * * * *", 2025, 6, 10, 3, 0, 20));
    assert_false(fires("*/10 * * * * *", 2025, 6, 10, 3, 0, 21));
}

static void test_six_fields_with_nonzero_seconds_skip_the_whole_minute(void **state)
{
    (void)state;
    assert_false(fires("30 0 3 * * *", 2025, 6, 10, 3, 0, 0));
    assert_true(fires("30 0 3 * * *", 2025, 6, 10, 3, 0, 30));
}

static void test_five_fields_fire_only_at_second_zero(void **state)
{
    (void)state;
    cron_expr c = parse_ok("0 3 * * *");
    assert_false(c.has_seconds);
    assert_true(c.seconds == 1);
    assert_false(fires("0 3 * * *", 2025, 6, 10, 3, 0, 30));
}

/* ---- macros -------------------------------------------------------------------- */

static void test_yearly_and_annually_mean_midnight_january_first(void **state)
{
    (void)state;
    assert_same_expr("@yearly", "0 0 1 1 *");
    assert_same_expr("@annually", "0 0 1 1 *");
}

static void test_monthly_means_midnight_on_the_first(void **state)
{
    (void)state;
    assert_same_expr("@monthly", "0 0 1 * *");
}

static void test_weekly_means_midnight_on_sunday(void **state)
{
    (void)state;
    assert_same_expr("@weekly", "0 0 * * 0");
}

static void test_daily_and_midnight_mean_every_midnight(void **state)
{
    (void)state;
    assert_same_expr("@daily", "0 0 * * *");
    assert_same_expr("@midnight", "0 0 * * *");
}

static void test_hourly_means_minute_zero(void **state)
{
    (void)state;
    assert_same_expr("@hourly", "0 * * * *");
}

static void test_macros_are_case_insensitive(void **state)
{
    (void)state;
    assert_same_expr("@DAILY", "@daily");
    assert_same_expr("  @Hourly  ", "@hourly");
}

static void test_unknown_macro_is_named(void **state)
{
    (void)state;
    assert_rejected("@sometimes", "unknown macro @sometimes");
}

static void test_macro_followed_by_fields_is_rejected(void **state)
{
    (void)state;
    assert_rejected("@daily 5", "macro @daily takes no fields");
}

/* ---- errors -------------------------------------------------------------------- */

static void test_minute_61_is_out_of_range(void **state)
{
    (void)state;
    assert_rejected("61 * * * *", "minute 61 out of range 0-59");
}

static void test_out_of_range_names_each_field(void **state)
{
    (void)state;
    assert_rejected("60 * * * * *", "second 60 out of range 0-59");
    assert_rejected("60 * * * *", "minute 60 out of range 0-59");
    assert_rejected("0 24 * * *", "hour 24 out of range 0-23");
    assert_rejected("0 0 0 * *", "day-of-month 0 out of range 1-31");
    assert_rejected("0 0 32 * *", "day-of-month 32 out of range 1-31");
    assert_rejected("0 0 * 0 *", "month 0 out of range 1-12");
    assert_rejected("0 0 * 13 *", "month 13 out of range 1-12");
    assert_rejected("0 0 * * 8", "day-of-week 8 out of range 0-7");
}

static void test_out_of_range_is_checked_in_ranges_and_lists(void **state)
{
    (void)state;
    assert_rejected("0 0 1-40 * *", "day-of-month 40 out of range 1-31");
    assert_rejected("0 0,25 * * *", "hour 25 out of range 0-23");
    assert_rejected("99999999999 * * * *", "minute 99999999999 out of range 0-59");
}

static void test_unknown_day_name_is_not_a_number_or_name(void **state)
{
    (void)state;
    assert_rejected("0 0 * * FOO", "day-of-week \"FOO\": not a number or name");
    assert_rejected("0 0 * * MONDAY", "day-of-week \"MONDAY\": not a number or name");
}

static void test_unknown_month_name_is_not_a_number_or_name(void **state)
{
    (void)state;
    assert_rejected("0 0 * FOO *", "month \"FOO\": not a number or name");
    assert_rejected("0 0 * MON *", "month \"MON\": not a number or name");
}

static void test_numeric_field_rejects_words(void **state)
{
    (void)state;
    assert_rejected("x * * * *", "minute \"x\": not a number");
    assert_rejected("0 MON * * *", "hour \"MON\": not a number");
    assert_rejected("0 0 L * *", "day-of-month \"L\": not a number");
}

static void test_step_zero_must_be_at_least_one(void **state)
{
    (void)state;
    assert_rejected("0 */0 * * *", "hour step 0 must be at least 1");
}

static void test_step_must_be_a_number(void **state)
{
    (void)state;
    assert_rejected("*/x * * * *", "minute step \"x\": not a number");
    assert_rejected("*/ * * * *", "minute step missing in \"*/\"");
}

static void test_reversed_range_is_named(void **state)
{
    (void)state;
    assert_rejected("0 0 * 12-3 *", "month range 12-3 is reversed");
    assert_rejected("0 0 * * FRI-MON", "day-of-week range FRI-MON is reversed");
}

static void test_missing_values_quote_the_field(void **state)
{
    (void)state;
    assert_rejected("1,,2 * * * *", "minute value missing in \"1,,2\"");
    assert_rejected("1- * * * *", "minute value missing in \"1-\"");
    assert_rejected("-1 * * * *", "minute value missing in \"-1\"");
}

static void test_seven_fields_are_rejected_with_count(void **state)
{
    (void)state;
    assert_rejected("0 0 0 * * * 2025", "expected 5 or 6 fields, got 7");
}

static void test_error_fits_the_buffer_and_leaves_output_untouched(void **state)
{
    (void)state;
    cron_expr c = parse_ok("0 3 * * *"), before = c;
    char err[8];
    memset(err, 'x', sizeof err);
    assert_int_equal(cron_parse("61 * * * *", &c, err, sizeof err), -1);
    assert_string_equal(err, "minute ");
    assert_expr_equal(&c, &before);
    assert_int_equal(cron_parse("61 * * * *", &c, NULL, 0), -1);
}

static void test_error_quotes_long_tokens_briefly(void **state)
{
    (void)state;
    char text[300], err[256];
    cron_expr c;
    memset(text, 'z', 200);
    strcpy(text + 200, " * * * *");
    assert_int_equal(cron_parse(text, &c, err, sizeof err), -1);
    assert_true(strlen(err) < 80);
    assert_null(strchr(err, '\n'));
}

/* ---- next firing time ------------------------------------------------------------ */

static void test_next_is_strictly_after(void **state)
{
    (void)state;
    assert_int_equal(next_after("0 3 * * *", local(2025, 6, 10, 2, 59, 59)),
                     local(2025, 6, 10, 3, 0, 0));
    assert_int_equal(next_after("0 3 * * *", local(2025, 6, 10, 3, 0, 0)),
                     local(2025, 6, 11, 3, 0, 0));
}

static void test_next_every_second_is_one_second_later(void **state)
{
    (void)state;
    time_t t = local(2025, 6, 10, 12, 34, 56);
    assert_int_equal(next_after("* * * * * *", t), t + 1);
}

static void test_next_honours_seconds(void **state)
{
    (void)state;
    assert_int_equal(next_after("*/10 * * * * *", local(2025, 6, 10, 12, 0, 5)),
                     local(2025, 6, 10, 12, 0, 10));
    assert_int_equal(next_after("30 0 3 * * *", local(2025, 6, 10, 3, 0, 0)),
                     local(2025, 6, 10, 3, 0, 30));
}

static void test_next_crosses_month_boundary(void **state)
{
    (void)state;
    assert_int_equal(next_after("0 0 1 * *", local(2025, 1, 31, 12, 0, 0)),
                     local(2025, 2, 1, 0, 0, 0));
    /* No 31st in February: skip to March. */
    assert_int_equal(next_after("0 12 31 * *", local(2025, 1, 31, 12, 0, 0)),
                     local(2025, 3, 31, 12, 0, 0));
}

static void test_next_crosses_year_boundary(void **state)
{
    (void)state;
    assert_int_equal(next_after("@yearly", local(2025, 12, 31, 23, 59, 59)),
                     local(2026, 1, 1, 0, 0, 0));
    assert_int_equal(next_after("59 23 31 12 *", local(2025, 12, 31, 23, 59, 0)),
                     local(2026, 12, 31, 23, 59, 0));
}

static void test_next_finds_friday_the_13th(void **state)
{
    (void)state;
    assert_int_equal(next_after("0 0 13 * FRI", local(2025, 6, 14, 0, 0, 0)),
                     local(2026, 2, 13, 0, 0, 0));
}

static void test_next_finds_leap_day(void **state)
{
    (void)state;
    assert_int_equal(next_after("0 0 29 2 *", local(2025, 3, 1, 0, 0, 0)),
                     local(2028, 2, 29, 0, 0, 0));
}

static void test_next_leap_day_beyond_five_years_is_none(void **state)
{
    (void)state;
    /* 2100 is not a leap year; the next Feb 29 is 2104. */
    assert_int_equal(next_after("0 0 29 2 *", local(2096, 3, 1, 0, 0, 0)), (time_t)-1);
}

static void test_next_impossible_date_is_none(void **state)
{
    (void)state;
    time_t t = local(2025, 6, 10, 0, 0, 0);
    assert_int_equal(next_after("0 0 30 2 *", t), (time_t)-1);
    assert_int_equal(next_after("0 0 31 4,6,9,11 *", t), (time_t)-1);
}

static void test_next_gives_up_quickly_on_impossible_dates(void **state)
{
    (void)state;
    /* Second-by-second scanning would take ~1.5e8 steps per call. */
    cron_expr c = parse_ok("* * * 30 2 *");
    clock_t start = clock();
    for (int i = 0; i < 100; i++)
        assert_int_equal(cron_next(&c, local(2025, 6, 10, 0, 0, 0)), (time_t)-1);
    assert_true((double)(clock() - start) / CLOCKS_PER_SEC < 2.0);
}

static void test_next_spring_forward_gap_time_runs_after_the_jump(void **state)
{
    (void)state;
    /* 2025-03-09 02:30 does not exist in New York; it re-normalises to 03:30 EDT. */
    assert_int_equal(next_after("0 30 2 * * *", utc(2025, 3, 9, 5, 0, 0)),
                     utc(2025, 3, 9, 7, 30, 0));
    /* ...and the day after, 02:30 EDT exists again. */
    assert_int_equal(next_after("0 30 2 * * *", utc(2025, 3, 9, 7, 30, 0)),
                     utc(2025, 3, 10, 6, 30, 0));
}

static void test_next_fall_back_repeated_time_fires_once(void **state)
{
    (void)state;
    /* 2025-11-02 01:30 happens at 05:30Z (EDT) and again at 06:30Z (EST). */
    assert_int_equal(next_after("0 30 1 * * *", utc(2025, 11, 2, 5, 0, 0)),
                     utc(2025, 11, 2, 5, 30, 0));
    assert_int_equal(next_after("0 30 1 * * *", utc(2025, 11, 2, 5, 30, 0)),
                     utc(2025, 11, 3, 6, 30, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_daily_at_three_is_valid_and_fires_at_0300_only),
        cmocka_unit_test(test_four_fields_are_rejected_with_count),
        cmocka_unit_test(test_empty_expression_is_rejected),

        cmocka_unit_test(test_star_fires_every_minute),
        cmocka_unit_test(test_range_includes_both_ends_and_nothing_outside),
        cmocka_unit_test(test_list_fires_on_each_listed_value_only),
        cmocka_unit_test(test_star_step_takes_every_nth_from_field_start),
        cmocka_unit_test(test_range_step_takes_every_nth_within_range),
        cmocka_unit_test(test_start_step_runs_to_field_max_without_wrapping),
        cmocka_unit_test(test_list_mixes_values_ranges_and_steps),
        cmocka_unit_test(test_question_mark_means_the_same_as_star),
        cmocka_unit_test(test_month_names_are_case_insensitive),
        cmocka_unit_test(test_day_names_are_case_insensitive),
        cmocka_unit_test(test_mon_fri_range_covers_weekdays_only),
        cmocka_unit_test(test_name_ranges_take_steps_and_month_names),
        cmocka_unit_test(test_day_range_may_end_on_sunday),
        cmocka_unit_test(test_zero_and_seven_are_both_sunday),
        cmocka_unit_test(test_day_of_month_and_day_of_week_must_both_match),
        cmocka_unit_test(test_matching_ignores_out_of_range_times),

        cmocka_unit_test(test_six_fields_put_seconds_first),
        cmocka_unit_test(test_six_fields_with_nonzero_seconds_skip_the_whole_minute),
        cmocka_unit_test(test_five_fields_fire_only_at_second_zero),

        cmocka_unit_test(test_yearly_and_annually_mean_midnight_january_first),
        cmocka_unit_test(test_monthly_means_midnight_on_the_first),
        cmocka_unit_test(test_weekly_means_midnight_on_sunday),
        cmocka_unit_test(test_daily_and_midnight_mean_every_midnight),
        cmocka_unit_test(test_hourly_means_minute_zero),
        cmocka_unit_test(test_macros_are_case_insensitive),
        cmocka_unit_test(test_unknown_macro_is_named),
        cmocka_unit_test(test_macro_followed_by_fields_is_rejected),

        cmocka_unit_test(test_minute_61_is_out_of_range),
        cmocka_unit_test(test_out_of_range_names_each_field),
        cmocka_unit_test(test_out_of_range_is_checked_in_ranges_and_lists),
        cmocka_unit_test(test_unknown_day_name_is_not_a_number_or_name),
        cmocka_unit_test(test_unknown_month_name_is_not_a_number_or_name),
        cmocka_unit_test(test_numeric_field_rejects_words),
        cmocka_unit_test(test_step_zero_must_be_at_least_one),
        cmocka_unit_test(test_step_must_be_a_number),
        cmocka_unit_test(test_reversed_range_is_named),
        cmocka_unit_test(test_missing_values_quote_the_field),
        cmocka_unit_test(test_seven_fields_are_rejected_with_count),
        cmocka_unit_test(test_error_fits_the_buffer_and_leaves_output_untouched),
        cmocka_unit_test(test_error_quotes_long_tokens_briefly),

        cmocka_unit_test(test_next_is_strictly_after),
        cmocka_unit_test(test_next_every_second_is_one_second_later),
        cmocka_unit_test(test_next_honours_seconds),
        cmocka_unit_test(test_next_crosses_month_boundary),
        cmocka_unit_test(test_next_crosses_year_boundary),
        cmocka_unit_test(test_next_finds_friday_the_13th),
        cmocka_unit_test(test_next_finds_leap_day),
        cmocka_unit_test(test_next_leap_day_beyond_five_years_is_none),
        cmocka_unit_test(test_next_impossible_date_is_none),
        cmocka_unit_test(test_next_gives_up_quickly_on_impossible_dates),
        cmocka_unit_test_setup_teardown(test_next_spring_forward_gap_time_runs_after_the_jump,
                                        use_new_york, use_utc),
        cmocka_unit_test_setup_teardown(test_next_fall_back_repeated_time_fires_once, use_new_york,
                                        use_utc),
    };
    return cmocka_run_group_tests(tests, use_utc, NULL);
}
