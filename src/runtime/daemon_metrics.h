/*
 * daemon_metrics — /metrics: every metric's description, and the gauges
 * read at each scrape.
 */
#ifndef OOPS_DAEMON_METRICS_H
#define OOPS_DAEMON_METRICS_H

#include "daemon_internal.h"

/* Every metric oopsd exports described in m (type, help), and the ones that
 * must show before their first event set to 0 (oops_build_info to 1). */
void daemon_describe_metrics(metrics *m);

/* GET /metrics: the gauges read now, everything rendered as Prometheus text. */
void daemon_prom_metrics(server_state *d, http_response *out);

#endif
