/*
 * oopsctl's reading commands: what the database says, changing nothing —
 * list, history, show, logs, locks (text, or --json exact).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "ctl.h"
#include "ctl_args.h"
#include "db.h"
#include "lock_names.h"
#include "pipeline_store.h"

/* ---- output helpers ---------------------------------------------------- */

static void json_pipeline(buf *b, const pipeline *p)
{
    bool first = true;
    buf_puts(b, "{");
    json_kv_str(b, "id", p->id, &first);
    json_kv_str(b, "namespace", p->namespace, &first);
    json_kv_str(b, "application", p->application, &first);
    json_kv_str(b, "environment", p->environment, &first);
    json_kv_str(b, "status", pipeline_status_name(p->status), &first);
    json_kv_str(b, "deploy_mode", p->manual ? "manual" : "auto", &first);
    json_kv_str(b, "artifact", p->artifact, &first);
    json_key(b, "source", &first);
    buf_puts(b, p->source ? p->source : "null"); /* valid JSON by the table's CHECK */
    json_kv_str(b, "message", p->message, &first);
    json_kv_str(b, "trigger", p->trigger_type, &first);
    json_kv_str(b, "deploy_requested_at", p->deploy_requested_at, &first);
    json_kv_str(b, "created_at", p->created_at, &first);
    json_kv_str(b, "status_changed_at", p->status_changed_at, &first);
    json_kv_str(b, "driven_by", p->driven_by, &first);
    json_kv_str(b, "hold", pipeline_held(p) ? p->hold : NULL, &first);
    json_kv_str(b, "override_at", p->override_at, &first);
    json_kv_str(b, "rollback_of", p->rollback_of, &first);
    json_kv_str(b, "promoted_from", p->promoted_from, &first);
    if (p->step > 0 || p->canary_request) {
        json_key(b, "canary", &first);
        buf_printf(b, "{\"step\":%d,\"weight\":", p->step);
        if (p->weight >= 0)
            buf_printf(b, "%d", p->weight);
        else
            buf_puts(b, "null");
        bool cfirst = false;
        json_kv_str(b, "step_at", p->step_at, &cfirst);
        json_kv_str(b, "paused", p->paused, &cfirst);
        json_kv_str(b, "request", p->canary_request, &cfirst);
        buf_puts(b, "}");
    }
    if (p->approvals > 0) {
        json_kv_int(b, "approvals", p->approvals, &first);
        json_kv_str(b, "approved_by", p->approved_by, &first);
    }
    json_kv_str(b, "actor", p->actor, &first); /* list: its latest operator event's person */
    buf_puts(b, "}");
}

static void human_age(char *out, size_t n, double s)
{
    if (s < 120)
        snprintf(out, n, "%.0fs", s);
    else if (s < 7200)
        snprintf(out, n, "%.0fm", s / 60);
    else if (s < 172800)
        snprintf(out, n, "%.0fh", s / 3600);
    else
        snprintf(out, n, "%.0fd", s / 86400);
}

/* list: without --all, --status or --since, every unfinished pipeline and
 * the LIST_RECENT most recent finished ones; always newest first and at
 * most --limit rows (LIST_LIMIT by default). */
enum { LIST_RECENT = 20, LIST_LIMIT = 100, HISTORY_LIMIT = 20 };

