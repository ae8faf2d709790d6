/* pipeline_store — pipelines changed in the database: the create, the
 * conditional transition and its fence, the batch of transitions, an
 * operator's release. See pipeline_store.h. */
#include "pipeline_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "lock_names.h"
#include "lock_registry.h"
#include "log.h"

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
        rc = audit_log_insert(c, n->op, strcmp(trigger, "rollback") ? "create" : "rollback", out_id,
                              n->namespace, n->application, n->environment, "done", NULL, n->actor,
                              e, elen);
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
        "WHERE f.id = ? AND f.trigger_type IN ('release', 'promotion') AND NOT EXISTS (SELECT 1 "
        "FROM pipeline n "
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
    if (x && x->slot_env && (rc = deploy_slot_ensure(c, x->slot_env, x->slot_count, e, sizeof e)))
        return transition_failed(rc, e, err, errlen);
    if (db_begin(c, err, errlen))
        return PSTORE_DB;
    db_result *r = NULL;
    long long fence = (long long)lock_session;
    char lock[LOCK_NAME_MAX + 1];
    const char *named = fence_lock(lock_session, driver, lock);
    int won = 0;
    if (x && x->slot_env) {
        rc = deploy_slot_claim(c, x->slot_env, x->slot_count, id, &x->slot, &x->slots_in_use,
                               &x->slots_ahead, e, sizeof e);
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
            rc = insert_event_as(c, id, x ? x->event_type : NULL, pipeline_status_name(from), to,
                                 message, actor ? actor : driver, lock_session, x ? x->op : NULL, e,
                                 sizeof e);
        if (won && !rc && x && x->op)
            rc = audit_log_insert(c, x->op,
                                  x->action          ? x->action
                                  : to == PS_STOPPED ? "stop"
                                                     : "transition",
                                  id, NULL, NULL, NULL, "done", NULL, actor ? actor : driver, e,
                                  sizeof e);
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
                "(%s); GRANT EXECUTE ON the database to this account (doc/guide/database.md, "
                "\"Database grants\")",
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
    char wevent[PIPELINE_BATCH_MAX][24]; /* each event's id, as the INSERT returned it */
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

/* w*: the transitions marked won, in the batch's order. */
static void batch_won(batch *b, const pipeline_transition_req *v)
{
    b->nw = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (b->won[i]) {
            b->wid[b->nw] = b->ids[i];
            b->wfrom[b->nw] = b->from[i];
            b->wto[b->nw] = b->to[i];
            b->wmsg[b->nw] = v[i].message ? v[i].message : "";
            b->wtype[b->nw] = pipeline_event_type(v[i].to);
            b->nw++;
        }
    }
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
    if (!rc)
        batch_won(b, v);
    return rc;
}

/* The update of the rows chosen (w*), fenced and conditional; *changed: how
 * many it changed. */
static unsigned batch_update(batch *b, const char *driver, size_t *changed)
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
    *changed = rc ? 0 : (size_t)r->affected;
    db_result_free(r);
    return rc;
}

/* Does the database answer INSERT ... RETURNING (MariaDB 10.5 and later)?
 * Until one refuses it (a syntax error): then the events' ids are read back
 * by a SELECT of their own, one statement more per batch. */
static bool returning_refused;

void pipeline_store_batch_returning(bool on) { returning_refused = !on; }

/* Their events: multi-row INSERT ... VALUES in chunks of a power of two (a
 * few statement shapes), each returning the ids it made (wevent). Not
 * INSERT ... SELECT: InnoDB holds a table's AUTO-INC lock for the whole of
 * such a "bulk" insert, against every other server's transitions. */
