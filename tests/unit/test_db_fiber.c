/* Fibers (db_fiber.c): their stacks, and a guard below each. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_overflowing_fiber_faults_on_its_guard_page),
        cmocka_unit_test(a_fiber_may_use_the_whole_stack_it_is_promised),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
