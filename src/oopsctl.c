/*
 * oopsctl — the operator's command line. It talks to the database only:
 * every action is a row change the servers act on within one scan, so no
 * server has to be reachable for a user to act.
 *
 * Exit codes: 0 ok; 1 bad input (unknown id, bad flag, illegal transition,
 * an unfinished pipeline already exists for create, no release to roll
 * back to); 2 database unreachable or credentials refused; 3 the state
 * changed concurrently (nothing changed; also a rollback beside an
 * unfinished pipeline).
 *
 * Every flag and argument is checked (ctl_args.h) before the database is
 * opened, so bad input exits 1 even when the database is down. Text output
 * goes through ctl_escape: whatever a row holds (an artifact, a message, a
 * command's output) cannot rewrite the operator's terminal; --json is exact.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pwd.h>
#include <unistd.h>
#include <mysql.h>
#include <uv.h>

#include "buf.h"
#include "ctl_args.h"
#include "ctx.h"
#include "db.h"
#include "lock_names.h"
#include "metrics.h"
#include "oops_version.h"
#include "operator.h"
#include "pipeline_store.h"
#include "runtime.h"
#include "schema.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_DB = 2, EXIT_STALE = 3, EXIT_HELP = 100 };

/* Global flags: anywhere on the line, each at most once. */
enum { G_DB, G_JSON, G_HELP, G_H, G_VERSION, NGLOBAL };

typedef struct ctl {
    const char *db_url; /* a copy: argv's is masked */
    char *db_url_copy;
    bool json;
    db_conn *db;
    char actor[80];                      /* the process: oopsctl@HOST (the events' server) */
    char person[PIPELINE_ACTOR_MAX + 1]; /* who runs it: alice@HOST (issue 27) */
    ctl_flag globals[NGLOBAL];
} ctl;

/* Print "oopsctl: MESSAGE" on stderr, terminal-safe (a message may quote
 * what a row or a policy file holds); multi-line messages stay multi-line. */
static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...)
{
    va_list ap;
    buf msg = {0}, out = {0};
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n > 0) {
        char *text = malloc((size_t)n + 1);
        if (text) {
            va_start(ap, fmt);
            vsnprintf(text, (size_t)n + 1, fmt, ap);
            va_end(ap);
            buf_add(&msg, text, (size_t)n);
            free(text);
        }
    }
    buf_puts(&out, "oopsctl: ");
    ctl_escape(&out, msg.p ? msg.p : "", msg.len, CTL_TEXT_LINES);
    buf_puts(&out, "\n");
    fputs(out.p, stderr);
    buf_free(&msg);
    buf_free(&out);
    return code;
}

/* Terminal-safe copies of single-line values for the text output: a ring,
 * so that several can be used in one printf. Freed by tty_free(). */
#define TTY_RING 16
static buf tty_ring[TTY_RING];
static unsigned tty_next;

static const char *tty(const char *s)
{
    if (!s)
        return NULL;
    buf *b = &tty_ring[tty_next++ % TTY_RING];
    b->len = 0;
    ctl_escape(b, s, strlen(s), CTL_TEXT_LINE);
    return b->p ? b->p : "";
}

static const char *tty_or(const char *s, const char *dflt) { return s ? tty(s) : dflt; }

static void tty_free(void)
{
    for (int i = 0; i < TTY_RING; i++)
        buf_free(&tty_ring[i]);
}

static void print_version(void) { printf("oopsctl %s (commit %s)\n", OOPS_VERSION, OOPS_COMMIT); }

