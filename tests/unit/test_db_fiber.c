/* Fibers (db_fiber.c): their stacks and the guard below each; work on the thread pool. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <mysql.h>
#include <uv.h>

#include "db_fiber.h"

/* Frames of 1 KiB, each written whole, until `depth` bytes below `top`. */
__attribute__((noinline)) static int recurse(uintptr_t top, size_t depth)
{
    volatile char buf[1024];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (char)i;
    if (top - (uintptr_t)buf < depth)
        return recurse(top, depth) + buf[0];
    return buf[0];
}

/* ---- a fiber may use the stack it is promised --------------------------- */

static bool used_whole_stack;

static void use_stack(void *arg)
{
    (void)arg;
    char top;
    recurse((uintptr_t)&top, db_fiber_stack_size() - 32 * 1024);
    used_whole_stack = true;
}

static void a_fiber_may_use_the_whole_stack_it_is_promised(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    assert_int_equal(db_fiber_run(&loop, use_stack, NULL, NULL), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(used_whole_stack);
    assert_int_equal(db_fiber_count(), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* ---- an overflow faults instead of writing into the neighbour ----------- */

#define CANARY 0x5a
static volatile char *neighbour_canary; /* on the neighbour fiber's stack */

/* Started second, so its stack is mapped below the first fiber's (mmap
 * hands out addresses downwards): the first one's overflow runs into it. */
static void neighbour(void *arg)
{
    (void)arg;
    volatile char canary[512];
    for (size_t i = 0; i < sizeof canary; i++)
        canary[i] = CANARY;
    neighbour_canary = canary;
    db_fiber_wait(-1, MYSQL_WAIT_TIMEOUT, 600000); /* the child ends long before */
}

/* Waits until the neighbour exists, then recurses a quarter of a stack past
 * its own: with a guard it never comes back. */
static void overflow(void *arg)
{
    (void)arg;
    db_fiber_wait(-1, MYSQL_WAIT_TIMEOUT, 1);
    char top;
    recurse((uintptr_t)&top, db_fiber_stack_size() + db_fiber_stack_size() / 4);
    for (size_t i = 0; neighbour_canary && i < 512; i++)
        if (neighbour_canary[i] != CANARY)
            _exit(3); /* wrote into the neighbour's stack */
    _exit(4);         /* overflowed, and nothing noticed */
}

static void child(void)
{
    /* The default action, also under ASan (whose own handler would report a
     * stack overflow and exit 1): the child must die of the fault itself. */
    signal(SIGSEGV, SIG_DFL);
    uv_loop_t loop;
    uv_loop_init(&loop);
    if (db_fiber_run(&loop, overflow, NULL, NULL) != 0 ||
        db_fiber_run(&loop, neighbour, NULL, NULL) != 0)
        _exit(5);
    uv_run(&loop, UV_RUN_DEFAULT);
    _exit(6);
}

static void an_overflowing_fiber_faults_on_its_guard_page(void **state)
{
    (void)state;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        child();
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 3)
        fail_msg("the overflow wrote into the neighbouring fiber's stack (no guard page)");
    if (WIFEXITED(st) && WEXITSTATUS(st) == 4)
        fail_msg("the fiber ran a quarter of a stack past its own without a fault (no guard page)");
    if (WIFEXITED(st))
        fail_msg("the child exited %d instead of dying of SIGSEGV", WEXITSTATUS(st));
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGSEGV);
}

/* ---- work on the thread pool ------------------------------------------- */

/* The work blocks until the loop writes to its pipe: it can only end if the
 * loop goes on turning while it runs (else the test hangs: alarm()). */
typedef struct pipe_work {
    int fds[2];
    pthread_t thread; /* where work ran */
    bool ran, abandoned, fiber_done;
    int offload_rc;
    unsigned timeout_ms;
} pipe_work;

static void read_pipe(void *arg)
{
    pipe_work *w = arg;
    char c;
    w->thread = pthread_self();
    while (read(w->fds[0], &c, 1) < 0)
        ;
    w->ran = true;
}

static void mark_abandoned(void *arg) { ((pipe_work *)arg)->abandoned = true; }

static void offload_fiber(void *arg)
{
    pipe_work *w = arg;
    w->offload_rc = db_fiber_offload(read_pipe, mark_abandoned, w, w->timeout_ms);
}

static void fiber_ended(void *arg) { ((pipe_work *)arg)->fiber_done = true; }

static void write_pipe(uv_timer_t *t)
{
    pipe_work *w = t->data;
    assert_int_equal(write(w->fds[1], "x", 1), 1);
}

static void run_until(uv_loop_t *loop, const bool *flag)
{
    while (!*flag)
        uv_run(loop, UV_RUN_ONCE);
}

static void offloaded_work_runs_on_another_thread_while_the_loop_turns(void **state)
{
    (void)state;
    alarm(60); /* a loop blocked by the work would never write its pipe */
    uv_loop_t loop;
    uv_loop_init(&loop);
    pipe_work w = {.timeout_ms = 0};
    assert_int_equal(pipe(w.fds), 0);
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    t.data = &w;
    assert_int_equal(db_fiber_run(&loop, offload_fiber, fiber_ended, &w), 0);
    assert_false(w.fiber_done); /* waiting for the work */
    uv_timer_start(&t, write_pipe, 10, 0);
    run_until(&loop, &w.fiber_done);
    assert_int_equal(w.offload_rc, 0);
    assert_true(w.ran);
    assert_false(w.abandoned);
    assert_false(pthread_equal(w.thread, pthread_self()));
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    close(w.fds[0]);
    close(w.fds[1]);
    alarm(0);
}

static void work_given_up_on_is_undone_once_it_has_ended(void **state)
{
    (void)state;
    alarm(60);
    uv_loop_t loop;
    uv_loop_init(&loop);
    pipe_work w = {.timeout_ms = 20};
    assert_int_equal(pipe(w.fds), 0);
    assert_int_equal(db_fiber_run(&loop, offload_fiber, fiber_ended, &w), 0);
    run_until(&loop, &w.fiber_done); /* the wait times out: the work still blocks */
    assert_int_equal(w.offload_rc, -1);
    assert_false(w.abandoned);
    assert_int_equal(db_fiber_offloads_left(), 1);
    assert_int_equal(write(w.fds[1], "x", 1), 1);
    run_until(&loop, &w.abandoned); /* now it ends, and is undone on the loop */
    assert_true(w.ran);
    assert_int_equal(db_fiber_offloads_left(), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    close(w.fds[0]);
    close(w.fds[1]);
    alarm(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_overflowing_fiber_faults_on_its_guard_page),
        cmocka_unit_test(a_fiber_may_use_the_whole_stack_it_is_promised),
        cmocka_unit_test(offloaded_work_runs_on_another_thread_while_the_loop_turns),
        cmocka_unit_test(work_given_up_on_is_undone_once_it_has_ended),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
