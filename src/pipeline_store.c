#include "pipeline_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "buf.h"
#include "lock_names.h"
#include "lock_registry.h"
#include "log.h"
#include "utf8.h"

#define PIPELINE_COLUMNS                                                                           \
    "id, namespace, application, environment, status, deploy_mode, artifact, source, "             \
    "message, trigger_type, deploy_requested_at, created_at, status_changed_at, driven_by, "       \
    "TIMESTAMPDIFF(MICROSECOND, status_changed_at, NOW(6)) / 1e6, hold, override_at, rollback_of"

/* The column after PIPELINE_COLUMNS (a list's lock owner). */
#define PIPELINE_NCOLUMNS 18

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

void pipeline_clear(pipeline *p)
{
    if (!p)
        return;
    free(p->namespace);
    free(p->application);
    free(p->environment);
    free(p->artifact);
    free(p->source);
    free(p->message);
    free(p->trigger_type);
    free(p->deploy_requested_at);
    free(p->created_at);
    free(p->status_changed_at);
    free(p->driven_by);
    free(p->hold);
    free(p->override_at);
    free(p->rollback_of);
    free(p->actor);
    memset(p, 0, sizeof *p);
}

void pipeline_list_free(pipeline *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        pipeline_clear(&v[i]);
    free(v);
}

void pipeline_events_free(pipeline_event_row *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].event_type);
        free(v[i].from_status);
        free(v[i].to_status);
        free(v[i].message);
        free(v[i].server);
        free(v[i].actor);
        free(v[i].reason);
        free(v[i].created_at);
    }
    free(v);
}

static void row_to_pipeline(const db_result *r, size_t row, pipeline *p)
{
    memset(p, 0, sizeof *p);
    snprintf(p->id, sizeof p->id, "%s", db_get(r, row, 0));
    p->namespace = dup_or_null(db_get(r, row, 1));
    p->application = dup_or_null(db_get(r, row, 2));
    p->environment = dup_or_null(db_get(r, row, 3));
    if (pipeline_status_parse(db_get(r, row, 4), &p->status) != 0)
        p->status = PS_ERROR; /* the CHECK constraint makes this unreachable */
    const char *mode = db_get(r, row, 5);
    p->manual = mode && strcmp(mode, "manual") == 0;
    p->artifact = dup_or_null(db_get(r, row, 6));
    p->source = dup_or_null(db_get(r, row, 7));
    p->message = dup_or_null(db_get(r, row, 8));
    p->trigger_type = dup_or_null(db_get(r, row, 9));
    p->deploy_requested_at = dup_or_null(db_get(r, row, 10));
    p->created_at = dup_or_null(db_get(r, row, 11));
    p->status_changed_at = dup_or_null(db_get(r, row, 12));
    p->driven_by = dup_or_null(db_get(r, row, 13));
    const char *age = db_get(r, row, 14);
    p->status_age_s = age ? strtod(age, NULL) : 0;
    p->hold = dup_or_null(db_get(r, row, 15));
    p->override_at = dup_or_null(db_get(r, row, 16));
    p->rollback_of = dup_or_null(db_get(r, row, 17));
}

void pipeline_new_id(char *out, size_t len)
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char rnd[64];
    if (len > sizeof rnd)
        len = sizeof rnd;
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom(rnd + got, len - got, 0);
        if (n > 0)
            got += (size_t)n;
    }
    /* 256 % 36 = 4: a bias of 1 in 64 on the first four letters, harmless for ids. */
    for (size_t i = 0; i < len; i++)
        out[i] = alphabet[rnd[i] % 36];
    out[len] = '\0';
}

/*
 * The fence's second half: the lock that names the transition's driver
 * ("oops:server:DRIVER", as its lock session holds it), which the fencing
 * session must hold too. A connection id alone is not enough: a database
 * restart numbers sessions from 1 again, so a server that has not yet
 * noticed its lock session is gone may fence with an id that is now another
 * server's lock session, holding that very pipeline's lock. NULL (no second
 * half) without a fence or a driver.
 */
static const char *fence_lock(uint64_t lock_session, const char *driver,
                              char out[LOCK_NAME_MAX + 1])
{
    if (!lock_session || !driver || !*driver)
        return NULL;
    char full[256];
    snprintf(full, sizeof full, OOPS_LOCK_SERVER_PREFIX "%s", driver);
    lock_name_shorten(full, out);
    return out;
}

int pipeline_reason_check(const char *what, const char *reason, char *err, size_t errlen)
{
    size_t n = reason ? strlen(reason) : 0;
    if (n == 0 || n > PIPELINE_REASON_MAX) {
        snprintf(err, errlen, "%s must be 1 to %d bytes, not %zu", what, PIPELINE_REASON_MAX, n);
        return -1;
    }
    const unsigned char *p = (const unsigned char *)reason;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq(p + i, n - i, NULL);
        if (!len) {
            snprintf(err, errlen, "%s is not valid UTF-8 (byte %zu)", what, i + 1);
            return -1;
        }
        /* C0 controls, DEL and the C1 controls (U+0080..U+009F: c2 80..c2 9f) */
        if ((len == 1 && (p[i] < 0x20 || p[i] == 0x7f)) ||
            (len == 2 && p[i] == 0xc2 && p[i + 1] < 0xa0)) {
            snprintf(err, errlen, "%s holds a control character (byte %zu)", what, i + 1);
            return -1;
        }
        i += len;
    }
    return 0;
}

enum { AUDIT_DETAIL_MAX = 300 };

/* The audit row of an operator's action on pipeline `id` (its application
 * and environment read from it), or of one with no pipeline (ns, app, env
 * given, id NULL or not found). */
static unsigned audit_insert(db_conn *c, const pipeline_operator *op, const char *action,
                             const char *id, const char *ns, const char *app, const char *env,
                             const char *outcome, const char *detail, const char *via, char *err,
                             size_t errlen)
{
    /* detail is VARCHAR(300): cut at a character boundary, so a strict
     * sql_mode never refuses the row for half a character. */
    char cut[AUDIT_DETAIL_MAX + 1];
    if (detail)
        snprintf(cut, sizeof cut, "%.*s", (int)utf8_cut_len(detail, AUDIT_DETAIL_MAX), detail);
    db_value p[] = {db_text(op->actor),
                    db_text(action),
                    db_text(id),
                    db_text(op->reason),
                    db_text(outcome),
                    db_text(detail ? cut : NULL),
                    db_text(via ? via : "unknown"),
                    db_text(id)};
    db_result *r = NULL;
    unsigned rc = 0;
    if (id && !ns) {
        rc = db_exec(c,
                     "INSERT INTO operator_action (actor, action, pipeline_id, namespace, "
                     "application, environment, reason, outcome, detail, via, created_at) "
                     "SELECT ?, ?, ?, namespace, application, environment, ?, ?, ?, ?, NOW(6) "
                     "FROM pipeline WHERE id = ?",
                     p, 8, &r, err, errlen);
        if (rc)
            return rc;
        bool done = r->affected == 1;
        db_result_free(r);
        if (done)
            return 0;
    }
    db_value q[] = {db_text(op->actor),
                    db_text(action),
                    db_text(id),
                    db_text(ns),
                    db_text(app),
                    db_text(env),
                    db_text(op->reason),
                    db_text(outcome),
                    db_text(detail ? cut : NULL),
                    db_text(via ? via : "unknown")};
    return db_exec(c,
                   "INSERT INTO operator_action (actor, action, pipeline_id, namespace, "
                   "application, environment, reason, outcome, detail, via, created_at) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NOW(6))",
                   q, 10, NULL, err, errlen);
}

static unsigned insert_event_as(db_conn *c, const char *id, const char *type, const char *from,
                                pipeline_status to, const char *message, const char *actor,
                                uint64_t lock_session, const pipeline_operator *op, char *err,
                                size_t errlen)
{
    db_value p[] = {db_text(id),
                    db_text(type ? type : pipeline_event_type(to)),
                    db_text(from),
                    db_text(pipeline_status_name(to)),
                    db_text(message),
                    db_text(actor ? actor : "unknown"),
                    lock_session ? db_int((long long)lock_session) : db_null(),
                    db_text(op ? op->actor : NULL),
                    db_text(op ? op->reason : NULL)};
    db_result *r = NULL;
    unsigned rc = db_exec(c,
                          "INSERT INTO pipeline_event (pipeline_id, event_type, from_status, "
                          "to_status, message, server, lock_session, actor, reason, created_at) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NOW(6))",
                          p, 9, &r, err, errlen);
    if (rc)
        return rc;
    /* The notification, in the same transaction: never lost across a crash. */
    long long event = (long long)r->insert_id;
    db_result_free(r);
    char event_id[64];
    snprintf(event_id, sizeof event_id, "pipeline-event-%lld", event);
    db_value o[] = {db_text(event_id), db_int(event)};
    return db_exec(c, "INSERT INTO outbox (event_id, kind, ref_id) VALUES (?, 'pipeline', ?)", o, 2,
                   NULL, err, errlen);
}

