/*
 * daemon_http — the daemon's HTTP surface: the flags, the listener and the
 * routing of every request (Host check, sign-in, /healthz, /metrics,
 * /status, the page and its /api/...).
 */
#ifndef OOPS_DAEMON_HTTP_H
#define OOPS_DAEMON_HTTP_H

#include "daemon_internal.h"

/* --listen, --http-host, --http-token-file, --http-users: checked (and the
 * token or the users read into d->http_users, d->http_hosts filled) before
 * anything else is done. 0, or -1 after printing why on stderr. */
int daemon_http_flags(server_state *d);

/* SIGHUP: --http-users is read again; a file that is now refused keeps the
 * users read before (logged, never its content). */
void daemon_reload_users(server_state *d);

/* The HTTP listener on --listen (none for "off") into d->http: OOPSD_OK, or
 * OOPSD_BAD_INPUT after saying why on stderr. */
int daemon_listen_http(server_state *d);

#endif
