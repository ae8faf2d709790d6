/* Unit tests for proc: each test runs real children on a real uv loop until
 * the loop has nothing left, then checks that the loop closes cleanly (no
 * handle of ours left behind). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"

/* What the callbacks saw; one per spawned proc. */
typedef struct outcome {
    int exit_calls;
    int64_t exit_status;
    int term_signal;
    bool timed_out;
    char *out, *err;
    size_t out_len, err_len;
    char *streamed[2]; /* on_output bytes, per stream */
    size_t streamed_len[2];
    proc *self; /* for proc_kill inside on_exit */
} outcome;

static char *dup_bytes(const char *d, size_t n)
{
    char *b = malloc(n + 1);
    assert_non_null(b);
    memcpy(b, d, n);
    b[n] = '\0';
    return b;
}

static void on_exit_cb(void *ud, const proc_result *r)
{
    outcome *oc = ud;
    oc->exit_calls++;
    oc->exit_status = r->exit_status;
    oc->term_signal = r->term_signal;
    oc->timed_out = r->timed_out;
    assert_int_equal(r->out[r->out_len], '\0');
    assert_int_equal(r->err[r->err_len], '\0');
    oc->out = dup_bytes(r->out, r->out_len);
    oc->out_len = r->out_len;
    oc->err = dup_bytes(r->err, r->err_len);
    oc->err_len = r->err_len;
    if (oc->self)
        proc_kill(oc->self, SIGKILL); /* must be a no-op now */
}

static void on_output_cb(void *ud, int stream, const char *data, size_t len)
{
    outcome *oc = ud;
    assert_true(stream == 1 || stream == 2);
    int i = stream - 1;
    oc->streamed[i] = realloc(oc->streamed[i], oc->streamed_len[i] + len);
    assert_non_null(oc->streamed[i]);
    memcpy(oc->streamed[i] + oc->streamed_len[i], data, len);
    oc->streamed_len[i] += len;
}

