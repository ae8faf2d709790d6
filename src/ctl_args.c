#include "ctl_args.h"

#include <stdio.h>
#include <string.h>

#include "utf8.h"

/* A value as it appears in messages: quoted, escaped, cut after 64 bytes. */
#define QUOTE(q, s) pipeline_quote(q, sizeof q, s, 64)

int ctl_parse_flags(int argc, char *const *argv, ctl_flag *flags, size_t nflags,
                    bool stop_at_positional, const char **pos, size_t maxpos, size_t *npos,
                    int *used, char *err, size_t errlen)
{
    char q[300];
    bool only_positional = false;
    if (npos)
        *npos = 0;
    int i = 0;
    for (; i < argc; i++) {
        const char *w = argv[i];
        if (only_positional || w[0] != '-') {
            if (stop_at_positional)
                break;
            if (!npos || *npos >= maxpos) {
                QUOTE(q, w);
                snprintf(err, errlen, "unexpected argument %s", q);
                return -1;
            }
            pos[(*npos)++] = w;
            continue;
        }
        if (strcmp(w, "--") == 0) {
            only_positional = true;
            continue;
        }
        /* "--name=value" or "--name" [value] */
        const char *eq = strncmp(w, "--", 2) == 0 ? strchr(w, '=') : NULL;
        size_t nlen = eq ? (size_t)(eq - w) : strlen(w);
        /* The first entry of that name not given yet: a name listed N times
         * may be given N times (a repeatable flag). */
        ctl_flag *f = NULL;
        size_t slots = 0;
        for (size_t k = 0; k < nflags; k++)
            if (strlen(flags[k].name) == nlen && strncmp(flags[k].name, w, nlen) == 0) {
                slots++;
                if (!f || (f->given && !flags[k].given))
                    f = &flags[k];
            }
        if (!f) {
            QUOTE(q, w);
            snprintf(err, errlen, "unknown option %s", q);
            return -1;
        }
        if (f->given) {
            if (slots > 1)
                snprintf(err, errlen, "%s is given more than %zu times", f->name, slots);
            else
                snprintf(err, errlen, "%s is given more than once", f->name);
            return -1;
        }
        const char *value = NULL;
        if (f->has_value) {
            if (eq)
                value = eq + 1;
            else if (i + 1 < argc)
                value = argv[++i];
            else {
                snprintf(err, errlen, "%s needs a value", f->name);
                return -1;
            }
            if (!*value) {
                snprintf(err, errlen, "%s \"\": the value is empty", f->name);
                return -1;
            }
        } else if (eq) {
            QUOTE(q, eq + 1);
            snprintf(err, errlen, "%s takes no value (got %s)", f->name, q);
            return -1;
        }
        f->given = true;
        f->value = value;
    }
    if (used)
        *used = i;
    return 0;
}

static const char STATUS_LIST[] = "INITIALIZED, RUNNING, BUILD_SUCCEEDED, DEPLOYING, ROLLING_OUT, "
                                  "SUCCEEDED, ERROR, STOPPED";

/* ASCII case-insensitive match of s[0..n) against a status name. */
static int status_of(const char *s, size_t n, pipeline_status *out)
{
    for (int st = 0; st < PS__COUNT; st++) {
        const char *name = pipeline_status_name((pipeline_status)st);
        if (strlen(name) != n)
            continue;
        size_t k = 0;
        for (; k < n; k++) {
            char c = s[k];
            if (c >= 'a' && c <= 'z')
                c = (char)(c - 'a' + 'A');
            if (c != name[k])
                break;
        }
        if (k == n) {
            *out = (pipeline_status)st;
            return 0;
        }
    }
    return -1;
}

int ctl_parse_status(const char *flag, const char *s, pipeline_status *out, char *err,
                     size_t errlen)
{
    char q[300];
    if (s && status_of(s, strlen(s), out) == 0)
        return 0;
    QUOTE(q, s ? s : "");
    snprintf(err, errlen, "%s %s: not a status (one of %s; any case)", flag, q, STATUS_LIST);
    return -1;
}

