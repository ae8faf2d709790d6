/*
 * daemon — the life of the oopsd process: start (daemon_run: the flags, the
 * connections, the engine and the policies, the listener, the signals and
 * the tick), the Lua engine's calls, the server's health, SIGHUP (reload),
 * SIGTERM/SIGINT/SIGQUIT (drain and stop), the ignored signals, teardown;
 * also `oopsd --check` and `oopsd lua`. The rest of the daemon is in the
 * files named in daemon_internal.h.
 */
#include "daemon.h"

#include <curl/curl.h>
#include <lauxlib.h>
#include <lualib.h>
#include <mysql.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "buf.h"
#include "daemon_actions.h"
#include "daemon_connect.h"
#include "daemon_http.h"
#include "daemon_internal.h"
#include "daemon_metrics.h"
#include "daemon_notify.h"
#include "daemon_privs.h"
#include "daemon_tick.h"
#include "db_fiber.h"
#include "lock_names.h"
#include "log.h"
#include "oops_version.h"
#include "proc.h"
#include "runtime.h"

/* ---- calling the Lua engine -------------------------------------------- */

/* Push engine[fn]; returns false (nothing pushed) when the engine lacks it. */
bool daemon_engine_fn(server_state *d, const char *fn)
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
    if (!daemon_engine_fn(d, "load"))
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

void daemon_engine_call0(server_state *d, const char *fn)
{
    if (daemon_engine_fn(d, fn))
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

/* Remember engine.policy().version_hash, what STATUS= and /status name. */
static void read_policy_hash(server_state *d)
{
    lua_State *L = runtime_state(d->ctx.rt);
    snprintf(d->policy_hash, sizeof d->policy_hash, "?");
    if (!daemon_engine_fn(d, "policy") || runtime_call(L, 0, 1, "engine.policy", NULL, 0) != 0)
        return;
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "version_hash");
        if (lua_type(L, -1) == LUA_TSTRING)
            daemon_one_line(d->policy_hash, sizeof d->policy_hash, lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* ---- the server's health ------------------------------------------------- */

/* Why /healthz says 503, or NULL when it says 200 (also what the heartbeat
 * publishes in the server table for the fleet page). */
const char *daemon_health_reason(server_state *d)
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

/* ---- shutdown ----------------------------------------------------------- */

/* Every lock, the name lock last. The name lock wakes this server's heir
 * (watch.lua), whose scans then read which pipelines are free: released in
 * one RELEASE_ALL_LOCKS, the heir could wake while the database was still
 * releasing the rest, find some not yet free and leave them to a scan tick
 * (watch_ring, "stopped", beside CPU hogs). */
static void release_name_last(server_state *d)
{
    char **held = NULL;
    size_t n = lock_registry_held(d->ctx.locks, &held), k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(held[i], d->name_lock) != 0)
            held[k++] = held[i];
        else
            free(held[i]);
    }
    if (k)
        lock_registry_release_many(d->ctx.locks, (const char *const *)held, k);
    lock_names_free(held, k);
    lock_registry_release_all(d->ctx.locks);
}

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
        release_name_last(d);
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

/* The watcher's wait (watch.lua: GET_LOCK on the next server's name lock,
 * parked on the own connection until just before the next scan tick) would
 * hold the drain that long, up to --drain, and with it every lock this
 * server holds: a server stopped by SIGTERM was taken over only then
 * (scenarios/watch_ring, "stopped", beside CPU hogs). The lock session ends
 * that wait (KILL QUERY: the connection stays); checked again as it goes, so
 * no other statement, which may follow once the wait has ended, is cut. */
static void end_wait_run(server_state *d, db_conn *conn, uint64_t id)
{
    (void)conn;
    if (db_calls_work_long_wait(&d->ctx.calls))
        lock_registry_interrupt(d->ctx.locks, id);
}

static void end_watch_wait(server_state *d)
{
    if (!d->ctx.calls.work || !lock_registry_is_up(d->ctx.locks) ||
        !db_calls_work_long_wait(&d->ctx.calls))
        return;
    /* out of memory: the drain waits for the wait, as it would */
    daemon_call(d, DB_CALL_LOCK, end_wait_run, db_connection_id(d->ctx.calls.work));
}

