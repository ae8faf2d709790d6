#include "operator.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

/* The audit row of an answer that changed nothing (outcome "refused",
 * "stale", "already"), with the words the operator was told. A row that
 * cannot be written fails no action — the answer stands — but is never lost
 * silently: a log line, and out->audit_error for the caller (the daemon
 * counts oops_audit_write_failures_total, oopsctl has the line). */
static void record(db_conn *c, const op_who *who, const char *action, const char *id,
                   const char *ns, const char *app, const char *env, const char *outcome,
                   const char *detail, op_result *out)
{
    char e[256];
    if (pipeline_store_audit_refusal(c, &who->op, action, id, ns, app, env, outcome, detail,
                                     who->via, e, sizeof e) == 0)
        return;
    snprintf(out->audit_error, sizeof out->audit_error, "%s", e);
    const char *kv[] = {"action", action,        "pipeline", id, "outcome", outcome,
                        "actor",  who->op.actor, "error",    e,  NULL};
    log_event(LOG_ERROR, "audit log: the operator's action could not be recorded", kv);
}

/* out->code = code with a formatted message; the refusal recorded in the
 * audit log (outcome from the code) unless the database itself failed. */
static op_code refuse(db_conn *c, const op_who *who, const char *action, const char *id,
                      const char *ns, const char *app, const char *env, op_result *out,
                      op_code code, const char *fmt, ...) __attribute__((format(printf, 10, 11)));
static op_code refuse(db_conn *c, const op_who *who, const char *action, const char *id,
                      const char *ns, const char *app, const char *env, op_result *out,
                      op_code code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->error, sizeof out->error, fmt, ap);
    va_end(ap);
    out->code = code;
    if (code != OP_DB)
        record(c, who, action, id, ns, app, env, code == OP_STALE ? "stale" : "refused", out->error,
               out);
    return code;
}

/* Done before: nothing changed, recorded as "already" with out->note (what
 * oopsctl prints). */
static op_code already(db_conn *c, const op_who *who, const char *action, const char *id,
                       op_result *out, const char *what)
{
    out->already = true;
    snprintf(out->note, sizeof out->note, "deploy of %s already %s", id, what);
    record(c, who, action, id, NULL, NULL, NULL, "already", out->note, out);
    return OP_OK;
}

static op_code db_error(op_result *out, const char *err)
{
    snprintf(out->error, sizeof out->error, "%s", err);
    out->code = OP_DB;
    return OP_DB;
}

/* The pipeline as read now: OP_OK with *p (pipeline_clear it), else the code. */
static op_code load(db_conn *c, const op_who *who, const char *action, const char *id, pipeline *p,
                    op_result *out)
{
    char err[512];
    int rc = pipeline_store_get(c, id, p, err, sizeof err);
    if (rc < 0)
        return db_error(out, err);
    if (rc == 0)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_NOTFOUND,
                      "%s: no pipeline with id \"%s\"", action, id);
    return OP_OK;
}

op_code op_stop(db_conn *c, const char *id, const pipeline_status *expect, const op_who *who,
                op_result *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->id, sizeof out->id, "%s", id);
    pipeline p;
    op_code rc = load(c, who, "stop", id, &p, out);
    if (rc != OP_OK)
        return rc;
    pipeline_status now = p.status, from = expect ? *expect : p.status;
    pipeline_clear(&p);
    if (from != now)
        return refuse(c, who, "stop", id, NULL, NULL, NULL, out, OP_STALE,
                      "stop %s: state changed concurrently: it is %s, not %s; nothing changed", id,
                      pipeline_status_name(now), pipeline_status_name(from));
    if (pipeline_status_terminal(from))
        return refuse(c, who, "stop", id, NULL, NULL, NULL, out, OP_INPUT,
                      "stop %s: the pipeline already finished (%s)", id,
                      pipeline_status_name(from));
    char msg[PIPELINE_ACTOR_MAX + PIPELINE_REASON_MAX + 32], err[1024];
    snprintf(msg, sizeof msg, "Stopped by %s%s%s", who->op.actor, who->op.reason ? ": " : ".",
             who->op.reason ? who->op.reason : "");
    pipeline_transition_extra x = {.op = &who->op};
    int r = pipeline_store_transition_ex(c, id, from, PS_STOPPED, msg, NULL, who->via, 0, &x, err,
                                         sizeof err);
    if (r == PSTORE_ILLEGAL)
        return refuse(c, who, "stop", id, NULL, NULL, NULL, out, OP_INPUT,
                      "stop %s: %s (a rollout cannot be stopped)", id, err);
    if (r < 0)
        return db_error(out, err);
    if (r == 0)
        return refuse(c, who, "stop", id, NULL, NULL, NULL, out, OP_STALE,
                      "stop %s: state changed concurrently: it is no longer %s; nothing changed",
                      id, pipeline_status_name(from));
    out->from = from;
    return OP_OK;
}

