/*
 * oopsctl's actions: the operator's changes to pipelines — create, rollback,
 * stop, deploy (operator.c holds their rules and answers) — with who acts
 * and why, and, for create and rollback, the policy's word before anything
 * is created.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "buf.h"
#include "ctl.h"
#include "ctl_args.h"
#include "ctx.h"
#include "db.h"
#include "metrics.h"
#include "operator.h"
#include "pipeline_store.h"
#include "runtime.h"

/*
 * The policy's word on a new pipeline: load DIR as oopsd would
 * (oops.policy.load_dir, in this process's own Lua state) and look the
 * application and environment up. 0 when declared; otherwise 1 after a
 * message naming what is wrong (or every error of a broken policy).
 */
/* The servers' own checks, before anything is created: the application is
 * declared, the environment one of its environments, and (exec gateway) no
 * command of it would take a field of the new pipeline for an option
 * (exec/argv.lua's refusal, as pipelines.refusal runs it before every step). */
static const char POLICY_CHECK[] =
    "local dir, app, env, artifact, source, promote = ...\n"
    "local p, errs = require('oops.policy').load_dir(dir, { cron_parse = "
    "require('oops').cron.parse })\n"
    "if not p then return 'broken', table.concat(errs, '\\n') end\n"
    "local a = p.applications[app]\n"
    "if not a then\n"
    "  local names = {}\n"
    "  for name in pairs(p.applications) do names[#names + 1] = name end\n"
    "  table.sort(names)\n"
    "  if #names > 10 then names[11] = '...'; for i = #names, 12, -1 do names[i] = nil end end\n"
    "  return 'app', #names > 0 and table.concat(names, ', ') or 'none'\n"
    "end\n"
    "local known = false\n"
    "for _, e in ipairs(a.environments) do known = known or e == env end\n"
    "if not known then return 'env', table.concat(a.environments, ', ') end\n"
    "if promote then\n"
    "  local r = a.promote[env]\n"
    "  if not r then return 'nopromote', '' end\n"
    "  return 'ok', r.to\n"
    "end\n"
    "if p.gateway.kind ~= 'exec' then return 'ok' end\n"
    "local why = require('oops.gateways.exec').refusal(a, { id = 'new', namespace = a.namespace,\n"
    "  application = a.application, environment = env, artifact = artifact, source = source })\n"
    "if why then return 'refused', why end\n"
    "return 'ok'\n";

/* With promote_to (promote-now): not the command checks but the
 * application's promotion of env: its destination into promote_to. */
static int check_policy_as(const char *cmd, const char *dir, const char *app, const char *env,
                           const char *artifact, const char *source, char *promote_to,
                           size_t promote_len)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    oops_ctx ctx = {.loop = &loop};
    ctx.metrics = metrics_new();
    db_calls_init(&ctx.calls, ctx.loop, ctx.metrics);
    snprintf(ctx.server_name, sizeof ctx.server_name, "oopsctl");
    int rc = EXIT_INPUT;
    char err[4096];
    runtime *rt = runtime_new(&ctx, err, sizeof err);
    if (!rt) {
        fail(EXIT_INPUT, "%s: %s", cmd, err);
        goto out;
    }
    lua_State *L = runtime_state(rt);
    if (luaL_loadbuffer(L, POLICY_CHECK, sizeof POLICY_CHECK - 1, "=policy check") != LUA_OK) {
        fail(EXIT_INPUT, "%s: %s", cmd, lua_tostring(L, -1));
        goto out;
    }
    lua_pushstring(L, dir);
    lua_pushstring(L, app);
    lua_pushstring(L, env);
    lua_pushstring(L, artifact); /* NULL: nil */
    lua_pushstring(L, source);
    lua_pushboolean(L, promote_to != NULL);
    if (runtime_call(L, 6, 2, "checking the policy", err, sizeof err) != 0) {
        fail(EXIT_INPUT, "%s: checking against the policies in %s: %s", cmd, dir, err);
        goto out;
    }
    const char *verdict = lua_tostring(L, -2), *detail = lua_tostring(L, -1);
    if (verdict && strcmp(verdict, "ok") == 0) {
        rc = EXIT_OK;
        if (promote_to)
            snprintf(promote_to, promote_len, "%s", detail ? detail : "");
    } else if (verdict && strcmp(verdict, "nopromote") == 0)
        fail(EXIT_INPUT,
             "%s: %s does not promote from %s in the policies in %s (its promote = { %s = { to = "
             "ENV } })",
             cmd, app, env, dir, env);
    else if (verdict && strcmp(verdict, "app") == 0)
        fail(EXIT_INPUT, "%s: --app \"%s\" is not declared in the policies in %s (declared: %s)",
             cmd, app, dir, detail ? detail : "?");
    else if (verdict && strcmp(verdict, "env") == 0)
        fail(EXIT_INPUT,
             "%s: --env \"%s\" is not an environment of %s in the policies in %s (it declares: "
             "%s)",
             cmd, env, app, dir, detail ? detail : "?");
    else if (verdict && strcmp(verdict, "refused") == 0)
        fail(EXIT_INPUT, "%s: the servers would refuse this pipeline (policies in %s): %s", cmd,
             dir, detail ? detail : "?");
    else
        fail(EXIT_INPUT,
             "%s: the policies in %s did not load, so nothing was checked or created:\n%s", cmd,
             dir, detail ? detail : "?");
    lua_pop(L, 2);
