/* proc: child processes on the libuv loop.  See proc.h for the contract.
 *
 * Lifecycle of a proc (all on the loop thread):
 *   spawn -> running: reading stdout/stderr, maybe writing stdin, maybe a
 *            timeout timer armed
 *   the process exits (libuv reaped it) AND both output pipes hit EOF, or
 *   the drain timer gives up on them -> close_all(): every handle is closed
 *   last close callback -> release(): on_exit, then free.
 * Calling on_exit only after all handles are closed means nothing of ours
 * is still pending in the loop when the caller learns the outcome, and the
 * free that follows cannot race with a libuv callback.
 */
#include "proc.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PROC_DEFAULT_GRACE_MS 2000
#define PROC_DEFAULT_MAX_OUTPUT ((size_t)1 << 20)
#define PROC_READ_CHUNK 65536

/* A byte sink that keeps at most max bytes: the most recent ones.  It is a
 * plain growing buffer until it reaches max, then a ring (head moves). */
typedef struct capture {
    char *buf;
    size_t alloc, head, len, max;
} capture;

typedef enum timer_phase {
    PHASE_IDLE,    /* timer not armed */
    PHASE_TIMEOUT, /* waiting for timeout_ms */
    PHASE_GRACE,   /* SIGTERM sent, SIGKILL when it fires */
    PHASE_DRAIN    /* process gone, waiting for pipe EOF */
} timer_phase;

struct proc {
    uv_process_t process;
    uv_pipe_t in, out, err;
    uv_timer_t timer;
    uv_write_t write_req;

    bool has_stdin;
    char *stdin_copy;
    size_t stdin_len;

    capture cap[2]; /* [0] stdout, [1] stderr */
    bool eof[2];

    int open_handles; /* initialised handles whose close callback is due */
    bool exited, finishing, failed, timed_out;
    timer_phase phase;
    uint64_t grace_ms;
    int64_t exit_status;
    int term_signal;

    proc_output_cb on_output;
    proc_exit_cb on_exit;
    void *ud;

    /* alloc_cb and read_cb run back to back for one stream at a time, so
     * both pipes can share this buffer. */
    char read_buf[PROC_READ_CHUNK];
};

/* ---- whom children run as ---------------------------------------------- */

static struct {
    bool on;
    uid_t uid;
    gid_t gid;
    char *env[3]; /* "HOME=...", "USER=...", "LOGNAME=..." */
} run_as;

void proc_set_run_as(const proc_run_as *who)
{
    for (int i = 0; i < 3; i++) {
        free(run_as.env[i]);
        run_as.env[i] = NULL;
    }
    run_as.on = who != NULL;
    if (!who)
        return;
    run_as.uid = who->uid;
    run_as.gid = who->gid;
    const char *names[] = {"HOME=", "USER=", "LOGNAME="};
    const char *values[] = {who->home, who->user, who->user};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(names[i]) + strlen(values[i] ? values[i] : "") + 1;
        run_as.env[i] = malloc(n);
        if (!run_as.env[i])
            abort(); /* at start: cannot run children as someone else half-way */
        snprintf(run_as.env[i], n, "%s%s", names[i], values[i] ? values[i] : "");
    }
}

/* env (or, when NULL, this process's environment) with HOME, USER and
 * LOGNAME naming the run-as user; the strings are not copied. NULL when out
 * of memory. */
static char **env_as_user(const char *const *env)
{
    extern char **environ;
    const char *const *src = env ? env : (const char *const *)environ;
    size_t n = 0;
    while (src && src[n])
        n++;
    char **out = calloc(n + 1, sizeof *out);
    for (size_t i = 0; out && i < n; i++) {
        out[i] = (char *)src[i];
        for (int k = 0; k < 3; k++) {
            size_t kl = (size_t)(strchr(run_as.env[k], '=') - run_as.env[k]) + 1;
            if (strncmp(src[i], run_as.env[k], kl) == 0)
                out[i] = run_as.env[k];
        }
    }
    return out;
}

/* ---- capture ---------------------------------------------------------- */

