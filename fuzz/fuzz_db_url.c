/* fuzz_db_url — db_config_parse (--db / $OOPS_DB) and db_mask_url_password.
 *
 * Every input is used twice:
 *
 * 1. As a whole URL, parsed with and without an environment password.
 *    Asserted: the result is 0 or -1; a failure leaves a non-empty one-line
 *    message; a success gives a host or a socket, and a database; the
 *    config survives db_config_copy; db_config_where never shows the
 *    environment password; masking keeps the URL's length.
 *
 * 2. When it holds two tabs, as USER<TAB>PASSWORD<TAB>REST, built into
 *    mysql://USER:PASSWORD@REST with the password written three ways (as is,
 *    with its reserved characters percent-encoded, wholly percent-encoded),
 *    and into mysql://USER@REST with PASSWORD as $OOPS_DB_PASSWORD. Here the
 *    password is known, so the harness asserts that no 6-byte piece of it
 *    (decoded or as written) appears in the error message or in
 *    db_config_where, that a URL whose userinfo is unambiguous (USER without
 *    ':' or '@', REST without '@') yields exactly that password, and that
 *    masking hides all of it.
 *
 * "Appears" is judged against a reference run of the same URL with the
 * password's letters and digits rotated (a->b, 9->0): a piece found in the
 * message of both runs comes from the message's own text or from USER or
 * REST, not from the password.
 */
#include <ctype.h>

#include "db.h"
#include "fuzz_common.h"

#define WINDOW 6
#define ERRLEN 512

typedef struct bytes {
    char *p;
    size_t n;
} bytes;

static void add(bytes *b, const void *p, size_t n)
{
    b->p = realloc(b->p, b->n + n + 1);
    if (!b->p)
        abort();
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void adds(bytes *b, const char *s) { add(b, s, strlen(s)); }

enum encoding { ENC_RAW, ENC_RESERVED, ENC_FULL, ENC_COUNT };

static void encode(bytes *out, const char *p, size_t n, enum encoding e)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        int esc = e == ENC_FULL ||
                  (e == ENC_RESERVED && (c < 0x21 || c >= 0x7f || strchr("%@:/?#[]&=+ ", c)));
        if (esc) {
            char t[3] = {'%', hex[c >> 4], hex[c & 15]};
            add(out, t, 3);
        } else {
            add(out, &p[i], 1);
        }
    }
}

/* Letters and digits rotated, everything else kept: same shape, other text.
 * The two characters after a '%' are kept too, so that a percent-escape
 * written in the password stays the same escape. */
static char *rotate(const char *p, size_t n)
{
    char *r = malloc(n + 1);
    if (!r)
        abort();
    size_t keep = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (keep) {
            keep--;
            r[i] = c;
            continue;
        }
        if (c == '%')
            keep = 2;
        if (c >= 'a' && c <= 'z')
            c = c == 'z' ? 'a' : c + 1;
        else if (c >= 'A' && c <= 'Z')
            c = c == 'Z' ? 'A' : c + 1;
        else if (c >= '0' && c <= '9')
            c = c == '9' ? '0' : c + 1;
        r[i] = c;
    }
    r[n] = '\0';
    return r;
}

static int has_alnum(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (isalnum((unsigned char)p[i]))
            return 1;
    return 0;
}

static int contains(const char *hay, size_t hn, const char *w, size_t wn)
{
    return hay && hn >= wn && memmem(hay, hn, w, wn) != NULL;
}

/* The first 6-byte piece of secret[0..n) that `shown` holds and `ref` (the
 * rotated run) and the non-secret parts do not; NULL if none. */
static const char *leaked(const char *secret, size_t n, const char *shown, const char *ref,
                          const bytes *user, const bytes *rest)
{
    if (!shown)
        return NULL;
    for (size_t i = 0; i + WINDOW <= n; i++) {
        const char *w = secret + i;
        if (memchr(w, '\0', WINDOW) || !has_alnum(w, WINDOW))
            continue;
        if (contains(shown, strlen(shown), w, WINDOW) &&
            !contains(ref, ref ? strlen(ref) : 0, w, WINDOW) &&
            !contains(user->p, user->n, w, WINDOW) && !contains(rest->p, rest->n, w, WINDOW))
            return w;
    }
    return NULL;
}

