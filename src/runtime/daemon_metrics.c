/*
 * daemon_metrics — /metrics: every metric's description (its type and the
 * help text Prometheus shows, once at start) and the gauges read from the
 * server's parts at each scrape.
 */
#include "daemon_metrics.h"

#include "buf.h"
#include "lock_names.h"
#include "oops_version.h"
#include "runtime.h"

void daemon_describe_metrics(metrics *m)
{
    metrics_describe(m, "oops_lock_session_up", METRIC_GAUGE, "1 when the lock session is up");
    metrics_describe(m, "oops_lock_reconnects_total", METRIC_COUNTER,
                     "lock session reconnects after a loss");
    metrics_describe(m, "oops_lock_session_losses_total", METRIC_COUNTER,
                     "times the lock session was lost");
    metrics_describe(m, "oops_locks_held", METRIC_GAUGE, "named locks held by this server");
    metrics_describe(m, "oops_audit_write_failures_total", METRIC_COUNTER,
                     "operators' answers from the page whose audit row could not be written");
    metrics_add(m, "oops_audit_write_failures_total", "", 0);
    metrics_describe(m, "oops_scan_runs_total", METRIC_COUNTER, "scan ticks run");
    metrics_describe(m, "oops_scan_backlog_ticks_total", METRIC_COUNTER,
                     "scan ticks that took a full share of new pipelines with more free, each "
                     "followed by the next at once");
    metrics_describe(m, "oops_db_batches_total", METRIC_COUNTER,
                     "batches of database calls run, on the server's own connection or the "
                     "pool's");
    metrics_add(m, "oops_db_batches_total", "conn=\"own\"", 0);
    metrics_add(m, "oops_db_batches_total", "conn=\"pool\"", 0);
    metrics_describe(m, "oops_scan_errors_total", METRIC_COUNTER,
                     "scan ticks that raised an error");
    metrics_describe(m, "oops_scan_duration_seconds", METRIC_HISTOGRAM, "scan tick durations");
    metrics_describe(m, "oops_transitions_total", METRIC_COUNTER,
                     "pipeline transitions made, by target status");
    metrics_describe(m, "oops_transition_batches_total", METRIC_COUNTER,
                     "transactions that made two transitions or more at once");
    metrics_describe(m, "oops_transition_batched_total", METRIC_COUNTER,
                     "transitions asked for in those transactions");
    metrics_describe(m, "oops_db_insert_statements_total", METRIC_COUNTER,
                     "statements sent for oops.db.insert rows, by table");
    metrics_describe(m, "oops_db_insert_batches_total", METRIC_COUNTER,
                     "oops.db.insert batches of two rows or more");
    metrics_describe(m, "oops_db_insert_batched_total", METRIC_COUNTER, "rows in those batches");
    metrics_describe(m, "oops_db_lookup_statements_total", METRIC_COUNTER,
                     "statements sent for oops.db.lookup calls, by table");
    metrics_describe(m, "oops_db_lookup_batches_total", METRIC_COUNTER,
                     "oops.db.lookup batches of two calls or more");
    metrics_describe(m, "oops_db_lookup_batched_total", METRIC_COUNTER, "calls in those batches");
    metrics_describe(m, "oops_policy_reloads_total", METRIC_COUNTER, "policy reloads by result");
    metrics_describe(m, "oops_policy_version", METRIC_GAUGE, "successful policy loads");
    metrics_describe(m, "oops_policy_stale", METRIC_GAUGE, "1 when the last reload failed");
    metrics_describe(m, "oops_tasks", METRIC_GAUGE, "live Lua tasks");
    metrics_describe(m, "oops_alert_probes_total", METRIC_COUNTER,
                     "alert probes by result (firing, clear, error)");
    metrics_describe(m, "oops_alert_edges_total", METRIC_COUNTER,
                     "alert edges announced (FIRING, REPEAT, RESOLVED)");
    metrics_describe(m, "oops_restarts_total", METRIC_COUNTER,
                     "restart occurrences by result (ok, failed, missed)");
    metrics_describe(m, "oops_notifications_delivered_total", METRIC_COUNTER,
                     "notifications delivered, by route");
    metrics_describe(m, "oops_notification_failures_total", METRIC_COUNTER,
                     "failed delivery attempts, by route");
    metrics_describe(m, "oops_notifications_undeliverable_total", METRIC_COUNTER,
                     "outbox rows whose message could not be built");
    metrics_describe(m, "oops_db_round_trips_total", METRIC_COUNTER,
                     "statements and prepares sent, per connection");
    metrics_describe(m, "oops_db_connections_lent", METRIC_GAUGE,
                     "work connections of the pool lent to tasks now");
    metrics_describe(m, "oops_db_connections_open", METRIC_GAUGE,
                     "work connections of the pool open now (the lock session and the server's "
                     "own work connection come on top)");
    metrics_describe(m, "oops_db_calls_waiting", METRIC_GAUGE,
                     "database calls waiting for a work connection or the lock session");
    metrics_describe(m, "oops_lock_acquire_statements_total", METRIC_COUNTER,
                     "GET_LOCK statements sent by scans");
    metrics_describe(m, "oops_lock_acquire_batches_total", METRIC_COUNTER,
                     "scan ticks that asked for new locks");
    metrics_describe(m, "oops_http_connections", METRIC_GAUGE, "HTTP connections open now");
    metrics_describe(
        m, "oops_http_connections_total", METRIC_COUNTER,
        "HTTP connections by what the limits did: accepted, evicted (closed at the cap to make "
        "room), "
        "refused (closed at once, the cap full of requests), timed_out (a deadline passed)");
    metrics_describe(m, "oops_http_host_refused_total", METRIC_COUNTER,
                     "HTTP requests refused for their Host header: 421, not one this server "
                     "answers for (DNS rebinding; --http-host adds names), or 400, none in an "
                     "HTTP/1.1 request");
    metrics_describe(m, "oops_build_info", METRIC_GAUGE,
                     "1, labelled with this oopsd's version and commit (git describe)");
    const char *const build_labels[] = {"version", OOPS_VERSION, "commit", OOPS_COMMIT, NULL};
    buf build = {0};
    metrics_labels(&build, build_labels);
    metrics_set(m, "oops_build_info", build.p ? build.p : "", 1);
    buf_free(&build);
    metrics_add(m, "oops_policy_reloads_total", "result=\"ok\"", 0);
    metrics_add(m, "oops_policy_reloads_total", "result=\"failed\"", 0);
}

