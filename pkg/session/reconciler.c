/* The TeloSession reconciler: the executor of the session plan (the pass, its writes and their
 * expectations), registered on a manager. */
#include "session/reconciler.h"

#include "session/pass.h"

#include "controller/events.h"
#include "session/phase.h"
#include "util/jget.h"
#include "util/log.h"

#include <ev.h>
#include <json.h>
#include <openssl/rand.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How long one read of a bundle ConfigMap answers for the other sessions that name it. Only its
 * existence and key names are reused, and only for sessions whose pod mounts the ConfigMap itself
 * (the kubelet reads the bytes then; a build reads them anew). A ConfigMap deleted within this
 * window leaves its pod in FailedMount until the start deadline, as a deletion between our read
 * and the pod's create always could. 1,000 sessions created at once on one bundle read it a few
 * times rather than 1,000 (bench/sessions). */
#define BUNDLE_MEMO_S 5.0
/* After a status write found the session changed: the watch brings the change, normally well
 * within this; the requeue is for a watch that does not. */
#define STATUS_CONFLICT_RETRY_S 1.0

double session_pass_now(const struct session_reconciler *r)
{
    return ev_now(kube_transport_loop(r->t));
}

void session_pass_expect_drop(struct session_reconciler *r, const char *key)
{
    session_expect_drop(r->expected, key);
}

int session_pass_expect_set(struct session_reconciler *r, const char *key, unsigned long long body)
{
    return session_expect_set(r->expected, key, body, session_pass_now(r));
}

static struct session_plan_expect expect_seen(struct session_reconciler *r, const char *key,
                                              int own)
{
    return session_expect_seen(r->expected, key, own, session_pass_now(r));
}

/* --- finishing ----------------------------------------------------------------------------- */

static void pass_free(struct pass *p)
{
    free(p->tgz);
    session_spec_release(&p->s);
    json_object_put(p->pod);
    json_object_put(p->written_status);
    session_verdict_release(&p->deferred);
    free(p);
}

void session_pass_done(struct pass *p)
{
    if (--p->pending > 0)
        return;
    struct ctrl_result res = {.outcome = p->outcome};
    if (p->failed) {
        res.outcome = CTRL_ERROR;
        res.message = p->error;
    } else if (p->outcome == CTRL_SUCCESS && p->requeue_after > 0) {
        res.outcome = CTRL_REQUEUE_AFTER;
        res.requeue_after = p->requeue_after;
    }
    ctrl_reconcile_finish(p->rec, &res);
    pass_free(p);
}

static void write_status(struct pass *p, struct json_object *status);
static void record_event(struct pass *p, const struct session_verdict *v);

/* Whether res says the object w's precondition named is no longer under its name: a uid
 * precondition's 409 (a delete), or a patch carrying the child's uid refused on metadata.uid. */
static int precondition_failed(const struct write_ctx *w, const struct kube_result *res)
{
    if (!w->precondition)
        return 0;
    if (res->code == 409)
        return 1;
    for (size_t i = 0; res->code == 422 && res->status && i < res->status->ncauses; i++) {
        const char *field = res->status->causes[i].field;
        if (field && strcmp(field, "metadata.uid") == 0)
            return 1;
    }
    return 0;
}

/* A child's create or patch the API server answered (issue 17): a success clears the child's
 * refusal; a refusal (an answer of 400 or more; a 404 is an object already gone, a failed
 * precondition one replaced) is recorded for the plan, which says so in the status and backs
 * off, and the session is queued again so the status says so now. A create's 409 AlreadyExists
 * is a refusal too: the name is held by an object outside the caches (the plan says
 * NameConflict). Returns 1 when res was a refusal (the pass does not fail for it). */
