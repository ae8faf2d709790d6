#include "metrics.h"

#include <stdbool.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct series {
    char *name, *labels;
    metric_kind kind;
    double value, sum;
    unsigned long long count;
} series;

typedef struct meta {
    char *name, *help;
    metric_kind kind;
} meta;

struct metrics {
    series *s;
    size_t n, cap;
    meta *m;
    size_t nm, capm;
};

metrics *metrics_new(void) { return calloc(1, sizeof(metrics)); }

void metrics_free(metrics *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->s[i].name);
        free(m->s[i].labels);
    }
    for (size_t i = 0; i < m->nm; i++) {
        free(m->m[i].name);
        free(m->m[i].help);
    }
    free(m->s);
    free(m->m);
    free(m);
}

static meta *find_meta(const metrics *m, const char *name)
{
    for (size_t i = 0; i < m->nm; i++)
        if (strcmp(m->m[i].name, name) == 0)
            return &m->m[i];
    return NULL;
}

void metrics_describe(metrics *m, const char *name, metric_kind kind, const char *help)
{
    meta *x = find_meta(m, name);
    if (!x) {
        if (m->nm == m->capm) {
            size_t nc = m->capm ? m->capm * 2 : 16;
            meta *nmv = realloc(m->m, nc * sizeof *nmv);
            if (!nmv)
                return;
            m->m = nmv;
            m->capm = nc;
        }
        x = &m->m[m->nm++];
        x->name = strdup(name);
        x->help = NULL;
    }
    x->kind = kind;
    free(x->help);
    x->help = help ? strdup(help) : NULL;
}

static series *get(metrics *m, const char *name, const char *labels, metric_kind kind)
{
    labels = labels ? labels : "";
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->s[i].name, name) == 0 && strcmp(m->s[i].labels, labels) == 0)
            return &m->s[i];
    if (m->n == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 32;
        series *ns = realloc(m->s, nc * sizeof *ns);
        if (!ns)
            return NULL;
        m->s = ns;
        m->cap = nc;
    }
    series *s = &m->s[m->n++];
    memset(s, 0, sizeof *s);
    s->name = strdup(name);
    s->labels = strdup(labels);
    meta *x = find_meta(m, name);
    s->kind = x ? x->kind : kind;
    return s;
}

void metrics_add(metrics *m, const char *name, const char *labels, double v)
{
    series *s = get(m, name, labels, METRIC_COUNTER);
    if (s)
        s->value += v;
}

void metrics_set(metrics *m, const char *name, const char *labels, double v)
{
    series *s = get(m, name, labels, METRIC_GAUGE);
    if (s)
        s->value = v;
}

void metrics_observe(metrics *m, const char *name, const char *labels, double v)
{
    series *s = get(m, name, labels, METRIC_SUMMARY);
    if (s) {
        s->sum += v;
        s->count++;
    }
}

double metrics_get(const metrics *m, const char *name, const char *labels)
{
    labels = labels ? labels : "";
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->s[i].name, name) == 0 && strcmp(m->s[i].labels, labels) == 0)
            return m->s[i].kind == METRIC_SUMMARY || m->s[i].kind == METRIC_HISTOGRAM
                       ? (double)m->s[i].count
                       : m->s[i].value;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    const series *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->labels, y->labels);
}

static void sample(buf *out, const char *name, const char *suffix, const char *labels, double v)
{
    buf_printf(out, "%s%s", name, suffix);
    if (*labels)
        buf_printf(out, "{%s}", labels);
    if (isnan(v)) /* a figure with no data (the exposition format's spelling) */
        buf_printf(out, " NaN\n");
    else
        buf_printf(out, " %.17g\n", v);
}

/* The histogram whose bucket series NAME is (NAME_bucket, NAME described as a
 * histogram), or NULL. */
static const meta *bucket_of(const metrics *m, const char *name)
{
    static const char suffix[] = "_bucket";
    size_t n = strlen(name), k = sizeof suffix - 1;
    if (n <= k || strcmp(name + n - k, suffix) != 0)
        return NULL;
    for (size_t i = 0; i < m->nm; i++)
        if (m->m[i].kind == METRIC_HISTOGRAM && strlen(m->m[i].name) == n - k &&
            strncmp(m->m[i].name, name, n - k) == 0)
            return &m->m[i];
    return NULL;
}

void metrics_render(const metrics *m, buf *out)
{
    if (!m->n) /* nothing recorded (and m->s still NULL: no memcpy from it) */
        return;
    series *v = malloc(m->n * sizeof *v);
    if (!v)
        return;
    memcpy(v, m->s, m->n * sizeof *v);
    qsort(v, m->n, sizeof *v, by_name);
    static const char *const kinds[] = {"counter", "gauge", "summary", "histogram"};
    for (size_t i = 0; i < m->n; i++) {
        /* Buckets sort right after their histogram's _sum/_count series. */
        bool header = i == 0 || strcmp(v[i - 1].name, v[i].name) != 0;
        if (header && bucket_of(m, v[i].name))
            header = false;
        if (header) {
            meta *x = find_meta(m, v[i].name);
            if (x && x->help)
                buf_printf(out, "# HELP %s %s\n", v[i].name, x->help);
            buf_printf(out, "# TYPE %s %s\n", v[i].name, kinds[v[i].kind]);
        }
        if (v[i].kind == METRIC_SUMMARY || v[i].kind == METRIC_HISTOGRAM) {
            sample(out, v[i].name, "_sum", v[i].labels, v[i].sum);
            sample(out, v[i].name, "_count", v[i].labels, (double)v[i].count);
        } else {
            sample(out, v[i].name, "", v[i].labels, v[i].value);
        }
    }
    free(v);
}

void metrics_labels(buf *out, const char *const *kv)
{
    for (size_t i = 0; kv && kv[i]; i += 2) {
        if (i)
            buf_add(out, ",", 1);
        buf_printf(out, "%s=\"", kv[i]);
        for (const char *c = kv[i + 1] ? kv[i + 1] : ""; *c; c++) {
            if (*c == '"' || *c == '\\')
                buf_add(out, "\\", 1);
            if (*c == '\n')
                buf_puts(out, "\\n");
            else
                buf_add(out, c, 1);
        }
        buf_add(out, "\"", 1);
    }
}
