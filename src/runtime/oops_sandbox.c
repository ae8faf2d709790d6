/*
 * oops.sandbox: run operators' policy code under limits that also hold
 * inside Lua's own C functions.
 *
 *   ok, ... = oops.sandbox.run(fn, limits, ...)
 *     limits = { memory = BYTES, time_ms = MS, instructions = N }   (each optional)
 *   → true, fn's results...
 *   → false, message, kind, traceback
 *       kind: "memory"        the state grew by more than `memory` bytes
 *             "time"          the wall clock passed `time_ms`
 *             "instructions"  more than `instructions` VM instructions ran
 *             "error"         fn raised (message is the error)
 *             "yield"         fn tried to wait (policy code never waits)
 *
 * How each bound holds:
 *   - memory: the state's allocator (runtime.c) refuses growth past the cap;
 *     Lua collects garbage, then raises "not enough memory". One allocation
 *     of 4 GB (string.rep) fails at once instead of being attempted.
 *   - instructions and time: a count hook every HOOK_EVERY instructions. Once
 *     a limit is passed the hook fires on every instruction, so a pcall in
 *     the sandboxed code cannot catch its way past it.
 *   - time inside C: the only library functions whose time does not follow
 *     from their output size are the pattern matchers (backtracking). While
 *     a sandbox runs, string.find/match/gmatch/gsub (also as methods: the
 *     string metatable's __index is the same table) first check the
 *     deadline, then estimate the worst case of the pattern on this subject
 *     and refuse one over PATTERN_MAX_STEPS. Everything else in the sandbox's
 *     library is linear in what it allocates, which the memory cap bounds.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "error_names.h"
#include "runtime.h"

#define HOOK_EVERY 1000
/* A pattern call whose worst case is beyond this many steps is refused:
 * about 0.1 s of backtracking on this machine (bench/README.md). */
#define PATTERN_MAX_STEPS 2e7

typedef enum { TRIP_NONE, TRIP_MEMORY, TRIP_TIME, TRIP_INSTRUCTIONS } trip;

typedef struct sb_run {
    lua_State *co;
    runtime_sandbox *sb;
    uint64_t deadline_ns; /* 0 = none */
    uint64_t time_ms;
    uint64_t instr_limit; /* 0 = none */
    uint64_t instr_done;
    size_t memory;
    trip tripped;
    struct sb_run *outer;
} sb_run;

static sb_run *current; /* the innermost sandbox running (sandboxes run synchronously) */

static const char *trip_kind(trip t)
{
    return t == TRIP_MEMORY ? "memory" : t == TRIP_TIME ? "time" : "instructions";
}

static void trip_message(const sb_run *r, char *out, size_t n)
{
    switch (r->tripped) {
    case TRIP_MEMORY: snprintf(out, n, "used more than %zu MiB of memory", r->memory >> 20); break;
    case TRIP_TIME:
        snprintf(out, n, "ran longer than %llu ms", (unsigned long long)r->time_ms);
        break;
    default:
        snprintf(out, n, "runaway: more than %llu instructions",
                 (unsigned long long)r->instr_limit);
        break;
    }
}

static void hook(lua_State *L, lua_Debug *ar);

/* Stop the sandboxed code for good: every next instruction raises too. */
static int trip_now(lua_State *L, sb_run *r, trip why)
{
    if (r->tripped == TRIP_NONE)
        r->tripped = why;
    lua_sethook(r->co, hook, LUA_MASKCOUNT, 1);
    char msg[128];
    trip_message(r, msg, sizeof msg);
    return luaL_error(L, "%s", msg);
}

static void hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    sb_run *r = current;
    if (!r || L != r->co)
        return;
    if (r->tripped != TRIP_NONE)
        trip_now(L, r, r->tripped);
    r->instr_done += HOOK_EVERY;
    if (r->sb->mem_refused)
        trip_now(L, r, TRIP_MEMORY);
    if (r->instr_limit && r->instr_done > r->instr_limit)
        trip_now(L, r, TRIP_INSTRUCTIONS);
    if (r->deadline_ns && uv_hrtime() > r->deadline_ns)
        trip_now(L, r, TRIP_TIME);
}