static int note_child_answer(struct write_ctx *w, const struct kube_result *res)
{
    struct pass *p = w->p;
    struct session_reconciler *r = p->r;
    if (!w->has_child)
        return 0;
    char key[320];
    snprintf(key, sizeof(key), "%s/%s", p->s.namespace, p->s.name);
    int exists =
        res->code == 409 && res->status && res->status->reason == KUBE_REASON_ALREADY_EXISTS;
    if (res->rc == 0 || (exists && !w->create_child)) {
        session_refusals_clear(r->refusals, key, w->child);
        return 0;
    }
    if (res->code < 400 || res->code == 404 || precondition_failed(w, res))
        return 0;
    const char *reason = res->status ? res->status->reason_text : "";
    const char *message = res->status && res->status->message[0] ? res->status->message
                          : res->err                             ? res->err->msg
                                                                 : "";
    if (session_refusals_note(r->refusals, key, w->child, res->code, reason, message, w->object,
                              p->s.generation, session_pass_now(r)) < 0)
        return 0;
    telo_log(TELO_LOG_WARN, "write refused", "session=%s code=%ld reason=%s object=%s err=%s", key,
             res->code, reason, w->object, res->err ? res->err->msg : message);
    (void)ctrl_controller_enqueue(r->inf.c, key);
    return 1;
}

void session_pass_on_write(const struct kube_result *res, void *ud)
{
    struct write_ctx *w = ud;
    struct pass *p = w->p;
    if (note_child_answer(w, res)) {
        /* The pass queued again writes the status that names it (not the deferred one). */
        if (w->expect_key[0])
            session_pass_expect_drop(p->r, w->expect_key);
        free(w);
        session_pass_done(p);
        return;
    }
    /* 409 on a status write: the session changed (or was replaced) since the cache showed it;
     * the status is computed again from the version the cache brings next. Not an error, but
     * not written either. */
    if (w->status && res->code == 409) {
        telo_log(TELO_LOG_DEBUG, "status write on a stale session", "session=%s/%s rv=%s",
                 p->s.namespace, p->s.name, p->written_rv[0] ? p->written_rv : p->base_rv);
        if (w->expect_key[0])
            session_pass_expect_drop(p->r, w->expect_key);
        if (p->requeue_after <= 0 || p->requeue_after > STATUS_CONFLICT_RETRY_S)
            p->requeue_after = STATUS_CONFLICT_RETRY_S;
        free(w);
        session_pass_done(p);
        return;
    }
    /* 404 on a delete: already gone, which is what we wanted; on a patch, the next pass
     * creates it. 409 on the build Job's create: another session's, shared. Neither is an
     * error. A failed precondition: the name holds another object now, which is not ours to
     * write; the next pass looks at it. */
    if (res->rc < 0 && !(res->code == 404) &&
        !(res->code == 409 && res->status && res->status->reason == KUBE_REASON_ALREADY_EXISTS) &&
        !precondition_failed(w, res)) {
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "%s", res->err ? res->err->msg : "write failed");
        if (w->expect_key[0])
            session_pass_expect_drop(p->r, w->expect_key);
        if (w->counts_start && p->deferred.status) {
            /* No pod will arrive to say more: the session shows its Pending state meanwhile. */
            write_status(p, p->deferred.status);
            record_event(p, &p->deferred);
        }
    }
    if (w->counts_start && res->rc == 0 && res->code == 201)
        p->r->metrics.stats.starts++;
    if (w->status && res->rc == 0 && w->expect_key[0])
        session_expect_status_made(p->r->expected, w->expect_key,
                                   jget_string(jget(res->object, "metadata"), "resourceVersion"));
    free(w);
    session_pass_done(p);
}

struct write_ctx *session_pass_write_ctx(struct pass *p, const char *expect_key)
{
    struct write_ctx *w = calloc(1, sizeof(*w));
    if (!w) {
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "out of memory");
        return NULL;
    }
    w->p = p;
    if (expect_key)
        snprintf(w->expect_key, sizeof(w->expect_key), "%s", expect_key);
    return w;
}

void session_pass_write_refused(struct write_ctx *w, const struct telo_err *err)
{
    struct pass *p = w->p;
    p->failed = 1;
    snprintf(p->error, sizeof(p->error), "%s", err->msg);
    p->pending--;
    if (w->expect_key[0])
        session_pass_expect_drop(p->r, w->expect_key);
    free(w);
}

/* The context of a write to ref, counted as pending, or NULL when out of memory. With expect,
 * the write is remembered (as body_hash, 0: any content) until the cache shows it. child: enum
 * session_plan_child, or -1 for the session's own status. */