static void outcome_free(outcome *oc)
{
    free(oc->out);
    free(oc->err);
    free(oc->streamed[0]);
    free(oc->streamed[1]);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void run_loop_to_end(uv_loop_t *loop)
{
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

/* Spawns o (callbacks and ud filled in here), runs the loop to completion. */
static void run(proc_options *o, outcome *oc)
{
    uv_loop_t loop;
    char err[256];
    assert_int_equal(uv_loop_init(&loop), 0);
    memset(oc, 0, sizeof *oc);
    o->on_exit = on_exit_cb;
    o->ud = oc;
    proc *p = proc_spawn(&loop, o, err, sizeof err);
    if (!p)
        fail_msg("proc_spawn: %s", err);
    assert_true(proc_pid(p) > 0);
    oc->self = p;
    run_loop_to_end(&loop);
    assert_int_equal(oc->exit_calls, 1);
}

static void test_exit_code_and_stdout(void **state)
{
    (void)state;
    const char *argv[] = {"sh", "-c", "echo hi; exit 3", NULL};
    proc_options o = {.argv = argv};
    outcome oc;
    run(&o, &oc);
    assert_int_equal(oc.exit_status, 3);
    assert_int_equal(oc.term_signal, 0);
    assert_false(oc.timed_out);
    assert_string_equal(oc.out, "hi\n");
    assert_int_equal(oc.out_len, 3);
    assert_int_equal(oc.err_len, 0);
    outcome_free(&oc);
}

static void test_stderr_separate(void **state)
{
    (void)state;
    const char *argv[] = {"sh", "-c", "echo to-out; echo to-err >&2; echo more-out", NULL};
    proc_options o = {.argv = argv};
    outcome oc;
    run(&o, &oc);
    assert_int_equal(oc.exit_status, 0);
    assert_string_equal(oc.out, "to-out\nmore-out\n");
    assert_string_equal(oc.err, "to-err\n");
    outcome_free(&oc);
}

static void test_stdin_reaches_child(void **state)
{
    (void)state;
    static const char data[] = "line one\n\0binary\xff tail";
    const char *argv[] = {"cat", NULL};
    proc_options o = {.argv = argv, .stdin_data = data, .stdin_len = sizeof data - 1};
    outcome oc;
    run(&o, &oc);
    assert_int_equal(oc.exit_status, 0);
    assert_int_equal(oc.out_len, sizeof data - 1);
    assert_memory_equal(oc.out, data, sizeof data - 1);
    outcome_free(&oc);
}

/* More than any socket buffer: the write completes over many iterations. */
static void test_large_stdin(void **state)
{
    (void)state;
    size_t n = 3u << 20;
    char *data = malloc(n);
    assert_non_null(data);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)(i * 7 + i / 251);
    const char *argv[] = {"cat", NULL};
    proc_options o = {.argv = argv, .stdin_data = data, .stdin_len = n, .max_output = n};
    outcome oc;
    run(&o, &oc);
    free(data); /* late on purpose: proc copied it; compare below regenerates */
    assert_int_equal(oc.out_len, n);
    for (size_t i = 0; i < n; i++)
        if (oc.out[i] != (char)(i * 7 + i / 251))
            fail_msg("byte %zu differs", i);
    outcome_free(&oc);
}

/* The child exits without reading; the write fails with EPIPE (SIGPIPE is
 * ignored in main, as the daemon must). */
static void test_stdin_not_read(void **state)
{
    (void)state;
    size_t n = 4u << 20;
    char *data = calloc(1, n);
    assert_non_null(data);
    const char *argv[] = {"true", NULL};
    proc_options o = {.argv = argv, .stdin_data = data, .stdin_len = n};
    outcome oc;
    run(&o, &oc);
    free(data);
    assert_int_equal(oc.exit_status, 0);
    outcome_free(&oc);
}

static void test_no_stdin_is_empty(void **state)
{
    (void)state;
    const char *argv[] = {"cat", NULL};
    proc_options o = {.argv = argv};
    outcome oc;
    run(&o, &oc);
    assert_int_equal(oc.exit_status, 0);
    assert_int_equal(oc.out_len, 0);
    outcome_free(&oc);
}

static void test_argument_is_literal(void **state)
{
    (void)state;
    char path[128], arg[512];
    snprintf(path, sizeof path, "/tmp/oops_proc_injected_%ld", (long)getpid());
    unlink(path);
    snprintf(arg, sizeof arg, "$(touch %s); touch %s; `touch %s` | & > '\" x", path, path, path);
    const char *argv[] = {"printf", "%s", arg, NULL};
    proc_options o = {.argv = argv};
    outcome oc;
    run(&o, &oc);
    assert_int_equal(oc.exit_status, 0);
    assert_string_equal(oc.out, arg);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(errno, ENOENT);
    outcome_free(&oc);
}

static void test_env_replaced(void **state)
{
    (void)state;
    setenv("OOPS_PROC_PARENT_ONLY", "1", 1);
    const char *env[] = {"FOO=bar baz", "PATH=/usr/bin:/bin", NULL};
    const char *argv[] = {"env", NULL}; /* found via the replacement PATH */
    proc_options o = {.argv = argv, .env = env};
    outcome oc;
    run(&o, &oc);
    assert_int_equal(oc.exit_status, 0);
    assert_string_equal(oc.out, "FOO=bar baz\nPATH=/usr/bin:/bin\n");
    outcome_free(&oc);
}

static void test_env_inherited(void **state)
{
    (void)state;
    setenv("OOPS_PROC_PARENT_ONLY", "inherited", 1);
    const char *argv[] = {"sh", "-c", "printf %s \"$OOPS_PROC_PARENT_ONLY\"", NULL};
    proc_options o = {.argv = argv};
    outcome oc;
    run(&o, &oc);
    assert_string_equal(oc.out, "inherited");
    outcome_free(&oc);
}

static void test_cwd(void **state)
{
    (void)state;
    const char *argv[] = {"pwd", NULL};
    proc_options o = {.argv = argv, .cwd = "/tmp"};
    outcome oc;
    run(&o, &oc);
    assert_string_equal(oc.out, "/tmp\n");
    outcome_free(&oc);
}

/* True while pid exists and is not a zombie (zombies wait for a reaper that
 * may be slow in a container; they are dead for our purpose). */
static bool alive(long pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

static void assert_dies_soon(long pid)
{
    for (int i = 0; i < 200 && alive(pid); i++)
        usleep(10000);
    assert_false(alive(pid));
}

static void test_timeout_kills_group(void **state)
{
    (void)state;
    const char *argv[] = {"sh", "-c", "sleep 30 & echo $!; wait", NULL};
    proc_options o = {.argv = argv, .timeout_ms = 300};
    outcome oc;
    double t0 = now_s();
    run(&o, &oc);
    double took = now_s() - t0;
    assert_true(took < 5.0);
    assert_true(oc.timed_out);
    assert_int_equal(oc.term_signal, SIGTERM);
    long grandchild = strtol(oc.out, NULL, 10);
    assert_true(grandchild > 0);
    assert_dies_soon(grandchild);
    outcome_free(&oc);
}

/* A command ignoring SIGTERM gets SIGKILL after kill_grace_ms. */
static void test_timeout_escalates_to_sigkill(void **state)
{
    (void)state;
    const char *argv[] = {"sh", "-c", "trap '' TERM; sleep 30 & echo $!; wait; wait", NULL};
    proc_options o = {.argv = argv, .timeout_ms = 200, .kill_grace_ms = 300};
    outcome oc;
    double t0 = now_s();
    run(&o, &oc);
    assert_true(now_s() - t0 < 5.0);
    assert_true(oc.timed_out);
    assert_int_equal(oc.term_signal, SIGKILL);
    long grandchild = strtol(oc.out, NULL, 10);
    assert_true(grandchild > 0);
    assert_dies_soon(grandchild);
    outcome_free(&oc);
}

typedef struct killer {
    uv_timer_t timer;
    proc *p;
} killer;

static void on_kill_timer(uv_timer_t *t)
{
    killer *k = t->data;
    proc_kill(k->p, SIGTERM);
    uv_close((uv_handle_t *)t, NULL);
}

static void test_proc_kill(void **state)
{
    (void)state;
    uv_loop_t loop;
    char err[256];
    outcome oc = {0};
    assert_int_equal(uv_loop_init(&loop), 0);
    const char *argv[] = {"sh", "-c", "sleep 30 & echo $!; wait", NULL};
    proc_options o = {.argv = argv, .on_exit = on_exit_cb, .ud = &oc};
    killer k;
    k.p = proc_spawn(&loop, &o, err, sizeof err);
    assert_non_null(k.p);
    oc.self = k.p;
    uv_timer_init(&loop, &k.timer);
    k.timer.data = &k;
    uv_timer_start(&k.timer, on_kill_timer, 100, 0);
    double t0 = now_s();
    run_loop_to_end(&loop);
    assert_true(now_s() - t0 < 5.0);
    assert_int_equal(oc.exit_calls, 1);
    assert_false(oc.timed_out);
    assert_int_equal(oc.term_signal, SIGTERM);
    assert_dies_soon(strtol(oc.out, NULL, 10));
    outcome_free(&oc);
}

static void expect_spawn_error(const proc_options *o, const char *want)
{
    uv_loop_t loop;
    char err[256] = "";
    assert_int_equal(uv_loop_init(&loop), 0);
    proc *p = proc_spawn(&loop, o, err, sizeof err);
    assert_null(p);
    assert_string_equal(err, want);
    run_loop_to_end(&loop); /* releases the handles; on_exit must not run */
}

static void test_missing_binary(void **state)
{
    (void)state;
    outcome oc = {0};
    const char *argv[] = {"oops-no-such-cmd", "x", NULL};
    proc_options o = {
        .argv = argv, .on_exit = on_exit_cb, .ud = &oc, .stdin_data = "x", .stdin_len = 1};
    expect_spawn_error(&o, "cannot run \"oops-no-such-cmd\": no such file or directory");
    const char *abs[] = {"/nonexistent/bin/tool", NULL};
    o.argv = abs;
    expect_spawn_error(&o, "cannot run \"/nonexistent/bin/tool\": no such file or directory");
    const char *notexec[] = {"/etc/passwd", NULL};
    o.argv = notexec;
    expect_spawn_error(&o, "cannot run \"/etc/passwd\": permission denied");
    const char *empty[] = {NULL};
    o.argv = empty;
    expect_spawn_error(&o, "cannot run a command: empty argv");
    assert_int_equal(oc.exit_calls, 0);
}

static void test_bad_cwd(void **state)
{
    (void)state;
    const char *argv[] = {"true", NULL};
    proc_options o = {.argv = argv, .cwd = "/nonexistent-dir"};
    expect_spawn_error(&o, "cannot run \"true\": working directory \"/nonexistent-dir\": "
                           "no such file or directory");
}

/* seq 1 N output, generated here for comparison. */
static char *seq_text(int n, size_t *len)
{
    size_t cap = (size_t)n * 8 + 1, used = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    for (int i = 1; i <= n; i++)
        used += (size_t)snprintf(s + used, cap - used, "%d\n", i);
    *len = used;
    return s;
}

static void check_tail(size_t max_output)
{
    size_t full_len;
    char *full = seq_text(200000, &full_len);
    const char *argv[] = {"seq", "1", "200000", NULL};
    proc_options o = {.argv = argv, .max_output = max_output, .on_output = on_output_cb};
    outcome oc;
    run(&o, &oc);
    assert_int_equal(oc.exit_status, 0);
    assert_int_equal(oc.out_len, max_output);
    assert_memory_equal(oc.out, full + full_len - max_output, max_output);
    assert_int_equal(oc.streamed_len[0], full_len);
    assert_memory_equal(oc.streamed[0], full, full_len);
    assert_int_equal(oc.streamed_len[1], 0);
    free(full);
    outcome_free(&oc);
}

static void test_output_tail_and_streaming(void **state)
{
    (void)state;
    check_tail(1);
    check_tail(1000);
    check_tail(65536);
    check_tail(100003);
}

static void test_streaming_both_streams(void **state)
{
    (void)state;
    const char *argv[] = {"sh", "-c", "printf abc; printf XYZ >&2; printf def", NULL};
    proc_options o = {.argv = argv, .on_output = on_output_cb};
    outcome oc;
    run(&o, &oc);
    assert_int_equal(oc.streamed_len[0], 6);
    assert_memory_equal(oc.streamed[0], "abcdef", 6);
    assert_int_equal(oc.streamed_len[1], 3);
    assert_memory_equal(oc.streamed[1], "XYZ", 3);
    assert_string_equal(oc.out, "abcdef");
    assert_string_equal(oc.err, "XYZ");
    outcome_free(&oc);
}

/* The shell exits at once but a background child keeps stdout open: on_exit
 * still comes, after kill_grace_ms, and the child is left alone. */
static void test_background_child_holding_stdout(void **state)
{
    (void)state;
    const char *argv[] = {"sh", "-c", "sleep 20 & echo $!", NULL};
    proc_options o = {.argv = argv, .kill_grace_ms = 300};
    outcome oc;
    double t0 = now_s();
    run(&o, &oc);
    assert_true(now_s() - t0 < 5.0);
    assert_false(oc.timed_out);
    assert_int_equal(oc.exit_status, 0);
    long bg = strtol(oc.out, NULL, 10);
    assert_true(bg > 0);
    assert_true(alive(bg));
    kill((pid_t)bg, SIGKILL);
    outcome_free(&oc);
}

/* The child gets fds 0, 1 and 2 and nothing of ours: any other fd it has
 * must be one this test process itself inherited without FD_CLOEXEC (a
 * test harness may pass some down). */
static void test_child_fds(void **state)
{
    (void)state;
    const char *argv[] = {"sh", "-c", "ls /proc/$$/fd", NULL};
    proc_options o = {.argv = argv, .stdin_data = "", .stdin_len = 0};
    outcome oc;
    run(&o, &oc);
    assert_int_equal(oc.exit_status, 0);
    int seen_std = 0;
    for (char *s = oc.out, *end; *s; s = end + 1) {
        long fd = strtol(s, &end, 10);
        assert_true(end != s && *end == '\n');
        if (fd <= 2) {
            seen_std++;
            continue;
        }
        int flags = fcntl((int)fd, F_GETFD);
        if (flags == -1 || (flags & FD_CLOEXEC))
            fail_msg("child has fd %ld that is not an inherited fd of ours", fd);
    }
    assert_int_equal(seen_std, 3);
    outcome_free(&oc);
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* Successes, failures, timeouts: no fd of ours stays open afterwards. */
static void test_no_fd_leak(void **state)
{
    (void)state;
    outcome oc;
    const char *ok[] = {"sh", "-c", "echo x; echo y >&2", NULL};
    proc_options o = {.argv = ok, .stdin_data = "in", .stdin_len = 2};
    run(&o, &oc); /* warm-up: libuv opens process-wide fds on first use */
    outcome_free(&oc);

    int before = count_fds();
    for (int i = 0; i < 5; i++) {
        run(&o, &oc);
        outcome_free(&oc);
    }
    const char *slow[] = {"sleep", "30", NULL};
    proc_options t = {.argv = slow, .timeout_ms = 50};
    run(&t, &oc);
    outcome_free(&oc);
    const char *missing[] = {"oops-no-such-cmd", NULL};
    proc_options m = {.argv = missing, .stdin_data = "x", .stdin_len = 1};
    expect_spawn_error(&m, "cannot run \"oops-no-such-cmd\": no such file or directory");
    assert_int_equal(count_fds(), before);
}

/* Several procs on one loop, finishing in a different order than started. */
static void test_concurrent(void **state)
{
    (void)state;
    uv_loop_t loop;
    char err[256];
    outcome oc[3] = {{0}};
    const char *a0[] = {"sh", "-c", "sleep 0.3; echo a", NULL};
    const char *a1[] = {"sh", "-c", "echo b", NULL};
    const char *a2[] = {"sh", "-c", "sleep 0.1; echo c", NULL};
    const char *const *argvs[] = {a0, a1, a2};
    assert_int_equal(uv_loop_init(&loop), 0);
    for (int i = 0; i < 3; i++) {
        proc_options o = {.argv = argvs[i], .on_exit = on_exit_cb, .ud = &oc[i]};
        assert_non_null(proc_spawn(&loop, &o, err, sizeof err));
    }
    run_loop_to_end(&loop);
    const char *want[] = {"a\n", "b\n", "c\n"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(oc[i].exit_calls, 1);
        assert_string_equal(oc[i].out, want[i]);
        outcome_free(&oc[i]);
    }
}

/* proc_set_run_as: every child runs as that user (root only: the CI runs as
 * root), its HOME/USER/LOGNAME naming it where its environment has them, no
 * supplementary group, no capability; NULL goes back to the daemon's user. */
static void test_run_as(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    proc_set_run_as(
        &(proc_run_as){.uid = 65534, .gid = 65534, .user = "nobody", .home = "/nonexistent"});
    const char *env[] = {"HOME=/root", "USER=root", "PATH=/usr/bin:/bin", NULL};
    const char *argv[] = {"sh", "-c",
                          "echo \"$(id -u) $(id -g) $(id -G) $HOME $USER ${LOGNAME-unset}\"; "
                          "grep -E '^Cap(Prm|Eff|Amb):' /proc/self/status | tr -d ' \t'",
                          NULL};
    proc_options o = {.argv = argv, .env = env};
    outcome oc;
    run(&o, &oc);
    assert_int_equal(oc.exit_status, 0);
    assert_string_equal(oc.out, "65534 65534 65534 /nonexistent nobody unset\n"
                                "CapPrm:0000000000000000\nCapEff:0000000000000000\n"
                                "CapAmb:0000000000000000\n");
    outcome_free(&oc);
    /* A timeout still kills it (a signal to another user's process group). */
    const char *sleeper[] = {"sleep", "30", NULL};
    proc_options t = {.argv = sleeper, .timeout_ms = 100};
    run(&t, &oc);
    assert_true(oc.timed_out);
    assert_int_equal(oc.term_signal, SIGTERM);
    outcome_free(&oc);
    proc_set_run_as(NULL);
    const char *me[] = {"id", "-u", NULL};
    proc_options m = {.argv = me};
    run(&m, &oc);
    assert_string_equal(oc.out, "0\n");
    outcome_free(&oc);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as the daemon does; see proc.h */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_code_and_stdout),
        cmocka_unit_test(test_stderr_separate),
        cmocka_unit_test(test_stdin_reaches_child),
        cmocka_unit_test(test_large_stdin),
        cmocka_unit_test(test_stdin_not_read),
        cmocka_unit_test(test_no_stdin_is_empty),
        cmocka_unit_test(test_argument_is_literal),
        cmocka_unit_test(test_env_replaced),
        cmocka_unit_test(test_env_inherited),
        cmocka_unit_test(test_cwd),
        cmocka_unit_test(test_timeout_kills_group),
        cmocka_unit_test(test_timeout_escalates_to_sigkill),
        cmocka_unit_test(test_proc_kill),
        cmocka_unit_test(test_missing_binary),
        cmocka_unit_test(test_bad_cwd),
        cmocka_unit_test(test_output_tail_and_streaming),
        cmocka_unit_test(test_streaming_both_streams),
        cmocka_unit_test(test_background_child_holding_stdout),
        cmocka_unit_test(test_child_fds),
        cmocka_unit_test(test_no_fd_leak),
        cmocka_unit_test(test_concurrent),
        cmocka_unit_test(test_run_as),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