static unsigned insert_event(db_conn *c, const char *id, const char *from, pipeline_status to,
                             const char *message, const char *actor, uint64_t lock_session,
                             char *err, size_t errlen)
{
    return insert_event_as(c, id, NULL, from, to, message, actor, lock_session, NULL, err, errlen);
}

static unsigned create_tx(db_conn *c, const pipeline_new *n, const char *out_id,
                          const char *trigger, const char *message, char *e, size_t elen);

int pipeline_store_create(db_conn *c, const pipeline_new *n, char out_id[25], char *err,
                          size_t errlen)
{
    /* The policy's own rule for names (pipeline_state.h): whatever creates
     * a pipeline, "SHOP", "shop " or "--force" never reaches the table. */
    if (pipeline_label_check("namespace", n->namespace, err, errlen) ||
        pipeline_label_check("application", n->application, err, errlen) ||
        pipeline_label_check("environment", n->environment, err, errlen))
        return PSTORE_BAD;
    if (n->artifact && strlen(n->artifact) > 255) {
        snprintf(err, errlen, "artifact is longer than 255 characters");
        return PSTORE_BAD;
    }
    const char *trigger = n->trigger ? n->trigger : "release";
    const char *message = n->message ? n->message : "Pipeline created.";
    if (strcmp(trigger, "release") && strcmp(trigger, "rollback")) {
        snprintf(err, errlen, "trigger \"%s\" is not release or rollback", trigger);
        return PSTORE_BAD;
    }
    char e[512];
    pipeline_new_id(out_id, 12);
    unsigned rc;
    /* A deadlock victim was rolled back whole: tried again, twice at most
     * (a create races the servers' transitions on the event and outbox
     * indexes). */
    for (int attempt = 0;; attempt++) {
        rc = create_tx(c, n, out_id, trigger, message, e, sizeof e);
        if (rc == 0)
            return 0;
        db_rollback(c);
        if (rc != DB_ER_LOCK_DEADLOCK || attempt == 2)
            break;
    }
    if (rc == DB_ER_DUP_ENTRY) {
        snprintf(err, errlen, "an unfinished pipeline already exists for %s/%s in %s", n->namespace,
                 n->application, n->environment);
        return PSTORE_EXISTS;
    }
    if (rc == 4025 /* ER_CONSTRAINT_FAILED: only source can fail after the checks above */) {
        snprintf(err, errlen, "source is not valid JSON");
        return PSTORE_BAD;
    }
    snprintf(err, errlen, "%s", e);
    return PSTORE_DB;
}

/* The create's transaction: 0, or the error number (e says why); the caller
 * rolls back. */
static unsigned create_tx(db_conn *c, const pipeline_new *n, const char *out_id,
                          const char *trigger, const char *message, char *e, size_t elen)
{
    unsigned rc = db_begin(c, e, elen);
    if (rc)
        return rc;
    db_value p[] = {db_text(out_id),
                    db_text(n->namespace),
                    db_text(n->application),
                    db_text(n->environment),
                    db_text(n->manual ? "manual" : "auto"),
                    db_text(n->artifact),
                    db_text(n->source),
                    db_text(trigger),
                    db_text(message)};
    rc = db_exec(c,
                 "INSERT INTO pipeline (id, namespace, application, environment, status, "
                 "deploy_mode, artifact, source, trigger_type, message, created_at, "
                 "status_changed_at) VALUES (?, ?, ?, ?, 'INITIALIZED', ?, ?, ?, ?, ?, "
                 "NOW(6), NOW(6))",
                 p, 9, NULL, e, elen);
    if (rc == 0)
        rc = insert_event_as(c, out_id, NULL, NULL, PS_INITIALIZED, message, n->actor, 0, n->op, e,
                             elen);
    if (rc == 0 && n->op)
        rc = audit_insert(c, n->op, strcmp(trigger, "rollback") ? "create" : "rollback", out_id,
                          n->namespace, n->application, n->environment, "done", NULL, n->actor, e,
                          elen);
    if (rc == 0)
        rc = db_commit(c, e, elen);
    return rc;
}

/* A transition's failure: PSTORE_EXISTS for the unfinished-pipeline index, else PSTORE_DB with
 * the database's message e. */
static int transition_failed(unsigned rc, const char *e, char *err, size_t errlen)
{
    if (rc == DB_ER_DUP_ENTRY) {
        snprintf(err, errlen,
                 "an unfinished pipeline already exists for this application and environment");
        return PSTORE_EXISTS;
    }
    snprintf(err, errlen, "%s", e);
    return PSTORE_DB;
}

/* The account may not CALL oops_transition (no EXECUTE grant, as before
 * schema 8): transitions use five statements from then on (said once). */
static bool call_refused;

bool pipeline_store_transition_calls(void) { return !call_refused; }

/* Whether from -> to is in the table; if not, err says "illegal transition A -> B". */
static bool transition_legal(pipeline_status from, pipeline_status to, char *err, size_t errlen)
{
    if (pipeline_transition_allowed(from, to))
        return true;
    snprintf(err, errlen, "illegal transition %s -> %s",
             pipeline_status_name(from) ? pipeline_status_name(from) : "?",
             pipeline_status_name(to) ? pipeline_status_name(to) : "?");
    return false;
}

/* The deploy slot of x->slot_env for pipeline id, inside the caller's
 * transaction (slot_env's rows exist: ensure_slots). The environment's slot
 * rows are locked first, so claims of one environment take turns; a slot is
 * free when it names nobody, this pipeline, or a pipeline no longer
 * DEPLOYING or ROLLING_OUT (read with a locking read: the latest status,
 * whatever this transaction's snapshot). A slot is taken only when fewer
 * pipelines wait ahead of this one (rollbacks first, then the oldest) than
 * slots are free. 0 with x->slot set when claimed (or held already), else
 * x->slot 0 (x->slots_in_use, x->slots_ahead say why); or an error number. */
static unsigned slot_claim(db_conn *c, const char *id, pipeline_transition_extra *x, char *e,
                           size_t elen)
{
    x->slot = 0;
    db_value p[2 + DEPLOY_SLOTS_MAX];
    p[0] = db_text(x->slot_env);
    p[1] = db_int(x->slot_count);
    db_result *slots = NULL, *r = NULL;
    unsigned rc = db_exec(c,
                          "SELECT slot, pipeline_id FROM deploy_slot WHERE environment = ? AND "
                          "slot <= ? ORDER BY slot FOR UPDATE",
                          p, 2, &slots, e, elen);
    if (rc)
        return rc;
    buf sql = {0};
    buf_puts(&sql,
             "SELECT id FROM pipeline WHERE status IN ('DEPLOYING','ROLLING_OUT') AND id IN (");
    size_t np = 0;
    for (size_t i = 0; i < slots->nrows; i++) {
        const char *h = db_get(slots, i, 1);
        if (h && strcmp(h, id)) {
            buf_puts(&sql, np ? ", ?" : "?");
            p[np++] = db_text(h);
        }
    }
    buf_puts(&sql, ") LOCK IN SHARE MODE");
    if (np)
        rc = db_exec(c, sql.p, p, np, &r, e, elen);
    buf_free(&sql);
    long long mine = 0, free_slot = 0;
    unsigned in_use = 0;
    for (size_t i = 0; !rc && i < slots->nrows; i++) {
        const char *h = db_get(slots, i, 1);
        bool busy = false;
        for (size_t k = 0; h && r && k < r->nrows; k++)
            busy = busy || strcmp(db_get(r, k, 0), h) == 0;
        if (h && !strcmp(h, id))
            mine = db_get_int(slots, i, 0, 0);
        else if (busy)
            in_use++;
        else if (!free_slot)
            free_slot = db_get_int(slots, i, 0, 0);
    }
    db_result_free(r);
    db_result_free(slots);
    x->slots_in_use = in_use;
    if (rc || mine) {
        x->slot = mine;
        return rc;
    }
    if (!free_slot)
        return 0;
    /* In line: the waiting ones (hold 'slot') ahead of this pipeline. */
    unsigned free_n = x->slot_count > in_use ? x->slot_count - in_use : 0;
    db_value q[] = {db_text(x->slot_env), db_text(id), db_text(id), db_text(id)};
    rc = db_exec(c,
                 "SELECT COUNT(*) FROM pipeline w, pipeline me WHERE w.hold = 'slot' AND "
                 "w.environment = ? AND w.status IN ('INITIALIZED','BUILD_SUCCEEDED') AND "
                 "w.id <> ? AND me.id = ? AND ((w.trigger_type = 'rollback') > "
                 "(me.trigger_type = 'rollback') OR ((w.trigger_type = 'rollback') = "
                 "(me.trigger_type = 'rollback') AND (w.created_at, w.id) < (me.created_at, ?)))",
                 q, 4, &r, e, elen);
    if (rc)
        return rc;
    x->slots_ahead = (unsigned)db_get_int(r, 0, 0, 0);
    db_result_free(r);
    if (x->slots_ahead >= free_n)
        return 0;
    db_value u[] = {db_text(id), db_text(x->slot_env), db_int(free_slot)};
    rc =
        db_exec(c,
                "UPDATE deploy_slot SET pipeline_id = ?, claimed_at = NOW(6) WHERE environment = ? "
                "AND slot = ?",
                u, 3, NULL, e, elen);
    if (!rc)
        x->slot = free_slot;
    return rc;
}

