/*
 * audit_log — the audit log, the operator_action table: one row per
 * operator's action (who, what, on which pipeline or application, why, its
 * outcome, through which process), written in the transaction of the change
 * it records, or alone for an action that changed nothing; and the read
 * behind `oopsctl audit`.
 */
#ifndef OOPS_AUDIT_LOG_H
#define OOPS_AUDIT_LOG_H

#include "db.h"
#include "pipeline.h"

/* The audit row of an operator's action (op: who and why) on pipeline `id`
 * (its application and environment read from it), or of one with no
 * pipeline (ns, app, env given, id NULL or not found), in the caller's
 * transaction when one is open: outcome ("done" for a change), detail (NULL,
 * or the words the operator got: cut to at most 300 bytes at a character
 * boundary), via (the process; NULL is "unknown"). 0, or the database's
 * error number (err says why; the caller rolls back). */
unsigned audit_log_insert(db_conn *c, const pipeline_operator *op, const char *action,
                          const char *id, const char *ns, const char *app, const char *env,
                          const char *outcome, const char *detail, const char *via, char *err,
                          size_t errlen);

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

#endif