static unsigned batch_events(batch *b, const char *actor)
{
    uint64_t first_event = 0;
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
        if (!returning_refused)
            buf_puts(&b->sql, " RETURNING id, pipeline_id");
        db_result *r = NULL;
        unsigned rc = db_exec(b->c, b->sql.p, b->p, b->np, &r, b->e, b->elen);
        if (rc == 1064 /* ER_PARSE_ERROR */ && !returning_refused) {
            returning_refused = true; /* this batch is made one by one; the next reads back */
            log_msg(LOG_INFO, "INSERT ... RETURNING refused: a batch's event ids are read back");
        }
        if (!rc && !done)
            first_event = r->insert_id;
        /* Each row's id by its pipeline (one event per pipeline in a batch). */
        for (size_t row = 0; !rc && !returning_refused && row < r->nrows; row++) {
            const char *id = db_get(r, row, 0), *pid = db_get(r, row, 1);
            for (size_t i = done; id && pid && i < done + k; i++)
                if (strcmp(b->wid[i], pid) == 0)
                    snprintf(b->wevent[i], sizeof b->wevent[i], "%s", id);
        }
        if (!rc && !returning_refused && r->nrows != k) {
            snprintf(b->e, b->elen, "the batch's events returned %zu ids of %zu", r->nrows, k);
            rc = 1;
        }
        db_result_free(r);
        if (rc)
            return rc;
        done += k;
    }
    if (!returning_refused)
        return 0;
    /* Read back: nobody else writes events for rows we hold locked, and ours
     * are the newest. */
    db_result *ev = NULL;
    batch_sql(b, "SELECT id, pipeline_id FROM pipeline_event WHERE pipeline_id");
    db_batch_in_list(&b->sql, b->p, &b->np, b->wid, b->nw, db_batch_shape(b->nw));
    buf_puts(&b->sql, " AND id >= ?");
    b->p[b->np++] = db_int((long long)first_event);
    unsigned rc = db_exec(b->c, b->sql.p, b->p, b->np, &ev, b->e, b->elen);
    if (!rc && ev->nrows != b->nw) {
        snprintf(b->e, b->elen, "the batch read %zu events of %zu", ev->nrows, b->nw);
        rc = 1;
    }
    for (size_t row = 0; !rc && row < ev->nrows; row++) {
        const char *id = db_get(ev, row, 0), *pid = db_get(ev, row, 1);
        for (size_t i = 0; id && pid && i < b->nw; i++)
            if (strcmp(b->wid[i], pid) == 0)
                snprintf(b->wevent[i], sizeof b->wevent[i], "%s", id);
    }
    db_result_free(ev);
    return rc;
}

/* Their notifications: one outbox row per event. */
static unsigned batch_outbox(batch *b)
{
    unsigned rc = 0;
    for (size_t i = 0; i < b->nw; i++)
        if (!b->wevent[i][0]) {
            snprintf(b->e, b->elen, "no event id for %s", b->wid[i]);
            return 1;
        }
    for (size_t done = 0; !rc && done < b->nw;) {
        size_t k = db_batch_chunk(b->nw - done, PIPELINE_BATCH_MAX);
        batch_sql(b, "INSERT INTO outbox (event_id, kind, ref_id) VALUES ");
        for (size_t i = done; i < done + k; i++) {
            buf_puts(&b->sql, i > done ? ", (CONCAT('pipeline-event-', ?), 'pipeline', ?)"
                                       : "(CONCAT('pipeline-event-', ?), 'pipeline', ?)");
            b->p[b->np++] = db_text(b->wevent[i]);
            b->p[b->np++] = db_text(b->wevent[i]);
        }
        rc = db_exec(b->c, b->sql.p, b->p, b->np, NULL, b->e, b->elen);
        done += k;
    }
    return rc;
}

/* The update, of exactly the transitions chosen: an error when it changed
 * fewer (a session lost since the read). */
static unsigned batch_update_chosen(batch *b, const char *driver)
{
    size_t changed = 0;
    unsigned rc = batch_update(b, driver, &changed);
    if (!rc && changed != b->nw) {
        snprintf(b->e, b->elen, "the batch changed %zu rows of %zu", changed, b->nw);
        rc = 1;
    }
    return rc;
}