static void usage(FILE *f)
{
    fputs(
        "usage: oopsctl [--db URL] [--json] COMMAND [ARGS]\n"
        "       oopsctl --version\n"
        "\n"
        "commands:\n"
        "  migrate                              apply the schema migrations\n"
        "  create --app NS/APP --env ENV [--manual] [--artifact REF] [--source JSON]\n"
        "         [--rollback] [--policies DIR] [--reason TEXT]\n"
        "                                       create a pipeline (INITIALIZED); with --policies\n"
        "                                       or $OOPS_POLICIES the application and environment\n"
        "                                       must be declared there\n"
        "  rollback --app NS/APP --env ENV [--to ID] [--policies DIR] [--reason TEXT]\n"
        "                                       create a pipeline (trigger rollback) redeploying\n"
        "                                       the artifact of an earlier SUCCEEDED pipeline of\n"
        "                                       that app and env: ID, else the last one before\n"
        "                                       the current release with another artifact\n"
        "  list [--all] [--status S[,S...]] [--app NS/APP] [--env ENV] [--since DURATION]\n"
        "       [--limit N]                     list pipelines, newest first: every unfinished\n"
        "                                       one and the 20 most recent finished ones, or\n"
        "                                       with --all, --status or --since every match;\n"
        "                                       at most N (default 100, up to 10000);\n"
        "                                       DURATION like 30m, 2h, 7d, 1h30m\n"
        "  history --app NS/APP --env ENV [--limit N]\n"
        "                                       releases and rollbacks that went live, newest\n"
        "                                       first (default 20), the live one marked, after\n"
        "                                       the one in progress\n"
        "  show ID                              a pipeline and its event history\n"
        "  stop ID [--expect STATUS] [--reason TEXT]\n"
        "                                       stop a pipeline from the status read\n"
        "  deploy ID [--override] [--reason TEXT]\n"
        "                                       request the deploy of a manual pipeline; with\n"
        "                                       --override (and a reason), release one a deploy\n"
        "                                       window or freeze holds\n"
        "  audit [--since DURATION] [--actor NAME@HOST] [--app NS/APP] [--env ENV] [--limit N]\n"
        "                                       operator actions, newest first (default 100):\n"
        "                                       who, what, why, and what came of it\n"
        "  locks                                which server holds which lock\n"
        "  outbox [--route NAME] [--policies DIR]\n"
        "                                       notifications waiting, per route of the policy\n"
        "                                       (--policies or $OOPS_POLICIES): pending, failing,\n"
        "                                       oldest, the first row's retry and last error\n"
        "  chaos --seed N --duration D [--servers K] [--policies DIR] [--keep DIR]\n"
        "                                       a seeded random fault campaign on a throwaway\n"
        "                                       MariaDB and K servers (default 4), checked from "
        "the\n"
        "                                       database; exit 0 only without violations\n"
        "  scenario FILE                        run a scenario (servers, pipelines, checks; TAP);\n"
        "                                       without --db/$OOPS_DB on a throwaway MariaDB\n"
        "  logs ID [--step build|deploy|health] the commands a pipeline ran and their output\n"
        "\n"
        "Names (NS, APP, ENV) are lowercase DNS labels: a-z, 0-9 and \"-\", not at either end,\n"
        "at most 63 characters. Status names are read in any case (running = RUNNING).\n"
        "Each flag may be given once; --name=value and --name value are the same.\n"
        "Operator actions record who ran them (SUDO_USER, else USER or LOGNAME, else the\n"
        "uid's name, at this host) and --reason (at most 500 bytes, no control characters).\n"
        "The database URL is mysql://user[:password]@host[:port]/database[?socket=PATH],\n"
        "from --db or $OOPS_DB; the password may also come from the systemd credential\n"
        "db-password, the file $OOPS_DB_PASSWORD_FILE names, or $OOPS_DB_PASSWORD.\n"
        "exit codes: 0 ok, 1 bad input, 2 database unreachable, 3 state changed concurrently\n",
        f);
}

/* Database errors: lost/unreachable → 2, anything else → 1 with a hint.
 * Called right after the failing call on c->db, whose error number tells
 * a missing table (the schema not migrated yet). */
static int db_fail(ctl *c, const char *what, const char *err)
{
    if (!db_is_alive(c->db))
        return fail(EXIT_DB, "%s: database connection lost: %s", what, err);
    if (db_last_error(c->db) == DB_ER_NO_SUCH_TABLE)
        return fail(EXIT_INPUT, "%s: %s (run `oopsctl migrate` first)", what, err);
    return fail(EXIT_INPUT, "%s: %s", what, err);
}

