/*
 * daemon_notify — systemd's notify protocol and watchdog: the datagrams to
 * $NOTIFY_SOCKET (READY=, RELOADING=, STOPPING=, STATUS=) and the loop timer
 * that sends WATCHDOG=1.
 */
#include "daemon_notify.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>
#if OOPS_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "log.h"

/* sd_notify(3): one datagram to $NOTIFY_SOCKET; nothing at all without it. */
void daemon_notify(const char *fmt, ...)
{
#if OOPS_HAVE_SYSTEMD
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sd_notify(0, msg);
#else
    (void)fmt;
#endif
}

/* s as one line of at most n - 1 bytes for STATUS=: its first line, control
 * characters as '?' (a policy error may quote anything of a value). */
const char *daemon_one_line(char *out, size_t n, const char *s)
{
    size_t k = 0;
    for (; s && *s && *s != '\n' && k + 1 < n; s++)
        out[k++] = (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s;
    out[k] = '\0';
    return out;
}

/* STATUS=: which policy runs, and why the last reload was refused (its first
 * error only; every error is in the log and /healthz). */
void daemon_notify_status(server_state *d, const char *prefix)
{
    char dir[256], why[256] = "";
    daemon_one_line(dir, sizeof dir, d->o.policies);
    if (d->ctx.policy_error)
        daemon_one_line(why, sizeof why, d->ctx.policy_error);
    bool more = d->ctx.policy_error && strchr(d->ctx.policy_error, '\n');
    if (d->ctx.policy_error)
        daemon_notify("%sSTATUS=reload refused, running policy %s (load %d) from %s: %s%s", prefix,
                      d->policy_hash, d->ctx.policy_version, dir, why,
                      more ? " (more in the log)" : "");
    else
        daemon_notify("%sSTATUS=running policy %s (load %d) from %s", prefix, d->policy_hash,
                      d->ctx.policy_version, dir);
}

static void on_watchdog(uv_timer_t *t)
{
    (void)t;
    daemon_notify("WATCHDOG=1");
}

/* When systemd asks for pings (WATCHDOG_USEC, WATCHDOG_PID naming us or
 * unset), a loop timer sends them at half the interval: a loop that stops
 * turning stops them, and systemd restarts the service. The variables are
 * removed from the environment (no child inherits them). */
void daemon_start_watchdog(server_state *d)
{
    uint64_t usec = 0;
#if OOPS_HAVE_SYSTEMD
    if (sd_watchdog_enabled(1, &usec) <= 0)
        usec = 0;
#endif
    uv_timer_init(&d->loop, &d->watchdog);
    d->watchdog.data = d;
    if (!usec)
        return;
    uint64_t every = usec / 2000 ? usec / 2000 : 1;
    uv_timer_start(&d->watchdog, on_watchdog, every, every);
    log_msg(LOG_INFO, "systemd watchdog: a ping every %llu ms", (unsigned long long)every);
}
