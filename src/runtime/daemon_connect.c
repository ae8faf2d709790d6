/*
 * daemon_connect — the daemon's connections at start: the work connection
 * (waiting with backoff while the database is busy), the schema check (and
 * migration when this account may), the pool and its lanes, the lock session,
 * the name lock, and the server's row in the server table.
 */
#include "daemon_connect.h"

#include <stdio.h>
#include <unistd.h>

#include "db.h"
#include "log.h"
#include "schema.h"

#define NAME_LOCK_TRIES 4 /* asked again at start, NAME_LOCK_RETRY_MS apart */
#define NAME_LOCK_RETRY_MS 500
#define START_BUSY_FIRST_MS 500 /* a busy database at start: backoff from this... */
#define START_BUSY_MAX_MS 5000  /* ...doubling up to this, ±25 % */
#define WORK_WAIT_TIMEOUT_S 60  /* > HEARTBEAT_MS, which keeps the work connection busy */
#define WORK_ROW_LOCK_WAIT_S 5

/* ---- server registration ----------------------------------------------- */

void daemon_register_server(server_state *d)
{
    char host[256] = "", err[512];
    gethostname(host, sizeof host - 1);
    db_value p[] = {db_text(d->ctx.server_name),
                    db_int((long long)lock_registry_connection_id(d->ctx.locks)), db_text(host),
                    db_int(getpid())};
    if (db_exec(d->ctx.calls.work,
                "INSERT INTO server (name, lock_connection_id, started_at, last_seen, host, pid) "
                "VALUES (?, ?, NOW(6), NOW(6), ?, ?) ON DUPLICATE KEY UPDATE "
                "lock_connection_id = VALUES(lock_connection_id), started_at = NOW(6), "
                "last_seen = NOW(6), host = VALUES(host), pid = VALUES(pid)",
                p, 4, NULL, err, sizeof err))
        log_msg(LOG_WARN, "registering in the server table: %s", err);
}

/* One server per name: the name lock lives as long as our lock session. */
int daemon_take_name_lock(server_state *d)
{
    int rc = lock_registry_acquire(d->ctx.locks, d->name_lock);
    if (rc == 1)
        return 0;
    if (rc == 0)
        log_msg(LOG_ERROR, "another oopsd named %s holds %s: two servers must not share a name",
                d->ctx.server_name, d->name_lock);
    return -1;
}

/* ---- the schema (doc/guide/install.md, "Rolling upgrade of a fleet") ---- */

/*
 * At start: a schema newer than this oopsd knows is refused (exit 1); an
 * older one is migrated when this account may (CREATE, ALTER: one account for
 * everything, as tests and the demo run), else the server starts but drives
 * nothing (schema_waiting) until someone runs `oopsctl migrate`.
 */
static int check_schema(server_state *d)
{
    char err[1024];
    int cur = schema_current(d->ctx.calls.work, err, sizeof err);
    if (cur < 0) {
        fprintf(stderr, "oopsd: reading the schema version: %s\n", err);
        return OOPSD_DB;
    }
    if (cur > schema_latest()) {
        fprintf(stderr, "oopsd: database schema %d is newer than this oopsd (%d): upgrade oopsd\n",
                cur, schema_latest());
        return OOPSD_BAD_INPUT;
    }
    if (cur == schema_latest())
        return OOPSD_OK;
    unsigned rc = schema_migrate(d->ctx.calls.work, NULL, err, sizeof err);
    if (rc && !db_errno_is_denied(rc)) {
        fprintf(stderr, "oopsd: migrating the schema: %s\n", err);
        return OOPSD_DB;
    }
    if (rc) {
        d->schema_waiting = true;
        d->schema_checked = d->schema_logged = uv_now(&d->loop);
        log_msg(LOG_WARN,
                "waiting for `oopsctl migrate`: database schema %d is older than this oopsd (%d) "
                "and this account may not migrate it (%s); driving nothing until then",
                cur, schema_latest(), err);
    }
    return OOPSD_OK;
}

/* ---- connecting -------------------------------------------------------- */

