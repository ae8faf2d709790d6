/*
 * daemon_notify — systemd's notify protocol and watchdog for the daemon
 * (Type=notify): READY=, RELOADING=, STOPPING=, STATUS=, WATCHDOG=1.
 * Without $NOTIFY_SOCKET (or without libsystemd) nothing is sent.
 */
#ifndef OOPS_DAEMON_NOTIFY_H
#define OOPS_DAEMON_NOTIFY_H

#include <stddef.h>

#include "daemon_internal.h"

/* sd_notify(3): one datagram to $NOTIFY_SOCKET; nothing at all without it. */
__attribute__((format(printf, 1, 2))) void daemon_notify(const char *fmt, ...);

/* s as one line of at most n - 1 bytes for STATUS=: its first line, control
 * characters as '?' (a policy error may quote anything of a value). Returns out. */
const char *daemon_one_line(char *out, size_t n, const char *s);

/* STATUS=: which policy runs, and why the last reload was refused (its first
 * error only; every error is in the log and /healthz), after `prefix`
 * ("READY=1\n", or ""). */
void daemon_notify_status(server_state *d, const char *prefix);

/* d->watchdog initialised on d->loop, and started at half WATCHDOG_USEC when
 * systemd asks for pings (the variables then leave the environment). */
void daemon_start_watchdog(server_state *d);

#endif