/* The environment's slot rows 1..count, made once (outside any
 * transaction: the insert's locks would make two claims deadlock). */
static unsigned ensure_slots(db_conn *c, const char *env, unsigned count, char *e, size_t elen)
{
    db_value p[2 * DEPLOY_SLOTS_MAX];
    buf sql = {0};
    buf_puts(&sql, "INSERT IGNORE INTO deploy_slot (environment, slot) VALUES ");
    for (unsigned k = 1; k <= count; k++) {
        buf_puts(&sql, k > 1 ? ", (?, ?)" : "(?, ?)");
        p[2 * (k - 1)] = db_text(env);
        p[2 * (k - 1) + 1] = db_int(k);
    }
    unsigned rc = db_exec(c, sql.p, p, 2 * count, NULL, e, elen);
    buf_free(&sql);
    return rc;
}

/* The automatic rollback of failed release id, inside the transaction that
 * failed it: a rollback pipeline to the live release (the newest SUCCEEDED
 * of its application and environment, with an artifact), unless id is not a
 * release (a rollback never triggers another) or a newer pipeline exists
 * for that target; and its CREATED event and outbox row. rollback_of is
 * UNIQUE: never two for one failure. 0 (x->rollback_id set when made, else
 * empty), or an error number. */
static unsigned rollback_create_in_tx(db_conn *c, const char *id, const char *actor,
                                      pipeline_transition_extra *x, char *e, size_t elen)
{
    char rid[25];
    pipeline_new_id(rid, 12);
    db_value p[] = {db_text(rid), db_text(x->rollback_message), db_text(id)};
    db_result *r = NULL;
    unsigned rc = db_exec(
        c,
        "INSERT INTO pipeline (id, namespace, application, environment, status, deploy_mode, "
        "artifact, source, trigger_type, message, rollback_of, created_at, status_changed_at) "
        "SELECT ?, l.namespace, l.application, l.environment, 'INITIALIZED', 'auto', l.artifact, "
        "l.source, 'rollback', ?, f.id, NOW(6), NOW(6) FROM pipeline f JOIN pipeline l ON "
        "l.namespace = f.namespace AND l.application = f.application AND l.environment = "
        "f.environment AND l.status = 'SUCCEEDED' AND l.artifact IS NOT NULL AND l.artifact <> '' "
        "WHERE f.id = ? AND f.trigger_type = 'release' AND NOT EXISTS (SELECT 1 FROM pipeline n "
        "WHERE n.namespace = f.namespace AND n.application = f.application AND n.environment = "
        "f.environment AND (n.created_at, n.id) > (f.created_at, f.id)) "
        "ORDER BY l.status_changed_at DESC, l.created_at DESC, l.id DESC LIMIT 1",
        p, 3, &r, e, elen);
    if (rc == DB_ER_DUP_ENTRY)
        return 0; /* made already, or another unfinished pipeline: none now */
    if (rc)
        return rc;
    bool made = r->affected == 1;
    db_result_free(r);
    if (!made)
        return 0;
    rc = insert_event(c, rid, NULL, PS_INITIALIZED, x->rollback_message, actor, 0, e, elen);
    if (!rc)
        snprintf(x->rollback_id, sizeof x->rollback_id, "%s", rid);
    return rc;
}

/* The transition as statements in one transaction (no procedure), with
 * x's parts when x is given: a deploy slot claimed before it, an automatic
 * rollback made after it. */
static int transition_tx(db_conn *c, const char *id, pipeline_status from, pipeline_status to,
                         const char *message, const char *driver, const char *actor,
                         uint64_t lock_session, pipeline_transition_extra *x, char *err,
                         size_t errlen)
{
    char e[512];
    unsigned rc = 0;
    if (x && x->slot_env && (rc = ensure_slots(c, x->slot_env, x->slot_count, e, sizeof e)))
        return transition_failed(rc, e, err, errlen);
    if (db_begin(c, err, errlen))
        return PSTORE_DB;
    db_result *r = NULL;
    long long fence = (long long)lock_session;
    char lock[LOCK_NAME_MAX + 1];
    const char *named = fence_lock(lock_session, driver, lock);
    int won = 0;
    if (x && x->slot_env) {
        rc = slot_claim(c, id, x, e, sizeof e);
        if (rc == 0 && !x->slot) {
            x->no_slot = true;
            db_rollback(c);
            return 0;
        }
    }
    db_value p[] = {db_text(pipeline_status_name(to)),
                    db_text(message),
                    db_text(driver),
                    db_text(id),
                    db_text(pipeline_status_name(from)),
                    db_int(fence),
                    db_int(fence),
                    db_text(named),
                    db_text(named),
                    db_int(fence)};
    if (!rc)
        rc = db_exec(c,
                     "UPDATE pipeline SET status = ?, message = ?, status_changed_at = NOW(6), "
                     "driven_by = COALESCE(?, driven_by) WHERE id = ? AND status = ? AND "
                     "(? = 0 OR IS_USED_LOCK(CONCAT('" OOPS_LOCK_PIPELINE_PREFIX "', id)) <=> ?) "
                     "AND (? IS NULL OR IS_USED_LOCK(?) <=> ?)",
                     p, 10, &r, e, sizeof e);
    if (rc == 0) {
        won = r->affected == 1;
        db_result_free(r);
        if (won)
            rc = insert_event_as(c, id, NULL, pipeline_status_name(from), to, message,
                                 actor ? actor : driver, lock_session, x ? x->op : NULL, e,
                                 sizeof e);
        if (won && !rc && x && x->op)
            rc = audit_insert(c, x->op, to == PS_STOPPED ? "stop" : "transition", id, NULL, NULL,
                              NULL, "done", NULL, actor ? actor : driver, e, sizeof e);
        if (won && !rc && x && x->rollback_message)
            rc = rollback_create_in_tx(c, id, actor ? actor : driver, x, e, sizeof e);
    }
    if (rc == 0 && !won) {
        db_rollback(c); /* not made: a slot claimed for it is not kept */
        return 0;
    }
    if (rc == 0)
        rc = db_commit(c, e, sizeof e);
    if (rc == 0)
        return won;
    db_rollback(c);
    if (x)
        x->rollback_id[0] = '\0', x->slot = 0;
    return transition_failed(rc, e, err, errlen);
}

int pipeline_store_transition_ex(db_conn *c, const char *id, pipeline_status from,
                                 pipeline_status to, const char *message, const char *driver,
                                 const char *actor, uint64_t lock_session,
                                 pipeline_transition_extra *x, char *err, size_t errlen)
{
    if (!transition_legal(from, to, err, errlen))
        return PSTORE_ILLEGAL;
    if (x && x->slot_env &&
        (x->slot_count < 1 || x->slot_count > DEPLOY_SLOTS_MAX || to != PS_DEPLOYING ||
         !pipeline_label_valid(x->slot_env))) {
        snprintf(err, errlen,
                 "a deploy slot is claimed for DEPLOYING, 1 to %d slots of an "
                 "environment named by a DNS label",
                 DEPLOY_SLOTS_MAX);
        return PSTORE_BAD;
    }
    if (x && x->rollback_message && to != PS_ERROR) {
        snprintf(err, errlen, "an automatic rollback follows a transition to ERROR only");
        return PSTORE_BAD;
    }
    return transition_tx(c, id, from, to, message, driver, actor, lock_session, x, err, errlen);
}