/* The work connection at start. A database refusing new connections (too
 * many: db_errno_is_busy) is busy, not broken: wait with backoff and jitter,
 * saying so once, until it has room (systemd's start timeout bounds it).
 * The backoff stops at START_BUSY_MAX_MS, not the pool's 30 s: one connect
 * every few seconds costs the database nothing, and a fleet started at once
 * fills it only until the first pools give back what their first tick
 * opened. */
/* One wait of that backoff: said at the first (delay_ms ==
 * START_BUSY_FIRST_MS), slept with jitter; -> the next delay. */
static unsigned busy_at_start(unsigned delay_ms, const char *err)
{
    if (delay_ms == START_BUSY_FIRST_MS)
        log_msg(LOG_WARN, "database busy at start: %s; trying again with backoff", err);
    usleep((useconds_t)db_jitter_ms(delay_ms) * 1000);
    return delay_ms * 2 > START_BUSY_MAX_MS ? START_BUSY_MAX_MS : delay_ms * 2;
}

static db_conn *open_when_room(const db_config *cfg, char *err, size_t errlen)
{
    unsigned code = 0;
    for (unsigned delay_ms = START_BUSY_FIRST_MS;; delay_ms = busy_at_start(delay_ms, err)) {
        db_conn *c = db_open_code(cfg, err, errlen, &code);
        if (c || !db_errno_is_busy(code))
            return c;
    }
}

int daemon_connect_all(server_state *d)
{
    char err[1024];
    /* The work connection is never idle longer than a heartbeat. A bounded
     * wait_timeout frees what a vanished host left open (a transaction's row
     * locks) within a minute rather than hours; a short row-lock wait makes a
     * statement blocked by such a transaction fail (and be retried next tick)
     * instead of stalling the whole loop for innodb's default 50 s. */
    db_config wcfg = d->ctx.dbcfg;
    wcfg.session_wait_timeout_s = WORK_WAIT_TIMEOUT_S;
    wcfg.row_lock_wait_s = WORK_ROW_LOCK_WAIT_S;
    d->ctx.calls.work = open_when_room(&wcfg, err, sizeof err);
    if (!d->ctx.calls.work) {
        fprintf(stderr, "oopsd: %s\n", err);
        return OOPSD_DB;
    }
    int rc = check_schema(d);
    if (rc != OOPSD_OK)
        return rc;
    /* Tasks borrow work connections of the pool (opened as needed); the lock
     * session takes one call at a time. Both without blocking the loop. */
    d->ctx.calls.pool = db_pool_new(&wcfg, d->o.db_connections ? d->o.db_connections : 4);
    d->ctx.calls.lane = db_pool_new_lane();
    d->ctx.calls.work_lane = db_pool_new_lane();
    if (!d->ctx.calls.pool || !d->ctx.calls.lane || !d->ctx.calls.work_lane) {
        fprintf(stderr, "oopsd: out of memory\n");
        return OOPSD_DB;
    }
    d->ctx.locks = lock_registry_new(&d->ctx.dbcfg, NULL);
    rc = lock_registry_connect(d->ctx.locks, err, sizeof err);
    for (unsigned delay_ms = START_BUSY_FIRST_MS; rc != 0 && lock_registry_busy(d->ctx.locks);) {
        delay_ms = busy_at_start(delay_ms, err); /* busy, not broken: as open_when_room */
        rc = lock_registry_connect(d->ctx.locks, err, sizeof err);
    }
    if (rc != 0) {
        fprintf(stderr, "oopsd: %s\n", err);
        return OOPSD_DB;
    }
    /* A neighbour's watch that saw this name's last session end holds the
     * name lock for the few milliseconds before it releases it: ask again. */
    int taken = daemon_take_name_lock(d);
    for (int i = 0; taken != 0 && lock_registry_is_up(d->ctx.locks) && i < NAME_LOCK_TRIES; i++) {
        usleep(NAME_LOCK_RETRY_MS * 1000);
        taken = daemon_take_name_lock(d);
    }
    if (taken != 0) {
        fprintf(stderr, "oopsd: another oopsd named %s is running (it holds %s)\n",
                d->ctx.server_name, d->name_lock);
        return OOPSD_BAD_INPUT;
    }
    if (!d->schema_waiting) /* else once the schema is there (schema_poll) */
        daemon_register_server(d);
    return OOPSD_OK;
}
