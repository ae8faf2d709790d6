/*
 * oopsctl — the operator's command line. It talks to the database only:
 * every action is a row change the servers act on within one scan, so no
 * server has to be reachable for a user to act.
 *
 * Exit codes: 0 ok; 1 bad input (unknown id, bad flag, illegal transition,
 * an unfinished pipeline already exists); 2 database unreachable or
 * credentials refused; 3 the state changed concurrently (nothing changed).
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <mysql.h>

#include "buf.h"
#include "db.h"
#include "pipeline_store.h"
#include "schema.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_DB = 2, EXIT_STALE = 3 };

typedef struct ctl {
    const char *db_url;
    bool json;
    db_conn *db;
    char actor[80];
} ctl;

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...)
{
    va_list ap;
    fputs("oopsctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

static void usage(FILE *f)
{
    fputs("usage: oopsctl [--db URL] [--json] COMMAND [ARGS]\n"
          "\n"
          "commands:\n"
          "  migrate                              apply the schema migrations\n"
          "  create --app NS/APP --env ENV [--manual] [--artifact REF] [--source JSON]\n"
          "                                       create a pipeline (INITIALIZED)\n"
          "  list [--status S[,S...]] [--limit N] list pipelines, oldest first\n"
          "  show ID                              a pipeline and its event history\n"
          "  stop ID [--expect STATUS]            stop a pipeline from the status read\n"
          "  deploy ID                            request the deploy of a manual pipeline\n"
          "  locks                                which server holds which lock\n"
          "  scenario FILE                        run a scenario (servers, pipelines, checks; TAP);\n"
          "                                       without --db/$OOPS_DB on a throwaway MariaDB of its own\n"
          "  logs ID [--step build|deploy|health] the commands a pipeline ran and their output\n"
          "\n"
          "The database URL is mysql://user[:password]@host[:port]/database[?socket=PATH],\n"
          "from --db or $OOPS_DB; the password may also come from $OOPS_DB_PASSWORD.\n"
          "exit codes: 0 ok, 1 bad input, 2 database unreachable, 3 state changed concurrently\n",
          f);
}

/* Database errors: lost/unreachable → 2, anything else → 1 with a hint. */
static int db_fail(ctl *c, const char *what, const char *err)
{
    if (!db_is_alive(c->db))
        return fail(EXIT_DB, "%s: database connection lost: %s", what, err);
    if (strstr(err, "doesn't exist"))
        return fail(EXIT_INPUT, "%s: %s (run `oopsctl migrate` first)", what, err);
    return fail(EXIT_INPUT, "%s: %s", what, err);
}

static int open_db(ctl *c)
{
    db_config cfg;
    char err[512];
    if (db_config_resolve(&cfg, c->db_url, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "%s", err);
    c->db = db_open(&cfg, err, sizeof err);
    db_config_free(&cfg);
    if (!c->db)
        return fail(EXIT_DB, "%s", err);
    return EXIT_OK;
}

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

/* "2026-11-30 12:00:00.123456" → "2026-11-30 12:00:00" */
static const char *secs(const char *ts, char *out, size_t n)
{
    snprintf(out, n, "%.19s", ts ? ts : "-");
    return out;
}

/* ---- commands ---------------------------------------------------------- */

static int cmd_migrate(ctl *c, int argc, char **argv)
{
    (void)argv;
    if (argc > 1)
        return fail(EXIT_INPUT, "migrate takes no arguments");
    char err[512];
    int applied = 0;
    unsigned rc = schema_migrate(c->db, &applied, err, sizeof err);
    if (rc)
        return db_is_alive(c->db) ? fail(EXIT_INPUT, "migrate: %s", err)
                                  : fail(EXIT_DB, "migrate: %s", err);
    if (c->json)
        printf("{\"applied\":%d,\"version\":%d}\n", applied, schema_latest());
    else if (applied)
        printf("applied %d migration%s; schema is at version %d\n", applied,
               applied == 1 ? "" : "s", schema_latest());
    else
        printf("schema is up to date (version %d)\n", schema_latest());
    return EXIT_OK;
}

static int split_app(const char *app, char *ns, char *name, size_t n)
{
    const char *slash = app ? strchr(app, '/') : NULL;
    if (!slash || slash == app || !slash[1] || strchr(slash + 1, '/'))
        return -1;
    snprintf(ns, n, "%.*s", (int)(slash - app), app);
    snprintf(name, n, "%s", slash + 1);
    return 0;
}

static int cmd_create(ctl *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"app", required_argument, NULL, 'a'},      {"env", required_argument, NULL, 'e'},
        {"manual", no_argument, NULL, 'm'},         {"artifact", required_argument, NULL, 'r'},
        {"source", required_argument, NULL, 's'},   {"rollback", no_argument, NULL, 'b'},
        {NULL, 0, NULL, 0},
    };
    const char *app = NULL;
    pipeline_new n = {.actor = c->actor};
    int o;
    optind = 1;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'a': app = optarg; break;
        case 'e': n.environment = optarg; break;
        case 'm': n.manual = true; break;
        case 'r': n.artifact = optarg; break;
        case 's': n.source = optarg; break;
        case 'b': n.trigger = "rollback"; break;
        default: return fail(EXIT_INPUT, "create: unknown or incomplete option %s", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return fail(EXIT_INPUT, "create: unexpected argument \"%s\"", argv[optind]);
    char ns[128], name[128], err[512];
    if (!app)
        return fail(EXIT_INPUT, "create: --app NS/APP is required");
    if (split_app(app, ns, name, sizeof ns) != 0)
        return fail(EXIT_INPUT, "create: --app \"%s\" is not NAMESPACE/APPLICATION", app);
    if (!n.environment)
        return fail(EXIT_INPUT, "create: --env ENV is required");
    n.namespace = ns;
    n.application = name;
    char id[25];
    int rc = pipeline_store_create(c->db, &n, id, err, sizeof err);
    if (rc == PSTORE_EXISTS || rc == PSTORE_BAD)
        return fail(EXIT_INPUT, "create: %s", err);
    if (rc != 0)
        return db_fail(c, "create", err);
    if (c->json)
        printf("{\"id\":\"%s\",\"status\":\"INITIALIZED\"}\n", id);
    else
        printf("%s\n", id);
    return EXIT_OK;
}

