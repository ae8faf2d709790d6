/*
 * pipeline_store — pipelines changed in the database: created, moved by the
 * conditional transition and its fence (alone, with a deploy slot or an
 * automatic rollback, or many in one transaction), released by an operator.
 *
 * Every change of status is a conditional UPDATE from the status the caller
 * read (rule 2 of DESIGN.md) and counts only when it changed one row. The
 * change, status_changed_at = NOW(6) (the database's clock) and the
 * pipeline_event row recording it are written in one transaction, so the
 * event trail holds every transition that happened exactly once.
 *
 * The store's other units: pipeline.h (the shared types and answers),
 * pipeline_read.h (the reads), audit_log.h, deploy_slot.h. This header
 * includes them: one include reaches the whole store.
 */
#ifndef OOPS_PIPELINE_STORE_H
#define OOPS_PIPELINE_STORE_H

#include "audit_log.h"
#include "db.h"
#include "db_calls.h"
#include "deploy_slot.h"
#include "pipeline.h"
#include "pipeline_read.h"
#include "pipeline_state.h"

typedef struct pipeline_new {
    const char *namespace, *application, *environment;
    bool manual;
    const char *artifact;        /* may be NULL */
    const char *source;          /* JSON text, may be NULL */
    const char *trigger;         /* NULL = "release" */
    const char *actor;           /* recorded as the CREATED event's server */
    const pipeline_operator *op; /* an operator's create or rollback: its event carries
                                    who and why, and the audit log records it */
    const char *message;         /* the pipeline's and its CREATED event's message;
                             NULL = "Pipeline created." */
} pipeline_new;

/*
 * Insert an INITIALIZED pipeline and its CREATED event. 0 with out_id set;
 * PSTORE_EXISTS when an unfinished one exists for the application and
 * environment; PSTORE_BAD with err naming the field and the rule
 * (namespace, application and environment must be lowercase DNS labels,
 * pipeline_label_valid: checked before any SQL is sent); PSTORE_DB.
 */
int pipeline_store_create(db_conn *c, const pipeline_new *n, char out_id[25], char *err,
                          size_t errlen);

/*
 * Promotion (issue 39): release the artifact and source of release `from`
 * to environment `to` of its application, as one INSERT ... SELECT whose
 * row names `from` in promoted_from (UNIQUE: once, whoever tries), with its
 * CREATED event (server `actor`; op: an operator's promote-now, who and why,
 * and the audit log) in one transaction. Only while `from` is a SUCCEEDED
 * release or promotion (never a rollback) with no newer pipeline of its
 * target. 0 made (out_id); PSTORE_PROMOTED made already (out_id: that one);
 * PSTORE_EXISTS an unfinished pipeline in `to` (try later); PSTORE_STALE not
 * a candidate (any more); PSTORE_BAD a bad `to`; PSTORE_DB.
 */
int pipeline_store_promote(db_conn *c, const char *from, const char *to, const char *message,
                           const char *actor, const pipeline_operator *op, char out_id[25],
                           char *err, size_t errlen);

/*
 * Whether `person` (an actor's name before its last '@') created release id
 * or promoted it, or created or promoted a release it was promoted from (up
 * to PROMOTION_CHAIN_MAX back):
 * 1 yes, 0 no, PSTORE_DB. The two-person rule of approvals.
 */
#define PROMOTION_CHAIN_MAX 8
int pipeline_store_made_by(db_conn *c, const char *id, const char *person, char *err,
                           size_t errlen);

/*
 * The conditional transition. 1 when this call made it, 0 when the pipeline
 * was not in `from` any more (someone else won, or it does not exist).
 * PSTORE_ILLEGAL ("illegal transition A -> B" in err, no SQL sent),
 * PSTORE_EXISTS (moving to an unfinished status would make a second
 * unfinished pipeline), PSTORE_DB. `driver` (may be NULL) becomes driven_by;
 * `actor` is the event's server. A non-zero `lock_session` (the caller's
 * lock-session connection id) fences the update: it counts only while that
 * session holds oops:pipeline:ID (0 otherwise, like a lost race), and the
 * event records it. 0 = an operator's change, not fenced. One round trip: the
 * procedure oops_transition (schema 8), or five statements when the account
 * may not EXECUTE it (logged once).
 */
