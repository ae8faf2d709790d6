/* fuzz_policy — the policy loader: the input is the text of one policy
 * file, loaded by require("oops.policy").load_files in the daemon's own
 * runtime (runtime_new: the `oops` module, so oops.cron.parse is the C
 * parser, and whatever sandbox limits the runtime has).
 *
 * Asserted:
 *  - load_files never raises, whatever the file says;
 *  - it returns a policy, or nil and a non-empty list of messages, each a
 *    string starting with the file's path ("path:line: what: why"), but
 *    for a last "... and N more errors";
 *  - a policy has a 16-hex-digit version_hash, whole-ms durations within
 *    their documented minimums, applications whose name is
 *    "namespace/application", and deploy timeouts within deploy.timeout;
 *  - its hooks, called as the engine does (oops.hooks.call: on_transition
 *    with a pipeline, "INITIALIZED", "RUNNING", then on_build_lost), never
 *    make the call raise, whatever they do (the hook instruction budget is
 *    lowered to the same limit);
 *  - nothing outside the sandbox changed: the real globals and the
 *    standard library tables (string, table, math, os, io, utf8, coroutine,
 *    debug, package.loaded, the string metatable) hold exactly what they
 *    held before.
 *
 * Bounds: the loader's instruction limit is lowered to 100000
 * ($FUZZ_POLICY_INSTRUCTIONS), and the Lua state may hold at most 256 MiB
 * ($FUZZ_LUA_MEM_MB, 0 = no cap), below fuzz/run's -rss_limit_mb; past it an
 * allocation fails as "not enough memory" inside the file. The runtime's
 * own sandbox (memory, wall clock) applies first where it exists. A file
 * that still runs long is reported by libFuzzer's -timeout.
 */
#include <lauxlib.h>
#include <lua.h>
#include <unistd.h>
#include <uv.h>

#include "ctx.h"
#include "fuzz_common.h"
#include "lua_cov.h"
#include "metrics.h"
#include "runtime.h"

static lua_State *L;
static int check_ref;
static char dir[256], path[300];
static long long instructions = 100000;

/* ---- a memory cap on the state (a backstop below -rss_limit_mb) ---------- */

static lua_Alloc inner_alloc;
static void *inner_ud;
static size_t mem_used, mem_cap;

static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    (void)ud;
    size_t old = ptr ? osize : 0;
    if (nsize > old && mem_cap && mem_used - old + nsize > mem_cap)
        return NULL;
    void *p = inner_alloc(inner_ud, ptr, osize, nsize);
    if (p || nsize == 0)
        mem_used = mem_used - old + nsize;
    return p;
}

/* ---- the checks, in Lua ------------------------------------------------------ */

