/*
 * pipeline_store — pipelines in the database.
 *
 * Every change of status is a conditional UPDATE from the status the caller
 * read (rule 2 of DESIGN.md) and counts only when it changed one row. The
 * change, status_changed_at = NOW(6) (the database's clock) and the
 * pipeline_event row recording it are written in one transaction, so the
 * event trail holds every transition that happened exactly once.
 */
#ifndef OOPS_PIPELINE_STORE_H
#define OOPS_PIPELINE_STORE_H

#include "db.h"
#include "db_calls.h"
#include "pipeline_state.h"

/* Negative results of the store's calls. */
enum {
    PSTORE_ILLEGAL = -1, /* transition not in the table; no SQL was sent */
    PSTORE_EXISTS = -2, /* an unfinished pipeline already exists for that application/environment */
    PSTORE_DB = -3,     /* database error; err says what (db_errno_is_connection tells if lost) */
    PSTORE_BAD = -4, /* bad input: a name that is not a lowercase DNS label, a long artifact, source
                        not JSON */
};

typedef struct pipeline {
    char id[25];
    char *namespace, *application, *environment;
    pipeline_status status;
    bool manual;                          /* deploy_mode = 'manual' */
    char *artifact;                       /* may be NULL */
    char *source;                         /* JSON text, may be NULL */
    char *message;                        /* may be NULL */
    char *trigger_type;                   /* "release" | "rollback" */
    char *deploy_requested_at;            /* NULL unless a manual deploy was requested */
    char *created_at, *status_changed_at; /* "YYYY-MM-DD HH:MM:SS.ffffff" UTC */
    char *driven_by;                      /* server that made the last transition, may be NULL */
    double status_age_s; /* seconds since status_changed_at, on the database's clock */
    long long
        lock_owner;    /* pipeline_store_list_owned: IS_USED_LOCK('oops:pipeline:ID'), 0 = free */
    char *hold;        /* "window" | "freeze" | "slot" while waiting to deploy, else may be NULL */
    char *override_at; /* set by `oopsctl deploy --override`: windows and freezes hold it no more */
    char *rollback_of; /* an automatic rollback: the release whose failure made it */
    char *actor;       /* pipeline_store_query with `actors`: the person of its latest
                          operator event (issue 27), NULL when none */
} pipeline;

/* Waiting to deploy under a hold (window, freeze, slot): hold is set and
 * the pipeline is still INITIALIZED or BUILD_SUCCEEDED. */
static inline bool pipeline_held(const pipeline *p)
{
    return p->hold && (p->status == PS_INITIALIZED || p->status == PS_BUILD_SUCCEEDED);
}

typedef struct pipeline_event_row {
    long long id;
    char *event_type, *from_status, *to_status, *message, *server, *created_at;
    char *actor, *reason; /* an operator's event (issue 27): who and why; else NULL */
} pipeline_event_row;

/*
 * An operator's action (issue 27): the person (SUDO_USER or the login name
 * at the host, "alice@build-7"; a page user "bob@page") and why. Written on
 * the event it makes (pipeline_event.actor, .reason; its `server` stays the
 * process: oopsctl@HOST, or the oopsd server that ran a page action) and as
 * an operator_action row (the audit log) in the same transaction.
 */
#define PIPELINE_ACTOR_MAX 128
#define PIPELINE_REASON_MAX 500
typedef struct pipeline_operator {
    const char *actor;  /* required */
    const char *reason; /* NULL, or checked with pipeline_reason_check */
} pipeline_operator;

/* A reason as written by a person: 1 to PIPELINE_REASON_MAX bytes of valid
 * UTF-8 without control characters. 0, or -1 with a one-line message in err
 * naming `what` (e.g. "--reason") and the rule. */
int pipeline_reason_check(const char *what, const char *reason, char *err, size_t errlen);

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

void pipeline_clear(pipeline *p); /* frees the fields, not p */
void pipeline_list_free(pipeline *v, size_t n);
void pipeline_events_free(pipeline_event_row *v, size_t n);

/* Fill a new random id of `len` characters from [a-z0-9] (len < size). */
void pipeline_new_id(char *out, size_t len);

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

/* The most deploy slots one environment may have (deploy { concurrency }). */
#define DEPLOY_SLOTS_MAX 100

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
 * transaction of seven statements whatever their number (up to
 * PIPELINE_BATCH_MAX; more go in several): the database does per row only
 * the row's own work. Which ones are made is decided by a locking read of the
 * rows first (SELECT ... FOR UPDATE, fenced), and the UPDATE must change
 * exactly those. When anything in it fails (a second unfinished pipeline,
 * a deadlock, a lost fence) it is rolled back and each transition is made
 * on its own, so every one gets its own answer. One alone is made on its own.
 */
