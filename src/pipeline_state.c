#include "pipeline_state.h"

#include <stdio.h>
#include <string.h>

static const char *const names[PS__COUNT] = {
    "INITIALIZED", "RUNNING",   "BUILD_SUCCEEDED", "DEPLOYING",
    "ROLLING_OUT", "SUCCEEDED", "ERROR",           "STOPPED",
};

#define BIT(s) (1u << (s))

/* allowed[from] = set of legal targets. */
static const unsigned allowed[PS__COUNT] = {
    [PS_INITIALIZED] = BIT(PS_RUNNING) | BIT(PS_DEPLOYING) | BIT(PS_ERROR) | BIT(PS_STOPPED),
    [PS_RUNNING] = BIT(PS_BUILD_SUCCEEDED) | BIT(PS_DEPLOYING) | BIT(PS_ERROR) | BIT(PS_STOPPED),
    [PS_BUILD_SUCCEEDED] = BIT(PS_DEPLOYING) | BIT(PS_STOPPED),
    [PS_DEPLOYING] = BIT(PS_ROLLING_OUT) | BIT(PS_ERROR) | BIT(PS_STOPPED),
    [PS_ROLLING_OUT] = BIT(PS_SUCCEEDED) | BIT(PS_ERROR),
};

const char *pipeline_status_name(pipeline_status s)
{
    return (unsigned)s < PS__COUNT ? names[s] : NULL;
}

int pipeline_status_parse(const char *name, pipeline_status *out)
{
    for (int i = 0; name && i < PS__COUNT; i++) {
        if (strcmp(names[i], name) == 0) {
            *out = (pipeline_status)i;
            return 0;
        }
    }
    return -1;
}

bool pipeline_transition_allowed(pipeline_status from, pipeline_status to)
{
    if ((unsigned)from >= PS__COUNT || (unsigned)to >= PS__COUNT)
        return false;
    return (allowed[from] & BIT(to)) != 0;
}

bool pipeline_status_terminal(pipeline_status s)
{
    return s == PS_SUCCEEDED || s == PS_ERROR || s == PS_STOPPED;
}

bool pipeline_status_unfinished(pipeline_status s)
{
    return s == PS_INITIALIZED || s == PS_RUNNING || s == PS_DEPLOYING || s == PS_ROLLING_OUT;
}

const char *pipeline_event_type(pipeline_status to)
{
    switch (to) {
    case PS_INITIALIZED: return "CREATED";
    case PS_RUNNING: return "BUILDING";
    case PS_ERROR: return "FAILED";
    default: return pipeline_status_name(to);
    }
}

static bool label_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

bool pipeline_label_valid(const char *s)
{
    if (!s || !*s)
        return false;
    size_t n = strlen(s);
    if (n > PIPELINE_LABEL_MAX || !label_char(s[0]) || !label_char(s[n - 1]))
        return false;
    for (size_t i = 1; i + 1 < n; i++)
        if (!label_char(s[i]) && s[i] != '-')
            return false;
    return true;
}

void pipeline_quote(char *out, size_t n, const char *s, size_t max)
{
    size_t o = 0;
    if (!n)
        return;
#define PUT(str)                                                                                   \
    do {                                                                                           \
        size_t l_ = strlen(str);                                                                   \
        if (o + l_ >= n)                                                                           \
            goto full;                                                                             \
        memcpy(out + o, str, l_);                                                                  \
        o += l_;                                                                                   \
    } while (0)
    PUT("\"");
    size_t i = 0;
    for (; s && s[i] && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        char tmp[8];
        if (c == '"' || c == '\\')
            snprintf(tmp, sizeof tmp, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            snprintf(tmp, sizeof tmp, "\\x%02x", c);
        else
            snprintf(tmp, sizeof tmp, "%c", c);
        PUT(tmp);
    }
    PUT("\"");
    if (s && s[i])
        PUT("...");
#undef PUT
full:
    out[o] = '\0';
}

int pipeline_label_check(const char *what, const char *value, char *err, size_t errlen)
{
    if (pipeline_label_valid(value))
        return 0;
    char q[300];
    pipeline_quote(q, sizeof q, value ? value : "", 64);
    snprintf(err, errlen, "%s %s: " PIPELINE_LABEL_RULE, what, q);
    return -1;
}

bool pipeline_id_valid(const char *s)
{
    if (!s || !*s)
        return false;
    size_t n = 0;
    for (; s[n]; n++)
        if (n >= PIPELINE_ID_MAX || !label_char(s[n]))
            return false;
    return true;
}