static const char DRIVER[] =
    "local policy = require('oops.policy')\n"
    "local show = require('oops.duration').show\n"
    "local function whole(v, min) return math.type(v) == 'integer' and v >= min end\n"
    "local function check_policy(p)\n"
    "  if type(p) ~= 'table' then return 'a policy that is ' .. type(p) end\n"
    "  if type(p.version_hash) ~= 'string' or not p.version_hash:match('^%x+$') or #p.version_hash "
    "~= 16 then\n"
    "    return 'version_hash ' .. show(p.version_hash)\n"
    "  end\n"
    "  local durations = {\n"
    "    { p.scan.interval_ms, 100, 'scan.interval' }, { p.build.timeout_ms, 1, 'build.timeout' "
    "},\n"
    "    { p.deploy.timeout_ms, 1, 'deploy.timeout' }, { p.rollout.timeout_ms, 1, "
    "'rollout.timeout' },\n"
    "    { p.locks.validate_every_ms, 1000, 'locks.validate_every' }, { p.restarts.grace_ms, 0, "
    "'restarts.grace' },\n"
    "    { p.alert.interval_ms, 1000, 'alert.interval' }, { p.alert.every_ms, 1000, 'alert.every' "
    "},\n"
    "    { p.notify.retry.initial_ms, 1, 'notify.retry.initial' }, { p.notify.retry.max_ms, 1, "
    "'notify.retry.max' },\n"
    "  }\n"
    "  for _, d in ipairs(durations) do\n"
    "    if not whole(d[1], d[2]) then return d[3] .. ' = ' .. show(d[1]) end\n"
    "  end\n"
    "  if p.notify.retry.initial_ms > p.notify.retry.max_ms then return 'notify.retry.initial > "
    "max' end\n"
    "  for name, a in pairs(p.applications) do\n"
    "    if type(name) ~= 'string' or a.namespace .. '/' .. a.application ~= name then\n"
    "      return 'application ' .. show(name) .. ' stored as ' .. show(a.namespace) .. '/' .. "
    "show(a.application)\n"
    "    end\n"
    "    if type(a.environments) ~= 'table' or #a.environments == 0 then return name .. ': no "
    "environments' end\n"
    "    for _, t in pairs(a.timeout_ms) do if not whole(t, 1) then return name .. ': timeout ' .. "
    "show(t) end end\n"
    "    if a.timeout_ms.deploy > p.deploy.timeout_ms then return name .. ': deploy timeout above "
    "deploy.timeout' end\n"
    "  end\n"
    "end\n"
    "local hooks = require('oops.hooks')\n"
    "require('oops.log').error = function() end -- a failing hook logs: not here\n"
    "local PIPELINE = { id = 'abc123def456', namespace = 'shop', application = 'api',\n"
    "  environment = 'prod', status = 'RUNNING', artifact = 'v1', trigger_type = 'manual' }\n"
    "local function call_hooks(p, limit)\n"
    "  local l = policy.HOOK_LIMITS\n"
    "  policy.HOOK_LIMITS = { memory = l.memory, time_ms = l.time_ms, instructions = limit }\n"
    "  hooks.set(p.hooks)\n"
    "  local ok, err = pcall(hooks.call, 'on_transition', PIPELINE, 'INITIALIZED', 'RUNNING')\n"
    "  if ok then ok, err = pcall(hooks.call, 'on_build_lost', PIPELINE) end\n"
    "  hooks.set({})\n"
    "  policy.HOOK_LIMITS = l\n"
    "  if not ok then return 'hooks.call raised: ' .. tostring(err) end\n"
    "end\n"
    "local function check(path, limit)\n"
    "  local ok, p, errs = pcall(policy.load_files, { path }, { instruction_limit = limit })\n"
    "  if not ok then return 'load_files raised: ' .. tostring(p) end\n"
    "  local why\n"
    "  if p == nil then\n"
    "    if type(errs) ~= 'table' or #errs == 0 then return 'nil without a list of errors' end\n"
    "    for i, e in ipairs(errs) do\n"
    "      if type(e) ~= 'string' then return 'error ' .. i .. ' is a ' .. type(e) end\n"
    "      local summary = i == #errs and i > 1 and e:match('^%.%.%. and %d+ more errors?$')\n"
    "      if not summary and e:sub(1, #path) ~= path then\n"
    "        return 'error ' .. i .. ' does not start with the path: ' .. show(e)\n"
    "      end\n"
    "    end\n"
    "  else\n"
    "    why = check_policy(p) or call_hooks(p, limit)\n"
    "  end\n"
    "  return why\n"
    "end\n"
    "return check\n";

/* ---- isolation: the real globals and libraries do not change ----------- */

/* Shallow copies of the tables a sandbox escape would touch, taken after a
 * first load (which fills package.loaded): registry[K_WATCH] = { tbl, copy,
 * tbl, copy, ... }. Done in C so it runs no Lua lines (no coverage noise,
 * no hook cost). */
static const char K_WATCH = 0;

static void copy_table(lua_State *S, int t)
{
    t = lua_absindex(S, t);
    lua_newtable(S);
    lua_pushnil(S);
    while (lua_next(S, t)) {
        lua_pushvalue(S, -2);
        lua_insert(S, -2);
        lua_rawset(S, -4);
    }
}

static void watch(lua_State *S, int list, int *n)
{
    if (!lua_istable(S, -1)) {
        lua_pop(S, 1);
        return;
    }
    lua_pushvalue(S, -1);
    lua_rawseti(S, list, ++*n);
    copy_table(S, -1);
    lua_rawseti(S, list, ++*n);
    lua_pop(S, 1);
}