int pipeline_store_transition(db_conn *c, const char *id, pipeline_status from, pipeline_status to,
                              const char *message, const char *driver, const char *actor,
                              uint64_t lock_session, char *err, size_t errlen)
{
    if (!transition_legal(from, to, err, errlen))
        return PSTORE_ILLEGAL;
    if (call_refused)
        return transition_tx(c, id, from, to, message, driver, actor, lock_session, NULL, err,
                             errlen);
    /* One round trip: the update, its event and its outbox row in one
     * transaction inside the database (schema 8). With a lock session the
     * update is fenced: it counts only while that session holds the
     * pipeline's lock, so a server that lost its session (frozen, cut off)
     * and does not know it yet changes nothing. */
    char e[512], lock[LOCK_NAME_MAX + 1];
    db_result *r = NULL;
    db_value p[] = {db_text(id),
                    db_text(pipeline_status_name(from)),
                    db_text(pipeline_status_name(to)),
                    db_text(pipeline_event_type(to)),
                    db_text(message),
                    db_text(driver),
                    db_text(actor    ? actor
                            : driver ? driver
                                     : "unknown"),
                    db_int((long long)lock_session),
                    db_text(fence_lock(lock_session, driver, lock))};
    unsigned rc =
        db_exec(c, "CALL oops_transition2(?, ?, ?, ?, ?, ?, ?, ?, ?)", p, 9, &r, e, sizeof e);
    if (rc == 0) {
        int won = db_get_int(r, 0, 0, 0) == 1;
        db_result_free(r);
        return won;
    }
    if (rc == 1370 /* ER_PROCACCESS_DENIED_ERROR */ || rc == 1305 /* ER_SP_DOES_NOT_EXIST */) {
        call_refused = true;
        log_msg(LOG_WARN,
                "transitions take five statements instead of one: CALL oops_transition2 failed "
                "(%s); GRANT EXECUTE ON the database to this account (README \"Database "
                "accounts\")",
                e);
        return transition_tx(c, id, from, to, message, driver, actor, lock_session, NULL, err,
                             errlen);
    }
    return transition_failed(rc, e, err, errlen);
}

/* "CASE id WHEN ? THEN ? ... END" mapping ids[i] to vals[i], padded like db_batch_in_list. */
static void case_id(buf *sql, db_value *p, size_t *np, const char *const *ids,
                    const char *const *vals, size_t n, size_t shape)
{
    buf_puts(sql, "CASE id");
    for (size_t i = 0; i < shape; i++) {
        size_t k = i < n ? i : n - 1;
        buf_puts(sql, " WHEN ? THEN ?");
        p[(*np)++] = db_text(ids[k]);
        p[(*np)++] = db_text(vals[k]);
    }
    buf_puts(sql, " END");
}

/* One batch's transaction: its transitions, the ones it makes (`w*`), and
 * the statement being written. */
typedef struct {
    db_conn *c;
    long long fence;
    const char *fence_lock; /* fence_lock(): NULL or fence_name */
    char fence_name[LOCK_NAME_MAX + 1];
    size_t n, nw;
    const char *ids[PIPELINE_BATCH_MAX], *from[PIPELINE_BATCH_MAX], *to[PIPELINE_BATCH_MAX];
    bool won[PIPELINE_BATCH_MAX];
    const char *wid[PIPELINE_BATCH_MAX], *wfrom[PIPELINE_BATCH_MAX], *wto[PIPELINE_BATCH_MAX],
        *wmsg[PIPELINE_BATCH_MAX], *wtype[PIPELINE_BATCH_MAX];
    buf sql;
    db_value *p; /* room for the largest statement */
    size_t np;
    char *e;
    size_t elen;
} batch;

static void batch_sql(batch *b, const char *text)
{
    b->sql.len = 0;
    b->np = 0;
    buf_puts(&b->sql, text);
}

/* " AND (? = 0 OR IS_USED_LOCK(CONCAT(prefix, id)) <=> ?) AND (? IS NULL OR
 * IS_USED_LOCK(?) <=> ?)": the fence, both halves (fence_lock). */
static void batch_fence(batch *b)
{
    buf_puts(&b->sql,
             " AND (? = 0 OR IS_USED_LOCK(CONCAT('" OOPS_LOCK_PIPELINE_PREFIX "', id)) <=> ?)"
             " AND (? IS NULL OR IS_USED_LOCK(?) <=> ?)");
    b->p[b->np++] = db_int(b->fence);
    b->p[b->np++] = db_int(b->fence);
    b->p[b->np++] = db_text(b->fence_lock);
    b->p[b->np++] = db_text(b->fence_lock);
    b->p[b->np++] = db_int(b->fence);
}

/* Which ones it makes: the rows in their `from` status and (fenced) whose
 * lock our session holds, locked until the commit. Sets won and w*. */
static unsigned batch_choose(batch *b, const pipeline_transition_req *v)
{
    db_result *r = NULL;
    batch_sql(b, "SELECT id FROM pipeline WHERE id");
    size_t shape = db_batch_shape(b->n);
    db_batch_in_list(&b->sql, b->p, &b->np, b->ids, b->n, shape);
    buf_puts(&b->sql, " AND status = ");
    case_id(&b->sql, b->p, &b->np, b->ids, b->from, b->n, shape);
    batch_fence(b);
    buf_puts(&b->sql, " FOR UPDATE");
    unsigned rc = db_exec(b->c, b->sql.p, b->p, b->np, &r, b->e, b->elen);
    for (size_t row = 0; !rc && row < r->nrows; row++) {
        const char *id = db_get(r, row, 0);
        for (size_t i = 0; id && i < b->n; i++) {
            if (!b->won[i] && strcmp(b->ids[i], id) == 0) {
                b->won[i] = true;
                break;
            }
        }
    }
    db_result_free(r);
    for (size_t i = 0; !rc && i < b->n; i++) {
        if (b->won[i]) {
            b->wid[b->nw] = b->ids[i];
            b->wfrom[b->nw] = b->from[i];
            b->wto[b->nw] = b->to[i];
            b->wmsg[b->nw] = v[i].message ? v[i].message : "";
            b->wtype[b->nw] = pipeline_event_type(v[i].to);
            b->nw++;
        }
    }
    return rc;
}

/* The update, of exactly the rows chosen (still fenced: a session lost
 * since the read changes fewer, and the whole batch is made one by one). */
static unsigned batch_update(batch *b, const char *driver)
{
    db_result *r = NULL;
    size_t ws = db_batch_shape(b->nw);
    batch_sql(b, "UPDATE pipeline SET status = ");
    case_id(&b->sql, b->p, &b->np, b->wid, b->wto, b->nw, ws);
    buf_puts(&b->sql, ", message = ");
    case_id(&b->sql, b->p, &b->np, b->wid, b->wmsg, b->nw, ws);
    buf_puts(&b->sql, ", status_changed_at = NOW(6), driven_by = COALESCE(?, driven_by) WHERE id");
    b->p[b->np++] = db_text(driver);
    db_batch_in_list(&b->sql, b->p, &b->np, b->wid, b->nw, ws);
    buf_puts(&b->sql, " AND status = ");
    case_id(&b->sql, b->p, &b->np, b->wid, b->wfrom, b->nw, ws);
    batch_fence(b);
    unsigned rc = db_exec(b->c, b->sql.p, b->p, b->np, &r, b->e, b->elen);
    if (!rc && r->affected != b->nw) {
        snprintf(b->e, b->elen, "the batch changed %llu rows of %zu",
                 (unsigned long long)r->affected, b->nw);
        rc = 1;
    }
    db_result_free(r);
    return rc;
}

/* Their events: multi-row INSERT ... VALUES in chunks of a power of two (a
 * few statement shapes). Not INSERT ... SELECT: InnoDB holds a table's
 * AUTO-INC lock for the whole of such a "bulk" insert, against every other
 * server's transitions. *first_event: the first one's id. */
