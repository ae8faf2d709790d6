/* metrics: counters, gauges and summaries, rendered as Prometheus text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

static char *render(const metrics *m)
{
    buf b = {0};
    metrics_render(m, &b);
    return buf_take(&b);
}

static char *labels(const char *const *kv)
{
    buf b = {0};
    metrics_labels(&b, kv);
    return buf_take(&b);
}

static void counters_add_up(void **state)
{
    (void)state;
    metrics *m = metrics_new();
    assert_non_null(m);
    assert_true(metrics_get(m, "oops_x_total", "") == 0); /* unknown series: 0 */
    metrics_add(m, "oops_x_total", "", 1);
    metrics_add(m, "oops_x_total", NULL, 2); /* NULL labels are "" */
    metrics_add(m, "oops_x_total", "", 0.5);
    assert_true(metrics_get(m, "oops_x_total", "") == 3.5);
    assert_true(metrics_get(m, "oops_x_total", NULL) == 3.5);
    /* Another label set is another series. */
    metrics_add(m, "oops_x_total", "scan=\"build\"", 4);
    assert_true(metrics_get(m, "oops_x_total", "scan=\"build\"") == 4);
    assert_true(metrics_get(m, "oops_x_total", "") == 3.5);
    assert_true(metrics_get(m, "oops_x_total", "scan=\"rollout\"") == 0);
    assert_true(metrics_get(m, "oops_y_total", "") == 0);
    metrics_free(m);
    metrics_free(NULL); /* harmless */
}

static void gauges_take_the_last_value(void **state)
{
    (void)state;
    metrics *m = metrics_new();
    metrics_set(m, "oops_locks_held", "", 5);
    metrics_set(m, "oops_locks_held", "", 2);
    assert_true(metrics_get(m, "oops_locks_held", "") == 2);
    metrics_set(m, "oops_locks_held", "", -1.25);
    assert_true(metrics_get(m, "oops_locks_held", "") == -1.25);
    metrics_set(m, "oops_locks_held", "", 0);
    assert_true(metrics_get(m, "oops_locks_held", "") == 0);
    char *t = render(m);
    assert_string_equal(t, "# TYPE oops_locks_held gauge\noops_locks_held 0\n");
    free(t);
    metrics_free(m);
}

static void summaries_keep_sum_and_count(void **state)
{
    (void)state;
    metrics *m = metrics_new();
    metrics_observe(m, "oops_scan_duration_seconds", "scan=\"build\"", 0.25);
    metrics_observe(m, "oops_scan_duration_seconds", "scan=\"build\"", 1.5);
    metrics_observe(m, "oops_scan_duration_seconds", "scan=\"build\"", 0.25);
    /* metrics_get of a summary is its count. */
    assert_true(metrics_get(m, "oops_scan_duration_seconds", "scan=\"build\"") == 3);
    char *t = render(m);
    assert_string_equal(t, "# TYPE oops_scan_duration_seconds summary\n"
                           "oops_scan_duration_seconds_sum{scan=\"build\"} 2\n"
                           "oops_scan_duration_seconds_count{scan=\"build\"} 3\n");
    free(t);
    metrics_free(m);
}

/* A histogram: _sum and _count from metrics_observe, its buckets the caller's
 * NAME_bucket counters, all in one family under one header. */
static void histograms_render_as_one_family(void **state)
{
    (void)state;
    metrics *m = metrics_new();
    metrics_describe(m, "oops_scan_duration_seconds", METRIC_HISTOGRAM, "scan tick durations");
    metrics_observe(m, "oops_scan_duration_seconds", "scan=\"build\"", 0.25);
    metrics_add(m, "oops_scan_duration_seconds_bucket", "le=\"0.5\",scan=\"build\"", 1);
    metrics_add(m, "oops_scan_duration_seconds_bucket", "le=\"+Inf\",scan=\"build\"", 1);
    metrics_add(m, "oops_scan_zzz_total", "", 1);
    assert_true(metrics_get(m, "oops_scan_duration_seconds", "scan=\"build\"") == 1);
    char *t = render(m);
    assert_string_equal(t, "# HELP oops_scan_duration_seconds scan tick durations\n"
                           "# TYPE oops_scan_duration_seconds histogram\n"
                           "oops_scan_duration_seconds_sum{scan=\"build\"} 0.25\n"
                           "oops_scan_duration_seconds_count{scan=\"build\"} 1\n"
                           "oops_scan_duration_seconds_bucket{le=\"+Inf\",scan=\"build\"} 1\n"
                           "oops_scan_duration_seconds_bucket{le=\"0.5\",scan=\"build\"} 1\n"
                           "# TYPE oops_scan_zzz_total counter\n"
                           "oops_scan_zzz_total 1\n");
    free(t);
    /* Without the histogram declared, NAME_bucket is a counter of its own. */
    metrics_free(m);
    m = metrics_new();
    metrics_add(m, "oops_x_bucket", "", 2);
    t = render(m);
    assert_string_equal(t, "# TYPE oops_x_bucket counter\noops_x_bucket 2\n");
    free(t);
    metrics_free(m);
}