static op_code deploy_override(db_conn *c, const char *id, const pipeline *p, const op_who *who,
                               op_result *out)
{
    /* A promotion has no build: it waits INITIALIZED. */
    bool promotion =
        p->status == PS_INITIALIZED && p->trigger_type && strcmp(p->trigger_type, "promotion") == 0;
    if ((p->status == PS_INITIALIZED && !promotion) || p->status == PS_RUNNING)
        return refuse(c, who, "override", id, NULL, NULL, NULL, out, OP_INPUT,
                      "deploy %s: the build has not succeeded yet (%s); nothing changed", id,
                      pipeline_status_name(p->status));
    if (p->status != PS_BUILD_SUCCEEDED && !promotion)
        return refuse(c, who, "override", id, NULL, NULL, NULL, out, OP_STALE,
                      "deploy %s: state changed concurrently: it is %s, not BUILD_SUCCEEDED; "
                      "nothing changed",
                      id, pipeline_status_name(p->status));
    if (p->hold && strcmp(p->hold, "approval") == 0)
        return refuse(c, who, "override", id, NULL, NULL, NULL, out, OP_INPUT,
                      "deploy %s: it waits for approvals (%d so far), which an override does not "
                      "replace: `oopsctl approve %s --reason TEXT` by other persons; nothing "
                      "changed",
                      id, p->approvals, id);
    if (p->override_at)
        return already(c, who, "override", id, out, "overridden");
    char err[512];
    int rc = pipeline_store_override_by(c, id, p->status, who->via, &who->op, err, sizeof err);
    if (rc < 0)
        return db_error(out, err);
    if (rc == 0)
        return refuse(c, who, "override", id, NULL, NULL, NULL, out, OP_STALE,
                      "deploy %s: state changed concurrently: it is no longer %s (or was "
                      "overridden meanwhile); nothing changed",
                      id, pipeline_status_name(p->status));
    snprintf(out->note, sizeof out->note,
             "deploy of %s: override recorded; it deploys at the next tick", id);
    return OP_OK;
}

op_code op_deploy(db_conn *c, const char *id, bool override, const op_who *who, op_result *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->id, sizeof out->id, "%s", id);
    out->override = override;
    const char *action = override ? "override" : "release";
    if (override && !who->op.reason)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_INPUT,
                      "deploy %s: an override needs a reason (it is kept in the pipeline's "
                      "history)",
                      id);
    pipeline p;
    op_code rc = load(c, who, action, id, &p, out);
    if (rc != OP_OK)
        return rc;
    if (override) {
        rc = deploy_override(c, id, &p, who, out);
        pipeline_clear(&p);
        return rc;
    }
    pipeline_status st = p.status;
    bool manual = p.manual, requested = p.deploy_requested_at != NULL;
    pipeline_clear(&p);
    if (!manual)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_INPUT,
                      "deploy %s: the pipeline deploys automatically (mode auto)%s", id,
                      st == PS_BUILD_SUCCEEDED
                          ? "; it waits for a deploy window, freeze or slot: --override "
                            "--reason TEXT releases it from a window or freeze"
                          : "");
    if (st == PS_INITIALIZED || st == PS_RUNNING)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_INPUT,
                      "deploy %s: the build has not succeeded yet (%s)", id,
                      pipeline_status_name(st));
    /* A release the engine has already taken up (a second click, or a retry after the
     * engine moved on) was asked for already: that is the answer, not a stale 409. One
     * that ended otherwise (stopped, failed) is stale, as before. */
    if (requested && (st == PS_DEPLOYING || st == PS_ROLLING_OUT || st == PS_SUCCEEDED)) {
        char what[64];
        snprintf(what, sizeof what, "requested (it is %s)", pipeline_status_name(st));
        return already(c, who, action, id, out, what);
    }
    if (st != PS_BUILD_SUCCEEDED)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_STALE,
                      "deploy %s: state changed concurrently: it is %s, not BUILD_SUCCEEDED; "
                      "nothing changed",
                      id, pipeline_status_name(st));
    if (requested)
        return already(c, who, action, id, out, "requested");
    char err[512];
    int r = pipeline_store_request_deploy_by(c, id, who->via, &who->op, err, sizeof err);
    if (r < 0)
        return db_error(out, err);
    if (r == 0)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_STALE,
                      "deploy %s: state changed concurrently: it is no longer BUILD_SUCCEEDED; "
                      "nothing changed",
                      id);
    snprintf(out->note, sizeof out->note, "deploy of %s requested", id);
    return OP_OK;
}

