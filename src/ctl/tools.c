/*
 * oopsctl's Lua tools: scenario, chaos and outbox are Lua programs
 * (lua/oops/<tool>/cli.lua) that the oopsd next to oopsctl runs
 * (`oopsd lua`); oopsctl checks what it must and execs it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "ctl_args.h"
#include "runtime.h"

/*
 * Run one of the Lua tools (lua/oops/<tool>/cli.lua) with the oopsd next to
 * this binary: exec, so its exit status is ours. url: OOPS_DB for it (the
 * URL travels in the environment, never in argv), NULL for none.
 */
static int exec_lua_tool(const char *tool, const char *url, char **args, int nargs)
{
    char self[4096], dir[4096], oopsd[4200], script[4200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return fail(EXIT_INPUT, "%s: cannot find my own binary", tool);
    self[n] = '\0';
    snprintf(dir, sizeof dir, "%s", self);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    snprintf(oopsd, sizeof oopsd, "%s/oopsd", dir);
    char lua_dir[4096], why[4096]; /* the one oopsd next to us resolves too: both are installed
                                      together */
    if (runtime_lua_dir(lua_dir, sizeof lua_dir, why, sizeof why) != 0)
        return fail(EXIT_INPUT, "%s: %s", tool, why);
    snprintf(script, sizeof script, "%s/oops/%s/cli.lua", lua_dir, tool);
    if (url && *url)
        setenv("OOPS_DB", url, 1);
    else
        unsetenv("OOPS_DB");
    setenv("OOPSD", oopsd, 1);
    setenv("OOPSCTL", self, 1);
    fflush(stdout);
    char **argv = calloc((size_t)nargs + 4, sizeof *argv);
    if (!argv)
        return fail(EXIT_INPUT, "%s: out of memory", tool);
    argv[0] = oopsd;
    argv[1] = "lua";
    argv[2] = script;
    for (int i = 0; i < nargs; i++)
        argv[3 + i] = args[i];
    execv(oopsd, argv);
    free(argv);
    return fail(EXIT_INPUT, "%s: cannot run %s: %s", tool, oopsd, strerror(errno));
}

/*
 * scenario FILE: run a scenario (lua/oops/scenario/). Without a URL the
 * scenario starts a throwaway MariaDB of its own
 * (lua/oops/scenario/mariadb.lua) and removes it at the end.
 */
int run_scenario(ctl *c, int argc, char **argv)
{
    const char *pos[1];
    size_t npos = 0;
    int rc = parse(c, argc, argv, NULL, 0, pos, 1, &npos);
    if (rc != EXIT_OK)
        return rc;
    if (npos != 1)
        return fail(EXIT_INPUT, "scenario: expects one FILE");
    char *args[] = {(char *)pos[0]};
    return exec_lua_tool("scenario", c->db_url ? c->db_url : getenv("OOPS_DB"), args, 1);
}

/*
 * chaos --seed N --duration D [...]: a seeded fault campaign
 * (lua/oops/chaos/), always on a throwaway MariaDB of its own; its flags are
 * read there.
 */
int run_chaos(ctl *c, int argc, char **argv)
{
    if (c->db_url)
        return fail(EXIT_INPUT, "chaos: runs on a database of its own (no --db)");
    return exec_lua_tool("chaos", NULL, argv + 1, argc - 1);
}

/*
 * outbox [--route NAME] [--policies DIR]: the notification backlog per route
 * (lua/oops/outbox/); its flags checked here, so --db never reaches argv.
 */
int run_outbox(ctl *c, int argc, char **argv)
{
    ctl_flag f[] = {{"--route", true, false, NULL}, {"--policies", true, false, NULL}};
    int rc = parse(c, argc, argv, f, 2, NULL, 0, NULL);
    if (rc != EXIT_OK)
        return rc;
    char *args[5];
    int n = 0;
    if (c->json)
        args[n++] = "--json";
    for (int i = 0; i < 2; i++)
        if (f[i].given)
            args[n++] = (char *)f[i].name, args[n++] = (char *)f[i].value;
    return exec_lua_tool("outbox", c->db_url ? c->db_url : getenv("OOPS_DB"), args, n);
}

/*
 * stats [--app NS/APP] [--env ENV] [--since DAYS]: the four delivery figures
 * (lua/oops/stats/); its flags passed on as --flag=value (a value is never
 * read as a flag there), so --db never reaches argv.
 */
int run_stats(ctl *c, int argc, char **argv)
{
    ctl_flag f[] = {
        {"--app", true, false, NULL}, {"--env", true, false, NULL}, {"--since", true, false, NULL}};
    int rc = parse(c, argc, argv, f, 3, NULL, 0, NULL);
    if (rc != EXIT_OK)
        return rc;
    char flat[3][4200], *args[4];
    int n = 0;
    if (c->json)
        args[n++] = "--json";
    for (int i = 0; i < 3; i++) {
        if (!f[i].given)
            continue;
        if (strlen(f[i].value) > 4096)
            return fail(EXIT_INPUT, "stats: %s: longer than 4096 bytes", f[i].name);
        snprintf(flat[i], sizeof flat[i], "%s=%s", f[i].name, f[i].value);
        args[n++] = flat[i];
    }
    return exec_lua_tool("stats", c->db_url ? c->db_url : getenv("OOPS_DB"), args, n);
}