static struct write_ctx *begin_write(struct pass *p, const struct kube_ref *ref, const char *expect,
                                     unsigned long long body_hash, int child)
{
    struct write_ctx *w = session_pass_write_ctx(p, expect);
    if (!w)
        return NULL;
    if (child >= 0 && child < SESSION_REFUSAL_NCHILDREN) {
        w->has_child = 1;
        w->child = child;
        snprintf(w->object, sizeof(w->object), "%s/%s", ref->namespace ? ref->namespace : "",
                 ref->name ? ref->name : "");
    }
    w->status = ref->subresource != NULL;
    if (expect && session_pass_expect_set(p->r, expect, body_hash) < 0)
        w->expect_key[0] = '\0';
    p->pending++;
    p->r->metrics.stats.writes++;
    return w;
}

/* Sends obj (consumed) to ref as w says: a server-side apply for the status, a create for a
 * child's create, a merge patch otherwise. */
static void send_write(struct pass *p, struct write_ctx *w, const struct kube_ref *ref,
                       struct json_object *obj)
{
    size_t len = 0;
    const char *body = json_object_to_json_string_length(
        obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    struct kube_write_opts o = {.field_manager = SESSION_FIELD_MANAGER, .force = w->status};
    struct telo_err err;
    struct kube_call *call;
    if (w->status)
        call = kube_rest_apply(p->r->t, ref, body, len, &o, session_pass_on_write, w, &err);
    else if (w->create_child)
        call = kube_rest_create(p->r->t, ref, body, len, &o, session_pass_on_write, w, &err);
    else
        call = kube_rest_patch(p->r->t, ref, KUBE_PATCH_MERGE, body, len, &o, session_pass_on_write,
                               w, &err);
    if (!call)
        session_pass_write_refused(w, &err);
    json_object_put(obj);
}

/* Deletes ref; with uid, only while the name still holds that object (a precondition: what we
 * looked at may have been replaced since). */
void session_pass_delete(struct pass *p, const struct kube_ref *ref, long grace, const char *uid)
{
    struct kube_delete_opts o = {
        .propagation_policy = "Background", .grace_period_seconds = grace, .precondition_uid = uid};
    struct telo_err err;
    struct write_ctx *w = session_pass_write_ctx(p, NULL);
    if (!w)
        return;
    w->precondition = uid != NULL;
    p->pending++;
    p->r->metrics.stats.writes++;
    if (!kube_rest_delete(p->r->t, ref, &o, session_pass_on_write, w, &err))
        session_pass_write_refused(w, &err);
}

/* --- children that are not the session's (issue 21) ---------------------------------------- */

/* The live read of the session before a predecessor's children are deleted: the caches are
 * separate watches, and a pod cache ahead of a stale session cache would make the new session's
 * child look like a predecessor's to the old one. Only when the API server itself says the name
 * holds this session's uid, and the child's owner is another uid, is that owner gone (the
 * garbage collector verifies an absent owner the same way before deleting a dependent). */
static void on_session_live(const struct kube_result *res, void *ud)
{
    struct pass *p = ud;
    const char *live = res->rc == 0 ? jget_string(jget(res->object, "metadata"), "uid") : NULL;
    if (live && strcmp(live, p->s.uid) == 0) {
        for (size_t i = 0; i < p->ngone; i++) {
            struct gone_child *g = &p->gone[i];
            if (strcmp(g->owner_uid, live) == 0)
                continue;
            telo_log(TELO_LOG_INFO, "deleting a previous session's child",
                     "session=%s/%s resource=%s name=%s/%s uid=%s owner_uid=%s", p->s.namespace,
                     p->s.name, g->resource, p->s.namespace, g->name, g->uid, g->owner_uid);
            struct kube_ref ref = {.group = g->group,
                                   .version = "v1",
                                   .resource = g->resource,
                                   .namespace = p->s.namespace,
                                   .name = g->name};
            session_pass_delete(p, &ref, -1, g->uid);
        }
    } else if (res->rc < 0 && res->code != 404) {
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "%s", res->err ? res->err->msg : "get failed");
    }
    session_pass_done(p);
}

/* Starts the deletion of the predecessor's children noted this pass. */
static void replace_gone(struct pass *p)
{
    if (p->ngone == 0)
        return;
    struct kube_ref ref = {.group = "telo.run",
                           .version = "v1alpha1",
                           .resource = "telosessions",
                           .namespace = p->s.namespace,
                           .name = p->s.name};
    struct telo_err err;
    p->pending++;
    if (!kube_rest_get(p->r->t, &ref, on_session_live, p, &err)) {
        p->pending--;
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "%s", err.msg);
    }
}