/* The whole exposition: HELP and TYPE once per metric before its samples,
 * metrics by name and series by label string, a declared kind winning over
 * the kind of first use. */
static void render_is_prometheus_text(void **state)
{
    (void)state;
    metrics *m = metrics_new();
    metrics_describe(m, "oops_transitions_total", METRIC_COUNTER, "pipeline transitions made");
    metrics_describe(m, "oops_lock_session_up", METRIC_GAUGE, "1 when the lock session is up");
    metrics_describe(m, "oops_scan_duration_seconds", METRIC_SUMMARY, "scan tick durations");
    metrics_describe(m, "oops_declared_unused", METRIC_GAUGE, "never set: not rendered");
    metrics_add(m, "oops_transitions_total", "to=\"RUNNING\"", 2);
    metrics_add(m, "oops_transitions_total", "to=\"ERROR\"", 1);
    metrics_set(m, "oops_lock_session_up", "", 1);
    metrics_observe(m, "oops_scan_duration_seconds", "scan=\"rollout\"", 0.5);
    metrics_add(m, "oops_a_undeclared_total", "", 7);
    /* Declared a gauge, then first used with add (a counter's verb): the
     * declaration decides the kind. */
    metrics_describe(m, "oops_declared_gauge", METRIC_GAUGE, NULL);
    metrics_add(m, "oops_declared_gauge", "", 3);
    char *t = render(m);
    assert_string_equal(t, "# TYPE oops_a_undeclared_total counter\n"
                           "oops_a_undeclared_total 7\n"
                           "# TYPE oops_declared_gauge gauge\n"
                           "oops_declared_gauge 3\n"
                           "# HELP oops_lock_session_up 1 when the lock session is up\n"
                           "# TYPE oops_lock_session_up gauge\n"
                           "oops_lock_session_up 1\n"
                           "# HELP oops_scan_duration_seconds scan tick durations\n"
                           "# TYPE oops_scan_duration_seconds summary\n"
                           "oops_scan_duration_seconds_sum{scan=\"rollout\"} 0.5\n"
                           "oops_scan_duration_seconds_count{scan=\"rollout\"} 1\n"
                           "# HELP oops_transitions_total pipeline transitions made\n"
                           "# TYPE oops_transitions_total counter\n"
                           "oops_transitions_total{to=\"ERROR\"} 1\n"
                           "oops_transitions_total{to=\"RUNNING\"} 2\n");
    free(t);
    /* Describing again replaces the help text. */
    metrics_describe(m, "oops_lock_session_up", METRIC_GAUGE, "new help");
    t = render(m);
    assert_non_null(strstr(t, "# HELP oops_lock_session_up new help\n"));
    assert_null(strstr(t, "1 when the lock session is up"));
    free(t);
    metrics_free(m);
    /* Nothing recorded: nothing rendered. */
    m = metrics_new();
    t = render(m);
    assert_string_equal(t, "");
    free(t);
    metrics_free(m);
}

/* Every line of a busy registry is a comment or `name{labels} value` as the
 * text format defines them, and the value reads back exactly. */
