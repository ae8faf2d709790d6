#include "lock_registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "buf.h"
#include "strset.h"

/* Names per GET_LOCK statement: MariaDB's limit of placeholders in one
 * prepared statement (65,535), so a scan's batch is one round trip whatever
 * its size; the text for 10,000 names is about 170 KB, far below
 * max_allowed_packet. Only a larger batch is split. */
#define ACQUIRE_BATCH 65535

struct lock_registry {
    db_config cfg;
    lock_registry_options o;
    db_conn *conn; /* NULL when down */
    uint64_t conn_id;
    strset held; /* logical names */
    uint64_t last_checked_ms;
    uint64_t next_attempt_ms;
    unsigned backoff_ms;
    bool ever_up;
    bool busy;          /* the last connect was refused: too many connections (db_errno_is_busy) */
    bool busy_reported; /* LOCK_EV_BUSY said so for this busy period */
    uint64_t losses, reconnects, statements;
    uint64_t losses_reported; /* losses the tick has reported (LOCK_EV_LOST) */
    bool wait_pending;        /* wait_timeout changed: set it before the next statement */
    unsigned
        chosen_wait_s; /* 0: 3 validation intervals; else seconds or LOCK_WAIT_TIMEOUT_SERVER */
    char *pinned;      /* lock_registry_pin: kept by release_all */
};

/* The session wait_timeout that follows from the choice and the interval. */
static unsigned derived_wait(const lock_registry *r)
{
    if (r->chosen_wait_s)
        return r->chosen_wait_s;
    unsigned w = 3 * r->o.validate_interval_ms / 1000;
    return w < 3 ? 3 : w;
}

/* Set it on the open session: 0 done, else the statement failed. */
static unsigned apply_wait(lock_registry *r, char *err, size_t errlen);

void lock_name_shorten(const char *name, char out[LOCK_NAME_MAX + 1])
{
    size_t n = strlen(name);
    if (n <= LOCK_NAME_MAX) {
        memcpy(out, name, n + 1);
        return;
    }
    snprintf(out, LOCK_NAME_MAX + 1, "%.47s#%016llx", name, (unsigned long long)strset_hash(name));
}

lock_registry *lock_registry_new(const db_config *cfg, const lock_registry_options *o)
{
    lock_registry *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    db_config_copy(&r->cfg, cfg);
    if (o)
        r->o = *o;
    if (!r->o.validate_interval_ms)
        r->o.validate_interval_ms = 30000;
    r->chosen_wait_s = r->o.wait_timeout_s;
    r->o.wait_timeout_s = derived_wait(r);
    if (!r->o.backoff_initial_ms)
        r->o.backoff_initial_ms = 500;
    if (!r->o.backoff_max_ms)
        r->o.backoff_max_ms = 30000;
    r->backoff_ms = r->o.backoff_initial_ms;
    return r;
}

/* Every error on the session means every lock is gone. */
static void go_down(lock_registry *r)
{
    if (r->conn) {
        db_close(r->conn);
        r->conn = NULL;
        r->losses++;
    }
    r->conn_id = 0;
    strset_clear(&r->held);
}

void lock_registry_free(lock_registry *r)
{
    if (!r)
        return;
    if (r->conn) /* closing the session releases its locks */
        db_close(r->conn);
    strset_clear(&r->held);
    db_config_free(&r->cfg);
    free(r->pinned);
    free(r);
}

static unsigned q(lock_registry *r, const char *sql, const db_value *p, size_t n, db_result **out,
                  char *err, size_t errlen)
{
    if (r->wait_pending) { /* a new wait_timeout, set before the session's next statement */
        r->wait_pending = false;
        unsigned rc = apply_wait(r, err, errlen);
        if (rc)
            return rc;
    }
    r->statements++;
    return db_exec(r->conn, sql, p, n, out, err, errlen);
}

static int check_shared(lock_registry *r, char *err, size_t errlen)
{
    char e[256], where[300];
    db_result *res = NULL;
    db_config_where(&r->cfg, where, sizeof where);
    if (q(r, "SELECT @@global.read_only", NULL, 0, &res, e, sizeof e)) {
        snprintf(err, errlen, "lock session at %s: %s", where, e);
        return LOCK_DOWN;
    }
    long long ro = db_get_int(res, 0, 0, 0);
    db_result_free(res);
    if (ro) {
        snprintf(err, errlen,
                 "database at %s is read-only (@@read_only = 1): its user-level locks are not "
                 "the primary's; point --db at the primary",
                 where);
        return LOCK_REFUSED;
    }
    if (q(r, "SHOW GLOBAL VARIABLES LIKE 'wsrep_on'", NULL, 0, &res, e, sizeof e)) {
        snprintf(err, errlen, "lock session at %s: %s", where, e);
        return LOCK_DOWN;
    }
    const char *wsrep = db_get(res, 0, 1);
    bool galera = wsrep && strcasecmp(wsrep, "ON") == 0;
    db_result_free(res);
    if (galera) {
        snprintf(err, errlen,
                 "database at %s runs Galera (wsrep_on = ON): user-level locks are not shared "
                 "between its nodes, so they cannot coordinate servers",
                 where);
        return LOCK_REFUSED;
    }
    return 0;
}