static bool capture_reserve(capture *c, size_t need)
{
    if (need <= c->alloc)
        return true;
    size_t n = c->alloc ? c->alloc : 4096;
    while (n < need && n <= c->max / 2)
        n *= 2;
    if (n < need || n > c->max)
        n = need > c->max ? need : c->max;
    char *b = realloc(c->buf, n);
    if (!b)
        return false;
    c->buf = b;
    c->alloc = n;
    return true;
}

/* Copies n bytes to ring position pos, wrapping at alloc. */
static void ring_write(capture *c, size_t pos, const char *d, size_t n)
{
    size_t first = c->alloc - pos;
    if (first > n)
        first = n;
    memcpy(c->buf + pos, d, first);
    if (n > first)
        memcpy(c->buf, d + first, n - first);
}

/* Appends d; when over max, the oldest bytes go.  On ENOMEM the chunk is
 * dropped: losing output is better than failing the command. */
static void capture_add(capture *c, const char *d, size_t n)
{
    if (n >= c->max) {
        if (!capture_reserve(c, c->max))
            return;
        memcpy(c->buf, d + (n - c->max), c->max);
        c->head = 0;
        c->len = c->max;
        return;
    }
    if (c->len + n > c->max) {
        /* alloc < max implies head == 0, so growing keeps the data linear */
        if (!capture_reserve(c, c->max))
            return;
        size_t drop = c->len + n - c->max;
        c->head = (c->head + drop) % c->alloc;
        c->len -= drop;
    } else if (!capture_reserve(c, c->len + n)) {
        return;
    }
    ring_write(c, (c->head + c->len) % c->alloc, d, n);
    c->len += n;
}

/* Makes the bytes contiguous from buf[0] and NUL-terminates them. */
static bool capture_linearize(capture *c)
{
    char *b = malloc(c->len + 1);
    if (!b)
        return false;
    if (c->len) {
        size_t first = c->alloc - c->head;
        if (first > c->len)
            first = c->len;
        memcpy(b, c->buf + c->head, first);
        memcpy(b + first, c->buf, c->len - first);
    }
    b[c->len] = '\0';
    free(c->buf);
    c->buf = b;
    c->alloc = c->len + 1;
    c->head = 0;
    return true;
}

/* ---- teardown --------------------------------------------------------- */

static void proc_free(proc *p)
{
    free(p->cap[0].buf);
    free(p->cap[1].buf);
    free(p->stdin_copy);
    free(p);
}

static void report(proc *p)
{
    proc_result r = {
        .exit_status = p->exit_status,
        .term_signal = p->term_signal,
        .timed_out = p->timed_out,
        .out = "",
        .err = "",
    };
    if (capture_linearize(&p->cap[0])) {
        r.out = p->cap[0].buf;
        r.out_len = p->cap[0].len;
    }
    if (capture_linearize(&p->cap[1])) {
        r.err = p->cap[1].buf;
        r.err_len = p->cap[1].len;
    }
    p->on_exit(p->ud, &r);
}

/* Runs once, when the last handle has been closed. */
static void release(proc *p)
{
    if (!p->failed && p->on_exit)
        report(p);
    proc_free(p);
}

static void on_handle_closed(uv_handle_t *h)
{
    proc *p = h->data;
    if (--p->open_handles == 0)
        release(p);
}

static void close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, on_handle_closed);
}

/* Closes everything; release() follows from the last close callback. */
static void close_all(proc *p)
{
    if (p->finishing)
        return;
    p->finishing = true;
    uv_timer_stop(&p->timer);
    close_handle((uv_handle_t *)&p->timer);
    close_handle((uv_handle_t *)&p->process);
    close_handle((uv_handle_t *)&p->out);
    close_handle((uv_handle_t *)&p->err);
    if (p->has_stdin)
        close_handle((uv_handle_t *)&p->in);
}

static void maybe_finish(proc *p)
{
    if (p->exited && p->eof[0] && p->eof[1])
        close_all(p);
}

/* ---- signals and timer ------------------------------------------------ */

/* The child leads its own group (setsid), so -pid reaches its descendants
 * unless they moved out.  Falls back to the leader alone in case it moved
 * itself to another group. */
static void signal_group(proc *p, int sig)
{
    if (kill(-p->process.pid, sig) == 0 || errno != ESRCH)
        return;
    if (!p->exited)
        (void)kill(p->process.pid, sig);
}

