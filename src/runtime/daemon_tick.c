/*
 * daemon_tick — the daemon's periodic tick: the lock session's validation
 * and reconnects (a lost session logged, counted, its idle neighbours
 * closed), the heartbeat, the schema poll while waiting for `oopsctl
 * migrate`, and the pool's idle connections given back.
 */
#include "daemon_tick.h"

#include <stdio.h>
#include <string.h>

#include "daemon_connect.h"
#include "daemon_notify.h"
#include "db_fiber.h"
#include "log.h"
#include "oops_version.h"
#include "schema.h"

#define HEARTBEAT_MS 30000 /* the row also changes at once when health or policy does */
#define SCHEMA_POLL_MS 2000
#define SCHEMA_LOG_MS 60000

/* ---- the heartbeat and the schema poll ---------------------------------- */

/* Also publishes what the fleet page shows of this server (schema 9): its
 * health (what /healthz says: "ok" or why not), the policy it runs and its
 * version. A server waiting for `oopsctl migrate` has no such columns yet. */
static void heartbeat(server_state *d)
{
    char err[512];
    if (db_conn_ensure(d->ctx.calls.work, err, sizeof err))
        return;
    if (d->schema_waiting) {
        db_value p[] = {db_int((long long)lock_registry_connection_id(d->ctx.locks)),
                        db_text(d->ctx.server_name)};
        db_exec(d->ctx.calls.work,
                "UPDATE server SET last_seen = NOW(6), lock_connection_id = ? WHERE name = ?", p, 2,
                NULL, err, sizeof err);
        return;
    }
    db_value p[] = {db_int((long long)lock_registry_connection_id(d->ctx.locks)),
                    db_text(d->pub_health), db_text(d->pub_hash), db_text(OOPS_VERSION),
                    db_text(d->ctx.server_name)};
    db_exec(d->ctx.calls.work,
            "UPDATE server SET last_seen = NOW(6), lock_connection_id = ?, health = ?, "
            "policy_hash = ?, oopsd_version = ? WHERE name = ?",
            p, 5, NULL, err, sizeof err);
}

/* While waiting: has the schema reached this oopsd's version? Then start
 * driving. Newer (migrated by a newer oopsctl): refused as at start. `cur` is
 * what the tick read (-1: it could not). */
static void schema_poll(server_state *d, int cur, const char *err)
{
    if (cur > schema_latest()) {
        log_msg(LOG_ERROR, "database schema %d is newer than this oopsd (%d): upgrade oopsd", cur,
                schema_latest());
        d->exit_code = OOPSD_BAD_INPUT;
        daemon_begin_shutdown(d, "database schema newer than this oopsd");
    } else if (cur == schema_latest()) {
        d->schema_waiting = false;
        log_msg(LOG_INFO, "database schema %d reached: driving", cur);
        daemon_engine_call0(d, "start");
    } else if (uv_now(&d->loop) - d->schema_logged >= SCHEMA_LOG_MS) {
        d->schema_logged = uv_now(&d->loop);
        if (cur < 0)
            log_msg(LOG_WARN, "waiting for `oopsctl migrate`: reading the schema version: %s", err);
        else
            log_msg(LOG_WARN,
                    "waiting for `oopsctl migrate`: database schema %d is older than this oopsd "
                    "(%d); driving nothing",
                    cur, schema_latest());
    }
}

/* ---- the tick ------------------------------------------------------------ */

/* In a fiber, holding the lock lane: the lock session's part of the tick.
 * No Lua here. */
static void tick_work(void *arg)
{
    server_state *d = arg;
    uint64_t now = uv_now(&d->loop);
    d->tick_err[0] = '\0';
    d->tick_ev = lock_registry_tick(d->ctx.locks, now, d->tick_err, sizeof d->tick_err);
    if (d->tick_ev != LOCK_REFUSED && (d->tick_ev & LOCK_EV_RECONNECTED))
        daemon_take_name_lock(d);
}

/*
 * The lock session was lost: the database may have restarted, and then every
 * session opened before is dead too, though nothing says so until it is used.
 * The idle ones are closed now (each opens again at its next use), so that no
 * step of a pipeline meets a dead connection (a deploy's DEPLOYING ->
 * ROLLING_OUT claim failing there strands the pipeline until the deploy
 * timeout). A connection in use finds out by itself. After a cut or a
 * freeze, when the database did not restart, this costs a reconnect or two.
 */
static void forget_idle_sessions(server_state *d)
{
    db_pool_trim(d->ctx.calls.pool, 0);
    if (d->ctx.calls.work_lane && !db_pool_lent(d->ctx.calls.work_lane))
        db_conn_disconnect(d->ctx.calls.work);
}

/*
 * A reconnected lock session is named in the server row at once, on any work
 * connection (a WORK call: the own one when free, else the pool). The
 * heartbeat would do it on the own connection, but that waits behind the
 * watcher's parked GET_LOCK, up to a scan interval: meanwhile the server
 * drives pipelines under a session its row does not name, and readers that
 * join the two (the page's owner, `p:driver()` of the scenarios) see nobody
 * holding them (scenarios/watch_ring, "stopped": a thawed server took a
 * stopped one's pipelines 4 s and more before its row said so).
 */