op_code op_canary(db_conn *c, const char *id, const char *request, const op_who *who,
                  op_result *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->id, sizeof out->id, "%s", id);
    snprintf(out->request, sizeof out->request, "%s", request);
    bool abort = strcmp(request, "abort") == 0;
    const char *action = abort ? "abort" : "promote";
    if (!who->op.reason)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_INPUT,
                      "%s %s: a reason is needed (it is kept in the pipeline's history)", action,
                      id);
    pipeline p;
    op_code rc = load(c, who, action, id, &p, out);
    if (rc != OP_OK)
        return rc;
    pipeline_status st = p.status;
    int step = p.step;
    char pending[16] = "";
    if (p.canary_request)
        snprintf(pending, sizeof pending, "%s", p.canary_request);
    pipeline_clear(&p);
    if (st != PS_ROLLING_OUT)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_INPUT,
                      "%s %s: the pipeline is %s, not rolling out: no canary to %s", action, id,
                      pipeline_status_name(st), action);
    if (!abort && step == 0)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_INPUT,
                      "promote %s: no canary step has begun (not a canary, or its rollout is not "
                      "ready yet)",
                      id);
    if (strcmp(pending, request) == 0) {
        out->already = true;
        snprintf(out->note, sizeof out->note, "%s of %s already requested", action, id);
        record(c, who, action, id, NULL, NULL, NULL, "already", out->note, out);
        return OP_OK;
    }
    if (!abort && strcmp(pending, "abort") == 0)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_INPUT,
                      "promote %s: an abort is pending", id);
    char err[512];
    int r = pipeline_store_canary_request_by(c, id, request, pending[0] ? pending : NULL, who->via,
                                             &who->op, err, sizeof err);
    if (r < 0)
        return db_error(out, err);
    if (r == 0)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_STALE,
                      "%s %s: state changed concurrently (it finished, or another request came "
                      "first); nothing changed",
                      action, id);
    snprintf(out->note, sizeof out->note, "%s of %s requested: %s", action, id,
             abort ? "the server driving it sends its traffic back to stable, then fails it"
             : strcmp(request, "promote_full") == 0
                 ? "the server driving it sets weight 100 and finishes it"
                 : "the server driving it ends the current step");
    return OP_OK;
}

/* Whether st is before the deploy: approvals and rejections are given then. */
static bool before_deploy(pipeline_status st)
{
    return st == PS_INITIALIZED || st == PS_RUNNING || st == PS_BUILD_SUCCEEDED;
}

/* The person of an actor: its name before the last '@' (all of it without one). */
static void person_of(const char *actor, char *out, size_t len)
{
    const char *at = actor ? strrchr(actor, '@') : NULL;
    size_t n = actor ? (at ? (size_t)(at - actor) : strlen(actor)) : 0;
    snprintf(out, len, "%.*s", (int)n, actor ? actor : "");
}

/* Whether person is one of the comma-separated names of list. */
static bool listed(const char *list, const char *person)
{
    size_t n = strlen(person);
    for (const char *s = list; s && *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == n && strncmp(s, person, n) == 0)
            return true;
        s = e ? e + 1 : NULL;
    }
    return false;
}

/* The checks approve and reject share: a reason, the pipeline, before its
 * deploy, a release. OP_OK with *p loaded (pipeline_clear it). */
