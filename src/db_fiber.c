#include "db_fiber.h"

#include <mysql.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FIBER_ASAN 1
#endif
#endif
#ifdef FIBER_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
/* Room for the sanitizer's larger frames. */
#define FIBER_STACK (1024 * 1024)
#else
/* Our frames only: Connector/C runs its own work on a stack of its own. Pages
 * are mapped lazily, so what is never touched costs no memory. */
#define FIBER_STACK (256 * 1024)
#endif

typedef struct fiber {
    ucontext_t ctx, caller;
    void *stack;
    db_fiber_fn fn, done;
    void *arg;
    uv_loop_t *loop;
    uv_timer_t timer;
    uv_poll_t *poll;   /* while waiting on a socket */
    struct kwatch *kw; /* while waiting on a kept watcher */
    int fd;            /* the socket waited on, -1 when none */
    int ready;         /* what happened, handed to the wait's caller */
    bool waiting, finished;
    struct fiber *prev, *next; /* the live fibers */
#ifdef FIBER_ASAN
    const void *caller_bottom;
    size_t caller_size;
#endif
} fiber;

static fiber *current;    /* the fiber running now, NULL on the loop's stack */
static fiber *live;       /* every fiber started and not yet done */
static size_t live_count; /* the length of `live` */
static bool aborting;     /* db_fiber_abort_all: every wait fails at once */

bool db_fiber_inside(void) { return current != NULL; }
size_t db_fiber_count(void) { return live_count; }

/* ---- switching ---------------------------------------------------------- */

/* From the loop's stack into f, until it waits or ends. */
static void enter(fiber *f)
{
    current = f;
#ifdef FIBER_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, f->stack, FIBER_STACK);
    swapcontext(&f->caller, &f->ctx);
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
    swapcontext(&f->caller, &f->ctx);
#endif
    current = NULL;
}

/* From f back to the loop's stack; returns when f is entered again. */
static void leave(fiber *f, bool for_good)
{
#ifdef FIBER_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(for_good ? NULL : &fake, f->caller_bottom, f->caller_size);
    swapcontext(&f->ctx, &f->caller);
    __sanitizer_finish_switch_fiber(fake, &f->caller_bottom, &f->caller_size);
#else
    (void)for_good;
    swapcontext(&f->ctx, &f->caller);
#endif
}

static void trampoline(void)
{
    fiber *f = current;
#ifdef FIBER_ASAN
    __sanitizer_finish_switch_fiber(NULL, &f->caller_bottom, &f->caller_size);
#endif
    f->fn(f->arg);
    f->finished = true;
    leave(f, true);
    abort(); /* a finished fiber is never entered again */
}

/* ---- life ---------------------------------------------------------------- */

/* Stacks of ended fibers kept for the next ones: a database call then costs
 * no mmap/munmap and no fresh page faults. At most STACKS_KEPT (the fibers
 * alive at once are the pool's connections, the lock session and the tick). */
#define STACKS_KEPT 16
static void *kept[STACKS_KEPT];
static size_t nkept;

/* Below each stack (stacks grow down on x86_64 and aarch64) a guard of
 * PROT_NONE pages: a fiber that overflows faults there (SIGSEGV) instead of
 * writing into whatever is mapped below, such as another fiber's stack. It
 * costs address space only. 64 KiB rather than one page, so that a frame
 * larger than a page cannot step over it. */
#define GUARD_MIN (64 * 1024)
static size_t guard_size(void)
{
    static size_t guard;
    if (!guard) {
        long page = sysconf(_SC_PAGESIZE);
        size_t p = page > 0 ? (size_t)page : 4096;
        guard = (GUARD_MIN + p - 1) / p * p;
    }
    return guard;
}

size_t db_fiber_stack_size(void) { return FIBER_STACK; }

