/*
 * oopsd — the scheduler engine. Every backend server runs one:
 *   oopsd --db URL --name NAME --policies DIR [--listen ADDR] [--http-users FILE]
 *         [--http-token-file FILE]
 *         [--http-host NAME]... [--run-as USER]
 *   oopsd --check --policies DIR        validate the policies and exit (like nginx -t)
 *   oopsd lua SCRIPT [ARGS...]          run a Lua script with the oops module
 *   oopsd --version                     "oopsd VERSION (commit GIT-DESCRIBE)"
 * Exit codes: 0 ok, 1 bad input or broken policy, 2 database unreachable or unfit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_args.h"
#include "daemon.h"
#include "db.h"
#include "log.h"
#include "oops_version.h"
#include "web.h"

static void usage(FILE *f)
{
    fputs("usage: oopsd --db URL --name NAME --policies DIR [--listen ADDR] "
          "[--http-users FILE | --http-token-file FILE] [--http-host NAME]... [--run-as USER] "
          "[--drain MS] "
          "[--db-connections N] [--simulate URL] "
          "[--log-level L]\n"
          "       oopsd --check --policies DIR\n"
          "       oopsd lua SCRIPT [ARGS...]\n"
          "       oopsd --version\n"
          "\n"
          "  --db URL        mysql://user[:password]@host[:port]/database[?socket=PATH] (default "
          "$OOPS_DB;\n"
          "                  without a password in it: the systemd credential db-password,\n"
          "                  the file $OOPS_DB_PASSWORD_FILE names, or $OOPS_DB_PASSWORD)\n"
          "  --name NAME     this server's name, unique among the servers\n"
          "  --policies DIR  the policy files (*.lua)\n"
          "  --listen ADDR   the fleet page (/), /healthz, /metrics, /status (default "
          "127.0.0.1:7070;\n"
          "                  \"off\" disables)\n"
          "  --http-users FILE  lines NAME ROLE TOKEN (ROLE viewer or operator): the bearer\n"
          "                  tokens /api, /metrics and /status take; operators may also act\n"
          "                  from the page (stop, release, roll back); re-read on SIGHUP\n"
          "  --http-token-file FILE  one bearer token (one line, 16 to 4096 characters): one\n"
          "                  viewer; one of the two is required when ADDR is not loopback\n"
          "  --http-host NAME  a host name (or IP address) requests may name in their Host\n"
          "                  header besides localhost, loopback addresses and ADDR; up to 16\n"
          "                  times (others are answered 421: DNS rebinding)\n"
          "  --run-as USER   run every command (build, deploy, health, restart, notify) as USER,\n"
          "                  who cannot read oopsd's credentials; needs CAP_SETUID, CAP_SETGID\n"
          "                  and CAP_KILL (the systemd unit grants them)\n"
          "  --drain MS      how long SIGTERM waits for in-flight steps, 1 to 3600000 (default "
          "10000)\n"
          "  --db-connections N  work connections tasks share, opened while calls wait and "
          "closed\n"
          "                  after 30 s unused, 1 to 64 (default 4; the lock session and the "
          "work\n"
          "                  connection are two more)\n"
          "  --simulate URL  run the policies with the simulated gateway and alert probe, every\n"
          "                  notification sent as a webhook to URL: nothing real is run or\n"
          "                  told (oopsctl chaos starts its servers so); also $OOPS_SIMULATE\n"
          "  --check         load and validate the policies, print ok or every error, exit 0 or 1\n"
          "Each flag may be given once (--http-host up to 16 times); --flag=value and --flag "
          "value\n"
          "are the same.\n"
          "exit codes: 0 ok, 1 bad input or broken policy, 2 database unreachable or unfit\n",
          f);
}

enum {
    F_DB,
    F_NAME,
    F_POLICIES,
    F_LISTEN,
    F_CHECK,
    F_DRAIN,
    F_DB_CONNECTIONS,
    F_LOG_LEVEL,
    F_HTTP_TOKEN_FILE,
    F_HTTP_USERS,
    F_RUN_AS,
    F_SIMULATE,
    F_HELP,
    F_VERSION,
    F_HTTP_HOST, /* WEB_HOSTS_MAX entries from here: a repeatable flag (ctl_args.h) */
    F__COUNT = F_HTTP_HOST + WEB_HOSTS_MAX
};

static void flag_table(ctl_flag f[F__COUNT])
{
    const ctl_flag one[] = {
        [F_DB] = {"--db", true, false, NULL},
        [F_NAME] = {"--name", true, false, NULL},
        [F_POLICIES] = {"--policies", true, false, NULL},
        [F_LISTEN] = {"--listen", true, false, NULL},
        [F_CHECK] = {"--check", false, false, NULL},
        [F_DRAIN] = {"--drain", true, false, NULL},
        [F_DB_CONNECTIONS] = {"--db-connections", true, false, NULL},
        [F_LOG_LEVEL] = {"--log-level", true, false, NULL},
        [F_HTTP_TOKEN_FILE] = {"--http-token-file", true, false, NULL},
        [F_HTTP_USERS] = {"--http-users", true, false, NULL},
        [F_RUN_AS] = {"--run-as", true, false, NULL},
        [F_SIMULATE] = {"--simulate", true, false, NULL},
        [F_HELP] = {"--help", false, false, NULL},
        [F_VERSION] = {"--version", false, false, NULL},
    };
    for (int i = 0; i < F_HTTP_HOST; i++)
        f[i] = one[i];
    for (int i = F_HTTP_HOST; i < F__COUNT; i++)
        f[i] = (ctl_flag){"--http-host", true, false, NULL};
}