typedef struct {
    db_call base;
    server_state *d;
    void (*fn)(server_state *d, db_conn *conn, uint64_t arg);
    uint64_t arg;
} own_call;

static void own_call_run(db_call *c)
{
    own_call *k = (own_call *)c;
    k->fn(k->d, c->conn, k->arg);
}

static void own_call_done(db_call *c) { free(c); }

bool daemon_call(server_state *d, db_call_lane lane,
                 void (*fn)(server_state *d, db_conn *conn, uint64_t arg), uint64_t arg)
{
    own_call *k = calloc(1, sizeof *k);
    if (!k)
        return false;
    k->base.lane = lane;
    k->base.run = own_call_run;
    k->base.done = own_call_done;
    k->d = d;
    k->fn = fn;
    k->arg = arg;
    db_calls_submit(&d->ctx.calls, &k->base, true);
    return true;
}

void daemon_begin_shutdown(server_state *d, const char *why)
{
    if (d->draining)
        return;
    d->draining = true;
    d->ctx.stopping = true;
    daemon_notify("STOPPING=1\nSTATUS=stopping (%s): letting in-flight steps finish", why);
    log_msg(LOG_INFO, "%s: starting no new tick, letting in-flight steps finish", why);
    daemon_engine_call0(d, "stop");
    runtime_wake_sleepers(d->ctx.rt);
    end_watch_wait(d);
    d->drain_deadline = uv_now(&d->loop) + d->o.drain_ms;
    uv_timer_start(&d->drain, drain_check, 0, 50);
}

/* ---- signals ------------------------------------------------------------- */

static void on_sighup(uv_signal_t *s, int sig)
{
    (void)sig;
    server_state *d = s->data;
    if (d->draining)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    daemon_notify("RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading the policies",
                  (unsigned long long)ts.tv_sec * 1000000ull +
                      (unsigned long long)ts.tv_nsec / 1000);
    daemon_reload_users(d);
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
    daemon_notify_status(d, "READY=1\n");
}

static void on_stop_signal(uv_signal_t *s, int sig)
{
    daemon_begin_shutdown(s->data, sig == SIGINT    ? "SIGINT"
                                   : sig == SIGQUIT ? "SIGQUIT"
                                                    : "SIGTERM");
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

/* ---- start and stop ------------------------------------------------------ */

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
    uv_timer_start(&d->tick, daemon_on_tick, TICK_MS, TICK_MS);
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
    daemon_describe_metrics(d->ctx.metrics);
    snprintf(d->ctx.server_name, sizeof d->ctx.server_name, "%s", o->name);
    snprintf(d->ctx.policy_dir, sizeof d->ctx.policy_dir, "%s", o->policies);
    d->ctx.http_answer = daemon_answer_deferred;
    d->ctx.http_answer_ud = d;
    snprintf(d->name_lock, sizeof d->name_lock, OOPS_LOCK_SERVER_PREFIX "%s", o->name);
    log_set_server(o->name);
    char err[1024];
    int rc = daemon_setup_run_as(o->run_as); /* before anything could start a child */
    if (rc != OOPSD_OK)
        goto out;
    /* The password and the token are read now, before any command runs. */
    if (db_config_resolve(&d->ctx.dbcfg, o->db_url, err, sizeof err) != 0) {
        fprintf(stderr, "oopsd: %s\n", err);
        rc = OOPSD_BAD_INPUT;
        goto out;
    }
    if (daemon_http_flags(d) != 0) {
        rc = OOPSD_BAD_INPUT; /* bad input, whether or not the database is up */
        goto out;
    }
    d->ctx.have_db = true;
    d->ctx.daemon = true;
    daemon_scrub_db_environment();
    if ((rc = daemon_connect_all(d)) != OOPSD_OK || (rc = setup_runtime(d)) != OOPSD_OK)
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
    if ((rc = daemon_listen_http(d)) != OOPSD_OK)
        goto out;
    watch_signals_and_ticks(d);
    log_started(d);
    if (!d->schema_waiting) /* else schema_poll starts it */
        daemon_engine_call0(d, "start");
    /* systemd (Type=notify): the lock session is up and the policy loaded. */
    daemon_notify_status(d, "READY=1\n");
    daemon_start_watchdog(d);
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
