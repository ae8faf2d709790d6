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

static char why[8192];

static void touch(const char *rel)
{
    char f[512];
    snprintf(f, sizeof f, "%s/%s", prefix, rel);
    FILE *fp = fopen(f, "w");
    assert_non_null(fp);
    fputs("return {}\n", fp);
    fclose(fp);
}

static void make_prefix(bool engine)
{
    snprintf(prefix, sizeof prefix, "/tmp/oops-paths.XXXXXX");
    assert_non_null(mkdtemp(prefix));
    assert_int_equal(chmod(prefix, 0755), 0);
    mkdirs("bin");
    touch("bin/oopsd"); /* its owner is who may write the engine */
    mkdirs("share/oopsd/lua/oops/scans");
    if (engine) {
        touch("share/oopsd/lua/oops/engine.lua");
        touch("share/oopsd/lua/oops/scans/build.lua");
    }
}

static void mode(const char *rel, mode_t m)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", prefix, rel);
    assert_int_equal(chmod(p, m), 0);
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
    assert_int_equal(
        paths_lua_dir("/elsewhere/lua", exe, BUILTIN, out, sizeof out, why, sizeof why),
        PATHS_LUA_ENV);
    assert_string_equal(out, "/elsewhere/lua");
    /* Never relative (Lua would search it from the current directory), never
     * with package.path's separators; refused, not passed over. */
    assert_int_equal(paths_lua_dir("lua", exe, BUILTIN, out, sizeof out, why, sizeof why),
                     PATHS_LUA_REFUSED);
    assert_string_equal(out, "");
    assert_non_null(strstr(why, "OOPS_LUA_DIR=lua is not an absolute path"));
    assert_int_equal(paths_lua_dir("./lua", exe, BUILTIN, out, sizeof out, why, sizeof why),
                     PATHS_LUA_REFUSED);
    assert_int_equal(paths_lua_dir("/x;./?.lua", exe, BUILTIN, out, sizeof out, why, sizeof why),
                     PATHS_LUA_REFUSED);
    assert_non_null(strstr(why, "holds ';' or '?'"));
    /* Empty is unset (a script passing OOPS_LUA_DIR="${OOPS_LUA_DIR:-}" along). */
    assert_int_equal(paths_lua_dir("", exe, BUILTIN, out, sizeof out, why, sizeof why),
                     PATHS_LUA_INSTALLED);
    remove_prefix();
}

static void an_installed_binary_finds_share_beside_its_bin(void **state)
{
    (void)state;
    char out[512], exe[512], want[512];
    make_prefix(true);
    snprintf(exe, sizeof exe, "%s/bin/oopsd", prefix);
    snprintf(want, sizeof want, "%s/share/oopsd/lua", prefix);
    assert_int_equal(paths_lua_dir(NULL, exe, BUILTIN, out, sizeof out, why, sizeof why),
                     PATHS_LUA_INSTALLED);
    assert_string_equal(out, want);
    /* Any BINDIR name: PREFIX is the parent of the binary's directory. */
    mkdirs("sbin");
    touch("sbin/oopsd");
    snprintf(exe, sizeof exe, "%s/sbin/oopsd", prefix);
    assert_int_equal(paths_lua_dir(NULL, exe, BUILTIN, out, sizeof out, why, sizeof why),
                     PATHS_LUA_INSTALLED);
    assert_string_equal(out, want);
    /* A relative path to the binary is never used: the directory would be
     * relative too, searched from wherever the binary was started. */
    char cwd[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(prefix), 0);
    assert_int_equal(paths_lua_dir(NULL, "bin/oopsd", BUILTIN, out, sizeof out, why, sizeof why),
                     PATHS_LUA_BUILTIN);
    assert_string_equal(out, BUILTIN);
    assert_int_equal(chdir(cwd), 0);
    remove_prefix();
}

static void a_directory_without_the_engine_is_not_an_installed_copy(void **state)
{
    (void)state;
    char out[512], exe[512];
    make_prefix(false); /* share/oopsd/lua/oops/ exists, engine.lua does not */
    snprintf(exe, sizeof exe, "%s/bin/oopsd", prefix);
    assert_int_equal(paths_lua_dir(NULL, exe, BUILTIN, out, sizeof out, why, sizeof why),
                     PATHS_LUA_BUILTIN);
    assert_string_equal(out, BUILTIN);
    remove_prefix();
}

static void a_build_tree_binary_uses_the_source_tree(void **state)
{
    (void)state;
    char out[256];
    assert_int_equal(paths_lua_dir(NULL, "/nonexistent/oopsd/build/oopsd", BUILTIN, out, sizeof out,
                                   why, sizeof why),
                     PATHS_LUA_BUILTIN);
    assert_string_equal(out, BUILTIN);
    assert_int_equal(paths_lua_dir(NULL, NULL, BUILTIN, out, sizeof out, why, sizeof why),
                     PATHS_LUA_BUILTIN);
    assert_int_equal(paths_lua_dir(NULL, "", BUILTIN, out, sizeof out, why, sizeof why),
                     PATHS_LUA_BUILTIN);
    assert_int_equal(paths_lua_dir(NULL, "oopsd", BUILTIN, out, sizeof out, why, sizeof why),
                     PATHS_LUA_BUILTIN);
    assert_int_equal(paths_lua_dir(NULL, "/oopsd", BUILTIN, out, sizeof out, why, sizeof why),
                     PATHS_LUA_BUILTIN);
    /* The directory compiled in must be absolute as well. */
    assert_int_equal(paths_lua_dir(NULL, NULL, NULL, out, sizeof out, why, sizeof why),
                     PATHS_LUA_REFUSED);
    assert_int_equal(paths_lua_dir(NULL, NULL, "lua", out, sizeof out, why, sizeof why),
                     PATHS_LUA_REFUSED);
    assert_non_null(strstr(why, "compiled in (lua) is not an absolute path"));
}

