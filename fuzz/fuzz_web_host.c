/* fuzz_web_host — the Host header check against DNS rebinding (src/web.c):
 * web_host_parse, web_host_allowed, web_hosts_add, web_hosts_listen.
 *
 * The input, as a C string (up to its first NUL), is read as a Host header
 * value, as a --http-host value and as a --listen value. Asserted:
 *   - web_host_parse: the canonical host is "" exactly when the kind is
 *     WEB_HOST_BAD; it holds no upper case letter and at most
 *     WEB_HOST_NAME_MAX bytes; a name is made of [a-z0-9.-] only, an IPv4
 *     or IPv6 literal parses with inet_pton; the canonical form parses back
 *     to itself (IPv6 in brackets); an input over WEB_HOST_HEADER_MAX bytes
 *     is refused; the ASCII upper-cased input gives the same answer.
 *   - web_host_allowed: accepted only when the value parses, and then only
 *     as localhost, 127.0.0.0/8, ::1, the local address, or a listed name;
 *     the same answer for the upper-cased input.
 *   - web_hosts_add: a name it takes is then accepted as a Host, with and
 *     without a port; a refusal has a one-line printable message naming
 *     --http-host; it never holds more than WEB_HOSTS_MAX names (+ --listen).
 *   - web_hosts_listen: never adds more than one entry.
 */
#include <arpa/inet.h>
#include <ctype.h>

#include "fuzz_common.h"
#include "web.h"

static const uint8_t *cur_data;
static size_t cur_size;

#define FAIL(...) fuzz_fail(cur_data, cur_size, __VA_ARGS__)

static void check_canon(const char *in, web_host_kind k, const char *h)
{
    size_t n = strlen(h);
    if ((k == WEB_HOST_BAD) != (n == 0))
        FAIL("kind %d with canonical \"%s\"", k, h);
    if (n > WEB_HOST_NAME_MAX)
        FAIL("canonical host of %zu bytes", n);
    if (strlen(in) > WEB_HOST_HEADER_MAX && k != WEB_HOST_BAD)
        FAIL("a value of %zu bytes accepted", strlen(in));
    unsigned char bin[16];
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        if (c >= 'A' && c <= 'Z')
            FAIL("upper case in canonical \"%s\"", h);
        if (k == WEB_HOST_NAME &&
            !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-'))
            FAIL("name \"%s\" holds '%c'", h, c);
    }
    if (k == WEB_HOST_IPV4 && inet_pton(AF_INET, h, bin) != 1)
        FAIL("IPv4 \"%s\" does not parse", h);
    if (k == WEB_HOST_IPV6 && inet_pton(AF_INET6, h, bin) != 1)
        FAIL("IPv6 \"%s\" does not parse", h);
    if (k == WEB_HOST_BAD)
        return;
    char again[WEB_HOST_NAME_MAX + 8], h2[WEB_HOST_NAME_MAX + 1];
    snprintf(again, sizeof again, k == WEB_HOST_IPV6 ? "[%s]" : "%s", h);
    if (web_host_parse(again, h2, sizeof h2) != k || strcmp(h, h2) != 0)
        FAIL("canonical \"%s\" parses as \"%s\"", again, h2);
}

static bool listed(const web_hosts *hs, const char *h)
{
    for (size_t i = 0; i < hs->n; i++)
        if (strcmp(hs->name[i], h) == 0)
            return true;
    return false;
}

static void check_allowed(const web_hosts *hs, const char *in, const char *upper)
{
    static const char local[] = "10.1.2.3";
    bool ok = web_host_allowed(hs, in, local);
    if (ok != web_host_allowed(hs, upper, local))
        FAIL("allowed depends on the case");
    if (!ok)
        return;
    char h[WEB_HOST_NAME_MAX + 1];
    web_host_kind k = web_host_parse(in, h, sizeof h);
    if (k == WEB_HOST_BAD)
        FAIL("a malformed Host is allowed");
    bool why = (k == WEB_HOST_NAME && strcmp(h, "localhost") == 0) ||
               (k == WEB_HOST_IPV4 && strncmp(h, "127.", 4) == 0) ||
               (k == WEB_HOST_IPV6 && strcmp(h, "::1") == 0) ||
               (k != WEB_HOST_NAME && strcmp(h, local) == 0) || listed(hs, h);
    if (!why)
        FAIL("\"%s\" (canonical \"%s\") allowed for no reason", in, h);
}

static void check_add(const char *in)
{
    web_hosts hs = {0};
    char err[512] = "";
    web_hosts_listen(&hs, "127.0.0.1:7070");
    if (web_hosts_add(&hs, in, err, sizeof err) == 0) {
        char with_port[WEB_HOST_HEADER_MAX + 16];
        if (!web_host_allowed(&hs, in, NULL))
            FAIL("--http-host taken but not allowed as a Host");
        snprintf(with_port, sizeof with_port, "%s:8443", in);
        if (strlen(in) + 5 <= WEB_HOST_HEADER_MAX && !web_host_allowed(&hs, with_port, NULL))
            FAIL("--http-host taken but not allowed with a port");
        return;
    }
    if (!strstr(err, "--http-host"))
        FAIL("refusal without the flag's name: %s", err);
    for (const char *p = err; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            FAIL("refusal message holds byte 0x%02x", (unsigned char)*p);
    for (int i = 0; i < WEB_HOSTS_MAX + 4; i++)
        web_hosts_add(&hs, "h.example", err, sizeof err);
    if (hs.n > WEB_HOSTS_MAX + 1)
        FAIL("%zu names held", hs.n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cur_data = data;
    cur_size = size;
    char *in = fuzz_cstr(data, size);
    char *upper = fuzz_cstr(data, size);
    for (char *p = upper; *p; p++)
        *p = (char)toupper((unsigned char)*p);

    char h[WEB_HOST_NAME_MAX + 1], hu[WEB_HOST_NAME_MAX + 1];
    web_host_kind k = web_host_parse(in, h, sizeof h);
    check_canon(in, k, h);
    if (web_host_parse(upper, hu, sizeof hu) != k || strcmp(h, hu) != 0)
        FAIL("parse depends on the case: \"%s\" vs \"%s\"", h, hu);

    web_hosts hs = {0};
    char err[512];
    web_hosts_listen(&hs, in);
    if (hs.n > 1)
        FAIL("web_hosts_listen added %zu", hs.n);
    web_hosts_add(&hs, "oops.example", err, sizeof err);
    web_hosts_add(&hs, "[2001:db8::1]", err, sizeof err);
    check_allowed(&hs, in, upper);
    check_add(in);
    free(in);
    free(upper);
    return 0;
}
