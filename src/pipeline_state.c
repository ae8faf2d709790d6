#include "pipeline_state.h"

#include <string.h>

static const char *const names[PS__COUNT] = {
    "INITIALIZED", "RUNNING", "BUILD_SUCCEEDED", "DEPLOYING",
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
    case PS_INITIALIZED:
        return "CREATED";
    case PS_RUNNING:
        return "BUILDING";
    case PS_ERROR:
        return "FAILED";
    default:
        return pipeline_status_name(to);
    }
}
