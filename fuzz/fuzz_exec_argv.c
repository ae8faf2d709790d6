/* fuzz_exec_argv — the exec gateway's argv building: M.substitute,
 * M.refusal and M.check_handle of lua/oops/gateways/exec/argv.lua, in the
 * daemon's own runtime (runtime_new: the `oops` module the gateway needs).
 *
 * The input's first byte is a separator; the rest, split at it, is:
 *   1 a job handle (what a submit printed), 2 a source value, 3 an artifact,
 *   4 the source's JSON text as a tool could have written it (any bytes),
 *   5... the arguments of a template (none: a fixed set that puts every
 *   placeholder at the start of an argument, inside one, after empty ones
 *   and after the policy's own "-").
 * The handle, the source value and the artifact fill {job}, {source.v} /
 * {source.w} and {artifact}; part 4 fills {source}. Asserted:
 *  - nothing raises;
 *  - an argv M.substitute returns has one argument per template argument,
 *    none starting with "-" unless the template's does, none holding a
 *    control character unless the template's does (the invariant
 *    oopsd.policy(5) states);
 *  - otherwise it refuses with kind "invalid" or "missing" and a one-line
 *    message "argument N: {NAME}: ...";
 *  - M.refusal (the engine's check before any step) is nil or a one-line
 *    message naming a command, and when nil no command of the application
 *    is refused as "invalid" by M.substitute with the pipeline's fields;
 *  - M.check_handle likewise for build.status and build.cancel with {job}.
 */
#include <lauxlib.h>
#include <lua.h>
#include <uv.h>

#include "ctx.h"
#include "fuzz_common.h"
#include "lua_cov.h"
#include "metrics.h"
#include "runtime.h"

static lua_State *L;
static int check_ref;

static const char DRIVER[] =
    "local exec = require('oops.gateways.exec')\n"
    "local json = require('oops.json')\n"
    "local show = require('oops.duration').show\n"
    "local DEFAULT = { 'cmd', '{job}', 'x={job}', '{source.v}', '--o={source.v}', '-{source.v}',\n"
    "  '{artifact}{source.v}', '{artifact}-x', '{artifact}{job}', '{source}', '{source.w}@{job}',\n"
    "  '{id}{artifact}', '{pipeline}', '{namespace}/{application}/{environment}', '{unknown}',\n"
    "  '{source.missing}' }\n"
    "local function one_line(s) return type(s) == 'string' and s ~= '' and not s:find('[\\r\\n]') "
    "end\n"
    "local function check(template, values)\n"
    "  local ok, argv, why, kind = pcall(exec.substitute, template, values)\n"
    "  if not ok then error('substitute raised: ' .. tostring(argv), 0) end\n"
    "  if not argv then\n"
    "    if kind ~= 'invalid' and kind ~= 'missing' then error('refused with kind ' .. show(kind), "
    "0) end\n"
    "    if not one_line(why) or not why:find('^argument %d+: {') then\n"
    "      error('refusal message ' .. show(why), 0)\n"
    "    end\n"
    "    return nil, kind\n"
    "  end\n"
    "  if #argv ~= #template then error(#template .. ' arguments became ' .. #argv, 0) end\n"
    "  for i, a in ipairs(argv) do\n"
    "    local t = template[i]\n"
    "    if type(a) ~= 'string' then error('argument ' .. i .. ' is a ' .. type(a), 0) end\n"
    "    if a:sub(1, 1) == '-' and t:sub(1, 1) ~= '-' then\n"
    "      error('argument ' .. i .. ' ' .. show(t) .. ' expanded to ' .. show(a), 0)\n"
    "    end\n"
    "    if a:find('%c') and not t:find('%c') then\n"
    "      error('argument ' .. i .. ' ' .. show(t) .. ' expanded to a control character: ' .. "
    "show(a), 0)\n"
    "    end\n"
    "  end\n"
    "  return argv\n"
    "end\n"
    "local function each_template(template, fn)\n"
    "  fn(template)\n"
    "  for i = 2, #template do fn({ 'cmd', template[i] }) end\n"
    "end\n"
    "return function(handle, value, artifact, raw, template)\n"
    "  local fields = { v = value, w = handle }\n"
    "  local encoded = json.encode(fields)\n"
    "  local values = { id = 'abc123', pipeline = 'abc123', namespace = 'shop', application = "
    "'api',\n"
    "    environment = 'prod', artifact = artifact, job = handle, source = raw or encoded,\n"
    "    source_fields = fields }\n"
    "  if #template < 2 then template = DEFAULT end\n"
    "  each_template(template, function(t) check(t, values) end)\n"
    "  -- The engine's check, then what the steps would do with the same fields.\n"
    "  local app = { build = { external = true, submit = template, status = template, cancel = "
    "DEFAULT },\n"
    "    deploy = template, health = DEFAULT }\n"
    "  local p = { id = 'abc123', namespace = 'shop', application = 'api', environment = 'prod',\n"
    "    artifact = artifact, source = raw or encoded }\n"
    "  local ok, why = pcall(exec.refusal, app, p)\n"
    "  if not ok then error('refusal raised: ' .. tostring(why), 0) end\n"
    "  if why ~= nil and not (one_line(why) and why:find('^[%a.]+ argument %d+: {')) then\n"
    "    error('refusal message ' .. show(why), 0)\n"
    "  end\n"
    "  if why == nil then\n"
    "    local decoded = json.decode(p.source)\n"
    "    local step = { id = 'abc123', pipeline = 'abc123', namespace = 'shop', application = "
    "'api',\n"
    "      environment = 'prod', artifact = artifact, source = p.source,\n"
    "      source_fields = type(decoded) == 'table' and decoded or nil }\n"
    "    for _, t in ipairs({ template, DEFAULT }) do\n"
    "      local _, kind = check(t, step)\n"
    "      if kind == 'invalid' then error('refusal passed what substitute refuses: ' .. "
    "show(t[1]), 0) end\n"
    "    end\n"
    "  end\n"
    "  local hok, bad = pcall(exec.check_handle, app.build, values, handle)\n"
    "  if not hok then error('check_handle raised: ' .. tostring(bad), 0) end\n"
    "  if bad ~= nil and not (one_line(bad) and bad:find('^build%.%a+ argument %d+: {')) then\n"
    "    error('check_handle message ' .. show(bad), 0)\n"
    "  end\n"
    "  if bad == nil then -- then no argument of status or cancel is refused for {job}\n"
    "    for _, t in ipairs({ template, DEFAULT }) do\n"
    "      for i = 2, #t do\n"
    "        local _, w, kind, name = exec.substitute({ 'cmd', t[i] }, values)\n"
    "        if kind == 'invalid' and name == 'job' then\n"
    "          error('check_handle passed a handle substitute refuses: ' .. w, 0)\n"
    "        end\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "end\n";