/* One batch of n (2..PIPELINE_BATCH_MAX) in one transaction: 0 with every
 * rc set, or an error number (rolled back, nothing set). First as if every
 * one will be made, as for a driver that holds their locks they are: the
 * UPDATE of all, and when it changed every row, they are. When it changed
 * fewer, it is rolled back and the batch begins again with a locking read
 * of which ones it makes (batch_choose). */
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
        b->won[i] = true;
    }
    batch_won(b, v);
    size_t changed = 0;
    unsigned rc = db_begin(c, e, elen);
    if (!rc)
        rc = batch_update(b, driver, &changed);
    if (!rc && changed != n) { /* not all: which ones, then */
        db_rollback(c);
        for (size_t i = 0; i < n; i++)
            b->won[i] = false;
        b->nw = 0;
        rc = db_begin(c, e, elen);
        if (!rc)
            rc = batch_choose(b, v);
        if (!rc && b->nw)
            rc = batch_update_chosen(b, driver);
    }
    if (!rc && b->nw)
        rc = batch_events(b, actor ? actor : driver ? driver : "unknown");
    if (!rc && b->nw)
        rc = batch_outbox(b);
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

/* sql with its one parameter, a pipeline id: the result, or NULL (err says why). */
static db_result *by_id(db_conn *c, const char *sql, const char *id, char *err, size_t errlen)
{
    db_result *r = NULL;
    db_value p[] = {db_text(id)};
    return db_exec(c, sql, p, 1, &r, err, errlen) ? NULL : r;
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

/* An operator's change of a pipeline in status st (`update` with its
 * parameters p, conditional on it) with its same-status event (type,
 * message) and, with op, the audit row (action), in one transaction. 1 done,
 * 0 not changed, PSTORE_DB. */
static int operator_change(db_conn *c, const char *id, pipeline_status st, const char *update,
                           const db_value *p, size_t np, const char *type, const char *message,
                           const char *via, const pipeline_operator *op, const char *action,
                           char *err, size_t errlen)
{
    char e[512];
    if (db_begin(c, err, errlen))
        return PSTORE_DB;
    db_result *r = NULL;
    unsigned rc = db_exec(c, update, p, np, &r, e, sizeof e);
    int done = 0;
    if (!rc) {
        done = r->affected == 1;
        db_result_free(r);
    }
    if (!rc && done)
        rc = insert_event_as(c, id, type, pipeline_status_name(st), st, message, via, 0, op, e,
                             sizeof e);
    if (!rc && done && op)
        rc = audit_log_insert(c, op, action, id, NULL, NULL, NULL, "done", NULL, via, e, sizeof e);
    if (!rc)
        rc = db_commit(c, e, sizeof e);
    if (!rc)
        return done;
    db_rollback(c);
    snprintf(err, errlen, "%s", e);
    return PSTORE_DB;
}

static int build_succeeded_change(db_conn *c, const char *id, const char *update, const char *type,
                                  const char *message, const char *via, const pipeline_operator *op,
                                  const char *action, char *err, size_t errlen)
{
    db_value p[] = {db_text(id)};
    return operator_change(c, id, PS_BUILD_SUCCEEDED, update, p, 1, type, message, via, op, action,
                           err, errlen);
}

int pipeline_store_canary_request_by(db_conn *c, const char *id, const char *request,
                                     const char *was, const char *via, const pipeline_operator *op,
                                     char *err, size_t errlen)
{
    bool abort = strcmp(request, "abort") == 0;
    const char *what = abort                                  ? "Canary abort"
                       : strcmp(request, "promote_full") == 0 ? "Full canary promotion"
                                                              : "Canary promotion";
    char msg[1024];
    snprintf(msg, sizeof msg, "%s requested by %s%s%s", what, op->actor, op->reason ? ": " : ".",
             op->reason ? op->reason : "");
    db_value p[] = {db_text(request), db_text(id), was ? db_text(was) : db_null()};
    return operator_change(c, id, PS_ROLLING_OUT,
                           abort ? "UPDATE pipeline SET canary_request = ? WHERE id = ? AND status "
                                   "= 'ROLLING_OUT' AND canary_request <=> ?"
                                 : "UPDATE pipeline SET canary_request = ? WHERE id = ? AND status "
                                   "= 'ROLLING_OUT' AND canary_request <=> ? AND step > 0",
                           p, 3, abort ? "CANARY_ABORT" : "CANARY_PROMOTE", msg, via, op,
                           abort ? "abort" : "promote", err, errlen);
}

int pipeline_store_approve_by(db_conn *c, const char *id, pipeline_status st, const char *person,
                              const char *via, const pipeline_operator *op, char *err,
                              size_t errlen)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "Approved by %s%s%s", op->actor, op->reason ? ": " : ".",
             op->reason ? op->reason : "");
    db_value p[] = {db_text(person), db_text(id), db_text(pipeline_status_name(st)),
                    db_text(person), db_int(PIPELINE_APPROVALS_MAX)};
    return operator_change(c, id, st,
                           "UPDATE pipeline SET approvals = approvals + 1, approved_by = "
                           "CONCAT_WS(',', approved_by, ?) WHERE id = ? AND status = ? AND "
                           "(approved_by IS NULL OR FIND_IN_SET(?, approved_by) = 0) AND "
                           "approvals < ?",
                           p, 5, "APPROVED", msg, via, op, "approve", err, errlen);
}