out:
    runtime_free(rt);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    metrics_free(ctx.metrics);
    return rc;
}

static int check_policy(const char *cmd, const char *dir, const char *app, const char *env,
                        const char *artifact, const char *source)
{
    return check_policy_as(cmd, dir, app, env, artifact, source, NULL, 0);
}

/* An artifact reference: at most 255 bytes, no control characters. */
static int check_artifact(const char *s, char *err, size_t errlen)
{
    char q[300];
    pipeline_quote(q, sizeof q, s, 64);
    if (strlen(s) > 255) {
        snprintf(err, errlen, "--artifact %s: longer than 255 bytes", q);
        return -1;
    }
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            snprintf(err, errlen, "--artifact %s: holds a control character", q);
            return -1;
        }
    }
    return 0;
}

/* An operator's --reason (pipeline_reason_check: bounded, UTF-8, no
 * control character: it reaches the history, logs and notifications). */
static int check_reason(const char *cmd, const ctl_flag *reason)
{
    char err[256];
    if (reason->given && pipeline_reason_check("--reason", reason->value, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "%s: %s", cmd, err);
    return EXIT_OK;
}

/* Who acts, as the audit log and the events record it. */
static op_who who_of(const ctl *c, const ctl_flag *reason)
{
    return (op_who){.op = {.actor = c->person, .reason = reason->given ? reason->value : NULL},
                    .via = c->actor};
}

/* The line a command that made a pipeline ends with when no policy was
 * read: it went in unchecked (exit 0 all the same). */
static void warn_unchecked(const char *action)
{
    fail(EXIT_OK, "%s: not checked against a policy: pass --policies DIR or set OOPS_POLICIES",
         action);
}

/* What rollback and promote-now print for the pipeline they made: its id
 * (or --json's object) on stdout, what was chosen on stderr. */
static int print_made(ctl *c, const char *action, const op_result *r, bool checked)
{
    if (c->json) {
        buf b = {0};
        op_result_json(&b, action, r);
        printf("%s\n", b.p);
        buf_free(&b);
    } else {
        printf("%s\n", r->id);
    }
    fail(EXIT_OK, "%s", r->note);
    if (!checked)
        warn_unchecked(action);
    return EXIT_OK;
}

/* An op_* answer: EXIT_OK, or its message with oopsctl's exit code. */
static int op_exit(ctl *c, const char *cmd, const op_result *r)
{
    switch (r->code) {
    case OP_OK: return EXIT_OK;
    case OP_DB: return db_fail(c, cmd, r->error);
    case OP_STALE: return fail(EXIT_STALE, "%s", r->error);
    default: return fail(EXIT_INPUT, "%s", r->error);
    }
}

/* --app NS/APP and --env ENV, both required: EXIT_OK with ns and name
 * filled, or the exit code of the one line that says what was wrong. */
static int required_target(const char *cmd, const ctl_flag *app, const ctl_flag *env,
                           char ns[PIPELINE_LABEL_MAX + 1], char name[PIPELINE_LABEL_MAX + 1])
{
    char err[1024];
    if (!app->given)
        return fail(EXIT_INPUT, "%s: --app NS/APP is required", cmd);
    if (ctl_parse_app("--app", app->value, ns, name, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "%s: %s", cmd, err);
    if (!env->given)
        return fail(EXIT_INPUT, "%s: --env ENV is required", cmd);
    if (pipeline_label_check("--env", env->value, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "%s: %s", cmd, err);
    return EXIT_OK;
}

/* The policies to check against: --policies DIR, else $OOPS_POLICIES; NULL
 * when neither says (the command goes on unchecked, and says so). */
static const char *policies_dir(const ctl_flag *policies)
{
    const char *dir = policies->given ? policies->value : getenv("OOPS_POLICIES");
    return dir && *dir ? dir : NULL;
}

int cmd_create(ctl *c, int argc, char **argv)
{
    enum { F_APP, F_ENV, F_MANUAL, F_ARTIFACT, F_SOURCE, F_ROLLBACK, F_POLICIES, F_REASON };
    ctl_flag f[] = {
        [F_APP] = {"--app", true, false, NULL},
        [F_ENV] = {"--env", true, false, NULL},
        [F_MANUAL] = {"--manual", false, false, NULL},
        [F_ARTIFACT] = {"--artifact", true, false, NULL},
        [F_SOURCE] = {"--source", true, false, NULL},
        [F_ROLLBACK] = {"--rollback", false, false, NULL},
        [F_POLICIES] = {"--policies", true, false, NULL},
        [F_REASON] = {"--reason", true, false, NULL},
    };
    size_t npos = 0;
    PARSE(c, argc, argv, f, NULL, 0, &npos);
    char ns[PIPELINE_LABEL_MAX + 1], name[PIPELINE_LABEL_MAX + 1], err[1024];
    int rc = required_target("create", &f[F_APP], &f[F_ENV], ns, name);
    if (rc != EXIT_OK)
        return rc;
    if (f[F_ARTIFACT].given && check_artifact(f[F_ARTIFACT].value, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "create: %s", err);
    if ((rc = check_reason("create", &f[F_REASON])) != EXIT_OK)
        return rc;
    /* The policy, when we are told where it is: the application must be
     * declared and the environment one of its environments. */
    const char *dir = policies_dir(&f[F_POLICIES]);
    bool checked = dir != NULL;
    char app[2 * PIPELINE_LABEL_MAX + 2];
    snprintf(app, sizeof app, "%s/%s", ns, name);
    if (checked && (rc = check_policy("create", dir, app, f[F_ENV].value, f[F_ARTIFACT].value,
                                      f[F_SOURCE].value)) != EXIT_OK)
        return rc;
    if ((rc = open_db(c)) != EXIT_OK)
        return rc;
    op_who who = who_of(c, &f[F_REASON]);
    pipeline_new n = {
        .namespace = ns,
        .application = name,
        .environment = f[F_ENV].value,
        .manual = f[F_MANUAL].given,
        .artifact = f[F_ARTIFACT].value,
        .source = f[F_SOURCE].value,
        .trigger = f[F_ROLLBACK].given ? "rollback" : NULL,
        .actor = c->actor,
        .op = &who.op,
    };
    op_result r;
    if (op_create(c->db, &n, &who, &r) != OP_OK)
        return op_exit(c, "create", &r);
    if (c->json)
        printf("{\"id\":\"%s\",\"status\":\"INITIALIZED\"}\n", r.id);
    else
        printf("%s\n", r.id);
    if (!checked)
        warn_unchecked("create");
    return EXIT_OK;
}

/*
 * rollback: a new pipeline (trigger rollback, INITIALIZED) carrying the
 * artifact and source of an earlier SUCCEEDED pipeline of the same
 * application and environment; the build scan deploys it without a build
 * (REFERENCE.md 9). The target: --to ID, else the last SUCCEEDED release
 * before the current one that shipped another artifact
 * (pipeline_store_rollback_target). Beside an unfinished pipeline the
 * create hits the unique unfinished_key: exit 3, nothing changed
 * (operator.c, op_rollback).
 */
int cmd_rollback(ctl *c, int argc, char **argv)
{
    enum { F_APP, F_ENV, F_TO, F_POLICIES, F_REASON };
    ctl_flag f[] = {
        [F_APP] = {"--app", true, false, NULL},
        [F_ENV] = {"--env", true, false, NULL},
        [F_TO] = {"--to", true, false, NULL},
        [F_POLICIES] = {"--policies", true, false, NULL},
        [F_REASON] = {"--reason", true, false, NULL},
    };
    size_t npos = 0;
    PARSE(c, argc, argv, f, NULL, 0, &npos);
    char ns[PIPELINE_LABEL_MAX + 1], name[PIPELINE_LABEL_MAX + 1], err[1024];
    const char *env = f[F_ENV].value, *to = f[F_TO].value;
    int rc = required_target("rollback", &f[F_APP], &f[F_ENV], ns, name);
    if (rc != EXIT_OK)
        return rc;
    if (f[F_TO].given && ctl_check_id(to, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "rollback: --to: %s", err);
    if ((rc = check_reason("rollback", &f[F_REASON])) != EXIT_OK)
        return rc;
    const char *dir = policies_dir(&f[F_POLICIES]);
    bool checked = dir != NULL;
    char app[2 * PIPELINE_LABEL_MAX + 2];
    snprintf(app, sizeof app, "%s/%s", ns, name);
    if (checked && (rc = check_policy("rollback", dir, app, env, NULL, NULL)) != EXIT_OK)
        return rc;
    if ((rc = open_db(c)) != EXIT_OK)
        return rc;
    op_who who = who_of(c, &f[F_REASON]);
    op_result r;
    if (op_rollback(c->db, ns, name, env, to, &who, &r) != OP_OK)
        return op_exit(c, "rollback", &r);
    return print_made(c, "rollback", &r, checked); /* the note: which release was chosen */
}

int cmd_stop(ctl *c, int argc, char **argv)
{
    enum { F_EXPECT, F_REASON };
    ctl_flag f[] = {
        [F_EXPECT] = {"--expect", true, false, NULL}, [F_REASON] = {"--reason", true, false, NULL}};
    const char *pos[1], *id = NULL;
    size_t npos = 0;
    PARSE(c, argc, argv, f, pos, 1, &npos);
    int rc = need_id("stop", pos, npos, &id);
    if (rc != EXIT_OK)
        return rc;
    pipeline_status from = PS_INITIALIZED;
    char err[1024];
    if (f[F_EXPECT].given &&
        ctl_parse_status("--expect", f[F_EXPECT].value, &from, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "stop: %s", err);
    if ((rc = check_reason("stop", &f[F_REASON])) != EXIT_OK || (rc = open_db(c)) != EXIT_OK)
        return rc;
    op_who who = who_of(c, &f[F_REASON]);
    op_result r;
    if (op_stop(c->db, id, f[F_EXPECT].given ? &from : NULL, &who, &r) != OP_OK)
        return op_exit(c, "stop", &r);
    if (c->json) {
        buf b = {0};
        op_result_json(&b, "stop", &r);
        printf("%s\n", b.p);
        buf_free(&b);
    } else {
        printf("stopped %s (was %s)\n", id, pipeline_status_name(r.from));
    }
    return EXIT_OK;
}

int cmd_deploy(ctl *c, int argc, char **argv)
{
    enum { F_OVERRIDE, F_REASON };
    ctl_flag f[] = {[F_OVERRIDE] = {"--override", false, false, NULL},
                    [F_REASON] = {"--reason", true, false, NULL}};
    const char *pos[1], *id = NULL;
    size_t npos = 0;
    PARSE(c, argc, argv, f, pos, 1, &npos);
    int rc = need_id("deploy", pos, npos, &id);
    if (rc != EXIT_OK)
        return rc;
    if (f[F_OVERRIDE].given && !f[F_REASON].given)
        return fail(EXIT_INPUT, "deploy: --override needs --reason TEXT (it is kept in the "
                                "pipeline's history)");
    if ((rc = check_reason("deploy", &f[F_REASON])) != EXIT_OK || (rc = open_db(c)) != EXIT_OK)
        return rc;
    op_who who = who_of(c, &f[F_REASON]);
    op_result r;
    if (op_deploy(c->db, id, f[F_OVERRIDE].given, &who, &r) != OP_OK)
        return op_exit(c, "deploy", &r);
    if (c->json) {
        buf b = {0};
        op_result_json(&b, "deploy", &r);
        printf("%s\n", b.p);
        buf_free(&b);
    } else {
        printf("%s\n", r.note);
    }
    return EXIT_OK;
}

/* abort ID / promote ID [--full]: a canary request (issue 38), carried out
 * by the server driving the pipeline at its next tick. */
static int canary_request(ctl *c, const char *cmd, int argc, char **argv)
{
    bool promote = strcmp(cmd, "promote") == 0;
    enum { F_REASON, F_FULL };
    ctl_flag f[] = {
        [F_REASON] = {"--reason", true, false, NULL}, [F_FULL] = {"--full", false, false, NULL}};
    const char *pos[1], *id = NULL;
    size_t npos = 0;
    PARSE(c, argc, argv, f, pos, 1, &npos);
    int rc = need_id(cmd, pos, npos, &id);
    if (rc != EXIT_OK)
        return rc;
    if (!promote && f[F_FULL].given)
        return fail(EXIT_INPUT, "abort: unknown flag --full (promote --full skips to weight 100)");
    if (!f[F_REASON].given)
        return fail(EXIT_INPUT,
                    "%s: --reason TEXT is needed (it is kept in the pipeline's history)", cmd);
    if ((rc = check_reason(cmd, &f[F_REASON])) != EXIT_OK || (rc = open_db(c)) != EXIT_OK)
        return rc;
    op_who who = who_of(c, &f[F_REASON]);
    op_result r;
    const char *request = !promote ? "abort" : f[F_FULL].given ? "promote_full" : "promote";
    if (op_canary(c->db, id, request, &who, &r) != OP_OK)
        return op_exit(c, cmd, &r);
    if (c->json) {
        buf b = {0};
        op_result_json(&b, cmd, &r);
        printf("%s\n", b.p);
        buf_free(&b);
    } else {
        printf("%s\n", r.note);
    }
    return EXIT_OK;
}

int cmd_abort(ctl *c, int argc, char **argv) { return canary_request(c, "abort", argc, argv); }
int cmd_promote(ctl *c, int argc, char **argv) { return canary_request(c, "promote", argc, argv); }

/* approve ID / reject ID --reason TEXT (issue 39): an approval of a release
 * before its deploy (the two-person rule: never its creator's), or its
 * rejection (stopped). */
static int approval(ctl *c, const char *cmd, int argc, char **argv)
{
    enum { F_REASON };
    ctl_flag f[] = {[F_REASON] = {"--reason", true, false, NULL}};
    const char *pos[1], *id = NULL;
    size_t npos = 0;
    PARSE(c, argc, argv, f, pos, 1, &npos);
    int rc = need_id(cmd, pos, npos, &id);
    if (rc != EXIT_OK)
        return rc;
    if (!f[F_REASON].given)
        return fail(EXIT_INPUT,
                    "%s: --reason TEXT is needed (it is kept in the pipeline's history)", cmd);
    if ((rc = check_reason(cmd, &f[F_REASON])) != EXIT_OK || (rc = open_db(c)) != EXIT_OK)
        return rc;
    op_who who = who_of(c, &f[F_REASON]);
    op_result r;
    bool approve = strcmp(cmd, "approve") == 0;
    if ((approve ? op_approve(c->db, id, &who, &r) : op_reject(c->db, id, &who, &r)) != OP_OK)
        return op_exit(c, cmd, &r);
    if (c->json) {
        buf b = {0};
        op_result_json(&b, cmd, &r);
        printf("%s\n", b.p);
        buf_free(&b);
    } else if (approve) {
        printf("%s\n", tty(r.note));
    } else {
        printf("%s rejected: %s -> STOPPED\n", id, pipeline_status_name(r.from));
    }
    return EXIT_OK;
}

int cmd_approve(ctl *c, int argc, char **argv) { return approval(c, "approve", argc, argv); }
int cmd_reject(ctl *c, int argc, char **argv) { return approval(c, "reject", argc, argv); }

/*
 * promote-now ID --reason TEXT [--to ENV] [--policies DIR] (issue 39):
 * release ID's artifact and source in the environment its application's
 * policy promotes ID's environment to, now, the wait skipped
 * (operator.c, op_promote_now: once, whoever else tries). The destination
 * comes from the policy (--policies or $OOPS_POLICIES; --to, if given too,
 * must be it); without a policy --to names it.
 */
int cmd_promote_now(ctl *c, int argc, char **argv)
{
    enum { F_TO, F_POLICIES, F_REASON };
    ctl_flag f[] = {
        [F_TO] = {"--to", true, false, NULL},
        [F_POLICIES] = {"--policies", true, false, NULL},
        [F_REASON] = {"--reason", true, false, NULL},
    };
    const char *pos[1], *id = NULL;
    size_t npos = 0;
    PARSE(c, argc, argv, f, pos, 1, &npos);
    int rc = need_id("promote-now", pos, npos, &id);
    if (rc != EXIT_OK)
        return rc;
    char err[1024], to[PIPELINE_LABEL_MAX + 1] = "";
    if (f[F_TO].given && pipeline_label_check("--to", f[F_TO].value, err, sizeof err) != 0)
        return fail(EXIT_INPUT, "promote-now: %s", err);
    if ((rc = check_reason("promote-now", &f[F_REASON])) != EXIT_OK)
        return rc;
    const char *dir = policies_dir(&f[F_POLICIES]);
    bool checked = dir != NULL;
    if (!checked && !f[F_TO].given)
        return fail(EXIT_INPUT, "promote-now: without a policy (--policies DIR or OOPS_POLICIES) "
                                "--to ENV must name where it goes");
    if ((rc = open_db(c)) != EXIT_OK)
        return rc;
    op_who who = who_of(c, &f[F_REASON]);
    op_result r = {0};
    pipeline p;
    int got = pipeline_store_get(c->db, id, &p, err, sizeof err);
    if (got < 0)
        return fail(EXIT_DB, "promote-now: %s", err);
    if (got == 0) /* op_promote_now says so, and records it */
        return op_promote_now(c->db, id, f[F_TO].given ? f[F_TO].value : "none", &who, &r) != OP_OK
                   ? op_exit(c, "promote-now", &r)
                   : EXIT_OK;
    char app[2 * PIPELINE_LABEL_MAX + 2];
    snprintf(app, sizeof app, "%s/%s", p.namespace, p.application);
    if (checked)
        rc = check_policy_as("promote-now", dir, app, p.environment, NULL, NULL, to, sizeof to);
    pipeline_clear(&p);
    if (rc != EXIT_OK)
        return rc;
    if (checked && f[F_TO].given && strcmp(to, f[F_TO].value) != 0)
        return fail(EXIT_INPUT, "promote-now %s: --to %s, but the policies in %s promote it to %s",
                    id, f[F_TO].value, dir, to);
    if (!checked)
        snprintf(to, sizeof to, "%s", f[F_TO].value);
    if (op_promote_now(c->db, id, to, &who, &r) != OP_OK)
        return op_exit(c, "promote-now", &r);
    return print_made(c, "promote-now", &r, checked);
}