int ctl_parse_statuses(const char *flag, const char *s, unsigned *mask, char *err, size_t errlen)
{
    char q[300], e[300];
    *mask = 0;
    if (!s || !*s) {
        snprintf(err, errlen, "%s \"\": the value is empty (one or more of %s, with commas)", flag,
                 STATUS_LIST);
        return -1;
    }
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        pipeline_status st;
        if (n == 0) {
            QUOTE(q, s);
            snprintf(err, errlen,
                     "%s %s: an empty status in the list (write S1,S2 with nothing between commas "
                     "or at either end)",
                     flag, q);
            return -1;
        }
        if (status_of(p, n, &st) != 0) {
            char one[128];
            snprintf(one, sizeof one, "%.*s", (int)(n < 100 ? n : 100), p);
            QUOTE(e, one);
            QUOTE(q, s);
            snprintf(err, errlen, "%s %s: %s is not a status (one of %s; any case)", flag, q, e,
                     STATUS_LIST);
            return -1;
        }
        *mask |= 1u << st;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

int ctl_parse_number(const char *flag, const char *s, unsigned long long min,
                     unsigned long long max, const char *unit, unsigned long long *out, char *err,
                     size_t errlen)
{
    unsigned long long v = 0;
    bool ok = s && *s;
    for (const char *p = s; ok && *p; p++) {
        unsigned long long d = (unsigned long long)(*p - '0');
        if (*p < '0' || *p > '9' || d > max || v > (max - d) / 10) { /* v * 10 + d > max */
            ok = false;
            break;
        }
        v = v * 10 + d;
    }
    if (ok && v >= min && v <= max) {
        *out = v;
        return 0;
    }
    char q[300];
    QUOTE(q, s ? s : "");
    snprintf(err, errlen, "%s %s: must be a whole number%s%s from %llu to %llu", flag, q,
             unit ? " of " : "", unit ? unit : "", min, max);
    return -1;
}

int ctl_parse_duration(const char *flag, const char *s, unsigned long long max_ms,
                       unsigned long long *out_ms, char *err, size_t errlen)
{
    static const struct {
        const char *name;
        unsigned long long ms;
    } units[] = {{"d", 86400000ULL}, {"h", 3600000ULL}, {"m", 60000ULL}, {"s", 1000ULL}, {"ms", 1}};
    const size_t nunits = sizeof units / sizeof units[0];
    unsigned long long total = 0;
    size_t next_unit = 0; /* units are taken in order, each at most once */
    bool ok = s && *s;
    const char *p = s;
    while (ok && *p) {
        unsigned long long n = 0;
        const char *d = p;
        while (*p >= '0' && *p <= '9') {
            if (n > max_ms / 10) { /* too large whatever the unit */
                ok = false;
                break;
            }
            n = n * 10 + (unsigned long long)(*p++ - '0');
        }
        const char *u = p;
        while (*p >= 'a' && *p <= 'z')
            p++;
        size_t ulen = (size_t)(p - u), k = next_unit;
        while (k < nunits && (strlen(units[k].name) != ulen || strncmp(units[k].name, u, ulen)))
            k++;
        if (!ok || p == d || u == d || k == nunits || n > (max_ms - total) / units[k].ms) {
            ok = false;
            break;
        }
        total += n * units[k].ms;
        next_unit = k + 1;
    }
    if (ok && total > 0) {
        *out_ms = total;
        return 0;
    }
    char q[300];
    QUOTE(q, s ? s : "");
    snprintf(err, errlen,
             "%s %s: not a duration from 1ms to %llud (use e.g. 30m, 2h, 7d, 1h30m; units d, h, m, "
             "s, ms, largest first)",
             flag, q, max_ms / 86400000ULL);
    return -1;
}

int ctl_parse_app(const char *flag, const char *s, char *ns, char *app, char *err, size_t errlen)
{
    char q[300], e[600];
    const char *slash = s ? strchr(s, '/') : NULL;
    QUOTE(q, s ? s : "");
    if (!slash || strchr(slash + 1, '/')) {
        snprintf(err, errlen, "%s %s is not NAMESPACE/APPLICATION (like shop/api)", flag, q);
        return -1;
    }
    /* Enough of the namespace to show it (cut at 64 bytes) and to see that
     * it is too long: a label has at most 63 characters. */
    char part[PIPELINE_LABEL_MAX + 3];
    size_t nlen = (size_t)(slash - s), keep = nlen < sizeof part - 1 ? nlen : sizeof part - 1;
    memcpy(part, s, keep);
    part[keep] = '\0';
    if (pipeline_label_check("namespace", part, e, sizeof e) != 0) {
        snprintf(err, errlen, "%s %s: %s", flag, q, e);
        return -1;
    }
    memcpy(ns, part, keep + 1); /* a valid label: at most 63 bytes */
    if (pipeline_label_check("application", slash + 1, e, sizeof e) != 0) {
        snprintf(err, errlen, "%s %s: %s", flag, q, e);
        return -1;
    }
    memcpy(app, slash + 1, strlen(slash + 1) + 1);
    return 0;
}

int ctl_check_id(const char *s, char *err, size_t errlen)
{
    if (pipeline_id_valid(s))
        return 0;
    char q[300];
    QUOTE(q, s ? s : "");
    snprintf(
        err, errlen,
        "malformed pipeline id %s (1 to %d characters from a-z and 0-9, like \"k3v9x0b2m1qa\")", q,
        PIPELINE_ID_MAX);
    return -1;
}

int ctl_parse_step(const char *flag, const char *s, char *err, size_t errlen)
{
    static const char *const steps[] = {"build", "deploy", "health"};
    for (size_t i = 0; s && i < sizeof steps / sizeof *steps; i++)
        if (strcmp(s, steps[i]) == 0)
            return 0;
    char q[300];
    QUOTE(q, s ? s : "");
    snprintf(err, errlen, "%s %s: not one of build, deploy, health", flag, q);
    return -1;
}

int ctl_parse_server_name(const char *flag, const char *s, char *err, size_t errlen)
{
    size_t n = s ? strlen(s) : 0;
    bool ok = n >= 1 && n <= CTL_SERVER_NAME_MAX;
    for (size_t i = 0; ok && i < n; i++)
        ok = s[i] > 0x20 && s[i] < 0x7f;
    if (ok)
        return 0;
    char q[300];
    QUOTE(q, s ? s : "");
    snprintf(err, errlen,
             "%s %s: must be 1 to %d printable ASCII characters without spaces (unique among the "
             "servers)",
             flag, q, CTL_SERVER_NAME_MAX);
    return -1;
}

/* ---- terminal-safe text ------------------------------------------------ */

/* Code points shown escaped: C1 controls, and the invisible ones that
 * reorder or break what is shown (bidi embeddings/overrides/isolates, line
 * and paragraph separators). */
static bool hidden_cp(unsigned cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x200e || cp == 0x200f ||
           (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

void ctl_escape(buf *b, const char *s, size_t len, int mode)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t run = 0; /* bytes copied as they are, pending */
    for (size_t i = 0; s && i < len;) {
        unsigned c = p[i];
        char esc[16] = "";
        size_t adv = 1;
        if (c < 0x80) {
            bool kept = (c == '\n' || c == '\t') && mode == CTL_TEXT_LINES;
            if (kept)
                adv = 1; /* copied as it is */
            else if (c == '\n')
                snprintf(esc, sizeof esc, "\\n");
            else if (c == '\t')
                snprintf(esc, sizeof esc, "\\t");
            else if (c == '\r')
                snprintf(esc, sizeof esc, "\\r");
            else if (c < 0x20 || c == 0x7f)
                snprintf(esc, sizeof esc, "\\x%02x", c);
        } else {
            unsigned cp;
            size_t n = utf8_seq(p + i, len - i, &cp);
            if (n == 0)
                snprintf(esc, sizeof esc, "\\x%02x", c);
            else if (hidden_cp(cp))
                snprintf(esc, sizeof esc, "\\u%04x", cp), adv = n;
            else
                adv = n;
        }
        if (*esc) {
            buf_add(b, s + i - run, run);
            run = 0;
            buf_puts(b, esc);
        } else {
            run += adv;
        }
        i += adv;
    }
    if (run)
        buf_add(b, s + len - run, run);
    else if (!b->p)
        buf_add(b, "", 0); /* an empty string is still a string */
}
