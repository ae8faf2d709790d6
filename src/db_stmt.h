/*
 * db_stmt — one SQL statement as a database call (db_calls.h): its text, its
 * parameters (owned), its result. Two kinds of them are made in batches:
 *
 *   an insert: `head VALUES row tail`, one row; rows of the same head, row
 *     and tail that wait together go in one multi-row INSERT (tail may be
 *     ON DUPLICATE KEY UPDATE ... with VALUES(col)), in chunks of a power of
 *     two; when a chunk fails, each of its rows is inserted alone;
 *   a lookup: a point read whose one placeholder is in "IN (?)" and whose
 *     first column is the key; the lookups of the same SQL that wait together
 *     go in one statement, each key once, the list padded to a power of two;
 *     each call gets the rows of its own key (matched byte for byte, and
 *     so alone too: a column's collation never makes a batch answer
 *     otherwise); when the statement fails, each runs alone.
 *
 * Metrics (when the scheduler has them): oops_db_insert_statements_total and
 * oops_db_lookup_statements_total{table} count the statements sent,
 * oops_db_{insert,lookup}_batches_total and _batched_total the batches of
 * more than one call and the calls in them.
 */
#ifndef OOPS_DB_STMT_H
#define OOPS_DB_STMT_H

#include <stdbool.h>
#include <stddef.h>

#include "db.h"
#include "db_calls.h"

typedef struct db_stmt {
    db_call call;            /* first: a db_stmt is a db_call */
    char *sql;               /* the statement alone */
    char *head, *row, *tail; /* a batched one's parts (a lookup's row is NULL) */
    char *batch_key;         /* what its batch shares (call.key points here) */
    db_value *p;             /* parameters, owned: DB_TEXT values are copies */
    size_t n;
    bool want_rows;        /* keep the result (else only success) */
    db_result *r;          /* the result, on success with want_rows */
    char err[512];         /* the failure, when call.rc */
    double sent, answered; /* this host's clock around the statement itself */
} db_stmt;

/* A statement made alone; n parameters (set p[0..n) afterwards). Never NULL. */
db_stmt *db_stmt_new(const char *sql, size_t n, bool want_rows);
/* An insert of one row (head and tail hold no placeholder; n parameters for row). */
db_stmt *db_stmt_insert(const char *head, const char *row, const char *tail, size_t n);
/* A lookup of one key (p[0]); NULL when sql does not hold exactly one
 * placeholder, in "IN (?)". */
db_stmt *db_stmt_lookup(const char *sql);
/* p[i] = a copy of s[0..len). */
void db_stmt_text(db_stmt *st, size_t i, const char *s, size_t len);
/* Frees st and what it owns. Safe with NULL. */
void db_stmt_free(db_stmt *st);

/* table="NAME": the word after `after` ("INTO ", "FROM ") in sql, for the metrics. */
void db_stmt_table_label(const char *sql, const char *after, char *out, size_t size);

#endif