/* The numeric and level flags into o: 0, or -1 with the reason said. */
static int number_flags(const ctl_flag *f, daemon_options *o)
{
    char err[1024];
    if (f[F_LOG_LEVEL].given) {
        if (log_level_parse(f[F_LOG_LEVEL].value) < 0) {
            char q[300];
            pipeline_quote(q, sizeof q, f[F_LOG_LEVEL].value, 64);
            fprintf(stderr, "oopsd: --log-level %s: one of debug, info, warn, error\n", q);
            return -1;
        }
        log_set_min_level((log_level)log_level_parse(f[F_LOG_LEVEL].value));
    }
    unsigned long long v;
    /* --drain 0 is not offered: daemon_options reads 0 as "the default". */
    if (f[F_DRAIN].given) {
        if (ctl_parse_number("--drain", f[F_DRAIN].value, 1, CTL_DRAIN_MAX, "milliseconds", &v, err,
                             sizeof err) != 0) {
            fprintf(stderr, "oopsd: %s\n", err);
            return -1;
        }
        o->drain_ms = (unsigned)v;
    }
    if (f[F_DB_CONNECTIONS].given) {
        if (ctl_parse_number("--db-connections", f[F_DB_CONNECTIONS].value, 1, 64, "connections",
                             &v, err, sizeof err) != 0) {
            fprintf(stderr, "oopsd: %s\n", err);
            return -1;
        }
        o->db_connections = (unsigned)v;
    }
    return 0;
}

/* Every flag at most once (but --http-host), exact names only, no empty
 * values (ctl_args.h). */
int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "lua") == 0)
        return daemon_lua(argc - 2, argv + 2);
    ctl_flag f[F__COUNT];
    flag_table(f);
    char err[1024];
    int rc = ctl_parse_flags(argc - 1, argv + 1, f, F__COUNT, false, NULL, 0, NULL, NULL, err,
                             sizeof err);
    daemon_options o = {0};
    char *db_copy = NULL;
    if (f[F_DB].given) {
        o.db_url = db_copy = strdup(f[F_DB].value);
        db_mask_url_password((char *)f[F_DB].value); /* keep the password out of `ps` */
    }
    if (rc != 0) {
        fprintf(stderr, "oopsd: %s (see oopsd --help)\n", err);
        goto bad;
    }
    if (f[F_HELP].given || f[F_VERSION].given) {
        if (f[F_HELP].given)
            usage(stdout);
        else
            printf("oopsd %s (commit %s)\n", OOPS_VERSION, OOPS_COMMIT);
        free(db_copy);
        return OOPSD_OK;
    }
    o.name = f[F_NAME].value;
    o.policies = f[F_POLICIES].value;
    o.listen = f[F_LISTEN].value;
    o.http_token_file = f[F_HTTP_TOKEN_FILE].value;
    o.http_users_file = f[F_HTTP_USERS].value;
    o.run_as = f[F_RUN_AS].value;
    /* $OOPS_SIMULATE when the flag is absent: a URL with a secret (oopsctl chaos's
     * receiver) stays out of argv, which ps shows every user. */
    o.simulate = f[F_SIMULATE].given ? f[F_SIMULATE].value : getenv("OOPS_SIMULATE");
    if (o.simulate && !*o.simulate)
        o.simulate = NULL;
    const char *http_hosts[WEB_HOSTS_MAX];
    o.http_hosts = http_hosts;
    for (int i = F_HTTP_HOST; i < F__COUNT && f[i].given; i++)
        http_hosts[o.n_http_hosts++] = f[i].value;
    if (number_flags(f, &o) != 0)
        goto bad;
    if (!o.policies) {
        fprintf(stderr, "oopsd: --policies DIR is required\n");
        goto bad;
    }
    if (f[F_NAME].given && ctl_parse_server_name("--name", o.name, err, sizeof err) != 0) {
        fprintf(stderr, "oopsd: %s\n", err);
        goto bad;
    }
    if (f[F_CHECK].given) { /* the flags of a running server may stay on the line, like nginx -t */
        free(db_copy);
        return daemon_check(o.policies);
    }
    if (!f[F_NAME].given) {
        fprintf(stderr, "oopsd: --name NAME is required (at most %d characters)\n",
                CTL_SERVER_NAME_MAX);
        goto bad;
    }
    rc = daemon_run(&o);
    free(db_copy);
    return rc;
bad:
    free(db_copy);
    return OOPSD_BAD_INPUT;
}
