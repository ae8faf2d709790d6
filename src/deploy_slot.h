/*
 * deploy_slot — deploy slots (issue 26, the deploy_slot table): at most
 * `count` pipelines of one environment deploying at once, each naming the
 * numbered slot it holds; the others wait in line, rollbacks first, then the
 * oldest. A slot is held while its pipeline is DEPLOYING or ROLLING_OUT and
 * free again after, with no release to write. pipeline_store_transition_ex
 * (pipeline_store.h) claims one with the transition to DEPLOYING.
 */
#ifndef OOPS_DEPLOY_SLOT_H
#define OOPS_DEPLOY_SLOT_H

#include "db.h"

/* The most deploy slots one environment may have (deploy { concurrency }). */
#define DEPLOY_SLOTS_MAX 100

/* The environment's slot rows 1..count (1 to DEPLOY_SLOTS_MAX), made once
 * (INSERT IGNORE) outside any transaction: the insert's locks would make two
 * claims deadlock. 0, or the database's error number (e says why). */
unsigned deploy_slot_ensure(db_conn *c, const char *env, unsigned count, char *e, size_t elen);

/* A slot of env's first `count` (1 to DEPLOY_SLOTS_MAX; env's rows made by
 * deploy_slot_ensure) for pipeline id, inside the caller's transaction: the
 * environment's slot rows are locked first, so claims of one environment
 * take turns, and the claim is the transaction's to keep or roll back. 0
 * with *slot set when claimed (or held already by id); 0 with *slot 0 when
 * none is free (*slots_in_use: the slots held by others) or others wait
 * ahead of id (*slots_ahead: how many); or the database's error number (e says why). */
unsigned deploy_slot_claim(db_conn *c, const char *env, unsigned count, const char *id,
                           long long *slot, unsigned *slots_in_use, unsigned *slots_ahead, char *e,
                           size_t elen);

#endif
