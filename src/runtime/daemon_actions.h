/*
 * daemon_actions — the page's actions (POST /api/pipeline/..., /api/rollback):
 * who may act, CSRF, and the answer deferred until the action's task is done.
 */
#ifndef OOPS_DAEMON_ACTIONS_H
#define OOPS_DAEMON_ACTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "daemon_internal.h"

/* POST /api/...: an operator's action (lua/oops/web.lua, M.post) for the
 * signed-in `who`. A refusal (no --http-users, a viewer, another origin, not
 * JSON, no engine, too many waiting) is answered in `out` at once; else the
 * request is deferred (http_defer) and answered through
 * daemon_answer_deferred when its task is done. */
void daemon_web_action(server_state *d, const http_incoming *in, const web_user *who,
                       http_response *out);

/* ctx.http_answer (ud: the server_state): answers a deferred request with a
 * JSON body (copied). 0, or -1 when it is gone or the listener closed. */
int daemon_answer_deferred(void *ud, uint64_t ticket, int status, const char *body, size_t len);

#endif