typedef struct outcome {
    int rc;
    char err[ERRLEN];
    char where[600];
    db_config cfg;
} outcome;

/* Parse and check what holds for every URL; the caller frees o->cfg. */
static void parse(const uint8_t *data, size_t size, const char *url, const char *envpw, outcome *o)
{
    memset(o, 0, sizeof *o);
    o->rc = db_config_parse(&o->cfg, url, envpw, o->err, sizeof o->err);
    if (o->rc != 0 && o->rc != -1)
        fuzz_fail(data, size, "db_config_parse returned %d", o->rc);
    if (o->rc == -1) {
        if (!o->err[0])
            fuzz_fail(data, size, "db_config_parse failed without a message");
        if (strchr(o->err, '\n') || strchr(o->err, '\r'))
            fuzz_fail(data, size, "error message spans lines: %s", o->err);
        /* A failed parse owns nothing (a leak shows up in LeakSanitizer). */
        memset(&o->cfg, 0, sizeof o->cfg);
        return;
    }
    db_config *c = &o->cfg;
    if (!c->socket && (!c->host || !*c->host))
        fuzz_fail(data, size, "accepted without a host or socket");
    if (!c->database || !*c->database)
        fuzz_fail(data, size, "accepted without a database");
    if (!c->user)
        fuzz_fail(data, size, "accepted without a user");
    if (c->port > 65535)
        fuzz_fail(data, size, "port %u", c->port);
    db_config_where(c, o->where, sizeof o->where);
    db_config copy;
    if (db_config_copy(&copy, c) == 0) {
        if (strcmp(copy.user, c->user) != 0 || (!c->password) != (!copy.password) ||
            (c->password && strcmp(copy.password, c->password) != 0) ||
            (c->host && strcmp(copy.host, c->host) != 0) ||
            strcmp(copy.database, c->database) != 0 || copy.port != c->port)
            fuzz_fail(data, size, "db_config_copy differs from its source");
        db_config_free(&copy);
    }
}

static void check_env_secret(const uint8_t *data, size_t size, const char *url, const char *envpw,
                             const outcome *o)
{
    static const bytes none = {NULL, 0};
    bytes whole = {(char *)url, strlen(url)};
    const char *w = leaked(envpw, strlen(envpw), o->rc ? o->err : o->where, NULL, &whole, &none);
    if (w)
        fuzz_fail(data, size, "the environment password shows in \"%s\" (piece \"%.*s\")",
                  o->rc ? o->err : o->where, WINDOW, w);
}

/* 1: the input as a whole URL. */
static void whole_url(const uint8_t *data, size_t size)
{
    static const char envpw[] = "Env-Secret-Pw-q7Zk";
    char *url = fuzz_cstr(data, size);
    outcome o;
    parse(data, size, url, NULL, &o);
    db_config_free(&o.cfg);
    parse(data, size, url, envpw, &o);
    check_env_secret(data, size, url, envpw, &o);
    db_config_free(&o.cfg);
    size_t len = strlen(url);
    db_mask_url_password(url);
    if (strlen(url) != len)
        fuzz_fail(data, size, "masking changed the URL's length");
    free(url);
}

