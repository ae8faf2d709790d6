/*
 * oopsctl audit: the audit log — the operator actions (operator_action),
 * newest first: who asked what, why, and what came of it.
 */
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "ctl.h"
#include "ctl_args.h"
#include "pipeline_store.h"

enum { AUDIT_LIMIT = 100 };

/* audit: the operator actions of the audit log (operator_action), newest
 * first: what was asked, by whom, why, and what came of it. */
int cmd_audit(ctl *c, int argc, char **argv)
{
    enum { F_SINCE, F_ACTOR, F_APP, F_ENV, F_LIMIT };
    ctl_flag f[] = {
        [F_SINCE] = {"--since", true, false, NULL}, [F_ACTOR] = {"--actor", true, false, NULL},
        [F_APP] = {"--app", true, false, NULL},     [F_ENV] = {"--env", true, false, NULL},
        [F_LIMIT] = {"--limit", true, false, NULL},
    };
    size_t npos = 0;
    PARSE(c, argc, argv, f, NULL, 0, &npos);
    pipeline_audit_query q = {.limit = AUDIT_LIMIT};
    char err[1024], ns[PIPELINE_LABEL_MAX + 2], name[PIPELINE_LABEL_MAX + 2];
    unsigned long long limit = AUDIT_LIMIT;
    if (f[F_SINCE].given && ctl_parse_duration("--since", f[F_SINCE].value, CTL_SINCE_MAX_MS,
                                               &q.since_ms, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "audit: %s", err);
    if (f[F_LIMIT].given && ctl_parse_number("--limit", f[F_LIMIT].value, 1, CTL_LIMIT_MAX, NULL,
                                             &limit, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "audit: %s", err);
    if (f[F_ACTOR].given) {
        size_t n = strlen(f[F_ACTOR].value);
        if (n == 0 || n > PIPELINE_ACTOR_MAX)
            return fail(EXIT_INPUT, "audit: --actor must be 1 to %d bytes (NAME@HOST, NAME@page)",
                        PIPELINE_ACTOR_MAX);
        q.actor = f[F_ACTOR].value;
    }
    int rc = app_env("audit", &f[F_APP], &f[F_ENV], false, ns, name);
    if (rc != EXIT_OK)
        return rc;
    if (f[F_APP].given)
        q.namespace = ns, q.application = name;
    if (f[F_ENV].given)
        q.environment = f[F_ENV].value;
    q.limit = (size_t)limit + 1; /* one more tells that the listing was cut */
    if ((rc = open_db(c)) != EXIT_OK)
        return rc;
    pipeline_audit_row *v = NULL;
    size_t n = 0;
    if (pipeline_store_audit(c->db, &q, &v, &n, err, sizeof err) != 0)
        return db_fail(c, "audit", err);
    bool cut = n > limit;
    size_t shown = cut ? (size_t)limit : n;
    if (c->json) {
        buf b = {0};
        buf_puts(&b, "[");
        for (size_t i = 0; i < shown; i++) {
            bool first = true;
            buf_puts(&b, i ? ",{" : "{");
            json_kv_int(&b, "id", v[i].id, &first);
            json_kv_str(&b, "at", v[i].created_at, &first);
            json_kv_str(&b, "actor", v[i].actor, &first);
            json_kv_str(&b, "action", v[i].action, &first);
            json_kv_str(&b, "pipeline", v[i].pipeline_id, &first);
            json_kv_str(&b, "namespace", v[i].namespace, &first);
            json_kv_str(&b, "application", v[i].application, &first);
            json_kv_str(&b, "environment", v[i].environment, &first);
            json_kv_str(&b, "reason", v[i].reason, &first);
            json_kv_str(&b, "outcome", v[i].outcome, &first);
            json_kv_str(&b, "detail", v[i].detail, &first);
            json_kv_str(&b, "via", v[i].via, &first);
            buf_puts(&b, "}");
        }
        buf_puts(&b, "]\n");
        fputs(b.p, stdout);
        buf_free(&b);
    } else {
        printf("%-19s  %-24s  %-8s  %-12s  %-24s  %-7s  %s\n", "TIME (UTC)", "ACTOR", "ACTION",
               "PIPELINE", "APP ENV", "OUTCOME", "REASON");
        for (size_t i = 0; i < shown; i++) {
            char t[32], target[300] = "-";
            if (v[i].namespace)
                snprintf(target, sizeof target, "%s/%s %s", v[i].namespace,
                         v[i].application ? v[i].application : "-",
                         v[i].environment ? v[i].environment : "-");
            printf("%-19s  %-24s  %-8s  %-12s  %-24s  %-7s  %s\n",
                   tty(secs(v[i].created_at, t, sizeof t)), tty(v[i].actor), tty(v[i].action),
                   tty_or(v[i].pipeline_id, "-"), tty(target), tty(v[i].outcome),
                   tty_or(v[i].reason, "-"));
            if (v[i].detail)
                printf("%-19s  %s\n", "", tty(v[i].detail));
        }
    }
    if (cut)
        fail(EXIT_OK, "audit: showing the newest %llu; more match (--limit N, up to %llu)", limit,
             CTL_LIMIT_MAX);
    pipeline_audit_free(v, n);
    return EXIT_OK;
}