static unsigned batch_events(batch *b, const char *actor, uint64_t *first_event)
{
    for (size_t done = 0; done < b->nw;) {
        size_t k = db_batch_chunk(b->nw - done, PIPELINE_BATCH_MAX);
        batch_sql(b, "INSERT INTO pipeline_event (pipeline_id, event_type, from_status, "
                     "to_status, message, server, lock_session, created_at) VALUES ");
        for (size_t i = done; i < done + k; i++) {
            buf_puts(&b->sql, i > done ? ", (?, ?, ?, ?, ?, ?, NULLIF(?, 0), NOW(6))"
                                       : "(?, ?, ?, ?, ?, ?, NULLIF(?, 0), NOW(6))");
            const char *vals[] = {b->wid[i], b->wtype[i], b->wfrom[i],
                                  b->wto[i], b->wmsg[i],  actor};
            for (size_t j = 0; j < sizeof vals / sizeof *vals; j++)
                b->p[b->np++] = db_text(vals[j]);
            b->p[b->np++] = db_int(b->fence);
        }
        db_result *r = NULL;
        unsigned rc = db_exec(b->c, b->sql.p, b->p, b->np, &r, b->e, b->elen);
        if (!rc && !done)
            *first_event = r->insert_id;
        db_result_free(r);
        if (rc)
            return rc;
        done += k;
    }
    return 0;
}

/* Their notifications: the events' ids read back (nobody else writes events
 * for rows we hold locked, and ours are the newest), one outbox row each. */
static unsigned batch_outbox(batch *b, uint64_t first_event)
{
    db_result *ev = NULL;
    batch_sql(b, "SELECT id FROM pipeline_event WHERE pipeline_id");
    db_batch_in_list(&b->sql, b->p, &b->np, b->wid, b->nw, db_batch_shape(b->nw));
    buf_puts(&b->sql, " AND id >= ?");
    b->p[b->np++] = db_int((long long)first_event);
    unsigned rc = db_exec(b->c, b->sql.p, b->p, b->np, &ev, b->e, b->elen);
    if (!rc && ev->nrows != b->nw) {
        snprintf(b->e, b->elen, "the batch read %zu events of %zu", ev->nrows, b->nw);
        rc = 1;
    }
    for (size_t done = 0; !rc && done < b->nw;) {
        size_t k = db_batch_chunk(b->nw - done, PIPELINE_BATCH_MAX);
        batch_sql(b, "INSERT INTO outbox (event_id, kind, ref_id) VALUES ");
        for (size_t i = done; i < done + k; i++) {
            buf_puts(&b->sql, i > done ? ", (CONCAT('pipeline-event-', ?), 'pipeline', ?)"
                                       : "(CONCAT('pipeline-event-', ?), 'pipeline', ?)");
            b->p[b->np++] = db_text(db_get(ev, i, 0));
            b->p[b->np++] = db_text(db_get(ev, i, 0));
        }
        rc = db_exec(b->c, b->sql.p, b->p, b->np, NULL, b->e, b->elen);
        done += k;
    }
    db_result_free(ev);
    return rc;
}

/* One batch of n (2..PIPELINE_BATCH_MAX) in one transaction: 0 with every
 * rc set, or an error number (rolled back, nothing set). */
static unsigned batch_tx(db_conn *c, pipeline_transition_req *v, size_t n, const char *driver,
                         const char *actor, uint64_t lock_session, char *e, size_t elen)
{
    batch *b = calloc(1, sizeof *b);
    /* Enough for the largest statement: the UPDATE's 3 CASEs of 2 values and
     * 1 list per row, or the events' 7 values per row. */
    if (!b || !(b->p = malloc((8 * PIPELINE_BATCH_MAX + 16) * sizeof *b->p)))
        abort();
    *b = (batch){.c = c, .fence = (long long)lock_session, .n = n, .p = b->p, .e = e, .elen = elen};
    b->fence_lock = fence_lock(lock_session, driver, b->fence_name);
    for (size_t i = 0; i < n; i++) {
        b->ids[i] = v[i].id;
        b->from[i] = pipeline_status_name(v[i].from);
        b->to[i] = pipeline_status_name(v[i].to);
    }
    uint64_t first_event = 0;
    unsigned rc = db_begin(c, e, elen);
    if (!rc)
        rc = batch_choose(b, v);
    if (!rc && b->nw)
        rc = batch_update(b, driver);
    if (!rc && b->nw)
        rc = batch_events(b, actor ? actor : driver ? driver : "unknown", &first_event);
    if (!rc && b->nw)
        rc = batch_outbox(b, first_event);
    if (!rc)
        rc = db_commit(c, e, elen);
    if (rc)
        db_rollback(c);
    for (size_t i = 0; !rc && i < n; i++)
        v[i].rc = b->won[i] ? 1 : 0;
    buf_free(&b->sql);
    free(b->p);
    free(b);
    return rc;
}

void pipeline_store_transitions(db_conn *c, pipeline_transition_req *v, size_t n,
                                const char *driver, const char *actor, uint64_t lock_session)
{
    while (n > PIPELINE_BATCH_MAX) {
        pipeline_store_transitions(c, v, PIPELINE_BATCH_MAX, driver, actor, lock_session);
        v += PIPELINE_BATCH_MAX;
        n -= PIPELINE_BATCH_MAX;
    }
    bool one_by_one = n < 2;
    for (size_t i = 0; i < n && !one_by_one; i++) {
        if (!pipeline_transition_allowed(v[i].from, v[i].to) || !v[i].id)
            one_by_one = true; /* answered below, each with its own error */
        for (size_t k = 0; k < i && !one_by_one; k++)
            if (strcmp(v[i].id, v[k].id) == 0)
                one_by_one = true; /* one pipeline twice: in order, one at a time */
    }
    if (!one_by_one) {
        char e[512];
        unsigned rc = batch_tx(c, v, n, driver, actor, lock_session, e, sizeof e);
        if (rc == 0)
            return;
        log_msg(LOG_INFO, "a batch of %zu transitions is made one by one: %s", n, e);
    }
    for (size_t i = 0; i < n; i++) {
        v[i].rc = pipeline_store_transition(c, v[i].id, v[i].from, v[i].to, v[i].message, driver,
                                            actor, lock_session, v[i].err, sizeof v[i].err);
        v[i].last_error = v[i].rc < 0 ? db_last_error(c) : 0;
    }
}

static void transition_batch(db_calls *s, db_conn *conn, db_call **calls, size_t n)
{
    pipeline_transition_req v[PIPELINE_BATCH_MAX];
    pipeline_transition_call *first = (pipeline_transition_call *)calls[0];
    for (size_t i = 0; i < n; i++)
        v[i] = ((pipeline_transition_call *)calls[i])->req;
    uint64_t fence = first->fence ? first->fence(first->fence_ud) : 0;
    pipeline_store_transitions(conn, v, n, first->driver, first->actor, fence);
    for (size_t i = 0; i < n; i++) {
        pipeline_transition_call *t = (pipeline_transition_call *)calls[i];
        t->req = v[i];
        t->call.rc = v[i].rc < 0 ? (v[i].last_error ? v[i].last_error : 1) : 0;
    }
    if (n > 1 && s->metrics) {
        metrics_add(s->metrics, "oops_transition_batches_total", NULL, 1);
        metrics_add(s->metrics, "oops_transition_batched_total", NULL, (double)n);
    }
}

static const db_batch_kind transition_kind = {"transition", PIPELINE_BATCH_MAX, transition_batch};

void pipeline_transition_call_init(pipeline_transition_call *t)
{
    t->call.lane = DB_CALL_WORK;
    t->call.kind = &transition_kind;
    t->call.key = NULL;
    t->call.run = NULL;
}

static int get_one(db_conn *c, const char *sql, const db_value *p, size_t np, pipeline *out,
                   char *err, size_t errlen);

int pipeline_store_get(db_conn *c, const char *id, pipeline *out, char *err, size_t errlen)
{
    db_value p[] = {db_text(id)};
    return get_one(c, "SELECT " PIPELINE_COLUMNS " FROM pipeline WHERE id = ?", p, 1, out, err,
                   errlen);
}

/* " AND status IN (?, ...)": one placeholder per status of the mask (bit
 * per pipeline_status), its values appended to p; "" for mask 0. Returns the
 * text's length. */
static int status_in(unsigned mask, char *sql, size_t size, db_value *p, size_t *np)
{
    int len = 0;
    sql[0] = '\0';
    if (!mask)
        return 0;
    len += snprintf(sql + len, size - (size_t)len, " AND status IN (");
    bool first = true;
    for (int s = 0; s < PS__COUNT; s++) {
        if (!(mask & (1u << s)))
            continue;
        len += snprintf(sql + len, size - (size_t)len, first ? "?" : ", ?");
        first = false;
        p[(*np)++] = db_text(pipeline_status_name((pipeline_status)s));
    }
    len += snprintf(sql + len, size - (size_t)len, ")");
    return len;
}

