/*
 * Shared by the cmocka tests that need the real database: tests/run.sh
 * starts a throwaway MariaDB and passes its URL in OOPS_TEST_DB (a database
 * of this test program's own). No mock of the database, ever.
 */
#ifndef OOPS_TESTDB_H
#define OOPS_TESTDB_H

#include <stdio.h>
#include <stdlib.h>

#include "db.h"
#include "schema.h"

static inline void testdb_config(db_config *cfg)
{
    char err[512];
    const char *url = getenv("OOPS_TEST_DB");
    if (!url) {
        fprintf(stderr, "OOPS_TEST_DB is not set: run through tests/run.sh\n");
        exit(2);
    }
    if (db_config_parse(cfg, url, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "OOPS_TEST_DB: %s\n", err);
        exit(2);
    }
}

static inline db_conn *testdb_open(void)
{
    db_config cfg;
    char err[512];
    testdb_config(&cfg);
    db_conn *c = db_open(&cfg, err, sizeof err);
    db_config_free(&cfg);
    if (!c) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
    return c;
}

/* Run one statement that must succeed; returns the result (caller frees) or NULL. */
static inline db_result *testdb_q(db_conn *c, const char *sql, const db_value *p, size_t n)
{
    char err[512];
    db_result *r = NULL;
    if (db_exec(c, sql, p, n, &r, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", sql, err);
        abort();
    }
    return r;
}

static inline long long testdb_int(db_conn *c, const char *sql, const db_value *p, size_t n)
{
    db_result *r = testdb_q(c, sql, p, n);
    long long v = db_get_int(r, 0, 0, -1);
    db_result_free(r);
    return v;
}

#endif