static op_code approval_load(db_conn *c, const char *action, const char *id, const op_who *who,
                             pipeline *p, op_result *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->id, sizeof out->id, "%s", id);
    if (!who->op.reason)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_INPUT,
                      "%s %s: a reason is needed (it is kept in the pipeline's history)", action,
                      id);
    op_code rc = load(c, who, action, id, p, out);
    if (rc != OP_OK)
        return rc;
    /* A rollback first: what it is says more than where it is (and does
     * not change while it runs). */
    const char *why = NULL;
    if (p->trigger_type && strcmp(p->trigger_type, "rollback") == 0)
        why = "a rollback needs no approval";
    else if (!before_deploy(p->status))
        why = "approvals are given before the deploy";
    if (!why)
        return OP_OK;
    char status[32];
    snprintf(status, sizeof status, "%s", pipeline_status_name(p->status));
    pipeline_clear(p);
    return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_INPUT, "%s %s: it is %s: %s",
                  action, id, status, why);
}

op_code op_approve(db_conn *c, const char *id, const op_who *who, op_result *out)
{
    pipeline p;
    op_code rc = approval_load(c, "approve", id, who, &p, out);
    if (rc != OP_OK)
        return rc;
    pipeline_status st = p.status;
    char person[PIPELINE_ACTOR_MAX + 1], err[512];
    person_of(who->op.actor, person, sizeof person);
    bool again = listed(p.approved_by, person);
    int count = p.approvals;
    out->approvals = count;
    snprintf(out->approved_by, sizeof out->approved_by, "%s", p.approved_by ? p.approved_by : "");
    pipeline_clear(&p);
    if (again) {
        out->already = true;
        snprintf(out->note, sizeof out->note, "approval of %s by %s already recorded", id, person);
        record(c, who, "approve", id, NULL, NULL, NULL, "already", out->note, out);
        return OP_OK;
    }
    int r = pipeline_store_made_by(c, id, person, err, sizeof err);
    if (r < 0)
        return db_error(out, err);
    if (r == 1)
        return refuse(c, who, "approve", id, NULL, NULL, NULL, out, OP_INPUT,
                      "approve %s: %s created it (or promoted it, or a release it was promoted "
                      "from), and an approval must come from another person (two-person rule)",
                      id, person);
    if (strlen(person) > 64 || strchr(person, ','))
        return refuse(c, who, "approve", id, NULL, NULL, NULL, out, OP_INPUT,
                      "approve %s: \"%.64s...\" is not a name an approval can record", id, person);
    if (count >= PIPELINE_APPROVALS_MAX)
        return refuse(c, who, "approve", id, NULL, NULL, NULL, out, OP_INPUT,
                      "approve %s: it has %d approvals already, the most one release records", id,
                      count);
    r = pipeline_store_approve_by(c, id, st, person, who->via, &who->op, err, sizeof err);
    if (r < 0)
        return db_error(out, err);
    if (r == 0)
        return refuse(c, who, "approve", id, NULL, NULL, NULL, out, OP_STALE,
                      "approve %s: state changed concurrently: it is no longer %s, or %s approved "
                      "it meanwhile; nothing changed",
                      id, pipeline_status_name(st), person);
    if (load(c, who, "approve", id, &p, out) == OP_OK) {
        out->approvals = p.approvals;
        snprintf(out->approved_by, sizeof out->approved_by, "%s",
                 p.approved_by ? p.approved_by : person);
        pipeline_clear(&p);
    } else {
        memset(out, 0, sizeof *out);
        snprintf(out->id, sizeof out->id, "%s", id);
        out->approvals = count + 1;
        snprintf(out->approved_by, sizeof out->approved_by, "%s", person);
    }
    snprintf(out->note, sizeof out->note, "%s approved by %.64s: %d approval%s (%.380s)", id,
             person, out->approvals, out->approvals == 1 ? "" : "s", out->approved_by);
    return OP_OK;
}

