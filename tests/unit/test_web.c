/* web: the fleet page's assets, the bearer token file and its comparison,
 * the users file (--http-users), and which --listen addresses are
 * loopback. */
#include <dirent.h>
#include <errno.h>
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

static const char *write_in(const char *d, const char *name, const char *content, size_t len)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", d, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(content, 1, len, f);
    fclose(f);
    assert_int_equal(chmod(path, 0600), 0); /* a token others may read is refused */
    return path;
}

static const char *write_file(const char *name, const char *content, size_t len)
{
    return write_in(dir, name, content, len);
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

/* ---- the users file (--http-users) -------------------------------------- */

/* A fresh temporary directory of the users tests (each its own). */
static void users_dir(char *d, size_t len)
{
    snprintf(d, len, "/tmp/oops-test-web-users.XXXXXX");
    assert_non_null(mkdtemp(d));
}

static void users_dir_remove(const char *d)
{
    DIR *dd = opendir(d);
    assert_non_null(dd);
    struct dirent *de;
    while ((de = readdir(dd))) {
        char f[512];
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(f, sizeof f, "%s/%s", d, de->d_name);
        assert_int_equal(unlink(f), 0);
    }
    closedir(dd);
    assert_int_equal(rmdir(d), 0);
}

static web_users *users_ok(const char *d, const char *content, size_t len)
{
    char err[512] = "";
    web_users *u = NULL;
    const char *p = write_in(d, "users", content, len);
    if (web_users_read(p, &u, err, sizeof err) != 0)
        fail_msg("refused: %s", err);
    assert_non_null(u);
    return u;
}

static void assert_user(const web_users *u, const char *header, const char *name, web_role role)
{
    web_user who;
    memset(&who, 0x55, sizeof who);
    if (!web_users_check(u, header, &who))
        fail_msg("%s: nobody", header);
    assert_string_equal(who.name, name);
    assert_int_equal(who.role, role);
    assert_true(web_users_check(u, header, NULL));
}

static void assert_nobody(const web_users *u, const char *header)
{
    web_user who;
    memset(&who, 0x55, sizeof who);
    if (web_users_check(u, header, &who))
        fail_msg("%s: %s", header ? header : "(no header)", who.name);
    assert_string_equal(who.name, ""); /* zeroed */
    assert_int_equal(who.role, 0);
}

static void users_file_good(void **state)
{
    (void)state;
    char d[64], big[WEB_TOKEN_MAX + 1], text[2 * WEB_TOKEN_MAX], hdr[WEB_TOKEN_MAX + 16];
    users_dir(d, sizeof d);
    memset(big, 'Z', WEB_TOKEN_MAX);
    big[WEB_TOKEN_MAX] = '\0';
    int n = snprintf(text, sizeof text,
                     "# oopsd users: NAME ROLE TOKEN\n"
                     "\n"
                     "alice operator 0123456789abcdef-alice\n"
                     "   \t\n"
                     "  \t# an indented comment with fields alice viewer 0123456789abcdef\n"
                     "bob\tviewer\t\tBOB.token_0123456789~!\r\n"
                     "\r\n"
                     "  ci-bot.2  viewer   tok/with:punct=+0123456789#\t \r\n"
                     "0123456789abcdef0123456789abcdef operator %s",
                     big); /* a 32-character name, a 4096-character token, no last LF */
    web_users *u = users_ok(d, text, (size_t)n);
    assert_int_equal(web_users_count(u), 4);
    assert_user(u, "Bearer 0123456789abcdef-alice", "alice", WEB_ROLE_OPERATOR);
    assert_user(u, "bearer   0123456789abcdef-alice", "alice", WEB_ROLE_OPERATOR);
    assert_user(u, "BEARER BOB.token_0123456789~!", "bob", WEB_ROLE_VIEWER);
    assert_user(u, "Bearer tok/with:punct=+0123456789#", "ci-bot.2", WEB_ROLE_VIEWER);
    snprintf(hdr, sizeof hdr, "Bearer %s", big);
    assert_user(u, hdr, "0123456789abcdef0123456789abcdef", WEB_ROLE_OPERATOR);

    /* Wrong tokens: one byte off, a prefix, one more byte, another case,
     * the comment's token, the CR kept; other schemes; no header. */
    const char *no[] = {"Bearer 0123456789abcdef-alicE",
                        "Bearer 0123456789abcdef-alic",
                        "Bearer 0123456789abcdef-alice0",
                        "Bearer bob.token_0123456789~!",
                        "Bearer 0123456789abcdef",
                        "Bearer BOB.token_0123456789~!\r",
                        "Bearer ",
                        "Bearer",
                        "Basic 0123456789abcdef-alice",
                        "Token 0123456789abcdef-alice",
                        "0123456789abcdef-alice",
                        "Bearer\t0123456789abcdef-alice",
                        ""};
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        assert_nobody(u, no[i]);
    assert_nobody(u, NULL);
    big[WEB_TOKEN_MAX - 1] = 'Y';
    snprintf(hdr, sizeof hdr, "Bearer %s", big);
    assert_nobody(u, hdr);
    assert_false(web_users_check(NULL, "Bearer 0123456789abcdef-alice", NULL));
    web_users_free(u);

    /* Read only by its owner (0400) is fine too; one user is enough. */
    const char *one = "solo viewer 0123456789abcdef0123\n";
    const char *p = write_in(d, "one", one, strlen(one));
    assert_int_equal(chmod(p, 0400), 0);
    char err[512];
    assert_int_equal(web_users_read(p, &u, err, sizeof err), 0);
    assert_int_equal(web_users_count(u), 1);
    assert_user(u, "Bearer 0123456789abcdef0123", "solo", WEB_ROLE_VIEWER);
    web_users_free(u);
    users_dir_remove(d);
}

/* A file that must be refused at line `line` saying `what`, and holding
 * `secret` (a token, or a field that may be one) the message must not show. */
typedef struct users_bad {
    const char *text;
    int line;
    const char *what;
    const char *secret;
} users_bad;

static void assert_refused(const char *d, const users_bad *c, size_t len)
{
    char err[1024] = "", want[64];
    web_users *u = (web_users *)&err; /* must become NULL */
    const char *p = write_in(d, "bad", c->text, len);
    if (web_users_read(p, &u, err, sizeof err) != -1)
        fail_msg("accepted: %s", c->text);
    assert_null(u);
    if (strncmp(err, "--http-users ", 13) != 0 || !strstr(err, p))
        fail_msg("does not name the flag and the file: %s", err);
    snprintf(want, sizeof want, ": line %d: ", c->line);
    if (c->line && !strstr(err, want))
        fail_msg("not at line %d: %s", c->line, err);
    if (!strstr(err, c->what))
        fail_msg("not saying \"%s\": %s", c->what, err);
    if (c->secret && strstr(err, c->secret))
        fail_msg("shows \"%s\": %s", c->secret, err);
    assert_null(strchr(err, '\n'));
}

static void users_file_errors(void **state)
{
    (void)state;
    char d[64];
    users_dir(d, sizeof d);
    static const users_bad cases[] = {
        {"alice viewer SECRETaaaaaaaaaa1\n# c\nalice operator SECRETbbbbbbbbbb2\n", 3,
         "the name is already on line 1", "SECRET"},
        {"alice viewer SECRETaaaaaaaaaa1\r\n\r\nbob operator SECRETaaaaaaaaaa1\r\n", 3,
         "the token is already on line 1", "SECRET"},
        {"alice admin SECRETaaaaaaaaaa1\n", 1, "the role must be viewer or operator", "SECRET"},
        {"alice Viewer SECRETaaaaaaaaaa1\n", 1, "the role must be viewer or operator", "SECRET"},
        {"Alice viewer SECRETaaaaaaaaaa1\n", 1, "the name must be 1 to 32 characters", "SECRET"},
        {"-alice viewer SECRETaaaaaaaaaa1\n", 1, "the name must be", "SECRET"},
        {".alice viewer SECRETaaaaaaaaaa1\n", 1, "the name must be", "SECRET"},
        {"al/ice viewer SECRETaaaaaaaaaa1\n", 1, "the name must be", "SECRET"},
        {"al\xc3\xa9 viewer SECRETaaaaaaaaaa1\n", 1, "the name must be", "SECRET"},
        {"a23456789012345678901234567890123 viewer SECRETaaaaaaaaaa1\n", 1, "the name must be",
         "SECRET"},
        /* Fields in the wrong order: a token where the name goes. */
        {"SECRETaaaaaaaaaa1 viewer alice\n", 1, "the name must be", "SECRET"},
        {"0123456789abcdef0123456789secret viewer alice\n", 1, "shorter than 16", "secret"},
        {"alice viewer SECRETshort\n", 1, "the token is shorter than 16 characters", "SECRET"},
        {"alice viewer SECRETaaaa\x01"
         "aaaaaaaaa\n",
         1, "printable ASCII without spaces", "SECRET"},
        {"alice viewer SECRETaaaa\raaaaaaaaa\n", 1, "printable ASCII", "SECRET"},
        {"alice viewer SECRETaaaaaaaaaa\xc3\xa9\n", 1, "printable ASCII", "SECRET"},
        {"alice viewer SECRETaaaaaaaaaa\x7f\n", 1, "printable ASCII", "SECRET"},
        {"alice viewer\n", 1, "2 of 3 fields (NAME ROLE TOKEN)", NULL},
        {"# users\nalice\n", 2, "1 of 3 fields", NULL},
        {"alice viewer SECRETaaaaaaaaaa1 # a comment\n", 1, "more than 3 fields", "SECRET"},
        {"alice viewer SECRET aaaaaaaaaa1\n", 1, "more than 3 fields", "SECRET"},
        {"alice viewer SECRET\vaaaaaaaaaa1\n", 1, "printable ASCII", "SECRET"},
        {"ok viewer 0123456789abcdef\nbob viewer SECRETaaaaaaaaaa1\nbob viewer x\n", 3,
         "the token is shorter", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        assert_refused(d, &cases[i], strlen(cases[i].text));

    /* No user at all. */
    const users_bad none[] = {{"", 0, "no user in it", NULL},
                              {"# nobody yet\n\n \t \r\n", 0, "no user in it", NULL}};
    for (size_t i = 0; i < 2; i++)
        assert_refused(d, &none[i], strlen(none[i].text));

    /* A token over WEB_TOKEN_MAX; a line over WEB_USERS_LINE_MAX. */
    static char text[WEB_USERS_FILE_MAX + 2];
    int n = snprintf(text, sizeof text, "ok viewer 0123456789abcdef\nalice viewer SECRET");
    memset(text + n, 'a', WEB_TOKEN_MAX - 6 + 1);
    n += WEB_TOKEN_MAX - 6 + 1;
    text[n++] = '\n';
    users_bad big = {text, 2, "the token is longer than 4096 characters", "SECRET"};
    assert_refused(d, &big, (size_t)n);
    n = snprintf(text, sizeof text, "ok viewer SECRETaaaaaaaaaa1\n#");
    memset(text + n, 'c', WEB_USERS_LINE_MAX);
    n += WEB_USERS_LINE_MAX;
    users_bad line = {text, 2, "longer than 8192 bytes", "SECRET"};
    assert_refused(d, &line, (size_t)n);
    text[n - 1] = '\n'; /* 8192 bytes and its LF: a line still */
    web_users_free(users_ok(d, text, (size_t)n));
    text[n - 1] = '\r'; /* 8192 with a CR: too long (the bound is on what the file holds) */
    assert_refused(d, &line, (size_t)n);

    /* WEB_USERS_MAX users, then one more. */
    n = 0;
    for (int i = 0; i <= WEB_USERS_MAX; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, "u%d viewer SECRET-%04d-0123456789\n", i,
                      i);
    users_bad many = {text, WEB_USERS_MAX + 1, "more than 256 users", "SECRET"};
    assert_refused(d, &many, (size_t)n);
    web_users *u = users_ok(d, text, (size_t)(strrchr(text, 'u') - text));
    assert_int_equal(web_users_count(u), WEB_USERS_MAX);
    assert_user(u, "Bearer SECRET-0000-0123456789", "u0", WEB_ROLE_VIEWER);
    assert_user(u, "Bearer SECRET-0255-0123456789", "u255", WEB_ROLE_VIEWER);
    assert_nobody(u, "Bearer SECRET-0256-0123456789");
    web_users_free(u);
    users_dir_remove(d);
}

/* What web_users_read shares with web_token_read: the file itself. */
static void users_file_checks(void **state)
{
    (void)state;
    char d[64], err[1024], path[300];
    web_users *u = NULL;
    users_dir(d, sizeof d);
    const char *ok = "alice viewer 0123456789abcdef-SECRET\n";
    const char *p = write_in(d, "users", ok, strlen(ok));
    assert_int_equal(chmod(p, 0640), 0);
    assert_int_equal(web_users_read(p, &u, err, sizeof err), -1);
    assert_null(u);
    assert_non_null(strstr(err, "--http-users "));
    assert_non_null(strstr(err, ": refused, it is readable by group "));
    assert_int_equal(chmod(p, 0604), 0);
    assert_int_equal(web_users_read(p, &u, err, sizeof err), -1);
    assert_non_null(strstr(err, "readable by every user (mode 0604)"));
    assert_null(strstr(err, "SECRET"));

    /* A FIFO nobody writes to: refused at once, not waited on. */
    snprintf(path, sizeof path, "%s/fifo", d);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(web_users_read(path, &u, err, sizeof err), -1);
    assert_non_null(strstr(err, "fifo: not a regular file"));
    assert_int_equal(web_users_read(d, &u, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file"));
    snprintf(path, sizeof path, "%s/missing", d);
    assert_int_equal(web_users_read(path, &u, err, sizeof err), -1);
    assert_non_null(strstr(err, "missing: No such file"));
    assert_int_equal(web_users_read("/proc/self/mem", &u, err, sizeof err), -1);
    assert_non_null(strstr(err, "--http-users /proc/self/mem: Input/output error"));

    /* WEB_USERS_FILE_MAX bytes, then one more: comment lines and a user. */
    static char text[WEB_USERS_FILE_MAX + 1];
    memset(text, '#', sizeof text);
    for (size_t i = 100; i < sizeof text; i += 100)
        text[i] = '\n';
    memcpy(text, ok, strlen(ok));
    web_users_free(users_ok(d, text, WEB_USERS_FILE_MAX));
    p = write_in(d, "users", text, sizeof text);
    assert_int_equal(web_users_read(p, &u, err, sizeof err), -1);
    assert_null(u);
    assert_non_null(strstr(err, "longer than 65536 bytes"));
    assert_null(strstr(err, "SECRET"));
    assert_int_equal(web_users_parse(text, sizeof text, "T", &u, err, sizeof err), -1);
    assert_string_equal(err, "--http-users T: longer than 65536 bytes");
    assert_int_equal(web_users_parse(ok, strlen(ok), "T", &u, err, sizeof err), 0);
    assert_int_equal(web_users_count(u), 1);
    web_users_free(u);
    users_dir_remove(d);
}

static void users_single(void **state)
{
    (void)state;
    web_users *u = NULL;
    char tok[WEB_TOKEN_MAX + 2];
    assert_int_equal(web_users_single("0123456789abcdef", &u), 0);
    assert_int_equal(web_users_count(u), 1);
    assert_user(u, "Bearer 0123456789abcdef", "token", WEB_ROLE_VIEWER);
    assert_nobody(u, "Bearer 0123456789abcdeF");
    assert_nobody(u, "Basic 0123456789abcdef");
    assert_nobody(u, NULL);
    web_users_free(u);
    const char *bad[] = {NULL, "", "0123456789abcde", "0123456789 abcdef", "0123456789abcdef\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        u = (web_users *)tok;
        assert_int_equal(web_users_single(bad[i], &u), -1);
        assert_null(u);
    }
    memset(tok, 'x', WEB_TOKEN_MAX);
    tok[WEB_TOKEN_MAX] = '\0';
    assert_int_equal(web_users_single(tok, &u), 0);
    web_users_free(u);
    tok[WEB_TOKEN_MAX] = 'x';
    tok[WEB_TOKEN_MAX + 1] = '\0';
    assert_int_equal(web_users_single(tok, &u), -1);

    web_users_free(NULL);
    assert_int_equal(web_users_count(NULL), 0);
    assert_string_equal(web_role_name(WEB_ROLE_VIEWER), "viewer");
    assert_string_equal(web_role_name(WEB_ROLE_OPERATOR), "operator");
    assert_string_equal(web_role_name((web_role)0), "unknown");
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
        cmocka_unit_test(users_file_good),
        cmocka_unit_test(users_file_errors),
        cmocka_unit_test(users_file_checks),
        cmocka_unit_test(users_single),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