int pipeline_store_transition(db_conn *c, const char *id, pipeline_status from, pipeline_status to,
                              const char *message, const char *driver, const char *actor,
                              uint64_t lock_session, char *err, size_t errlen);

/* What pipeline_store_transition_ex does beside the transition (issue 26). */
typedef struct pipeline_transition_extra {
    /* in: to DEPLOYING, claim one of slot_count deploy slots of slot_env in
     * the same transaction (none free, or others ahead in line: nothing
     * changes, 0 is returned with no_slot set) */
    const char *slot_env;
    unsigned slot_count;
    /* in: to ERROR, make the automatic rollback (pipeline_store.c,
     * rollback_create_in_tx) with this message in the same transaction */
    const char *rollback_message;
    /* in: an operator's transition (a stop): the event carries who and why,
     * and the audit log records it (action "stop" for STOPPED) */
    const pipeline_operator *op;
    /* in, with op: the event's type and the audit log's action when not the
     * transition's own (a rejection: "REJECTED", "reject"); NULL: those of
     * the transition */
    const char *event_type, *action;
    /* out */
    bool no_slot;
    unsigned slots_in_use, slots_ahead; /* with no_slot: busy slots, pipelines in line first */
    long long slot;                     /* the slot claimed (or already held) */
    char rollback_id[25];               /* the rollback made, "" when none */
} pipeline_transition_extra;

/*
 * pipeline_store_transition with x's parts in the same transaction, as
 * statements (never the procedure). Returns like pipeline_store_transition;
 * PSTORE_BAD for a slot claim not to DEPLOYING, a count out of 1 to
 * DEPLOY_SLOTS_MAX or an environment that is not a DNS label, or a rollback
 * after a transition to another status than ERROR.
 */
int pipeline_store_transition_ex(db_conn *c, const char *id, pipeline_status from,
                                 pipeline_status to, const char *message, const char *driver,
                                 const char *actor, uint64_t lock_session,
                                 pipeline_transition_extra *x, char *err, size_t errlen);

/* One transition of pipeline_store_transitions: id, from, to, message in;
 * rc out (what pipeline_store_transition returns for it), err with it. */
typedef struct pipeline_transition_req {
    const char *id;
    pipeline_status from, to;
    const char *message;
    int rc;
    unsigned last_error; /* the connection's error number after a PSTORE_DB */
    char err[256];
} pipeline_transition_req;

#define PIPELINE_BATCH_MAX DB_BATCH_MAX

/*
 * Several transitions with one driver, actor and lock session, each with
 * the guarantees of pipeline_store_transition (fenced, conditional, its
 * event and outbox row in the same transaction) but together in one
 * transaction of five statements whatever their number (up to
 * PIPELINE_BATCH_MAX; more go in several): the database does per row only
 * the row's own work. The UPDATE of all goes first (a driver that holds the
 * locks makes every one); when it changes fewer rows, it is rolled back and
 * a locking read (SELECT ... FOR UPDATE, fenced) decides which are made, and
 * the UPDATE must change exactly those. When anything in it fails (a second
 * unfinished pipeline, a deadlock, a lost fence) it is rolled back and each
 * transition is made on its own, so every one gets its own answer. One alone
 * is made on its own.
 */
void pipeline_store_transitions(db_conn *c, pipeline_transition_req *v, size_t n,
                                const char *driver, const char *actor, uint64_t lock_session);

/* Batches ask for their events' ids with INSERT ... RETURNING (on) until a
 * database refuses it; off: they read them back, one statement more (the
 * tests' way to make the older databases' path). */
void pipeline_store_batch_returning(bool on);