static int parse_statuses(const char *s, unsigned *mask)
{
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", s);
    *mask = 0;
    for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        pipeline_status st;
        for (char *q = t; *q; q++)
            *q = (char)toupper((unsigned char)*q);
        if (pipeline_status_parse(t, &st) != 0) {
            fail(EXIT_INPUT,
                 "list: unknown status \"%s\" (one of INITIALIZED, RUNNING, BUILD_SUCCEEDED, "
                 "DEPLOYING, ROLLING_OUT, SUCCEEDED, ERROR, STOPPED)",
                 t);
            return -1;
        }
        *mask |= 1u << st;
    }
    return 0;
}

static int cmd_list(ctl *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"status", required_argument, NULL, 's'},
        {"limit", required_argument, NULL, 'l'},
        {NULL, 0, NULL, 0},
    };
    unsigned mask = 0;
    long limit = 0;
    int o;
    optind = 1;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end;
        switch (o) {
        case 's':
            if (parse_statuses(optarg, &mask) != 0)
                return EXIT_INPUT;
            break;
        case 'l':
            limit = strtol(optarg, &end, 10);
            if (*end || limit < 0)
                return fail(EXIT_INPUT, "list: --limit \"%s\" is not a number", optarg);
            break;
        default: return fail(EXIT_INPUT, "list: unknown or incomplete option %s", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return fail(EXIT_INPUT, "list: unexpected argument \"%s\"", argv[optind]);
    pipeline *v = NULL;
    size_t n = 0;
    char err[512];
    if (pipeline_store_list(c->db, mask, 0, (size_t)limit, &v, &n, err, sizeof err) != 0)
        return db_fail(c, "list", err);
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
            char app[160], age[32];
            snprintf(app, sizeof app, "%s/%s", v[i].namespace, v[i].application);
            human_age(age, sizeof age, v[i].status_age_s);
            printf("%-12s  %-24s  %-12s  %-15s  %-6s  %-12s  %s\n", v[i].id, app,
                   v[i].environment, pipeline_status_name(v[i].status),
                   v[i].manual ? "manual" : "auto", v[i].driven_by ? v[i].driven_by : "-", age);
        }
    }
    pipeline_list_free(v, n);
    return EXIT_OK;
}

