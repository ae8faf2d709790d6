/*
 * db — connections and prepared statements (settings: db_url.h).
 *
 * Every statement oopsd sends goes through db_exec(): prepared, with bound
 * parameters, never with a value pasted into SQL text. Results come back as
 * text cells (the server's own formatting of numbers and DATETIME(6)), which
 * is what both the C callers and the Lua bindings want.
 *
 * A db_conn never reconnects silently (MYSQL_OPT_RECONNECT is off): the lock
 * session must see every loss. A work connection asks for reconnection
 * explicitly with db_conn_ensure(), which opens a fresh session when the last
 * statement found the connection gone.
 */
#ifndef OOPS_DB_H
#define OOPS_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db_url.h" /* db_config: connection settings (URL, environment) */

/* Error numbers worth naming (MySQL/MariaDB server and client errors). */
enum {
    DB_ER_DUP_KEY = 1022,
    DB_ER_DUP_ENTRY = 1062,
    DB_ER_CON_COUNT = 1040,                 /* "Too many connections": max_connections reached */
    DB_ER_NO_SUCH_THREAD = 1094,            /* KILL of a session id that does not exist */
    DB_ER_TOO_MANY_USER_CONNECTIONS = 1203, /* the global max_user_connections reached */
    DB_ER_USER_LIMIT_REACHED = 1226, /* an account's own limit (WITH MAX_USER_CONNECTIONS ...) */
    DB_ER_NO_SUCH_TABLE = 1146,
    DB_ER_LOCK_WAIT_TIMEOUT = 1205,
    DB_ER_LOCK_DEADLOCK = 1213,
    DB_ER_DUP_ENTRY_WITH_KEY_NAME = 1586,
    DB_CR_CONNECTION_ERROR = 2002,
    DB_CR_CONN_HOST_ERROR = 2003,
    DB_CR_UNKNOWN_HOST = 2005,
    DB_CR_SERVER_GONE = 2006,
    DB_CR_SERVER_LOST = 2013,
};

typedef struct db_conn db_conn;

/* Open a connection. NULL with "cannot connect to database at WHERE: why" in err. */
db_conn *db_open(const db_config *cfg, char *err, size_t errlen);
/* The same, with the error number in *code when it fails (db_conn_ensure's). */
db_conn *db_open_code(const db_config *cfg, char *err, size_t errlen, unsigned *code);
/* A connection not opened yet (settings copied): the first db_conn_ensure
 * opens it. NULL when out of memory. */
db_conn *db_conn_new(const db_config *cfg);
void db_close(db_conn *c);
/* Close c's session (if open) but keep the connection and its settings: the
 * next db_conn_ensure opens a new one. Safe with NULL. */
void db_conn_disconnect(db_conn *c);
/* The server's CONNECTION_ID() recorded when the session was opened. */
uint64_t db_connection_id(const db_conn *c);
/* When its session was last opened, CLOCK_MONOTONIC in ms (0: never). */
uint64_t db_conn_opened_ms(const db_conn *c);
/* False once a statement found the connection lost. */
bool db_is_alive(const db_conn *c);
/*
 * For work connections only: when the connection was lost (or never opened),
 * open a new session (statement cache cleared). 0 when usable, else the
 * error number with the reason in err: the server's own when it refused
 * (DB_ER_CON_COUNT and DB_ER_TOO_MANY_USER_CONNECTIONS: db_errno_is_busy),
 * a client error (2002, 2003, 2005...) when it could not be reached.
 */
unsigned db_conn_ensure(db_conn *c, char *err, size_t errlen);
/* Statements executed on this connection since it was opened (bench). */
uint64_t db_statement_count(const db_conn *c);
/* Round trips to the server: executions plus prepares (statement cache misses). */
uint64_t db_round_trips(const db_conn *c);
/* True when this MySQL/MariaDB error number means "connection lost or unreachable". */
bool db_errno_is_connection(unsigned code);
/* True when it means "the database is busy, not broken": it refuses new
 * connections (1040 too many connections; 1203 too many for one account,
 * max_user_connections; 1226 an account's own limit, WITH
 * MAX_USER_CONNECTIONS or MAX_CONNECTIONS_PER_HOUR). Worth waiting for,
 * never worth retrying at once. For a connect's error number (1226 also
 * names a statement refused by MAX_QUERIES_PER_HOUR). */
bool db_errno_is_busy(unsigned code);
/* ms spread by ±25 % at random (retry delays: servers refused together do
 * not come back together). */
unsigned db_jitter_ms(unsigned ms);
/* True when it means "this account lacks a privilege for that statement"
 * (1044 database, 1142 table, 1143 column, 1227 a global privilege). */
bool db_errno_is_denied(unsigned code);
/*
 * The stable name of an error number, as the Lua bindings return it
 * (nil, msg, name; error_names.h): "exists", "not_found", "deadlock",
 * "lock_wait", "gone", "unreachable", else "db". The one mapping.
 */
const char *db_error_name(unsigned code);
/*
 * The error number of the last call that failed on c (db_exec, db_begin,
 * db_commit, db_conn_ensure), 0 when none has; a success does not reset it.
 * For callers that got only a message back (pipeline_store's PSTORE_DB).
 */
unsigned db_last_error(const db_conn *c);

typedef enum { DB_NULL, DB_INT, DB_TEXT, DB_DOUBLE } db_type;

typedef struct db_value {
    db_type type;
    long long i;
    double d;
    const char *s; /* DB_TEXT: not copied; must live until db_exec returns */
    size_t len;
} db_value;

db_value db_int(long long v);
db_value db_text(const char *s); /* NULL → SQL NULL */
db_value db_double(double v);
db_value db_null(void);

typedef struct db_cell {
    char *s; /* NUL-terminated text, NULL when SQL NULL */
    size_t len;
} db_cell;

typedef struct db_result {
    size_t ncols, nrows;
    char **names;      /* column names */
    db_type *types;    /* DB_INT for integer columns, DB_DOUBLE for float/decimal, else DB_TEXT */
    db_cell *cells;    /* row-major, nrows * ncols */
    uint64_t affected; /* rows changed by INSERT/UPDATE/DELETE */
    uint64_t insert_id;
} db_result;

/*
 * Prepare (cached per connection), bind params, execute, fetch everything.
 * out may be NULL when the caller wants nothing back; otherwise *out is a new
 * result the caller frees with db_result_free. Returns 0, or the MySQL error
 * number with "what: why" in err (the statement's text is not included).
 */
unsigned db_exec(db_conn *c, const char *sql, const db_value *params, size_t nparams,
                 db_result **out, char *err, size_t errlen);
void db_result_free(db_result *r);
/* Cell text or NULL; row/col out of range → NULL. */
/* A new result holding the rows of r whose column 0 is `key` (text), in
 * order, with r's columns. */
db_result *db_result_rows_keyed(const db_result *r, const char *key);
const char *db_get(const db_result *r, size_t row, size_t col);
long long db_get_int(const db_result *r, size_t row, size_t col, long long dflt);

/* Transactions on the work connection (prepared START TRANSACTION/COMMIT/ROLLBACK). */
unsigned db_begin(db_conn *c, char *err, size_t errlen);
unsigned db_commit(db_conn *c, char *err, size_t errlen);
void db_rollback(db_conn *c);

#endif
