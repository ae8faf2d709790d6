/*
 * pipeline_read — reading pipelines: one by id, the servers' lists (by
 * status, in pages, by ids, a scan's free candidates), the operators'
 * queries (the fleet, an application's release history, a pipeline's event
 * trail, the release a rollback redeploys, the unfinished one). Each only
 * reads, and hands back rows decoded into pipeline structs (pipeline.h) that
 * the caller owns and frees.
 */
#ifndef OOPS_PIPELINE_READ_H
#define OOPS_PIPELINE_READ_H

#include "db.h"
#include "pipeline.h"

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
 * with pipeline_ids_free) and, when `statuses` is not NULL, each one's status
 * (n of them, free()) or PSTORE_DB.
 */
int pipeline_store_free(db_conn *c, unsigned status_mask, bool deploy_requested, size_t limit,
                        char ***out, pipeline_status **statuses, size_t *n, char *err,
                        size_t errlen);
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