/* --- the pass ------------------------------------------------------------------------------ */

static void write_status(struct pass *p, struct json_object *status)
{
    struct json_object *body = json_object_new_object(), *meta = json_object_new_object();
    json_object_object_add(body, "apiVersion", json_object_new_string("telo.run/v1alpha1"));
    json_object_object_add(body, "kind", json_object_new_string("TeloSession"));
    json_object_object_add(meta, "name", json_object_new_string(p->s.name));
    json_object_object_add(meta, "namespace", json_object_new_string(p->s.namespace));
    /* Conditional on the session this status was computed from. Written by name alone, a status
     * computed from a cache that still holds a deleted session would land on its successor of
     * the same name (a GitOps replace), naming the predecessor's pod; the API server ignores a
     * uid in a status body, but a resourceVersion is unique to one object's one version. */
    const char *rv = p->written_rv[0] ? p->written_rv : p->base_rv;
    if (rv[0])
        json_object_object_add(meta, "resourceVersion", json_object_new_string(rv));
    json_object_object_add(body, "metadata", meta);
    json_object_object_add(body, "status", json_object_get(status));
    struct kube_ref ref = {.group = "telo.run",
                           .version = "v1alpha1",
                           .resource = "telosessions",
                           .namespace = p->s.namespace,
                           .name = p->s.name,
                           .subresource = "status"};
    p->r->metrics.stats.status_writes++;
    /* Remember what we wrote until the cache shows it: a reconcile in between (a child's event
     * arriving before the session's) must not compute the transition again from the stale
     * status, which would write it twice, record its Event twice and move lastTransitionTime. */
    char key[320];
    session_expect_key(key, sizeof(key), "status", p->s.namespace, p->s.name);
    struct write_ctx *w = begin_write(p, &ref, key, 0, -1);
    if (w)
        send_write(p, w, &ref, body);
    else
        json_object_put(body);
    session_expect_status(p->r->expected, key, status, p->base_rv);
}

/* When the cached session is still the one our last status write was computed from, that write
 * is its status. */
static void use_written_status(struct pass *p)
{
    char key[320];
    session_expect_key(key, sizeof(key), "status", p->s.namespace, p->s.name);
    p->written_status =
        session_expect_written_status(p->r->expected, key, p->base_rv, session_pass_now(p->r),
                                      p->written_rv, sizeof(p->written_rv));
    if (p->written_status)
        p->s.status = p->written_status;
}

static void record_event(struct pass *p, const struct session_verdict *v)
{
    if (!v->event_type)
        return;
    telo_log(TELO_LOG_INFO, "session transition", "session=%s/%s reason=%s", p->s.namespace,
             p->s.name, v->event_reason);
    if (!p->r->events)
        return;
    struct events_object obj = {"telo.run/v1alpha1", "TeloSession", p->s.namespace, p->s.name,
                                p->s.uid};
    (void)events_record(p->r->events, &obj, v->event_type, v->event_reason, NULL, "%s",
                        v->event_message);
}

/* 64 hex digits from the CSPRNG into out. Returns -1 when it has none to give: never a guessable
 * token. */
