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
 *
 * This file is the entry point: who runs oopsctl, the global flags and the
 * dispatch to a command, the helpers every command shares (ctl/ctl.h: fail,
 * terminal-safe values, opening the database, parsing a command's words),
 * the usage, and migrate. The other commands live in src/ctl/, a file per
 * family: read.c (list, history, show, logs, locks), act.c (create,
 * rollback, stop, deploy), audit.c, tools.c (scenario, chaos, outbox, stats).
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pwd.h>
#include <unistd.h>
#include <mysql.h>

#include "buf.h"
#include "ctl/ctl.h"
#include "ctl_args.h"
#include "db.h"
#include "oops_version.h"
#include "schema.h"

/* Print "oopsctl: MESSAGE" on stderr, terminal-safe (a message may quote
 * what a row or a policy file holds); multi-line messages stay multi-line. */
int fail(int code, const char *fmt, ...)
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

const char *tty(const char *s)
{
    if (!s)
        return NULL;
    buf *b = &tty_ring[tty_next++ % TTY_RING];
    b->len = 0;
    ctl_escape(b, s, strlen(s), CTL_TEXT_LINE);
    return b->p ? b->p : "";
}

const char *tty_or(const char *s, const char *dflt) { return s ? tty(s) : dflt; }

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
        "  abort ID --reason TEXT               abort a canary: its traffic back to stable\n"
        "                                       (weight 0), then it fails (on_failure decides)\n"
        "  promote ID [--full] --reason TEXT    end a canary's current step (a pause, an\n"
        "                                       analysis); --full: weight 100 and finish\n"
        "  approve ID --reason TEXT             approve a release before its deploy (another\n"
        "                                       person than its creator; approvals = {...})\n"
        "  reject ID --reason TEXT              reject a release before its deploy: stopped\n"
        "  promote-now ID --reason TEXT [--to ENV] [--policies DIR]\n"
        "                                       release a live release now in the environment\n"
        "                                       its policy promotes it to (promote = {...}),\n"
        "                                       its wait skipped; once, whoever else promotes it\n"
        "  audit [--since DURATION] [--actor NAME@HOST] [--app NS/APP] [--env ENV] [--limit N]\n"
        "                                       operator actions, newest first (default 100):\n"
        "                                       who, what, why, and what came of it\n"
        "  stats [--app NS/APP] [--env ENV] [--since DAYS]\n"
        "                                       the four delivery figures over the last 7d, 30d\n"
        "                                       (default) or 90d: releases live per day, lead\n"
        "                                       time, change failure rate, time to restore\n"
        "  locks                                which server holds which lock\n"
        "  outbox [--route NAME] [--policies DIR]\n"
        "                                       notifications waiting, per route of the policy\n"
        "                                       (--policies or $OOPS_POLICIES): pending, failing,\n"
        "                                       oldest, the first row's retry and last error\n"
        "  chaos --seed N --duration D [--servers K] [--targets N] [--policies DIR] [--keep DIR]\n"
        "                                       a seeded random fault campaign on a throwaway\n"
        "                                       MariaDB and K servers (default 4), N targets\n"
        "                                       (default 40, half canaries), checked from the\n"
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
int db_fail(ctl *c, const char *what, const char *err)
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
 * oopsctl's version (doc/guide/install.md, "Rolling upgrade of a fleet"). */
int open_db(ctl *c)
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
int parse(ctl *c, int argc, char **argv, ctl_flag *flags, size_t nflags, const char **pos,
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
int need_id(const char *cmd, const char **pos, size_t npos, const char **id)
{
    char err[512];
    if (npos < 1)
        return fail(EXIT_INPUT, "%s: a pipeline id is required", cmd);
    if (ctl_check_id(pos[0], err, sizeof err) != 0)
        return fail(EXIT_INPUT, "%s: %s", cmd, err);
    *id = pos[0];
    return EXIT_OK;
}

/* --app NS/APP and --env ENV, each optional unless required. */
int app_env(const char *cmd, const ctl_flag *app, const ctl_flag *env, bool required, char *ns,
            char *name)
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

/* "2026-11-30 12:00:00.123456" → "2026-11-30 12:00:00" */
const char *secs(const char *ts, char *out, size_t n)
{
    snprintf(out, n, "%.19s", ts ? ts : "-");
    return out;
}

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

typedef struct command {
    const char *name;
    int (*run)(ctl *, int, char **);
} command;

static const command commands[] = {
    {"migrate", cmd_migrate},   {"create", cmd_create},
    {"rollback", cmd_rollback}, {"list", cmd_list},
    {"show", cmd_show},         {"stop", cmd_stop},
    {"deploy", cmd_deploy},     {"locks", cmd_locks},
    {"logs", cmd_logs},         {"history", cmd_history},
    {"scenario", run_scenario}, {"chaos", run_chaos},
    {"audit", cmd_audit},       {"outbox", run_outbox},
    {"abort", cmd_abort},       {"promote", cmd_promote},
    {"approve", cmd_approve},   {"reject", cmd_reject},
    {"stats", run_stats},       {"promote-now", cmd_promote_now},
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