static int connect_db(ctl *c)
{
    db_config cfg;
    char err[1024];
    if (db_config_resolve(&cfg, c->db_url, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "%s", err);
    c->db = db_open(&cfg, err, sizeof err);
    db_config_free(&cfg);
    if (!c->db)
        return fail(EXIT_DB, "%s", err);
    return EXIT_OK;
}

/* Every command but migrate: connected, to a schema of exactly this
 * oopsctl's version (README "Rolling upgrade of a fleet"). */
static int open_db(ctl *c)
{
    int rc = connect_db(c);
    if (rc != EXIT_OK)
        return rc;
    char err[512];
    int cur = schema_current(c->db, err, sizeof err);
    if (cur < 0)
        return db_fail(c, "reading the schema version", err);
    if (cur > schema_latest())
        return fail(EXIT_INPUT,
                    "database schema %d is newer than this oopsctl (%d): upgrade oopsctl", cur,
                    schema_latest());
    if (cur < schema_latest())
        return fail(EXIT_INPUT,
                    "database schema %d is older than this oopsctl (%d) (run `oopsctl migrate` "
                    "first)",
                    cur, schema_latest());
    return EXIT_OK;
}

/* Take the global flags parsed so far: --db is copied, then masked in argv
 * (keep the password out of `ps`); --json. */
static void take_globals(ctl *c)
{
    ctl_flag *db = &c->globals[G_DB];
    if (db->given && !c->db_url_copy) {
        c->db_url = c->db_url_copy = strdup(db->value);
        db_mask_url_password((char *)db->value); /* points into argv */
    }
    c->json = c->globals[G_JSON].given;
}

/*
 * Parse a command's words (argv[0] is the command) against its flags and the
 * global ones. EXIT_OK; EXIT_HELP after printing the usage (--help); or
 * EXIT_INPUT after a message naming the command, the flag and the value.
 */
static int parse(ctl *c, int argc, char **argv, ctl_flag *flags, size_t nflags, const char **pos,
                 size_t maxpos, size_t *npos)
{
    ctl_flag all[16];
    size_t n = 0;
    for (size_t i = 0; i < nflags && n < 16; i++)
        all[n++] = flags[i];
    for (size_t i = 0; i < NGLOBAL && n < 16; i++)
        all[n++] = c->globals[i];
    char err[1024];
    int rc = ctl_parse_flags(argc - 1, argv + 1, all, n, false, pos, maxpos, npos, NULL, err,
                             sizeof err);
    for (size_t i = 0; i < nflags; i++)
        flags[i] = all[i];
    for (size_t i = 0; i < NGLOBAL; i++)
        c->globals[i] = all[nflags + i];
    take_globals(c);
    if (rc != 0)
        return fail(EXIT_INPUT, "%s: %s", argv[0], err);
    if (c->globals[G_HELP].given || c->globals[G_H].given) {
        usage(stdout);
        return EXIT_HELP;
    }
    if (c->globals[G_VERSION].given) {
        print_version();
        return EXIT_HELP;
    }
    return EXIT_OK;
}

/* The pipeline id a command was given: the one positional, well formed. */
static int need_id(const char *cmd, const char **pos, size_t npos, const char **id)
{
    char err[512];
    if (npos < 1)
        return fail(EXIT_INPUT, "%s: a pipeline id is required", cmd);
    if (ctl_check_id(pos[0], err, sizeof err) != 0)
        return fail(EXIT_INPUT, "%s: %s", cmd, err);
    *id = pos[0];
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
    json_kv_str(b, "hold", pipeline_held(p) ? p->hold : NULL, &first);
    json_kv_str(b, "override_at", p->override_at, &first);
    json_kv_str(b, "rollback_of", p->rollback_of, &first);
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

/* "2026-11-30 12:00:00.123456" → "2026-11-30 12:00:00" */
static const char *secs(const char *ts, char *out, size_t n)
{
    snprintf(out, n, "%.19s", ts ? ts : "-");
    return out;
}

/* ---- commands ---------------------------------------------------------- */

#define NF(a) (sizeof(a) / sizeof((a)[0]))
#define PARSE(c, argc, argv, flags, pos, maxpos, npos)                                             \
    do {                                                                                           \
        int prc_ = parse(c, argc, argv, flags, NF(flags), pos, maxpos, npos);                      \
        if (prc_ != EXIT_OK)                                                                       \
            return prc_;                                                                           \
    } while (0)

static int cmd_migrate(ctl *c, int argc, char **argv)
{
    size_t npos = 0;
    int rc = parse(c, argc, argv, NULL, 0, NULL, 0, &npos);
    if (rc != EXIT_OK)
        return rc;
    if ((rc = connect_db(c)) != EXIT_OK)
        return rc;
    char err[512];
    int applied = 0;
    unsigned mrc = schema_migrate(c->db, &applied, err, sizeof err);
    if (mrc)
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

/*
 * The policy's word on a new pipeline: load DIR as oopsd would
 * (oops.policy.load_dir, in this process's own Lua state) and look the
 * application and environment up. 0 when declared; otherwise 1 after a
 * message naming what is wrong (or every error of a broken policy).
 */
/* The servers' own checks, before anything is created: the application is
 * declared, the environment one of its environments, and (exec gateway) no
 * command of it would take a field of the new pipeline for an option
 * (exec/argv.lua's refusal, as pipelines.refusal runs it before every step). */
static const char POLICY_CHECK[] =
    "local dir, app, env, artifact, source = ...\n"
    "local p, errs = require('oops.policy').load_dir(dir, { cron_parse = "
    "require('oops').cron.parse })\n"
    "if not p then return 'broken', table.concat(errs, '\\n') end\n"
    "local a = p.applications[app]\n"
    "if not a then\n"
    "  local names = {}\n"
    "  for name in pairs(p.applications) do names[#names + 1] = name end\n"
    "  table.sort(names)\n"
    "  if #names > 10 then names[11] = '...'; for i = #names, 12, -1 do names[i] = nil end end\n"
    "  return 'app', #names > 0 and table.concat(names, ', ') or 'none'\n"
    "end\n"
    "local known = false\n"
    "for _, e in ipairs(a.environments) do known = known or e == env end\n"
    "if not known then return 'env', table.concat(a.environments, ', ') end\n"
    "if p.gateway.kind ~= 'exec' then return 'ok' end\n"
    "local why = require('oops.gateways.exec').refusal(a, { id = 'new', namespace = a.namespace,\n"
    "  application = a.application, environment = env, artifact = artifact, source = source })\n"
    "if why then return 'refused', why end\n"
    "return 'ok'\n";

static int check_policy(const char *cmd, const char *dir, const char *app, const char *env,
                        const char *artifact, const char *source)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    oops_ctx ctx = {.loop = &loop};
    ctx.metrics = metrics_new();
    db_calls_init(&ctx.calls, ctx.loop, ctx.metrics);
    snprintf(ctx.server_name, sizeof ctx.server_name, "oopsctl");
    int rc = EXIT_INPUT;
    char err[4096];
    runtime *rt = runtime_new(&ctx, err, sizeof err);
    if (!rt) {
        fail(EXIT_INPUT, "%s: %s", cmd, err);
        goto out;
    }
    lua_State *L = runtime_state(rt);
    if (luaL_loadbuffer(L, POLICY_CHECK, sizeof POLICY_CHECK - 1, "=policy check") != LUA_OK) {
        fail(EXIT_INPUT, "%s: %s", cmd, lua_tostring(L, -1));
        goto out;
    }
    lua_pushstring(L, dir);
    lua_pushstring(L, app);
    lua_pushstring(L, env);
    lua_pushstring(L, artifact); /* NULL: nil */
    lua_pushstring(L, source);
    if (runtime_call(L, 5, 2, "checking the policy", err, sizeof err) != 0) {
        fail(EXIT_INPUT, "%s: checking against the policies in %s: %s", cmd, dir, err);
        goto out;
    }
    const char *verdict = lua_tostring(L, -2), *detail = lua_tostring(L, -1);
    if (verdict && strcmp(verdict, "ok") == 0)
        rc = EXIT_OK;
    else if (verdict && strcmp(verdict, "app") == 0)
        fail(EXIT_INPUT, "%s: --app \"%s\" is not declared in the policies in %s (declared: %s)",
             cmd, app, dir, detail ? detail : "?");
    else if (verdict && strcmp(verdict, "env") == 0)
        fail(EXIT_INPUT,
             "%s: --env \"%s\" is not an environment of %s in the policies in %s (it declares: "
             "%s)",
             cmd, env, app, dir, detail ? detail : "?");
    else if (verdict && strcmp(verdict, "refused") == 0)
        fail(EXIT_INPUT, "%s: the servers would refuse this pipeline (policies in %s): %s", cmd,
             dir, detail ? detail : "?");
    else
        fail(EXIT_INPUT,
             "%s: the policies in %s did not load, so nothing was checked or created:\n%s", cmd,
             dir, detail ? detail : "?");
    lua_pop(L, 2);
out:
    runtime_free(rt);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    metrics_free(ctx.metrics);
    return rc;
}

/* An artifact reference: at most 255 bytes, no control characters. */
static int check_artifact(const char *s, char *err, size_t errlen)
{
    char q[300];
    pipeline_quote(q, sizeof q, s, 64);
    if (strlen(s) > 255) {
        snprintf(err, errlen, "--artifact %s: longer than 255 bytes", q);
        return -1;
    }
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            snprintf(err, errlen, "--artifact %s: holds a control character", q);
            return -1;
        }
    }
    return 0;
}