static void on_timer(uv_timer_t *t)
{
    proc *p = t->data;
    switch (p->phase) {
    case PHASE_TIMEOUT:
        p->timed_out = true;
        signal_group(p, SIGTERM);
        p->phase = PHASE_GRACE;
        uv_timer_start(&p->timer, on_timer, p->grace_ms, 0);
        break;
    case PHASE_GRACE:
        signal_group(p, SIGKILL);
        p->phase = PHASE_IDLE;
        break;
    case PHASE_DRAIN:
        /* A background descendant still holds stdout/stderr: stop waiting. */
        p->phase = PHASE_IDLE;
        close_all(p);
        break;
    case PHASE_IDLE: break;
    }
}

static void on_process_exit(uv_process_t *h, int64_t status, int sig)
{
    proc *p = h->data;
    p->exited = true;
    p->exit_status = status;
    p->term_signal = sig;
    uv_timer_stop(&p->timer);
    if (p->timed_out) {
        /* The leader is gone; what is left of the timed-out command would
         * otherwise outlive it, e.g. children that ignore SIGTERM.  The
         * group id cannot be reused while any member is alive. */
        (void)kill(-p->process.pid, SIGKILL);
    }
    if (p->eof[0] && p->eof[1]) {
        close_all(p);
        return;
    }
    p->phase = PHASE_DRAIN;
    uv_timer_start(&p->timer, on_timer, p->grace_ms, 0);
}

/* ---- pipes ------------------------------------------------------------ */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    (void)hint;
    proc *p = h->data;
    *buf = uv_buf_init(p->read_buf, sizeof p->read_buf);
}

static void stream_done(proc *p, int i)
{
    if (p->eof[i])
        return;
    p->eof[i] = true;
    uv_handle_t *h = (uv_handle_t *)(i == 0 ? &p->out : &p->err);
    uv_read_stop((uv_stream_t *)h);
    close_handle(h);
    maybe_finish(p);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    proc *p = s->data;
    int i = s == (uv_stream_t *)&p->err;
    if (n > 0) {
        if (p->on_output)
            p->on_output(p->ud, i + 1, buf->base, (size_t)n);
        capture_add(&p->cap[i], buf->base, (size_t)n);
        return;
    }
    if (n < 0) /* UV_EOF, or an error that ends the stream just the same */
        stream_done(p, i);
}

/* Closing our end is what gives the child EOF on stdin.  Errors (EPIPE when
 * the child exited without reading, ECANCELED on finish) need no action. */
static void on_stdin_written(uv_write_t *req, int status)
{
    (void)status;
    close_handle((uv_handle_t *)req->handle);
}

/* uv_buf_t lengths are unsigned int: stdin beyond 4 GiB is not supported
 * and the child then just sees an empty stdin. */
static void start_stdin(proc *p)
{
    uv_buf_t b = uv_buf_init(p->stdin_copy, (unsigned)p->stdin_len);
    if (p->stdin_len == 0 || p->stdin_len > UINT32_MAX ||
        uv_write(&p->write_req, (uv_stream_t *)&p->in, &b, 1, on_stdin_written) != 0)
        close_handle((uv_handle_t *)&p->in);
}

static void start_reading(proc *p)
{
    if (uv_read_start((uv_stream_t *)&p->out, on_alloc, on_read) != 0)
        stream_done(p, 0);
    if (uv_read_start((uv_stream_t *)&p->err, on_alloc, on_read) != 0)
        stream_done(p, 1);
}

/* ---- spawn ------------------------------------------------------------ */

static void set_err(char *err, size_t errlen, const char *cmd, const char *cwd, int uverr)
{
    if (!err || errlen == 0)
        return;
    struct stat st;
    /* libuv reports a failed chdir with the same errno as a failed exec;
     * name the directory so "no such file" is not blamed on the binary. */
    if (cwd && stat(cwd, &st) != 0)
        snprintf(err, errlen, "cannot run \"%s\": working directory \"%s\": %s", cmd, cwd,
                 uv_strerror(uv_translate_sys_error(errno)));
    else if (cwd && !S_ISDIR(st.st_mode))
        snprintf(err, errlen, "cannot run \"%s\": working directory \"%s\": %s", cmd, cwd,
                 uv_strerror(UV_ENOTDIR));
    else
        snprintf(err, errlen, "cannot run \"%s\": %s", cmd, uv_strerror(uverr));
}