static int random_token(char out[65])
{
    unsigned char bytes[32];
    if (RAND_bytes(bytes, sizeof(bytes)) != 1)
        return -1;
    for (size_t i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", bytes[i]);
    return 0;
}

/* Whether the session's own pod is in the pod cache now, or on its way into it. */
static int pod_back(struct pass *p, const char *child)
{
    struct json_object *again = session_informers_get(p->r->inf.pods, p->s.namespace, child);
    char key[320];
    session_expect_key(key, sizeof(key), "pods", p->s.namespace, child);
    int back = session_child_owner(again, p->s.name, p->s.uid) == SESSION_OWNER_OWN ||
               session_expect_answered(p->r->expected, key, session_pass_now(p->r));
    json_object_put(again);
    return back;
}

/* Where each child of the plan lives. */
static struct kube_ref child_ref(const struct pass *p, enum session_plan_child child,
                                 const char *name)
{
    struct kube_ref ref = {.version = "v1", .namespace = p->s.namespace, .name = name};
    switch (child) {
    case SESSION_PLAN_POD:
        ref.resource = "pods";
        break;
    case SESSION_PLAN_SECRET:
        ref.resource = "secrets";
        break;
    case SESSION_PLAN_SERVICE:
        ref.resource = "services";
        break;
    case SESSION_PLAN_INGRESS:
        ref.group = "networking.k8s.io";
        ref.resource = "ingresses";
        break;
    case SESSION_PLAN_JOB:
        ref.group = "batch";
        ref.resource = "jobs";
        ref.namespace = p->r->cfg->build_namespace;
        break;
    default:
        ref.group = "telo.run";
        ref.version = "v1alpha1";
        ref.resource = "telosessions";
        break;
    }
    return ref;
}

/* Starts one write of the plan; the body moves to the request. */
static void execute_write(struct pass *p, struct session_plan_write *w)
{
    struct kube_ref ref = child_ref(p, w->child, w->name);
    struct json_object *obj = w->obj;
    w->obj = NULL;
    if (w->verb == SESSION_PLAN_DELETE) {
        session_pass_delete(p, &ref, w->grace, w->uid[0] ? w->uid : NULL);
        return;
    }
    if (w->child == SESSION_PLAN_JOB) {
        session_pass_create_job(p, obj);
        return;
    }
    if (w->fill_token) {
        char token[65];
        if (random_token(token) < 0) {
            /* No Secret rather than one with an empty token; the pass fails and is retried. */
            p->failed = 1;
            snprintf(p->error, sizeof(p->error), "no random bytes for the attach token");
            json_object_put(obj);
            return;
        }
        json_object_object_add(jget(obj, "stringData"), "token", json_object_new_string(token));
    }
    char key[320];
    session_expect_key(key, sizeof(key), ref.resource, ref.namespace, w->name);
    struct write_ctx *ctx =
        begin_write(p, &ref, w->expect ? key : NULL, w->body_hash, (int)w->child);
    if (!ctx) {
        json_object_put(obj);
        return;
    }
    ctx->counts_start = w->counts_start;
    ctx->create_child = w->verb == SESSION_PLAN_CREATE;
    ctx->precondition = w->verb == SESSION_PLAN_PATCH;
    send_write(p, ctx, &ref, obj);
}

/* The status write of the plan, with its Event and the metrics of its transition. */
static void execute_status(struct pass *p, struct session_plan *plan)
{
    struct session_reconciler *r = p->r;
    /* Kept for the pod's create: written should it fail (see session_pass_on_write). */
    p->deferred = plan->deferred;
    memset(&plan->deferred, 0, sizeof(plan->deferred));
    if (!plan->verdict.changed)
        return;
    if (plan->failed_reason)
        session_metrics_failure(&r->metrics, plan->failed_reason);
    if (plan->cache_hit)
        r->metrics.cache_hits++;
    if (plan->startup_seconds >= 0)
        histogram_observe(&r->metrics.stats.startup_seconds, plan->startup_seconds);
    write_status(p, plan->verdict.status);
    record_event(p, &plan->verdict);
}

/* Notes the predecessor's children the plan would delete, and starts their live check. */
static void execute_gone(struct pass *p, const struct session_plan *plan)
{
    for (size_t i = 0; i < plan->ngone && p->ngone < MAX_GONE; i++) {
        const struct session_plan_gone *g = &plan->gone[i];
        struct kube_ref ref = child_ref(p, g->child, g->name);
        struct gone_child *to = &p->gone[p->ngone++];
        to->group = ref.group;
        to->resource = ref.resource;
        snprintf(to->name, sizeof(to->name), "%s", g->name);
        snprintf(to->uid, sizeof(to->uid), "%s", g->uid);
        snprintf(to->owner_uid, sizeof(to->owner_uid), "%s", g->owner_uid);
    }
    replace_gone(p);
}

/* The image step's own requests: the registry's answer, the build log, the build's count. */
static void execute_image(struct pass *p, const struct session_image_obs *img,
                          const struct session_plan *plan)
{
    struct session_reconciler *r = p->r;
    if (!img || !plan->has_image)
        return;
    const char *uid = jget_string(jget((struct json_object *)img->job, "metadata"), "uid");
    const char *message = "", *tail = "";
    if (plan->image.job_result && img->job)
        session_metrics_build(&r->metrics, img->job, plan->image.job_result, img->now);
    if (plan->image.check_registry)
        (void)session_builds_presence(r->builds, img->tag, img->self, 1, &message);
    if (plan->image.fetch_log && uid)
        (void)session_builds_log(r->builds, img->job_name, uid, img->self, 1, &tail);
    if (plan->image.fetch_progress && img->job) {
        struct build_step step;
        session_builds_progress(r->builds, img->job, img->self, 1, &step);
    }
    if (plan->image.check_base_digest) {
        struct session_base_digest digest;
        session_builds_base_digest(r->builds, img->base_image, img->self, 1, &digest);
    }
}

/* Executes plan (released here) and ends the pass's share of the work. */
static void execute(struct pass *p, const struct session_image_obs *img, struct session_plan *plan)
{
    execute_image(p, img, plan);
    p->requeue_after = plan->requeue_after;
    if (plan->wait) {
        session_plan_release(plan);
        session_pass_done(p);
        return;
    }
    if (plan->conflict_kind)
        telo_log(TELO_LOG_INFO, "name held by another owner", "session=%s/%s %s=%s/%s",
                 p->s.namespace, p->s.name, plan->conflict_kind, p->s.namespace,
                 plan->conflict_name);
    if (plan->error[0]) {
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "%s", plan->error);
    }
    for (size_t i = 0; i < plan->nwrites; i++)
        execute_write(p, &plan->writes[i]);
    execute_status(p, plan);
    execute_gone(p, plan);
    char key[320];
    snprintf(key, sizeof(key), "%s/%s", p->s.namespace, p->s.name);
    for (int c = 0; c < SESSION_REFUSAL_NCHILDREN; c++) {
        if (plan->refusal_clear & (1u << c))
            session_refusals_clear(p->r->refusals, key, c);
    }
    session_plan_release(plan);
    session_pass_done(p);
}