/* An operator's --reason (pipeline_reason_check: bounded, UTF-8, no
 * control character: it reaches the history, logs and notifications). */
static int check_reason(const char *cmd, const ctl_flag *reason)
{
    char err[256];
    if (reason->given && pipeline_reason_check("--reason", reason->value, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "%s: %s", cmd, err);
    return EXIT_OK;
}

/* Who acts, as the audit log and the events record it. */
static op_who who_of(const ctl *c, const ctl_flag *reason)
{
    return (op_who){.op = {.actor = c->person, .reason = reason->given ? reason->value : NULL},
                    .via = c->actor};
}

/* An op_* answer: EXIT_OK, or its message with oopsctl's exit code. */
static int op_exit(ctl *c, const char *cmd, const op_result *r)
{
    switch (r->code) {
    case OP_OK: return EXIT_OK;
    case OP_DB: return db_fail(c, cmd, r->error);
    case OP_STALE: return fail(EXIT_STALE, "%s", r->error);
    default: return fail(EXIT_INPUT, "%s", r->error);
    }
}

static int cmd_create(ctl *c, int argc, char **argv)
{
    enum { F_APP, F_ENV, F_MANUAL, F_ARTIFACT, F_SOURCE, F_ROLLBACK, F_POLICIES, F_REASON };
    ctl_flag f[] = {
        [F_APP] = {"--app", true, false, NULL},
        [F_ENV] = {"--env", true, false, NULL},
        [F_MANUAL] = {"--manual", false, false, NULL},
        [F_ARTIFACT] = {"--artifact", true, false, NULL},
        [F_SOURCE] = {"--source", true, false, NULL},
        [F_ROLLBACK] = {"--rollback", false, false, NULL},
        [F_POLICIES] = {"--policies", true, false, NULL},
        [F_REASON] = {"--reason", true, false, NULL},
    };
    size_t npos = 0;
    PARSE(c, argc, argv, f, NULL, 0, &npos);
    char ns[PIPELINE_LABEL_MAX + 1], name[PIPELINE_LABEL_MAX + 1], err[1024];
    if (!f[F_APP].given)
        return fail(EXIT_INPUT, "create: --app NS/APP is required");
    if (ctl_parse_app("--app", f[F_APP].value, ns, name, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "create: %s", err);
    if (!f[F_ENV].given)
        return fail(EXIT_INPUT, "create: --env ENV is required");
    if (pipeline_label_check("--env", f[F_ENV].value, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "create: %s", err);
    if (f[F_ARTIFACT].given && check_artifact(f[F_ARTIFACT].value, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "create: %s", err);
    int rc = check_reason("create", &f[F_REASON]);
    if (rc != EXIT_OK)
        return rc;
    /* The policy, when we are told where it is: the application must be
     * declared and the environment one of its environments. */
    const char *dir = f[F_POLICIES].given ? f[F_POLICIES].value : getenv("OOPS_POLICIES");
    bool checked = dir && *dir;
    char app[2 * PIPELINE_LABEL_MAX + 2];
    snprintf(app, sizeof app, "%s/%s", ns, name);
    if (checked && (rc = check_policy("create", dir, app, f[F_ENV].value, f[F_ARTIFACT].value,
                                      f[F_SOURCE].value)) != EXIT_OK)
        return rc;
    if ((rc = open_db(c)) != EXIT_OK)
        return rc;
    op_who who = who_of(c, &f[F_REASON]);
    pipeline_new n = {
        .namespace = ns,
        .application = name,
        .environment = f[F_ENV].value,
        .manual = f[F_MANUAL].given,
        .artifact = f[F_ARTIFACT].value,
        .source = f[F_SOURCE].value,
        .trigger = f[F_ROLLBACK].given ? "rollback" : NULL,
        .actor = c->actor,
        .op = &who.op,
    };
    op_result r;
    if (op_create(c->db, &n, &who, &r) != OP_OK)
        return op_exit(c, "create", &r);
    if (c->json)
        printf("{\"id\":\"%s\",\"status\":\"INITIALIZED\"}\n", r.id);
    else
        printf("%s\n", r.id);
    if (!checked)
        fail(EXIT_OK,
             "create: not checked against a policy: pass --policies DIR or set OOPS_POLICIES");
    return EXIT_OK;
}

/*
 * rollback: a new pipeline (trigger rollback, INITIALIZED) carrying the
 * artifact and source of an earlier SUCCEEDED pipeline of the same
 * application and environment; the build scan deploys it without a build
 * (REFERENCE.md 9). The target: --to ID, else the last SUCCEEDED release
 * before the current one that shipped another artifact
 * (pipeline_store_rollback_target). Beside an unfinished pipeline the
 * create hits the unique unfinished_key: exit 3, nothing changed
 * (operator.c, op_rollback).
 */
static int cmd_rollback(ctl *c, int argc, char **argv)
{
    enum { F_APP, F_ENV, F_TO, F_POLICIES, F_REASON };
    ctl_flag f[] = {
        [F_APP] = {"--app", true, false, NULL},
        [F_ENV] = {"--env", true, false, NULL},
        [F_TO] = {"--to", true, false, NULL},
        [F_POLICIES] = {"--policies", true, false, NULL},
        [F_REASON] = {"--reason", true, false, NULL},
    };
    size_t npos = 0;
    PARSE(c, argc, argv, f, NULL, 0, &npos);
    char ns[PIPELINE_LABEL_MAX + 1], name[PIPELINE_LABEL_MAX + 1], err[1024];
    const char *env = f[F_ENV].value, *to = f[F_TO].value;
    if (!f[F_APP].given)
        return fail(EXIT_INPUT, "rollback: --app NS/APP is required");
    if (ctl_parse_app("--app", f[F_APP].value, ns, name, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "rollback: %s", err);
    if (!f[F_ENV].given)
        return fail(EXIT_INPUT, "rollback: --env ENV is required");
    if (pipeline_label_check("--env", env, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "rollback: %s", err);
    if (f[F_TO].given && ctl_check_id(to, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "rollback: --to: %s", err);
    int rc = check_reason("rollback", &f[F_REASON]);
    if (rc != EXIT_OK)
        return rc;
    const char *dir = f[F_POLICIES].given ? f[F_POLICIES].value : getenv("OOPS_POLICIES");
    bool checked = dir && *dir;
    char app[2 * PIPELINE_LABEL_MAX + 2];
    snprintf(app, sizeof app, "%s/%s", ns, name);
    if (checked && (rc = check_policy("rollback", dir, app, env, NULL, NULL)) != EXIT_OK)
        return rc;
    if ((rc = open_db(c)) != EXIT_OK)
        return rc;
    op_who who = who_of(c, &f[F_REASON]);
    op_result r;
    if (op_rollback(c->db, ns, name, env, to, &who, &r) != OP_OK)
        return op_exit(c, "rollback", &r);
    if (c->json) {
        buf b = {0};
        op_result_json(&b, "rollback", &r);
        printf("%s\n", b.p);
        buf_free(&b);
    } else {
        printf("%s\n", r.id);
    }
    /* Which release was chosen, for the operator (stdout stays the id alone). */
    fail(EXIT_OK, "%s", r.note);
    if (!checked)
        fail(EXIT_OK,
             "rollback: not checked against a policy: pass --policies DIR or set OOPS_POLICIES");
    return EXIT_OK;
}

/* list: without --all, --status or --since, every unfinished pipeline and
 * the LIST_RECENT most recent finished ones; always newest first and at
 * most --limit rows (LIST_LIMIT by default). */
enum { LIST_RECENT = 20, LIST_LIMIT = 100, HISTORY_LIMIT = 20 };

/* --app NS/APP and --env ENV, each optional unless required. */
static int app_env(const char *cmd, const ctl_flag *app, const ctl_flag *env, bool required,
                   char *ns, char *name)
{
    char err[1024];
    if (required && !app->given)
        return fail(EXIT_INPUT, "%s: --app NS/APP is required", cmd);
    if (app->given && ctl_parse_app("--app", app->value, ns, name, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "%s: %s", cmd, err);
    if (required && !env->given)
        return fail(EXIT_INPUT, "%s: --env ENV is required", cmd);
    if (env->given && pipeline_label_check("--env", env->value, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "%s: %s", cmd, err);
    return EXIT_OK;
}

static int cmd_list(ctl *c, int argc, char **argv)
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
static int cmd_history(ctl *c, int argc, char **argv)
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

static int cmd_show(ctl *c, int argc, char **argv)
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

static int cmd_stop(ctl *c, int argc, char **argv)
{
    enum { F_EXPECT, F_REASON };
    ctl_flag f[] = {
        [F_EXPECT] = {"--expect", true, false, NULL}, [F_REASON] = {"--reason", true, false, NULL}};
    const char *pos[1], *id = NULL;
    size_t npos = 0;
    PARSE(c, argc, argv, f, pos, 1, &npos);
    int rc = need_id("stop", pos, npos, &id);
    if (rc != EXIT_OK)
        return rc;
    pipeline_status from = PS_INITIALIZED;
    char err[1024];
    if (f[F_EXPECT].given &&
        ctl_parse_status("--expect", f[F_EXPECT].value, &from, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "stop: %s", err);
    if ((rc = check_reason("stop", &f[F_REASON])) != EXIT_OK || (rc = open_db(c)) != EXIT_OK)
        return rc;
    op_who who = who_of(c, &f[F_REASON]);
    op_result r;
    if (op_stop(c->db, id, f[F_EXPECT].given ? &from : NULL, &who, &r) != OP_OK)
        return op_exit(c, "stop", &r);
    if (c->json) {
        buf b = {0};
        op_result_json(&b, "stop", &r);
        printf("%s\n", b.p);
        buf_free(&b);
    } else {
        printf("stopped %s (was %s)\n", id, pipeline_status_name(r.from));
    }
    return EXIT_OK;
}

enum { AUDIT_LIMIT = 100 };

/* audit: the operator actions of the audit log (operator_action), newest
 * first: what was asked, by whom, why, and what came of it. */
static int cmd_audit(ctl *c, int argc, char **argv)
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

static int cmd_deploy(ctl *c, int argc, char **argv)
{
    enum { F_OVERRIDE, F_REASON };
    ctl_flag f[] = {[F_OVERRIDE] = {"--override", false, false, NULL},
                    [F_REASON] = {"--reason", true, false, NULL}};
    const char *pos[1], *id = NULL;
    size_t npos = 0;
    PARSE(c, argc, argv, f, pos, 1, &npos);
    int rc = need_id("deploy", pos, npos, &id);
    if (rc != EXIT_OK)
        return rc;
    if (f[F_OVERRIDE].given && !f[F_REASON].given)
        return fail(EXIT_INPUT, "deploy: --override needs --reason TEXT (it is kept in the "
                                "pipeline's history)");
    if ((rc = check_reason("deploy", &f[F_REASON])) != EXIT_OK || (rc = open_db(c)) != EXIT_OK)
        return rc;
    op_who who = who_of(c, &f[F_REASON]);
    op_result r;
    if (op_deploy(c->db, id, f[F_OVERRIDE].given, &who, &r) != OP_OK)
        return op_exit(c, "deploy", &r);
    if (c->json) {
        buf b = {0};
        op_result_json(&b, "deploy", &r);
        printf("%s\n", b.p);
        buf_free(&b);
    } else {
        printf("%s\n", r.note);
    }
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

static int cmd_logs(ctl *c, int argc, char **argv)
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

static int cmd_locks(ctl *c, int argc, char **argv)
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

/*
 * Run one of the Lua tools (lua/oops/<tool>/cli.lua) with the oopsd next to
 * this binary: exec, so its exit status is ours. url: OOPS_DB for it (the
 * URL travels in the environment, never in argv), NULL for none.
 */
static int exec_lua_tool(const char *tool, const char *url, char **args, int nargs)
{
    char self[4096], dir[4096], oopsd[4200], script[4200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return fail(EXIT_INPUT, "%s: cannot find my own binary", tool);
    self[n] = '\0';
    snprintf(dir, sizeof dir, "%s", self);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    snprintf(oopsd, sizeof oopsd, "%s/oopsd", dir);
    char lua_dir[4096], why[4096]; /* the one oopsd next to us resolves too: both are installed
                                      together */
    if (runtime_lua_dir(lua_dir, sizeof lua_dir, why, sizeof why) != 0)
        return fail(EXIT_INPUT, "%s: %s", tool, why);
    snprintf(script, sizeof script, "%s/oops/%s/cli.lua", lua_dir, tool);
    if (url && *url)
        setenv("OOPS_DB", url, 1);
    else
        unsetenv("OOPS_DB");
    setenv("OOPSD", oopsd, 1);
    setenv("OOPSCTL", self, 1);
    fflush(stdout);
    char **argv = calloc((size_t)nargs + 4, sizeof *argv);
    if (!argv)
        return fail(EXIT_INPUT, "%s: out of memory", tool);
    argv[0] = oopsd;
    argv[1] = "lua";
    argv[2] = script;
    for (int i = 0; i < nargs; i++)
        argv[3 + i] = args[i];
    execv(oopsd, argv);
    free(argv);
    return fail(EXIT_INPUT, "%s: cannot run %s: %s", tool, oopsd, strerror(errno));
}

/*
 * scenario FILE: run a scenario (lua/oops/scenario/). Without a URL the
 * scenario starts a throwaway MariaDB of its own
 * (lua/oops/scenario/mariadb.lua) and removes it at the end.
 */
static int run_scenario(ctl *c, int argc, char **argv)
{
    const char *pos[1];
    size_t npos = 0;
    int rc = parse(c, argc, argv, NULL, 0, pos, 1, &npos);
    if (rc != EXIT_OK)
        return rc;
    if (npos != 1)
        return fail(EXIT_INPUT, "scenario: expects one FILE");
    char *args[] = {(char *)pos[0]};
    return exec_lua_tool("scenario", c->db_url ? c->db_url : getenv("OOPS_DB"), args, 1);
}

/*
 * chaos --seed N --duration D [...]: a seeded fault campaign
 * (lua/oops/chaos/), always on a throwaway MariaDB of its own; its flags are
 * read there.
 */
static int run_chaos(ctl *c, int argc, char **argv)
{
    if (c->db_url)
        return fail(EXIT_INPUT, "chaos: runs on a database of its own (no --db)");
    return exec_lua_tool("chaos", NULL, argv + 1, argc - 1);
}

/*
 * outbox [--route NAME] [--policies DIR]: the notification backlog per route
 * (lua/oops/outbox/); its flags checked here, so --db never reaches argv.
 */
static int run_outbox(ctl *c, int argc, char **argv)
{
    ctl_flag f[] = {{"--route", true, false, NULL}, {"--policies", true, false, NULL}};
    int rc = parse(c, argc, argv, f, 2, NULL, 0, NULL);
    if (rc != EXIT_OK)
        return rc;
    char *args[5];
    int n = 0;
    if (c->json)
        args[n++] = "--json";
    for (int i = 0; i < 2; i++)
        if (f[i].given)
            args[n++] = (char *)f[i].name, args[n++] = (char *)f[i].value;
    return exec_lua_tool("outbox", c->db_url ? c->db_url : getenv("OOPS_DB"), args, n);
}

typedef struct command {
    const char *name;
    int (*run)(ctl *, int, char **);
} command;

static const command commands[] = {
    {"migrate", cmd_migrate}, {"create", cmd_create},     {"rollback", cmd_rollback},
    {"list", cmd_list},       {"show", cmd_show},         {"stop", cmd_stop},
    {"deploy", cmd_deploy},   {"locks", cmd_locks},       {"logs", cmd_logs},
    {"history", cmd_history}, {"scenario", run_scenario}, {"chaos", run_chaos},
    {"audit", cmd_audit},     {"outbox", run_outbox},
};

/* Global flags before the command, the command, then its own words (where
 * the global flags may appear too, each still at most once). */
static int run_command(ctl *c, int argc, char **argv)
{
    c->globals[G_DB] = (ctl_flag){"--db", true, false, NULL};
    c->globals[G_JSON] = (ctl_flag){"--json", false, false, NULL};
    c->globals[G_HELP] = (ctl_flag){"--help", false, false, NULL};
    c->globals[G_H] = (ctl_flag){"-h", false, false, NULL};
    c->globals[G_VERSION] = (ctl_flag){"--version", false, false, NULL};
    int used = 0;
    char err[1024];
    int rc = ctl_parse_flags(argc - 1, argv + 1, c->globals, NGLOBAL, true, NULL, 0, NULL, &used,
                             err, sizeof err);
    take_globals(c);
    if (rc != 0)
        return fail(EXIT_INPUT, "%s (see oopsctl --help)", err);
    int at = 1 + used;
    if (c->globals[G_VERSION].given) {
        print_version();
        return EXIT_OK;
    }
    if (at >= argc) {
        if (c->globals[G_HELP].given || c->globals[G_H].given) {
            usage(stdout);
            return EXIT_OK;
        }
        usage(stderr);
        return EXIT_INPUT;
    }
    const command *cmd = NULL;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].name, argv[at]) == 0)
            cmd = &commands[i];
    if (!cmd) {
        fail(EXIT_INPUT, "unknown command \"%s\"", argv[at]);
        usage(stderr);
        return EXIT_INPUT;
    }
    rc = cmd->run(c, argc - at, argv + at);
    db_close(c->db);
    c->db = NULL;
    return rc == EXIT_HELP ? EXIT_OK : rc;
}

/* A login name as the environment or the password database gives it: 1 to
 * 64 characters of letters, digits, ".", "_", "-" and a final "$" (what
 * useradd and most directories allow); anything else is not taken. */
static bool login_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 64 || s[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!(ch < 0x80 && (isalnum(ch) || ch == '.' || ch == '_' || ch == '-')) &&
            !(ch == '$' && i == n - 1))
            return false;
    }
    return true;
}

/* The person running oopsctl, as events and the audit log record them
 * (issue 27): SUDO_USER (the operator behind sudo), else USER, LOGNAME, else
 * the name of the real uid, else "uid-N"; at the host. */
static void person_of(char *out, size_t len, const char *host)
{
    const char *names[] = {getenv("SUDO_USER"), getenv("USER"), getenv("LOGNAME")};
    const char *name = NULL;
    for (size_t i = 0; i < 3 && !name; i++)
        if (login_name_ok(names[i]))
            name = names[i];
    struct passwd *pw = name ? NULL : getpwuid(getuid());
    if (pw && login_name_ok(pw->pw_name))
        name = pw->pw_name;
    if (name)
        snprintf(out, len, "%s@%s", name, host);
    else
        snprintf(out, len, "uid-%u@%s", (unsigned)getuid(), host);
}

int main(int argc, char **argv)
{
    ctl c = {0};
    char host[64] = "localhost";
    gethostname(host, sizeof host - 1);
    if (!login_name_ok(host)) /* a host name with anything else in it is not shown */
        snprintf(host, sizeof host, "localhost");
    snprintf(c.actor, sizeof c.actor, "oopsctl@%.50s", host);
    person_of(c.person, sizeof c.person, host);
    int rc = run_command(&c, argc, argv);
    free(c.db_url_copy);
    tty_free();
    mysql_library_end();
    return rc;
}
