/*
 * lock_names — the names of the locks oopsd takes (GET_LOCK), defined once
 * for C and Lua. The Lua binding hands them over as oops.locks.names
 * (oops_locks.c); the scans, lua/oops/pipelines.lua, the scenarios, oopsctl
 * (`locks`) and the daemon (its name lock, /status "driving") all read them
 * from here, so none can drift from the others.
 */
#ifndef OOPS_LOCK_NAMES_H
#define OOPS_LOCK_NAMES_H

/* oops:pipeline:ID — held by the server driving pipeline ID (until it ends). */
#define OOPS_LOCK_PIPELINE_PREFIX "oops:pipeline:"
/* oops:server:NAME — held by server NAME for the life of its lock session. */
#define OOPS_LOCK_SERVER_PREFIX "oops:server:"
/* oops:leader:SCAN — held (sticky) by the one server running SCAN. */
#define OOPS_LOCK_LEADER_PREFIX "oops:leader:"
/* Serialises schema migrations (schema.c), on a work connection. */
#define OOPS_LOCK_MIGRATE "oops:migrate"

/*
 * The scans led by one server at a time, each under OOPS_LOCK_LEADER_PREFIX
 * + its name. The one list: lua/oops/leader.lua refuses to lead a scan not
 * in it (so a new leader scan cannot be left out), and `oopsctl locks` shows
 * a lock for each, so a new one appears there with no other edit.
 */
#define OOPS_LEADER_SCANS "restart", "alert", "notify", "retention", "promote"

#endif