/* The prober's facts of each port of p's session (into facts, indexed as s.ports), probing the
 * TCP ports of its own Running pod; a session not running has its probes stopped. Returns
 * facts. */
static const struct session_reach_facts *gather_reach(struct pass *p,
                                                      struct session_reach_facts *facts)
{
    struct session_prober *prober = p->r->prober;
    memset(facts, 0, sizeof(*facts) * SESSION_MAX_PORTS);
    if (!prober)
        return facts;
    char key[320];
    snprintf(key, sizeof(key), "%s/%s", p->s.namespace, p->s.name);
    struct json_object *meta = jget(p->pod, "metadata");
    const char *uid = jget_string(meta, "uid");
    const char *ip = jget_string(jget(p->pod, "status"), "podIP");
    int running = p->pod_owner == SESSION_OWNER_OWN && !p->s.stopped && uid && ip &&
                  session_pod_phase_of(p->pod) == SESSION_POD_RUNNING;
    int ports[SESSION_MAX_PORTS];
    size_t nports = 0;
    for (size_t i = 0; running && i < p->s.nports; i++) {
        const struct session_port *port = &p->s.ports[i];
        if (strcmp(port->protocol, "TCP") != 0)
            continue;
        if (session_prober_observe(prober, key, uid, ip, port->port, &facts[i]) == 0)
            ports[nports++] = port->port;
    }
    session_prober_retain(prober, key, running ? uid : NULL, ports, nports);
    return facts;
}

/* Gathers the rest of the observation (the other children, the expectations), plans and
 * executes. blocked_*: the bundle check's finding; img: the image step's observation (its
 * job_expected is the plan's to derive), or NULL. */