static void name_session_run(server_state *d, db_conn *conn, uint64_t session)
{
    char err[512];
    db_value p[] = {db_int((long long)session), db_text(d->ctx.server_name)};
    if (db_exec(conn, "UPDATE server SET last_seen = NOW(6), lock_connection_id = ? WHERE name = ?",
                p, 2, NULL, err, sizeof err))
        log_msg(LOG_WARN, "naming the new lock session in the server row: %s", err);
}

/* Back on the loop: act on what the tick found. */
static void tick_done(void *arg)
{
    server_state *d = arg;
    db_pool_put(d->ctx.calls.lane, NULL);
    d->tick_running = false;
    int ev = d->tick_ev;
    if (ev == LOCK_REFUSED) {
        log_msg(LOG_ERROR, "%s", d->tick_err);
        d->exit_code = OOPSD_DB;
        daemon_begin_shutdown(d, "lock session refused");
        return;
    }
    if (ev & LOCK_EV_LOST) {
        log_msg(LOG_ERROR,
                "lock session lost: every lock is gone; driving nothing until reconnected");
        daemon_notify("STATUS=lock session lost: driving nothing until reconnected");
        metrics_add(d->ctx.metrics, "oops_lock_session_losses_total", "", 1);
        forget_idle_sessions(d);
    }
    if (ev & LOCK_EV_BUSY)
        log_msg(LOG_WARN, "%s", d->tick_err);
    if (ev & LOCK_EV_RECONNECTED) {
        log_msg(LOG_INFO, "lock session reconnected (connection %llu)",
                (unsigned long long)lock_registry_connection_id(d->ctx.locks));
        daemon_notify_status(d, "");
        d->last_heartbeat = 0; /* the whole row again at the next tick */
        daemon_call(d, DB_CALL_WORK, name_session_run,
                    lock_registry_connection_id(d->ctx.locks)); /* else the heartbeat does */
    }
}

static void tick_got_lane(db_conn *unused, void *arg)
{
    (void)unused;
    server_state *d = arg;
    if (db_fiber_run(&d->loop, tick_work, tick_done, d) != 0) {
        tick_work(d); /* no memory for a fiber: block rather than skip the lock session */
        tick_done(d);
    }
}

/* In a fiber, holding the work lane (the server's own connection, between
 * the engine's watch statements): the heartbeat and the schema poll. */
static void own_work(void *arg)
{
    server_state *d = arg;
    if (d->tick_heartbeat)
        heartbeat(d);
    if (d->tick_schema) {
        d->own_err[0] = '\0';
        d->tick_schema_cur = -1;
        if (db_conn_ensure(d->ctx.calls.work, d->own_err, sizeof d->own_err) == 0)
            d->tick_schema_cur = schema_current(d->ctx.calls.work, d->own_err, sizeof d->own_err);
        if (d->tick_schema_cur == schema_latest())
            daemon_register_server(d);
    }
}

static void own_done(void *arg)
{
    server_state *d = arg;
    db_pool_put(d->ctx.calls.work_lane, NULL);
    d->own_running = false;
    if (d->tick_schema && !d->draining)
        schema_poll(d, d->tick_schema_cur, d->own_err);
}

static void own_got_lane(db_conn *unused, void *arg)
{
    (void)unused;
    server_state *d = arg;
    if (db_fiber_run(&d->loop, own_work, own_done, d) != 0) {
        own_work(d);
        own_done(d);
    }
}

/* Pool connections idle for DB_POOL_IDLE_MS go back to the database; a busy
 * period of the pool is logged once as it begins and once as it ends. */
static void trim_pool(server_state *d)
{
    char msg[256];
    db_pool_trim(d->ctx.calls.pool, DB_POOL_IDLE_MS);
    int news = db_pool_busy_news(d->ctx.calls.pool, msg, sizeof msg);
    if (news)
        log_msg(news == DB_POOL_BUSY_BEGAN ? LOG_WARN : LOG_INFO, "%s", msg);
}

void daemon_on_tick(uv_timer_t *t)
{
    server_state *d = t->data;
    trim_pool(d);
    if (!d->tick_running) { /* else the last one still waits for the database */
        d->tick_running = true;
        db_pool_get(d->ctx.calls.lane, tick_got_lane, d);
    }
    if (d->own_running)
        return;
    uint64_t now = uv_now(&d->loop);
    d->tick_heartbeat = now - d->last_heartbeat >= HEARTBEAT_MS;
    /* A change of health or policy is published at once, not at the next
     * heartbeat: the fleet page shows it within a tick. */
    const char *health = daemon_health_reason(d);
    if (!health)
        health = "ok";
    if (strcmp(health, d->pub_health) != 0 || strcmp(d->policy_hash, d->pub_hash) != 0) {
        snprintf(d->pub_health, sizeof d->pub_health, "%s", health);
        snprintf(d->pub_hash, sizeof d->pub_hash, "%s", d->policy_hash);
        d->tick_heartbeat = true;
    }
    if (d->tick_heartbeat)
        d->last_heartbeat = now;
    d->tick_schema = d->schema_waiting && !d->draining && now - d->schema_checked >= SCHEMA_POLL_MS;
    if (d->tick_schema)
        d->schema_checked = now;
    if (d->tick_heartbeat || d->tick_schema) {
        d->own_running = true;
        db_pool_get(d->ctx.calls.work_lane, own_got_lane, d);
    }
}
