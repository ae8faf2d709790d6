/*
 * daemon_tick — the daemon's periodic tick, every TICK_MS on the loop: the
 * lock session's validation and reconnects, the heartbeat (the server row,
 * at once when health or policy changes), the schema poll while waiting for
 * `oopsctl migrate`, and the pool's idle connections given back. Its
 * database work runs in fibers, never blocking the loop.
 */
#ifndef OOPS_DAEMON_TICK_H
#define OOPS_DAEMON_TICK_H

#include <uv.h>

#include "daemon_internal.h"

#define TICK_MS 200

/* The tick timer's callback (t->data is the server_state); daemon.c starts
 * and stops d->tick. */
void daemon_on_tick(uv_timer_t *t);

#endif
