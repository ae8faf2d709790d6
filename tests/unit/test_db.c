/* Connection settings: URL parsing, password masking, and db_exec on the real database. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <mysql.h>

#include "db.h"
#include "testdb.h"

static void a_full_url_is_parsed(void **state)
{
    (void)state;
    db_config c;
    char err[256];
    assert_int_equal(db_config_parse(&c, "mysql://oops:p%40ss@db.example:3307/oopsdb", NULL, err, sizeof err), 0);
    assert_string_equal(c.user, "oops");
    assert_string_equal(c.password, "p@ss");
    assert_string_equal(c.host, "db.example");
    assert_int_equal(c.port, 3307);
    assert_string_equal(c.database, "oopsdb");
    assert_null(c.socket);
    db_config_free(&c);
}

static void a_socket_url_and_the_password_from_the_environment(void **state)
{
    (void)state;
    db_config c;
    char err[256], where[300];
    assert_int_equal(db_config_parse(&c, "mysql://oops@localhost/oops?socket=/run/my%20sql.sock", "envpw", err, sizeof err), 0);
    assert_string_equal(c.socket, "/run/my sql.sock");
    assert_string_equal(c.password, "envpw");
    assert_string_equal(db_config_where(&c, where, sizeof where), "socket /run/my sql.sock");
    db_config_free(&c);
    /* A password in the URL wins over the environment. */
    assert_int_equal(db_config_parse(&c, "mysql://u:url@h/d", "envpw", err, sizeof err), 0);
    assert_string_equal(c.password, "url");
    db_config_free(&c);
}

static void bad_urls_say_what_is_wrong_without_the_password(void **state)
{
    (void)state;
    static const struct { const char *url, *msg; } cases[] = {
        {"postgres://u:secret@h/d", "database URL must start with mysql://"},
        {"mysql://u:secret@h", "database URL has no /database part"},
        {"mysql://h/d", "database URL has no user"},
        {"mysql://u:secret@h:99999/d", "database URL: port \"99999\" is not a number in 1-65535"},
        {"mysql://u:secret@h/", "database URL has no database name after the host"},
        {"mysql://u:secret@h/d?sock=x", "database URL: unknown option \"sock\""},
        {"", "no database URL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        db_config c;
        char err[256];
        assert_int_equal(db_config_parse(&c, cases[i].url, NULL, err, sizeof err), -1);
        assert_non_null(strstr(err, cases[i].msg));
        assert_null(strstr(err, "secret"));
    }
}

static void the_password_is_masked_in_place(void **state)
{
    (void)state;
    char url[] = "mysql://oops:s3cr@t@127.0.0.1:3306/oops";
    db_mask_url_password(url);
    assert_string_equal(url, "mysql://oops:xxxxxx@127.0.0.1:3306/oops");
    char nopw[] = "mysql://oops@h/d";
    db_mask_url_password(nopw);
    assert_string_equal(nopw, "mysql://oops@h/d");
}

static void exec_binds_parameters_and_returns_typed_text_cells(void **state)
{
    (void)state;
    db_conn *c = testdb_open();
    const char *evil = "x'); DROP TABLE t; --";
    db_value p[] = {db_text(evil), db_int(42), db_null(), db_double(1.5)};
    db_result *r = testdb_q(c, "SELECT ?, ?, ?, ?, NOW(6)", p, 4);
    assert_int_equal(r->nrows, 1);
    assert_string_equal(db_get(r, 0, 0), evil);
    assert_string_equal(db_get(r, 0, 1), "42");
    assert_null(db_get(r, 0, 2));
    assert_string_equal(db_get(r, 0, 3), "1.5");
    assert_int_equal(strlen(db_get(r, 0, 4)), 26); /* YYYY-MM-DD HH:MM:SS.ffffff */
    db_result_free(r);
    /* Long text comes back whole. */
    char big[70000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    db_value q[] = {db_text(big)};
    r = testdb_q(c, "SELECT CONCAT(?, 'z')", q, 1);
    assert_int_equal(strlen(db_get(r, 0, 0)), sizeof big);
    db_result_free(r);
    db_close(c);
}

static void a_wrong_password_is_refused_naming_the_host_not_the_password(void **state)
{
    (void)state;
    db_config c;
    char err[512];
    testdb_config(&c);
    free(c.password);
    c.password = strdup("definitely-wrong-pw");
    db_conn *conn = db_open(&c, err, sizeof err);
    assert_null(conn);
    assert_non_null(strstr(err, "cannot connect to database at 127.0.0.1:"));
    assert_non_null(strstr(err, "Access denied"));
    assert_null(strstr(err, "definitely-wrong-pw"));
    db_config_free(&c);
}

/* Session settings from the config are applied on open and on every reopen. */
static void session_settings_apply_on_open_and_reopen(void **state)
{
    (void)state;
    db_config cfg;
    char err[512];
    assert_int_equal(db_config_resolve(&cfg, getenv("OOPS_TEST_DB"), err, sizeof err), 0);
    cfg.session_wait_timeout_s = 47;
    cfg.row_lock_wait_s = 3;
    db_conn *c = db_open(&cfg, err, sizeof err);
    assert_non_null(c);
    db_conn *admin = testdb_open();
    for (int round = 0; round < 2; round++) {
        db_result *r = NULL;
        assert_int_equal(db_exec(c, "SELECT @@session.wait_timeout, @@session.innodb_lock_wait_timeout",
                                 NULL, 0, &r, err, sizeof err), 0);
        assert_int_equal(db_get_int(r, 0, 0, 0), 47);
        assert_int_equal(db_get_int(r, 0, 1, 0), 3);
        db_result_free(r);
        /* Killed, then reopened on demand: the settings come back with it. */
        db_value p[] = {db_int((long long)db_connection_id(c))};
        db_result_free(testdb_q(admin, "KILL ?", p, 1));
        db_exec(c, "SELECT 1", NULL, 0, NULL, err, sizeof err);
        assert_int_equal(db_conn_ensure(c, err, sizeof err), 0);
    }
    db_config_free(&cfg);
    db_close(admin);
    db_close(c);
}

static void a_killed_work_connection_is_reopened_on_demand(void **state)
{
    (void)state;
    db_conn *c = testdb_open(), *admin = testdb_open();
    char err[512];
    uint64_t id = db_connection_id(c);
    db_value p[] = {db_int((long long)id)};
    db_result_free(testdb_q(admin, "KILL ?", p, 1));
    unsigned rc = db_exec(c, "SELECT 1", NULL, 0, NULL, err, sizeof err);
    assert_true(db_errno_is_connection(rc));
    assert_false(db_is_alive(c));
    assert_int_equal(db_conn_ensure(c, err, sizeof err), 0);
    assert_true(db_is_alive(c));
    assert_int_not_equal(db_connection_id(c), id);
    assert_int_equal(testdb_int(c, "SELECT 7", NULL, 0), 7);
    db_close(c);
    db_close(admin);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_full_url_is_parsed),
        cmocka_unit_test(a_socket_url_and_the_password_from_the_environment),
        cmocka_unit_test(bad_urls_say_what_is_wrong_without_the_password),
        cmocka_unit_test(the_password_is_masked_in_place),
        cmocka_unit_test(exec_binds_parameters_and_returns_typed_text_cells),
        cmocka_unit_test(a_wrong_password_is_refused_naming_the_host_not_the_password),
        cmocka_unit_test(a_killed_work_connection_is_reopened_on_demand),
        cmocka_unit_test(session_settings_apply_on_open_and_reopen),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mysql_library_end();
    return rc;
}
