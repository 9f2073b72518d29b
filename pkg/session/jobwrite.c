/* The build Job a session's plan creates, and its context ConfigMap (the bundle) beside it. */
#include "session/pass.h"

#include "util/jget.h"
#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void session_pass_job_config(const struct pass *p, struct build_config *bc)
{
    session_builds_job_config(p->r->cfg, bc);
    bc->telo_registry_url = p->s.registry_url ? p->s.registry_url : p->r->cfg->registry_url;
}

/* The build context ConfigMap of a Job this pass created, written in steps: create; on 409 read
 * what holds the name; if that is not the new Job's (owned by an earlier Job of the same tag,
 * which was deleted while the garbage collector was behind, issue 21), delete it with a uid
 * precondition and create once more. Trusting it would build the new Job from another bundle's
 * copy, and the collector would then remove it under the new Job's pod. */
struct context_write {
    struct pass *p;
    char ns[256];
    char job_uid[64];
    char *body;
    size_t len;
    int step; /* CONTEXT_* */
};

enum { CONTEXT_CREATE, CONTEXT_READ, CONTEXT_DELETE, CONTEXT_RECREATE };

static void context_step(const struct kube_result *res, void *ud);

static void context_free(struct context_write *cw)
{
    if (cw)
        free(cw->body);
    free(cw);
}

/* Ends the chain: on failure the Job goes too (without its context it would wait on a missing
 * volume until its deadline), so the next pass creates both again. */
static void context_end(struct context_write *cw, int ok, const char *why)
{
    struct pass *p = cw->p;
    if (!ok) {
        p->failed = 1;
        /* A long reason is cut at the end, which keeps what failed and where, and says so. */
        if (snprintf(p->error, sizeof(p->error),
                     "cannot create the build context ConfigMap %s/%s: %s", cw->ns, p->job_name,
                     why) >= (int)sizeof(p->error))
            memcpy(p->error + sizeof(p->error) - 4, "...", 4);
        struct kube_ref jref = {.group = "batch",
                                .version = "v1",
                                .resource = "jobs",
                                .namespace = cw->ns,
                                .name = p->job_name};
        session_pass_delete(p, &jref, 0, cw->job_uid);
    }
    context_free(cw);
    session_pass_done(p);
}

/* Starts the request of cw's current step; returns 0 or -1 (err filled). */
static int context_send(struct context_write *cw, const char *cm_uid, struct telo_err *err)
{
    struct pass *p = cw->p;
    struct kube_ref ref = {
        .version = "v1", .resource = "configmaps", .namespace = cw->ns, .name = p->job_name};
    struct kube_write_opts o = {.field_manager = SESSION_FIELD_MANAGER};
    struct kube_delete_opts d = {.grace_period_seconds = -1, .precondition_uid = cm_uid};
    switch (cw->step) {
    case CONTEXT_READ:
        return kube_rest_get(p->r->t, &ref, context_step, cw, err) ? 0 : -1;
    case CONTEXT_DELETE:
        p->r->metrics.stats.writes++;
        return kube_rest_delete(p->r->t, &ref, &d, context_step, cw, err) ? 0 : -1;
    default:
        p->r->metrics.stats.writes++;
        return kube_rest_create(p->r->t, &ref, cw->body, cw->len, &o, context_step, cw, err) ? 0
                                                                                             : -1;
    }
}

static void context_step(const struct kube_result *res, void *ud)
{
    struct context_write *cw = ud;
    const char *cm_uid = NULL;
    int exists =
        res->code == 409 && res->status && res->status->reason == KUBE_REASON_ALREADY_EXISTS;
    switch (cw->step) {
    case CONTEXT_CREATE:
        if (res->rc == 0 || !exists) {
            context_end(cw, res->rc == 0, res->err ? res->err->msg : "create failed");
            return;
        }
        cw->step = CONTEXT_READ;
        break;
    case CONTEXT_READ:
        if (res->rc == 0 && session_owned_by(res->object, "Job", cw->job_uid)) {
            context_end(cw, 1, NULL); /* an earlier pass of ours made it */
            return;
        }
        if (res->rc < 0 && res->code != 404) {
            context_end(cw, 0, res->err ? res->err->msg : "read failed");
            return;
        }
        cm_uid = res->rc == 0 ? jget_string(jget(res->object, "metadata"), "uid") : NULL;
        telo_log(TELO_LOG_INFO, "replacing a build context of an earlier job",
                 "configmap=%s/%s job_uid=%s", cw->ns, cw->p->job_name, cw->job_uid);
        cw->step = cm_uid ? CONTEXT_DELETE : CONTEXT_RECREATE;
        break;
    case CONTEXT_DELETE:
        /* 409: the precondition failed, someone replaced it meanwhile; the create says whose. */
        if (res->rc < 0 && res->code != 404 && res->code != 409) {
            context_end(cw, 0, res->err ? res->err->msg : "delete failed");
            return;
        }
        cw->step = CONTEXT_RECREATE;
        break;
    default:
        context_end(cw, res->rc == 0, res->err ? res->err->msg : "create failed");
        return;
    }
    struct telo_err err;
    if (context_send(cw, cm_uid, &err) < 0)
        context_end(cw, 0, err.msg);
}