/* The rows of r as pipelines (r freed); owner_col >= 0: lock_owner from that column. */
static int rows_to_list(db_result *r, int owner_col, pipeline **out, size_t *n)
{
    *n = r->nrows;
    *out = calloc(r->nrows ? r->nrows : 1, sizeof **out);
    for (size_t i = 0; i < r->nrows; i++) {
        row_to_pipeline(r, i, &(*out)[i]);
        if (owner_col >= 0)
            (*out)[i].lock_owner = db_get_int(r, i, (size_t)owner_col, 0);
    }
    db_result_free(r);
    return 0;
}

int pipeline_store_scan(db_conn *c, const pipeline_list_opts *o, pipeline **out, size_t *n,
                        char *err, size_t errlen)
{
    if (o->nids > PIPELINE_IDS_MAX) {
        snprintf(err, errlen, "at most %d ids in one list, not %zu", PIPELINE_IDS_MAX, o->nids);
        return PSTORE_DB;
    }
    /* The status list and the ids are bound as parameters: one placeholder each. */
    size_t size = 1280 + 3 * o->nids;
    char *sql = malloc(size);
    db_value *p = malloc((PS__COUNT + 6 + o->nids) * sizeof *p);
    if (!sql || !p)
        abort();
    size_t np = 0;
    int len = snprintf(
        sql, size, "SELECT " PIPELINE_COLUMNS "%s FROM pipeline WHERE 1 = 1",
        o->owned ? ", COALESCE(IS_USED_LOCK(CONCAT('" OOPS_LOCK_PIPELINE_PREFIX "', id)), 0)" : "");
    if (o->nids) {
        len += snprintf(sql + len, size - (size_t)len, " AND id IN (");
        for (size_t i = 0; i < o->nids; i++) {
            len += snprintf(sql + len, size - (size_t)len, i ? ", ?" : "?");
            p[np++] = db_text(o->ids[i]);
        }
        len += snprintf(sql + len, size - (size_t)len, ")");
    }
    len += status_in(o->status_mask, sql + len, size - (size_t)len, p, &np);
    if (o->min_age_s > 0) {
        len += snprintf(sql + len, size - (size_t)len,
                        " AND status_changed_at <= NOW(6) - INTERVAL ? MICROSECOND");
        p[np++] = db_int((long long)(o->min_age_s * 1e6));
    }
    if (o->after_created && o->after_id) {
        /* The next page after the last row read (keyset, in ORDER BY's order). */
        len += snprintf(sql + len, size - (size_t)len,
                        " AND (created_at > ? OR (created_at = ? AND id > ?))");
        p[np++] = db_text(o->after_created);
        p[np++] = db_text(o->after_created);
        p[np++] = db_text(o->after_id);
    }
    len += snprintf(sql + len, size - (size_t)len, " ORDER BY created_at, id");
    if (o->limit) {
        snprintf(sql + len, size - (size_t)len, " LIMIT ?");
        p[np++] = db_int((long long)o->limit);
    }
    db_result *r = NULL;
    unsigned rc = db_exec(c, sql, p, np, &r, err, errlen);
    free(sql);
    free(p);
    if (rc)
        return PSTORE_DB;
    return rows_to_list(r, o->owned ? PIPELINE_NCOLUMNS : -1, out, n);
}

int pipeline_store_free(db_conn *c, unsigned status_mask, bool deploy_requested, size_t limit,
                        char ***out, size_t *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    if (limit < 1 || limit > 65535 || !status_mask) {
        snprintf(err, errlen, "a free list takes one status or more and 1 to 65535 rows, not %zu",
                 limit);
        return PSTORE_DB;
    }
    /* One derived table per status, each index-ordered with its own LIMIT
     * (MariaDB reads a UNION part's own ORDER BY ... LIMIT with a sort
     * unless it is a derived table), merged in the same order. */
    char sql[4096];
    db_value p[2 * PS__COUNT + 1];
    size_t np = 0;
    int len = 0, parts = 0;
    for (int s = 0; s < PS__COUNT; s++) {
        if (!(status_mask & (1u << s)))
            continue;
        len += snprintf(sql + len, sizeof sql - (size_t)len,
                        "%sSELECT id, created_at FROM (SELECT id, created_at FROM pipeline"
                        " WHERE status = ?%s AND IS_USED_LOCK(CONCAT('" OOPS_LOCK_PIPELINE_PREFIX
                        "', id)) IS NULL ORDER BY created_at, id LIMIT ?) f%d",
                        parts ? " UNION ALL " : "",
                        deploy_requested && s == PS_BUILD_SUCCEEDED
                            ? " AND (deploy_requested_at IS NOT NULL OR deploy_mode = 'auto')"
                            : "",
                        s);
        p[np++] = db_text(pipeline_status_name((pipeline_status)s));
        p[np++] = db_int((long long)limit);
        parts++;
    }
    if (parts > 1) {
        snprintf(sql + len, sizeof sql - (size_t)len, " ORDER BY created_at, id LIMIT ?");
        p[np++] = db_int((long long)limit);
    }
    db_result *r = NULL;
    if (db_exec(c, sql, p, np, &r, err, errlen))
        return PSTORE_DB;
    *out = calloc(r->nrows ? r->nrows : 1, sizeof **out);
    if (!*out)
        abort();
    for (size_t i = 0; i < r->nrows; i++) {
        const char *id = db_get(r, i, 0);
        if (!((*out)[i] = strdup(id ? id : "")))
            abort();
    }
    *n = r->nrows;
    db_result_free(r);
    return 0;
}

void pipeline_ids_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

int pipeline_store_list(db_conn *c, unsigned status_mask, double min_age_s, size_t limit,
                        pipeline **out, size_t *n, char *err, size_t errlen)
{
    pipeline_list_opts o = {.status_mask = status_mask, .min_age_s = min_age_s, .limit = limit};
    return pipeline_store_scan(c, &o, out, n, err, errlen);
}

int pipeline_store_list_owned(db_conn *c, unsigned status_mask, pipeline **out, size_t *n,
                              char *err, size_t errlen)
{
    pipeline_list_opts o = {.status_mask = status_mask, .owned = true};
    return pipeline_store_scan(c, &o, out, n, err, errlen);
}

/* The filters of q as " AND ..." with their parameters appended to p; the
 * same text is used twice by the default (recent) form. */
static int query_filters(const pipeline_query *q, char *sql, size_t size, db_value *p, size_t *np)
{
    int len = 0;
    sql[0] = '\0';
    len += status_in(q->status_mask, sql + len, size - (size_t)len, p, np);
    const char *col[] = {"namespace", "application", "environment"};
    const char *val[] = {q->namespace, q->application, q->environment};
    for (int i = 0; i < 3; i++) {
        if (!val[i])
            continue;
        len += snprintf(sql + len, size - (size_t)len, " AND %s = ?", col[i]);
        p[(*np)++] = db_text(val[i]);
    }
    if (q->since_ms) {
        len += snprintf(sql + len, size - (size_t)len,
                        " AND created_at >= NOW(6) - INTERVAL ? MICROSECOND");
        p[(*np)++] = db_int((long long)(q->since_ms * 1000));
    }
    return len;
}

#define FINISHED_STATUSES "('SUCCEEDED', 'ERROR', 'STOPPED')"