/* The promotion's INSERT: the release `from` (?4) again in environment ?2
 * of its application, while it is a SUCCEEDED release or promotion with no
 * newer pipeline of its target. promoted_from is UNIQUE (schema 17). */
static const char PROMOTE_INSERT[] =
    "INSERT INTO pipeline (id, namespace, application, environment, status, deploy_mode, "
    "artifact, source, trigger_type, message, promoted_from, created_at, status_changed_at) "
    "SELECT ?, f.namespace, f.application, ?, 'INITIALIZED', 'auto', f.artifact, f.source, "
    "'promotion', ?, f.id, NOW(6), NOW(6) FROM pipeline f WHERE f.id = ? AND f.status = "
    "'SUCCEEDED' AND f.trigger_type IN ('release', 'promotion') AND f.environment <> ? AND NOT "
    "EXISTS (SELECT 1 FROM pipeline n WHERE n.namespace = f.namespace AND n.application = "
    "f.application AND n.environment = f.environment AND (n.created_at, n.id) > (f.created_at, "
    "f.id))";

/* The promotion's transaction: 0 (*made: a row was inserted), or the error
 * number; the caller rolls back. */
static unsigned promote_tx(db_conn *c, const char *from, const char *to, const char *message,
                           const char *actor, const pipeline_operator *op, const char *id,
                           bool *made, char *e, size_t elen)
{
    *made = false;
    unsigned rc = db_begin(c, e, elen);
    if (rc)
        return rc;
    db_value p[] = {db_text(id), db_text(to), db_text(message), db_text(from), db_text(to)};
    db_result *r = NULL;
    rc = db_exec(c, PROMOTE_INSERT, p, 5, &r, e, elen);
    if (rc)
        return rc;
    *made = r->affected == 1;
    db_result_free(r);
    if (!*made)
        return db_commit(c, e, elen);
    rc = insert_event_as(c, id, NULL, NULL, PS_INITIALIZED, message, actor, 0, op, e, elen);
    if (rc == 0 && op) {
        char detail[64];
        snprintf(detail, sizeof detail, "promoted from %s", from);
        rc = audit_log_insert(c, op, "promote-now", id, NULL, NULL, NULL, "done", detail, actor, e,
                              elen);
    }
    if (rc == 0)
        rc = db_commit(c, e, elen);
    return rc;
}

/* The promotion of `from` made already: its id in out_id. */
static int promoted_already(db_conn *c, const char *from, char out_id[25], char *err, size_t errlen)
{
    db_value p[] = {db_text(from)};
    db_result *r = NULL;
    if (db_exec(c, "SELECT id FROM pipeline WHERE promoted_from = ?", p, 1, &r, err, errlen))
        return PSTORE_DB;
    const char *id = r->nrows ? db_get(r, 0, 0) : NULL;
    snprintf(out_id, 25, "%s", id ? id : "");
    db_result_free(r);
    return id ? PSTORE_PROMOTED : PSTORE_STALE;
}