static uint64_t opt_limit(lua_State *L, int t, const char *key)
{
    lua_getfield(L, t, key);
    uint64_t v = 0;
    if (!lua_isnil(L, -1)) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) <= 0)
            luaL_error(L, "oops.sandbox.run: limits.%s must be a whole number > 0", key);
        v = (uint64_t)lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

static int l_run(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    luaL_checktype(L, 2, LUA_TTABLE);
    runtime_sandbox *sb = runtime_sandbox_of(runtime_of(L));
    sb_run r = {.sb = sb, .outer = current};
    r.memory = (size_t)opt_limit(L, 2, "memory");
    r.time_ms = opt_limit(L, 2, "time_ms");
    r.instr_limit = opt_limit(L, 2, "instructions");
    int nargs = lua_gettop(L) - 2;

    lua_State *co = lua_newthread(L); /* anchored on L's stack until we return */
    r.co = co;
    lua_pushvalue(L, 1);
    for (int i = 3; i < 3 + nargs; i++)
        lua_pushvalue(L, i);
    lua_xmove(L, co, nargs + 1);

    /* Limits: an inner sandbox never loosens an outer one's. */
    size_t saved_limit = sb->mem_limit;
    bool saved_refused = sb->mem_refused;
    uint64_t saved_deadline = sb->deadline_ns;
    if (r.memory) {
        size_t cap = sb->mem_used + r.memory;
        sb->mem_limit = saved_limit && saved_limit < cap ? saved_limit : cap;
    }
    if (r.time_ms) {
        r.deadline_ns = uv_hrtime() + r.time_ms * 1000000ull;
        if (saved_deadline && saved_deadline < r.deadline_ns)
            r.deadline_ns = saved_deadline;
    } else {
        r.deadline_ns = saved_deadline;
    }
    sb->deadline_ns = r.deadline_ns;
    sb->mem_refused = false;
    sb->depth++;
    current = &r;
    lua_sethook(co, hook, LUA_MASKCOUNT, HOOK_EVERY);

    int nres = 0;
    int st = lua_resume(co, L, nargs, &nres);

    current = r.outer;
    sb->depth--;
    bool refused = sb->mem_refused;
    sb->mem_limit = saved_limit;
    sb->mem_refused = saved_refused;
    sb->deadline_ns = saved_deadline;
    lua_sethook(co, NULL, 0, 0);

    if (st == LUA_OK) {
        luaL_checkstack(L, nres + 1, "sandbox results");
        lua_pushboolean(L, 1);
        lua_xmove(co, L, nres); /* L: ..., co, true, results... */
        return nres + 1;
    }
    trip why = r.tripped;
    if (why == TRIP_NONE && (st == LUA_ERRMEM || refused))
        why = TRIP_MEMORY, r.tripped = TRIP_MEMORY;
    char msg[512];
    const char *kind;
    if (st == LUA_YIELD) {
        snprintf(msg, sizeof msg, "policy code cannot wait (it yielded)");
        kind = "yield";
    } else if (why != TRIP_NONE) {
        trip_message(&r, msg, sizeof msg);
        kind = trip_kind(why);
    } else {
        const char *e = lua_tostring(co, -1);
        snprintf(msg, sizeof msg, "%s", e ? e : "(error object is not a string)");
        kind = "error";
    }
    lua_pushboolean(L, 0);
    lua_pushstring(L, msg);
    lua_pushstring(L, kind);
    luaL_traceback(L, co, NULL, 0);
    return 4;
}

/* ---- the pattern guard --------------------------------------------------- */

static bool class_match(unsigned char c, unsigned char cl)
{
    bool res;
    switch (tolower(cl)) {
    case 'a': res = isalpha(c); break;
    case 'c': res = iscntrl(c); break;
    case 'd': res = isdigit(c); break;
    case 'g': res = isgraph(c); break;
    case 'l': res = islower(c); break;
    case 'p': res = ispunct(c); break;
    case 's': res = isspace(c); break;
    case 'u': res = isupper(c); break;
    case 'w': res = isalnum(c); break;
    case 'x': res = isxdigit(c); break;
    default: return cl == c;
    }
    return isupper(cl) ? !res : res;
}