static void every_line_parses(void **state)
{
    (void)state;
    metrics *m = metrics_new();
    char name[64], lab[128];
    for (int i = 0; i < 200; i++) { /* past every initial capacity */
        snprintf(name, sizeof name, "oops_m%d_total", i % 7);
        const char *kv[] = {"scan", i % 2 ? "build" : "roll\"out", "n", NULL, NULL};
        char v[16];
        snprintf(v, sizeof v, "%d", i);
        kv[3] = v;
        buf lb = {0};
        metrics_labels(&lb, kv);
        snprintf(lab, sizeof lab, "%s", lb.p);
        buf_free(&lb);
        metrics_add(m, name, lab, i * 0.1);
        metrics_set(m, "oops_gauge", lab, 1e-7 * i);
        metrics_observe(m, "oops_summary", lab, 1e12 + i);
    }
    metrics_set(m, "oops_big", "", 123456789012.0);
    metrics_set(m, "oops_tiny", "", 0.1);
    char *t = render(m);
    regex_t type, sample;
    assert_int_equal(regcomp(&type,
                             "^# (TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (counter|gauge|summary)|HELP .*)$",
                             REG_EXTENDED | REG_NOSUB),
                     0);
    /* label values: any character but '"', '\' and newline, or an escape of one. */
    assert_int_equal(regcomp(&sample,
                             "^[a-zA-Z_:][a-zA-Z0-9_:]*"
                             "(\\{[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\\n]|\\\\[\"\\\\n])*\""
                             "(,[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\\n]|\\\\[\"\\\\n])*\")*\\})? "
                             "[-+]?[0-9.]+(e[-+]?[0-9]+)?$",
                             REG_EXTENDED | REG_NOSUB),
                     0);
    size_t samples = 0;
    for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') {
            if (regexec(&type, line, 0, NULL, 0) != 0)
                fail_msg("bad comment line: %s", line);
            continue;
        }
        if (regexec(&sample, line, 0, NULL, 0) != 0)
            fail_msg("bad sample line: %s", line);
        samples++;
        /* %.17g: the value parses back to the double it was. */
        if (strncmp(line, "oops_tiny ", 10) == 0)
            assert_true(strtod(line + 10, NULL) == 0.1);
        if (strncmp(line, "oops_big ", 9) == 0)
            assert_string_equal(line + 9, "123456789012");
    }
    /* 200 counter series (7 names x distinct labels), 200 gauges, 200 x 2 summary lines, 2. */
    assert_int_equal(samples, 200 + 200 + 400 + 2);
    regfree(&type);
    regfree(&sample);
    free(t);
    metrics_free(m);
}

static void label_strings_escape_values(void **state)
{
    (void)state;
    const char *one[] = {"scan", "build", NULL};
    char *l = labels(one);
    assert_string_equal(l, "scan=\"build\"");
    free(l);
    const char *two[] = {"app", "shop", "env", "prod", NULL};
    l = labels(two);
    assert_string_equal(l, "app=\"shop\",env=\"prod\"");
    free(l);
    /* '"', '\' and newline are escaped as the text format wants; the rest stays. */
    const char *nasty[] = {"v", "a\"b\\c\nd\te}", NULL};
    l = labels(nasty);
    assert_string_equal(l, "v=\"a\\\"b\\\\c\\nd\te}\"");
    free(l);
    const char *null_value[] = {"k", NULL, NULL}; /* NULL value: "" (and the list ends there) */
    l = labels(null_value);
    assert_string_equal(l, "k=\"\"");
    free(l);
    const char *empty[] = {NULL};
    l = labels(empty);
    assert_string_equal(l, "");
    free(l);
    l = labels(NULL);
    assert_string_equal(l, "");
    free(l);
    /* Appends to what the buffer holds. */
    buf b = {0};
    buf_puts(&b, "x{");
    metrics_labels(&b, one);
    buf_puts(&b, "}");
    assert_string_equal(b.p, "x{scan=\"build\"}");
    buf_free(&b);

    /* A label string from metrics_labels renders inside {...} as it is. */
    metrics *m = metrics_new();
    l = labels(nasty);
    metrics_add(m, "oops_odd_total", l, 1);
    assert_true(metrics_get(m, "oops_odd_total", l) == 1);
    free(l);
    char *t = render(m);
    assert_string_equal(
        t, "# TYPE oops_odd_total counter\noops_odd_total{v=\"a\\\"b\\\\c\\nd\te}\"} 1\n");
    free(t);
    metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(counters_add_up),
        cmocka_unit_test(gauges_take_the_last_value),
        cmocka_unit_test(summaries_keep_sum_and_count),
        cmocka_unit_test(histograms_render_as_one_family),
        cmocka_unit_test(render_is_prometheus_text),
        cmocka_unit_test(every_line_parses),
        cmocka_unit_test(label_strings_escape_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