int cmd_list(ctl *c, int argc, char **argv)
{
    enum { F_STATUS, F_LIMIT, F_ALL, F_APP, F_ENV, F_SINCE };
    ctl_flag f[] = {
        [F_STATUS] = {"--status", true, false, NULL}, [F_LIMIT] = {"--limit", true, false, NULL},
        [F_ALL] = {"--all", false, false, NULL},      [F_APP] = {"--app", true, false, NULL},
        [F_ENV] = {"--env", true, false, NULL},       [F_SINCE] = {"--since", true, false, NULL},
    };
    size_t npos = 0;
    PARSE(c, argc, argv, f, NULL, 0, &npos);
    pipeline_query q = {0};
    unsigned long long limit = LIST_LIMIT;
    char err[1024], ns[PIPELINE_LABEL_MAX + 2], name[PIPELINE_LABEL_MAX + 2];
    if (f[F_STATUS].given &&
        ctl_parse_statuses("--status", f[F_STATUS].value, &q.status_mask, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "list: %s", err);
    if (f[F_LIMIT].given && ctl_parse_number("--limit", f[F_LIMIT].value, 1, CTL_LIMIT_MAX, NULL,
                                             &limit, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "list: %s", err);
    if (f[F_SINCE].given && ctl_parse_duration("--since", f[F_SINCE].value, CTL_SINCE_MAX_MS,
                                               &q.since_ms, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "list: %s", err);
    int rc = app_env("list", &f[F_APP], &f[F_ENV], false, ns, name);
    if (rc != EXIT_OK)
        return rc;
    if (f[F_APP].given) {
        q.namespace = ns;
        q.application = name;
    }
    if (f[F_ENV].given)
        q.environment = f[F_ENV].value;
    if (!f[F_ALL].given && !f[F_STATUS].given && !f[F_SINCE].given)
        q.recent = LIST_RECENT;
    q.limit = (size_t)limit + 1; /* one more tells that the listing was cut */
    q.actors = c->json;
    if ((rc = open_db(c)) != EXIT_OK)
        return rc;
    pipeline *v = NULL;
    size_t n = 0;
    if ((rc = pipeline_store_query(c->db, &q, &v, &n, err, sizeof err)) != 0)
        return rc == PSTORE_BAD ? fail(EXIT_INPUT, "list: %s", err) : db_fail(c, "list", err);
    bool cut = n > limit;
    if (cut)
        n = (size_t)limit;
    if (c->json) {
        buf b = {0};
        buf_puts(&b, "[");
        for (size_t i = 0; i < n; i++) {
            if (i)
                buf_puts(&b, ",");
            json_pipeline(&b, &v[i]);
        }
        buf_puts(&b, "]\n");
        fputs(b.p, stdout);
        buf_free(&b);
    } else {
        printf("%-12s  %-24s  %-12s  %-15s  %-6s  %-12s  %s\n", "ID", "APP", "ENV", "STATUS",
               "MODE", "DRIVEN BY", "FOR");
        for (size_t i = 0; i < n; i++) {
            char app[300], age[32];
            snprintf(app, sizeof app, "%s/%s", v[i].namespace, v[i].application);
            human_age(age, sizeof age, v[i].status_age_s);
            printf("%-12s  %-24s  %-12s  %-15s  %-6s  %-12s  %s\n", tty(v[i].id), tty(app),
                   tty(v[i].environment), pipeline_status_name(v[i].status),
                   v[i].manual ? "manual" : "auto", tty_or(v[i].driven_by, "-"), age);
        }
    }
    if (cut)
        fail(EXIT_OK, "list: showing the newest %llu; more match (--limit N, up to %llu)", limit,
             CTL_LIMIT_MAX);
    pipeline_list_free(v, n + (cut ? 1 : 0));
    return EXIT_OK;
}

/* history: the releases and rollbacks of one app and env that went live,
 * the live one marked, after the one in progress (pipeline_store_history). */
int cmd_history(ctl *c, int argc, char **argv)
{
    enum { F_APP, F_ENV, F_LIMIT };
    ctl_flag f[] = {
        [F_APP] = {"--app", true, false, NULL},
        [F_ENV] = {"--env", true, false, NULL},
        [F_LIMIT] = {"--limit", true, false, NULL},
    };
    size_t npos = 0;
    PARSE(c, argc, argv, f, NULL, 0, &npos);
    unsigned long long limit = HISTORY_LIMIT;
    char err[1024], ns[PIPELINE_LABEL_MAX + 2], name[PIPELINE_LABEL_MAX + 2];
    int rc = app_env("history", &f[F_APP], &f[F_ENV], true, ns, name);
    if (rc != EXIT_OK)
        return rc;
    if (f[F_LIMIT].given && ctl_parse_number("--limit", f[F_LIMIT].value, 1, CTL_LIMIT_MAX, NULL,
                                             &limit, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "history: %s", err);
    if ((rc = open_db(c)) != EXIT_OK)
        return rc;
    const char *env = f[F_ENV].value;
    pipeline *v = NULL;
    size_t n = 0;
    if ((rc = pipeline_store_history(c->db, ns, name, env, (size_t)limit, &v, &n, err,
                                     sizeof err)) != 0)
        return rc == PSTORE_BAD ? fail(EXIT_INPUT, "history: %s", err) : db_fail(c, "history", err);
    /* The live one: the first SUCCEEDED row (the order makes it the newest). */
    size_t live = n;
    for (size_t i = 0; i < n && live == n; i++)
        if (v[i].status == PS_SUCCEEDED)
            live = i;
    if (c->json) {
        buf b = {0};
        bool first = true;
        buf_puts(&b, "{");
        json_kv_str(&b, "namespace", ns, &first);
        json_kv_str(&b, "application", name, &first);
        json_kv_str(&b, "environment", env, &first);
        json_kv_str(&b, "live", live < n ? v[live].id : NULL, &first);
        json_key(&b, "releases", &first);
        buf_puts(&b, "[");
        for (size_t i = 0; i < n; i++) {
            bool f1 = true;
            buf_puts(&b, i ? ",{" : "{");
            json_kv_str(&b, "id", v[i].id, &f1);
            json_kv_str(&b, "trigger", v[i].trigger_type, &f1);
            json_kv_str(&b, "status", pipeline_status_name(v[i].status), &f1);
            json_kv_str(&b, "artifact", v[i].artifact, &f1);
            json_kv_str(&b, "created_at", v[i].created_at, &f1);
            json_kv_str(&b, "finished_at",
                        v[i].status == PS_SUCCEEDED ? v[i].status_changed_at : NULL, &f1);
            json_key(&b, "live", &f1);
            buf_puts(&b, i == live ? "true" : "false");
            buf_puts(&b, "}");
        }
        buf_puts(&b, "]}\n");
        fputs(b.p, stdout);
        buf_free(&b);
    } else {
        printf("%-4s  %-12s  %-8s  %-19s  %s\n", "LIVE", "ID", "TRIGGER", "FINISHED (UTC)",
               "ARTIFACT");
        for (size_t i = 0; i < n; i++) {
            char t[32] = "", st[48] = "";
            if (v[i].status == PS_SUCCEEDED)
                secs(v[i].status_changed_at, t, sizeof t);
            else
                snprintf(st, sizeof st, "in progress (%s)", pipeline_status_name(v[i].status));
            printf("%-4s  %-12s  %-8s  %-19s  %s\n", i == live ? "live" : "", tty(v[i].id),
                   tty_or(v[i].trigger_type, "-"), v[i].status == PS_SUCCEEDED ? tty(t) : st,
                   tty_or(v[i].artifact, "-"));
        }
        if (n == 0)
            fail(EXIT_OK, "history: %s/%s %s has no release yet", ns, name, env);
    }
    pipeline_list_free(v, n);
    return EXIT_OK;
}

static int load(ctl *c, const char *cmd, const char *id, pipeline *p)
{
    char err[512];
    int rc = pipeline_store_get(c->db, id, p, err, sizeof err);
    if (rc < 0)
        return db_fail(c, cmd, err);
    if (rc == 0)
        return fail(EXIT_INPUT, "%s: no pipeline with id \"%s\"", cmd, id);
    return EXIT_OK;
}

int cmd_show(ctl *c, int argc, char **argv)
{
    const char *pos[1], *id = NULL;
    size_t npos = 0;
    int rc = parse(c, argc, argv, NULL, 0, pos, 1, &npos);
    if (rc != EXIT_OK || (rc = need_id("show", pos, npos, &id)) != EXIT_OK ||
        (rc = open_db(c)) != EXIT_OK)
        return rc;
    pipeline p;
    if ((rc = load(c, "show", id, &p)) != EXIT_OK)
        return rc;
    pipeline_event_row *ev = NULL;
    size_t nev = 0;
    char err[512];
    if (pipeline_store_events(c->db, id, &ev, &nev, err, sizeof err) != 0) {
        pipeline_clear(&p);
        return db_fail(c, "show", err);
    }
    if (c->json) {
        buf b = {0};
        buf_puts(&b, "{\"pipeline\":");
        json_pipeline(&b, &p);
        buf_puts(&b, ",\"events\":[");
        for (size_t i = 0; i < nev; i++) {
            bool first = true;
            buf_puts(&b, i ? ",{" : "{");
            json_kv_int(&b, "id", ev[i].id, &first);
            json_kv_str(&b, "type", ev[i].event_type, &first);
            json_kv_str(&b, "from", ev[i].from_status, &first);
            json_kv_str(&b, "to", ev[i].to_status, &first);
            json_kv_str(&b, "message", ev[i].message, &first);
            json_kv_str(&b, "server", ev[i].server, &first);
            json_kv_str(&b, "actor", ev[i].actor, &first);
            json_kv_str(&b, "reason", ev[i].reason, &first);
            json_kv_str(&b, "created_at", ev[i].created_at, &first);
            buf_puts(&b, "}");
        }
        buf_puts(&b, "]}\n");
        fputs(b.p, stdout);
        buf_free(&b);
    } else {
        char age[32], t1[32], t2[32];
        human_age(age, sizeof age, p.status_age_s);
        printf("pipeline    %s\n", tty(p.id));
        printf("app         %s/%s\n", tty(p.namespace), tty(p.application));
        printf("env         %s\n", tty(p.environment));
        printf("status      %s (for %s, since %s UTC)\n", pipeline_status_name(p.status), age,
               tty(secs(p.status_changed_at, t1, sizeof t1)));
        printf("mode        %s%s\n", p.manual ? "manual" : "auto",
               p.deploy_requested_at ? " (deploy requested)" : "");
        printf("trigger     %s\n", tty_or(p.trigger_type, "-"));
        printf("artifact    %s\n", tty_or(p.artifact, "-"));
        if (p.source)
            printf("source      %s\n", tty(p.source));
        printf("driven by   %s\n", tty_or(p.driven_by, "-"));
        printf("message     %s\n", tty_or(p.message, "-"));
        if (pipeline_held(&p))
            printf("held        %s (waiting to deploy: the message says why)\n", tty(p.hold));
        if (p.override_at)
            printf("override    %s UTC (deploy windows and freezes no longer hold it)\n",
                   tty(secs(p.override_at, t1, sizeof t1)));
        if (p.rollback_of)
            printf("rollback of %s (automatic, after it failed)\n", tty(p.rollback_of));
        if (p.promoted_from)
            printf("promoted    from release %s\n", tty(p.promoted_from));
        if (p.step > 0 || p.canary_request) {
            printf("canary      step %d", p.step);
            if (p.weight >= 0)
                printf(", weight %d", p.weight);
            if (p.paused)
                printf(", paused (%s)", tty(p.paused));
            if (p.canary_request)
                printf(", %s requested", tty(p.canary_request));
            printf("\n");
        }
        if (p.approvals > 0)
            printf("approvals   %d (%s)\n", p.approvals, tty_or(p.approved_by, "-"));
        printf("created     %s UTC\n", tty(secs(p.created_at, t2, sizeof t2)));
        printf("\nevents\n");
        for (size_t i = 0; i < nev; i++) {
            char from_to[100];
            snprintf(from_to, sizeof from_to, "%s -> %s",
                     ev[i].from_status ? ev[i].from_status : "",
                     ev[i].to_status ? ev[i].to_status : "");
            /* an operator's event: who, at the process's place (the server) */
            printf("  %.23s  %-15s  %-30s  %-14s  %s\n", tty_or(ev[i].created_at, "-"),
                   tty_or(ev[i].event_type, "-"), tty(from_to),
                   tty_or(ev[i].actor ? ev[i].actor : ev[i].server, "-"),
                   tty_or(ev[i].message, ""));
            if (ev[i].reason)
                printf("  %23s  reason: %s\n", "", tty(ev[i].reason));
        }
    }
    pipeline_events_free(ev, nev);
    pipeline_clear(&p);
    return EXIT_OK;
}

/* Each line of text (already terminal-safe), indented; a missing final
 * newline is supplied. */
static void print_indented(const char *text, const char *indent)
{
    while (text && *text) {
        const char *nl = strchr(text, '\n');
        int len = nl ? (int)(nl - text) : (int)strlen(text);
        printf("%s%.*s\n", indent, len, text);
        text = nl ? nl + 1 : text + len;
    }
}

static void json_log_row(buf *b, const db_result *r, size_t i)
{
    bool first = true;
    const char *status = db_get(r, i, 4), *ms = db_get(r, i, 6), *argv = db_get(r, i, 7);
    buf_puts(b, i ? ",{" : "{");
    json_kv_int(b, "id", db_get_int(r, i, 0, 0), &first);
    json_kv_str(b, "created_at", db_get(r, i, 1), &first);
    json_kv_str(b, "step", db_get(r, i, 2), &first);
    json_kv_str(b, "server", db_get(r, i, 3), &first);
    json_key(b, "exit_status", &first);
    buf_puts(b, status ? status : "null");
    json_kv_str(b, "result", db_get(r, i, 5), &first);
    json_key(b, "duration_ms", &first);
    buf_puts(b, ms ? ms : "null");
    json_key(b, "argv", &first);
    buf_puts(b, argv ? argv : "null"); /* a JSON array by the table's CHECK */
    json_kv_str(b, "output", db_get(r, i, 8), &first);
    buf_puts(b, "}");
}

static void print_log_row(const db_result *r, size_t i)
{
    const char *status = db_get(r, i, 4), *result = db_get(r, i, 5), *ms = db_get(r, i, 6);
    const char *when = tty_or(db_get(r, i, 1), "-"), *step = tty_or(db_get(r, i, 2), "-"),
               *server = tty_or(db_get(r, i, 3), "-");
    printf("%.23s UTC  %-7s  %-14s  %s%s", when, step, server, result ? "" : "exit ",
           result   ? tty(result)
           : status ? status
                    : "-");
    if (ms)
        printf(" in %.1fs", strtod(ms, NULL) / 1000);
    printf("\n");
    printf("    argv %s\n", tty_or(db_get(r, i, 7), "-"));
    /* The output, byte for byte as stored (NULs included), made safe; its
     * lines stay lines. */
    const db_cell *out = &r->cells[i * r->ncols + 8];
    if (out->s) {
        buf b = {0};
        ctl_escape(&b, out->s, out->len, CTL_TEXT_LINES);
        print_indented(b.p, "    | ");
        buf_free(&b);
    }
}

int cmd_logs(ctl *c, int argc, char **argv)
{
    ctl_flag f[] = {{"--step", true, false, NULL}};
    const char *pos[1], *id = NULL;
    size_t npos = 0;
    PARSE(c, argc, argv, f, pos, 1, &npos);
    char err[1024];
    const char *step = f[0].value;
    if (f[0].given && ctl_parse_step("--step", step, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "logs: %s", err);
    int rc = need_id("logs", pos, npos, &id);
    if (rc != EXIT_OK || (rc = open_db(c)) != EXIT_OK)
        return rc;
    pipeline p;
    if ((rc = load(c, "logs", id, &p)) != EXIT_OK)
        return rc;
    pipeline_clear(&p);
    db_value params[] = {db_text(id), db_text(step), db_text(step)};
    db_result *r = NULL;
    if (db_exec(
            c->db,
            "SELECT id, created_at, step, server, exit_status, result, duration_ms, argv, output"
            " FROM pipeline_log WHERE pipeline_id = ? AND (? IS NULL OR step = ?) ORDER BY id",
            params, 3, &r, err, sizeof err))
        return db_fail(c, "logs", err);
    if (c->json) {
        buf b = {0};
        buf_puts(&b, "[");
        for (size_t i = 0; i < r->nrows; i++)
            json_log_row(&b, r, i);
        buf_puts(&b, "]\n");
        fputs(b.p, stdout);
        buf_free(&b);
    } else if (r->nrows == 0) {
        printf("no command output logged for %s%s%s\n", id, step ? " in step " : "",
               step ? step : "");
    } else {
        for (size_t i = 0; i < r->nrows; i++)
            print_log_row(r, i);
    }
    db_result_free(r);
    return EXIT_OK;
}

int cmd_locks(ctl *c, int argc, char **argv)
{
    size_t npos = 0;
    int rc = parse(c, argc, argv, NULL, 0, NULL, 0, &npos);
    if (rc != EXIT_OK || (rc = open_db(c)) != EXIT_OK)
        return rc;
    /* Who holds what, by asking the server: IS_USED_LOCK gives the holder's
     * connection id, which every oopsd records in `server`. The names come
     * from lock_names.h: the lock of every unfinished pipeline, and one row
     * per leader scan (OOPS_LEADER_SCANS, bound as parameters), held or not. */
    static const char *const leaders[] = {OOPS_LEADER_SCANS};
    enum { NLEADERS = sizeof leaders / sizeof *leaders };
    static const char pipeline_locks[] =
        "SELECT l.name, l.owner, s.name FROM ("
        " SELECT CONCAT('" OOPS_LOCK_PIPELINE_PREFIX "', id) AS name,"
        "        IS_USED_LOCK(CONCAT('" OOPS_LOCK_PIPELINE_PREFIX "', id)) AS owner"
        " FROM pipeline WHERE status NOT IN ('SUCCEEDED', 'ERROR', 'STOPPED')";
    static const char leader_lock[] =
        " UNION ALL SELECT CONCAT('" OOPS_LOCK_LEADER_PREFIX
        "', ?), IS_USED_LOCK(CONCAT('" OOPS_LOCK_LEADER_PREFIX "', ?))";
    static const char tail[] =
        ") l LEFT JOIN server s ON s.lock_connection_id = l.owner ORDER BY l.name";
    char sql[sizeof pipeline_locks + NLEADERS * sizeof leader_lock + sizeof tail];
    size_t len = (size_t)snprintf(sql, sizeof sql, "%s", pipeline_locks);
    db_value params[2 * NLEADERS];
    for (size_t i = 0; i < NLEADERS; i++) {
        len += (size_t)snprintf(sql + len, sizeof sql - len, "%s", leader_lock);
        params[2 * i] = params[2 * i + 1] = db_text(leaders[i]);
    }
    snprintf(sql + len, sizeof sql - len, "%s", tail);
    db_result *r = NULL;
    char err[512];
    unsigned qrc = db_exec(c->db, sql, params, 2 * NLEADERS, &r, err, sizeof err);
    if (qrc)
        return db_fail(c, "locks", err);
    buf b = {0};
    if (c->json)
        buf_puts(&b, "[");
    else
        buf_printf(&b, "%-40s  %-10s  %s\n", "LOCK", "SESSION", "SERVER");
    for (size_t i = 0; i < r->nrows; i++) {
        const char *owner = db_get(r, i, 1), *srv = db_get(r, i, 2);
        if (c->json) {
            bool first = true;
            buf_puts(&b, i ? ",{" : "{");
            json_kv_str(&b, "lock", db_get(r, i, 0), &first);
            json_key(&b, "session", &first);
            buf_puts(&b, owner ? owner : "null");
            json_kv_str(&b, "server", srv, &first);
            buf_puts(&b, "}");
        } else {
            buf_printf(&b, "%-40s  %-10s  %s\n", tty_or(db_get(r, i, 0), "-"), owner ? owner : "-",
                       srv ? tty(srv) : (owner ? "(unknown session)" : "-"));
        }
    }
    if (c->json)
        buf_puts(&b, "]\n");
    fputs(b.p ? b.p : "", stdout);
    buf_free(&b);
    db_result_free(r);
    return EXIT_OK;
}
