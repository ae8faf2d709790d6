/*
 * error_names — the one way a Lua binding reports a runtime failure:
 * nil, message, NAME, where NAME is one of the stable strings below (like
 * luv's error names). A caller's mistake raises instead. No MySQL error
 * number reaches Lua: db_error_name() (db.c) is the one mapping from them.
 *
 * The list is documented in lua/oops/meta.lua (oops.ErrorName) and AGENTS.md,
 * reaches Lua as oops.error_names, and tests/spec/meta_spec.lua checks that
 * the binary and meta.lua agree. Add a name only when a caller needs to tell
 * it apart; otherwise reuse one.
 */
#ifndef OOPS_ERROR_NAMES_H
#define OOPS_ERROR_NAMES_H

/* A unique key already holds the value (ER_DUP_ENTRY 1062, ER_DUP_KEY 1022,
 * 1586); for oops.store, an unfinished pipeline exists for that
 * application/environment. */
#define OOPS_E_EXISTS "exists"
/* What the statement names does not exist: a table (1146), the session a
 * KILL names (1094). */
#define OOPS_E_NOT_FOUND "not_found"
/* The transaction was chosen as a deadlock victim and rolled back (1213). */
#define OOPS_E_DEADLOCK "deadlock"
/* A row lock was not granted in time (1205, innodb_lock_wait_timeout). */
#define OOPS_E_LOCK_WAIT "lock_wait"
/* The session was lost (2006, 2013, killed, server shutdown, idle timeout);
 * for oops.locks, the lock session is down: every lock is gone. */
#define OOPS_E_GONE "gone"
/* No session could be opened (host, port, socket, credentials; a database
 * that refuses new connections, 1040 or 1203: the message says "too many
 * connections"), or none was ever opened (not connected). */
#define OOPS_E_UNREACHABLE "unreachable"
/* Any other error the database reported (syntax 1064, a CHECK constraint,
 * a server that cannot share locks...): the message says which. */
#define OOPS_E_DB "db"
/* An operating-system or network operation failed: a process could not be
 * started, no HTTP response came (refused, timed out, reset, too large), an
 * address could not be listened on, a file could not be read. */
#define OOPS_E_IO "io"
/* The input was read and refused: a pipeline field (not a DNS label, too
 * long, source not JSON), a cron expression, an HTTP request refused before
 * sending (scheme, method, malformed URL or header). */
#define OOPS_E_INVALID "invalid"

/* Every name, in the order meta.lua lists them. */
#define OOPS_E_ALL                                                                                 \
    OOPS_E_EXISTS, OOPS_E_NOT_FOUND, OOPS_E_DEADLOCK, OOPS_E_LOCK_WAIT, OOPS_E_GONE,               \
        OOPS_E_UNREACHABLE, OOPS_E_DB, OOPS_E_IO, OOPS_E_INVALID

#endif