void daemon_prom_metrics(server_state *d, http_response *out)
{
    d->ctx.metrics_read_ms = uv_now(&d->loop); /* the stats scan reads the database for it */
    metrics *m = d->ctx.metrics;
    lock_registry *r = d->ctx.locks;
    metrics_set(m, "oops_lock_session_up", "", lock_registry_is_up(r));
    metrics_set(m, "oops_lock_reconnects_total", "", (double)lock_registry_reconnects(r));
    char **names;
    size_t n = lock_registry_held(r, &names);
    lock_names_free(names, n);
    metrics_set(m, "oops_locks_held", "", (double)n);
    metrics_set(m, "oops_policy_version", "", d->ctx.policy_version);
    metrics_set(m, "oops_policy_stale", "", d->ctx.policy_error != NULL);
    metrics_set(m, "oops_tasks", "", (double)runtime_task_count(d->ctx.rt));
    metrics_set(
        m, "oops_db_round_trips_total", "conn=\"work\"",
        (double)(db_round_trips(d->ctx.calls.work) + db_pool_round_trips(d->ctx.calls.pool)));
    metrics_set(m, "oops_db_connections_lent", "", (double)db_pool_lent(d->ctx.calls.pool));
    metrics_set(m, "oops_db_connections_open", "", (double)db_pool_open(d->ctx.calls.pool));
    metrics_set(m, "oops_db_calls_waiting", "",
                (double)(db_pool_waiting(d->ctx.calls.pool) + db_pool_waiting(d->ctx.calls.lane)));
    metrics_set(m, "oops_db_round_trips_total", "conn=\"locks\"",
                (double)lock_registry_round_trips(r));
    http_server_stats hs = http_server_get_stats(d->http);
    metrics_set(m, "oops_http_connections", "", hs.open);
    metrics_set(m, "oops_http_connections_total", "result=\"accepted\"", (double)hs.accepted);
    metrics_set(m, "oops_http_connections_total", "result=\"evicted\"", (double)hs.evicted);
    metrics_set(m, "oops_http_connections_total", "result=\"refused\"", (double)hs.refused);
    metrics_set(m, "oops_http_connections_total", "result=\"timed_out\"", (double)hs.timed_out);
    metrics_set(m, "oops_http_host_refused_total", "", (double)d->http_host_refused);
    buf b = {0};
    metrics_render(m, &b);
    out->status = 200;
    out->content_type = "text/plain; version=0.0.4; charset=utf-8";
    out->len = b.len;
    out->body = buf_take(&b);
}
