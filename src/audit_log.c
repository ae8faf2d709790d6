/* audit_log — the audit log (operator_action): its rows written and read.
 * See audit_log.h. */
#include "audit_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "utf8.h"

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

enum { AUDIT_DETAIL_MAX = 300 };

/* The audit row of an operator's action on pipeline `id` (its application
 * and environment read from it), or of one with no pipeline (ns, app, env
 * given, id NULL or not found). */
unsigned audit_log_insert(db_conn *c, const pipeline_operator *op, const char *action,
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

int pipeline_store_audit_refusal(db_conn *c, const pipeline_operator *op, const char *action,
                                 const char *id, const char *ns, const char *app, const char *env,
                                 const char *outcome, const char *detail, const char *via,
                                 char *err, size_t errlen)
{
    return audit_log_insert(c, op, action, id, ns, app, env, outcome, detail, via, err, errlen)
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
