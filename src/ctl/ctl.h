/*
 * ctl.h — what oopsctl's commands share, private to oopsctl (src/oopsctl.c
 * and the files of src/ctl/, never oops_core): the `ctl` an invocation
 * carries, the exit codes, and the helpers every command uses (fail,
 * terminal-safe values, opening the database, parsing a command's words),
 * defined in src/oopsctl.c; then the commands, a file per family.
 */
#ifndef OOPS_CTL_H
#define OOPS_CTL_H

#include <stdbool.h>
#include <stddef.h>

#include "ctl_args.h"
#include "db.h"
#include "pipeline_store.h"

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
 * what a row or a policy file holds); multi-line messages stay multi-line.
 * Returns code. */
int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A terminal-safe copy of a single-line value for the text output, from a
 * ring (several may be used in one printf); NULL for NULL. tty_or: dflt
 * (as is) for NULL. */
const char *tty(const char *s);
const char *tty_or(const char *s, const char *dflt);

/* "2026-11-30 12:00:00.123456" → "2026-11-30 12:00:00" into out; out. */
const char *secs(const char *ts, char *out, size_t n);

/* Database errors: lost/unreachable → 2, anything else → 1 with a hint.
 * Called right after the failing call on c->db, whose error number tells
 * a missing table (the schema not migrated yet). */
int db_fail(ctl *c, const char *what, const char *err);

/* Every command but migrate: connected, to a schema of exactly this
 * oopsctl's version (doc/guide/install.md, "Rolling upgrade of a fleet"). */
int open_db(ctl *c);

/*
 * Parse a command's words (argv[0] is the command) against its flags and the
 * global ones. EXIT_OK; EXIT_HELP after printing the usage (--help); or
 * EXIT_INPUT after a message naming the command, the flag and the value.
 */
int parse(ctl *c, int argc, char **argv, ctl_flag *flags, size_t nflags, const char **pos,
          size_t maxpos, size_t *npos);

/* The pipeline id a command was given: the one positional, well formed. */
int need_id(const char *cmd, const char **pos, size_t npos, const char **id);

/* --app NS/APP and --env ENV, each optional unless required. */
int app_env(const char *cmd, const ctl_flag *app, const ctl_flag *env, bool required, char *ns,
            char *name);

#define NF(a) (sizeof(a) / sizeof((a)[0]))
#define PARSE(c, argc, argv, flags, pos, maxpos, npos)                                             \
    do {                                                                                           \
        int prc_ = parse(c, argc, argv, flags, NF(flags), pos, maxpos, npos);                      \
        if (prc_ != EXIT_OK)                                                                       \
            return prc_;                                                                           \
    } while (0)

/* The commands: each takes the words from its name on, returns an exit code
 * (EXIT_HELP after --help). */
/* src/ctl/read.c: what the database says. */
int cmd_list(ctl *c, int argc, char **argv);
int cmd_history(ctl *c, int argc, char **argv);
int cmd_show(ctl *c, int argc, char **argv);
int cmd_logs(ctl *c, int argc, char **argv);
int cmd_locks(ctl *c, int argc, char **argv);
/* src/ctl/act.c: the operator's actions. */
int cmd_create(ctl *c, int argc, char **argv);
int cmd_rollback(ctl *c, int argc, char **argv);
int cmd_promote_now(ctl *c, int argc, char **argv);
int cmd_stop(ctl *c, int argc, char **argv);
int cmd_deploy(ctl *c, int argc, char **argv);
int cmd_abort(ctl *c, int argc, char **argv);
int cmd_promote(ctl *c, int argc, char **argv);
int cmd_approve(ctl *c, int argc, char **argv);
int cmd_reject(ctl *c, int argc, char **argv);
/* src/ctl/audit.c: the audit log. */
int cmd_audit(ctl *c, int argc, char **argv);
/* src/ctl/tools.c: the Lua tools, run by the oopsd next to oopsctl. */
int run_scenario(ctl *c, int argc, char **argv);
int run_chaos(ctl *c, int argc, char **argv);
int run_outbox(ctl *c, int argc, char **argv);
int run_stats(ctl *c, int argc, char **argv);

#endif