/* p at '[', close at its ']'. */
static bool set_match(unsigned char c, const char *p, const char *close)
{
    bool sig = true;
    p++;
    if (*p == '^') {
        sig = false;
        p++;
    }
    while (p < close) {
        if (*p == '%' && p + 1 < close) {
            if (class_match(c, (unsigned char)p[1]))
                return sig;
            p += 2;
        } else if (p + 2 < close && p[1] == '-') {
            if ((unsigned char)p[0] <= c && c <= (unsigned char)p[2])
                return sig;
            p += 3;
        } else {
            if ((unsigned char)*p == c)
                return sig;
            p++;
        }
    }
    return !sig;
}

/* One pattern item [p, ep) against c. */
static bool item_match(unsigned char c, const char *p, const char *ep)
{
    switch (*p) {
    case '.': return true;
    case '%': return class_match(c, (unsigned char)p[1]);
    case '[': return set_match(c, p, ep - 1);
    default: return (unsigned char)*p == c;
    }
}

/* The end of the set starting at p[i] == '[' (index after its ']'), or 0. */
static size_t set_end(const char *p, size_t m, size_t i)
{
    i++;
    if (i < m && p[i] == '^')
        i++;
    do {
        if (i >= m)
            return 0;
        if (p[i++] == '%') {
            if (i >= m)
                return 0;
            i++;
        }
    } while (i >= m || p[i] != ']');
    return i + 1;
}

/* How many characters in a row of s the item can take, at most. */
static size_t longest_run(const char *s, size_t n, const char *p, const char *ep)
{
    if (*p == '.')
        return n;
    size_t best = 0, run = 0;
    for (size_t i = 0; i < n; i++) {
        run = item_match((unsigned char)s[i], p, ep) ? run + 1 : 0;
        if (run > best)
            best = run;
    }
    return best;
}

/* An upper bound on the ways the backtracking matcher can try pattern p on
 * subject s: each start position times, per repeated item, one more than
 * the longest run of the subject it can take; balances and back-references
 * scan up to the whole subject. Malformed tails count for nothing (the
 * matcher reports them as soon as it reaches them). */
static double pattern_paths(const char *s, size_t n, const char *p, size_t m, bool may_anchor)
{
    size_t i = 0;
    double paths;
    if (may_anchor && m > 0 && p[0] == '^') {
        paths = 1;
        i = 1;
    } else {
        paths = (double)n + 1;
    }
    while (i < m && paths < 1e30) {
        char c = p[i];
        size_t end;
        if (c == '(' || c == ')') {
            i++;
            continue;
        }
        if (c == '%') {
            if (i + 1 >= m)
                break;
            char x = p[i + 1];
            if (x == 'b') {
                paths *= (double)n + 1;
                i += 4;
                continue;
            }
            if (x == 'f') {
                size_t e = i + 2 < m && p[i + 2] == '[' ? set_end(p, m, i + 2) : 0;
                if (!e)
                    break;
                i = e;
                continue;
            }
            if (x >= '0' && x <= '9') {
                paths *= (double)n + 1;
                i += 2;
                continue;
            }
            end = i + 2;
        } else if (c == '[') {
            end = set_end(p, m, i);
            if (!end)
                break;
        } else {
            end = i + 1;
        }
        if (end < m && (p[end] == '*' || p[end] == '+' || p[end] == '-')) {
            paths *= (double)longest_run(s, n, p + i, p + end) + 1;
            i = end + 1;
        } else if (end < m && p[end] == '?') {
            paths *= 2;
            i = end + 1;
        } else {
            i = end;
        }
    }
    return paths;
}

enum { PAT_FIND, PAT_MATCH, PAT_GMATCH, PAT_GSUB };
static const char *const PAT_NAMES[] = {"find", "match", "gmatch", "gsub"};

