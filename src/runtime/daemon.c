#include "daemon.h"

#include <curl/curl.h>
#include <lauxlib.h>
#include <lualib.h>
#include <mysql.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>
#if OOPS_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "buf.h"
#include "ctx.h"
#include "db_fiber.h"
#include "http_server.h"
#include "lock_names.h"
#include "log.h"
#include "oops_version.h"
#include "privs.h"
#include "proc.h"
#include "runtime.h"
#include "schema.h"
#include "web.h"

#define TICK_MS 200
#define NAME_LOCK_TRIES 4 /* asked again at start, NAME_LOCK_RETRY_MS apart */
#define NAME_LOCK_RETRY_MS 500
#define START_BUSY_FIRST_MS 500 /* a busy database at start: backoff from this... */
#define START_BUSY_MAX_MS 5000  /* ...doubling up to this, ±25 % */
#define HEARTBEAT_MS 30000      /* the row also changes at once when health or policy does */
#define WORK_WAIT_TIMEOUT_S 60  /* > HEARTBEAT_MS, which keeps the work connection busy */
#define WORK_ROW_LOCK_WAIT_S 5

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

/* ---- calling the Lua engine -------------------------------------------- */

/* Push engine[fn]; returns false (nothing pushed) when the engine lacks it. */
static bool engine_fn(server_state *d, const char *fn)
{
    lua_State *L = runtime_state(d->ctx.rt);
    lua_rawgeti(L, LUA_REGISTRYINDEX, d->engine);
    lua_getfield(L, -1, fn);
    lua_remove(L, -2);
    if (lua_isfunction(L, -1))
        return true;
    lua_pop(L, 1);
    return false;
}

/* Join a Lua list of strings at the top of the stack (popped) into one message. */
static char *join_errors(lua_State *L)
{
    buf b = {0};
    if (lua_istable(L, -1)) {
        lua_Integer n = luaL_len(L, -1);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, i);
            if (i > 1)
                buf_puts(&b, "\n");
            buf_puts(&b, lua_tostring(L, -1) ? lua_tostring(L, -1) : "?");
            lua_pop(L, 1);
        }
    } else if (lua_isstring(L, -1)) {
        buf_puts(&b, lua_tostring(L, -1));
    }
    lua_pop(L, 1);
    return buf_take(&b);
}

/*
 * engine.load(dir, apply, simulate) -> true | false, {errors}. apply=false
 * only validates (--check); apply=true swaps the running policy when it
 * loaded; simulate: --simulate's webhook URL, or nil.
 * Returns NULL on success, else the errors (caller frees).
 */
static char *engine_load(server_state *d, const char *dir, bool apply)
{
    lua_State *L = runtime_state(d->ctx.rt);
    if (!engine_fn(d, "load"))
        return strdup("the engine has no load function");
    lua_pushstring(L, dir);
    lua_pushboolean(L, apply);
    lua_pushstring(L, d->o.simulate); /* nil without --simulate */
    char err[1024];
    if (runtime_call(L, 3, 2, "loading the policies", err, sizeof err) != 0)
        return strdup(err);
    bool ok = lua_toboolean(L, -2);
    char *errs = ok ? (lua_pop(L, 1), NULL) : join_errors(L);
    lua_pop(L, 1);
    return errs;
}

static void engine_call0(server_state *d, const char *fn)
{
    if (engine_fn(d, fn))
        runtime_call(runtime_state(d->ctx.rt), 0, 0, fn, NULL, 0);
}

static int load_engine(server_state *d)
{
    lua_State *L = runtime_state(d->ctx.rt);
    lua_getglobal(L, "require");
    lua_pushstring(L, "oops.engine");
    char err[1024];
    if (runtime_call(L, 1, 1, "loading the engine", err, sizeof err) != 0) {
        fprintf(stderr, "oopsd: cannot load the engine (lua/oops/engine.lua): %s\n", err);
        return -1;
    }
    d->engine = luaL_ref(L, LUA_REGISTRYINDEX);
    return 0;
}

/* ---- systemd: the notify protocol and the watchdog ---------------------- */

/* sd_notify(3): one datagram to $NOTIFY_SOCKET; nothing at all without it. */
__attribute__((format(printf, 1, 2))) static void notify(const char *fmt, ...)
{
#if OOPS_HAVE_SYSTEMD
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sd_notify(0, msg);
#else
    (void)fmt;
#endif
}

/* s as one line of at most n - 1 bytes for STATUS=: its first line, control
 * characters as '?' (a policy error may quote anything of a value). */
