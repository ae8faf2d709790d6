/*
 * daemon_internal — the state of one oopsd server, private to the daemon's
 * files (src/runtime/daemon*.c; daemon.h stays the contract for oopsd.c):
 * server_state, and what the lifecycle (daemon.c) lends the other files.
 *
 * The daemon's files, each one concept, and what of server_state each writes
 * (every file reads what it needs):
 *   daemon.c          the process's life: start, signals, drain, teardown,
 *                     `--check`, `oopsd lua`; ctx and o (ctx's connections
 *                     excepted), loop, engine, the signals and the drain
 *                     timer, the tick timer's start and stop, policy_hash,
 *                     draining, drain_deadline, exit_code, name_lock's text,
 *                     the listener's close (http = NULL)
 *   daemon_notify.c   systemd's notify protocol and watchdog: watchdog
 *   daemon_connect.c  the connections at start: ctx.calls (work, pool,
 *                     lanes), ctx.locks, the name lock, the server row,
 *                     schema_waiting (schema_checked, schema_logged) when
 *                     the schema is older
 *   daemon_tick.c     the periodic tick: last_heartbeat, pub_health,
 *                     pub_hash, schema_*, tick_*, own_*, exit_code when it
 *                     stops the server
 *   daemon_http.c     the HTTP listener and its routes: http, http_users,
 *                     http_hosts, http_host_refused
 *   daemon_actions.c  the page's actions (POST /api/...): nothing of its own
 *   daemon_metrics.c  /metrics and every metric's description: ctx's
 *                     metrics_read_ms and the gauges read at a scrape
 *   daemon_privs.c    what children inherit (--run-as, the database
 *                     settings scrubbed from the environment): no state here
 */
#ifndef OOPS_DAEMON_INTERNAL_H
#define OOPS_DAEMON_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "ctx.h"
#include "daemon.h"
#include "http_server.h"
#include "web.h"

typedef struct server_state {
    oops_ctx ctx;
    uv_loop_t loop;
    daemon_options o;
    int engine; /* registry ref of require("oops.engine") */
    http_server *http;
    uv_signal_t sighup, sigterm, sigint, sigquit;
    uv_signal_t ignored[8]; /* IGNORED_SIGNALS: logged, nothing else */
    uv_timer_t tick, drain;
    uv_timer_t watchdog;  /* WATCHDOG=1 at half systemd's WatchdogSec, while it is asked for */
    char policy_hash[40]; /* the running policy's version_hash (FNV-1a 64, hex) */
    uint64_t last_heartbeat, drain_deadline;
    bool draining;
    int exit_code;
    char name_lock[96];
    char pub_health[160], pub_hash[40]; /* what the last heartbeat published */
    /* Who may read and act over HTTP: --http-users (re-read on SIGHUP), or
     * --http-token-file's token as one viewer; NULL: no token asked (a
     * loopback listener, read-only). */
    web_users *http_users;

    /* What a request's Host may name (web_host_allowed), and how many
     * requests were refused for theirs (421, 400). */
    web_hosts http_hosts;
    uint64_t http_host_refused;
    /* The database's schema is older than this oopsd's and this account may
     * not migrate it: nothing is driven until `oopsctl migrate` (schema_poll). */
    bool schema_waiting;
    uint64_t schema_checked, schema_logged;
    /* The periodic tick runs its database work in two fibers: on the lock
     * session (tick_work: validation and reconnects, the name lock), and on
     * the server's own connection when something is due there (own_work: the
     * heartbeat, the schema poll), each taking its lane; what they found is
     * acted on back on the loop (tick_done, own_done). */
    bool tick_running, own_running;
    int tick_ev;         /* lock_registry_tick's result */
    char tick_err[512];  /* its message */
    bool tick_heartbeat; /* a heartbeat is due */
    bool tick_schema;    /* the schema poll is due */
    int tick_schema_cur; /* what it read (-1: could not) */
    char own_err[512];   /* the schema poll's message */
} server_state;

/* ---- lent by daemon.c --------------------------------------------------- */

/* Push engine[fn]; returns false (nothing pushed) when the engine lacks it. */
bool daemon_engine_fn(server_state *d, const char *fn);

/* engine[fn]() when the engine has it; an error is logged (runtime_call). */
void daemon_engine_call0(server_state *d, const char *fn);

/* Why /healthz says 503, or NULL when it says 200 (also what the heartbeat
 * publishes in the server table for the fleet page). */
const char *daemon_health_reason(server_state *d);

/* A database call of the daemon's own (no task's): fn(d, conn, arg) runs on
 * `lane` without making the loop wait (conn: the connection a WORK call was
 * given, pool or own; unset for LOCK); the call is freed when over. Returns
 * false, nothing submitted, when out of memory. */
bool daemon_call(server_state *d, db_call_lane lane,
                 void (*fn)(server_state *d, db_conn *conn, uint64_t arg), uint64_t arg);

/* Stop: no new tick, the engine told, sleepers woken, in-flight steps given
 * up to --drain ms, then every lock released and the loop stopped. Once
 * only; `why` is logged and sent as STATUS=. */
void daemon_begin_shutdown(server_state *d, const char *why);

#endif