void pipeline_store_transitions(db_conn *c, pipeline_transition_req *v, size_t n,
                                const char *driver, const char *actor, uint64_t lock_session);

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

/* 1 found (*out filled, pipeline_clear it), 0 not found, PSTORE_DB. */
int pipeline_store_get(db_conn *c, const char *id, pipeline *out, char *err, size_t errlen);

/*
 * Pipelines whose status is in the mask (bit per pipeline_status; 0 = all),
 * oldest first, at most `limit` (0 = no limit). When min_age_s > 0, only those
 * that have been in their status for at least that many seconds, computed in
 * SQL against NOW(6). 0 with out and n set, or PSTORE_DB.
 */
int pipeline_store_list(db_conn *c, unsigned status_mask, double min_age_s, size_t limit,
                        pipeline **out, size_t *n, char *err, size_t errlen);

/*
 * Like pipeline_store_list (no age filter, no limit), each with lock_owner:
 * the connection id holding its lock oops:pipeline:ID, 0 when free — so a
 * server asks GET_LOCK only for pipelines nobody drives.
 */
int pipeline_store_list_owned(db_conn *c, unsigned status_mask, pipeline **out, size_t *n,
                              char *err, size_t errlen);

/* What pipeline_store_scan lists; zero-initialise, then set what matters. */
typedef struct pipeline_list_opts {
    unsigned status_mask; /* bit per pipeline_status; 0 = all */
    double min_age_s;     /* > 0: in their status for at least that long (NOW(6)) */
    size_t limit;         /* at most this many rows; 0 = no limit */
    bool owned;           /* fill lock_owner (IS_USED_LOCK of oops:pipeline:ID) */
    /* Both set: only the rows after (after_created, after_id) in the list's
     * order — the next page after the last row of the previous one. */
    const char *after_created, *after_id;
    /* nids > 0: only these pipelines (primary key lookups), at most
     * PIPELINE_IDS_MAX: a server reads the ones it holds by id. */
    const char *const *ids;
    size_t nids;
} pipeline_list_opts;

#define PIPELINE_IDS_MAX 1000

/*
 * The general form of the two lists above, oldest first (created_at, id),
 * read a page at a time with limit and after_*: a caller streams any number
 * of pipelines holding one page. 0 with out and n set, or PSTORE_DB.
 */
int pipeline_store_scan(db_conn *c, const pipeline_list_opts *o, pipeline **out, size_t *n,
                        char *err, size_t errlen);

/*
 * The free candidates of a scan: ids of the pipelines in the statuses of
 * status_mask whose lock oops:pipeline:ID no session holds, oldest first
 * (created_at, id), at most `limit` (1..65535). One statement; each status is
 * read in the order of the index ix_pipeline_status_created and stops at
 * `limit` free rows, so the cost is what is taken (plus the held rows before
 * them), not how many pipelines are active or finished. deploy_requested:
 * BUILD_SUCCEEDED rows only when a deploy was requested (a manual pipeline
 * waiting for its release is nobody's work). 0 with out (n strings, free
 * with pipeline_ids_free) or PSTORE_DB.
 */
int pipeline_store_free(db_conn *c, unsigned status_mask, bool deploy_requested, size_t limit,
                        char ***out, size_t *n, char *err, size_t errlen);
void pipeline_ids_free(char **v, size_t n);

/* What pipeline_store_query selects; zero-initialise, then set what matters. */
typedef struct pipeline_query {
    unsigned status_mask;                              /* bit per pipeline_status; 0 = any */
    const char *namespace, *application, *environment; /* NULL = any (else a DNS label) */
    unsigned long long since_ms; /* > 0: created within that many ms of NOW(6) */
    size_t recent; /* > 0: only the unfinished ones (status not SUCCEEDED, ERROR or STOPPED:
                      BUILD_SUCCEEDED counts as unfinished) plus the `recent` most recently
                      created finished ones; 0 = every match */
    size_t limit;  /* at most this many rows; 0 = no limit */
    bool actors;   /* also read each one's `actor` (one index-served subquery per row) */
} pipeline_query;

/*
 * The pipelines matching q, newest first (created_at DESC, id DESC), each
 * filter applied in SQL (namespace/application/environment by equality,
 * served by ix_pipeline_app). 0 with out and n set (pipeline_list_free),
 * PSTORE_BAD when a name is not a DNS label (no SQL sent), or PSTORE_DB.
 */
int pipeline_store_query(db_conn *c, const pipeline_query *q, pipeline **out, size_t *n, char *err,
                         size_t errlen);

