/* lua_cov — see lua_cov.h. */
#include "lua_cov.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COV_SIZE (1u << 16)
#define MAX_HOOKED 64

/* libFuzzer (Linux) reads every byte of this section as coverage counters. */
__attribute__((section("__libfuzzer_extra_counters"), used)) static uint8_t cov[COV_SIZE];

static char prefix[1100];
static size_t prefix_len;
static uint32_t prev;
static int installed;

typedef void (*sethook_fn)(lua_State *, lua_Hook, int, int);
static sethook_fn real_sethook;

/* The hooks that were asked for, per thread (few at a time: the sandboxes
 * running; slots of threads that died hooked are reused oldest first). */
typedef struct wanted {
    lua_State *L;
    lua_Hook hook;
    int mask, count;
} wanted;
static wanted hooked[MAX_HOOKED];
static size_t nhooked, next_evict;

static wanted *find(lua_State *L)
{
    for (size_t i = 0; i < nhooked; i++)
        if (hooked[i].L == L)
            return &hooked[i];
    return NULL;
}

static uint32_t fnv(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static void record(lua_State *L, lua_Debug *ar)
{
    int line = ar->currentline;
    if (!lua_getinfo(L, "S", ar))
        return;
    /* Code outside lua/ (the fuzzed text itself) is not coverage. By hand:
     * strncmp would feed libFuzzer's comparison tracing on every line. */
    for (size_t i = 0; i < prefix_len; i++)
        if (ar->source[i] != prefix[i])
            return;
    uint32_t here = fnv(ar->source + prefix_len) ^ ((uint32_t)line * 2654435761u);
    uint8_t *c = &cov[(here ^ prev) % COV_SIZE];
    if (*c < 255)
        (*c)++;
    prev = here >> 1;
}

static void tramp(lua_State *L, lua_Debug *ar)
{
    int event_mask = ar->event == LUA_HOOKTAILCALL ? LUA_MASKCALL : 1 << ar->event;
    if (ar->event == LUA_HOOKLINE)
        record(L, ar);
    wanted *w = find(L);
    if (w && w->hook && (w->mask & event_mask))
        w->hook(L, ar);
}

static sethook_fn real(void)
{
    if (!real_sethook) {
        real_sethook = (sethook_fn)dlvsym(RTLD_NEXT, "lua_sethook", "LUA_5.4");
        if (!real_sethook)
            real_sethook = (sethook_fn)dlsym(RTLD_NEXT, "lua_sethook");
        if (!real_sethook) {
            fprintf(stderr, "lua_cov: cannot find liblua's lua_sethook\n");
            abort();
        }
    }
    return real_sethook;
}

void lua_sethook(lua_State *L, lua_Hook f, int mask, int count)
{
    if (!installed) {
        real()(L, f, mask, count);
        return;
    }
    if (!f || mask == 0) {
        f = NULL;
        mask = 0;
    }
    if (!(mask & LUA_MASKCOUNT))
        count = 0;
    wanted *w = find(L);
    if (f) {
        if (!w) {
            if (nhooked < MAX_HOOKED)
                w = &hooked[nhooked++];
            else
                w = &hooked[next_evict++ % MAX_HOOKED];
        }
        *w = (wanted){L, f, mask, count};
    } else if (w) {
        *w = hooked[--nhooked];
    }
    real()(L, tramp, LUA_MASKLINE | mask, count);
}

lua_Hook lua_gethook(lua_State *L)
{
    wanted *w = find(L);
    return w ? w->hook : NULL;
}

int lua_gethookmask(lua_State *L)
{
    wanted *w = find(L);
    return w ? w->mask : 0;
}

int lua_gethookcount(lua_State *L)
{
    wanted *w = find(L);
    return w ? w->count : 0;
}

void lua_cov_install(lua_State *L, const char *lua_dir)
{
    int n = snprintf(prefix, sizeof prefix, "@%s/", lua_dir);
    if (n < 0 || (size_t)n >= sizeof prefix) {
        fprintf(stderr, "lua_cov: lua directory path too long\n");
        abort();
    }
    prefix_len = (size_t)n;
    const char *off = getenv("FUZZ_LUA_COV");
    if (off && strcmp(off, "0") == 0)
        return; /* to measure what the coverage costs */
    installed = 1;
    lua_sethook(L, NULL, 0, 0);
}