static int need_id(int argc, char **argv, const char *cmd, const char **id)
{
    if (argc < 2)
        return fail(EXIT_INPUT, "%s: a pipeline id is required", cmd);
    *id = argv[1];
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

static int cmd_show(ctl *c, int argc, char **argv)
{
    const char *id = NULL;
    int rc = need_id(argc, argv, "show", &id);
    if (rc)
        return rc;
    if (argc > 2)
        return fail(EXIT_INPUT, "show: unexpected argument \"%s\"", argv[2]);
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
            json_kv_str(&b, "created_at", ev[i].created_at, &first);
            buf_puts(&b, "}");
        }
        buf_puts(&b, "]}\n");
        fputs(b.p, stdout);
        buf_free(&b);
    } else {
        char age[32], t1[32], t2[32];
        human_age(age, sizeof age, p.status_age_s);
        printf("pipeline    %s\n", p.id);
        printf("app         %s/%s\n", p.namespace, p.application);
        printf("env         %s\n", p.environment);
        printf("status      %s (for %s, since %s UTC)\n", pipeline_status_name(p.status), age,
               secs(p.status_changed_at, t1, sizeof t1));
        printf("mode        %s%s\n", p.manual ? "manual" : "auto",
               p.deploy_requested_at ? " (deploy requested)" : "");
        printf("trigger     %s\n", p.trigger_type);
        printf("artifact    %s\n", p.artifact ? p.artifact : "-");
        if (p.source)
            printf("source      %s\n", p.source);
        printf("driven by   %s\n", p.driven_by ? p.driven_by : "-");
        printf("message     %s\n", p.message ? p.message : "-");
        printf("created     %s UTC\n", secs(p.created_at, t2, sizeof t2));
        printf("\nevents\n");
        for (size_t i = 0; i < nev; i++) {
            char from_to[48];
            snprintf(from_to, sizeof from_to, "%s -> %s",
                     ev[i].from_status ? ev[i].from_status : "", ev[i].to_status);
            printf("  %.23s  %-15s  %-30s  %-14s  %s\n", ev[i].created_at, ev[i].event_type,
                   from_to, ev[i].server, ev[i].message ? ev[i].message : "");
        }
    }
    pipeline_events_free(ev, nev);
    pipeline_clear(&p);
    return EXIT_OK;
}

static int cmd_stop(ctl *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"expect", required_argument, NULL, 'x'},
        {NULL, 0, NULL, 0},
    };
    const char *expect = NULL;
    int o;
    optind = 1;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o != 'x')
            return fail(EXIT_INPUT, "stop: unknown or incomplete option %s", argv[optind - 1]);
        expect = optarg;
    }
    if (optind >= argc)
        return fail(EXIT_INPUT, "stop: a pipeline id is required");
    if (optind + 1 < argc)
        return fail(EXIT_INPUT, "stop: unexpected argument \"%s\"", argv[optind + 1]);
    const char *id = argv[optind];
    pipeline_status from;
    if (expect && pipeline_status_parse(expect, &from) != 0)
        return fail(EXIT_INPUT, "stop: --expect \"%s\" is not a status", expect);
    pipeline p;
    int rc = load(c, "stop", id, &p);
    if (rc)
        return rc;
    pipeline_status now = p.status;
    pipeline_clear(&p);
    if (!expect)
        from = now;
    if (expect && from != now)
        return fail(EXIT_STALE, "stop %s: state changed concurrently: it is %s, not %s; nothing changed",
                    id, pipeline_status_name(now), expect);
    if (pipeline_status_terminal(from))
        return fail(EXIT_INPUT, "stop %s: the pipeline already finished (%s)", id,
                    pipeline_status_name(from));
    char err[512];
    rc = pipeline_store_transition(c->db, id, from, PS_STOPPED, "Stopped by the operator.", NULL,
                                   c->actor, 0, err, sizeof err);
    if (rc == PSTORE_ILLEGAL)
        return fail(EXIT_INPUT, "stop %s: %s (a rollout cannot be stopped)", id, err);
    if (rc < 0)
        return db_fail(c, "stop", err);
    if (rc == 0)
        return fail(EXIT_STALE, "stop %s: state changed concurrently: it is no longer %s; nothing changed",
                    id, pipeline_status_name(from));
    if (c->json)
        printf("{\"id\":\"%s\",\"from\":\"%s\",\"status\":\"STOPPED\"}\n", id,
               pipeline_status_name(from));
    else
        printf("stopped %s (was %s)\n", id, pipeline_status_name(from));
    return EXIT_OK;
}

