/*
 * oopsd — the scheduler engine. Every backend server runs one:
 *   oopsd --db URL --name NAME --policies DIR [--listen ADDR] [--check]
 *   oopsd --check --policies DIR        validate the policies and exit (like nginx -t)
 *   oopsd lua SCRIPT [ARGS...]          run a Lua script with the oops module
 * Exit codes: 0 ok, 1 bad input or broken policy, 2 database unreachable or unfit.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "db.h"
#include "log.h"

static void usage(FILE *f)
{
    fputs("usage: oopsd --db URL --name NAME --policies DIR [--listen ADDR] [--drain MS] [--log-level L]\n"
          "       oopsd --check --policies DIR\n"
          "       oopsd lua SCRIPT [ARGS...]\n"
          "\n"
          "  --db URL        mysql://user[:password]@host[:port]/database[?socket=PATH] (default $OOPS_DB;\n"
          "                  the password may come from $OOPS_DB_PASSWORD)\n"
          "  --name NAME     this server's name, unique among the servers\n"
          "  --policies DIR  the policy files (*.lua)\n"
          "  --listen ADDR   /healthz, /metrics, /status (default 127.0.0.1:7070; \"off\" disables)\n"
          "  --drain MS      how long SIGTERM waits for in-flight steps (default 10000)\n"
          "  --check         load and validate the policies, print ok or every error, exit 0 or 1\n"
          "exit codes: 0 ok, 1 bad input or broken policy, 2 database unreachable or unfit\n",
          f);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "lua") == 0)
        return daemon_lua(argc - 2, argv + 2);
    static const struct option opts[] = {
        {"db", required_argument, NULL, 'd'},       {"name", required_argument, NULL, 'n'},
        {"policies", required_argument, NULL, 'p'}, {"listen", required_argument, NULL, 'l'},
        {"check", no_argument, NULL, 'c'},          {"drain", required_argument, NULL, 'D'},
        {"log-level", required_argument, NULL, 'L'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    daemon_options o = {0};
    bool check = false;
    char *db_copy = NULL;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            free(db_copy);
            o.db_url = db_copy = strdup(optarg);
            db_mask_url_password(optarg); /* keep the password out of `ps` */
            break;
        case 'n': o.name = optarg; break;
        case 'p': o.policies = optarg; break;
        case 'l': o.listen = optarg; break;
        case 'c': check = true; break;
        case 'D': o.drain_ms = (unsigned)strtoul(optarg, NULL, 10); break;
        case 'L':
            if (log_level_parse(optarg) < 0) {
                fprintf(stderr, "oopsd: --log-level \"%s\": one of debug, info, warn, error\n", optarg);
                return OOPSD_BAD_INPUT;
            }
            log_set_min_level((log_level)log_level_parse(optarg));
            break;
        case 'h': usage(stdout); return OOPSD_OK;
        default:
            fprintf(stderr, "oopsd: unknown or incomplete option %s\n", argv[optind - 1]);
            usage(stderr);
            return OOPSD_BAD_INPUT;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "oopsd: unexpected argument \"%s\"\n", argv[optind]);
        return OOPSD_BAD_INPUT;
    }
    if (!o.policies) {
        fprintf(stderr, "oopsd: --policies DIR is required\n");
        return OOPSD_BAD_INPUT;
    }
    if (check) {
        free(db_copy);
        return daemon_check(o.policies);
    }
    if (!o.name || !*o.name || strlen(o.name) > 40) {
        fprintf(stderr, "oopsd: --name NAME is required (at most 40 characters)\n");
        free(db_copy);
        return OOPSD_BAD_INPUT;
    }
    int rc = daemon_run(&o);
    free(db_copy);
    return rc;
}
