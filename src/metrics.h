/*
 * metrics — counters, gauges, summaries and histograms kept by the daemon (in
 * C, so they outlive a policy reload), rendered in the Prometheus text format.
 * A series is a metric name plus a label string in Prometheus syntax
 * ("scan=\"build\""), or "" for none.
 *
 * A histogram NAME is described as METRIC_HISTOGRAM; metrics_observe keeps its
 * _sum and _count, and its caller keeps the cumulative buckets as the counter
 * series NAME_bucket{...,le="BOUND"} (metrics_add), which are rendered inside
 * NAME's family, under no header of their own.
 */
#ifndef OOPS_METRICS_H
#define OOPS_METRICS_H

#include "buf.h"

typedef enum { METRIC_COUNTER, METRIC_GAUGE, METRIC_SUMMARY, METRIC_HISTOGRAM } metric_kind;

typedef struct metrics metrics;

metrics *metrics_new(void);
void metrics_free(metrics *m);
/* Declare a metric's kind and help text (optional; undeclared = counter / gauge by use). */
void metrics_describe(metrics *m, const char *name, metric_kind kind, const char *help);
void metrics_add(metrics *m, const char *name, const char *labels, double v); /* counter += v */
void metrics_set(metrics *m, const char *name, const char *labels, double v); /* gauge = v */
void metrics_observe(metrics *m, const char *name, const char *labels,
                     double v); /* summary, histogram: _sum += v, _count++ */
double metrics_get(const metrics *m, const char *name, const char *labels);
/* Append the exposition text. */
void metrics_render(const metrics *m, buf *out);
/* Render a label string from key/value pairs (NULL-terminated), escaping values. */
void metrics_labels(buf *out, const char *const *kv);

#endif
