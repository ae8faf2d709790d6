/*
 * daemon — the life of one oopsd server: connect, migrate, register, load
 * the policies, run the scans on the loop, serve /healthz /metrics /status,
 * reload on SIGHUP, drain and release everything on SIGTERM/SIGINT.
 */
#ifndef OOPS_DAEMON_H
#define OOPS_DAEMON_H

typedef struct daemon_options {
    const char *db_url;          /* NULL = $OOPS_DB */
    const char *name;            /* server name (required) */
    const char *policies;        /* policy directory */
    const char *listen;          /* HTTP address, default 127.0.0.1:7070; "off" disables */
    unsigned drain_ms;           /* bounded wait for in-flight steps at shutdown */
    unsigned db_connections;     /* the work connections tasks share (0 = 4) */
    const char *http_token_file; /* NULL: no token; required when listen is not loopback */
    const char *http_users_file; /* --http-users: named viewers and operators (re-read on SIGHUP);
                                    not with http_token_file */
    const char *run_as;          /* NULL: children run as oopsd; else every child as this user */
    const char *simulate;        /* NULL; else the simulated gateway and probe, every
                                    notification a webhook to this URL (oopsctl chaos) */

    /* --http-host: names the Host header may carry (web.h), n of them */
    const char *const *http_hosts;
    unsigned n_http_hosts;
} daemon_options;

/* Exit codes of oopsd. */
enum {
    OOPSD_OK = 0,
    OOPSD_BAD_INPUT = 1, /* bad flag, broken policy, cannot listen */
    OOPSD_DB = 2,        /* database unreachable, refused, or unfit for locks */
};

/* Runs until stopped; returns the process exit code. */
int daemon_run(const daemon_options *o);

/* `oopsd --check --policies DIR`: load and validate, print ok or every error. */
int daemon_check(const char *policies);

/* `oopsd lua SCRIPT [ARGS]`: run a Lua script with the oops module (specs, tools). */
int daemon_lua(int argc, char **argv);

#endif