static void init(void)
{
    static uv_loop_t loop;
    static oops_ctx ctx;
    uv_loop_init(&loop);
    ctx.loop = &loop;
    ctx.metrics = metrics_new();
    snprintf(ctx.server_name, sizeof ctx.server_name, "fuzz");
    char err[1024];
    runtime *rt = runtime_new(&ctx, err, sizeof err);
    if (!rt) {
        fprintf(stderr, "fuzz_exec_argv: %s\n", err);
        abort();
    }
    ctx.rt = (struct runtime *)rt;
    L = runtime_state(rt);
    const char *lua_dir = getenv("OOPS_LUA_DIR");
    lua_cov_install(L, lua_dir && *lua_dir ? lua_dir : OOPS_LUA_DIR);
    if (luaL_loadstring(L, DRIVER) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK) {
        fprintf(stderr, "fuzz_exec_argv: driver: %s\n", lua_tostring(L, -1));
        abort();
    }
    check_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

/* Push part `n` (0-based) of data[1..size) split at data[0] and return 1;
 * 0 (nothing pushed) when the input has fewer parts. */
static int push_part(const uint8_t *data, size_t size, int n)
{
    if (size == 0)
        return 0;
    const uint8_t sep = data[0];
    size_t start = 1;
    int part = 0;
    for (size_t i = 1; i <= size; i++) {
        if (i == size || data[i] == sep) {
            if (part == n) {
                lua_pushlstring(L, (const char *)data + start, i - start);
                return 1;
            }
            part++;
            start = i + 1;
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!L)
        init();
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, check_ref);
    for (int i = 0; i < 3; i++)
        if (!push_part(data, size, i))
            lua_pushliteral(L, "");
    if (!push_part(data, size, 3))
        lua_pushnil(L);
    lua_newtable(L); /* the template: "cmd", then parts 5... */
    lua_pushliteral(L, "cmd");
    lua_rawseti(L, -2, 1);
    for (int i = 4; i < 36 && push_part(data, size, i); i++)
        lua_rawseti(L, -2, i - 2);
    if (lua_pcall(L, 5, 0, 0) != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        fuzz_fail(data, size, "%s", msg ? msg : "(error object)");
    }
    lua_settop(L, top);
    return 0;
}
