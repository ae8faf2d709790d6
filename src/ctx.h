/*
 * ctx — what the daemon owns and the Lua bindings reach: the loop, the
 * connections, the lock registry, counters and policy state. It lives in C
 * so that it outlives any policy reload; Lua holds no pointer it could free.
 */
#ifndef OOPS_CTX_H
#define OOPS_CTX_H

#include <stdbool.h>
#include <uv.h>

#include "db.h"
#include "db_calls.h"
#include "http_client.h"
#include "lock_registry.h"
#include "metrics.h"

struct runtime;

typedef struct oops_ctx {
    uv_loop_t *loop;
    char server_name[65];
    db_config dbcfg; /* valid when have_db */
    bool have_db;
    db_calls calls;       /* database calls (db_calls.h): `calls.work` is the work connection,
                             NULL until connected (start-up, shutdown, calls made outside a
                             task); `calls.pool` the work connections tasks borrow (the daemon;
                             NULL elsewhere: then every call blocks on `work`);
                             `calls.lane` one statement at a time on the lock session */
    lock_registry *locks; /* the lock session, NULL until connected */
    http_client *http;    /* created lazily by the HTTP binding */
    metrics *metrics;
    struct runtime *rt;
    bool stopping;            /* SIGTERM/SIGINT received: no new ticks */
    uint64_t metrics_read_ms; /* uv_now when /metrics was last served (0: never) */
    bool closing; /* the process tears down (daemon.c's teardown): no new HTTP client, no child */
    bool daemon;  /* the serving daemon (not --check, oopsd lua or oopsctl):
                      holds the database secret, so stricter rules apply */
    /* policy state, for /healthz and /status */
    bool policy_loaded;
    int policy_version; /* successful loads so far */
    char *policy_error; /* last failed reload's errors, NULL when the running policy is current */
    char policy_dir[1024];
    /* The daemon's answer to a deferred HTTP request (an operator's action
     * from the page, oops.http_answer): 0, or -1 when it is gone (answered,
     * timed out). NULL outside the daemon. body is copied. */
    int (*http_answer)(void *ud, uint64_t ticket, int status, const char *body, size_t len);
    void *http_answer_ud;
} oops_ctx;

#endif
