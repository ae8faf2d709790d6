/*
 * pipeline_state — the statuses of a pipeline and the transitions allowed
 * between them. Pure: no database, so the store can refuse an illegal
 * transition before any SQL is sent.
 */
#ifndef OOPS_PIPELINE_STATE_H
#define OOPS_PIPELINE_STATE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum pipeline_status {
    PS_INITIALIZED,
    PS_RUNNING,
    PS_BUILD_SUCCEEDED,
    PS_DEPLOYING,
    PS_ROLLING_OUT,
    PS_SUCCEEDED,
    PS_ERROR,
    PS_STOPPED,
    PS__COUNT
} pipeline_status;

/* "INITIALIZED" ...; NULL for an out-of-range value. */
const char *pipeline_status_name(pipeline_status s);
/* 0 and *out set, or -1 for an unknown name (case-sensitive, as stored). */
int pipeline_status_parse(const char *name, pipeline_status *out);
/* The transition table of DESIGN.md. */
bool pipeline_transition_allowed(pipeline_status from, pipeline_status to);
/* SUCCEEDED, ERROR, STOPPED. */
bool pipeline_status_terminal(pipeline_status s);
/* INITIALIZED, RUNNING, DEPLOYING, ROLLING_OUT: at most one per application
 * and environment (the database enforces it). */
bool pipeline_status_unfinished(pipeline_status s);
/* The notification event type announcing arrival in `to` (CREATED for
 * INITIALIZED, FAILED for ERROR, BUILDING for RUNNING, else the status). */
const char *pipeline_event_type(pipeline_status to);

#endif
