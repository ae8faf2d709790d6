/* web: the fleet page's assets, the bearer token file and its comparison,
 * and which --listen addresses are loopback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "web.h"

/* Under ASan: fill every malloc'd byte (not only the first 4 KiB, the
 * default), so a token buffer left without a terminator on an error path
 * holds no stray zero and a read past its end is caught (issue 22). The
 * environment's ASAN_OPTIONS (tests/run.sh's log_path...) still apply. */
#if defined(__SANITIZE_ADDRESS__)
#define OOPS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OOPS_ASAN 1
#endif
#endif
#ifdef OOPS_ASAN
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "max_malloc_fill_size=1048576"; }
#endif

static void assets_are_compiled_in(void **state)
{
    (void)state;
    const web_asset *a = web_asset_find("/");
    assert_non_null(a);
    assert_string_equal(a->content_type, "text/html; charset=utf-8");
    assert_non_null(strstr((const char *)a->data, "/fleet.js"));
    assert_ptr_equal(web_asset_find("/index.html"), a);
    a = web_asset_find("/fleet.js");
    assert_non_null(a);
    assert_string_equal(a->content_type, "text/javascript; charset=utf-8");
    assert_non_null(web_asset_find("/fleet.css"));
    assert_null(web_asset_find("/nothing"));
    assert_null(web_asset_find("/../CMakeLists.txt"));
    assert_null(web_asset_find(NULL));
    assert_true(web_assets_bytes() > 1000);
    assert_true(web_assets_bytes() < 64 * 1024); /* small: the page's whole weight */
}

static char dir[] = "/tmp/oops-test-web.XXXXXX";

static const char *write_file(const char *name, const char *content, size_t len)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(content, 1, len, f);
    fclose(f);
    return path;
}

static void token_files(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(dir));
    char err[512], *tok = NULL;
    const char *p = write_file("ok", "0123456789abcdef0123\n", 21);
    assert_int_equal(web_token_read(p, &tok, err, sizeof err), 0);
    assert_string_equal(tok, "0123456789abcdef0123");
    web_token_free(tok);

    p = write_file("crlf", "0123456789abcdef0123\r\n", 22);
    assert_int_equal(web_token_read(p, &tok, err, sizeof err), 0);
    assert_string_equal(tok, "0123456789abcdef0123");
    web_token_free(tok);

    p = write_file("short", "secret-but-short", 10);
    assert_int_equal(web_token_read(p, &tok, err, sizeof err), -1);
    assert_null(tok);
    assert_non_null(strstr(err, "shorter than 16"));
    assert_null(strstr(err, "secret"));

    p = write_file("two-lines", "0123456789abcdef\n0123456789abcdef\n", 34);
    assert_int_equal(web_token_read(p, &tok, err, sizeof err), -1);
    assert_non_null(strstr(err, "printable ASCII"));
    assert_null(strstr(err, "0123"));

    char big[WEB_TOKEN_MAX + 1];
    memset(big, 'a', sizeof big);
    p = write_file("big", big, sizeof big);
    assert_int_equal(web_token_read(p, &tok, err, sizeof err), -1);
    assert_non_null(strstr(err, "longer than 4096"));
    p = write_file("max", big, WEB_TOKEN_MAX);
    assert_int_equal(web_token_read(p, &tok, err, sizeof err), 0);
    assert_int_equal(strlen(tok), WEB_TOKEN_MAX);
    web_token_free(tok);

    /* A read error after the buffer was allocated, with nothing read into
     * it: /proc/self/mem is a regular file whose offset 0 is unmapped. */
    assert_int_equal(web_token_read("/proc/self/mem", &tok, err, sizeof err), -1);
    assert_null(tok);
    assert_non_null(strstr(err, "/proc/self/mem: Input/output error"));
    /* Bytes after a NUL: refused (not printable), and wiped all the same. */
    p = write_file("nul", "0123456789abcdef\0secret-after-nul", 34);
    assert_int_equal(web_token_read(p, &tok, err, sizeof err), -1);
    assert_null(strstr(err, "secret"));

    assert_int_equal(web_token_read(dir, &tok, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file"));
    char missing[300];
    snprintf(missing, sizeof missing, "%s/missing", dir);
    assert_int_equal(web_token_read(missing, &tok, err, sizeof err), -1);
    assert_non_null(strstr(err, "No such file"));
    const char *names[] = {"ok", "crlf", "short", "two-lines", "big", "max", "nul"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char f[300];
        snprintf(f, sizeof f, "%s/%s", dir, names[i]);
        unlink(f);
    }
    rmdir(dir);
}

static void bearer(void **state)
{
    (void)state;
    const char *t = "0123456789abcdef";
    assert_true(web_bearer_ok("Bearer 0123456789abcdef", t));
    assert_true(web_bearer_ok("bearer 0123456789abcdef", t));
    assert_false(web_bearer_ok("Bearer 0123456789abcdeF", t));
    assert_false(web_bearer_ok("Bearer 0123456789abcde", t));
    assert_false(web_bearer_ok("Bearer 0123456789abcdef0", t));
    assert_false(web_bearer_ok("Bearer ", t));
    assert_false(web_bearer_ok("Basic 0123456789abcdef", t));
    assert_false(web_bearer_ok("0123456789abcdef", t));
    assert_false(web_bearer_ok(NULL, t));
    assert_false(web_bearer_ok("Bearer x", NULL));
}

static void loopback(void **state)
{
    (void)state;
    assert_true(web_listen_is_loopback("127.0.0.1:7070"));
    assert_true(web_listen_is_loopback("127.3.4.5:0"));
    assert_true(web_listen_is_loopback("localhost:7070"));
    assert_true(web_listen_is_loopback("[::1]:7070"));
    assert_true(web_listen_is_loopback("off"));
    assert_false(web_listen_is_loopback("0.0.0.0:7070"));
    assert_false(web_listen_is_loopback("10.0.0.5:7070"));
    assert_false(web_listen_is_loopback("[::]:7070"));
    assert_false(web_listen_is_loopback("[::ffff:127.0.0.1]:7070"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(assets_are_compiled_in),
        cmocka_unit_test(token_files),
        cmocka_unit_test(bearer),
        cmocka_unit_test(loopback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