/*
 * The releases and rollbacks of namespace/application/environment that went
 * live — SUCCEEDED, newest first by status_changed_at, then created_at, then
 * id: the first of them is the live one, the "current release" of
 * pipeline_store_rollback_target — after the unfinished one, if any
 * (INITIALIZED, RUNNING, DEPLOYING, ROLLING_OUT: at most one). ERROR and
 * STOPPED pipelines never went live and are left out, and so is a manual
 * pipeline waiting in BUILD_SUCCEEDED (pipeline_store_query lists those). At most `limit` rows (0 =
 * all). 0 with out and n set, PSTORE_BAD for a name that is not a DNS label, PSTORE_DB.
 */
int pipeline_store_history(db_conn *c, const char *namespace, const char *application,
                           const char *environment, size_t limit, pipeline **out, size_t *n,
                           char *err, size_t errlen);

/* The event trail of one pipeline, oldest first. */
int pipeline_store_events(db_conn *c, const char *id, pipeline_event_row **out, size_t *n,
                          char *err, size_t errlen);

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
 * server), and the audit row; the message names op->actor. */
int pipeline_store_override_by(db_conn *c, const char *id, const char *via,
                               const pipeline_operator *op, char *err, size_t errlen);

/* ---- the audit log (operator_action) ---------------------------------- */

/* An operator's action that changed nothing (outcome "stale": the state
 * changed concurrently; "refused": not allowed, e.g. the pipeline already
 * finished; "already": done before), recorded on its own, with detail (the
 * message the operator got, cut to at most 300 bytes at a character
 * boundary). Any of id, ns, app, env may be NULL. 0 or PSTORE_DB. */
int pipeline_store_audit_refusal(db_conn *c, const pipeline_operator *op, const char *action,
                                 const char *id, const char *ns, const char *app, const char *env,
                                 const char *outcome, const char *detail, const char *via,
                                 char *err, size_t errlen);

typedef struct pipeline_audit_query {
    unsigned long long since_ms; /* > 0: only newer ones */
    const char *actor;           /* NULL: every actor */
    const char *namespace;       /* with application: one application */
    const char *application;
    const char *environment; /* NULL: every environment */
    size_t limit;            /* rows at most (required) */
} pipeline_audit_query;

typedef struct pipeline_audit_row {
    long long id;
    char *created_at, *actor, *action, *pipeline_id, *namespace, *application, *environment,
        *reason, *outcome, *detail, *via;
} pipeline_audit_row;

/* Operator actions, newest first (index-served: by created_at, by actor, or
 * by application). 0 with *out (pipeline_audit_free) and *n, PSTORE_DB. */
int pipeline_store_audit(db_conn *c, const pipeline_audit_query *q, pipeline_audit_row **out,
                         size_t *n, char *err, size_t errlen);
void pipeline_audit_free(pipeline_audit_row *v, size_t n);

/*
 * The release a rollback of namespace/application/environment redeploys
 * (REFERENCE.md 9: a SUCCEEDED pipeline with an artifact). Read only.
 *
 * Without `to` (NULL): the current release is the most recent SUCCEEDED
 * pipeline of that application and environment (by status_changed_at, then
 * created_at, then id); the target is the most recent SUCCEEDED one before
 * it whose artifact is neither NULL nor empty and differs from the current
 * release's. With `to`: that pipeline, which must exist, be SUCCEEDED,
 * belong to that application and environment and have an artifact.
 *
 * 0 with *out filled (pipeline_clear it); PSTORE_BAD with a one-line reason
 * in err (`shop/api prod has no SUCCEEDED release`, `... has no earlier
 * SUCCEEDED release to roll back to (current: ID, artifact "X")`,
 * `no pipeline with id "ID"`, `pipeline ID is ERROR, not SUCCEEDED`,
 * `pipeline ID belongs to shop/web staging, not shop/api prod`,
 * `pipeline ID has no artifact`; values quoted with pipeline_quote);
 * PSTORE_DB.
 */
int pipeline_store_rollback_target(db_conn *c, const char *namespace, const char *application,
                                   const char *environment, const char *to, pipeline *out,
                                   char *err, size_t errlen);

/*
 * The unfinished pipeline (INITIALIZED, RUNNING, DEPLOYING, ROLLING_OUT) of
 * namespace/application/environment, the one the unique unfinished_key
 * allows: 1 found (*out filled, pipeline_clear it), 0 none, PSTORE_DB.
 */
int pipeline_store_unfinished(db_conn *c, const char *namespace, const char *application,
                              const char *environment, pipeline *out, char *err, size_t errlen);

#endif