static void init_handle(proc *p, uv_handle_t *h)
{
    h->data = p;
    p->open_handles++;
}

/* Allocates the proc and initialises the handles that exist before spawn. */
static proc *proc_new(uv_loop_t *loop, const proc_options *o)
{
    proc *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (o->stdin_data) {
        p->stdin_copy = malloc(o->stdin_len ? o->stdin_len : 1);
        if (!p->stdin_copy) {
            free(p);
            return NULL;
        }
        memcpy(p->stdin_copy, o->stdin_data, o->stdin_len);
        p->stdin_len = o->stdin_len;
        p->has_stdin = true;
    }
    p->grace_ms = o->kill_grace_ms ? o->kill_grace_ms : PROC_DEFAULT_GRACE_MS;
    p->cap[0].max = p->cap[1].max = o->max_output ? o->max_output : PROC_DEFAULT_MAX_OUTPUT;
    p->on_output = o->on_output;
    p->on_exit = o->on_exit;
    p->ud = o->ud;

    uv_timer_init(loop, &p->timer);
    init_handle(p, (uv_handle_t *)&p->timer);
    uv_pipe_init(loop, &p->out, 0);
    init_handle(p, (uv_handle_t *)&p->out);
    uv_pipe_init(loop, &p->err, 0);
    init_handle(p, (uv_handle_t *)&p->err);
    if (p->has_stdin) {
        uv_pipe_init(loop, &p->in, 0);
        init_handle(p, (uv_handle_t *)&p->in);
    }
    return p;
}

proc *proc_spawn(uv_loop_t *loop, const proc_options *o, char *err, size_t errlen)
{
    if (!o || !o->argv || !o->argv[0]) {
        if (err && errlen)
            snprintf(err, errlen, "cannot run a command: empty argv");
        return NULL;
    }
    char **env = run_as.on ? env_as_user(o->env) : NULL;
    proc *p = run_as.on && !env ? NULL : proc_new(loop, o);
    if (!p) {
        free(env);
        set_err(err, errlen, o->argv[0], NULL, UV_ENOMEM);
        return NULL;
    }

    uv_stdio_container_t stdio[3];
    stdio[0].flags = p->has_stdin ? (UV_CREATE_PIPE | UV_READABLE_PIPE) : UV_IGNORE;
    stdio[0].data.stream = (uv_stream_t *)&p->in;
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&p->out;
    stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[2].data.stream = (uv_stream_t *)&p->err;

    uv_process_options_t uo = {
        .exit_cb = on_process_exit,
        .file = o->argv[0],
        .args = (char **)o->argv, /* libuv does not write through these */
        .env = (char **)o->env,
        .cwd = o->cwd,
        .flags = UV_PROCESS_DETACHED, /* setsid: own session and process group */
        .stdio_count = 3,
        .stdio = stdio,
    };
    if (run_as.on) {
        uo.flags |= UV_PROCESS_SETUID | UV_PROCESS_SETGID;
        uo.uid = run_as.uid;
        uo.gid = run_as.gid;
        uo.env = env;
    }
    int rc = uv_spawn(loop, &p->process, &uo);
    free(env);
    /* Even on failure libuv has initialised the process handle (and may
     * have opened the pipes), so it is closed like the rest. */
    init_handle(p, (uv_handle_t *)&p->process);
    if (rc != 0) {
        set_err(err, errlen, o->argv[0], o->cwd, rc);
        p->failed = true;
        p->exited = true;
        close_all(p);
        return NULL;
    }

    if (p->has_stdin)
        start_stdin(p);
    start_reading(p);
    if (o->timeout_ms) {
        p->phase = PHASE_TIMEOUT;
        uv_update_time(loop);
        uv_timer_start(&p->timer, on_timer, o->timeout_ms, 0);
    }
    return p;
}

int proc_pid(const proc *p) { return p->process.pid; }

void proc_kill(proc *p, int sig)
{
    if (p->exited || p->finishing)
        return;
    signal_group(p, sig);
}