op_code op_reject(db_conn *c, const char *id, const op_who *who, op_result *out)
{
    pipeline p;
    op_code rc = approval_load(c, "reject", id, who, &p, out);
    if (rc != OP_OK)
        return rc;
    pipeline_status from = p.status;
    pipeline_clear(&p);
    char msg[PIPELINE_ACTOR_MAX + PIPELINE_REASON_MAX + 32], err[1024];
    snprintf(msg, sizeof msg, "Rejected by %s: %s", who->op.actor, who->op.reason);
    pipeline_transition_extra x = {.op = &who->op, .event_type = "REJECTED", .action = "reject"};
    int r = pipeline_store_transition_ex(c, id, from, PS_STOPPED, msg, NULL, who->via, 0, &x, err,
                                         sizeof err);
    if (r < 0)
        return db_error(out, err);
    if (r == 0)
        return refuse(c, who, "reject", id, NULL, NULL, NULL, out, OP_STALE,
                      "reject %s: state changed concurrently: it is no longer %s; nothing changed",
                      id, pipeline_status_name(from));
    out->from = from;
    return OP_OK;
}

op_code op_create(db_conn *c, const pipeline_new *n, const op_who *who, op_result *out)
{
    memset(out, 0, sizeof *out);
    const char *action = n->trigger && strcmp(n->trigger, "rollback") == 0 ? "rollback" : "create";
    char err[1024];
    int rc = pipeline_store_create(c, n, out->id, err, sizeof err);
    if (rc == PSTORE_EXISTS || rc == PSTORE_BAD)
        return refuse(c, who, action, NULL, n->namespace, n->application, n->environment, out,
                      OP_INPUT, "create: %s", err);
    if (rc != 0)
        return db_error(out, err);
    return OP_OK;
}

op_code op_rollback(db_conn *c, const char *ns, const char *app, const char *env, const char *to,
                    const op_who *who, op_result *out)
{
    memset(out, 0, sizeof *out);
    char err[1024];
    pipeline t;
    int rc = pipeline_store_rollback_target(c, ns, app, env, to, &t, err, sizeof err);
    if (rc == PSTORE_BAD)
        return refuse(c, who, "rollback", to, ns, app, env, out, OP_INPUT, "rollback: %s", err);
    if (rc != 0)
        return db_error(out, err);
    /* The new pipeline says what it rolls back to (its CREATED event too). */
    char msg[128];
    snprintf(msg, sizeof msg, "Rollback to %s.", t.id);
    pipeline_new n = {
        .namespace = ns,
        .application = app,
        .environment = env,
        .artifact = t.artifact,
        .source = t.source,
        .trigger = "rollback",
        .actor = who->via,
        .op = &who->op,
        .message = msg,
    };
    rc = pipeline_store_create(c, &n, out->id, err, sizeof err);
    op_code code = OP_OK;
    if (rc == PSTORE_EXISTS) {
        /* Name the one in the way, when it is still there. */
        pipeline u;
        char which[80] = "";
        if (pipeline_store_unfinished(c, ns, app, env, &u, err, sizeof err) == 1) {
            snprintf(which, sizeof which, " (%s, %s)", u.id, pipeline_status_name(u.status));
            pipeline_clear(&u);
        }
        code = refuse(c, who, "rollback", NULL, ns, app, env, out, OP_STALE,
                      "rollback: an unfinished pipeline already exists for %s/%s in %s%s; "
                      "nothing changed",
                      ns, app, env, which);
    } else if (rc == PSTORE_BAD) {
        code = refuse(c, who, "rollback", NULL, ns, app, env, out, OP_INPUT, "rollback: %s", err);
    } else if (rc != 0) {
        code = db_error(out, err);
    } else {
        snprintf(out->rollback_to, sizeof out->rollback_to, "%s", t.id);
        snprintf(out->artifact, sizeof out->artifact, "%s", t.artifact ? t.artifact : "");
        char q[300];
        pipeline_quote(q, sizeof q, t.artifact, 80);
        snprintf(out->note, sizeof out->note,
                 "rollback: %s rolls %s/%s %s back to %s (artifact %s)", out->id, ns, app, env,
                 t.id, q);
    }
    pipeline_clear(&t);
    return code;
}

/* Why release p cannot be promoted to `to` by an operator, or NULL. */
static const char *not_promotable(const pipeline *p, const char *to)
{
    if (p->trigger_type && strcmp(p->trigger_type, "rollback") == 0)
        return "a rollback is never promoted (only a release or a promotion)";
    if (p->status != PS_SUCCEEDED)
        return "only a release that went live (SUCCEEDED) is promoted";
    if (p->environment && strcmp(p->environment, to) == 0)
        return "it is in that environment already";
    return NULL;
}

