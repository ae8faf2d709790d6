#include "privs.h"

#include <errno.h>
#include <linux/capability.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int privs_resolve(const char *name, privs_user *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    errno = 0;
    struct passwd *pw = name && *name ? getpwnam(name) : NULL;
    if (!pw) {
        snprintf(err, errlen, "--run-as %.64s: no such user%s%s", name ? name : "",
                 errno ? ": " : "", errno ? strerror(errno) : "");
        return -1;
    }
    if (pw->pw_uid == 0) {
        snprintf(err, errlen, "--run-as %.64s: must be an unprivileged user, not uid 0", name);
        return -1;
    }
    if (pw->pw_uid == geteuid()) {
        snprintf(err, errlen,
                 "--run-as %.64s: that is the user oopsd runs as (uid %u): its commands could "
                 "read what oopsd reads",
                 name, (unsigned)pw->pw_uid);
        return -1;
    }
    if (strlen(pw->pw_name) >= sizeof out->name || strlen(pw->pw_dir) >= sizeof out->home) {
        snprintf(err, errlen, "--run-as %.64s: its name or home directory is too long", name);
        return -1;
    }
    out->uid = pw->pw_uid;
    out->gid = pw->pw_gid;
    snprintf(out->name, sizeof out->name, "%s", pw->pw_name);
    snprintf(out->home, sizeof out->home, "%s", pw->pw_dir);
    return 0;
}

static int caps_get(struct __user_cap_data_struct d[2])
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    return (int)syscall(SYS_capget, &h, d);
}

int privs_clear_inheritable(char *err, size_t errlen)
{
    /* EINVAL: a kernel without ambient capabilities (before 4.3) has none to clear. */
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
        snprintf(err, errlen, "cannot clear the ambient capabilities: %s", strerror(errno));
        return -1;
    }
    struct __user_cap_data_struct d[2];
    if (caps_get(d) != 0) {
        snprintf(err, errlen, "cannot read the capabilities: %s", strerror(errno));
        return -1;
    }
    if (!d[0].inheritable && !d[1].inheritable)
        return 0;
    d[0].inheritable = d[1].inheritable = 0;
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    if (syscall(SYS_capset, &h, d) != 0) {
        snprintf(err, errlen, "cannot clear the inheritable capabilities: %s", strerror(errno));
        return -1;
    }
    return 0;
}

void privs_missing_caps(char *out, size_t outlen)
{
    static const struct {
        int cap;
        const char *name;
    } need[] = {{CAP_SETUID, "CAP_SETUID"}, {CAP_SETGID, "CAP_SETGID"}, {CAP_KILL, "CAP_KILL"}};
    struct __user_cap_data_struct d[2] = {{0}};
    bool known = caps_get(d) == 0;
    size_t k = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof need / sizeof *need; i++) {
        int c = need[i].cap;
        if (known && (d[c / 32].effective & (1u << (c % 32))))
            continue;
        int n = snprintf(out + k, outlen - k, "%s%s", k ? " " : "", need[i].name);
        if (n < 0 || (size_t)n >= outlen - k)
            break;
        k += (size_t)n;
    }
}