static void *stack_get(void)
{
    if (nkept) {
        void *s = kept[--nkept];
#ifdef FIBER_ASAN
        /* The last fiber's final frames never returned: clear their poison. */
        __asan_unpoison_memory_region(s, FIBER_STACK);
#endif
        return s;
    }
    /* Mapped lazily (MAP_NORESERVE): pages never touched cost no memory. */
    size_t guard = guard_size();
    char *base = mmap(NULL, guard + FIBER_STACK, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    if (mprotect(base, guard, PROT_NONE) != 0) {
        munmap(base, guard + FIBER_STACK);
        return NULL;
    }
    return base + guard;
}

static void stack_put(void *s)
{
    if (nkept < STACKS_KEPT)
        kept[nkept++] = s;
    else
        munmap((char *)s - guard_size(), guard_size() + FIBER_STACK);
}

static void fiber_free(uv_handle_t *h)
{
    fiber *f = h->data;
    stack_put(f->stack);
    free(f);
}

/* Back on the loop's stack after entering f: if it ended, run done and let it go. */
static void after_switch(fiber *f)
{
    if (!f->finished)
        return;
    if (f->prev)
        f->prev->next = f->next;
    else
        live = f->next;
    if (f->next)
        f->next->prev = f->prev;
    live_count--;
    db_fiber_fn done = f->done;
    void *arg = f->arg;
    uv_close((uv_handle_t *)&f->timer, fiber_free);
    if (done)
        done(arg);
}

int db_fiber_run(uv_loop_t *loop, db_fiber_fn fn, db_fiber_fn done, void *arg)
{
    fiber *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    f->stack = stack_get();
    if (!f->stack) {
        free(f);
        return -1;
    }
    if (getcontext(&f->ctx) != 0) {
        stack_put(f->stack);
        free(f);
        return -1;
    }
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = FIBER_STACK;
    f->ctx.uc_link = NULL;
    makecontext(&f->ctx, trampoline, 0);
    f->fn = fn;
    f->done = done;
    f->arg = arg;
    f->loop = loop;
    f->fd = -1;
    uv_timer_init(loop, &f->timer);
    f->timer.data = f;
    f->next = live;
    if (live)
        live->prev = f;
    live = f;
    live_count++;
    enter(f);
    after_switch(f);
    return 0;
}

/* ---- waiting -------------------------------------------------------------- */

static void poll_closed(uv_handle_t *h) { free(h); }

/* A watcher kept on an established connection's socket (db_fiber_wait_kept):
 * started once and left watching, so a wait is no system call; stopped when
 * it fires with nobody waiting (the server closed an idle session). It keeps
 * the loop alive only while a fiber waits on it (uv_ref/uv_unref): an idle
 * connection's watcher never keeps `oopsd lua` or a stopping daemon running. */
typedef struct kwatch {
    uv_poll_t *h;
    int events;    /* what it watches now, 0 = stopped */
    fiber *waiter; /* the fiber waiting on it, or NULL */
} kwatch;
#define KEPT_MAX 1024
static kwatch kept_fds[KEPT_MAX];

static void wake(fiber *f, int ready)
{
    if (!f->waiting)
        return;
    f->waiting = false;
    if (f->poll) {
        uv_close((uv_handle_t *)f->poll, poll_closed);
        f->poll = NULL;
    }
    if (f->kw) {
        f->kw->waiter = NULL;
        uv_unref((uv_handle_t *)f->kw->h); /* watching for nobody: keeps no loop alive */
        f->kw = NULL;
    }
    uv_timer_stop(&f->timer);
    f->ready = ready;
    enter(f);
    after_switch(f);
}

static int ready_bits(int status, int events);

static void on_poll(uv_poll_t *p, int status, int events)
{
    fiber *f = p->data;
    wake(f, ready_bits(status, events));
}

static void on_kept(uv_poll_t *p, int status, int events)
{
    kwatch *k = p->data;
    if (!k->waiter) {
        uv_poll_stop(p);
        k->events = 0;
        return;
    }
    wake(k->waiter, ready_bits(status, events));
}

/* MYSQL_WAIT_* bits and the libuv events that answer them. */
static const struct {
    int wait, uv;
} WAIT_EVENTS[] = {
    {MYSQL_WAIT_READ, UV_READABLE},
    {MYSQL_WAIT_WRITE, UV_WRITABLE},
    {MYSQL_WAIT_EXCEPT, UV_PRIORITIZED},
};

/* What a wait's MYSQL_WAIT_* bits ask libuv to watch. */
static int uv_events_of(int status)
{
    int events = 0;
    for (size_t i = 0; i < sizeof WAIT_EVENTS / sizeof *WAIT_EVENTS; i++)
        if (status & WAIT_EVENTS[i].wait)
            events |= WAIT_EVENTS[i].uv;
    return events;
}

/* What a poll callback's (status, events) answers the library. */
static int ready_bits(int status, int events)
{
    if (status < 0)
        return MYSQL_WAIT_READ | MYSQL_WAIT_WRITE; /* let the library find the error */
    int ready = 0;
    for (size_t i = 0; i < sizeof WAIT_EVENTS / sizeof *WAIT_EVENTS; i++)
        if (events & WAIT_EVENTS[i].uv)
            ready |= WAIT_EVENTS[i].wait;
    return ready;
}

static void on_timeout(uv_timer_t *t) { wake(t->data, MYSQL_WAIT_TIMEOUT); }

/* The blocking form, for callers outside a fiber. */
static int wait_blocking(int fd, int status, unsigned timeout_ms)
{
    struct pollfd p = {.fd = fd};
    if (status & MYSQL_WAIT_READ)
        p.events |= POLLIN;
    if (status & MYSQL_WAIT_WRITE)
        p.events |= POLLOUT;
    if (status & MYSQL_WAIT_EXCEPT)
        p.events |= POLLPRI;
    int timeout = (status & MYSQL_WAIT_TIMEOUT) ? (int)timeout_ms : -1;
    int n;
    do
        n = poll(&p, 1, timeout);
    while (n < 0);
    if (n == 0)
        return MYSQL_WAIT_TIMEOUT;
    int ready = 0;
    if (p.revents & (POLLIN | POLLHUP | POLLERR))
        ready |= MYSQL_WAIT_READ;
    if (p.revents & (POLLOUT | POLLHUP | POLLERR))
        ready |= MYSQL_WAIT_WRITE;
    if (p.revents & POLLPRI)
        ready |= MYSQL_WAIT_EXCEPT;
    return ready;
}

/* Switch back to the loop until f's watcher (armed by the caller) or its
 * timeout wakes it: the MYSQL_WAIT_* bits that happened. */
static int park(fiber *f, int status, unsigned timeout_ms)
{
    if (status & MYSQL_WAIT_TIMEOUT)
        uv_timer_start(&f->timer, on_timeout, timeout_ms, 0);
    f->waiting = true;
    leave(f, false);
    f->fd = -1;
    return f->ready;
}

int db_fiber_wait(int fd, int status, unsigned timeout_ms)
{
    fiber *f = current;
    if (!f)
        return wait_blocking(fd, status, timeout_ms);
    if (aborting) {
        if (fd >= 0)
            shutdown(fd, SHUT_RDWR);
        return MYSQL_WAIT_READ | MYSQL_WAIT_WRITE;
    }
    int events = uv_events_of(status);
    f->fd = fd;
    if (events && fd >= 0) {
        f->poll = malloc(sizeof *f->poll);
        if (!f->poll || uv_poll_init(f->loop, f->poll, fd) != 0) {
            free(f->poll);
            f->poll = NULL;
            return wait_blocking(fd, status, timeout_ms); /* cannot watch it: wait here */
        }
        f->poll->data = f;
        uv_poll_start(f->poll, events, on_poll);
    }
    return park(f, status, timeout_ms);
}

int db_fiber_wait_kept(int fd, int status, unsigned timeout_ms)
{
    fiber *f = current;
    int events = uv_events_of(status);
    if (!f || aborting || fd < 0 || fd >= KEPT_MAX || !events)
        return db_fiber_wait(fd, status, timeout_ms);
    kwatch *k = &kept_fds[fd];
    if (k->waiter) /* one waiter per socket: never, but not twice on one watcher */
        return db_fiber_wait(fd, status, timeout_ms);
    if (!k->h) {
        k->h = malloc(sizeof *k->h);
        if (!k->h || uv_poll_init(f->loop, k->h, fd) != 0) {
            free(k->h);
            k->h = NULL;
            return db_fiber_wait(fd, status, timeout_ms);
        }
        k->h->data = k;
        k->events = 0;
    }
    if (k->events != events) {
        uv_poll_start(k->h, events, on_kept);
        k->events = events;
    }
    k->waiter = f;
    uv_ref((uv_handle_t *)k->h); /* a fiber waits on it: the loop runs until it is answered */
    f->kw = k;
    f->fd = fd;
    return park(f, status, timeout_ms);
}

/* ---- work on the thread pool ---------------------------------------------- */

typedef struct offload {
    uv_work_t req;
    db_fiber_fn work, abandoned;
    void *arg;
    fiber *waiter; /* NULL once the fiber gave up: abandoned(arg) then runs at the end */
    bool done;
} offload;

static size_t offloads_left;
size_t db_fiber_offloads_left(void) { return offloads_left; }

static void offload_work(uv_work_t *req)
{
    offload *o = req->data;
    o->work(o->arg);
}

/* On the loop's thread, once work has ended (or was cancelled before it began). */
static void offload_after(uv_work_t *req, int status)
{
    (void)status;
    offload *o = req->data;
    if (o->waiter) {
        o->done = true;
        wake(o->waiter, MYSQL_WAIT_READ);
        return;
    }
    offloads_left--;
    o->abandoned(o->arg);
    free(o);
}

int db_fiber_offload(db_fiber_fn work, db_fiber_fn abandoned, void *arg, unsigned timeout_ms)
{
    fiber *f = current;
    if (!f) {
        work(arg);
        return 0;
    }
    offload *o = aborting ? NULL : calloc(1, sizeof *o);
    if (o) {
        *o = (offload){.work = work, .abandoned = abandoned, .arg = arg, .waiter = f};
        o->req.data = o;
    }
    if (!o || uv_queue_work(f->loop, &o->req, offload_work, offload_after) != 0) {
        free(o);
        abandoned(arg);
        return -1;
    }
    if (timeout_ms)
        uv_timer_start(&f->timer, on_timeout, timeout_ms, 0);
    f->waiting = true;
    leave(f, false);
    if (o->done) {
        free(o);
        return 0;
    }
    /* Timed out, or abandoned (db_fiber_abort_all): work goes on by itself
     * (it is cancelled if it has not begun). */
    o->waiter = NULL;
    offloads_left++;
    uv_cancel((uv_req_t *)&o->req);
    return -1;
}

void db_fiber_forget(int fd)
{
    if (fd < 0 || fd >= KEPT_MAX || !kept_fds[fd].h)
        return;
    kwatch *k = &kept_fds[fd];
    if (k->waiter) /* its fiber is told the socket failed */
        wake(k->waiter, MYSQL_WAIT_READ | MYSQL_WAIT_WRITE);
    if (!uv_is_closing((uv_handle_t *)k->h))
        uv_close((uv_handle_t *)k->h, poll_closed);
    *k = (kwatch){0};
}

void db_fiber_forget_all(void)
{
    for (int fd = 0; fd < KEPT_MAX; fd++)
        db_fiber_forget(fd);
}

void db_fiber_abort_all(void)
{
    aborting = true;
    /* wake() may end a fiber and unlink it: take the next one first. */
    for (fiber *f = live, *next; f; f = next) {
        next = f->next;
        if (!f->waiting)
            continue;
        if (f->fd >= 0)
            shutdown(f->fd, SHUT_RDWR);
        wake(f, MYSQL_WAIT_READ | MYSQL_WAIT_WRITE);
    }
}