static int cmd_deploy(ctl *c, int argc, char **argv)
{
    const char *id = NULL;
    int rc = need_id(argc, argv, "deploy", &id);
    if (rc)
        return rc;
    if (argc > 2)
        return fail(EXIT_INPUT, "deploy: unexpected argument \"%s\"", argv[2]);
    pipeline p;
    if ((rc = load(c, "deploy", id, &p)) != EXIT_OK)
        return rc;
    pipeline_status st = p.status;
    bool manual = p.manual, requested = p.deploy_requested_at != NULL;
    pipeline_clear(&p);
    if (!manual)
        return fail(EXIT_INPUT, "deploy %s: the pipeline deploys automatically (mode auto)", id);
    if (st == PS_INITIALIZED || st == PS_RUNNING)
        return fail(EXIT_INPUT, "deploy %s: the build has not succeeded yet (%s)", id,
                    pipeline_status_name(st));
    if (st != PS_BUILD_SUCCEEDED)
        return fail(EXIT_STALE, "deploy %s: state changed concurrently: it is %s, not BUILD_SUCCEEDED; nothing changed",
                    id, pipeline_status_name(st));
    if (requested) {
        printf(c->json ? "{\"id\":\"%s\",\"requested\":true}\n" : "deploy of %s already requested\n", id);
        return EXIT_OK;
    }
    char err[512];
    rc = pipeline_store_request_deploy(c->db, id, err, sizeof err);
    if (rc < 0)
        return db_fail(c, "deploy", err);
    if (rc == 0)
        return fail(EXIT_STALE, "deploy %s: state changed concurrently: it is no longer BUILD_SUCCEEDED; nothing changed", id);
    printf(c->json ? "{\"id\":\"%s\",\"requested\":true}\n" : "deploy of %s requested\n", id);
    return EXIT_OK;
}

/* Each line of text, indented; a missing final newline is supplied. */
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
    char how[300];
    if (result)
        snprintf(how, sizeof how, "%s", result);
    else
        snprintf(how, sizeof how, "exit %s", status ? status : "-");
    if (ms)
        printf("%.23s UTC  %-7s  %-14s  %s in %.1fs\n", db_get(r, i, 1), db_get(r, i, 2),
               db_get(r, i, 3), how, strtod(ms, NULL) / 1000);
    else
        printf("%.23s UTC  %-7s  %-14s  %s\n", db_get(r, i, 1), db_get(r, i, 2), db_get(r, i, 3),
               how);
    printf("    argv %s\n", db_get(r, i, 7));
    print_indented(db_get(r, i, 8), "    | ");
}

static int cmd_logs(ctl *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"step", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    const char *step = NULL;
    int o;
    optind = 1;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o != 's')
            return fail(EXIT_INPUT, "logs: unknown or incomplete option %s", argv[optind - 1]);
        step = optarg;
    }
    if (step && strcmp(step, "build") != 0 && strcmp(step, "deploy") != 0 &&
        strcmp(step, "health") != 0)
        return fail(EXIT_INPUT, "logs: --step \"%s\" is not one of build, deploy, health", step);
    if (optind >= argc)
        return fail(EXIT_INPUT, "logs: a pipeline id is required");
    if (optind + 1 < argc)
        return fail(EXIT_INPUT, "logs: unexpected argument \"%s\"", argv[optind + 1]);
    const char *id = argv[optind];
    pipeline p;
    int rc = load(c, "logs", id, &p);
    if (rc)
        return rc;
    pipeline_clear(&p);
    db_value params[] = {db_text(id), db_text(step), db_text(step)};
    db_result *r = NULL;
    char err[512];
    if (db_exec(c->db,
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
        printf("no command output logged for %s%s%s\n", id, step ? " in step " : "", step ? step : "");
    } else {
        for (size_t i = 0; i < r->nrows; i++)
            print_log_row(r, i);
    }
    db_result_free(r);
    return EXIT_OK;
}

static int cmd_locks(ctl *c, int argc, char **argv)
{
    (void)argv;
    if (argc > 1)
        return fail(EXIT_INPUT, "locks takes no arguments");
    /* Who holds what, by asking the server: IS_USED_LOCK gives the holder's
     * connection id, which every oopsd records in `server`. */
    db_result *r = NULL;
    char err[512];
    unsigned rc = db_exec(c->db,
        "SELECT l.name, l.owner, s.name FROM ("
        " SELECT CONCAT('oops:pipeline:', id) AS name,"
        "        IS_USED_LOCK(CONCAT('oops:pipeline:', id)) AS owner"
        " FROM pipeline WHERE status NOT IN ('SUCCEEDED', 'ERROR', 'STOPPED')"
        " UNION ALL SELECT 'oops:leader:restart', IS_USED_LOCK('oops:leader:restart')"
        " UNION ALL SELECT 'oops:leader:alert', IS_USED_LOCK('oops:leader:alert')"
        " UNION ALL SELECT 'oops:leader:notify', IS_USED_LOCK('oops:leader:notify')"
        ") l LEFT JOIN server s ON s.lock_connection_id = l.owner ORDER BY l.name",
        NULL, 0, &r, err, sizeof err);
    if (rc)
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
            buf_printf(&b, "%-40s  %-10s  %s\n", db_get(r, i, 0), owner ? owner : "-",
                       srv ? srv : (owner ? "(unknown session)" : "-"));
        }
    }
    if (c->json)
        buf_puts(&b, "]\n");
    fputs(b.p ? b.p : "", stdout);
    buf_free(&b);
    db_result_free(r);
    return EXIT_OK;
}

