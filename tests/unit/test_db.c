/* Connection settings: URL parsing, password masking, and db_exec on the real database. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>
#include <mysql.h>
#include <uv.h>

#include "db.h"
#include "db_fiber.h"
#include "testdb.h"

static void a_full_url_is_parsed(void **state)
{
    (void)state;
    db_config c;
    char err[256];
    assert_int_equal(
        db_config_parse(&c, "mysql://oops:p%40ss@db.example:3307/oopsdb", NULL, err, sizeof err),
        0);
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
    assert_int_equal(db_config_parse(&c, "mysql://oops@localhost/oops?socket=/run/my%20sql.sock",
                                     "envpw", err, sizeof err),
                     0);
    assert_string_equal(c.socket, "/run/my sql.sock");
    assert_string_equal(c.password, "envpw");
    assert_string_equal(db_config_where(&c, where, sizeof where), "socket /run/my sql.sock");
    db_config_free(&c);
    /* read_timeout bounds how long a statement waits (reads and writes). */
    assert_int_equal(db_config_parse(&c, "mysql://u@h/d?read_timeout=7", NULL, err, sizeof err), 0);
    assert_int_equal(c.read_timeout_s, 7);
    assert_int_equal(c.write_timeout_s, 7);
    db_config_free(&c);
    assert_int_equal(db_config_parse(&c, "mysql://u@h/d", NULL, err, sizeof err), 0);
    assert_int_equal(c.read_timeout_s, 30);
    db_config_free(&c);
    /* A password in the URL wins over the environment. */
    assert_int_equal(db_config_parse(&c, "mysql://u:url@h/d", "envpw", err, sizeof err), 0);
    assert_string_equal(c.password, "url");
    db_config_free(&c);
}

