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

/*
 * Names. Namespace, application and environment are lowercase DNS labels,
 * the policy's own rule (is_label in lua/oops/policy/values.lua):
 * ^[a-z0-9]([a-z0-9-]*[a-z0-9])?$, at most 63 characters. The database
 * compares them byte for byte (utf8mb4_nopad_bin), so "SHOP" or "shop "
 * would be other names: they are refused before they are stored.
 */
#define PIPELINE_LABEL_MAX 63
#define PIPELINE_LABEL_RULE                                                                        \
    "must be a lowercase DNS label (a-z, 0-9 and \"-\", not at either end, at most 63 "            \
    "characters)"
bool pipeline_label_valid(const char *s);
/* 0, or -1 with `WHAT "VALUE": must be a lowercase DNS label (...)` in err;
 * VALUE is shown escaped (\xNN for anything but printable ASCII, cut after
 * 64 bytes), so the message is safe to print. */
int pipeline_label_check(const char *what, const char *value, char *err, size_t errlen);

/* Pipeline ids: generated as 12 characters from [a-z0-9]; 1 to 64 of them
 * are accepted (rows written by other tools). */
#define PIPELINE_ID_MAX 64
bool pipeline_id_valid(const char *s);

/* Write s into out (NUL-terminated, size n) as a double-quoted string with
 * '"', '\\' and every byte outside printable ASCII escaped (\", \\, \xNN), cut
 * after `max` input bytes with "..." — a value quoted in an error message. */
void pipeline_quote(char *out, size_t n, const char *s, size_t max);

#endif