/* upvalues: 1 the original function, 2 its kind, 3 the runtime_sandbox */
static int guarded(lua_State *L)
{
    runtime_sandbox *sb = lua_touserdata(L, lua_upvalueindex(3));
    if (sb->depth > 0) {
        int kind = (int)lua_tointeger(L, lua_upvalueindex(2));
        if (sb->deadline_ns && uv_hrtime() > sb->deadline_ns && current)
            return trip_now(L, current, TRIP_TIME);
        size_t n, m;
        const char *s = luaL_checklstring(L, 1, &n);
        const char *p = luaL_checklstring(L, 2, &m);
        bool plain = kind == PAT_FIND && lua_toboolean(L, 4);
        if (!plain) {
            double steps = pattern_paths(s, n, p, m, kind != PAT_GMATCH) * ((double)m + 1);
            if (steps > PATTERN_MAX_STEPS) {
                char msg[256];
                snprintf(
                    msg, sizeof msg,
                    "string.%s: this pattern could backtrack for about %.0e steps on a %zu-byte "
                    "subject (policy code may take %.0e): shorten the subject or use fewer "
                    "repetitions like .- and .*",
                    PAT_NAMES[kind], steps, n, PATTERN_MAX_STEPS);
                return luaL_error(L, "%s", msg);
            }
        }
    }
    int nargs = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, nargs, LUA_MULTRET);
    return lua_gettop(L);
}

void sandbox_guard_patterns(lua_State *L)
{
    runtime_sandbox *sb = runtime_sandbox_of(runtime_of(L));
    lua_getglobal(L, "string");
    for (int k = PAT_FIND; k <= PAT_GSUB; k++) {
        lua_getfield(L, -1, PAT_NAMES[k]);
        lua_pushinteger(L, k);
        lua_pushlightuserdata(L, sb);
        lua_pushcclosure(L, guarded, 3);
        lua_setfield(L, -2, PAT_NAMES[k]);
    }
    lua_pop(L, 1);
}

/* ---- reading policy files ------------------------------------------------ */

static const char *file_kind(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

/* oops.sandbox.read(path, max_bytes) → text | nil, "path: why", "io".
 * Only a regular file (after symlinks) of at most max_bytes is read. The
 * open never blocks (O_NONBLOCK: a FIFO without a writer, a device), and the
 * type is checked on the opened file, so nothing can be swapped in between. */
static int l_read(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    lua_Integer max = luaL_checkinteger(L, 2);
    luaL_argcheck(L, max > 0 && max <= (1 << 30), 2, "must be from 1 to 2^30 bytes");
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", path, strerror(errno));
        lua_pushliteral(L, OOPS_E_IO);
        return 3;
    }
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st) != 0)
        why = strerror(errno);
    else if (!S_ISREG(st.st_mode))
        why = file_kind(st.st_mode);
    else if (st.st_size > max)
        why = "too large";
    if (why) {
        close(fd);
        lua_pushnil(L);
        if (!strcmp(why, "too large"))
            lua_pushfstring(L, "%s: larger than %I bytes: not read", path, max);
        else
            lua_pushfstring(L, "%s: %s, not a regular file: only regular files are read", path,
                            why);
        lua_pushliteral(L, OOPS_E_IO);
        return 3;
    }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    lua_Integer total = 0;
    char chunk[8192];
    for (;;) {
        ssize_t got = read(fd, chunk, sizeof chunk);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            close(fd);
            lua_pushnil(L);
            lua_pushfstring(L, "%s: %s", path, strerror(e));
            lua_pushliteral(L, OOPS_E_IO);
            return 3;
        }
        if (got == 0)
            break;
        total += got;
        if (total > max) { /* it grew while we read */
            close(fd);
            lua_pushnil(L);
            lua_pushfstring(L, "%s: larger than %I bytes: not read", path, max);
            lua_pushliteral(L, OOPS_E_IO);
            return 3;
        }
        luaL_addlstring(&b, chunk, (size_t)got);
    }
    close(fd);
    luaL_pushresult(&b);
    return 1;
}

void oops_open_sandbox(lua_State *L)
{
    static const luaL_Reg fns[] = {{"run", l_run}, {"read", l_read}, {NULL, NULL}};
    oops_setfuncs_in(L, "sandbox", fns);
}