static void bad_urls_say_what_is_wrong_without_the_password(void **state)
{
    (void)state;
    static const struct {
        const char *url, *msg;
    } cases[] = {
        {"postgres://u:secret@h/d", "database URL must start with mysql://"},
        {"mysql://u:secret@h", "database URL has no /database part"},
        {"mysql://h/d", "database URL has no user"},
        {"mysql://u:secret@h:99999/d", "the port after the host must be a number from 1 to 65535"},
        {"mysql://u:secret@h:0/d", "the port after the host must be a number from 1 to 65535"},
        {"mysql://u:secret@h:/d", "the port after the host must be a number from 1 to 65535"},
        {"mysql://u:secret@h:+7/d", "the port after the host must be a number from 1 to 65535"},
        {"mysql://u:secret@h/", "the database name after the host must be 1 to 64 characters"},
        {"mysql://u:secret@h/d?sock=x", "database URL: unknown option \"sock\""},
        {"mysql://u:secret@h/d?connect_timeout=abc",
         "connect_timeout must be a whole number of seconds from 1 to 3600"},
        {"mysql://u:secret@h/d?connect_timeout=0", "connect_timeout must be a whole number"},
        {"mysql://u:secret@h/d?connect_timeout=3601", "connect_timeout must be a whole number"},
        {"mysql://u:secret@h/d?connect_timeout=10s", "connect_timeout must be a whole number"},
        {"mysql://u:secret@h/d?read_timeout=0", "read_timeout must be a whole number of seconds"},
        {"mysql://u:secret@h/d?read_timeout=3601", "read_timeout must be a whole number"},
        {"mysql://u:secret@h/d?read_timeout=1&read_timeout=2",
         "option read_timeout is given twice"},
        {"mysql://u:secret@h/d?connect_timeout=-1", "connect_timeout must be a whole number"},
        {"mysql://u:secret@h/d?connect_timeout=", "option connect_timeout has an empty value"},
        {"mysql://u:secret@h/d?connect_timeout=5&connect_timeout=6",
         "option connect_timeout is given twice"},
        {"mysql://u:secret@h/d?socket=rel.sock", "option socket must be an absolute path"},
        {"mysql://u:secret@h/d?socket=/a&&connect_timeout=5", "an empty option"},
        {"mysql://u:secret@h/d?socket=/a&", "an empty option"},
        {"mysql://u:secret@h/d?socket", "is not NAME=VALUE"},
        {"mysql://u:secret@[::1/d", "closing \"]\""},
        {"mysql://u:secret@[not-v6]:3306/d", "not an IPv6 address"},
        {"mysql://u:secret@[::1]x/d", "only \":PORT\" may follow"},
        {"mysql://u:secret@h%20x/d", "the host is not a host name"},
        {"mysql://u:se%zzret@h/d", "bad percent-escape in the user or password"},
        {"mysql://u:se%00cret@h/d", "bad percent-escape in the user or password"},
        {"mysql://:secret@h/d", "has no user before the password"},
        {"mysql://u:secret@h/d\x1b]0;x", "control character"},
        {"", "no database URL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        db_config c;
        char err[256];
        if (db_config_parse(&c, cases[i].url, NULL, err, sizeof err) != -1)
            fail_msg("accepted: %s", cases[i].url);
        if (!strstr(err, cases[i].msg))
            fail_msg("%s: got \"%s\", want \"%s\"", cases[i].url, err, cases[i].msg);
        assert_null(strstr(err, "secret"));
        assert_null(strstr(err, "cret"));
    }
    /* Too long is refused before anything is looked at. */
    char longurl[5000] = "mysql://u:secret@h/";
    memset(longurl + strlen(longurl), 'd', sizeof longurl - strlen(longurl) - 1);
    longurl[sizeof longurl - 1] = '\0';
    db_config c;
    char err[256];
    assert_int_equal(db_config_parse(&c, longurl, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "longer than 4096 bytes"));
}

/* Whatever the password holds (each character that means something in a
 * URL, unencoded), and whatever else in the URL is wrong, an error message
 * never holds any piece of it; and a URL that is right otherwise parses to
 * exactly that password. */
static void no_part_of_any_password_reaches_a_message(void **state)
{
    (void)state;
    static const char *const specials[] = {"@", ":", "/",   "?",   "#",  "&",   "=",
                                           "[", "]", "@:/", "/@/", "::", "%25", ""};
    static const char *const shapes[] = {
        /* right */
        "mysql://oops:%s@db.example:3306/oops",
        "mysql://oops:%s@[::1]:3306/oops?connect_timeout=3",
        "mysql://oops:%s@db.example/oops?ssl-mode=VERIFY_CA&ssl-ca=/etc/oopsd/ca.pem",
        /* wrong elsewhere */
        "mysql://oops:%s@db.example:33x6/oops",
        "mysql://oops:%s@db.example:99999/oops",
        "mysql://oops:%s@db.example",
        "mysql://oops:%s@db example/oops",
        "mysql://oops:%s@[::1/oops",
        "mysql://oops:%s@db.example/oops?connect_timeout=abc",
        "mysql://oops:%s@db.example/oops?nope=1",
        "mysql://oops:%s@db.example/oops?ssl-mode=maybe",
        "mysql://oops:%s@db.example/oops?ssl-mode=VERIFY_CA",
        "mysql://oops:%s@db.example/oops?ssl-mode=DISABLED&ssl-key=/k",
        "mysql://oops:%s@db.example/oops?ssl-mode=REQUIRED&ssl-cert=rel",
        "mysql://oops:%s@/oops",
        "mysql://oops:%s",
        "mysql://oops:%sdb.example:3306/oops",
        "mysql://:%s@db.example/oops",
        "mysql://oops:%s@db.example/",
        "http://oops:%s@db.example/oops",
    };
    for (size_t i = 0; i < sizeof specials / sizeof *specials; i++) {
        char pw[64], decoded[64];
        snprintf(pw, sizeof pw, "SECRETHEAD%sSECRETTAIL", specials[i]);
        snprintf(decoded, sizeof decoded, "SECRETHEAD%sSECRETTAIL",
                 strcmp(specials[i], "%25") ? specials[i] : "%");
        for (size_t j = 0; j < sizeof shapes / sizeof *shapes; j++) {
            char url[256], err[512];
            /* With an '@' of its own, a password followed by no '@' is a
             * well-formed URL whose host is the password's tail: nothing
             * can tell that from a real host name. */
            if (strstr(shapes[j], "%sdb") && strchr(specials[i], '@'))
                continue;
            snprintf(url, sizeof url, shapes[j], pw);
            db_config c;
            int rc = db_config_parse(&c, url, NULL, err, sizeof err);
            if (j < 3) {
                if (rc != 0)
                    fail_msg("%s: refused: %s", url, err);
                assert_string_equal(c.password, decoded);
                db_config_free(&c);
                continue;
            }
            if (rc == 0)
                fail_msg("accepted: %s", url);
            if (strstr(err, "SECRET") || strstr(err, "HEAD") || strstr(err, "TAIL") ||
                strstr(err, "ECRE"))
                fail_msg("%s: the message quotes the password: %s", url, err);
        }
    }
}

static void ipv6_literals_and_bare_hosts(void **state)
{
    (void)state;
    db_config c;
    char err[256], where[300];
    assert_int_equal(db_config_parse(&c, "mysql://u@[::1]:3307/d", NULL, err, sizeof err), 0);
    assert_string_equal(c.host, "::1");
    assert_int_equal(c.port, 3307);
    assert_string_equal(db_config_where(&c, where, sizeof where), "[::1]:3307");
    db_config_free(&c);
    assert_int_equal(db_config_parse(&c, "mysql://u@[2001:db8::7]/d", NULL, err, sizeof err), 0);
    assert_string_equal(c.host, "2001:db8::7");
    assert_int_equal(c.port, 0);
    db_config_free(&c);
    /* Without brackets an IPv6 address cannot be told from host:port. */
    assert_int_equal(db_config_parse(&c, "mysql://u@::1:3306/d", NULL, err, sizeof err), -1);
}

static void the_password_is_masked_in_place(void **state)
{
    (void)state;
    char url[] = "mysql://oops:s3cr@t@127.0.0.1:3306/oops";
    db_mask_url_password(url);
    assert_string_equal(url, "mysql://oops:xxxxxx@127.0.0.1:3306/oops");
    /* A password holding '/' is masked whole too (the parser's own rule). */
    char slashed[] = "mysql://oops:a/b@c@h:1/d";
    db_mask_url_password(slashed);
    assert_string_equal(slashed, "mysql://oops:xxxxx@h:1/d");
    /* Options after the host are left alone (an '@' in them is written %40). */
    char tls[] = "mysql://oops:pw@h/d?ssl-mode=VERIFY_CA&ssl-ca=/etc/a%40b/ca.pem";
    db_mask_url_password(tls);
    assert_string_equal(tls, "mysql://oops:xx@h/d?ssl-mode=VERIFY_CA&ssl-ca=/etc/a%40b/ca.pem");
    char nopw[] = "mysql://oops@h/d";
    db_mask_url_password(nopw);
    assert_string_equal(nopw, "mysql://oops@h/d");
}

static void tls_options_are_parsed(void **state)
{
    (void)state;
    static const struct {
        const char *query;
        db_ssl_mode mode;
        const char *ca, *cert, *key;
    } cases[] = {
        {"", DB_SSL_DEFAULT, NULL, NULL, NULL},
        {"?ssl-mode=DISABLED", DB_SSL_DISABLED, NULL, NULL, NULL},
        {"?ssl-mode=disabled", DB_SSL_DISABLED, NULL, NULL, NULL},
        {"?ssl-mode=Required", DB_SSL_REQUIRED, NULL, NULL, NULL},
        {"?ssl-mode=required&ssl-cert=/c/me.pem&ssl-key=/c/me.key", DB_SSL_REQUIRED, NULL,
         "/c/me.pem", "/c/me.key"},
        {"?ssl-mode=verify_ca&ssl-ca=/etc/oopsd/ca.pem", DB_SSL_VERIFY_CA, "/etc/oopsd/ca.pem",
         NULL, NULL},
        {"?ssl-ca=/a%20b/ca.pem&ssl-mode=VERIFY_IDENTITY&connect_timeout=3", DB_SSL_VERIFY_IDENTITY,
         "/a b/ca.pem", NULL, NULL},
        {"?ssl-key=/k%40x.key&ssl-cert=/c.pem&ssl-ca=/ca.pem&ssl-mode=VERIFY_CA", DB_SSL_VERIFY_CA,
         "/ca.pem", "/c.pem", "/k@x.key"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char url[300], err[256];
        snprintf(url, sizeof url, "mysql://oops:s3cret@db.example/oops%s", cases[i].query);
        db_config c, copy;
        if (db_config_parse(&c, url, NULL, err, sizeof err) != 0)
            fail_msg("%s: refused: %s", url, err);
        db_config_copy(&copy, &c);
        db_config_free(&c); /* the copy owns strings of its own */
        assert_int_equal(copy.ssl_mode, cases[i].mode);
        const char *want[] = {cases[i].ca, cases[i].cert, cases[i].key};
        const char *got[] = {copy.ssl_ca, copy.ssl_cert, copy.ssl_key};
        for (int k = 0; k < 3; k++) {
            if (!want[k])
                assert_null(got[k]);
            else
                assert_string_equal(got[k], want[k]);
        }
        assert_string_equal(copy.password, "s3cret");
        db_config_free(&copy);
    }
    assert_string_equal(db_ssl_mode_name(DB_SSL_VERIFY_IDENTITY), "VERIFY_IDENTITY");
    assert_string_equal(db_ssl_mode_name(DB_SSL_DEFAULT), "");
}

/* Every wrong TLS option or combination is refused, one line naming the
 * option, never quoting its value or the password. */
static void bad_tls_options_are_refused_naming_the_option(void **state)
{
    (void)state;
    char longpath[1100] = "/";
    memset(longpath + 1, 'p', 1024);
    static const struct {
        const char *query, *msg;
    } cases[] = {
        {"ssl-mode=PREFERRED",
         "option ssl-mode must be DISABLED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY"},
        {"ssl-mode=VERIFY", "option ssl-mode must be"},
        {"ssl-mode=REQUIRED%20", "option ssl-mode must be"},
        {"ssl-mode=", "option ssl-mode has an empty value"},
        {"ssl-mode=REQUIRED&ssl-mode=DISABLED", "option ssl-mode is given twice"},
        {"sslmode=REQUIRED",
         "unknown option \"sslmode\" (known: socket, connect_timeout, read_timeout, "
         "ssl-mode, ssl-ca, ssl-cert, ssl-key)"},
        {"ssl_ca=/ca.pem&ssl-mode=VERIFY_CA", "unknown option \"ssl_ca\""},
        {"ssl-mode=VERIFY_CA&ssl-ca=ca.pem", "option ssl-ca must be an absolute path"},
        {"ssl-mode=VERIFY_CA&ssl-ca=/ca.pem&ssl-ca=/ca.pem", "option ssl-ca is given twice"},
        {"ssl-mode=VERIFY_CA&ssl-ca=/ca%0A.pem", "option ssl-ca must be an absolute path"},
        {"ssl-mode=VERIFY_CA&ssl-ca=/ca%00.pem", "option ssl-ca has a bad percent-escape"},
        {"ssl-mode=REQUIRED&ssl-cert=~/c.pem&ssl-key=/k",
         "option ssl-cert must be an absolute path"},
        {"ssl-mode=REQUIRED&ssl-cert=/c&ssl-key=./k", "option ssl-key must be an absolute path"},
        {"ssl-ca=/ca.pem", "option ssl-ca needs ssl-mode (REQUIRED, VERIFY_CA or VERIFY_IDENTITY)"},
        {"ssl-cert=/c.pem&ssl-key=/k.pem", "option ssl-cert needs ssl-mode"},
        {"ssl-mode=DISABLED&ssl-ca=/ca.pem", "option ssl-ca contradicts ssl-mode=DISABLED"},
        {"ssl-mode=disabled&ssl-key=/k", "option ssl-key contradicts ssl-mode=DISABLED"},
        {"ssl-mode=REQUIRED&ssl-ca=/ca.pem",
         "option ssl-ca is for verifying the server: say ssl-mode=VERIFY_CA or VERIFY_IDENTITY"},
        {"ssl-mode=VERIFY_CA", "option ssl-mode=VERIFY_CA needs ssl-ca"},
        {"ssl-mode=verify_identity&ssl-cert=/c&ssl-key=/k",
         "option ssl-mode=VERIFY_IDENTITY needs ssl-ca"},
        {"ssl-mode=VERIFY_CA&ssl-ca=/ca&ssl-cert=/c.pem", "option ssl-cert needs ssl-key too"},
        {"ssl-mode=REQUIRED&ssl-key=/k.pem", "option ssl-key needs ssl-cert too"},
        {NULL, "option ssl-ca must be an absolute path (at most 1024 bytes)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char url[1400], err[512];
        if (cases[i].query)
            snprintf(url, sizeof url, "mysql://oops:SECRET@db.example/oops?%s", cases[i].query);
        else
            snprintf(url, sizeof url,
                     "mysql://oops:SECRET@db.example/oops?ssl-mode=VERIFY_CA&ssl-ca=%s", longpath);
        db_config c;
        if (db_config_parse(&c, url, NULL, err, sizeof err) != -1)
            fail_msg("accepted: %s", url);
        if (!strstr(err, cases[i].msg))
            fail_msg("%s: got \"%s\", want \"%s\"", url, err, cases[i].msg);
        assert_non_null(strstr(err, "database URL"));
        assert_null(strchr(err, '\n'));
        assert_null(strstr(err, "SECRET"));
    }
    /* At the bound: 1024 bytes is accepted. */
    longpath[1024] = '\0';
    char url[1400], err[512];
    snprintf(url, sizeof url, "mysql://u@h/d?ssl-mode=VERIFY_CA&ssl-ca=%s", longpath);
    db_config c;
    assert_int_equal(db_config_parse(&c, url, NULL, err, sizeof err), 0);
    assert_int_equal(strlen(c.ssl_ca), 1024);
    db_config_free(&c);
}

/* The test server has no TLS (tests/lib/mariadb.sh without MDB_TLS):
 * REQUIRED is refused there, saying so; DISABLED connects in the clear; a
 * certificate file that cannot be read is named before connecting.
 * tests/integration/tls.sh covers a server with TLS. */
static void tls_against_a_server_without_it(void **state)
{
    (void)state;
    db_config base;
    testdb_config(&base);
    char url[700], err[1024];
    const char *fmt = "mysql://%s:%s@127.0.0.1:%u/%s?%s";
    snprintf(url, sizeof url, fmt, base.user, base.password, base.port, base.database,
             "ssl-mode=REQUIRED");
    db_config c;
    assert_int_equal(db_config_parse(&c, url, NULL, err, sizeof err), 0);
    db_conn *conn = db_open(&c, err, sizeof err);
    if (conn)
        fail_msg("ssl-mode=REQUIRED connected to a server without TLS");
    assert_non_null(strstr(err, "cannot connect to database at 127.0.0.1:"));
    assert_non_null(strstr(err, "the server offers no TLS, and ssl-mode=REQUIRED requires it"));
    assert_null(strstr(err, base.password));
    db_config_free(&c);

    snprintf(url, sizeof url, fmt, base.user, base.password, base.port, base.database,
             "ssl-mode=disabled");
    assert_int_equal(db_config_parse(&c, url, NULL, err, sizeof err), 0);
    conn = db_open(&c, err, sizeof err);
    if (!conn)
        fail_msg("ssl-mode=DISABLED: %s", err);
    db_result *r = testdb_q(conn, "SHOW SESSION STATUS LIKE 'Ssl_cipher'", NULL, 0);
    assert_string_equal(db_get(r, 0, 1), "");
    db_result_free(r);
    db_close(conn);
    db_config_free(&c);

    snprintf(url, sizeof url, fmt, base.user, base.password, base.port, base.database,
             "ssl-mode=VERIFY_CA&ssl-ca=/nonexistent/oops-ca.pem");
    assert_int_equal(db_config_parse(&c, url, NULL, err, sizeof err), 0);
    assert_null(db_open(&c, err, sizeof err));
    assert_non_null(strstr(err, "ssl-ca /nonexistent/oops-ca.pem: No such file or directory"));
    db_config_free(&c);
    db_config_free(&base);
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

/* The test server also listens on ::1 when the machine has it (tests/lib/mariadb.sh). */
static void connects_over_ipv6_with_a_bracketed_literal(void **state)
{
    (void)state;
    db_config c;
    char err[512];
    testdb_config(&c);
    char url[600];
    snprintf(url, sizeof url, "mysql://%s:%s@[::1]:%u/%s", c.user, c.password, c.port, c.database);
    db_config_free(&c);
    assert_int_equal(db_config_parse(&c, url, NULL, err, sizeof err), 0);
    db_conn *conn = db_open(&c, err, sizeof err);
    if (!conn)
        fail_msg("%s", err);
    db_close(conn);
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
        assert_int_equal(
            db_exec(c, "SELECT @@session.wait_timeout, @@session.innodb_lock_wait_timeout", NULL, 0,
                    &r, err, sizeof err),
            0);
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

/* A connection idle close to its session wait_timeout is reopened before its
 * next statement instead of failing "gone away" (a pool's idle connection). */
static void an_idle_connection_is_reopened_before_its_wait_timeout(void **state)
{
    (void)state;
    db_config cfg;
    testdb_config(&cfg);
    cfg.session_wait_timeout_s = 6; /* reopened after 1 s idle (5 s to spare) */
    char err[512];
    db_conn *c = db_open(&cfg, err, sizeof err);
    assert_non_null(c);
    uint64_t first = db_connection_id(c);
    assert_int_equal(db_conn_ensure(c, err, sizeof err), 0);
    assert_true(db_connection_id(c) == first); /* fresh: kept */
    sleep(2);
    assert_int_equal(db_conn_ensure(c, err, sizeof err), 0);
    assert_true(db_connection_id(c) != first);
    assert_int_equal(testdb_int(c, "SELECT 7", NULL, 0), 7);
    db_close(c);
    db_config_free(&cfg);
}

/* A statement whose rows fail after its columns came (here a subquery of
 * more than one row; in the engine a deadlock while a SELECT ... FOR UPDATE
 * reads its rows) leaves Connector/C's handle expecting rows: executed again
 * from the cache, it first waited for the rest of a result the server had
 * ended, until the read timeout ("gone away", 30 s; the notify bench's
 * stalls). Such a statement is dropped from the cache: the next run of the
 * same text fails at once with the same error, on the same session. */
static void a_statement_whose_rows_failed_is_prepared_again(void **state)
{
    (void)state;
    db_config cfg;
    testdb_config(&cfg);
    cfg.read_timeout_s = 3; /* the stall, if it came back: "lost connection" after 3 s */
    char err[512];
    db_conn *c = db_open(&cfg, err, sizeof err);
    assert_non_null(c);
    db_result_free(testdb_q(c, "CREATE TEMPORARY TABLE rows_fail (a INT)", NULL, 0));
    db_result_free(testdb_q(c, "INSERT INTO rows_fail VALUES (1), (2)", NULL, 0));
    uint64_t id = db_connection_id(c);
    const char *sql = "SELECT a, (SELECT a FROM rows_fail) AS b FROM rows_fail";
    for (int round = 0; round < 3; round++) {
        db_result *r = NULL;
        unsigned code = db_exec(c, sql, NULL, 0, &r, err, sizeof err);
        assert_int_equal(code, 1242); /* ER_SUBQUERY_NO_1_ROW */
        assert_null(r);
        if (round == 0) /* the rows failed, not the execution: the case above */
            assert_memory_equal(err, "fetch:", 6);
        assert_true(db_connection_id(c) == id);
    }
    assert_int_equal(testdb_int(c, "SELECT 7", NULL, 0), 7);
    assert_true(db_connection_id(c) == id);
    db_close(c);
    db_config_free(&cfg);
}

/* ---- in fibers: sockets whose numbers come back ------------------------- */

typedef struct fiber_job {
    db_conn *c;
    const char *sql; /* NULL: db_conn_ensure only */
    unsigned rc;
    long long value;
    bool done;
    char err[256];
} fiber_job;

static void job_run(void *arg)
{
    fiber_job *j = arg;
    j->rc = db_conn_ensure(j->c, j->err, sizeof j->err);
    if (!j->rc && j->sql) {
        db_result *r = NULL;
        j->rc = db_exec(j->c, j->sql, NULL, 0, &r, j->err, sizeof j->err);
        j->value = db_get_int(r, 0, 0, -1);
        db_result_free(r);
    }
}

static void job_done(void *arg) { ((fiber_job *)arg)->done = true; }

/* Start each job in a fiber of its own, then turn the loop until all are done. */
static void run_jobs(uv_loop_t *loop, fiber_job *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        jobs[i].done = false;
        assert_int_equal(db_fiber_run(loop, job_run, job_done, &jobs[i]), 0);
    }
    for (bool all = false; !all;) {
        all = true;
        for (size_t i = 0; i < n; i++)
            all = all && jobs[i].done;
        if (!all)
            uv_run(loop, UV_RUN_ONCE);
    }
}

/*
 * Two sessions are killed; the library closes their sockets when their next
 * statements find them lost, and two new connections get the same socket
 * numbers. Reopening one lost connection and closing the other must not
 * touch the watchers of those numbers, which now belong to the new
 * connections: their statements, waiting at that moment, must be answered
 * (not left waiting for read_timeout, then failing "lost connection").
 */
static void a_lost_sessions_socket_number_is_not_forgotten_for_its_next_owner(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    db_config cfg;
    testdb_config(&cfg);
    cfg.read_timeout_s = cfg.write_timeout_s = 5;
    db_conn *admin = testdb_open();
    db_conn *a = db_conn_new(&cfg), *b = db_conn_new(&cfg);
    fiber_job open_ab[] = {{.c = a, .sql = "SELECT 1"}, {.c = b, .sql = "SELECT 1"}};
    run_jobs(&loop, open_ab, 2);
    assert_int_equal(open_ab[0].rc + open_ab[1].rc, 0);
    db_value ka[] = {db_int((long long)db_connection_id(a))};
    db_value kb[] = {db_int((long long)db_connection_id(b))};
    db_result_free(testdb_q(admin, "KILL ?", ka, 1));
    db_result_free(testdb_q(admin, "KILL ?", kb, 1));
    /* Their next statements find them lost: the library closes both sockets. */
    fiber_job lost[] = {{.c = a, .sql = "SELECT 1"}, {.c = b, .sql = "SELECT 1"}};
    run_jobs(&loop, lost, 2);
    assert_true(db_errno_is_connection(lost[0].rc) && db_errno_is_connection(lost[1].rc));
    /* New sessions take the lowest free numbers: the two just closed. */
    db_conn *c = db_conn_new(&cfg), *d = db_conn_new(&cfg);
    fiber_job open_cd[] = {{.c = c, .sql = "SELECT 1"}, {.c = d, .sql = "SELECT 1"}};
    run_jobs(&loop, open_cd, 2);
    assert_int_equal(open_cd[0].rc + open_cd[1].rc, 0);
    /* While c and d wait for their answers, a is reopened and b closed. */
    fiber_job work[] = {{.c = c, .sql = "SELECT SLEEP(1) + 7"},
                        {.c = d, .sql = "SELECT SLEEP(1) + 8"},
                        {.c = a, .sql = "SELECT 9"}};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(db_fiber_run(&loop, job_run, job_done, &work[i]), 0);
        if (i == 1)
            db_close(b);
    }
    while (!work[0].done || !work[1].done || !work[2].done)
        uv_run(&loop, UV_RUN_ONCE);
    if (work[0].rc || work[1].rc)
        fail_msg("a statement on a reused socket number failed: %s / %s", work[0].err, work[1].err);
    assert_int_equal(work[0].value, 7);
    assert_int_equal(work[1].value, 8);
    assert_int_equal(work[2].rc, 0);
    assert_int_equal(work[2].value, 9);
    db_close(a);
    db_close(c);
    db_close(d);
    db_close(admin);
    db_config_free(&cfg);
    db_fiber_forget_all();
    uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* ---- in a fiber: a TLS handshake the server never answers --------------- */

/* A server that greets like the test MariaDB (its own greeting, read from it,
 * with the TLS capability added), then takes the client's TLS request and
 * handshake and answers nothing, until the loop tells it to hang up. */
typedef struct stall_server {
    int listener, port, hangup[2];
    unsigned char greeting[512];
    size_t greeting_len;
    volatile int in_handshake; /* the client has sent something after the greeting */
    pthread_t thread;
} stall_server;

static void read_greeting(stall_server *s, const db_config *cfg)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
    inet_pton(AF_INET, cfg->host, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    size_t n = 0;
    while (n < 4 || n < 4 + (size_t)(s->greeting[0] | s->greeting[1] << 8 | s->greeting[2] << 16)) {
        ssize_t got = read(fd, s->greeting + n, sizeof s->greeting - n);
        assert_true(got > 0);
        n += (size_t)got;
    }
    close(fd);
    s->greeting_len = n;
    /* protocol 10: version\0, thread id (4), scramble (8), filler (1), then
     * the capabilities' low 16 bits: add CLIENT_SSL (0x0800). */
    unsigned char *p = memchr(s->greeting + 5, 0, s->greeting_len - 5);
    assert_non_null(p);
    p += 1 + 4 + 8 + 1;
    p[1] |= 0x08;
}

static void *stall_run(void *arg)
{
    stall_server *s = arg;
    int c = accept(s->listener, NULL, NULL);
    if (c < 0)
        return NULL;
    if (write(c, s->greeting, s->greeting_len) != (ssize_t)s->greeting_len) { /* no cmocka here */
        close(c);
        return NULL;
    }
    for (;;) {
        struct pollfd p[2] = {{.fd = c, .events = POLLIN}, {.fd = s->hangup[0], .events = POLLIN}};
        poll(p, 2, -1);
        if (p[1].revents)
            break;
        char buf[4096];
        if (read(c, buf, sizeof buf) <= 0)
            break;
        s->in_handshake = 1;
    }
    close(c);
    return NULL;
}

typedef struct stall_probe {
    stall_server *s;
    bool hung_up;       /* the loop saw the handshake waiting and told the server to hang up */
    bool hung_up_first; /* ... before the connect ended */
    fiber_job job;
} stall_probe;

static void stall_tick(uv_timer_t *t)
{
    stall_probe *pr = t->data;
    if (pr->hung_up || !pr->s->in_handshake)
        return;
    pr->hung_up = true;
    assert_int_equal(write(pr->s->hangup[1], "x", 1), 1);
}

static void stall_done(void *arg)
{
    stall_probe *pr = arg;
    pr->hung_up_first = pr->hung_up;
    pr->job.done = true;
}

static void stall_connect(void *arg) { job_run(&((stall_probe *)arg)->job); }

/*
 * Connector/C 3.3 runs a TLS handshake blocking, inside its non-blocking
 * connect: in a fiber, the loop must go on turning while the server keeps
 * it waiting. The loop's timer hangs the server up once the handshake
 * waits: had the loop been held, the connect would end by read_timeout alone
 * and the timer would come too late.
 */
static void a_tls_handshake_left_unanswered_does_not_hold_the_loop(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    db_config cfg;
    testdb_config(&cfg);
    stall_server s = {0};
    read_greeting(&s, &cfg);
    s.listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    socklen_t len = sizeof sa;
    assert_int_equal(bind(s.listener, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(s.listener, 4), 0);
    assert_int_equal(getsockname(s.listener, (struct sockaddr *)&sa, &len), 0);
    assert_int_equal(pipe(s.hangup), 0);
    assert_int_equal(pthread_create(&s.thread, NULL, stall_run, &s), 0);
    cfg.port = ntohs(sa.sin_port);
    cfg.ssl_mode = DB_SSL_REQUIRED;
    cfg.read_timeout_s = cfg.write_timeout_s = cfg.connect_timeout_s = 5;
    stall_probe pr = {.s = &s};
    pr.job.c = db_conn_new(&cfg);
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    t.data = &pr;
    uv_timer_start(&t, stall_tick, 10, 10);
    assert_int_equal(db_fiber_run(&loop, stall_connect, stall_done, &pr), 0);
    while (!pr.job.done)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_not_equal(pr.job.rc, 0); /* the server hung up: no session */
    if (!pr.hung_up_first)
        fail_msg("the loop stood still while the TLS handshake waited: %s", pr.job.err);
    pthread_join(s.thread, NULL);
    uv_close((uv_handle_t *)&t, NULL);
    db_close(pr.job.c);
    db_config_free(&cfg);
    close(s.listener);
    close(s.hangup[0]);
    close(s.hangup[1]);
    db_fiber_forget_all();
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_full_url_is_parsed),
        cmocka_unit_test(a_socket_url_and_the_password_from_the_environment),
        cmocka_unit_test(bad_urls_say_what_is_wrong_without_the_password),
        cmocka_unit_test(no_part_of_any_password_reaches_a_message),
        cmocka_unit_test(ipv6_literals_and_bare_hosts),
        cmocka_unit_test(the_password_is_masked_in_place),
        cmocka_unit_test(tls_options_are_parsed),
        cmocka_unit_test(bad_tls_options_are_refused_naming_the_option),
        cmocka_unit_test(tls_against_a_server_without_it),
        cmocka_unit_test(exec_binds_parameters_and_returns_typed_text_cells),
        cmocka_unit_test(a_wrong_password_is_refused_naming_the_host_not_the_password),
        cmocka_unit_test(a_killed_work_connection_is_reopened_on_demand),
        cmocka_unit_test(session_settings_apply_on_open_and_reopen),
        cmocka_unit_test(an_idle_connection_is_reopened_before_its_wait_timeout),
        cmocka_unit_test(a_statement_whose_rows_failed_is_prepared_again),
        cmocka_unit_test(a_lost_sessions_socket_number_is_not_forgotten_for_its_next_owner),
        cmocka_unit_test(a_tls_handshake_left_unanswered_does_not_hold_the_loop),
        /* last: left out where the test server has no ::1 (tests/lib/mariadb.sh) */
        cmocka_unit_test(connects_over_ipv6_with_a_bracketed_literal),
    };
    size_t n = sizeof tests / sizeof *tests;
    bool ipv6 = getenv("MDB_IPV6") && *getenv("MDB_IPV6");
    int rc = _cmocka_run_group_tests("test_db", tests, ipv6 ? n : n - 1, NULL, NULL);
    /* cmocka 1.1's skip() prints "not ok # SKIP", which tests/run.sh counts as
     * a failure: report the skip in the form it lists as skipped. */
    if (!ipv6)
        printf("ok %zu # SKIP %s: no IPv6 loopback (::1) on this machine\n", n, tests[n - 1].name);
    mysql_library_end();
    return rc;
}
