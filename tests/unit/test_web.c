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
    assert_int_equal(chmod(path, 0600), 0); /* a token others may read is refused */
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

    /* Readable by a group or by every user: refused, naming the mode. */
    assert_int_equal(chmod(p, 0640), 0);
    assert_int_equal(web_token_read(p, &tok, err, sizeof err), -1);
    assert_null(tok);
    assert_non_null(strstr(err, "refused, it is readable by group "));
    assert_non_null(strstr(err, "(mode 0640)"));
    assert_int_equal(chmod(p, 0644), 0);
    assert_int_equal(web_token_read(p, &tok, err, sizeof err), -1);
    assert_non_null(strstr(err, "readable by every user (mode 0644)"));
    assert_null(strstr(err, "0123456789abcdef"));
    assert_int_equal(chmod(p, 0400), 0);
    assert_int_equal(web_token_read(p, &tok, err, sizeof err), 0);
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

static void host_header_parse(void **state)
{
    (void)state;
    char h[WEB_HOST_NAME_MAX + 1];
    static const struct {
        const char *in;
        web_host_kind kind;
        const char *canon;
    } cases[] = {
        {"localhost", WEB_HOST_NAME, "localhost"},
        {"LocalHost:7070", WEB_HOST_NAME, "localhost"},
        {"oops.Example.COM:443", WEB_HOST_NAME, "oops.example.com"},
        {"a-b.c", WEB_HOST_NAME, "a-b.c"},
        {"127.0.0.1", WEB_HOST_IPV4, "127.0.0.1"},
        {"127.0.0.1:7070", WEB_HOST_IPV4, "127.0.0.1"},
        {"10.1.2.3:65535", WEB_HOST_IPV4, "10.1.2.3"},
        {"[::1]", WEB_HOST_IPV6, "::1"},
        {"[::1]:7070", WEB_HOST_IPV6, "::1"},
        {"[0:0:0:0:0:0:0:1]:80", WEB_HOST_IPV6, "::1"},
        {"[FE80::A]:80", WEB_HOST_IPV6, "fe80::a"},
        {"", WEB_HOST_BAD, ""},
        {":7070", WEB_HOST_BAD, ""},
        {"localhost:", WEB_HOST_BAD, ""},
        {"localhost:65536", WEB_HOST_BAD, ""},
        {"localhost:123456", WEB_HOST_BAD, ""},
        {"localhost:80a", WEB_HOST_BAD, ""},
        {"localhost:-1", WEB_HOST_BAD, ""},
        {"localhost.", WEB_HOST_BAD, ""},
        {".localhost", WEB_HOST_BAD, ""},
        {"a..b", WEB_HOST_BAD, ""},
        {"-a.b", WEB_HOST_BAD, ""},
        {"a-.b", WEB_HOST_BAD, ""},
        {"a_b.c", WEB_HOST_BAD, ""},
        {"a b", WEB_HOST_BAD, ""},
        {"user@localhost", WEB_HOST_BAD, ""},
        {"127.1", WEB_HOST_BAD, ""},      /* browsers' shorthand for 127.0.0.1 */
        {"2130706433", WEB_HOST_BAD, ""}, /* likewise */
        {"0177.0.0.1", WEB_HOST_BAD, ""}, /* octal */
        {"1.2.3.4.5", WEB_HOST_BAD, ""},
        {"::1", WEB_HOST_BAD, ""}, /* IPv6 needs its brackets */
        {"[::1", WEB_HOST_BAD, ""},
        {"[::1]x", WEB_HOST_BAD, ""},
        {"[::1]:", WEB_HOST_BAD, ""},
        {"[fe80::1%25eth0]", WEB_HOST_BAD, ""}, /* zones: refused */
        {"[127.0.0.1]", WEB_HOST_BAD, ""},
        {"[localhost]", WEB_HOST_BAD, ""},
        {"localhost:7070:7070", WEB_HOST_BAD, ""},
        {"local\x01host", WEB_HOST_BAD, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        web_host_kind k = web_host_parse(cases[i].in, h, sizeof h);
        if (k != cases[i].kind || strcmp(h, cases[i].canon) != 0)
            fail_msg("%s: kind %d \"%s\", want %d \"%s\"", cases[i].in, k, h, cases[i].kind,
                     cases[i].canon);
    }
    /* Bounds: a label of 63 characters, a name of 253; one more is refused. */
    char name[WEB_HOST_HEADER_MAX + 10];
    memset(name, 'a', 63);
    strcpy(name + 63, ".b");
    assert_int_equal(web_host_parse(name, h, sizeof h), WEB_HOST_NAME);
    memset(name, 'a', 64);
    strcpy(name + 64, ".b");
    assert_int_equal(web_host_parse(name, h, sizeof h), WEB_HOST_BAD);
    for (size_t i = 0; i < 253; i++)
        name[i] = i % 2 ? '.' : 'a';
    name[252] = 'a';
    name[253] = '\0';
    assert_int_equal(web_host_parse(name, h, sizeof h), WEB_HOST_NAME);
    strcpy(name + 253, "a:1");
    assert_int_equal(web_host_parse(name, h, sizeof h), WEB_HOST_BAD);
    memset(name, 'a', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    assert_int_equal(web_host_parse(name, h, sizeof h), WEB_HOST_BAD);
    assert_int_equal(web_host_parse(NULL, h, sizeof h), WEB_HOST_BAD);
    assert_int_equal(web_host_parse("localhost", h, 10), WEB_HOST_BAD); /* out too small */
}

static void host_allowed(void **state)
{
    (void)state;
    web_hosts none = {0};
    /* Loopback names and addresses, with or without a port, in any case. */
    const char *yes[] = {"localhost",   "LOCALHOST:7070", "127.0.0.1",  "127.0.0.1:7070",
                         "127.9.8.7:1", "[::1]",          "[::1]:7070", "[0::1]:7070"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        if (!web_host_allowed(&none, yes[i], "127.0.0.1"))
            fail_msg("%s refused", yes[i]);
    /* A rebinding page's name, or anything else not listed. */
    const char *no[] = {"rebind.example",
                        "rebind.example:7070",
                        "localhost.rebind.example",
                        "127.0.0.1.rebind.example",
                        "10.0.0.5:7070",
                        "[::2]",
                        "",
                        "localhost:99999",
                        "[::ffff:127.0.0.1]",
                        "127.1:7070",
                        "a.localhost"};
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        if (web_host_allowed(&none, no[i], "127.0.0.1"))
            fail_msg("%s accepted", no[i]);
    assert_true(web_host_allowed(&none, NULL, "127.0.0.1")); /* HTTP/1.0: no Host */
    assert_true(web_host_allowed(NULL, "localhost", NULL));
    /* The connection's local address (a wildcard listener dialled at it), IPs only. */
    assert_true(web_host_allowed(&none, "10.0.0.5:7070", "10.0.0.5"));
    assert_true(web_host_allowed(&none, "[2001:DB8::5]:7070", "2001:db8::5"));
    assert_false(web_host_allowed(&none, "10.0.0.6:7070", "10.0.0.5"));
    /* The --listen address and --http-host names. */
    web_hosts h = {0};
    char err[512];
    web_hosts_listen(&h, "10.1.2.3:7070");
    assert_true(web_host_allowed(&h, "10.1.2.3", NULL));
    assert_true(web_host_allowed(&h, "10.1.2.3:8080", NULL));
    assert_false(web_host_allowed(&h, "oops.example", NULL));
    assert_int_equal(web_hosts_add(&h, "Oops.Example", err, sizeof err), 0);
    assert_int_equal(web_hosts_add(&h, "[2001:db8::1]", err, sizeof err), 0);
    assert_int_equal(web_hosts_add(&h, "192.0.2.1", err, sizeof err), 0);
    assert_true(web_host_allowed(&h, "oops.example", NULL));
    assert_true(web_host_allowed(&h, "OOPS.EXAMPLE:443", NULL));
    assert_true(web_host_allowed(&h, "[2001:db8:0::1]:443", NULL));
    assert_true(web_host_allowed(&h, "192.0.2.1", NULL));
    assert_false(web_host_allowed(&h, "oops.example.rebind.example", NULL));
    assert_false(web_host_allowed(&h, "xoops.example", NULL));
    web_hosts w = {0};
    web_hosts_listen(&w, "0.0.0.0:7070"); /* wildcards add nothing */
    web_hosts_listen(&w, "[::]:7070");
    web_hosts_listen(&w, "off");
    assert_int_equal(w.n, 0);
    assert_false(web_host_allowed(&w, "0.0.0.0:7070", NULL));
    web_hosts_listen(&w, "[::1]:7070");
    web_hosts_listen(&w, "localhost:7070");
    assert_int_equal(w.n, 1); /* one --listen */
}

static void http_host_flags(void **state)
{
    (void)state;
    web_hosts h = {0};
    char err[512];
    const char *bad[] = {
        "",    "a b",   "oops.example:443", "http://oops.example", "::1", "[::1", "a..b", "-a",
        "a_b", "127.1", "oops.example."};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        if (web_hosts_add(&h, bad[i], err, sizeof err) != -1)
            fail_msg("--http-host %s accepted", bad[i]);
        assert_non_null(strstr(err, "--http-host \""));
        assert_non_null(strstr(err, "not a host name"));
    }
    assert_int_equal(h.n, 0);
    assert_int_equal(web_hosts_add(&h, "a\x1b[31mb", err, sizeof err), -1);
    assert_null(strchr(err, '\x1b')); /* quoted, escaped */
    char name[WEB_HOST_NAME_MAX + 2];
    memset(name, 'a', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    for (size_t i = 63; i < sizeof name - 1; i += 64)
        name[i] = '.';
    assert_int_equal(web_hosts_add(&h, name, err, sizeof err), -1); /* 254 characters */
    web_hosts_listen(&h, "127.0.0.1:0");
    for (int i = 0; i < WEB_HOSTS_MAX; i++) {
        char n[32];
        snprintf(n, sizeof n, "h%d.example", i);
        assert_int_equal(web_hosts_add(&h, n, err, sizeof err), 0);
    }
    assert_int_equal(web_hosts_add(&h, "one.too.many", err, sizeof err), -1);
    assert_non_null(strstr(err, "at most 16 names"));
    assert_true(web_host_allowed(&h, "h15.example", NULL));
    assert_true(web_host_allowed(&h, "127.0.0.1", NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(assets_are_compiled_in),
        cmocka_unit_test(token_files),
        cmocka_unit_test(bearer),
        cmocka_unit_test(loopback),
        cmocka_unit_test(host_header_parse),
        cmocka_unit_test(host_allowed),
        cmocka_unit_test(http_host_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
