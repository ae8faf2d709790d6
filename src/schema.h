/*
 * schema — versioned migrations of oopsd's tables.
 *
 * Migrations are applied in order by schema_migrate(), each recorded in
 * schema_version. Concurrent runners (several oopsd starting at once, an
 * operator's `oopsctl migrate`) are serialised with GET_LOCK('oops:migrate')
 * on the caller's connection, so each migration runs once.
 */
#ifndef OOPS_SCHEMA_H
#define OOPS_SCHEMA_H

#include "db.h"

/* The newest version this binary knows. */
int schema_latest(void);

/*
 * Bring the database up to schema_latest(). *applied (may be NULL) receives
 * the number of migrations this call applied (0 when already current).
 * Returns 0, or a MySQL error number with "migration N: why" in err (an
 * account without CREATE/ALTER gets its access-denied number back:
 * db_errno_is_denied). A database newer than this binary is refused (error,
 * nothing changed).
 */
unsigned schema_migrate(db_conn *c, int *applied, char *err, size_t errlen);

/* The version recorded in the database, 0 for an empty one (no schema_version
 * table), -1 on error. Only reads: needs no more than SELECT. */
int schema_current(db_conn *c, char *err, size_t errlen);

#endif
