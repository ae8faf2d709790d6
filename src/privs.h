/*
 * privs — whom the daemon's children run as (oopsd --run-as USER) and what
 * they may inherit of its privileges. Pure Linux: getpwnam, prctl, capget
 * and capset through <linux/capability.h> (no libcap).
 *
 * Why: every command (build, deploy, health, restart, notify) ran as the
 * daemon's user, so it could read what oopsd reads — the database password
 * credential, the HTTP token. With --run-as the daemon keeps CAP_SETUID,
 * CAP_SETGID (to start children as USER: proc_set_run_as, src/proc.h) and
 * CAP_KILL (kill(2) needs it to signal another user's processes: timeouts,
 * stop), and a child, after exec, has no capability at all.
 */
#ifndef OOPS_PRIVS_H
#define OOPS_PRIVS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct privs_user {
    uid_t uid;
    gid_t gid; /* the user's primary group: the only group a child gets */
    char name[64];
    char home[512];
} privs_user;

/*
 * Looks `name` up (the passwd database). 0, or -1 with a one-line message:
 *   --run-as NAME: no such user
 *   --run-as NAME: must be an unprivileged user, not uid 0
 *   --run-as NAME: that is the user oopsd runs as (uid N): its commands could read what oopsd reads
 */
int privs_resolve(const char *name, privs_user *out, char *err, size_t errlen);

/*
 * Clears this process's ambient and inheritable capability sets, so that no
 * child keeps a capability through execve (an ambient capability survives
 * it, and a non-root to non-root setuid keeps the permitted set). The
 * effective and permitted sets stay. 0, or -1 with a message.
 */
int privs_clear_inheritable(char *err, size_t errlen);

/*
 * What --run-as needs that this process's effective set lacks, as a list
 * ("CAP_SETUID CAP_KILL"); "" when nothing is missing.
 */
void privs_missing_caps(char *out, size_t outlen);

#endif
