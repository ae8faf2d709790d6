/* pipeline — a pipeline in memory: freeing the rows the store read, a new
 * id, an operator's reason checked. Pure; see pipeline.h. */
#include "pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "utf8.h"

void pipeline_clear(pipeline *p)
{
    if (!p)
        return;
    free(p->namespace);
    free(p->application);
    free(p->environment);
    free(p->artifact);
    free(p->source);
    free(p->message);
    free(p->trigger_type);
    free(p->promoted_from);
    free(p->deploy_requested_at);
    free(p->created_at);
    free(p->status_changed_at);
    free(p->driven_by);
    free(p->hold);
    free(p->override_at);
    free(p->rollback_of);
    free(p->step_at);
    free(p->paused);
    free(p->canary_request);
    free(p->approved_by);
    free(p->actor);
    memset(p, 0, sizeof *p);
}

void pipeline_list_free(pipeline *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        pipeline_clear(&v[i]);
    free(v);
}

void pipeline_events_free(pipeline_event_row *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].event_type);
        free(v[i].from_status);
        free(v[i].to_status);
        free(v[i].message);
        free(v[i].server);
        free(v[i].actor);
        free(v[i].reason);
        free(v[i].created_at);
    }
    free(v);
}

void pipeline_new_id(char *out, size_t len)
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char rnd[64];
    if (len > sizeof rnd)
        len = sizeof rnd;
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom(rnd + got, len - got, 0);
        if (n > 0)
            got += (size_t)n;
    }
    /* 256 % 36 = 4: a bias of 1 in 64 on the first four letters, harmless for ids. */
    for (size_t i = 0; i < len; i++)
        out[i] = alphabet[rnd[i] % 36];
    out[len] = '\0';
}

int pipeline_reason_check(const char *what, const char *reason, char *err, size_t errlen)
{
    size_t n = reason ? strlen(reason) : 0;
    if (n == 0 || n > PIPELINE_REASON_MAX) {
        snprintf(err, errlen, "%s must be 1 to %d bytes, not %zu", what, PIPELINE_REASON_MAX, n);
        return -1;
    }
    const unsigned char *p = (const unsigned char *)reason;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq(p + i, n - i, NULL);
        if (!len) {
            snprintf(err, errlen, "%s is not valid UTF-8 (byte %zu)", what, i + 1);
            return -1;
        }
        /* C0 controls, DEL and the C1 controls (U+0080..U+009F: c2 80..c2 9f) */
        if ((len == 1 && (p[i] < 0x20 || p[i] == 0x7f)) ||
            (len == 2 && p[i] == 0xc2 && p[i + 1] < 0xa0)) {
            snprintf(err, errlen, "%s holds a control character (byte %zu)", what, i + 1);
            return -1;
        }
        i += len;
    }
    return 0;
}