/* The installed copy is refused, with the entry and why, when someone but
 * its owner may write to it, any file or directory below it, or a directory
 * above it up to the prefix: never passed over for the source tree. */
static void refused(const char *exe, const char *entry, const char *what)
{
    char out[512], want[600];
    assert_int_equal(paths_lua_dir(NULL, exe, BUILTIN, out, sizeof out, why, sizeof why),
                     PATHS_LUA_REFUSED);
    assert_string_equal(out, "");
    snprintf(want, sizeof want, "%s%s%s %s", prefix, *entry ? "/" : "", entry, what);
    if (!strstr(why, want))
        fail_msg("want \"%s\" in: %s", want, why);
    assert_non_null(strstr(why, "refusing the Lua engine installed beside"));
    assert_null(strchr(why, '\n'));
}

static void an_installed_copy_others_may_write_to_is_refused(void **state)
{
    (void)state;
    char exe[512], out[512];
    make_prefix(true);
    snprintf(exe, sizeof exe, "%s/bin/oopsd", prefix);
    static const struct {
        const char *entry;
        mode_t bad, good;
        const char *what;
    } cases[] = {
        {"share/oopsd/lua/oops", 02775, 0755, "is writable by group"},
        {"share/oopsd/lua/oops/scans", 0777, 0755, "is writable by every user (mode 0777)"},
        {"share/oopsd/lua/oops/engine.lua", 0666, 0644, "is writable by every user (mode 0666)"},
        {"share/oopsd/lua/oops/scans/build.lua", 0664, 0644, "is writable by group"},
        {"share/oopsd/lua", 0757, 0755, "is writable by every user (mode 0757)"},
        {"share/oopsd", 0775, 0755, "is writable by group"},
        {"share", 01777, 0755, "is writable by every user (mode 1777)"},
        {"", 0777, 0755, "is writable by every user"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mode(cases[i].entry, cases[i].bad);
        refused(exe, cases[i].entry, cases[i].what);
        mode(cases[i].entry, cases[i].good);
        assert_int_equal(paths_lua_dir(NULL, exe, BUILTIN, out, sizeof out, why, sizeof why),
                         PATHS_LUA_INSTALLED);
    }
    remove_prefix();
}

/* Owned by root or the binary's owner; a root-owned binary's engine by root
 * alone. Changing owners needs root (the CI runs as root). */
static void an_installed_copy_owned_by_someone_else_is_refused(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    char exe[512], out[512], p[512];
    make_prefix(true);
    snprintf(exe, sizeof exe, "%s/bin/oopsd", prefix);
    snprintf(p, sizeof p, "%s/share/oopsd/lua/oops/engine.lua", prefix);
    assert_int_equal(chown(p, 12345, 12345), 0);
    refused(exe, "share/oopsd/lua/oops/engine.lua", "is owned by uid 12345, not root");
    assert_int_equal(chown(exe, 12345, 12345), 0); /* the binary's owner may */
    assert_int_equal(paths_lua_dir(NULL, exe, BUILTIN, out, sizeof out, why, sizeof why),
                     PATHS_LUA_INSTALLED);
    assert_int_equal(chown(p, 23456, 23456), 0);
    refused(exe, "share/oopsd/lua/oops/engine.lua",
            "is owned by uid 23456, neither root nor the binary's owner (uid 12345)");
    remove_prefix();
}

static void a_path_that_does_not_fit_is_refused(void **state)
{
    (void)state;
    char out[8];
    assert_int_equal(
        paths_lua_dir("/a/long/directory", NULL, BUILTIN, out, sizeof out, why, sizeof why),
        PATHS_LUA_TOO_LONG);
    assert_string_equal(out, "");
    assert_int_equal(paths_lua_dir(NULL, NULL, BUILTIN, out, sizeof out, why, sizeof why),
                     PATHS_LUA_TOO_LONG);
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
    umask(022);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_environment_wins_when_set),
        cmocka_unit_test(an_installed_binary_finds_share_beside_its_bin),
        cmocka_unit_test(a_directory_without_the_engine_is_not_an_installed_copy),
        cmocka_unit_test(a_build_tree_binary_uses_the_source_tree),
        cmocka_unit_test(an_installed_copy_others_may_write_to_is_refused),
        cmocka_unit_test(an_installed_copy_owned_by_someone_else_is_refused),
        cmocka_unit_test(a_path_that_does_not_fit_is_refused),
        cmocka_unit_test(the_running_binary_is_found),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
