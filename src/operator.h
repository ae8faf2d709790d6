/* operator: what an operator may do to the fleet — stop a pipeline, release
 * one (a manual deploy, or an override of a deploy window or freeze), roll an
 * application back — with the same rules and the same one-line answers
 * whoever asks: `oopsctl` (its exit codes) and the fleet page (its HTTP
 * statuses, lua/oops/web.lua). Each action is recorded with who asked and why
 * (pipeline_operator: on its event and in the audit log, operator_action);
 * an action that changes nothing because the state changed concurrently, or
 * that is not allowed, or that was done already, is recorded in the audit
 * log too (outcome "stale", "refused", "already"), with the words the
 * operator was told. A refusal's row that cannot be written leaves the
 * answer as it is, logs a line and says so in op_result.audit_error.
 *
 * Pure C on one database connection: blocking, no loop, no Lua. The daemon
 * runs it on a pool connection from a task (oops.store.act).
 */
#ifndef OOPS_OPERATOR_H
#define OOPS_OPERATOR_H

#include <stdbool.h>

#include "buf.h"
#include "db.h"
#include "pipeline_store.h"

typedef enum op_code {
    OP_OK = 0,       /* done (or already done: op_result.already) */
    OP_INPUT = 1,    /* not allowed (oopsctl exit 1, HTTP 422) */
    OP_DB = 2,       /* a database error; error holds the driver's text (db_fail's job) */
    OP_STALE = 3,    /* the state changed concurrently: nothing changed (exit 3, HTTP 409) */
    OP_NOTFOUND = 4, /* no such pipeline (exit 1, HTTP 404) */
} op_code;

typedef struct op_result {
    op_code code;
    char error[1024];       /* a one-line message when code != OP_OK ("stop ID: ...") */
    char id[25];            /* the pipeline acted on; for a rollback the new one */
    pipeline_status from;   /* stop: the status it was stopped from */
    bool override;          /* deploy: an override (else a manual deploy's request) */
    bool already;           /* deploy: requested (overridden) already, nothing changed */
    char rollback_to[25];   /* rollback: the release it redeploys */
    char artifact[256];     /* ... and its artifact */
    char note[512];         /* rollback: which release was chosen; deploy: what was done
                             ("deploy of ID requested", "... already requested") */
    char request[16];       /* abort, promote: the canary request made ("abort", "promote",
                              "promote_full") */
    int approvals;          /* approve: how many persons approved it now */
    char approved_by[704];  /* ... and who, comma-separated */
    char audit_error[256];  /* why the audit row of this answer could not be written ("": it
                              was, or none was due) */
    char promoted_from[25]; /* promote-now: the release promoted */
    char environment[64];   /* ... and the environment it was promoted to */
} op_result;

/* The person and the process (via: "oopsctl@HOST", an oopsd server's name). */
typedef struct op_who {
    pipeline_operator op;
    const char *via;
} op_who;

/* stop ID [--expect STATUS]: expect NULL = the status read now. */
op_code op_stop(db_conn *c, const char *id, const pipeline_status *expect, const op_who *who,
                op_result *out);

/* deploy ID [--override]: an override needs who->op.reason. */
op_code op_deploy(db_conn *c, const char *id, bool override, const op_who *who, op_result *out);

/* abort ID / promote ID [--full] (issue 38): request = "abort", "promote" or
 * "promote_full", carried out by the server driving the canary at its next
 * tick. A reason is required. Only while it is ROLLING_OUT; a promotion only
 * once a canary step began, and not over a pending abort (an abort replaces
 * a pending promotion). The same request again: OP_OK, out->already. */
op_code op_canary(db_conn *c, const char *id, const char *request, const op_who *who,
                  op_result *out);

/* approve ID / reject ID (issue 39), a reason required, before the deploy
 * (INITIALIZED, RUNNING, BUILD_SUCCEEDED) of a release (a rollback needs
 * none). An approval counts a person (the actor's name before its last '@':
 * alice@host and alice@page are one) once: out->approvals and
 * out->approved_by after it; the person who created the pipeline never
 * counts (the two-person rule); approving again: OP_OK, out->already. A
 * rejection stops it (STOPPED, a REJECTED event, audit action "reject"). */
op_code op_approve(db_conn *c, const char *id, const op_who *who, op_result *out);
op_code op_reject(db_conn *c, const char *id, const op_who *who, op_result *out);

/* create --app NS/APP --env ENV ...: the new pipeline's id in out->id; beside
 * an unfinished pipeline, or refused by the store, OP_INPUT. */
op_code op_create(db_conn *c, const pipeline_new *n, const op_who *who, op_result *out);

/* rollback --app NS/APP --env ENV [--to ID]: a new pipeline (trigger
 * rollback) redeploying `to`, else the release before the current one. */
op_code op_rollback(db_conn *c, const char *ns, const char *app, const char *env, const char *to,
                    const op_who *who, op_result *out);

/* promote-now ID (issue 39): release ID's artifact and source in
 * environment `to` now (the policy's promotion of ID's environment, its wait
 * skipped), a reason required; the new pipeline's id in out->id, its CREATED
 * event and the audit log naming who and why. Only a SUCCEEDED release or
 * promotion with no newer pipeline of its target; made once whoever tries
 * (pipeline_store_promote): promoted before, OP_OK with out->already and
 * that pipeline's id; an unfinished pipeline in `to`, OP_STALE. */
op_code op_promote_now(db_conn *c, const char *id, const char *to, const op_who *who,
                       op_result *out);

/* The answer's JSON object (what `oopsctl --json` prints, and the page's
 * API answers), for action "stop", "deploy", "rollback", "abort", "promote" or
 * "promote-now". */
void op_result_json(buf *b, const char *action, const op_result *r);

#endif
