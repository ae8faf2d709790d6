/*
 * pipeline — a pipeline in memory, in the words every unit of the store
 * shares: the row read back (pipeline, pipeline_event_row: their strings
 * owned by them, freed by pipeline_clear and its kin), who acts on one and
 * why (pipeline_operator, the reason's rule), a new id, and the negative
 * answers of the store's calls (PSTORE_*). Pure: no database.
 */
#ifndef OOPS_PIPELINE_H
#define OOPS_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>

#include "pipeline_state.h"

/* Negative results of the store's calls. */
enum {
    PSTORE_ILLEGAL = -1, /* transition not in the table; no SQL was sent */
    PSTORE_EXISTS = -2, /* an unfinished pipeline already exists for that application/environment */
    PSTORE_DB = -3,     /* database error; err says what (db_errno_is_connection tells if lost) */
    PSTORE_BAD = -4, /* bad input: a name that is not a lowercase DNS label, a long artifact, source
                        not JSON */
    PSTORE_PROMOTED = -5, /* that release was promoted already (promoted_from is unique) */
    PSTORE_STALE = -6,    /* not (any more) what the call asks for: nothing changed */
};

typedef struct pipeline {
    char id[25];
    char *namespace, *application, *environment;
    pipeline_status status;
    bool manual;                          /* deploy_mode = 'manual' */
    char *artifact;                       /* may be NULL */
    char *source;                         /* JSON text, may be NULL */
    char *message;                        /* may be NULL */
    char *trigger_type;                   /* "release" | "rollback" */
    char *deploy_requested_at;            /* NULL unless a manual deploy was requested */
    char *created_at, *status_changed_at; /* "YYYY-MM-DD HH:MM:SS.ffffff" UTC */
    char *driven_by;                      /* server that made the last transition, may be NULL */
    double status_age_s; /* seconds since status_changed_at, on the database's clock */
    long long
        lock_owner;    /* pipeline_store_list_owned: IS_USED_LOCK('oops:pipeline:ID'), 0 = free */
    char *hold;        /* "window" | "freeze" | "slot" while waiting to deploy, else may be NULL */
    char *override_at; /* set by `oopsctl deploy --override`: windows and freezes hold it no more */
    char *rollback_of; /* an automatic rollback: the release whose failure made it */
    char *promoted_from; /* a promotion: the release whose artifact it releases */
    /* A canary (issue 38, lua/oops/canary.lua): the step being run (1-based, 0
     * before the first) and since when; the weight last confirmed set and the
     * step it was set for (-1: none yet); why the step waits and an operator's
     * pending request ('promote', 'promote_full', 'abort'), else NULL. */
    int step;
    char *step_at;
    double step_age_s; /* seconds since step_at on the database's clock; 0 without one */
    int weight, weight_step;
    char *paused, *canary_request;
    /* Approvals (issue 39): how many distinct persons approved it, and their
     * names comma-separated in order (NULL when none). */
    int approvals;
    char *approved_by;
    char *actor; /* pipeline_store_query with `actors`: the person of its latest
                          operator event (issue 27), NULL when none */
} pipeline;

/* The most approvals one pipeline records (the policy asks for at most
 * this many: lua/oops/policy/application.lua). */
#define PIPELINE_APPROVALS_MAX 9

/* Waiting to deploy under a hold (window, freeze, slot): hold is set and
 * the pipeline is still INITIALIZED or BUILD_SUCCEEDED. */
static inline bool pipeline_held(const pipeline *p)
{
    return p->hold && (p->status == PS_INITIALIZED || p->status == PS_BUILD_SUCCEEDED);
}

typedef struct pipeline_event_row {
    long long id;
    char *event_type, *from_status, *to_status, *message, *server, *created_at;
    char *actor, *reason; /* an operator's event (issue 27): who and why; else NULL */
} pipeline_event_row;

/*
 * An operator's action (issue 27): the person (SUDO_USER or the login name
 * at the host, "alice@build-7"; a page user "bob@page") and why. Written on
 * the event it makes (pipeline_event.actor, .reason; its `server` stays the
 * process: oopsctl@HOST, or the oopsd server that ran a page action) and as
 * an operator_action row (the audit log) in the same transaction.
 */
#define PIPELINE_ACTOR_MAX 128
#define PIPELINE_REASON_MAX 500
typedef struct pipeline_operator {
    const char *actor;  /* required */
    const char *reason; /* NULL, or checked with pipeline_reason_check */
} pipeline_operator;

/* A reason as written by a person: 1 to PIPELINE_REASON_MAX bytes of valid
 * UTF-8 without control characters. 0, or -1 with a one-line message in err
 * naming `what` (e.g. "--reason") and the rule. */
int pipeline_reason_check(const char *what, const char *reason, char *err, size_t errlen);

void pipeline_clear(pipeline *p); /* frees the fields, not p */
void pipeline_list_free(pipeline *v, size_t n);
void pipeline_events_free(pipeline_event_row *v, size_t n);

/* Fill a new random id of `len` characters from [a-z0-9] (len < size). */
void pipeline_new_id(char *out, size_t len);

#endif
