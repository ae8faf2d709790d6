/* deploy_slot — deploy slots (the deploy_slot table): an environment's
 * rows made, and one claimed in a transition's transaction. See
 * deploy_slot.h. */
#include "deploy_slot.h"

#include <stdbool.h>
#include <string.h>

#include "buf.h"

/* The deploy slot of env for pipeline id, inside the caller's
 * transaction (env's rows exist: deploy_slot_ensure). The environment's slot
 * rows are locked first, so claims of one environment take turns; a slot is
 * free when it names nobody, this pipeline, or a pipeline no longer
 * DEPLOYING or ROLLING_OUT (read with a locking read: the latest status,
 * whatever this transaction's snapshot). A slot is taken only when fewer
 * pipelines wait ahead of this one (rollbacks first, then the oldest) than
 * slots are free. 0 with *slot set when claimed (or held already), else
 * *slot 0 (*slots_in_use, *slots_ahead say why); or an error number. */
unsigned deploy_slot_claim(db_conn *c, const char *env, unsigned count, const char *id,
                           long long *slot, unsigned *slots_in_use, unsigned *slots_ahead, char *e,
                           size_t elen)
{
    *slot = 0;
    db_value p[2 + DEPLOY_SLOTS_MAX];
    p[0] = db_text(env);
    p[1] = db_int(count);
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
    *slots_in_use = in_use;
    if (rc || mine) {
        *slot = mine;
        return rc;
    }
    if (!free_slot)
        return 0;
    /* In line: the waiting ones (hold 'slot') ahead of this pipeline. */
    unsigned free_n = count > in_use ? count - in_use : 0;
    db_value q[] = {db_text(env), db_text(id), db_text(id), db_text(id)};
    rc = db_exec(c,
                 "SELECT COUNT(*) FROM pipeline w, pipeline me WHERE w.hold = 'slot' AND "
                 "w.environment = ? AND w.status IN ('INITIALIZED','BUILD_SUCCEEDED') AND "
                 "w.id <> ? AND me.id = ? AND ((w.trigger_type = 'rollback') > "
                 "(me.trigger_type = 'rollback') OR ((w.trigger_type = 'rollback') = "
                 "(me.trigger_type = 'rollback') AND (w.created_at, w.id) < (me.created_at, ?)))",
                 q, 4, &r, e, elen);
    if (rc)
        return rc;
    *slots_ahead = (unsigned)db_get_int(r, 0, 0, 0);
    db_result_free(r);
    if (*slots_ahead >= free_n)
        return 0;
    db_value u[] = {db_text(id), db_text(env), db_int(free_slot)};
    rc =
        db_exec(c,
                "UPDATE deploy_slot SET pipeline_id = ?, claimed_at = NOW(6) WHERE environment = ? "
                "AND slot = ?",
                u, 3, NULL, e, elen);
    if (!rc)
        *slot = free_slot;
    return rc;
}

/* The environment's slot rows 1..count, made once (outside any
 * transaction: the insert's locks would make two claims deadlock). */
unsigned deploy_slot_ensure(db_conn *c, const char *env, unsigned count, char *e, size_t elen)
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