/*
 * A transition as a database call (db_calls.h): the transitions that wait
 * for a connection together are made by pipeline_store_transitions in one
 * transaction; one alone (or in a task's transaction) by the same, with one.
 * oops_transition_batches_total / _batched_total count batches of more than one.
 */
typedef struct pipeline_transition_call {
    db_call call; /* first: it is a db_call */
    pipeline_transition_req req;
    const char *driver, *actor;  /* as pipeline_store_transitions' (one server's) */
    uint64_t (*fence)(void *ud); /* the lock session to fence with, asked when it runs */
    void *fence_ud;
} pipeline_transition_call;

/* t's call made a transition call (kind, lane); the caller fills the rest. */
void pipeline_transition_call_init(pipeline_transition_call *t);

/* False once this process found it may not CALL oops_transition (the
 * account lacks EXECUTE): transitions then take five statements. */
bool pipeline_store_transition_calls(void);

/*
 * Mark a BUILD_SUCCEEDED manual pipeline as requested for deploy. 1 done,
 * 0 when it was not BUILD_SUCCEEDED (stale read, or already requested), PSTORE_DB.
 */
int pipeline_store_request_deploy(db_conn *c, const char *id, char *err, size_t errlen);

/* The same by an operator, recorded: a DEPLOY_REQUESTED event
 * (BUILD_SUCCEEDED -> BUILD_SUCCEEDED, "Deploy requested by ACTOR[: REASON]",
 * server = via) with its outbox row, and the audit row, in one transaction. */
int pipeline_store_request_deploy_by(db_conn *c, const char *id, const char *via,
                                     const pipeline_operator *op, char *err, size_t errlen);

/*
 * `oopsctl deploy --override`: a BUILD_SUCCEEDED pipeline is released now
 * whatever deploy window or freeze holds it (override_at; a manual one's
 * deploy is requested too), with an OVERRIDE event (BUILD_SUCCEEDED ->
 * BUILD_SUCCEEDED, message "Deploy override by ACTOR: REASON", server =
 * actor) and its outbox row, in one transaction. 1 done, 0 not
 * BUILD_SUCCEEDED or overridden already (nothing changed), PSTORE_DB.
 */
int pipeline_store_override(db_conn *c, const char *id, const char *actor, const char *reason,
                            char *err, size_t errlen);
/* The same with the person (op) apart from the process (via: the event's
 * server), and the audit row; the message names op->actor. st: the status
 * it waits in, BUILD_SUCCEEDED, or INITIALIZED for a promotion (issue 39:
 * it has no build). */
int pipeline_store_override_by(db_conn *c, const char *id, pipeline_status st, const char *via,
                               const pipeline_operator *op, char *err, size_t errlen);

/* An approval (issue 39) by person (the actor's name before its last '@'),
 * while the pipeline is st (INITIALIZED, RUNNING or BUILD_SUCCEEDED): one
 * conditional UPDATE adds person to approved_by and counts it, unless the
 * status changed, person approved it already or PIPELINE_APPROVALS_MAX is
 * reached; its APPROVED event (actor, reason), outbox row and audit row in
 * the same transaction. 1 made, 0 not (nothing changed), PSTORE_DB. */
int pipeline_store_approve_by(db_conn *c, const char *id, pipeline_status st, const char *person,
                              const char *via, const pipeline_operator *op, char *err,
                              size_t errlen);

/* An operator's request to a canary (issue 38): canary_request = request
 * ("abort", "promote", "promote_full"), only while it is ROLLING_OUT and its
 * pending request is still `was` (NULL: none); a promotion only once a step
 * began. Its CANARY_ABORT / CANARY_PROMOTE event (actor, reason) and the
 * audit row in the same transaction; the driver carries it out
 * (lua/oops/canary.lua). 1 done, 0 not changed, PSTORE_DB. */
int pipeline_store_canary_request_by(db_conn *c, const char *id, const char *request,
                                     const char *was, const char *via, const pipeline_operator *op,
                                     char *err, size_t errlen);

#endif
