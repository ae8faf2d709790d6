/*
 * daemon_privs — what the daemon's children inherit: --run-as USER (every
 * child as that user, no capability through exec) and the database settings
 * (OOPS_DB*) scrubbed from the environment.
 */
#include "daemon_privs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon.h"
#include "log.h"
#include "privs.h"
#include "proc.h"

/* The settings are parsed: OOPS_DB, OOPS_DB_PASSWORD (any OOPS_DB*) leave
 * the process environment, so no child, library or policy can read them,
 * and their values are overwritten in the initial environment block. */
void daemon_scrub_db_environment(void)
{
    extern char **environ;
    size_t n = 0;
    for (char **e = environ; e && *e; e++)
        n++;
    char **names = calloc(n + 1, sizeof *names);
    size_t k = 0;
    for (size_t i = 0; names && i < n; i++) {
        char *entry = environ[i], *eq = strchr(entry, '=');
        if (strncasecmp(entry, "OOPS_DB", 7) == 0 && eq) {
            names[k++] = strndup(entry, (size_t)(eq - entry));
            /* Overwrite the value where it lies: the initial environment
             * block is what /proc/PID/environ shows (as --db is masked in
             * argv). */
            memset(eq + 1, 'x', strlen(eq + 1));
        }
    }
    for (size_t i = 0; i < k; i++) {
        if (names[i])
            unsetenv(names[i]);
        free(names[i]);
    }
    free(names);
    /* Whatever unsetenv could not name (an entry without '='): drop it. */
    size_t out = 0;
    for (size_t i = 0; environ && environ[i]; i++)
        if (strncasecmp(environ[i], "OOPS_DB", 7) != 0)
            environ[out++] = environ[i];
    if (environ)
        environ[out] = NULL;
}

/* --run-as USER: every child (src/proc.c) runs as USER; without it, say once
 * that commands can read the credentials. Whatever the flag, no capability of
 * the daemon's reaches a child through exec (privs_clear_inheritable). */
int daemon_setup_run_as(const char *user)
{
    char err[512];
    if (privs_clear_inheritable(err, sizeof err) != 0) {
        fprintf(stderr, "oopsd: %s\n", err);
        return OOPSD_BAD_INPUT;
    }
    if (!user) {
        const char *cred = getenv("CREDENTIALS_DIRECTORY");
        if (cred && *cred)
            log_msg(LOG_WARN,
                    "commands run as oopsd's own user, so they can read its credentials in %s: "
                    "give --run-as USER (oopsd(8))",
                    cred);
        return OOPSD_OK;
    }
    privs_user u;
    if (privs_resolve(user, &u, err, sizeof err) != 0) {
        fprintf(stderr, "oopsd: %s\n", err);
        return OOPSD_BAD_INPUT;
    }
    char missing[64];
    privs_missing_caps(missing, sizeof missing);
    if (*missing) {
        fprintf(stderr,
                "oopsd: --run-as %s: this process lacks %s, needed to start commands as %s and "
                "to stop them (systemd: AmbientCapabilities=CAP_SETUID CAP_SETGID CAP_KILL)\n",
                u.name, missing, u.name);
        return OOPSD_BAD_INPUT;
    }
    proc_set_run_as(&(proc_run_as){.uid = u.uid, .gid = u.gid, .user = u.name, .home = u.home});
    log_msg(LOG_INFO, "commands run as %s (uid %u, gid %u)", u.name, (unsigned)u.uid,
            (unsigned)u.gid);
    return OOPSD_OK;
}