op_code op_promote_now(db_conn *c, const char *id, const char *to, const op_who *who,
                       op_result *out)
{
    const char *action = "promote-now";
    memset(out, 0, sizeof *out);
    if (!who->op.reason)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_INPUT,
                      "promote-now %s: a reason is needed (--reason TEXT: it is kept in the new "
                      "pipeline's history)",
                      id);
    pipeline p;
    op_code rc = load(c, who, action, id, &p, out);
    if (rc != OP_OK)
        return rc;
    snprintf(out->promoted_from, sizeof out->promoted_from, "%s", id);
    snprintf(out->environment, sizeof out->environment, "%s", to);
    char status[32], msg[PIPELINE_ACTOR_MAX + PIPELINE_REASON_MAX + 96], err[1024];
    snprintf(status, sizeof status, "%s", pipeline_status_name(p.status));
    const char *why = not_promotable(&p, to);
    snprintf(msg, sizeof msg, "Promoted from %s (%s) by %s: %s", p.environment, id, who->op.actor,
             who->op.reason);
    pipeline_clear(&p);
    if (why)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_INPUT,
                      "promote-now %s: it is %s: %s", id, status, why);
    int r = pipeline_store_promote(c, id, to, msg, who->via, &who->op, out->id, err, sizeof err);
    if (r == 0) {
        snprintf(out->note, sizeof out->note, "promote-now: %s releases %s in %s", out->id, id, to);
        return OP_OK;
    }
    if (r == PSTORE_PROMOTED) {
        out->already = true;
        snprintf(out->note, sizeof out->note, "promote-now: %s was promoted already: %s", id,
                 out->id);
        record(c, who, action, id, NULL, NULL, NULL, "already", out->note, out);
        return OP_OK;
    }
    if (r == PSTORE_EXISTS || r == PSTORE_STALE)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_STALE,
                      "promote-now %s: %s; nothing changed", id,
                      r == PSTORE_EXISTS ? err
                                         : "a newer pipeline of its application and environment "
                                           "exists now, or it is no longer SUCCEEDED");
    if (r == PSTORE_BAD)
        return refuse(c, who, action, id, NULL, NULL, NULL, out, OP_INPUT, "promote-now %s: %s", id,
                      err);
    return db_error(out, err);
}

void op_result_json(buf *b, const char *action, const op_result *r)
{
    bool first = true;
    buf_puts(b, "{");
    json_kv_str(b, "id", r->id, &first);
    if (strcmp(action, "stop") == 0) {
        json_kv_str(b, "from", pipeline_status_name(r->from), &first);
        json_kv_str(b, "status", "STOPPED", &first);
    } else if (strcmp(action, "deploy") == 0) {
        json_kv_bool(b, r->override ? "override" : "requested", true, &first);
        if (r->already)
            json_kv_bool(b, "already", true, &first);
    } else if (strcmp(action, "reject") == 0) {
        json_kv_str(b, "from", pipeline_status_name(r->from), &first);
        json_kv_str(b, "status", "STOPPED", &first);
    } else if (strcmp(action, "approve") == 0) {
        json_kv_int(b, "approvals", r->approvals, &first);
        json_kv_str(b, "approved_by", r->approved_by, &first);
        if (r->already)
            json_kv_bool(b, "already", true, &first);
    } else if (strcmp(action, "promote-now") == 0 || strcmp(action, "promote_now") == 0) {
        json_kv_str(b, "trigger", "promotion", &first);
        json_kv_str(b, "promoted_from", r->promoted_from, &first);
        json_kv_str(b, "environment", r->environment, &first);
        if (r->already)
            json_kv_bool(b, "already", true, &first);
    } else if (strcmp(action, "abort") == 0 || strcmp(action, "promote") == 0) {
        json_kv_str(b, "requested", r->request, &first);
        if (r->already)
            json_kv_bool(b, "already", true, &first);
    } else {
        json_kv_str(b, "status", "INITIALIZED", &first);
        json_kv_str(b, "trigger", "rollback", &first);
        json_kv_str(b, "rollback_to", r->rollback_to, &first);
        json_kv_str(b, "artifact", r->artifact, &first);
    }
    buf_puts(b, "}");
}