int pipeline_store_query(db_conn *c, const pipeline_query *q, pipeline **out, size_t *n, char *err,
                         size_t errlen)
{
    *out = NULL;
    *n = 0;
    if ((q->namespace && pipeline_label_check("namespace", q->namespace, err, errlen)) ||
        (q->application && pipeline_label_check("application", q->application, err, errlen)) ||
        (q->environment && pipeline_label_check("environment", q->environment, err, errlen)))
        return PSTORE_BAD;
    char filters[512], sql[4096];
    db_value p[2 * (PS__COUNT + 4) + 2];
    size_t np = 0;
    query_filters(q, filters, sizeof filters, p, &np);
    /* the latest operator event's person, by ix_event_pipeline */
    const char *actor = q->actors
                            ? ", (SELECT e.actor FROM pipeline_event e WHERE e.pipeline_id = "
                              "pipeline.id AND e.actor IS NOT NULL ORDER BY e.id DESC LIMIT 1)"
                            : "";
    int len;
    if (q->recent) {
        /* Two index-served halves: the unfinished ones (ix_pipeline_status),
         * and the newest finished ones (created_at order), each filtered. The
         * second is a derived table: MariaDB 10.11 ignores the created_at
         * index for a UNION part's own ORDER BY ... LIMIT (a full scan and a
         * sort; tests/integration/explain.sh catches it). */
        size_t nf = np;
        for (size_t i = 0; i < nf; i++)
            p[np++] = p[i];
        len = snprintf(sql, sizeof sql,
                       "(SELECT " PIPELINE_COLUMNS
                       "%s FROM pipeline WHERE status NOT IN " FINISHED_STATUSES
                       "%s) UNION ALL (SELECT * FROM (SELECT " PIPELINE_COLUMNS
                       "%s FROM pipeline WHERE status IN " FINISHED_STATUSES
                       "%s ORDER BY created_at DESC, id DESC LIMIT ?) recent)",
                       actor, filters, actor, filters);
        p[np++] = db_int((long long)q->recent);
    } else {
        len = snprintf(sql, sizeof sql, "SELECT " PIPELINE_COLUMNS "%s FROM pipeline WHERE 1 = 1%s",
                       actor, filters);
    }
    len += snprintf(sql + len, sizeof sql - (size_t)len, " ORDER BY created_at DESC, id DESC");
    if (q->limit) {
        snprintf(sql + len, sizeof sql - (size_t)len, " LIMIT ?");
        p[np++] = db_int((long long)q->limit);
    }
    db_result *r = NULL;
    if (db_exec(c, sql, p, np, &r, err, errlen))
        return PSTORE_DB;
    /* the person, when asked for, is the column after PIPELINE_COLUMNS */
    char **actors = q->actors ? calloc(r->nrows ? r->nrows : 1, sizeof *actors) : NULL;
    if (q->actors && !actors)
        abort();
    for (size_t i = 0; actors && i < r->nrows; i++)
        actors[i] = dup_or_null(db_get(r, i, PIPELINE_NCOLUMNS));
    rows_to_list(r, -1, out, n);
    for (size_t i = 0; actors && i < *n; i++)
        (*out)[i].actor = actors[i];
    free(actors);
    return 0;
}

int pipeline_store_history(db_conn *c, const char *namespace, const char *application,
                           const char *environment, size_t limit, pipeline **out, size_t *n,
                           char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    if (pipeline_label_check("namespace", namespace, err, errlen) ||
        pipeline_label_check("application", application, err, errlen) ||
        pipeline_label_check("environment", environment, err, errlen))
        return PSTORE_BAD;
    db_value p[] = {db_text(namespace), db_text(application), db_text(environment),
                    db_int((long long)limit)};
    /* Unfinished first (rank 0), then SUCCEEDED in the order that makes the
     * first one the current release (pipeline_store_rollback_target). */
    db_result *r = NULL;
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT " PIPELINE_COLUMNS " FROM pipeline WHERE namespace = ? AND "
             "application = ? AND environment = ? AND "
             "(status = 'SUCCEEDED' OR unfinished_key IS NOT NULL) "
             "ORDER BY status = 'SUCCEEDED', "
             "IF(status = 'SUCCEEDED', status_changed_at, created_at) DESC, created_at DESC, "
             "id DESC%s",
             limit ? " LIMIT ?" : "");
    if (db_exec(c, sql, p, limit ? 4 : 3, &r, err, errlen))
        return PSTORE_DB;
    return rows_to_list(r, -1, out, n);
}

/* sql with its one parameter, a pipeline id: the result, or NULL (err says why). */
static db_result *by_id(db_conn *c, const char *sql, const char *id, char *err, size_t errlen)
{
    db_result *r = NULL;
    db_value p[] = {db_text(id)};
    return db_exec(c, sql, p, 1, &r, err, errlen) ? NULL : r;
}

int pipeline_store_events(db_conn *c, const char *id, pipeline_event_row **out, size_t *n,
                          char *err, size_t errlen)
{
    db_result *r = by_id(c,
                         "SELECT id, event_type, from_status, to_status, message, server, "
                         "created_at, actor, reason FROM pipeline_event WHERE pipeline_id = ? "
                         "ORDER BY id",
                         id, err, errlen);
    if (!r)
        return PSTORE_DB;
    *n = r->nrows;
    *out = calloc(r->nrows ? r->nrows : 1, sizeof **out);
    for (size_t i = 0; i < r->nrows; i++) {
        pipeline_event_row *e = &(*out)[i];
        e->id = db_get_int(r, i, 0, 0);
        e->event_type = dup_or_null(db_get(r, i, 1));
        e->from_status = dup_or_null(db_get(r, i, 2));
        e->to_status = dup_or_null(db_get(r, i, 3));
        e->message = dup_or_null(db_get(r, i, 4));
        e->server = dup_or_null(db_get(r, i, 5));
        e->created_at = dup_or_null(db_get(r, i, 6));
        e->actor = dup_or_null(db_get(r, i, 7));
        e->reason = dup_or_null(db_get(r, i, 8));
    }
    db_result_free(r);
    return 0;
}

int pipeline_store_request_deploy(db_conn *c, const char *id, char *err, size_t errlen)
{
    db_result *r = by_id(c,
                         "UPDATE pipeline SET deploy_requested_at = NOW(6) WHERE id = ? AND "
                         "status = 'BUILD_SUCCEEDED' AND deploy_requested_at IS NULL",
                         id, err, errlen);
    if (!r)
        return PSTORE_DB;
    int done = r->affected == 1;
    db_result_free(r);
    return done;
}

/* An operator's change of a BUILD_SUCCEEDED pipeline (`update`, conditional
 * on id) with its same-status event (type, message) and, with op, the audit
 * row (action), in one transaction. 1 done, 0 not changed, PSTORE_DB. */
static int build_succeeded_change(db_conn *c, const char *id, const char *update, const char *type,
                                  const char *message, const char *via, const pipeline_operator *op,
                                  const char *action, char *err, size_t errlen)
{
    char e[512];
    if (db_begin(c, err, errlen))
        return PSTORE_DB;
    db_value p[] = {db_text(id)};
    db_result *r = NULL;
    unsigned rc = db_exec(c, update, p, 1, &r, e, sizeof e);
    int done = 0;
    if (!rc) {
        done = r->affected == 1;
        db_result_free(r);
    }
    if (!rc && done)
        rc = insert_event_as(c, id, type, "BUILD_SUCCEEDED", PS_BUILD_SUCCEEDED, message, via, 0,
                             op, e, sizeof e);
    if (!rc && done && op)
        rc = audit_insert(c, op, action, id, NULL, NULL, NULL, "done", NULL, via, e, sizeof e);
    if (!rc)
        rc = db_commit(c, e, sizeof e);
    if (!rc)
        return done;
    db_rollback(c);
    snprintf(err, errlen, "%s", e);
    return PSTORE_DB;
}

static const char OVERRIDE_UPDATE[] =
    "UPDATE pipeline SET override_at = NOW(6), deploy_requested_at = "
    "COALESCE(deploy_requested_at, NOW(6)) WHERE id = ? AND status = "
    "'BUILD_SUCCEEDED' AND override_at IS NULL";

int pipeline_store_override(db_conn *c, const char *id, const char *actor, const char *reason,
                            char *err, size_t errlen)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "Deploy override by %s: %s", actor ? actor : "unknown",
             reason ? reason : "");
    return build_succeeded_change(c, id, OVERRIDE_UPDATE, "OVERRIDE", msg, actor, NULL, NULL, err,
                                  errlen);
}

int pipeline_store_override_by(db_conn *c, const char *id, const char *via,
                               const pipeline_operator *op, char *err, size_t errlen)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "Deploy override by %s: %s", op->actor, op->reason ? op->reason : "");
    return build_succeeded_change(c, id, OVERRIDE_UPDATE, "OVERRIDE", msg, via, op, "override", err,
                                  errlen);
}

int pipeline_store_request_deploy_by(db_conn *c, const char *id, const char *via,
                                     const pipeline_operator *op, char *err, size_t errlen)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "Deploy requested by %s%s%s", op->actor, op->reason ? ": " : ".",
             op->reason ? op->reason : "");
    return build_succeeded_change(c, id,
                                  "UPDATE pipeline SET deploy_requested_at = NOW(6) WHERE id = ? "
                                  "AND status = 'BUILD_SUCCEEDED' AND deploy_requested_at IS NULL",
                                  "DEPLOY_REQUESTED", msg, via, op, "release", err, errlen);
}

