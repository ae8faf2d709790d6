#include "db_stmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

static char *copy_of(const char *s)
{
    char *d = strdup(s ? s : "");
    if (!d)
        abort(); /* out of memory */
    return d;
}

static double wall_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void count_metric(db_calls *s, const char *name, const char *labels, double v)
{
    if (s && s->metrics)
        metrics_add(s->metrics, name, labels, v);
}

void db_stmt_table_label(const char *sql, const char *after, char *out, size_t size)
{
    const char *t = strcasestr(sql, after);
    t = t ? t + strlen(after) : sql;
    while (*t == ' ')
        t++;
    size_t tl = strcspn(t, " (`\"\\");
    snprintf(out, size, "table=\"%.*s\"", (int)(tl < 60 ? tl : 60), t);
}

/* The statement alone, on its call's connection. */
static void stmt_run(db_call *call)
{
    db_stmt *st = (db_stmt *)call;
    st->sent = wall_clock();
    call->rc = db_exec(call->conn, st->sql, st->p, st->n, st->want_rows ? &st->r : NULL, st->err,
                       sizeof st->err);
    st->answered = wall_clock();
}

db_stmt *db_stmt_new(const char *sql, size_t n, bool want_rows)
{
    db_stmt *st = calloc(1, sizeof *st);
    if (!st || !(st->p = calloc(n ? n : 1, sizeof *st->p)))
        abort();
    st->sql = copy_of(sql);
    st->n = n;
    st->want_rows = want_rows;
    st->call.lane = DB_CALL_WORK;
    st->call.run = stmt_run;
    return st;
}

void db_stmt_text(db_stmt *st, size_t i, const char *s, size_t len)
{
    char *copy = malloc(len + 1);
    if (!copy)
        abort();
    memcpy(copy, s, len);
    copy[len] = '\0';
    st->p[i] = (db_value){.type = DB_TEXT, .s = copy, .len = len};
}

void db_stmt_free(db_stmt *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n; i++)
        if (st->p[i].type == DB_TEXT)
            free((char *)st->p[i].s);
    free(st->p);
    free(st->sql);
    free(st->head);
    free(st->row);
    free(st->tail);
    free(st->batch_key);
    db_result_free(st->r);
    free(st);
}

/* Each of calls[0..n) alone, on conn: the fallback of both kinds. A
 * lookup keeps the rows of its key byte for byte, as in a batch, so the
 * column's collation (case, PAD SPACE) never makes a batch answer otherwise. */
static size_t each_alone(db_conn *conn, db_call **calls, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        db_stmt *st = (db_stmt *)calls[i];
        calls[i]->conn = conn;
        stmt_run(calls[i]);
        if (!calls[i]->rc && st->head && !st->row) {
            db_result *all = st->r;
            st->r = db_result_rows_keyed(all, st->p[0].s);
            db_result_free(all);
        }
    }
    return n;
}

/* ---- inserts ---- */

/* Rows m[0..n) in one statement: 0 or its error number. */
static unsigned insert_rows(db_conn *conn, db_stmt **m, size_t n, char *err, size_t errlen)
{
    buf sql = {0};
    size_t np = 0, per = m[0]->n;
    db_value *p = malloc((n * per > 0 ? n * per : 1) * sizeof *p);
    if (!p)
        abort();
    buf_printf(&sql, "%s VALUES ", m[0]->head);
    for (size_t i = 0; i < n; i++) {
        buf_puts(&sql, i ? ", " : "");
        buf_puts(&sql, m[0]->row);
        for (size_t j = 0; j < per; j++)
            p[np++] = m[i]->p[j];
    }
    if (*m[0]->tail)
        buf_printf(&sql, " %s", m[0]->tail);
    unsigned rc = db_exec(conn, sql.p, p, np, NULL, err, errlen);
    buf_free(&sql);
    free(p);
    return rc;
}

static void insert_batch(db_calls *s, db_conn *conn, db_call **calls, size_t n)
{
    db_stmt **m = (db_stmt **)calls;
    char err[512], label[80];
    size_t statements = 0;
    for (size_t done = 0; done < n;) {
        size_t k = db_batch_chunk(n - done, DB_BATCH_MAX);
        statements += k > 1;
        if (k == 1 || insert_rows(conn, m + done, k, err, sizeof err) != 0)
            statements += each_alone(conn, calls + done, k); /* each for its own answer */
        done += k;
    }
    db_stmt_table_label(m[0]->head, "INTO ", label, sizeof label);
    count_metric(s, "oops_db_insert_statements_total", label, (double)statements);
    if (n > 1) {
        count_metric(s, "oops_db_insert_batches_total", NULL, 1);
        count_metric(s, "oops_db_insert_batched_total", NULL, (double)n);
    }
}