int lock_registry_connect(lock_registry *r, char *err, size_t errlen)
{
    go_down(r);
    unsigned code;
    r->conn = db_open_code(&r->cfg, err, errlen, &code);
    r->busy = !r->conn && db_errno_is_busy(code);
    if (!r->conn)
        return LOCK_DOWN;
    int rc = check_shared(r, err, errlen);
    if (rc == 0) {
        /* The server reaps a vanished host's session, and frees its locks,
         * within this bound; validation keeps a living one from being reaped. */
        char e[256];
        if (apply_wait(r, e, sizeof e)) {
            snprintf(err, errlen, "lock session: %s", e);
            rc = LOCK_DOWN;
        }
    }
    if (rc != 0) {
        db_close(r->conn);
        r->conn = NULL;
        return rc;
    }
    r->conn_id = db_connection_id(r->conn);
    if (r->ever_up)
        r->reconnects++;
    r->ever_up = true;
    r->backoff_ms = r->o.backoff_initial_ms;
    return 0;
}

static unsigned apply_wait(lock_registry *r, char *err, size_t errlen)
{
    if (r->o.wait_timeout_s == LOCK_WAIT_TIMEOUT_SERVER) /* the server's own, also after a change */
        return q(r, "SET SESSION wait_timeout = @@global.wait_timeout", NULL, 0, NULL, err, errlen);
    db_value p[] = {db_int(r->o.wait_timeout_s)};
    return q(r, "SET SESSION wait_timeout = ?", p, 1, NULL, err, errlen);
}

/* The bound on a vanished host's locks changes with the session's next
 * statement (the next validation at the latest), not at the next connect. No
 * statement is sent from here: the caller may not own the session now (a
 * task's call may be out on it). */
static void rederive_wait(lock_registry *r)
{
    unsigned w = derived_wait(r);
    if (w == r->o.wait_timeout_s)
        return;
    r->o.wait_timeout_s = w;
    r->wait_pending = r->conn != NULL;
}

void lock_registry_set_validate_interval(lock_registry *r, unsigned ms)
{
    r->o.validate_interval_ms = ms;
    rederive_wait(r);
}

void lock_registry_set_session_timeout(lock_registry *r, unsigned s)
{
    r->chosen_wait_s = s;
    rederive_wait(r);
}

unsigned lock_registry_wait_timeout(const lock_registry *r) { return r->o.wait_timeout_s; }

bool lock_registry_is_up(const lock_registry *r) { return r && r->conn; }
uint64_t lock_registry_connection_id(const lock_registry *r) { return r ? r->conn_id : 0; }
uint64_t lock_registry_losses(const lock_registry *r) { return r->losses; }
uint64_t lock_registry_reconnects(const lock_registry *r) { return r->reconnects; }
uint64_t lock_registry_statements(const lock_registry *r) { return r->statements; }
uint64_t lock_registry_round_trips(const lock_registry *r)
{
    /* Closed sessions' trips are counted in `statements`; the open one's prepares are added. */
    return r->statements + (r->conn ? db_round_trips(r->conn) - db_statement_count(r->conn) : 0);
}

bool lock_registry_holds(const lock_registry *r, const char *name)
{
    return r->conn && strset_has(&r->held, name);
}

size_t lock_registry_held(const lock_registry *r, char ***names)
{
    return strset_items(&r->held, names);
}