/* 2: USER \t PASSWORD \t REST with a known password. */
static void known_password(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    const char *t1 = memchr(p, '\t', size);
    const char *t2 = t1 ? memchr(t1 + 1, '\t', (size_t)(end - t1 - 1)) : NULL;
    if (!t2)
        return;
    bytes user = {NULL, 0}, rest = {NULL, 0};
    add(&user, p, (size_t)(t1 - p));
    add(&rest, t2 + 1, (size_t)(end - t2 - 1));
    const char *pw = t1 + 1;
    size_t pwn = (size_t)(t2 - pw);
    char *pwref = rotate(pw, pwn);
    char *pwc = fuzz_cstr((const uint8_t *)pw, pwn);
    int plain_user = !memchr(user.p, ':', user.n) && !memchr(user.p, '@', user.n) &&
                     !memchr(user.p, '\0', user.n);
    int unambiguous = plain_user && !memchr(rest.p, '@', rest.n) && !memchr(rest.p, '\0', rest.n);
    int pw_cstr = !memchr(pw, '\0', pwn);

    for (int e = 0; e < ENC_COUNT; e++) {
        bytes enc = {NULL, 0}, encref = {NULL, 0}, url = {NULL, 0}, urlref = {NULL, 0};
        encode(&enc, pw, pwn, (enum encoding)e);
        encode(&encref, pwref, pwn, (enum encoding)e);
        adds(&url, "mysql://");
        add(&url, user.p, user.n);
        adds(&url, ":");
        add(&url, enc.p, enc.n);
        adds(&url, "@");
        add(&url, rest.p, rest.n);
        adds(&urlref, "mysql://");
        add(&urlref, user.p, user.n);
        adds(&urlref, ":");
        add(&urlref, encref.p, encref.n);
        adds(&urlref, "@");
        add(&urlref, rest.p, rest.n);

        outcome o, r;
        parse(data, size, url.p, NULL, &o);
        parse(data, size, urlref.p, NULL, &r);
        const char *shown = o.rc ? o.err : o.where;
        const char *refshown = r.rc == o.rc ? (r.rc ? r.err : r.where) : NULL;
        /* A NUL byte ends the URL early: what follows is no longer the password. */
        int whole = strlen(url.p) == url.n;
        const char *w = whole ? leaked(pw, pwn, shown, refshown, &user, &rest) : NULL;
        if (!w && whole)
            w = leaked(enc.p, enc.n, shown, refshown, &user, &rest);
        if (w)
            fuzz_fail(data, size, "the password (encoding %d) shows in \"%s\" (piece \"%.*s\")", e,
                      shown, WINDOW, w);
        /* With an unambiguous userinfo, the password is exactly what was written. */
        if (o.rc == 0 && unambiguous && pw_cstr && pwn > 0 &&
            (e != ENC_RAW || !memchr(pw, '%', pwn)) &&
            (!o.cfg.password || strcmp(o.cfg.password, pwc) != 0))
            fuzz_fail(data, size, "password (encoding %d) decoded as something else", e);
        db_config_free(&o.cfg);
        db_config_free(&r.cfg);

        /* Masking: with only the password differing, masked URLs are equal. */
        if (unambiguous && strlen(url.p) == url.n && strlen(urlref.p) == urlref.n) {
            db_mask_url_password(url.p);
            db_mask_url_password(urlref.p);
            if (strcmp(url.p, urlref.p) != 0)
                fuzz_fail(data, size, "masking left part of the password (encoding %d): %s", e,
                          url.p);
        }
        free(enc.p);
        free(encref.p);
        free(url.p);
        free(urlref.p);
    }

    /* The password from the environment, for a URL without one. */
    if (pw_cstr && pwn > 0) {
        bytes url = {NULL, 0}, urlref = {NULL, 0};
        adds(&url, "mysql://");
        add(&url, user.p, user.n);
        adds(&url, "@");
        add(&url, rest.p, rest.n);
        adds(&urlref, url.p);
        const char *envpw = pwc;
        outcome o, r;
        parse(data, size, url.p, envpw, &o);
        parse(data, size, urlref.p, pwref, &r);
        const char *shown = o.rc ? o.err : o.where;
        const char *refshown = r.rc == o.rc ? (r.rc ? r.err : r.where) : NULL;
        const char *w =
            strlen(url.p) == url.n ? leaked(pw, pwn, shown, refshown, &user, &rest) : NULL;
        if (w)
            fuzz_fail(data, size, "the environment password shows in \"%s\" (piece \"%.*s\")",
                      shown, WINDOW, w);
        if (o.rc == 0 && unambiguous && (!o.cfg.password || strcmp(o.cfg.password, envpw) != 0))
            fuzz_fail(data, size, "the environment password was not used");
        db_config_free(&o.cfg);
        db_config_free(&r.cfg);
        free(url.p);
        free(urlref.p);
    }
    free(pwref);
    free(pwc);
    free(user.p);
    free(rest.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    whole_url(data, size);
    known_password(data, size);
    return 0;
}
