/* pipeline_read — reading pipelines, and decoding their rows. See
 * pipeline_read.h. */
#include "pipeline_read.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock_names.h"

#define PIPELINE_COLUMNS                                                                           \
    "id, namespace, application, environment, status, deploy_mode, artifact, source, "             \
    "message, trigger_type, deploy_requested_at, created_at, status_changed_at, driven_by, "       \
    "TIMESTAMPDIFF(MICROSECOND, status_changed_at, NOW(6)) / 1e6, hold, override_at, "             \
    "rollback_of, "                                                                                \
    "step, step_at, TIMESTAMPDIFF(MICROSECOND, step_at, NOW(6)) / 1e6, weight, weight_step, "      \
    "paused, "                                                                                     \
    "canary_request, approvals, approved_by, promoted_from"

/* The column after PIPELINE_COLUMNS (a list's lock owner). */
#define PIPELINE_NCOLUMNS 28

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

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
    const char *v = db_get(r, row, 18);
    p->step = v ? atoi(v) : 0;
    p->step_at = dup_or_null(db_get(r, row, 19));
    v = db_get(r, row, 20);
    p->step_age_s = v ? strtod(v, NULL) : 0;
    v = db_get(r, row, 21);
    p->weight = v ? atoi(v) : -1;
    v = db_get(r, row, 22);
    p->weight_step = v ? atoi(v) : -1;
    p->paused = dup_or_null(db_get(r, row, 23));
    p->canary_request = dup_or_null(db_get(r, row, 24));
    v = db_get(r, row, 25);
    p->approvals = v ? atoi(v) : 0;
    p->approved_by = dup_or_null(db_get(r, row, 26));
    p->promoted_from = dup_or_null(db_get(r, row, 27));
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
                        char ***out, pipeline_status **statuses, size_t *n, char *err,
                        size_t errlen)
{
    *out = NULL;
    if (statuses)
        *statuses = NULL;
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
                        "%sSELECT id, created_at, status FROM (SELECT id, created_at, status"
                        " FROM pipeline"
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
    if (!*out || (statuses && !(*statuses = calloc(r->nrows ? r->nrows : 1, sizeof **statuses))))
        abort();
    for (size_t i = 0; i < r->nrows; i++) {
        const char *id = db_get(r, i, 0);
        if (!((*out)[i] = strdup(id ? id : "")))
            abort();
        if (statuses && pipeline_status_parse(db_get(r, i, 2), &(*statuses)[i]) != 0)
            (*statuses)[i] = PS_INITIALIZED; /* not read: a status this build does not know */
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
