/*
 * daemon_connect — the daemon's connections at start: the work connection
 * (waiting with backoff while the database is busy), the schema check, the
 * pool and its lanes, the lock session, the server's name lock and its row
 * in the server table. The tick (daemon_tick.c) takes the name lock again
 * after a reconnect and registers once a waited-for schema is there.
 */
#ifndef OOPS_DAEMON_CONNECT_H
#define OOPS_DAEMON_CONNECT_H

#include "daemon_internal.h"

/* Everything above, in that order: OOPSD_OK, or the exit code after saying
 * why on stderr (OOPSD_DB: unreachable, refused; OOPSD_BAD_INPUT: a schema
 * newer than this oopsd, the name held by another server). */
int daemon_connect_all(server_state *d);

/* One server per name: the name lock (d->name_lock) lives as long as our
 * lock session. 0 when held, -1 (logged when another server holds it). */
int daemon_take_name_lock(server_state *d);

/* This server's row in the server table (lock session, start, host, pid),
 * on the work connection; a failure is logged. */
void daemon_register_server(server_state *d);

#endif
