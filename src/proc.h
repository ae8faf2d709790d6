/* proc: run a child process from the daemon's libuv loop.
 *
 * The command is an argv vector executed directly (execvp); no shell is
 * ever involved, so arguments reach the child byte for byte.  stdout and
 * stderr are captured (tail-capped), stdin can be fed from a buffer, a
 * timeout kills the command, and one callback reports the outcome.
 *
 * Process group: every child is started as the leader of a new session
 * (setsid, libuv's UV_PROCESS_DETACHED), hence of its own process group.
 * Timeouts and proc_kill() signal the whole group, so the children of a
 * shell script die with it.  The new session also means the child has no
 * controlling terminal: a tool that would prompt on /dev/tty fails instead
 * of hanging the daemon.  The flip side: children do NOT die automatically
 * when the daemon dies (they never would with plain fork either); the
 * daemon should proc_kill() what is still running when it shuts down.
 *
 * Requirement on the daemon: SIGPIPE must be ignored (signal(SIGPIPE,
 * SIG_IGN)), because writing stdin_data to a child that exited without
 * reading it would otherwise kill the daemon.  proc does not change the
 * disposition itself since it is process-wide state.  Children start with
 * default dispositions (libuv resets them before exec).
 *
 * Threading: everything here runs on the loop's thread only.
 */
#ifndef OOPS_PROC_H
#define OOPS_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

typedef struct proc proc;

typedef struct proc_result {
    int64_t exit_status; /* exit code when the process exited (0 when a signal ended it) */
    int term_signal;     /* signal that ended it, 0 if none */
    bool timed_out;      /* the timeout elapsed while it ran and proc sent SIGTERM/SIGKILL */
    const char *out;
    size_t out_len; /* captured stdout (NUL-terminated, valid during the callback) */
    const char *err;
    size_t err_len; /* captured stderr (same) */
} proc_result;

/* Called exactly once per successful proc_spawn(); r and its buffers are
 * owned by proc and valid only during the call. */
typedef void (*proc_exit_cb)(void *ud, const proc_result *r);

/* Optional streaming: called for every chunk read, stream is 1 (stdout) or
 * 2 (stderr); data is valid only during the call and is not NUL-terminated.
 * Every byte is streamed, even beyond max_output. */
typedef void (*proc_output_cb)(void *ud, int stream, const char *data, size_t len);

typedef struct proc_options {
    const char *const
        *argv; /* argv[0] is looked up in PATH (the child's: see env); NULL-terminated */
    const char *const *env; /* NULL = inherit; else NULL-terminated "K=V" list that REPLACES the
                               environment (without PATH there, execvp searches /bin:/usr/bin) */
    const char *cwd;        /* NULL = inherit */
    const char *stdin_data;
    size_t stdin_len;         /* copied; written then stdin closed.
                                 NULL = stdin is /dev/null */
    uint64_t timeout_ms;      /* 0 = none; on expiry SIGTERM to the group, then SIGKILL after
                                 kill_grace_ms */
    uint64_t kill_grace_ms;   /* default 2000 when 0.  Also bounds how long, after the process
                                 exited, proc waits for EOF on stdout/stderr that a leftover
                                 background descendant still holds open; then the pipes are
                                 closed (the descendant is left alone) and on_exit is called */
    size_t max_output;        /* cap per stream, keeps the LAST bytes beyond it (tail),
                                 default 1 MiB when 0 */
    proc_output_cb on_output; /* may be NULL */
    proc_exit_cb on_exit;     /* may be NULL (fire and forget) */
    void *ud;                 /* passed to both callbacks */
} proc_options;

/* Whom children run as (oopsd --run-as, src/privs.h). */
typedef struct proc_run_as {
    uid_t uid;
    gid_t gid;        /* the only group: supplementary groups are dropped */
    const char *user; /* USER and LOGNAME */
    const char *home; /* HOME */
} proc_run_as;

/* From now on every child proc_spawn starts runs as who (copied): libuv's
 * UV_PROCESS_SETGID/SETUID in the child before exec (setgroups(0), setgid,
 * setuid), so the daemon needs CAP_SETUID and CAP_SETGID (and CAP_KILL for
 * proc_kill and timeouts to reach another user's processes). The child's
 * HOME, USER and LOGNAME, where its environment has them, name that user.
 * NULL: children run as the daemon (the default). Process-wide: set it at
 * start, before any child; every path to a child goes through proc_spawn,
 * so none can forget it. */
void proc_set_run_as(const proc_run_as *who);

/* Starts argv as a child of the loop.  The options and everything they point
 * to may be freed as soon as this returns (stdin_data is copied).
 *
 * Returns NULL, and writes a one-line message to err (if err is non-NULL and
 * errlen > 0), when the process could not be started, e.g.
 *   cannot run "nosuchcmd": no such file or directory
 * A missing binary, a non-executable file or a bad cwd is detected here,
 * synchronously; on_exit is then never called.  (Some internal handles still
 * need one loop iteration to be released, so keep running the loop.)
 *
 * On success, on_exit is called exactly once, later, on the loop thread,
 * after the process ended AND stdout/stderr reached EOF (or were given up on,
 * see kill_grace_ms).  The proc owns itself: it frees itself after on_exit
 * returns, and the pointer must not be used after that.  There is no free
 * function; to cancel, proc_kill() and let on_exit arrive.  Do not close its
 * handles from outside (e.g. with uv_walk), or it leaks. */
proc *proc_spawn(uv_loop_t *loop, const proc_options *o, char *err, size_t errlen);

/* Process id of the child, which is also its process group id. */
int proc_pid(const proc *p);

/* Sends sig (e.g. SIGTERM, SIGKILL) to the child's process group.  Ignored
 * once the process has exited (also inside on_exit).  Does not escalate by
 * itself: send SIGKILL later if SIGTERM is not enough. */
void proc_kill(proc *p, int sig);

#endif