static const char *one_line(char *out, size_t n, const char *s)
{
    size_t k = 0;
    for (; s && *s && *s != '\n' && k + 1 < n; s++)
        out[k++] = (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s;
    out[k] = '\0';
    return out;
}

/* Remember engine.policy().version_hash, what STATUS= and /status name. */
static void read_policy_hash(server_state *d)
{
    lua_State *L = runtime_state(d->ctx.rt);
    snprintf(d->policy_hash, sizeof d->policy_hash, "?");
    if (!engine_fn(d, "policy") || runtime_call(L, 0, 1, "engine.policy", NULL, 0) != 0)
        return;
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "version_hash");
        if (lua_type(L, -1) == LUA_TSTRING)
            one_line(d->policy_hash, sizeof d->policy_hash, lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* STATUS=: which policy runs, and why the last reload was refused (its first
 * error only; every error is in the log and /healthz). */
static void notify_status(server_state *d, const char *prefix)
{
    char dir[256], why[256] = "";
    one_line(dir, sizeof dir, d->o.policies);
    if (d->ctx.policy_error)
        one_line(why, sizeof why, d->ctx.policy_error);
    bool more = d->ctx.policy_error && strchr(d->ctx.policy_error, '\n');
    if (d->ctx.policy_error)
        notify("%sSTATUS=reload refused, running policy %s (load %d) from %s: %s%s", prefix,
               d->policy_hash, d->ctx.policy_version, dir, why, more ? " (more in the log)" : "");
    else
        notify("%sSTATUS=running policy %s (load %d) from %s", prefix, d->policy_hash,
               d->ctx.policy_version, dir);
}

static void on_watchdog(uv_timer_t *t)
{
    (void)t;
    notify("WATCHDOG=1");
}

/* When systemd asks for pings (WATCHDOG_USEC, WATCHDOG_PID naming us or
 * unset), a loop timer sends them at half the interval: a loop that stops
 * turning stops them, and systemd restarts the service. The variables are
 * removed from the environment (no child inherits them). */
static void start_watchdog(server_state *d)
{
    uint64_t usec = 0;
#if OOPS_HAVE_SYSTEMD
    if (sd_watchdog_enabled(1, &usec) <= 0)
        usec = 0;
#endif
    uv_timer_init(&d->loop, &d->watchdog);
    d->watchdog.data = d;
    if (!usec)
        return;
    uint64_t every = usec / 2000 ? usec / 2000 : 1;
    uv_timer_start(&d->watchdog, on_watchdog, every, every);
    log_msg(LOG_INFO, "systemd watchdog: a ping every %llu ms", (unsigned long long)every);
}

/* Why /healthz says 503, or NULL when it says 200 (also what the heartbeat
 * publishes in the server table for the fleet page). */
static const char *health_reason(server_state *d)
{
    if (!lock_registry_is_up(d->ctx.locks))
        return lock_registry_busy(d->ctx.locks)
                   ? "lock session down: the database refuses new connections (too many "
                     "connections)"
                   : "lock session down";
    if (!d->ctx.policy_loaded)
        return "no policy loaded";
    if (d->schema_waiting)
        return "waiting for `oopsctl migrate`: the database schema is older than this oopsd";
    if (d->ctx.policy_error)
        return "policy stale since a failed reload";
    if (d->draining)
        return "stopping";
    return NULL;
}

/* ---- server registration ----------------------------------------------- */

static void register_server(server_state *d)
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

/* One server per name: the name lock lives as long as our lock session. */
static int take_name_lock(server_state *d)
{
    int rc = lock_registry_acquire(d->ctx.locks, d->name_lock);
    if (rc == 1)
        return 0;
    if (rc == 0)
        log_msg(LOG_ERROR, "another oopsd named %s holds %s: two servers must not share a name",
                d->ctx.server_name, d->name_lock);
    return -1;
}

/* ---- shutdown ----------------------------------------------------------- */

static void drain_over(server_state *d)
{
    uv_timer_stop(&d->drain);
    uv_timer_stop(&d->tick);
    /* No new work from here on: the rest of this loop pass must not serve a
     * request whose task would start a database read (a fiber) that the
     * teardown then has to abandon. The listening socket closes now. */
    http_server_close(d->http);
    d->http = NULL;
    size_t left = runtime_task_count(d->ctx.rt);
    if (left)
        log_msg(LOG_WARN, "stopping with %zu step(s) still in flight after %u ms", left,
                d->o.drain_ms);
    /* Statements the database has not answered by now (it is frozen, or cut
     * off) are abandoned: their sockets are shut down, so their fibers end at
     * once. The database releases our locks when it sees the lock session
     * close; nobody else can take them before that. */
    size_t waiting = db_fiber_count();
    if (waiting) {
        log_msg(LOG_WARN,
                "stopping with %zu database call(s) unanswered after %u ms: abandoning them "
                "(the database releases this server's locks when it sees the sessions close)",
                waiting, d->o.drain_ms);
        db_fiber_abort_all();
    }
    if (!waiting && d->ctx.locks && lock_registry_is_up(d->ctx.locks)) {
        lock_registry_release_all(d->ctx.locks);
        char err[256];
        db_value p[] = {db_text(d->ctx.server_name)};
        if (d->ctx.calls.work)
            db_exec(d->ctx.calls.work,
                    "UPDATE server SET lock_connection_id = NULL, last_seen = NOW(6) "
                    "WHERE name = ?",
                    p, 1, NULL, err, sizeof err);
        log_msg(LOG_INFO, "stopped: every lock released");
    } else {
        log_msg(LOG_INFO, "stopped: the lock session closes with the process");
    }
    uv_stop(&d->loop);
}

static void drain_check(uv_timer_t *t)
{
    server_state *d = t->data;
    /* Done when no step and no tick is out, or at the deadline whatever is. */
    if ((runtime_task_count(d->ctx.rt) == 0 && !d->tick_running && !d->own_running &&
         db_fiber_count() == 0) ||
        uv_now(&d->loop) >= d->drain_deadline)
        drain_over(d);
}

static void begin_shutdown(server_state *d, const char *why)
{
    if (d->draining)
        return;
    d->draining = true;
    d->ctx.stopping = true;
    notify("STOPPING=1\nSTATUS=stopping (%s): letting in-flight steps finish", why);
    log_msg(LOG_INFO, "%s: starting no new tick, letting in-flight steps finish", why);
    engine_call0(d, "stop");
    runtime_wake_sleepers(d->ctx.rt);
    d->drain_deadline = uv_now(&d->loop) + d->o.drain_ms;
    uv_timer_start(&d->drain, drain_check, 0, 50);
}

/* ---- signals and the tick ---------------------------------------------- */

/* SIGHUP: --http-users is read again; a file that is now refused keeps the
 * users read before (logged, never its content). */
static void reload_users(server_state *d)
{
    if (!d->o.http_users_file)
        return;
    web_users *u = NULL;
    char err[1024];
    if (web_users_read(d->o.http_users_file, &u, err, sizeof err) != 0) {
        log_msg(LOG_ERROR, "http users not reloaded, keeping the %zu read before: %s",
                web_users_count(d->http_users), err);
        return;
    }
    web_users_free(d->http_users);
    d->http_users = u;
    log_msg(LOG_INFO, "http users reloaded from %s: %zu", d->o.http_users_file, web_users_count(u));
}

static void on_sighup(uv_signal_t *s, int sig)
{
    (void)sig;
    server_state *d = s->data;
    if (d->draining)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    notify("RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading the policies",
           (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
    reload_users(d);
    char *errs = engine_load(d, d->o.policies, true);
    if (!errs) {
        d->ctx.policy_version++;
        free(d->ctx.policy_error);
        d->ctx.policy_error = NULL;
        read_policy_hash(d);
        metrics_add(d->ctx.metrics, "oops_policy_reloads_total", "result=\"ok\"", 1);
        log_msg(LOG_INFO, "policy reloaded from %s (version %d)", d->o.policies,
                d->ctx.policy_version);
    } else {
        free(d->ctx.policy_error);
        d->ctx.policy_error = errs;
        metrics_add(d->ctx.metrics, "oops_policy_reloads_total", "result=\"failed\"", 1);
        const char *kv[] = {"errors", errs, NULL};
        log_event(LOG_ERROR, "policy reload failed: keeping the running policy", kv);
    }
    notify_status(d, "READY=1\n");
}

static void on_stop_signal(uv_signal_t *s, int sig)
{
    begin_shutdown(s->data, sig == SIGINT ? "SIGINT" : sig == SIGQUIT ? "SIGQUIT" : "SIGTERM");
}

/* Signals whose default action would end the process on the spot (no drain,
 * no release, the server row left as if alive): they mean nothing to oopsd,
 * so they are logged and otherwise ignored. */
static const int IGNORED_SIGNALS[] = {SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM,
                                      SIGPROF, SIGIO,   SIGPWR,  SIGXFSZ};

static void on_ignored_signal(uv_signal_t *s, int sig)
{
    (void)s;
    log_msg(LOG_WARN,
            "signal SIG%s (%d) ignored: oopsd gives it no meaning (SIGHUP reloads, SIGTERM stops)",
            sigabbrev_np(sig) ? sigabbrev_np(sig) : "?", sig);
}

/* ---- the schema (README "Rolling upgrade of a fleet") -------------------- */

#define SCHEMA_POLL_MS 2000
#define SCHEMA_LOG_MS 60000

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

/* While waiting: has the schema reached this oopsd's version? Then start
 * driving. Newer (migrated by a newer oopsctl): refused as at start. `cur` is
 * what the tick read (-1: it could not). */
static void schema_poll(server_state *d, int cur, const char *err)
{
    if (cur > schema_latest()) {
        log_msg(LOG_ERROR, "database schema %d is newer than this oopsd (%d): upgrade oopsd", cur,
                schema_latest());
        d->exit_code = OOPSD_BAD_INPUT;
        begin_shutdown(d, "database schema newer than this oopsd");
    } else if (cur == schema_latest()) {
        d->schema_waiting = false;
        log_msg(LOG_INFO, "database schema %d reached: driving", cur);
        engine_call0(d, "start");
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

/* In a fiber, holding the lock lane: the lock session's part of the tick.
 * No Lua here. */
static void tick_work(void *arg)
{
    server_state *d = arg;
    uint64_t now = uv_now(&d->loop);
    d->tick_err[0] = '\0';
    d->tick_ev = lock_registry_tick(d->ctx.locks, now, d->tick_err, sizeof d->tick_err);
    if (d->tick_ev != LOCK_REFUSED && (d->tick_ev & LOCK_EV_RECONNECTED))
        take_name_lock(d);
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
        begin_shutdown(d, "lock session refused");
        return;
    }
    if (ev & LOCK_EV_LOST) {
        log_msg(LOG_ERROR,
                "lock session lost: every lock is gone; driving nothing until reconnected");
        notify("STATUS=lock session lost: driving nothing until reconnected");
        metrics_add(d->ctx.metrics, "oops_lock_session_losses_total", "", 1);
        forget_idle_sessions(d);
    }
    if (ev & LOCK_EV_BUSY)
        log_msg(LOG_WARN, "%s", d->tick_err);
    if (ev & LOCK_EV_RECONNECTED) {
        log_msg(LOG_INFO, "lock session reconnected (connection %llu)",
                (unsigned long long)lock_registry_connection_id(d->ctx.locks));
        notify_status(d, "");
        d->last_heartbeat = 0; /* the server row names the new session at the next tick */
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
            register_server(d);
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

static void on_tick(uv_timer_t *t)
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
    const char *health = health_reason(d);
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

/* ---- HTTP: /healthz /metrics /status ----------------------------------- */

static void healthz(server_state *d, http_response *out)
{
    bool up = lock_registry_is_up(d->ctx.locks);
    const char *reason = health_reason(d);
    buf b = {0};
    bool first = true;
    buf_puts(&b, "{");
    json_kv_str(&b, "status", reason ? "unavailable" : "ok", &first);
    if (reason)
        json_kv_str(&b, "reason", reason, &first);
    json_kv_str(&b, "server", d->ctx.server_name, &first);
    json_kv_bool(&b, "lock_session_up", up, &first);
    /* Busy: the database refuses new connections (too many). A pool held at
     * its open connections still works: 200 unless the lock session is down. */
    json_kv_bool(&b, "db_busy", db_pool_busy(d->ctx.calls.pool) || lock_registry_busy(d->ctx.locks),
                 &first);
    json_kv_int(&b, "policy_version", d->ctx.policy_version, &first);
    json_kv_str(&b, "policy_error", d->ctx.policy_error, &first);
    buf_puts(&b, "}\n");
    out->status = reason ? 503 : 200;
    out->content_type = "application/json";
    out->len = b.len;
    out->body = buf_take(&b);
}

static void prom_metrics(server_state *d, http_response *out)
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

static void status(server_state *d, http_response *out)
{
    buf b = {0};
    bool first = true;
    buf_puts(&b, "{");
    json_kv_str(&b, "server", d->ctx.server_name, &first);
    json_kv_str(&b, "version", OOPS_VERSION, &first);
    json_kv_str(&b, "commit", OOPS_COMMIT, &first);
    json_kv_int(&b, "lock_connection_id", (long long)lock_registry_connection_id(d->ctx.locks),
                &first);
    json_kv_bool(&b, "lock_session_up", lock_registry_is_up(d->ctx.locks), &first);
    json_kv_int(&b, "policy_version", d->ctx.policy_version, &first);
    json_kv_str(&b, "policy_hash", d->policy_hash, &first);
    json_kv_str(&b, "policy_dir", d->o.policies, &first);
    json_kv_str(&b, "policy_error", d->ctx.policy_error, &first);
    char **names;
    size_t n = lock_registry_held(d->ctx.locks, &names);
    json_key(&b, "held_locks", &first);
    buf_puts(&b, "[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            buf_puts(&b, ",");
        json_str(&b, names[i]);
    }
    buf_puts(&b, "]");
    /* The pipelines this server drives are exactly the pipeline locks it holds. */
    json_key(&b, "driving", &first);
    buf_puts(&b, "[");
    static const char prefix[] = OOPS_LOCK_PIPELINE_PREFIX;
    bool f2 = true;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(names[i], prefix, sizeof prefix - 1) != 0)
            continue;
        if (!f2)
            buf_puts(&b, ",");
        f2 = false;
        json_str(&b, names[i] + sizeof prefix - 1);
    }
    buf_puts(&b, "]");
    lock_names_free(names, n);
    json_kv_int(&b, "tasks", (long long)runtime_task_count(d->ctx.rt), &first);
    json_kv_bool(&b, "stopping", d->draining, &first);
    buf_puts(&b, "}\n");
    out->status = 200;
    out->content_type = "application/json";
    out->len = b.len;
    out->body = buf_take(&b);
}

/* Headers of every response (http_serve_options.headers: the listener's own
 * 405/413/503 too): never cached (it is live, and may sit behind a token),
 * never sniffed as another type, never framed, no script or style but our
 * own. */
static const char *const PAGE_HEADERS[] = {
    "Cache-Control",
    "no-store",
    "X-Content-Type-Options",
    "nosniff",
    "Referrer-Policy",
    "no-referrer",
    "Content-Security-Policy",
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    NULL,
};
static const char *const ALLOW_GET[] = {"Allow", "GET", NULL};
static const char *const AUTH_HEADERS[] = {"WWW-Authenticate", "Bearer realm=\"oopsd\"", NULL};

static void http_text(http_response *out, int status, const char *text)
{
    out->status = status;
    out->body = strdup(text);
    out->len = out->body ? strlen(text) : 0;
}

static const char *const RETRY_AFTER[] = {"Retry-After", "1", NULL};

/* engine.http(path, client) -> status, json: the fleet's JSON from the
 * engine's in-memory snapshot (lua/oops/web.lua), the client's address for
 * its rate limits. It never waits on the database. */
static void web_api(server_state *d, const http_incoming *in, http_response *out)
{
    lua_State *L = runtime_state(d->ctx.rt);
    if (!d->ctx.rt || !engine_fn(d, "http")) {
        http_text(out, 503, "no engine\n");
        return;
    }
    char peer[64];
    lua_pushstring(L, in->path);
    if (http_incoming_peer_addr(in, peer, sizeof peer) == 0)
        lua_pushstring(L, peer);
    else
        lua_pushnil(L);
    if (runtime_call(L, 2, 2, "engine.http", NULL, 0) != 0) {
        http_text(out, 500, "internal error (logged)\n");
        return;
    }
    size_t len = 0;
    const char *body = lua_tolstring(L, -1, &len);
    out->status = (int)lua_tointeger(L, -2);
    if (body) {
        out->body = malloc(len ? len : 1);
        if (out->body)
            memcpy(out->body, body, len);
        out->len = out->body ? len : 0;
    }
    lua_pop(L, 2);
    out->content_type = "application/json";
    if (out->status == 429)
        out->headers = RETRY_AFTER;
}

static void count_host(void *ud, const char *name, const char *value)
{
    (void)value;
    if (strcasecmp(name, "Host") == 0)
        ++*(int *)ud;
}

/* 0 when the request's Host is one this server answers for (web.h: DNS
 * rebinding), else the status to answer: 421, or 400 for an HTTP/1.1
 * request without one (RFC 9112 3.2; HTTP/1.0 may omit it). A repeated Host
 * header is refused: which one a proxy reads is unknown. */
static int host_check(server_state *d, const http_incoming *in)
{
    int n = 0;
    http_incoming_headers(in, count_host, &n);
    const char *host = http_incoming_header(in, "Host");
    if (!host && strcmp(in->version, "HTTP/1.0") != 0)
        return 400;
    char local[64];
    bool known = http_incoming_local_addr(in, local, sizeof local) == 0;
    return n <= 1 && web_host_allowed(&d->http_hosts, host, known ? local : NULL) ? 0 : 421;
}

/* /api/me: who the request's token names, and whether it may act. */
static void whoami(server_state *d, const web_user *who, bool authed, http_response *out)
{
    buf b = {0};
    bool first = true;
    buf_puts(&b, "{");
    json_kv_str(&b, "name", authed ? who->name : NULL, &first);
    json_kv_str(&b, "role", authed ? web_role_name(who->role) : "viewer", &first);
    json_kv_bool(&b, "actions", authed && who->role == WEB_ROLE_OPERATOR, &first);
    json_kv_bool(&b, "users", d->o.http_users_file != NULL, &first);
    buf_puts(&b, "}\n");
    out->status = 200;
    out->content_type = "application/json";
    out->len = b.len;
    out->body = buf_take(&b);
}

static void json_error(http_response *out, int status, const char *text)
{
    buf b = {0};
    bool first = true;
    buf_puts(&b, "{");
    json_kv_str(&b, "error", text, &first);
    buf_puts(&b, "}\n");
    out->status = status;
    out->content_type = "application/json";
    out->len = b.len;
    out->body = buf_take(&b);
}

/* CSRF (issue 27): an action from another origin is refused. A browser
 * sends Origin with every POST and Sec-Fetch-Site with every request (a
 * script cannot change them); what they say must be this page's own origin.
 * (The token travels in the Authorization header only, which no other
 * origin's page can make a browser send, so this is the second fence.)
 * NULL when allowed, else why. */
static const char *foreign_origin(const http_incoming *in)
{
    const char *site = http_incoming_header(in, "Sec-Fetch-Site");
    if (site && strcasecmp(site, "same-origin") != 0 && strcasecmp(site, "none") != 0)
        return "refused: the request comes from another site (Sec-Fetch-Site)";
    const char *origin = http_incoming_header(in, "Origin");
    if (!origin)
        return NULL;
    const char *host = http_incoming_header(in, "Host");
    const char *rest = strncmp(origin, "http://", 7) == 0    ? origin + 7
                       : strncmp(origin, "https://", 8) == 0 ? origin + 8
                                                             : NULL;
    if (!rest || !host || strcasecmp(rest, host) != 0)
        return "refused: the request comes from another origin (Origin)";
    return NULL;
}

static int answer_deferred(void *ud, uint64_t ticket, int status, const char *body, size_t len)
{
    server_state *d = ud;
    http_response r = {.status = status, .content_type = "application/json"};
    r.body = malloc(len ? len : 1);
    if (!r.body)
        return -1;
    memcpy(r.body, body, len);
    r.len = len;
    return d->http ? http_server_answer(d->http, ticket, &r) : (free(r.body), -1);
}

/* POST /api/...: an operator's action (lua/oops/web.lua, M.post), deferred
 * until its task is done: the handler never waits on the database. */
static void web_action(server_state *d, const http_incoming *in, const web_user *who,
                       http_response *out)
{
    if (!d->http_users || !d->o.http_users_file) {
        json_error(out, 403, "actions need named operators: start oopsd with --http-users FILE");
        return;
    }
    if (who->role != WEB_ROLE_OPERATOR) {
        char t[128];
        snprintf(t, sizeof t, "%s is a viewer: only operators may act", who->name);
        json_error(out, 403, t);
        return;
    }
    const char *why = foreign_origin(in);
    if (why) {
        json_error(out, 403, why);
        return;
    }
    const char *type = http_incoming_header(in, "Content-Type");
    if (!type || strncasecmp(type, "application/json", 16) != 0) {
        json_error(out, 415, "the body must be JSON (Content-Type: application/json)");
        return;
    }
    lua_State *L = runtime_state(d->ctx.rt);
    if (!d->ctx.rt || !engine_fn(d, "http_post")) {
        json_error(out, 503, "no engine");
        return;
    }
    uint64_t ticket = http_defer(in);
    if (!ticket) {
        lua_pop(L, 1);
        json_error(out, 503, "too many requests waiting; try again");
        return;
    }
    char actor[64];
    snprintf(actor, sizeof actor, "%s@page", who->name);
    lua_pushstring(L, in->path);
    lua_pushlstring(L, in->body, in->body_len);
    lua_pushstring(L, actor);
    lua_pushinteger(L, (lua_Integer)ticket);
    if (runtime_call(L, 4, 2, "engine.http_post", NULL, 0) != 0) {
        answer_deferred(d, ticket, 500, "{\"error\":\"internal error (logged)\"}\n", 35);
        return;
    }
    if (lua_isinteger(L, -2)) { /* answered now: a bad request, or too many at once */
        size_t len = 0;
        const char *body = lua_tolstring(L, -1, &len);
        answer_deferred(d, ticket, (int)lua_tointeger(L, -2), body ? body : "{}", body ? len : 2);
    }
    lua_pop(L, 2);
}

static const char *const ALLOW_API[] = {"Allow", "GET, POST", NULL};

static bool action_path(const char *path)
{
    return strncmp(path, "/api/pipeline/", 14) == 0 || strcmp(path, "/api/rollback") == 0;
}

static void on_http(void *ud, const http_incoming *in, http_response *out)
{
    server_state *d = ud;
    const char *path = in->path;
    int refused = host_check(d, in); /* every request, /healthz too: probes send the address */
    if (refused) {
        d->http_host_refused++;
        http_text(out, refused,
                  refused == 400 ? "400 Bad Request: an HTTP/1.1 request needs a Host header\n"
                                 : "421 Misdirected Request: this oopsd does not answer for that "
                                   "Host (a name of its own is added with --http-host NAME)\n");
        return;
    }
    bool get = strcmp(in->method, "GET") == 0, post = strcmp(in->method, "POST") == 0;
    if (!get && !(post && action_path(path))) {
        out->status = 405;
        out->headers = action_path(path) ? ALLOW_API : ALLOW_GET;
        return;
    }
    if (get && strcmp(path, "/healthz") == 0) { /* open: probes carry no token (README) */
        healthz(d, out);
        return;
    }
    /* The page's own code (no data in it) is served to anyone: the sign-in
     * form is in it. Everything else needs a token when tokens are asked. */
    const web_asset *a = get && strncmp(path, "/api/", 5) != 0 ? web_asset_find(path) : NULL;
    if (a) {
        out->body = malloc(a->len);
        if (!out->body) {
            out->status = 503;
            return;
        }
        memcpy(out->body, a->data, a->len);
        out->len = a->len;
        out->status = 200;
        out->content_type = a->content_type;
        return;
    }
    web_user who = {0};
    bool authed = d->http_users &&
                  web_users_check(d->http_users, http_incoming_header(in, "Authorization"), &who);
    if (d->http_users && !authed) {
        http_text(out, 401, "a bearer token is required (Authorization: Bearer TOKEN)\n");
        out->headers = AUTH_HEADERS;
        return;
    }
    if (post) {
        web_action(d, in, &who, out);
    } else if (strcmp(path, "/metrics") == 0) {
        prom_metrics(d, out);
    } else if (strcmp(path, "/status") == 0) {
        status(d, out);
    } else if (strcmp(path, "/api/me") == 0) {
        whoami(d, &who, authed, out);
    } else if (strncmp(path, "/api/", 5) == 0) {
        web_api(d, in, out);
    } /* else 404 */
}

/* ---- start and stop ---------------------------------------------------- */

static void describe_metrics(metrics *m)
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

static int connect_all(server_state *d)
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
    int taken = take_name_lock(d);
    for (int i = 0; taken != 0 && lock_registry_is_up(d->ctx.locks) && i < NAME_LOCK_TRIES; i++) {
        usleep(NAME_LOCK_RETRY_MS * 1000);
        taken = take_name_lock(d);
    }
    if (taken != 0) {
        fprintf(stderr, "oopsd: another oopsd named %s is running (it holds %s)\n",
                d->ctx.server_name, d->name_lock);
        return OOPSD_BAD_INPUT;
    }
    if (!d->schema_waiting) /* else once the schema is there (schema_poll) */
        register_server(d);
    return OOPSD_OK;
}

static void close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/*
 * Everything that may still call into Lua does so now, while the Lua state
 * lives: every database wait fails at once (db_fiber_abort_all, for good:
 * a fiber started from here on ends before it could wait), HTTP requests in
 * flight are cancelled and no new client can be made, and the loop runs what
 * is already due (a fiber's end, a cancelled request's answer, a child
 * process's exit and its close callbacks) until no fiber is left. Each of
 * those resumes its task with an error. Nothing is listening any more.
 */
#define SETTLE_PASSES 100
static void settle(server_state *d)
{
    http_server_close(d->http);
    d->http = NULL;
    d->ctx.closing = true;
    db_fiber_abort_all();
    if (d->ctx.http)
        http_client_close(d->ctx.http); /* freed once its handles have closed */
    d->ctx.http = NULL;
    for (int pass = 0; pass < SETTLE_PASSES; pass++) {
        uv_run(&d->loop, UV_RUN_NOWAIT);
        if (db_fiber_count() == 0 && pass >= 1)
            break;
    }
    if (db_fiber_count()) /* never seen: they are left behind, never resumed */
        log_msg(LOG_WARN, "exiting with %zu database call(s) that would not end", db_fiber_count());
    db_fiber_forget_all(); /* the kept watchers, freed as they close */
}

static void teardown(server_state *d)
{
    settle(d);
    /* Only now the Lua state goes (its __gc closes what Lua owned, such as
     * oops.http.serve's servers). Whatever handle is left (a child still
     * running, the signals, the timers) closes without calling back. */
    if (d->ctx.rt)
        runtime_free(d->ctx.rt);
    d->ctx.rt = NULL;
    uv_walk(&d->loop, close_walk, NULL);
    if (db_fiber_offloads_left())
        log_msg(LOG_INFO,
                "waiting for %zu database connect(s) by host name to end (within the "
                "resolver's timeout and connect_timeout)",
                db_fiber_offloads_left());
    uv_run(&d->loop, UV_RUN_DEFAULT);
    uv_loop_close(&d->loop);
    lock_registry_free(d->ctx.locks);
    db_pool_free(d->ctx.calls.pool);
    db_pool_free(d->ctx.calls.lane);
    db_pool_free(d->ctx.calls.work_lane);
    db_close(d->ctx.calls.work);
    db_calls_fini(&d->ctx.calls);
    db_config_free(&d->ctx.dbcfg);
    metrics_free(d->ctx.metrics);
    free(d->ctx.policy_error);
}

static int setup_runtime(server_state *d)
{
    char err[4096];
    d->ctx.rt = runtime_new(&d->ctx, err, sizeof err);
    if (!d->ctx.rt) {
        fprintf(stderr, "oopsd: %s\n", err);
        return OOPSD_BAD_INPUT;
    }
    return load_engine(d) == 0 ? OOPSD_OK : OOPSD_BAD_INPUT;
}

/* The settings are parsed: OOPS_DB, OOPS_DB_PASSWORD (any OOPS_DB*) leave
 * the process environment, so no child, library or policy can read them,
 * and their values are overwritten in the initial environment block. */
static void scrub_db_environment(void)
{
    extern char **environ;
    size_t n = 0;
    for (char **e = environ; e && *e; e++)
        n++;
    char **names = calloc(n + 1, sizeof *names);
    size_t k = 0;
    for (size_t i = 0; names && i < n; i++) {
        char *entry = environ[i], *eq = strchr(entry, '=');
        if (strncasecmp(entry, "OOPS_DB", 7) == 0 && eq) {
            names[k++] = strndup(entry, (size_t)(eq - entry));
            /* Overwrite the value where it lies: the initial environment
             * block is what /proc/PID/environ shows (as --db is masked in
             * argv). */
            memset(eq + 1, 'x', strlen(eq + 1));
        }
    }
    for (size_t i = 0; i < k; i++) {
        if (names[i])
            unsetenv(names[i]);
        free(names[i]);
    }
    free(names);
    /* Whatever unsetenv could not name (an entry without '='): drop it. */
    size_t out = 0;
    for (size_t i = 0; environ && environ[i]; i++)
        if (strncasecmp(environ[i], "OOPS_DB", 7) != 0)
            environ[out++] = environ[i];
    if (environ)
        environ[out] = NULL;
}

/* --run-as USER: every child (src/proc.c) runs as USER; without it, say once
 * that commands can read the credentials. Whatever the flag, no capability of
 * the daemon's reaches a child through exec (privs_clear_inheritable). */
static int setup_run_as(const char *user)
{
    char err[512];
    if (privs_clear_inheritable(err, sizeof err) != 0) {
        fprintf(stderr, "oopsd: %s\n", err);
        return OOPSD_BAD_INPUT;
    }
    if (!user) {
        const char *cred = getenv("CREDENTIALS_DIRECTORY");
        if (cred && *cred)
            log_msg(LOG_WARN,
                    "commands run as oopsd's own user, so they can read its credentials in %s: "
                    "give --run-as USER (oopsd(8))",
                    cred);
        return OOPSD_OK;
    }
    privs_user u;
    if (privs_resolve(user, &u, err, sizeof err) != 0) {
        fprintf(stderr, "oopsd: %s\n", err);
        return OOPSD_BAD_INPUT;
    }
    char missing[64];
    privs_missing_caps(missing, sizeof missing);
    if (*missing) {
        fprintf(stderr,
                "oopsd: --run-as %s: this process lacks %s, needed to start commands as %s and "
                "to stop them (systemd: AmbientCapabilities=CAP_SETUID CAP_SETGID CAP_KILL)\n",
                u.name, missing, u.name);
        return OOPSD_BAD_INPUT;
    }
    proc_set_run_as(&(proc_run_as){.uid = u.uid, .gid = u.gid, .user = u.name, .home = u.home});
    log_msg(LOG_INFO, "commands run as %s (uid %u, gid %u)", u.name, (unsigned)u.uid,
            (unsigned)u.gid);
    return OOPSD_OK;
}

static void process_init(void)
{
    signal(SIGPIPE, SIG_IGN); /* a child that exits without reading its stdin must not kill us */
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void process_done(void)
{
    curl_global_cleanup();
    mysql_library_end();
}

/* --listen, --http-host, --http-token-file: checked (and the token read)
 * before anything else is done. 0, or -1 after printing why. */
static int http_flags(server_state *d)
{
    char err[1024];
    if (strcmp(d->o.listen, "off") != 0 && http_listen_check(d->o.listen, err, sizeof err) != 0) {
        fprintf(stderr, "oopsd: %s\n", err);
        return -1;
    }
    if (d->o.http_token_file && d->o.http_users_file) {
        fprintf(stderr, "oopsd: --http-users and --http-token-file: give one of them (a token "
                        "file is one viewer; a users file names each viewer and operator)\n");
        return -1;
    }
    if (!web_listen_is_loopback(d->o.listen) && !d->o.http_token_file && !d->o.http_users_file) {
        fprintf(
            stderr,
            "oopsd: --listen %s is not a loopback address: the fleet page and its data would be "
            "open to the network; give --http-users FILE or --http-token-file FILE (the bearer "
            "tokens every request but /healthz and the page's own code must carry) and put "
            "oopsd behind a reverse proxy (README \"The fleet page\")\n",
            d->o.listen);
        return -1;
    }
    web_hosts_listen(&d->http_hosts, d->o.listen);
    for (unsigned i = 0; i < d->o.n_http_hosts; i++)
        if (web_hosts_add(&d->http_hosts, d->o.http_hosts[i], err, sizeof err) != 0) {
            fprintf(stderr, "oopsd: %s\n", err);
            return -1;
        }
    if (d->o.http_token_file) {
        char *token = NULL;
        int rc = web_token_read(d->o.http_token_file, &token, err, sizeof err);
        if (rc == 0 && web_users_single(token, &d->http_users) != 0) {
            snprintf(err, sizeof err, "--http-token-file %s: out of memory", d->o.http_token_file);
            rc = -1;
        }
        web_token_free(token);
        if (rc != 0) {
            fprintf(stderr, "oopsd: %s\n", err);
            return -1;
        }
    }
    if (d->o.http_users_file &&
        web_users_read(d->o.http_users_file, &d->http_users, err, sizeof err) != 0) {
        fprintf(stderr, "oopsd: %s\n", err);
        return -1;
    }
    return 0;
}

/* The HTTP listener on --listen (none for "off"): OOPSD_OK, or the reason said. */
static int listen_http(server_state *d)
{
    if (strcmp(d->o.listen, "off") == 0)
        return OOPSD_OK;
    /* Every method reaches on_http (it answers 405 but to GET) so that it
     * sees the Authorization header; a request has no business with a body. */
    char err[1024];
    http_serve_options so = {
        .handler = on_http, .ud = d, .max_body = 4096, .headers = PAGE_HEADERS};
    d->http = http_server_serve(&d->loop, d->o.listen, &so, err, sizeof err);
    if (!d->http) {
        fprintf(stderr, "oopsd: %s\n", err);
        return OOPSD_BAD_INPUT;
    }
    return OOPSD_OK;
}

/* Signals the loop answers (reload, stop, the ignored ones) and its timers. */
static void watch_signals_and_ticks(server_state *d)
{
    uv_signal_init(&d->loop, &d->sighup);
    uv_signal_init(&d->loop, &d->sigterm);
    uv_signal_init(&d->loop, &d->sigint);
    uv_signal_init(&d->loop, &d->sigquit);
    d->sighup.data = d->sigterm.data = d->sigint.data = d->sigquit.data = d;
    uv_signal_start(&d->sighup, on_sighup, SIGHUP);
    uv_signal_start(&d->sigterm, on_stop_signal, SIGTERM);
    uv_signal_start(&d->sigint, on_stop_signal, SIGINT);
    uv_signal_start(&d->sigquit, on_stop_signal, SIGQUIT);
    for (size_t i = 0; i < sizeof IGNORED_SIGNALS / sizeof *IGNORED_SIGNALS; i++) {
        uv_signal_init(&d->loop, &d->ignored[i]);
        uv_signal_start(&d->ignored[i], on_ignored_signal, IGNORED_SIGNALS[i]);
    }
    uv_timer_init(&d->loop, &d->tick);
    uv_timer_init(&d->loop, &d->drain);
    d->tick.data = d->drain.data = d;
    uv_timer_start(&d->tick, on_tick, TICK_MS, TICK_MS);
    d->last_heartbeat = uv_now(&d->loop);
}

/* The "started:" line (tests and operators wait for it). */
static void log_started(server_state *d)
{
    char where[300] = "nothing";
    if (d->http) { /* the bound port: --listen may say port 0 */
        const char *colon = strrchr(d->o.listen, ':');
        int hl = colon ? (int)(colon - d->o.listen) : (int)strlen(d->o.listen);
        snprintf(where, sizeof where, "%.*s:%d", hl, d->o.listen, http_server_port(d->http));
    }
    log_msg(LOG_INFO,
            "started: oopsd %s (commit %s), lock session %llu, policies from %s, listening on %s",
            OOPS_VERSION, OOPS_COMMIT,
            (unsigned long long)lock_registry_connection_id(d->ctx.locks), d->o.policies, where);
}

int daemon_run(const daemon_options *o)
{
    server_state *d = calloc(1, sizeof *d);
    d->o = *o;
    if (!d->o.listen)
        d->o.listen = "127.0.0.1:7070";
    if (!d->o.drain_ms)
        d->o.drain_ms = 10000;
    process_init();
    /* Until the loop watches them (below), these must not end the process either. */
    for (size_t i = 0; i < sizeof IGNORED_SIGNALS / sizeof *IGNORED_SIGNALS; i++)
        signal(IGNORED_SIGNALS[i], SIG_IGN);
    uv_loop_init(&d->loop);
    d->ctx.loop = &d->loop;
    d->ctx.metrics = metrics_new();
    db_calls_init(&d->ctx.calls, d->ctx.loop, d->ctx.metrics);
    describe_metrics(d->ctx.metrics);
    snprintf(d->ctx.server_name, sizeof d->ctx.server_name, "%s", o->name);
    snprintf(d->ctx.policy_dir, sizeof d->ctx.policy_dir, "%s", o->policies);
    d->ctx.http_answer = answer_deferred;
    d->ctx.http_answer_ud = d;
    snprintf(d->name_lock, sizeof d->name_lock, OOPS_LOCK_SERVER_PREFIX "%s", o->name);
    log_set_server(o->name);
    char err[1024];
    int rc = setup_run_as(o->run_as); /* before anything could start a child */
    if (rc != OOPSD_OK)
        goto out;
    /* The password and the token are read now, before any command runs. */
    if (db_config_resolve(&d->ctx.dbcfg, o->db_url, err, sizeof err) != 0) {
        fprintf(stderr, "oopsd: %s\n", err);
        rc = OOPSD_BAD_INPUT;
        goto out;
    }
    if (http_flags(d) != 0) {
        rc = OOPSD_BAD_INPUT; /* bad input, whether or not the database is up */
        goto out;
    }
    d->ctx.have_db = true;
    d->ctx.daemon = true;
    scrub_db_environment();
    if ((rc = connect_all(d)) != OOPSD_OK || (rc = setup_runtime(d)) != OOPSD_OK)
        goto out;
    char *errs = engine_load(d, o->policies, true);
    if (errs) {
        fprintf(stderr, "%s\noopsd: the policies in %s did not load\n", errs, o->policies);
        free(errs);
        rc = OOPSD_BAD_INPUT;
        goto out;
    }
    d->ctx.policy_loaded = true;
    d->ctx.policy_version = 1;
    read_policy_hash(d);
    if ((rc = listen_http(d)) != OOPSD_OK)
        goto out;
    watch_signals_and_ticks(d);
    log_started(d);
    if (!d->schema_waiting) /* else schema_poll starts it */
        engine_call0(d, "start");
    /* systemd (Type=notify): the lock session is up and the policy loaded. */
    notify_status(d, "READY=1\n");
    start_watchdog(d);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    rc = d->exit_code;
out:
    teardown(d);
    web_users_free(d->http_users);
    proc_set_run_as(NULL);
    free(d);
    process_done();
    return rc;
}

int daemon_check(const char *policies)
{
    server_state *d = calloc(1, sizeof *d);
    process_init();
    uv_loop_init(&d->loop);
    d->ctx.loop = &d->loop;
    d->ctx.metrics = metrics_new();
    db_calls_init(&d->ctx.calls, d->ctx.loop, d->ctx.metrics);
    snprintf(d->ctx.server_name, sizeof d->ctx.server_name, "check");
    int rc = setup_runtime(d);
    if (rc == OOPSD_OK) {
        char *errs = engine_load(d, policies, false);
        if (errs) {
            printf("%s\n", errs);
            rc = OOPSD_BAD_INPUT;
        } else {
            printf("ok\n");
        }
        free(errs);
    }
    teardown(d);
    free(d);
    process_done();
    return rc;
}

int daemon_lua(int argc, char **argv)
{
    if (argc < 1) {
        fprintf(stderr, "usage: oopsd lua SCRIPT [ARGS...]\n");
        return OOPSD_BAD_INPUT;
    }
    server_state *d = calloc(1, sizeof *d);
    process_init();
    uv_loop_init(&d->loop);
    d->ctx.loop = &d->loop;
    d->ctx.metrics = metrics_new();
    db_calls_init(&d->ctx.calls, d->ctx.loop, d->ctx.metrics);
    snprintf(d->ctx.server_name, sizeof d->ctx.server_name, "script");
    char err[4096];
    d->ctx.rt = runtime_new(&d->ctx, err, sizeof err);
    if (!d->ctx.rt) {
        fprintf(stderr, "oopsd lua: %s\n", err);
        teardown(d);
        free(d);
        process_done();
        return OOPSD_BAD_INPUT;
    }
    lua_State *L = runtime_state(d->ctx.rt);
    /* arg, as the standalone interpreter sets it: arg[0] = script, arg[1..] = args */
    lua_createtable(L, argc, 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i);
    }
    lua_setglobal(L, "arg");
    int rc = OOPSD_OK;
    if (luaL_loadfile(L, argv[0]) != LUA_OK) {
        fprintf(stderr, "oopsd lua: %s\n", lua_tostring(L, -1));
        lua_pop(L, 1);
        rc = OOPSD_BAD_INPUT;
    } else {
        for (int i = 1; i < argc; i++)
            lua_pushstring(L, argv[i]);
        if (runtime_call(L, argc - 1, 0, argv[0], NULL, 0) != 0)
            rc = OOPSD_BAD_INPUT;
        else
            uv_run(&d->loop, UV_RUN_DEFAULT); /* let tasks the script started finish */
    }
    if (d->ctx.locks)
        lock_registry_release_all(d->ctx.locks);
    teardown(d);
    free(d);
    process_done();
    return rc;
}