int pipeline_store_audit_refusal(db_conn *c, const pipeline_operator *op, const char *action,
                                 const char *id, const char *ns, const char *app, const char *env,
                                 const char *outcome, const char *detail, const char *via,
                                 char *err, size_t errlen)
{
    return audit_insert(c, op, action, id, ns, app, env, outcome, detail, via, err, errlen)
               ? PSTORE_DB
               : 0;
}

int pipeline_store_audit(db_conn *c, const pipeline_audit_query *q, pipeline_audit_row **out,
                         size_t *n, char *err, size_t errlen)
{
    buf sql = {0};
    db_value p[6];
    size_t np = 0;
    buf_puts(&sql, "SELECT id, created_at, actor, action, pipeline_id, namespace, application, "
                   "environment, reason, outcome, detail, via FROM operator_action WHERE 1 = 1");
    if (q->actor) {
        buf_puts(&sql, " AND actor = ?");
        p[np++] = db_text(q->actor);
    }
    if (q->namespace && q->application) {
        buf_puts(&sql, " AND namespace = ? AND application = ?");
        p[np++] = db_text(q->namespace);
        p[np++] = db_text(q->application);
    }
    if (q->environment) {
        buf_puts(&sql, " AND environment = ?");
        p[np++] = db_text(q->environment);
    }
    if (q->since_ms > 0) {
        buf_puts(&sql, " AND created_at >= NOW(6) - INTERVAL ? MICROSECOND");
        p[np++] = db_int((long long)q->since_ms * 1000);
    }
    buf_puts(&sql, " ORDER BY created_at DESC, id DESC LIMIT ?");
    p[np++] = db_int((long long)q->limit);
    db_result *r = NULL;
    unsigned rc = db_exec(c, sql.p, p, np, &r, err, errlen);
    buf_free(&sql);
    if (rc)
        return PSTORE_DB;
    *n = r->nrows;
    *out = calloc(r->nrows ? r->nrows : 1, sizeof **out);
    if (!*out)
        abort();
    for (size_t i = 0; i < r->nrows; i++) {
        pipeline_audit_row *a = &(*out)[i];
        char **f[] = {&a->created_at, &a->actor,       &a->action,      &a->pipeline_id,
                      &a->namespace,  &a->application, &a->environment, &a->reason,
                      &a->outcome,    &a->detail,      &a->via};
        a->id = db_get_int(r, i, 0, 0);
        for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
            *f[k] = dup_or_null(db_get(r, i, k + 1));
    }
    db_result_free(r);
    return 0;
}

void pipeline_audit_free(pipeline_audit_row *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        pipeline_audit_row *a = &v[i];
        char *f[] = {a->created_at, a->actor,       a->action,      a->pipeline_id,
                     a->namespace,  a->application, a->environment, a->reason,
                     a->outcome,    a->detail,      a->via};
        for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
            free(f[k]);
    }
    free(v);
}

/* One pipeline by a query selecting PIPELINE_COLUMNS: 1 found (*out filled),
 * 0 none, PSTORE_DB. */
static int get_one(db_conn *c, const char *sql, const db_value *p, size_t np, pipeline *out,
                   char *err, size_t errlen)
{
    db_result *r = NULL;
    if (db_exec(c, sql, p, np, &r, err, errlen))
        return PSTORE_DB;
    int found = r->nrows >= 1;
    if (found)
        row_to_pipeline(r, 0, out);
    db_result_free(r);
    return found;
}

static bool has_artifact(const pipeline *p) { return p->artifact && *p->artifact; }

/* A name as it is when it is a valid one, else quoted and escaped: a row
 * another tool wrote may hold anything. */
static const char *shown(char *out, size_t n, const char *name)
{
    if (name && pipeline_label_valid(name))
        snprintf(out, n, "%s", name);
    else
        pipeline_quote(out, n, name ? name : "", 64);
    return out;
}

/* The --to pipeline: what makes it a release to roll back to. */
static int check_rollback_to(db_conn *c, const char *ns, const char *app, const char *env,
                             const char *to, pipeline *out, char *err, size_t errlen)
{
    char id[PIPELINE_ID_MAX + 8];
    if (pipeline_id_valid(to))
        snprintf(id, sizeof id, "%s", to);
    else
        pipeline_quote(id, sizeof id, to, 16);
    int rc = pipeline_store_get(c, to, out, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 0) {
        snprintf(err, errlen, "no pipeline with id %s", id);
        return PSTORE_BAD;
    }
    if (strcmp(out->namespace, ns) || strcmp(out->application, app) ||
        strcmp(out->environment, env)) {
        char n1[200], n2[200], n3[200];
        snprintf(err, errlen, "pipeline %s belongs to %s/%s %s, not %s/%s %s", id,
                 shown(n1, sizeof n1, out->namespace), shown(n2, sizeof n2, out->application),
                 shown(n3, sizeof n3, out->environment), ns, app, env);
        goto refused;
    }
    if (out->status != PS_SUCCEEDED) {
        snprintf(err, errlen,
                 "pipeline %s is %s, not SUCCEEDED: only a release that succeeded can be rolled "
                 "back to",
                 id, pipeline_status_name(out->status));
        goto refused;
    }
    if (!has_artifact(out)) {
        snprintf(err, errlen, "pipeline %s has no artifact to redeploy", id);
        goto refused;
    }
    return 0;
refused:
    pipeline_clear(out);
    return PSTORE_BAD;
}

int pipeline_store_rollback_target(db_conn *c, const char *namespace, const char *application,
                                   const char *environment, const char *to, pipeline *out,
                                   char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (pipeline_label_check("namespace", namespace, err, errlen) ||
        pipeline_label_check("application", application, err, errlen) ||
        pipeline_label_check("environment", environment, err, errlen))
        return PSTORE_BAD;
    if (to)
        return check_rollback_to(c, namespace, application, environment, to, out, err, errlen);
    /* The current release: the one that succeeded last. */
    pipeline cur;
    db_value p[] = {db_text(namespace), db_text(application), db_text(environment), db_null(),
                    db_null()};
    int rc = get_one(c,
                     "SELECT " PIPELINE_COLUMNS " FROM pipeline WHERE namespace = ? AND "
                     "application = ? AND environment = ? AND status = 'SUCCEEDED' "
                     "ORDER BY status_changed_at DESC, created_at DESC, id DESC LIMIT 1",
                     p, 3, &cur, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 0) {
        snprintf(err, errlen, "%s/%s %s has no SUCCEEDED release", namespace, application,
                 environment);
        return PSTORE_BAD;
    }
    /* The one before it (in the same order) that shipped another artifact. */
    p[3] = db_text(cur.artifact);
    p[4] = db_text(cur.id);
    rc = get_one(c,
                 "SELECT " PIPELINE_COLUMNS " FROM pipeline WHERE namespace = ? AND "
                 "application = ? AND environment = ? AND status = 'SUCCEEDED' AND "
                 "artifact IS NOT NULL AND artifact <> '' AND NOT (artifact <=> ?) AND "
                 "(status_changed_at, created_at, id) < "
                 "(SELECT status_changed_at, created_at, id FROM pipeline WHERE id = ?) "
                 "ORDER BY status_changed_at DESC, created_at DESC, id DESC LIMIT 1",
                 p, 5, out, err, errlen);
    if (rc == 0) {
        char q[300] = "no artifact";
        if (has_artifact(&cur)) {
            int len = snprintf(q, sizeof q, "artifact ");
            pipeline_quote(q + len, sizeof q - (size_t)len, cur.artifact, 80);
        }
        snprintf(err, errlen,
                 "%s/%s %s has no earlier SUCCEEDED release to roll back to (current: %s, %s)",
                 namespace, application, environment, cur.id, q);
        rc = PSTORE_BAD;
    }
    pipeline_clear(&cur);
    return rc < 0 ? rc : 0;
}

int pipeline_store_unfinished(db_conn *c, const char *namespace, const char *application,
                              const char *environment, pipeline *out, char *err, size_t errlen)
{
    db_value p[] = {db_text(namespace), db_text(application), db_text(environment)};
    return get_one(c,
                   "SELECT " PIPELINE_COLUMNS " FROM pipeline WHERE namespace = ? AND "
                   "application = ? AND environment = ? AND unfinished_key IS NOT NULL "
                   "ORDER BY created_at, id LIMIT 1",
                   p, 3, out, err, errlen);
}