void session_pass_converge(struct pass *p, const char *blocked_reason, const char *blocked_message,
                           const struct session_image_obs *img)
{
    struct session_reconciler *r = p->r;
    const char *ns = p->s.namespace;
    char child[64], secret[80], key[320];
    session_child_name(&p->s, child, sizeof(child));
    session_secret_name(&p->s, secret, sizeof(secret));
    struct session_plan_obs obs = {
        .s = &p->s,
        .cfg = r->cfg,
        .pod = p->pod,
        .secret = session_informers_get(r->inf.secrets, ns, secret),
        .service = session_informers_get(r->inf.services, ns, child),
        .ingress = session_informers_get(r->inf.ingresses, ns, child),
        .blocked_reason = blocked_reason,
        .blocked_message = blocked_message,
        .image = img,
        .now = session_pass_now(r),
        .limit_waiting = p->limit_waiting,
        .limit_message = p->limit_message,
        .queue_position = p->queue_position,
    };
    snprintf(key, sizeof(key), "%s/%s", ns, p->s.name);
    session_refusals_get(r->refusals, key, obs.refusal);
    session_expect_key(key, sizeof(key), "pods", ns, child);
    obs.expect[SESSION_PLAN_POD] = expect_seen(r, key, p->pod_owner == SESSION_OWNER_OWN);
    session_expect_key(key, sizeof(key), "secrets", ns, secret);
    obs.expect[SESSION_PLAN_SECRET] = expect_seen(
        r, key, session_child_owner(obs.secret, p->s.name, p->s.uid) == SESSION_OWNER_OWN);
    session_expect_key(key, sizeof(key), "services", ns, child);
    obs.expect[SESSION_PLAN_SERVICE] = expect_seen(
        r, key, session_child_owner(obs.service, p->s.name, p->s.uid) == SESSION_OWNER_OWN);
    session_expect_key(key, sizeof(key), "ingresses", ns, child);
    obs.expect[SESSION_PLAN_INGRESS] = expect_seen(
        r, key, session_child_owner(obs.ingress, p->s.name, p->s.uid) == SESSION_OWNER_OWN);
    if (img) {
        session_expect_key(key, sizeof(key), "jobs", r->cfg->build_namespace, img->job_name);
        obs.expect[SESSION_PLAN_JOB] = expect_seen(r, key, img->job != NULL);
    }
    struct session_reach_facts reach[SESSION_MAX_PORTS];
    obs.reach = gather_reach(p, reach);
    /* Only a pod the session had (status.podName) can have disappeared. */
    obs.pod_back = p->pod_owner != SESSION_OWNER_OWN && jget_string(p->s.status, "podName") &&
                   pod_back(p, child);
    struct session_plan plan;
    if (session_plan_make(&obs, &plan) < 0) {
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "out of memory computing the status");
        session_pass_done(p);
    } else {
        execute(p, img, &plan);
    }
    json_object_put(obs.secret);
    json_object_put(obs.service);
    json_object_put(obs.ingress);
}

static void invalid_spec(struct pass *p, struct json_object *obj, const char *why)
{
    /* The schema should have refused it; say so on the object rather than retry forever. */
    struct json_object *meta = jget(obj, "metadata");
    p->s.name = jget_string(meta, "name");
    p->s.namespace = jget_string(meta, "namespace");
    p->s.obj = json_object_get(obj);
    if (!p->s.name || !p->s.namespace) {
        /* Nothing to write a status to: the cache key came from the object, so never. */
        p->pending++;
        session_pass_done(p);
        return;
    }
    struct json_object *status = json_object_new_object();
    json_object_object_add(status, "phase",
                           json_object_new_string(session_phase_name(SESSION_PHASE_FAILED)));
    json_object_object_add(status, "reason", json_object_new_string("InvalidSpec"));
    json_object_object_add(status, "message", json_object_new_string(why));
    struct json_object *old = jget(obj, "status");
    p->outcome = CTRL_TERMINAL_ERROR;
    snprintf(p->error, sizeof(p->error), "%s", why);
    p->pending++;
    if (!(old && json_object_equal(jget(old, "message"), jget(status, "message"))))
        write_status(p, status);
    json_object_put(status);
    session_pass_done(p);
}

static void reconcile(void *ud, struct ctrl_reconcile *rec, const char *key)
{
    struct session_reconciler *r = ud;
    struct pass *p = calloc(1, sizeof(*p));
    struct ctrl_result ok = {.outcome = CTRL_SUCCESS};
    if (!p) {
        struct ctrl_result oom = {.outcome = CTRL_ERROR, .message = "out of memory"};
        ctrl_reconcile_finish(rec, &oom);
        return;
    }
    p->r = r;
    p->rec = rec;
    const char *slash = strchr(key, '/');
    if (!slash || !session_informers_watched(r->cfg, key, (size_t)(slash - key))) {
        free(p);
        ctrl_reconcile_finish(rec, &ok);
        return;
    }
    const struct cache_object *co = cache_store_get(ctrl_informer_store(r->inf.sessions), key);
    struct json_object *obj = co ? cache_object_parse(co) : NULL;
    if (co)
        snprintf(p->base_rv, sizeof(p->base_rv), "%s", co->resource_version);
    if (!obj) {
        /* Deleted: its children go with it through their owner references. */
        if (r->prober)
            session_prober_retain(r->prober, key, NULL, NULL, 0);
        session_refusals_forget(r->refusals, key);
        free(p);
        ctrl_reconcile_finish(rec, &ok);
        return;
    }
    struct telo_err err;
    if (session_spec_parse(obj, &p->s, &err) < 0) {
        invalid_spec(p, obj, err.msg);
        json_object_put(obj);
        return;
    }
    json_object_put(obj);
    use_written_status(p);
    if (p->s.deleting) {
        if (r->prober)
            session_prober_retain(r->prober, key, NULL, NULL, 0);
        pass_free(p);
        ctrl_reconcile_finish(rec, &ok);
        return;
    }
    p->pending = 1; /* held until every write of the pass has started */
    session_admission_decide(p);
    session_pass_learn(p, key);
}

