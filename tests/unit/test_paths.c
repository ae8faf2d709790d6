/* paths: where a binary finds its Lua engine ($OOPS_LUA_DIR, an installed copy, the source tree).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "paths.h"

#define BUILTIN "/src/oopsd/lua"

/* A throwaway install prefix: PREFIX/bin/, and with `engine`
 * PREFIX/share/oopsd/lua/oops/engine.lua. */
static char prefix[256];

static void mkdirs(const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", prefix, rel);
    for (char *s = p + strlen(prefix) + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
}

static void make_prefix(bool engine)
{
    snprintf(prefix, sizeof prefix, "/tmp/oops-paths.XXXXXX");
    assert_non_null(mkdtemp(prefix));
    mkdirs("bin");
    mkdirs("share/oopsd/lua/oops");
    if (engine) {
        char f[512];
        snprintf(f, sizeof f, "%s/share/oopsd/lua/oops/engine.lua", prefix);
        FILE *fp = fopen(f, "w");
        assert_non_null(fp);
        fputs("return {}\n", fp);
        fclose(fp);
    }
}

static void remove_prefix(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", prefix);
    assert_int_equal(system(cmd), 0);
}

static void the_environment_wins_when_set(void **state)
{
    (void)state;
    char out[256];
    make_prefix(true);
    char exe[512];
    snprintf(exe, sizeof exe, "%s/bin/oopsd", prefix);
    assert_int_equal(paths_lua_dir("/elsewhere/lua", exe, BUILTIN, out, sizeof out), PATHS_LUA_ENV);
    assert_string_equal(out, "/elsewhere/lua");
    /* Empty is unset (a script passing OOPS_LUA_DIR="${OOPS_LUA_DIR:-}" along). */
    assert_int_equal(paths_lua_dir("", exe, BUILTIN, out, sizeof out), PATHS_LUA_INSTALLED);
    remove_prefix();
}

static void an_installed_binary_finds_share_beside_its_bin(void **state)
{
    (void)state;
    char out[512], exe[512], want[512];
    make_prefix(true);
    snprintf(exe, sizeof exe, "%s/bin/oopsd", prefix);
    snprintf(want, sizeof want, "%s/share/oopsd/lua", prefix);
    assert_int_equal(paths_lua_dir(NULL, exe, BUILTIN, out, sizeof out), PATHS_LUA_INSTALLED);
    assert_string_equal(out, want);
    /* Any BINDIR name: PREFIX is the parent of the binary's directory. */
    snprintf(exe, sizeof exe, "%s/sbin/oopsd", prefix);
    assert_int_equal(paths_lua_dir(NULL, exe, BUILTIN, out, sizeof out), PATHS_LUA_INSTALLED);
    assert_string_equal(out, want);
    /* A relative path to the binary gives a relative directory. */
    char cwd[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(prefix), 0);
    assert_int_equal(paths_lua_dir(NULL, "bin/oopsd", BUILTIN, out, sizeof out),
                     PATHS_LUA_INSTALLED);
    assert_string_equal(out, "./share/oopsd/lua");
    assert_int_equal(chdir(cwd), 0);
    remove_prefix();
}

static void a_directory_without_the_engine_is_not_an_installed_copy(void **state)
{
    (void)state;
    char out[512], exe[512];
    make_prefix(false); /* share/oopsd/lua/oops/ exists, engine.lua does not */
    snprintf(exe, sizeof exe, "%s/bin/oopsd", prefix);
    assert_int_equal(paths_lua_dir(NULL, exe, BUILTIN, out, sizeof out), PATHS_LUA_BUILTIN);
    assert_string_equal(out, BUILTIN);
    remove_prefix();
}

static void a_build_tree_binary_uses_the_source_tree(void **state)
{
    (void)state;
    char out[256];
    assert_int_equal(
        paths_lua_dir(NULL, "/nonexistent/oopsd/build/oopsd", BUILTIN, out, sizeof out),
        PATHS_LUA_BUILTIN);
    assert_string_equal(out, BUILTIN);
    assert_int_equal(paths_lua_dir(NULL, NULL, BUILTIN, out, sizeof out), PATHS_LUA_BUILTIN);
    assert_int_equal(paths_lua_dir(NULL, "", BUILTIN, out, sizeof out), PATHS_LUA_BUILTIN);
    assert_int_equal(paths_lua_dir(NULL, "oopsd", BUILTIN, out, sizeof out), PATHS_LUA_BUILTIN);
    assert_int_equal(paths_lua_dir(NULL, "/oopsd", BUILTIN, out, sizeof out), PATHS_LUA_BUILTIN);
    assert_int_equal(paths_lua_dir(NULL, NULL, NULL, out, sizeof out), PATHS_LUA_BUILTIN);
    assert_string_equal(out, "lua");
}

static void a_path_that_does_not_fit_is_refused(void **state)
{
    (void)state;
    char out[8];
    assert_int_equal(paths_lua_dir("/a/long/directory", NULL, BUILTIN, out, sizeof out),
                     PATHS_LUA_TOO_LONG);
    assert_string_equal(out, "");
    assert_int_equal(paths_lua_dir(NULL, NULL, BUILTIN, out, sizeof out), PATHS_LUA_TOO_LONG);
    assert_string_equal(out, "");
}

static void the_running_binary_is_found(void **state)
{
    (void)state;
    char exe[4096];
    assert_int_equal(paths_self_exe(exe, sizeof exe), 0);
    assert_true(exe[0] == '/');
    const char *base = strrchr(exe, '/') + 1;
    assert_string_equal(base, "test_paths");
    char tiny[4];
    assert_int_equal(paths_self_exe(tiny, sizeof tiny), -1);
    assert_string_equal(tiny, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_environment_wins_when_set),
        cmocka_unit_test(an_installed_binary_finds_share_beside_its_bin),
        cmocka_unit_test(a_directory_without_the_engine_is_not_an_installed_copy),
        cmocka_unit_test(a_build_tree_binary_uses_the_source_tree),
        cmocka_unit_test(a_path_that_does_not_fit_is_refused),
        cmocka_unit_test(the_running_binary_is_found),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
