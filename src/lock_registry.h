/*
 * lock_registry — MySQL/MariaDB user-level locks on one dedicated session.
 *
 * A lock lives exactly as long as the session that took it: no lease, no
 * client clock. The session is never reconnected behind our back
 * (MYSQL_OPT_RECONNECT off, no mysql_reset_connection), because either would
 * drop every lock silently. Any error on the session therefore means "every
 * lock is gone": the held set is cleared and the registry is down until it
 * has reconnected. While down, acquire fails (fail closed): pausing is
 * recoverable, two servers driving one pipeline is not.
 *
 * Not thread-safe; the daemon drives it from its one loop thread.
 */
#ifndef OOPS_LOCK_REGISTRY_H
#define OOPS_LOCK_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db.h"

#define LOCK_NAME_MAX 64

/* wait_timeout_s: leave the database server's wait_timeout on the lock session. */
#define LOCK_WAIT_TIMEOUT_SERVER 0xffffffffu

enum {
    LOCK_DOWN = -1,    /* session lost or unreachable: retry later */
    LOCK_REFUSED = -2, /* the server cannot share user-level locks (Galera, read-only): fatal */
};

typedef struct lock_registry_options {
    unsigned validate_interval_ms; /* idle-session check; default 30000 */
    unsigned wait_timeout_s; /* session wait_timeout; default (0) 3 validation intervals, >= 3 s;
                                LOCK_WAIT_TIMEOUT_SERVER leaves the server's own */
    unsigned backoff_initial_ms; /* first reconnect delay; default 500 */
    unsigned backoff_max_ms;     /* reconnect delay cap; default 30000 */
} lock_registry_options;

typedef struct lock_registry lock_registry;

/* A registry not yet connected (down). cfg is copied. o may be NULL. */
lock_registry *lock_registry_new(const db_config *cfg, const lock_registry_options *o);
/* Releases every lock by closing the session, frees. Safe with NULL. */
void lock_registry_free(lock_registry *r);

/*
 * Open the session: record CONNECTION_ID(), set the session wait_timeout and
 * check the server shares locks. 0 up; LOCK_DOWN (unreachable, reason in
 * err); LOCK_REFUSED (Galera or read-only, reason in err: do not retry).
 */
int lock_registry_connect(lock_registry *r, char *err, size_t errlen);

bool lock_registry_is_up(const lock_registry *r);
/* Down, and its last connect was refused because the database is busy. */
bool lock_registry_busy(const lock_registry *r);
/* While down: when lock_registry_tick tries to reconnect next (its now_ms clock). */
uint64_t lock_registry_retry_at(const lock_registry *r);
/* CONNECTION_ID() of the current session, 0 when down. */
uint64_t lock_registry_connection_id(const lock_registry *r);
/* Times the registry went down after having been up. */
uint64_t lock_registry_losses(const lock_registry *r);
/* Successful reconnects after a loss. */
uint64_t lock_registry_reconnects(const lock_registry *r);
/* Statements sent on the lock session (bench). */
uint64_t lock_registry_statements(const lock_registry *r);
/* Round trips on the lock session, prepares included (bench). */
uint64_t lock_registry_round_trips(const lock_registry *r);

/* Change the validation interval (policy load or reload); the session's
 * wait_timeout (3 intervals, at least 3 s) follows at once. */
void lock_registry_set_validate_interval(lock_registry *r, unsigned ms);
/* The policy's locks { session_timeout }: s seconds, 0 for the default (3
 * validation intervals, at least 3 s), or LOCK_WAIT_TIMEOUT_SERVER to leave
 * the database server's wait_timeout (a vanished host's locks then stay
 * until the server's own timeout, 8 hours by default). Applied to an open
 * session at once. */
void lock_registry_set_session_timeout(lock_registry *r, unsigned s);
/* The session's wait_timeout as chosen (LOCK_WAIT_TIMEOUT_SERVER when left
 * to the server). */
unsigned lock_registry_wait_timeout(const lock_registry *r);

/*
 * GET_LOCK(name, 0). 1 held (a name already held is a no-op success, never a
 * second GET_LOCK), 0 held by another session, LOCK_DOWN when the registry is
 * down or the answer was NULL/an error (which also takes it down).
 */
int lock_registry_acquire(lock_registry *r, const char *name);

/*
 * The same contract for many names in one statement. got[i] is set true for
 * each name held after the call. Returns how many are held (including those
 * already held), or LOCK_DOWN (every got[i] false).
 */
int lock_registry_acquire_many(lock_registry *r, const char *const *names, size_t n, bool *got);

/* RELEASE_LOCK. 1 released, 0 it was not held here, LOCK_DOWN. */
int lock_registry_release(lock_registry *r, const char *name);
/* The same for many names, in one statement per 1,000: how many were
 * released (names not held here are skipped), or LOCK_DOWN. */
int lock_registry_release_many(lock_registry *r, const char *const *names, size_t n);
/* Release every lock held; the session stays open. */
void lock_registry_release_all(lock_registry *r);
/* KILL QUERY connection_id (a session of this user's, not this one): ends
 * the statement it runs, the connection stays open. 0 done, LOCK_DOWN. */
int lock_registry_interrupt(lock_registry *r, uint64_t connection_id);
/* name (copied; NULL: none) is taken again by release_all: the lock that
 * says who this session is (a script's name lock, oops.connect). */
void lock_registry_pin(lock_registry *r, const char *name);

bool lock_registry_holds(const lock_registry *r, const char *name);
/* A snapshot copy of the held names (as given to acquire). Free with lock_names_free. */
size_t lock_registry_held(const lock_registry *r, char ***names);
void lock_names_free(char **names, size_t n);

/*
 * Check the session now: SELECT CONNECTION_ID() compared with the id
 * recorded at connect. 1 ok; 0 the session is gone or changed (now down,
 * held set cleared).
 */
int lock_registry_validate(lock_registry *r);

enum { LOCK_EV_LOST = 1, LOCK_EV_RECONNECTED = 2, LOCK_EV_BUSY = 4 };
/*
 * Drive the registry: validate when the interval has elapsed since the last
 * use or check, reconnect with exponential backoff (±25 % jitter) while down.
 * now_ms is a monotonic clock. Returns LOCK_EV_* flags for what happened in
 * this call: LOCK_EV_BUSY, with err saying so, for the first reconnect of a
 * busy period refused because the database is busy (too many connections:
 * db_errno_is_busy); LOCK_REFUSED when a reconnect found a server that cannot
 * share locks.
 */
int lock_registry_tick(lock_registry *r, uint64_t now_ms, char *err, size_t errlen);

/*
 * The name used on the server: names of at most 64 characters unchanged;
 * longer ones become their first 47 characters, '#', and 16 hex digits of a
 * 64-bit hash of the whole name (strset_hash: FNV-1a's step from a
 * non-standard basis, see strset.h) — the same on every server.
 */
void lock_name_shorten(const char *name, char out[LOCK_NAME_MAX + 1]);

#endif