/*
 * scenario FILE: run a scenario (lua/oops/scenario.lua) with the oopsd next
 * to this binary. The URL travels in the environment, never in argv.
 */
static int run_scenario(ctl *c, int argc, char **argv)
{
    if (argc != 2)
        return fail(EXIT_INPUT, "scenario: expects one FILE");
    /* Without a URL the scenario starts a throwaway MariaDB of its own
     * (lua/oops/mariadb.lua) and removes it at the end. */
    const char *url = c->db_url ? c->db_url : getenv("OOPS_DB");
    char self[4096], dir[4096], oopsd[4200], script[4200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return fail(EXIT_INPUT, "scenario: cannot find my own binary");
    self[n] = '\0';
    snprintf(dir, sizeof dir, "%s", self);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    snprintf(oopsd, sizeof oopsd, "%s/oopsd", dir);
    const char *lua_dir = getenv("OOPS_LUA_DIR") ? getenv("OOPS_LUA_DIR") : OOPS_LUA_DIR;
    snprintf(script, sizeof script, "%s/oops/scenario_cli.lua", lua_dir);
    if (url && *url)
        setenv("OOPS_DB", url, 1);
    else
        unsetenv("OOPS_DB");
    setenv("OOPSD", oopsd, 1);
    setenv("OOPSCTL", self, 1);
    fflush(stdout);
    char *args[] = {oopsd, "lua", script, argv[1], NULL};
    execv(oopsd, args);
    return fail(EXIT_INPUT, "scenario: cannot run %s: %s", oopsd, strerror(errno));
}

typedef struct command {
    const char *name;
    int (*run)(ctl *, int, char **);
} command;

static const command commands[] = {
    {"migrate", cmd_migrate}, {"create", cmd_create}, {"list", cmd_list},
    {"show", cmd_show},       {"stop", cmd_stop},     {"deploy", cmd_deploy},
    {"locks", cmd_locks},     {"logs", cmd_logs},     {"scenario", run_scenario},
};

/* Parse global flags (anywhere on the line) and run the command. */
static int run(ctl *c, int argc, char **argv, char **rest, char **db_url_copy)
{
    int nrest = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--db") == 0) {
            if (i + 1 >= argc)
                return fail(EXIT_INPUT, "--db needs a URL");
            free(*db_url_copy);
            c->db_url = *db_url_copy = strdup(argv[++i]);
            db_mask_url_password(argv[i]); /* keep the password out of `ps` */
        } else if (strncmp(argv[i], "--db=", 5) == 0) {
            free(*db_url_copy);
            c->db_url = *db_url_copy = strdup(argv[i] + 5);
            db_mask_url_password(argv[i] + 5);
        } else if (strcmp(argv[i], "--json") == 0) {
            c->json = true;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return EXIT_OK;
        } else {
            rest[nrest++] = argv[i];
        }
    }
    if (nrest == 0) {
        usage(stderr);
        return EXIT_INPUT;
    }
    const command *cmd = NULL;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].name, rest[0]) == 0)
            cmd = &commands[i];
    if (!cmd) {
        fail(EXIT_INPUT, "unknown command \"%s\"", rest[0]);
        usage(stderr);
        return EXIT_INPUT;
    }
    if (cmd->run == run_scenario) /* talks to the database through its servers */
        return run_scenario(c, nrest, rest);
    int rc = open_db(c);
    if (rc == EXIT_OK)
        rc = cmd->run(c, nrest, rest);
    db_close(c->db);
    return rc;
}

int main(int argc, char **argv)
{
    ctl c = {0};
    char *db_url_copy = NULL;
    char host[64] = "localhost";
    gethostname(host, sizeof host - 1);
    snprintf(c.actor, sizeof c.actor, "oopsctl@%.50s", host);
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int rc = run(&c, argc, argv, rest, &db_url_copy);
    free(rest);
    free(db_url_copy);
    mysql_library_end();
    return rc;
}
