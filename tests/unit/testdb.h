/*
 * Shared by the cmocka tests that need the real database: tests/run.sh
 * starts a throwaway MariaDB and passes its URL in OOPS_TEST_DB (a database
 * of this test program's own). No mock of the database, ever.
 */
#ifndef OOPS_TESTDB_H
#define OOPS_TESTDB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    /* The URL carries no password (tests/lib/mariadb.sh): it is in the file
     * OOPS_DB_PASSWORD_FILE names, read as oopsd and oopsctl read it. */
    if (db_config_resolve(cfg, url, err, sizeof err) != 0) {
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

/*
 * A busy database of the test's own making without touching the shared
 * server's max_connections: an account of its own (NAME@127.0.0.1, no
 * privilege: the test's account may create users but not grant) allowed at
 * most max_conns sessions (WITH MAX_USER_CONNECTIONS: one more is refused
 * with 1226, a busy database's answer). cfg gets the test's settings with
 * that account and no default database; it may run statements that need no
 * privilege (SELECT 1, information_schema, GET_LOCK). Dropped with
 * testdb_drop_limited_user.
 */
static inline void testdb_limited_user(db_config *cfg, const char *name, int max_conns)
{
    testdb_config(cfg);
    db_conn *c = testdb_open();
    char sql[512]; /* names are the test's own constants ([a-z_]): account DDL takes no parameter */
    snprintf(sql, sizeof sql, "DROP USER IF EXISTS '%s'@'127.0.0.1'", name);
    db_result_free(testdb_q(c, sql, NULL, 0));
    snprintf(sql, sizeof sql,
             "CREATE USER '%s'@'127.0.0.1' IDENTIFIED BY 'busy-pw' WITH MAX_USER_CONNECTIONS %d",
             name, max_conns);
    db_result_free(testdb_q(c, sql, NULL, 0));
    db_close(c);
    free(cfg->user);
    free(cfg->password);
    free(cfg->socket);
    free(cfg->database);
    cfg->user = strdup(name);
    cfg->password = strdup("busy-pw");
    cfg->socket = NULL;
    cfg->database = NULL;
}

static inline void testdb_drop_limited_user(const char *name)
{
    db_conn *c = testdb_open();
    char sql[256];
    snprintf(sql, sizeof sql, "DROP USER IF EXISTS '%s'@'127.0.0.1'", name);
    db_result_free(testdb_q(c, sql, NULL, 0));
    db_close(c);
}

/* The server's count of connections it refused or that failed
 * (Aborted_connects): every attempt a busy account makes shows here. */
static inline long long testdb_aborted_connects(void)
{
    db_conn *c = testdb_open();
    db_result *r = testdb_q(c, "SHOW GLOBAL STATUS LIKE 'Aborted_connects'", NULL, 0);
    long long n = db_get_int(r, 0, 1, -1);
    db_result_free(r);
    db_close(c);
    return n;
}

#endif
