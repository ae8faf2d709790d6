/* fuzz_web_users — the --http-users file (src/web.c): web_users_parse and
 * web_users_check.
 *
 * The input is the text of a users file (web_users_parse: what
 * web_users_read runs on the bytes it read). Asserted:
 *   - 0 with a set, or -1 with none and a message: one line of printable
 *     ASCII starting "--http-users FUZZ: ", naming a line (`line N:`) of the
 *     input when it names one, and holding no run of WEB_TOKEN_MIN or more
 *     non-space bytes, so no token (nor any field that may be one) can be
 *     in it;
 *   - a set holds 1 to WEB_USERS_MAX users, one per line that is neither
 *     blank nor a comment; each such line has exactly three fields, a valid
 *     name, a known role and a token of WEB_TOKEN_MIN to WEB_TOKEN_MAX
 *     printable characters; "Bearer TOKEN" (any case, more spaces) finds
 *     that line's user with its role; that token with one more byte no
 *     token may hold, or under another scheme, finds nobody.
 */
#include "fuzz_common.h"
#include "web.h"

static const uint8_t *cur_data;
static size_t cur_size;

#define FAIL(...) fuzz_fail(cur_data, cur_size, __VA_ARGS__)

static size_t count_lines(const char *s, size_t n)
{
    size_t lines = n > 0;
    for (size_t i = 0; i + 1 < n; i++)
        lines += s[i] == '\n';
    return lines;
}

static void check_refusal(const char *err, size_t lines)
{
    static const char prefix[] = "--http-users FUZZ: ";
    if (strncmp(err, prefix, sizeof prefix - 1) != 0)
        FAIL("refusal without the flag and the file: %s", err);
    size_t run = 0;
    for (const char *p = err; *p; p++) {
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            FAIL("refusal holds byte 0x%02x", (unsigned char)*p);
        run = *p == ' ' ? 0 : run + 1;
        if (run >= WEB_TOKEN_MIN)
            FAIL("refusal holds %zu bytes without a space (a token?): %s", run, err);
    }
    const char *l = strstr(err, ": line ");
    if (l) {
        unsigned long n = strtoul(l + 7, NULL, 10);
        if (n == 0 || n > lines)
            FAIL("refusal names line %lu of %zu: %s", n, lines, err);
    }
}

typedef struct field {
    const char *s;
    size_t len;
} field;

static size_t split(const char *s, size_t len, field f[4])
{
    size_t nf = 0, i = 0;
    while (nf < 4) {
        while (i < len && (s[i] == ' ' || s[i] == '\t'))
            i++;
        if (i == len)
            break;
        f[nf].s = s + i;
        while (i < len && s[i] != ' ' && s[i] != '\t')
            i++;
        f[nf].len = (size_t)(s + i - f[nf].s);
        nf++;
    }
    return nf;
}

/* One user's line of an accepted file. */
static void check_user(const web_users *u, const field f[3])
{
    if (f[0].len == 0 || f[0].len > WEB_USER_NAME_MAX)
        FAIL("a name of %zu bytes accepted", f[0].len);
    for (size_t i = 0; i < f[0].len; i++) {
        char c = f[0].s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || !strchr("._-", c)))
            FAIL("name byte %zu (0x%02x) accepted", i, (unsigned char)c);
    }
    web_role role = f[1].len == 6 && memcmp(f[1].s, "viewer", 6) == 0     ? WEB_ROLE_VIEWER
                    : f[1].len == 8 && memcmp(f[1].s, "operator", 8) == 0 ? WEB_ROLE_OPERATOR
                                                                          : 0;
    if (!role)
        FAIL("an unknown role accepted");
    if (f[2].len < WEB_TOKEN_MIN || f[2].len > WEB_TOKEN_MAX)
        FAIL("a token of %zu bytes accepted", f[2].len);
    for (size_t i = 0; i < f[2].len; i++)
        if ((unsigned char)f[2].s[i] <= ' ' || (unsigned char)f[2].s[i] >= 0x7f)
            FAIL("token byte 0x%02x accepted", (unsigned char)f[2].s[i]);
    char h[WEB_TOKEN_MAX + 16];
    web_user who;
    snprintf(h, sizeof h, "bEaReR   %.*s", (int)f[2].len, f[2].s);
    if (!web_users_check(u, h, &who))
        FAIL("a user's token finds nobody");
    if (strlen(who.name) != f[0].len || memcmp(who.name, f[0].s, f[0].len) != 0 || who.role != role)
        FAIL("a token finds %s (%s), not its line's user", who.name, web_role_name(who.role));
    snprintf(h, sizeof h, "Bearer %.*s\x01", (int)f[2].len, f[2].s);
    if (web_users_check(u, h, &who) || who.name[0])
        FAIL("a token with one more byte finds %s", who.name);
    snprintf(h, sizeof h, "Basic %.*s", (int)f[2].len, f[2].s);
    if (web_users_check(u, h, NULL))
        FAIL("another scheme finds a user");
}

static void check_set(const web_users *u, const char *s, size_t n)
{
    size_t users = 0;
    for (size_t at = 0; at < n;) {
        const char *nl = memchr(s + at, '\n', n - at);
        size_t len = (size_t)((nl ? nl : s + n) - (s + at));
        const char *line = s + at;
        at += len + 1;
        if (len > 0 && line[len - 1] == '\r')
            len--;
        field f[4];
        size_t nf = split(line, len, f);
        if (nf == 0 || f[0].s[0] == '#')
            continue;
        if (nf != 3)
            FAIL("a line of %zu fields accepted", nf);
        check_user(u, f);
        users++;
    }
    if (users == 0 || users > WEB_USERS_MAX || web_users_count(u) != users)
        FAIL("%zu users held for %zu lines of users", web_users_count(u), users);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cur_data = data;
    cur_size = size;
    const char *s = (const char *)data;
    char err[1024] = "";
    web_users *u = NULL;
    int rc = web_users_parse(s, size, "FUZZ", &u, err, sizeof err);
    if (rc == 0 && u)
        check_set(u, s, size);
    else if (rc == -1 && !u)
        check_refusal(err, count_lines(s, size));
    else
        FAIL("web_users_parse gave %d and %s set", rc, u ? "a" : "no");
    web_users_free(u);
    return 0;
}