static void snapshot(void)
{
    static const char *const libs[] = {"string", "table", "math",      "os",
                                       "io",     "utf8",  "coroutine", "debug"};
    int n = 0;
    lua_newtable(L);
    int list = lua_gettop(L);
    lua_pushglobaltable(L);
    watch(L, list, &n);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "loaded");
    lua_remove(L, -2);
    watch(L, list, &n);
    lua_pushliteral(L, "");
    lua_getmetatable(L, -1);
    lua_remove(L, -2);
    watch(L, list, &n);
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
        lua_getglobal(L, libs[i]);
        watch(L, list, &n);
    }
    lua_rawsetp(L, LUA_REGISTRYINDEX, &K_WATCH);
}

/* NULL, or what changed (a static buffer). */
static const char *changed(void)
{
    static char why[300];
    const char *res = NULL;
    int top = lua_gettop(L);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &K_WATCH);
    int list = top + 1, tbl = top + 2, copy = top + 3;
    for (lua_Integer i = 1; !res; i += 2) {
        lua_settop(L, list);
        if (lua_rawgeti(L, list, i) != LUA_TTABLE)
            break;
        lua_rawgeti(L, list, i + 1);
        size_t ncopy = 0, ntbl = 0;
        lua_pushnil(L);
        while (lua_next(L, copy)) { /* key, old value */
            ncopy++;
            lua_pushvalue(L, -2);
            lua_rawget(L, tbl); /* key, old value, value now */
            if (!lua_rawequal(L, -1, -2)) {
                snprintf(why, sizeof why, "sandbox escape: watched table %d: key %s changed",
                         (int)(i / 2),
                         lua_type(L, -3) == LUA_TSTRING ? lua_tostring(L, -3)
                                                        : luaL_typename(L, -3));
                res = why;
                break;
            }
            lua_pop(L, 2);
        }
        if (res)
            break;
        lua_pushnil(L);
        while (lua_next(L, tbl)) {
            ntbl++;
            lua_pop(L, 1);
        }
        if (ntbl != ncopy) {
            snprintf(why, sizeof why, "sandbox escape: watched table %d has %zu keys, had %zu",
                     (int)(i / 2), ntbl, ncopy);
            res = why;
        }
    }
    lua_settop(L, top);
    return res;
}

static void load(const uint8_t *data, size_t size);

static void cleanup(void)
{
    unlink(path);
    rmdir(dir);
}

static void init(void)
{
    static uv_loop_t loop;
    static oops_ctx ctx;
    const char *s = getenv("FUZZ_POLICY_INSTRUCTIONS");
    if (s && atoll(s) > 0)
        instructions = atoll(s);
    s = getenv("FUZZ_LUA_MEM_MB");
    mem_cap = (s ? (size_t)atoll(s) : 256) << 20;

    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/fuzz_policy.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("fuzz_policy: mkdtemp");
        abort();
    }
    snprintf(path, sizeof path, "%s/policy.lua", dir);
    atexit(cleanup);

    uv_loop_init(&loop);
    ctx.loop = &loop;
    ctx.metrics = metrics_new();
    snprintf(ctx.server_name, sizeof ctx.server_name, "fuzz");
    char err[4096];
    runtime *rt = runtime_new(&ctx, err, sizeof err);
    if (!rt) {
        fprintf(stderr, "fuzz_policy: %s\n", err);
        abort();
    }
    ctx.rt = (struct runtime *)rt;
    L = runtime_state(rt);
    inner_alloc = lua_getallocf(L, &inner_ud);
    mem_used = (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024;
    lua_setallocf(L, capped_alloc, NULL);
    const char *lua_dir = getenv("OOPS_LUA_DIR");
    lua_cov_install(L, lua_dir && *lua_dir ? lua_dir : OOPS_LUA_DIR);
    if (luaL_loadstring(L, DRIVER) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK) {
        fprintf(stderr, "fuzz_policy: driver: %s\n", lua_tostring(L, -1));
        abort();
    }
    check_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    load((const uint8_t *)"", 0); /* fills package.loaded with what loading needs */
    snapshot();
}

static void load(const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
        perror("fuzz_policy: writing the policy file");
        abort();
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, check_ref);
    lua_pushstring(L, path);
    lua_pushinteger(L, instructions);
    if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        fuzz_fail(data, size, "the check raised: %s", msg ? msg : "(error object)");
    }
    if (lua_isstring(L, -1))
        fuzz_fail(data, size, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!L)
        init();
    load(data, size);
    const char *why = changed();
    if (why)
        fuzz_fail(data, size, "%s", why);
    return 0;
}
