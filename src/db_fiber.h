/*
 * db_fiber — database work that never blocks the loop.
 *
 * MariaDB Connector/C's non-blocking API (mysql_*_start / mysql_*_cont)
 * returns whenever it would wait for its socket, with what it waits for
 * (MYSQL_WAIT_READ, _WRITE, _EXCEPT, _TIMEOUT). db.c makes every call that
 * way and hands each wait to db_fiber_wait().
 *
 * On the loop's own stack (oopsctl, start-up, tools) db_fiber_wait() simply
 * poll()s: the old blocking behaviour. Inside a fiber started with
 * db_fiber_run() it arms a uv_poll_t on the socket (and a uv_timer_t for the
 * library's timeout) and switches back to the loop; the callback switches
 * into the fiber again with what became ready. So a sequence of statements
 * written as straight C (a transaction, a reconnect and its session set-up,
 * the lock session's validation) runs unchanged while the loop serves
 * /healthz, signals and other tasks — the same technique Connector/C uses
 * inside its non-blocking API. A fiber runs plain C only, never Lua.
 *
 * Single-threaded: everything here runs on the loop's thread.
 */
#ifndef OOPS_DB_FIBER_H
#define OOPS_DB_FIBER_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

typedef void (*db_fiber_fn)(void *arg);

/*
 * Run fn(arg) in a new fiber now, until it first waits or returns; done(arg)
 * runs on the loop's stack once fn has returned (possibly before
 * db_fiber_run itself returns, when fn never waited). 0, or -1 when no
 * fiber could be made (out of memory): then neither fn nor done ran.
 */
int db_fiber_run(uv_loop_t *loop, db_fiber_fn fn, db_fiber_fn done, void *arg);

/* True while running inside a fiber. */
bool db_fiber_inside(void);

/*
 * Wait until the socket fd is ready for what `status` (MYSQL_WAIT_* bits)
 * asks, or until timeout_ms when status has MYSQL_WAIT_TIMEOUT. Returns the
 * MYSQL_WAIT_* bits that happened, to pass to the _cont() call. Inside a
 * fiber this yields to the loop; elsewhere it blocks in poll().
 */
int db_fiber_wait(int fd, int status, unsigned timeout_ms);

/*
 * The same, for the socket of an established connection: the watcher on fd
 * is kept between waits (and left watching), so a statement's wait costs no
 * epoll_ctl. Whoever owns the socket must call db_fiber_forget(fd) before
 * closing it, and whenever the library may have closed it (after an error).
 */
int db_fiber_wait_kept(int fd, int status, unsigned timeout_ms);
/* Drop the kept watcher of fd, if any (a no-op for -1). */
void db_fiber_forget(int fd);
/* Drop every kept watcher: before the loop's handles are closed. */
void db_fiber_forget_all(void);

/*
 * Run work(arg) on libuv's thread pool (uv_queue_work) and wait until it has
 * ended: inside a fiber the fiber waits, at most timeout_ms (0: as long as
 * work takes), while the loop goes on; elsewhere work simply runs here. For
 * a blocking library call that must not block the loop (a connect that
 * resolves a host name). work runs on another thread: it must touch nothing
 * of the loop's (no loop, no fiber, no Lua, nothing another fiber may use).
 * 0 once work has ended. -1 when the wait ended first (the time ran out, or
 * db_fiber_abort_all) or work could not be queued: then arg is no longer the
 * caller's, and abandoned(arg) runs on the loop's thread once work has ended
 * or will never run, to undo and free what it made.
 */
int db_fiber_offload(db_fiber_fn work, db_fiber_fn abandoned, void *arg, unsigned timeout_ms);
/* Work given up on and still running (the loop's last run waits for it). */
size_t db_fiber_offloads_left(void);

/*
 * The bytes of stack a fiber's code may use. Below them lies a guard of
 * PROT_NONE pages: an overflow ends the process with SIGSEGV rather than
 * writing into another fiber's stack.
 */
size_t db_fiber_stack_size(void);

/* Fibers alive now (started, not yet done). */
size_t db_fiber_count(void);

/*
 * Make every fiber's current and next wait end at once as if its socket had
 * failed (shutdown(2) on the socket: the library then sees the connection
 * lost and the fiber's statement returns an error). For stopping while the
 * database does not answer: run the loop afterwards until db_fiber_count()
 * is 0.
 */
void db_fiber_abort_all(void);

#endif