int pipeline_store_promote(db_conn *c, const char *from, const char *to, const char *message,
                           const char *actor, const pipeline_operator *op, char out_id[25],
                           char *err, size_t errlen)
{
    if (pipeline_label_check("environment", to, err, errlen))
        return PSTORE_BAD;
    char id[25], e[512];
    pipeline_new_id(id, 12);
    bool made = false;
    unsigned rc;
    for (int attempt = 0;; attempt++) { /* a deadlock victim was rolled back whole */
        rc = promote_tx(c, from, to, message, actor, op, id, &made, e, sizeof e);
        if (rc == 0)
            break;
        db_rollback(c);
        if (rc != DB_ER_LOCK_DEADLOCK || attempt == 2)
            break;
    }
    if (rc == 0 && made) {
        snprintf(out_id, 25, "%s", id);
        return 0;
    }
    if (rc == 0 || rc == DB_ER_DUP_ENTRY) {
        /* Made by someone else first, whichever unique key refused this one
         * (two promotions at once are also two unfinished pipelines). */
        int r = promoted_already(c, from, out_id, err, errlen);
        if (r == PSTORE_STALE && rc == DB_ER_DUP_ENTRY && strstr(e, "uq_pipeline_unfinished")) {
            snprintf(err, errlen, "an unfinished pipeline already exists in %s", to);
            return PSTORE_EXISTS;
        }
        if (r == PSTORE_PROMOTED)
            snprintf(err, errlen, "%s was promoted already: %s", from, out_id);
        else if (r == PSTORE_STALE)
            snprintf(err, errlen,
                     "%s is not a release to promote: it is not SUCCEEDED, is a rollback, or a "
                     "newer pipeline of its target exists",
                     from);
        return r;
    }
    snprintf(err, errlen, "%s", e);
    return PSTORE_DB;
}

int pipeline_store_made_by(db_conn *c, const char *id, const char *person, char *err, size_t errlen)
{
    char at[25];
    snprintf(at, sizeof at, "%s", id);
    for (int hop = 0; hop <= PROMOTION_CHAIN_MAX && at[0]; hop++) {
        db_value p[] = {db_text(at)};
        db_result *r = NULL;
        if (db_exec(c,
                    "SELECT (SELECT e.actor FROM pipeline_event e WHERE e.pipeline_id = p.id AND "
                    "e.event_type = 'CREATED' ORDER BY e.id LIMIT 1), p.promoted_from "
                    "FROM pipeline p WHERE p.id = ?",
                    p, 1, &r, err, errlen))
            return PSTORE_DB;
        const char *actor = r->nrows ? db_get(r, 0, 0) : NULL;
        const char *up = r->nrows ? db_get(r, 0, 1) : NULL;
        /* The person of an actor: its name before the last '@' (operator.c). */
        const char *host = actor ? strrchr(actor, '@') : NULL;
        size_t n = actor ? (host ? (size_t)(host - actor) : strlen(actor)) : 0;
        bool same = actor && n == strlen(person) && strncmp(actor, person, n) == 0;
        snprintf(at, sizeof at, "%s", up ? up : "");
        db_result_free(r);
        if (same)
            return 1;
    }
    return 0;
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

/* A promotion waits INITIALIZED (it has no build): overridden there. */
static const char OVERRIDE_PROMOTION[] =
    "UPDATE pipeline SET override_at = NOW(6) WHERE id = ? AND status = 'INITIALIZED' AND "
    "trigger_type = 'promotion' AND override_at IS NULL";

int pipeline_store_override_by(db_conn *c, const char *id, pipeline_status st, const char *via,
                               const pipeline_operator *op, char *err, size_t errlen)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "Deploy override by %s: %s", op->actor, op->reason ? op->reason : "");
    if (st != PS_INITIALIZED)
        return build_succeeded_change(c, id, OVERRIDE_UPDATE, "OVERRIDE", msg, via, op, "override",
                                      err, errlen);
    db_value p[] = {db_text(id)};
    return operator_change(c, id, PS_INITIALIZED, OVERRIDE_PROMOTION, p, 1, "OVERRIDE", msg, via,
                           op, "override", err, errlen);
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