/* --- registration -------------------------------------------------------------------------- */

/* A build Job's change (an end, a delete) may free a slot: the first in line of each waiting
 * namespace looks again now rather than at its recheck. */
static void job_wakes_line(void *ud, const struct cache_object *obj,
                           void (*emit)(void *ctx, const char *key), void *ctx)
{
    (void)obj;
    const struct session_reconciler *r = ud;
    session_build_slots_heads(r->build_slots, emit, ctx);
}

static void requeue_session(void *ud, const char *key)
{
    struct session_reconciler *r = ud;
    (void)ctrl_controller_enqueue(r->inf.c, key);
}

struct session_reconciler *session_reconciler_new(struct ctrl_manager *m, struct kube_transport *t,
                                                  const struct session_config *cfg,
                                                  struct events_recorder *events,
                                                  struct telo_err *err)
{
    struct session_reconciler *r = calloc(1, sizeof(*r));
    if (!r || session_metrics_init(&r->metrics, cfg) < 0 || !(r->expected = session_expect_new()) ||
        !(r->bundles = session_cm_memo_new(BUNDLE_MEMO_S)) ||
        !(r->refusals = session_refusals_new())) {
        session_reconciler_free(r);
        telo_err_set(err, TELO_ENOMEM, "session reconciler: out of memory");
        return NULL;
    }
    r->m = m;
    r->t = t;
    r->cfg = cfg;
    r->events = events;
    /* The edge that talks to the registry: builds only. The prober's answers queue their
     * session again, as the registry's do. */
    if (session_informers_register(&r->inf, m, cfg, reconcile, r, err) < 0 ||
        session_admission_new(r, err) < 0 ||
        (cfg->build_repository &&
         !(r->builds = session_builds_new(t, cfg, requeue_session, r, err))) ||
        (cfg->build_repository && !(r->build_slots = session_build_slots_new()) &&
         telo_err_set(err, TELO_ENOMEM, "build slots: out of memory") < 0) ||
        (r->build_slots &&
         ctrl_controller_watch_mapped(r->inf.c, r->inf.jobs, job_wakes_line, r, err) < 0) ||
        (cfg->reach_enabled &&
         !(r->prober = session_prober_new(kube_transport_loop(t), cfg, requeue_session, r, err)))) {
        session_reconciler_free(r);
        return NULL;
    }
    r->metrics.sessions = ctrl_informer_store(r->inf.sessions);
    r->metrics.builds = r->builds;
    r->metrics.build_slots = r->build_slots;
    return r;
}

void session_reconciler_free(struct session_reconciler *r)
{
    if (!r)
        return;
    session_admission_free(r);
    session_expect_free(r->expected);
    session_metrics_release(&r->metrics);
    session_cm_memo_free(r->bundles);
    session_refusals_free(r->refusals);
    session_builds_free(r->builds);
    session_build_slots_free(r->build_slots);
    session_prober_free(r->prober);
    free(r);
}

void session_reconciler_count_phases(const struct session_reconciler *r,
                                     void (*fn)(void *ud, const char *phase, unsigned long n),
                                     void *ud)
{
    session_metrics_count_phases(&r->metrics, fn, ud);
}

const struct session_stats *session_reconciler_stats(const struct session_reconciler *r)
{
    return &r->metrics.stats;
}

int session_reconciler_register_metrics(struct session_reconciler *r, struct metrics_registry *reg,
                                        struct telo_err *err)
{
    return session_metrics_register(&r->metrics, reg, err);
}