void lock_names_free(char **names, size_t n)
{
    for (size_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

int lock_registry_acquire(lock_registry *r, const char *name)
{
    bool got = false;
    int n = lock_registry_acquire_many(r, &name, 1, &got);
    if (n < 0)
        return LOCK_DOWN;
    return got ? 1 : 0;
}

/* One GET_LOCK per column: SELECT GET_LOCK(?,0), GET_LOCK(?,0), ... */
static int acquire_batch(lock_registry *r, const char *const *names, const size_t *idx, size_t n,
                         bool *got)
{
    size_t sqlcap = 16 + n * 18;
    char *sql = malloc(sqlcap);
    db_value *p = calloc(n, sizeof *p);
    char(*shortn)[LOCK_NAME_MAX + 1] = calloc(n, sizeof *shortn);
    int rc = 0;
    if (!sql || !p || !shortn) {
        rc = -1;
        goto out;
    }
    size_t len = (size_t)snprintf(sql, sqlcap, "SELECT ");
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(sql + len, sqlcap - len, i ? ", GET_LOCK(?, 0)" : "GET_LOCK(?, 0)");
        lock_name_shorten(names[idx[i]], shortn[i]);
        p[i] = db_text(shortn[i]);
    }
    db_result *res = NULL;
    char e[256];
    if (q(r, sql, p, n, &res, e, sizeof e) || res->nrows != 1) {
        db_result_free(res);
        rc = -1;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const char *v = db_get(res, 0, i);
        if (!v) { /* NULL: the session is in doubt */
            rc = -1;
            break;
        }
        if (strcmp(v, "1") == 0) {
            strset_add(&r->held, names[idx[i]]);
            got[idx[i]] = true;
        }
    }
    db_result_free(res);
out:
    free(sql);
    free(p);
    free(shortn);
    return rc;
}

int lock_registry_acquire_many(lock_registry *r, const char *const *names, size_t n, bool *got)
{
    for (size_t i = 0; i < n; i++)
        got[i] = false;
    if (!r->conn)
        return LOCK_DOWN;
    size_t *todo = calloc(n ? n : 1, sizeof *todo);
    size_t nt = 0;
    int held = 0;
    strset seen = {0};
    for (size_t i = 0; i < n; i++) {
        if (strset_has(&r->held, names[i]))
            got[i] = true; /* never a second GET_LOCK on a name we hold */
        else if (strset_add(&seen, names[i]))
            todo[nt++] = i;
    }
    for (size_t off = 0; off < nt; off += ACQUIRE_BATCH) {
        size_t k = nt - off < ACQUIRE_BATCH ? nt - off : ACQUIRE_BATCH;
        if (acquire_batch(r, names, todo + off, k, got) != 0) {
            go_down(r);
            held = LOCK_DOWN;
            break;
        }
    }
    strset_clear(&seen);
    free(todo);
    if (held == LOCK_DOWN) {
        for (size_t i = 0; i < n; i++)
            got[i] = false;
        return LOCK_DOWN;
    }
    for (size_t i = 0; i < n; i++) {
        if (!got[i] && strset_has(&r->held, names[i])) /* duplicate in the input */
            got[i] = true;
        held += got[i];
    }
    return held;
}

int lock_registry_interrupt(lock_registry *r, uint64_t connection_id)
{
    if (!r->conn)
        return LOCK_DOWN;
    db_value p[] = {db_int((long long)connection_id)};
    char e[256];
    unsigned rc = q(r, "KILL QUERY ?", p, 1, NULL, e, sizeof e);
    if (rc && db_errno_is_connection(rc)) {
        go_down(r);
        return LOCK_DOWN;
    }
    return 0; /* no such thread (it ended meanwhile): nothing to end */
}

int lock_registry_release(lock_registry *r, const char *name)
{
    if (!r->conn)
        return LOCK_DOWN;
    if (!strset_has(&r->held, name))
        return 0;
    char shortn[LOCK_NAME_MAX + 1], e[256];
    lock_name_shorten(name, shortn);
    db_value p[] = {db_text(shortn)};
    db_result *res = NULL;
    if (q(r, "SELECT RELEASE_LOCK(?)", p, 1, &res, e, sizeof e)) {
        go_down(r);
        return LOCK_DOWN;
    }
    const char *v = db_get(res, 0, 0);
    int released = v && strcmp(v, "1") == 0;
    db_result_free(res);
    strset_del(&r->held, name);
    return released;
}

int lock_registry_release_many(lock_registry *r, const char *const *names, size_t n)
{
    enum { RELEASE_BATCH = 1000 };
    if (!r->conn)
        return LOCK_DOWN;
    int released = 0;
    char(*shortn)[LOCK_NAME_MAX + 1] = malloc(RELEASE_BATCH * sizeof *shortn);
    db_value *p = malloc(RELEASE_BATCH * sizeof *p);
    const char **which = malloc(RELEASE_BATCH * sizeof *which);
    if (!shortn || !p || !which)
        abort();
    buf sql = {0};
    strset seen = {0};
    size_t i = 0;
    while (i < n && released >= 0) {
        size_t k = 0;
        for (; i < n && k < RELEASE_BATCH; i++) {
            if (!strset_has(&r->held, names[i]) || !strset_add(&seen, names[i]))
                continue; /* not ours, or twice in the input */
            lock_name_shorten(names[i], shortn[k]);
            p[k] = db_text(shortn[k]);
            which[k++] = names[i];
        }
        if (!k)
            break;
        sql.len = 0;
        buf_puts(&sql, "SELECT ");
        for (size_t j = 0; j < k; j++)
            buf_puts(&sql, j ? ", RELEASE_LOCK(?)" : "RELEASE_LOCK(?)");
        db_result *res = NULL;
        char e[256];
        if (q(r, sql.p, p, k, &res, e, sizeof e)) {
            go_down(r);
            released = LOCK_DOWN;
            break;
        }
        for (size_t j = 0; j < k; j++) {
            const char *v = db_get(res, 0, j);
            released += v && strcmp(v, "1") == 0;
            strset_del(&r->held, which[j]);
        }
        db_result_free(res);
    }
    buf_free(&sql);
    strset_clear(&seen);
    free(shortn);
    free(p);
    free(which);
    return released;
}

void lock_registry_pin(lock_registry *r, const char *name)
{
    free(r->pinned);
    r->pinned = name ? strdup(name) : NULL;
}

void lock_registry_release_all(lock_registry *r)
{
    if (!r->conn)
        return;
    bool keep = r->pinned && strset_has(&r->held, r->pinned);
    char e[256];
    if (q(r, "SELECT RELEASE_ALL_LOCKS()", NULL, 0, NULL, e, sizeof e))
        go_down(r);
    strset_clear(&r->held);
    if (keep && r->conn && lock_registry_acquire(r, r->pinned) != 1)
        go_down(r); /* nobody else may hold it: our name; fail closed */
}

int lock_registry_validate(lock_registry *r)
{
    if (!r->conn)
        return 0;
    db_result *res = NULL;
    char e[256];
    if (q(r, "SELECT CONNECTION_ID()", NULL, 0, &res, e, sizeof e)) {
        go_down(r);
        return 0;
    }
    uint64_t id = (uint64_t)db_get_int(res, 0, 0, 0);
    db_result_free(res);
    if (id != r->conn_id) { /* a different session holds none of our locks */
        go_down(r);
        return 0;
    }
    return 1;
}

int lock_registry_tick(lock_registry *r, uint64_t now_ms, char *err, size_t errlen)
{
    int ev = 0;
    if (r->conn) {
        if (now_ms - r->last_checked_ms < r->o.validate_interval_ms)
            return 0;
        r->last_checked_ms = now_ms;
        if (lock_registry_validate(r))
            return 0;
    }
    /* Lost here, or by a statement (acquire, release) since the last tick:
     * reported once either way. */
    if (r->losses > r->losses_reported) {
        r->losses_reported = r->losses;
        snprintf(err, errlen, "lock session lost: every lock is released");
        ev |= LOCK_EV_LOST;
        r->next_attempt_ms = now_ms; /* first reconnect right away */
        r->backoff_ms = r->o.backoff_initial_ms;
    }
    if (now_ms < r->next_attempt_ms)
        return ev;
    int rc = lock_registry_connect(r, err, errlen);
    if (rc == LOCK_REFUSED)
        return LOCK_REFUSED;
    if (rc == 0) {
        r->last_checked_ms = now_ms;
        r->busy_reported = false;
        return ev | LOCK_EV_RECONNECTED;
    }
    /* Jitter: servers that lost their sessions together (a database restart,
     * a busy database) do not all come back in the same instant. */
    unsigned wait = db_jitter_ms(r->backoff_ms);
    r->next_attempt_ms = now_ms + wait;
    r->backoff_ms =
        r->backoff_ms * 2 > r->o.backoff_max_ms ? r->o.backoff_max_ms : r->backoff_ms * 2;
    if (!r->busy) {
        r->busy_reported = false;
    } else if (!r->busy_reported) { /* once per busy period; err holds the connect's message */
        r->busy_reported = true;
        size_t len = strlen(err);
        snprintf(err + len, errlen > len ? errlen - len : 0,
                 "; the lock session tries again in %.1f s, backing off while it is busy",
                 wait / 1000.0);
        ev |= LOCK_EV_BUSY;
    }
    return ev;
}

bool lock_registry_busy(const lock_registry *r) { return r && !r->conn && r->busy; }
uint64_t lock_registry_retry_at(const lock_registry *r) { return r ? r->next_attempt_ms : 0; }