static const db_batch_kind insert_kind = {"insert", DB_BATCH_MAX, insert_batch};

db_stmt *db_stmt_insert(const char *head, const char *row, const char *tail, size_t n)
{
    size_t len = strlen(head) + strlen(row) + strlen(tail) + 16;
    char *one = malloc(len);
    if (!one)
        abort();
    snprintf(one, len, "%s VALUES %s%s%s", head, row, *tail ? " " : "", tail);
    db_stmt *st = db_stmt_new(one, n, false);
    free(one);
    st->head = copy_of(head);
    st->row = copy_of(row);
    st->tail = copy_of(tail);
    len = strlen(head) + strlen(row) + strlen(tail) + 3;
    if (!(st->batch_key = malloc(len)))
        abort();
    snprintf(st->batch_key, len, "%s\x1f%s\x1f%s", head, row, tail);
    st->call.kind = &insert_kind;
    st->call.key = st->batch_key;
    st->call.run = NULL; /* alone too through the kind: counted the same way */
    return st;
}

/* ---- lookups ---- */

/* Every call of the batch gets the rows of its key from r (the batch's answer). */
static void lookup_answer(db_stmt **m, size_t n, const db_result *r)
{
    for (size_t i = 0; i < n; i++) {
        m[i]->r = db_result_rows_keyed(r, m[i]->p[0].s);
        m[i]->call.rc = 0;
    }
}

static void lookup_batch(db_calls *s, db_conn *conn, db_call **calls, size_t n)
{
    db_stmt **m = (db_stmt **)calls;
    const char *keys[DB_BATCH_MAX];
    size_t nk = 0;
    for (size_t i = 0; i < n; i++) { /* each key once */
        bool seen = false;
        for (size_t j = 0; j < nk && !seen; j++)
            seen = strcmp(keys[j], m[i]->p[0].s) == 0;
        if (!seen)
            keys[nk++] = m[i]->p[0].s;
    }
    unsigned rc = 1;
    size_t statements = 0;
    if (n > 1) {
        buf sql = {0};
        db_value p[DB_BATCH_MAX];
        size_t np = 0;
        db_result *r = NULL;
        char err[512];
        buf_puts(&sql, m[0]->head);
        db_batch_in_list(&sql, p, &np, keys, nk, db_batch_shape(nk));
        buf_puts(&sql, m[0]->tail);
        rc = db_exec(conn, sql.p, p, np, &r, err, sizeof err);
        if (rc)
            log_msg(LOG_DEBUG, "a batch of %zu lookups is made one by one: %s", n, err);
        else
            lookup_answer(m, n, r);
        db_result_free(r);
        buf_free(&sql);
        statements = 1;
        count_metric(s, "oops_db_lookup_batches_total", NULL, 1);
        count_metric(s, "oops_db_lookup_batched_total", NULL, (double)n);
    }
    if (rc)
        statements += each_alone(conn, calls, n); /* alone, or the batch failed */
    char label[80];
    db_stmt_table_label(m[0]->sql, "FROM ", label, sizeof label);
    count_metric(s, "oops_db_lookup_statements_total", label, (double)statements);
}

static const db_batch_kind lookup_kind = {"lookup", DB_BATCH_MAX, lookup_batch};

db_stmt *db_stmt_lookup(const char *sql)
{
    const char *in = strstr(sql, "IN (?)");
    int marks = 0;
    for (const char *q = sql; *q; q++)
        marks += *q == '?';
    if (!in || marks != 1)
        return NULL;
    db_stmt *st = db_stmt_new(sql, 1, true);
    size_t hl = (size_t)(in - sql);
    if (!(st->head = malloc(hl + 1)))
        abort();
    memcpy(st->head, sql, hl);
    st->head[hl] = '\0';
    while (hl && st->head[hl - 1] == ' ') /* db_batch_in_list writes " IN (" */
        st->head[--hl] = '\0';
    st->tail = copy_of(in + strlen("IN (?)"));
    st->batch_key = copy_of(sql);
    st->call.kind = &lookup_kind;
    st->call.key = st->batch_key;
    st->call.run = NULL; /* alone too through the kind: counted the same way */
    return st;
}