/* After the Job's create: a new Job gets its context, the bundle as a ConfigMap owned by the
 * Job (so the Job's TTL removes both, and no operator memory holds the build's input). A 409
 * is another session's Job of the same tag: it is shared, and has its context already. */
static void on_job_created(const struct kube_result *res, void *ud)
{
    struct write_ctx *w = ud;
    struct pass *p = w->p;
    const char *uid = jget_string(jget(res->object, "metadata"), "uid");
    /* A 409 is a Job of the tag that is there (the cache counts it); anything else made none. */
    if (res->rc < 0 && res->code != 409)
        session_build_slots_refused(p->r->build_slots, w->object);
    if (res->rc == 0 && res->code == 201 && uid && p->s.bundle_configmap) {
        struct build_config bc;
        session_pass_job_config(p, &bc);
        struct json_object *cm = build_desired_context(&bc, p->tag, uid, p->tgz, p->tgz_len);
        struct context_write *cw = cm ? calloc(1, sizeof(*cw)) : NULL;
        size_t len = 0;
        const char *body =
            cm ? json_object_to_json_string_length(
                     cm, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len)
               : NULL;
        if (cw && body && (cw->body = malloc(len + 1))) {
            memcpy(cw->body, body, len + 1);
            cw->len = len;
        }
        struct telo_err err;
        if (cw) {
            cw->p = p;
            snprintf(cw->ns, sizeof(cw->ns), "%s", bc.namespace);
            snprintf(cw->job_uid, sizeof(cw->job_uid), "%s", uid);
            p->pending++;
            if (!cw->body)
                context_end(cw, 0, "out of memory");
            else if (context_send(cw, NULL, &err) < 0)
                context_end(cw, 0, err.msg);
        } else {
            p->failed = 1;
            snprintf(p->error, sizeof(p->error), "cannot create the build context ConfigMap %s/%s",
                     bc.namespace, p->job_name);
            struct kube_ref jref = {.group = "batch",
                                    .version = "v1",
                                    .resource = "jobs",
                                    .namespace = bc.namespace,
                                    .name = p->job_name};
            session_pass_delete(p, &jref, 0, uid);
        }
        json_object_put(cm);
        telo_log(TELO_LOG_INFO, "build job created", "job=%s/%s session=%s/%s tag=%s", bc.namespace,
                 p->job_name, p->s.namespace, p->s.name, p->tag);
    }
    session_pass_on_write(res, ud);
}

/* Creates the build Job (job consumed) the plan asks for; its context follows on 201. */
void session_pass_create_job(struct pass *p, struct json_object *job)
{
    const char *ns = p->r->cfg->build_namespace;
    char key[320];
    session_expect_key(key, sizeof(key), "jobs", ns, p->job_name);
    struct write_ctx *w = session_pass_write_ctx(p, key);
    if (!w) {
        json_object_put(job);
        return;
    }
    if (session_pass_expect_set(p->r, key, 0) < 0)
        w->expect_key[0] = '\0';
    w->has_child = 1;
    w->child = SESSION_PLAN_JOB;
    snprintf(w->object, sizeof(w->object), "%s/%s", ns, p->job_name);
    struct kube_ref ref = {.group = "batch", .version = "v1", .resource = "jobs", .namespace = ns};
    struct kube_write_opts o = {.field_manager = SESSION_FIELD_MANAGER};
    char session[320];
    snprintf(session, sizeof(session), "%s/%s", p->s.namespace, p->s.name);
    (void)session_build_slots_started(p->r->build_slots, w->object, session,
                                      session_pass_now(p->r));
    struct telo_err err;
    size_t len = 0;
    const char *body = json_object_to_json_string_length(
        job, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    p->pending++;
    p->r->metrics.stats.writes++;
    if (!kube_rest_create(p->r->t, &ref, body, len, &o, on_job_created, w, &err)) {
        session_build_slots_refused(p->r->build_slots, w->object);
        session_pass_write_refused(w, &err);
    }
    json_object_put(job);
}
