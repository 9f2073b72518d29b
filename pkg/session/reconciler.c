/* The TeloSession reconciler: observed state in, writes out, registered on a manager. */
#include "session/reconciler.h"

#include "cache/transform.h"
#include "controller/events.h"
#include "controller/metrics.h"
#include "kube/rest.h"
#include "session/builds.h"
#include "session/cmmemo.h"
#include "session/desired.h"
#include "session/image.h"
#include "session/owner.h"
#include "session/plan.h"
#include "session/spec.h"
#include "session/status.h"
#include "util/base64.h"
#include "util/jget.h"
#include "util/log.h"
#include "util/strmap.h"
#include "util/timefmt.h"

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

/* How long a child we wrote may stay unseen by its informer before we write it again. Within
 * that time a reconcile that does not find it in the cache (the watch lags the write) trusts
 * the write instead of repeating it: a second pod apply is a wasted write, and a second Secret
 * apply would replace the attach token clients already hold. */
#define EXPECT_TTL_S 30.0

/* telo_session_startup_seconds: 0.25 s doubling to 512 s. */
#define STARTUP_BUCKET_START 0.25
#define STARTUP_BUCKETS      12

/* telo_image_build_seconds: 5 s doubling to ~85 min. */
#define BUILD_BUCKET_START 5.0
#define BUILD_BUCKETS      11

/* Builds counted in telo_image_builds_total, remembered by Job uid so a Job followed by many
 * sessions counts once; forgotten wholesale beyond this many (Jobs go with their TTL anyway). */
#define COUNTED_JOBS_MAX 4096

/* The sessions cache index of status.image.tag: the sessions a build Job's change concerns. */
#define INDEX_BUILD_TAG "buildTag"

static const char *const build_results[] = {"succeeded", "failed", "timed_out"};
#define NBUILD_RESULTS 3

struct session_reconciler {
    struct ctrl_manager *m;
    struct kube_transport *t;
    const struct session_config *cfg;
    struct events_recorder *events;
    struct ctrl_informer *sessions, *pods, *services, *ingresses, *secrets, *jobs;
    struct ctrl_controller *c;
    struct session_stats stats;
    struct metrics_family *phases, *starts, *failures, *startup;
    struct session_builds *builds; /* NULL without build.repository */
    struct strmap *counted_jobs;   /* Job uid -> its own key string */
    unsigned long long builds_total[NBUILD_RESULTS], cache_hits;
    struct histogram build_seconds;
    struct metrics_family *builds_fam, *hits_fam, *build_hist;
    struct strmap *expected; /* "resource/ns/name" -> struct expectation */
    double last_sweep;
    struct session_cm_memo *bundles; /* bundle ConfigMaps read moments ago or being read */
};

/* A child written by us and not yet seen in its informer's cache. */
struct expectation {
    char key[320];
    unsigned long long body; /* hash of what was applied; 0: any content will do */
    double until;
    /* "status/ns/name" entries: the status we wrote. While the cached session is one we read
     * before that write or one our earlier writes made (stale_rv), that status is the truth,
     * not the cache's; once the cache shows the resourceVersion the write made (awaited_rv), or
     * any other one (someone else's change), the cache is. */
    char *status_json;
    char stale_rv[4][32];
    char awaited_rv[32];
};

static void add_stale(struct expectation *e, const char *rv)
{
    if (!rv || !*rv)
        return;
    for (int i = 0; i < 4; i++) {
        if (strcmp(e->stale_rv[i], rv) == 0)
            return;
    }
    memmove(e->stale_rv[1], e->stale_rv[0], 3 * sizeof(e->stale_rv[0]));
    snprintf(e->stale_rv[0], sizeof(e->stale_rv[0]), "%s", rv);
}

static void expectation_free(struct expectation *e)
{
    if (e)
        free(e->status_json);
    free(e);
}

/* One write of a pass; the expectation it set is dropped again when the write fails. */
struct write_ctx {
    struct pass *p;
    char expect_key[320];
    int counts_start; /* a pod create: telo_session_starts_total on 201 */
    int status;       /* a status write: remember the resourceVersion it made */
    int precondition; /* a delete with a uid precondition: 409 is someone else's object now */
};

/* A deleted predecessor's child (issue 21), to delete once the session's uid is confirmed. */
struct gone_child {
    const char *group, *resource; /* static strings */
    char name[64];
    char uid[64];       /* the child's own uid: the delete's precondition */
    char owner_uid[64]; /* its controller's, the predecessor's */
};

#define MAX_GONE 4

/* One reconcile in flight: its writes run in parallel; the last to finish ends the reconcile. */
struct pass {
    struct session_reconciler *r;
    struct ctrl_reconcile *rec;
    struct session s;
    struct json_object *pod;
    struct json_object *written_status; /* our last status write, when the cache lags it */
    /* A new session's first status, held back while its pod is being created: the pod's arrival
     * in the cache writes the status that follows from it, so this one would be overwritten at
     * once. Written only if the create fails (see on_write). */
    struct session_verdict deferred;
    char base_rv[64];             /* resourceVersion of the cached session we read */
    enum session_owner pod_owner; /* whose the cached pod of the session's pod name is */
    /* A deleted predecessor's children to delete (after a live read confirms the session's
     * uid, issue 21). */
    struct gone_child gone[MAX_GONE];
    size_t ngone;
    int pending;
    int failed;
    char error[TELO_ERR_MSG_MAX];
    double requeue_after;
    enum ctrl_outcome outcome;
    /* Builds: the image step of this pass and what the build Job's context needs. */
    int keep_image;
    unsigned char *tgz; /* the bundle, for the build's context ConfigMap */
    size_t tgz_len;
    char tag[BUILD_TAG_LEN + 1];
    char ref[600];
    char job_name[64];
};

/* --- reading the caches ------------------------------------------------------------------ */

static struct json_object *cached(const struct ctrl_informer *inf, const char *ns, const char *name)
{
    char key[512];
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    const struct cache_object *o = cache_store_get(ctrl_informer_store(inf), key);
    return o ? json_tokener_parse(o->json) : NULL;
}

/* --- expectations: children written but not yet in the cache --------------------------------- */

static double loop_now(const struct session_reconciler *r)
{
    return ev_now(kube_transport_loop(r->t));
}

static void expect_key(char *out, size_t len, const char *resource, const char *ns,
                       const char *name)
{
    snprintf(out, len, "%s/%s/%s", resource, ns, name);
}

static void expect_drop(struct session_reconciler *r, const char *key)
{
    expectation_free(strmap_remove(r->expected, key));
}

static void expect_sweep(struct session_reconciler *r, double now)
{
    if (now - r->last_sweep < EXPECT_TTL_S)
        return;
    r->last_sweep = now;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(r->expected, &it, &key, &value)) {
        struct expectation *e = value;
        if (e->until <= now) {
            strmap_remove(r->expected, key);
            expectation_free(e);
        }
    }
}

/* The expectation held for key, as the plan reads it; one that lapsed is dropped. */
static struct session_plan_expect expect_snapshot(struct session_reconciler *r, const char *key)
{
    struct session_plan_expect out = {0};
    const struct expectation *e = strmap_get(r->expected, key);
    if (!e)
        return out;
    if (e->until <= loop_now(r)) {
        expect_drop(r, key);
        return out;
    }
    out.held = 1;
    out.body = e->body;
    out.until = e->until;
    return out;
}

/* The expectation for a child found (own: 1) in its cache or not: once the cache shows the
 * session's own child, the write it stood for has arrived. */
static struct session_plan_expect expect_seen(struct session_reconciler *r, const char *key,
                                              int own)
{
    if (own) {
        struct session_plan_expect none = {0};
        expect_drop(r, key);
        return none;
    }
    return expect_snapshot(r, key);
}

/* Whether a write to key of an earlier pass took effect and its object is not in the cache yet.
 * A pass ends only when all its writes are answered, and a failed one drops its expectation, so
 * one still held by a later pass of the same key is a write the API server accepted. */
static int expect_answered(const struct session_reconciler *r, const char *key)
{
    const struct expectation *e = strmap_get(r->expected, key);
    return e && e->until > loop_now(r);
}

/* Records a write to key; returns 0, or -1 when out of memory (then nothing is expected). */
static int expect_set(struct session_reconciler *r, const char *key, unsigned long long body)
{
    double now = loop_now(r);
    expect_sweep(r, now);
    struct expectation *e = strmap_get(r->expected, key);
    if (!e) {
        if (!(e = calloc(1, sizeof(*e))))
            return -1;
        snprintf(e->key, sizeof(e->key), "%s", key);
        if (strmap_put(r->expected, e->key, e) < 0) {
            free(e);
            return -1;
        }
    }
    e->body = body;
    e->until = now + EXPECT_TTL_S;
    return 0;
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

static void pass_done(struct pass *p)
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

static void on_write(const struct kube_result *res, void *ud)
{
    struct write_ctx *w = ud;
    struct pass *p = w->p;
    /* 404 on a delete: already gone, which is what we wanted. 409 on create: a previous pass
     * made it and the cache has not caught up. Neither is an error. */
    /* 409 on a delete with a uid precondition: the name holds another object now, which is
     * not ours to delete; the next pass looks at it. */
    if (res->rc < 0 && !(res->code == 404) &&
        !(res->code == 409 && res->status && res->status->reason == KUBE_REASON_ALREADY_EXISTS) &&
        !(res->code == 409 && w->precondition)) {
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "%s", res->err ? res->err->msg : "write failed");
        if (w->expect_key[0])
            expect_drop(p->r, w->expect_key);
        if (w->counts_start && p->deferred.status) {
            /* No pod will arrive to say more: the session shows its Pending state meanwhile. */
            write_status(p, p->deferred.status);
            record_event(p, &p->deferred);
        }
    }
    if (w->counts_start && res->rc == 0 && res->code == 201)
        p->r->stats.starts++;
    if (w->status && res->rc == 0 && w->expect_key[0]) {
        struct expectation *e = strmap_get(p->r->expected, w->expect_key);
        const char *rv = jget_string(jget(res->object, "metadata"), "resourceVersion");
        if (e && rv)
            snprintf(e->awaited_rv, sizeof(e->awaited_rv), "%s", rv);
    }
    free(w);
    pass_done(p);
}

static struct write_ctx *write_ctx(struct pass *p, const char *expect_key)
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

/* Starts a server-side apply of obj (consumed) to ref; counts as a pending write. With
 * expect_key, the write is remembered (as body_hash, 0: any content) until the cache shows it. */
static void apply_expecting(struct pass *p, const struct kube_ref *ref, struct json_object *obj,
                            const char *expect, unsigned long long body_hash_value,
                            int counts_start)
{
    size_t len = 0;
    const char *body = json_object_to_json_string_length(
        obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    struct kube_write_opts o = {.field_manager = SESSION_FIELD_MANAGER, .force = 1};
    struct telo_err err;
    struct write_ctx *w = write_ctx(p, expect);
    if (!w) {
        json_object_put(obj);
        return;
    }
    w->counts_start = counts_start;
    w->status = ref->subresource != NULL;
    if (expect && expect_set(p->r, expect, body_hash_value) < 0)
        w->expect_key[0] = '\0';
    p->pending++;
    p->r->stats.writes++;
    if (!kube_rest_apply(p->r->t, ref, body, len, &o, on_write, w, &err)) {
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "%s", err.msg);
        p->pending--;
        if (w->expect_key[0])
            expect_drop(p->r, w->expect_key);
        free(w);
    }
    json_object_put(obj);
}

/* Deletes ref; with uid, only while the name still holds that object (a precondition: what we
 * looked at may have been replaced since). */
static void delete_object_uid(struct pass *p, const struct kube_ref *ref, long grace,
                              const char *uid)
{
    struct kube_delete_opts o = {
        .propagation_policy = "Background", .grace_period_seconds = grace, .precondition_uid = uid};
    struct telo_err err;
    struct write_ctx *w = write_ctx(p, NULL);
    if (!w)
        return;
    w->precondition = uid != NULL;
    p->pending++;
    p->r->stats.writes++;
    if (!kube_rest_delete(p->r->t, ref, &o, on_write, w, &err)) {
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "%s", err.msg);
        p->pending--;
        free(w);
    }
}

static void delete_object(struct pass *p, const struct kube_ref *ref, long grace)
{
    delete_object_uid(p, ref, grace, NULL);
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
            delete_object_uid(p, &ref, -1, g->uid);
        }
    } else if (res->rc < 0 && res->code != 404) {
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "%s", res->err ? res->err->msg : "get failed");
    }
    pass_done(p);
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
    json_object_object_add(body, "metadata", meta);
    json_object_object_add(body, "status", json_object_get(status));
    struct kube_ref ref = {.group = "telo.run",
                           .version = "v1alpha1",
                           .resource = "telosessions",
                           .namespace = p->s.namespace,
                           .name = p->s.name,
                           .subresource = "status"};
    p->r->stats.status_writes++;
    /* Remember what we wrote until the cache shows it: a reconcile in between (a child's event
     * arriving before the session's) must not compute the transition again from the stale
     * status, which would write it twice, record its Event twice and move lastTransitionTime. */
    char key[320];
    expect_key(key, sizeof(key), "status", p->s.namespace, p->s.name);
    apply_expecting(p, &ref, body, key, 0, 0);
    struct expectation *e = strmap_get(p->r->expected, key);
    if (e) {
        free(e->status_json);
        e->status_json = strdup(json_object_to_json_string_ext(status, JSON_C_TO_STRING_PLAIN));
        /* What we read, and what our previous write made, are now both behind this write. */
        add_stale(e, p->base_rv);
        add_stale(e, e->awaited_rv);
        e->awaited_rv[0] = '\0';
    }
}

/* When the cached session is still the one our last status write was computed from, that write
 * is its status. */
static void use_written_status(struct pass *p)
{
    char key[320];
    expect_key(key, sizeof(key), "status", p->s.namespace, p->s.name);
    struct expectation *e = strmap_get(p->r->expected, key);
    if (!e)
        return;
    int stale = 0;
    for (int i = 0; i < 4; i++)
        stale |= e->stale_rv[i][0] && strcmp(e->stale_rv[i], p->base_rv) == 0;
    if (e->until <= loop_now(p->r) || !e->status_json || !stale) {
        expect_drop(p->r, key);
        return;
    }
    p->written_status = json_tokener_parse(e->status_json);
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

static void random_token(char out[65])
{
    unsigned char bytes[32];
    if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
        /* Never hand out a guessable token: an empty one fails the Secret's apply instead. */
        out[0] = '\0';
        return;
    }
    for (size_t i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", bytes[i]);
}

/* telo_session_failures_total{reason}: one more session that turned Failed for reason. */
static void count_failure(struct session_reconciler *r, const char *reason)
{
    r->stats.failures++;
    const char *values[] = {reason && *reason ? reason : "Unknown"};
    /* NULL (metrics not registered, or the series bound reached) is a no-op. */
    metrics_counter_add(r->failures ? metrics_series(r->failures, values, NULL) : NULL, 1);
}

/* --- the build Job ------------------------------------------------------------------------ */

static void self_key(const struct pass *p, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", p->s.namespace, p->s.name);
}

static void job_config(const struct pass *p, struct build_config *bc)
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
        snprintf(p->error, sizeof(p->error), "cannot create the build context ConfigMap %s/%s: %s",
                 cw->ns, p->job_name, why);
        struct kube_ref jref = {.group = "batch",
                                .version = "v1",
                                .resource = "jobs",
                                .namespace = cw->ns,
                                .name = p->job_name};
        delete_object_uid(p, &jref, 0, cw->job_uid);
    }
    context_free(cw);
    pass_done(p);
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
        p->r->stats.writes++;
        return kube_rest_delete(p->r->t, &ref, &d, context_step, cw, err) ? 0 : -1;
    default:
        p->r->stats.writes++;
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
    if (res->rc == 0 && res->code == 201 && uid && p->s.bundle_configmap) {
        struct build_config bc;
        job_config(p, &bc);
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
            delete_object_uid(p, &jref, 0, uid);
        }
        json_object_put(cm);
        telo_log(TELO_LOG_INFO, "build job created", "job=%s/%s session=%s/%s tag=%s", bc.namespace,
                 p->job_name, p->s.namespace, p->s.name, p->tag);
    }
    on_write(res, ud);
}

/* Creates the build Job (job consumed) the plan asks for; its context follows on 201. */
static void create_job(struct pass *p, struct json_object *job)
{
    const char *ns = p->r->cfg->build_namespace;
    char key[320];
    expect_key(key, sizeof(key), "jobs", ns, p->job_name);
    struct write_ctx *w = write_ctx(p, key);
    if (!w) {
        json_object_put(job);
        return;
    }
    if (expect_set(p->r, key, 0) < 0)
        w->expect_key[0] = '\0';
    struct kube_ref ref = {.group = "batch", .version = "v1", .resource = "jobs", .namespace = ns};
    struct kube_write_opts o = {.field_manager = SESSION_FIELD_MANAGER};
    struct telo_err err;
    size_t len = 0;
    const char *body = json_object_to_json_string_length(
        job, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    p->pending++;
    p->r->stats.writes++;
    if (!kube_rest_create(p->r->t, &ref, body, len, &o, on_job_created, w, &err)) {
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "%s", err.msg);
        p->pending--;
        if (w->expect_key[0])
            expect_drop(p->r, w->expect_key);
        free(w);
    }
    json_object_put(job);
}

/* Whether the session's own pod is in the pod cache now, or on its way into it. */
static int pod_back(struct pass *p, const char *child)
{
    struct json_object *again = cached(p->r->pods, p->s.namespace, child);
    char key[320];
    expect_key(key, sizeof(key), "pods", p->s.namespace, child);
    int back = session_child_owner(again, p->s.name, p->s.uid) == SESSION_OWNER_OWN ||
               expect_answered(p->r, key);
    json_object_put(again);
    return back;
}

/* telo_image_builds_total{result} and telo_image_build_seconds: once per finished Job. */
static void count_build(struct session_reconciler *r, const struct json_object *job,
                        const char *result, double now)
{
    const char *uid = jget_string(jget((struct json_object *)job, "metadata"), "uid");
    if (!uid || strmap_get(r->counted_jobs, uid))
        return;
    if (strmap_len(r->counted_jobs) >= COUNTED_JOBS_MAX) {
        struct strmap_iter it = {0};
        const char *key;
        void *value;
        while (strmap_next(r->counted_jobs, &it, &key, &value)) {
            strmap_remove(r->counted_jobs, key);
            free(value);
        }
    }
    char *copy = strdup(uid);
    if (!copy || strmap_put(r->counted_jobs, copy, copy) < 0) {
        free(copy);
        return;
    }
    for (size_t i = 0; i < NBUILD_RESULTS; i++) {
        if (strcmp(build_results[i], result) == 0)
            r->builds_total[i]++;
    }
    struct json_object *status = jget((struct json_object *)job, "status");
    double start = timefmt_parse(
        jget_string(jget((struct json_object *)job, "metadata"), "creationTimestamp"));
    double end = timefmt_parse(jget_string(status, "completionTime"));
    struct json_object *conds = jget_array(status, "conditions");
    for (size_t i = 0; end < 0 && conds && i < json_object_array_length(conds); i++) {
        struct json_object *c = json_object_array_get_idx(conds, i);
        const char *type = jget_string(c, "type");
        if (type && strcmp(type, "Failed") == 0)
            end = timefmt_parse(jget_string(c, "lastTransitionTime"));
    }
    if (start >= 0)
        histogram_observe(&r->build_seconds, (end >= 0 ? end : now) - start);
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
        delete_object(p, &ref, w->grace);
        return;
    }
    if (w->verb == SESSION_PLAN_CREATE) {
        create_job(p, obj);
        return;
    }
    if (w->fill_token) {
        char token[65];
        random_token(token);
        json_object_object_add(jget(obj, "stringData"), "token", json_object_new_string(token));
    }
    char key[320];
    expect_key(key, sizeof(key), ref.resource, ref.namespace, w->name);
    apply_expecting(p, &ref, obj, w->expect ? key : NULL, w->body_hash, w->counts_start);
}

/* The status write of the plan, with its Event and the metrics of its transition. */
static void execute_status(struct pass *p, struct session_plan *plan)
{
    struct session_reconciler *r = p->r;
    /* Kept for the pod's create: written should it fail (see on_write). */
    p->deferred = plan->deferred;
    memset(&plan->deferred, 0, sizeof(plan->deferred));
    if (!plan->verdict.changed)
        return;
    if (plan->failed_reason)
        count_failure(r, plan->failed_reason);
    if (plan->cache_hit)
        r->cache_hits++;
    if (plan->startup_seconds >= 0)
        histogram_observe(&r->stats.startup_seconds, plan->startup_seconds);
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
        count_build(r, img->job, plan->image.job_result, img->now);
    if (plan->image.check_registry)
        (void)session_builds_presence(r->builds, img->tag, img->self, 1, &message);
    if (plan->image.fetch_log && uid)
        (void)session_builds_log(r->builds, img->job_name, uid, img->self, 1, &tail);
}

/* Executes plan (released here) and ends the pass's share of the work. */
static void execute(struct pass *p, const struct session_image_obs *img, struct session_plan *plan)
{
    execute_image(p, img, plan);
    p->requeue_after = plan->requeue_after;
    if (plan->wait) {
        session_plan_release(plan);
        pass_done(p);
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
    session_plan_release(plan);
    pass_done(p);
}

/* Gathers the rest of the observation (the other children, the expectations), plans and
 * executes. blocked_*: the bundle check's finding; img: the image step's observation (its
 * job_expected is the plan's to derive), or NULL. */
static void converge(struct pass *p, const char *blocked_reason, const char *blocked_message,
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
        .secret = cached(r->secrets, ns, secret),
        .service = cached(r->services, ns, child),
        .ingress = cached(r->ingresses, ns, child),
        .blocked_reason = blocked_reason,
        .blocked_message = blocked_message,
        .image = img,
        .now = loop_now(r),
    };
    expect_key(key, sizeof(key), "pods", ns, child);
    obs.expect[SESSION_PLAN_POD] = expect_seen(r, key, p->pod_owner == SESSION_OWNER_OWN);
    expect_key(key, sizeof(key), "secrets", ns, secret);
    obs.expect[SESSION_PLAN_SECRET] = expect_seen(
        r, key, session_child_owner(obs.secret, p->s.name, p->s.uid) == SESSION_OWNER_OWN);
    expect_key(key, sizeof(key), "services", ns, child);
    obs.expect[SESSION_PLAN_SERVICE] = expect_seen(
        r, key, session_child_owner(obs.service, p->s.name, p->s.uid) == SESSION_OWNER_OWN);
    expect_key(key, sizeof(key), "ingresses", ns, child);
    obs.expect[SESSION_PLAN_INGRESS] = expect_seen(
        r, key, session_child_owner(obs.ingress, p->s.name, p->s.uid) == SESSION_OWNER_OWN);
    if (img) {
        expect_key(key, sizeof(key), "jobs", r->cfg->build_namespace, img->job_name);
        obs.expect[SESSION_PLAN_JOB] = expect_seen(r, key, img->job != NULL);
    }
    /* Only a pod the session had (status.podName) can have disappeared. */
    obs.pod_back = p->pod_owner != SESSION_OWNER_OWN && jget_string(p->s.status, "podName") &&
                   pod_back(p, child);
    struct session_plan plan;
    if (session_plan_make(&obs, &plan) < 0) {
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "out of memory computing the status");
        pass_done(p);
    } else {
        execute(p, img, &plan);
    }
    json_object_put(obs.secret);
    json_object_put(obs.service);
    json_object_put(obs.ingress);
}

/* --- the image step ------------------------------------------------------------------------ */

/* Gathers the image step's observation from the bundle's key and what the caches and the build
 * edge hold, and converges: the plan decides the step (waiting on an answer, it ends the pass:
 * the answer queues the session again). */
static void image_step(struct pass *p, const struct session_bundle_key *bundle_key)
{
    struct session_reconciler *r = p->r;
    const struct session_config *cfg = r->cfg;
    /* The bundle's tag is the reference runner's; the image's is keyed with the namespace
     * unless builds are shared across namespaces. */
    struct session_bundle_key scoped = *bundle_key;
    const struct session_bundle_key *k = &scoped;
    if (!scoped.error[0])
        session_builds_tag(cfg, &p->s, bundle_key->tag, scoped.tag);
    struct build_config bc;
    job_config(p, &bc);
    char self[320];
    self_key(p, self, sizeof(self));
    snprintf(p->tag, sizeof(p->tag), "%.*s", BUILD_TAG_LEN, k->tag);
    if (build_image_ref(&bc, k->tag, p->ref, sizeof(p->ref)) < 0)
        p->ref[0] = '\0';
    build_job_name(k->tag, p->job_name, sizeof(p->job_name));
    int builds = !k->error[0] && !k->no_dependencies;
    struct json_object *job = builds ? cached(r->jobs, cfg->build_namespace, p->job_name) : NULL;
    const char *message = "", *tail = "";
    enum session_presence presence =
        builds ? session_builds_presence(r->builds, k->tag, self, 0, &message)
               : SESSION_PRESENCE_NONE;
    const char *uid = jget_string(jget(job, "metadata"), "uid");
    enum session_build_log log =
        uid ? session_builds_log(r->builds, p->job_name, uid, self, 0, &tail) : SESSION_LOG_NONE;
    struct session_image_obs obs = {
        .self = self,
        .base_image = session_image(&p->s, cfg),
        .bundle_error = k->error[0] ? k->error : NULL,
        .bundle_error_reason = k->reason[0] ? k->reason : NULL,
        .no_dependencies = k->no_dependencies,
        .tag = k->tag,
        .ref = p->ref,
        .presence = presence,
        .presence_message = message,
        .build_namespace = cfg->build_namespace,
        .job_name = p->job_name,
        .job = job,
        .timeout_seconds = cfg->build_timeout_seconds,
        .log = log,
        .log_tail = tail,
        .old = p->s.status,
        .now = loop_now(r),
    };
    converge(p, NULL, NULL, &obs);
    json_object_put(job);
}

/* The bundle's bytes from the ConfigMap (binaryData, or data as text) and their key. */
static void bundle_image_step(struct pass *p, struct json_object *cm)
{
    const char *key = p->s.bundle_configmap_key;
    const char *b64 = jget_string(jget(cm, "binaryData"), key);
    struct json_object *text = jget(jget(cm, "data"), key);
    char source[400];
    snprintf(source, sizeof(source), "bundle ConfigMap %s/%s key %s", p->s.namespace,
             p->s.bundle_configmap, key);
    struct session_bundle_key k;
    memset(&k, 0, sizeof(k));
    if (b64) {
        p->tgz = util_base64_decode(b64, strlen(b64), &p->tgz_len);
        if (!p->tgz)
            snprintf(k.error, sizeof(k.error), "%s: binaryData is not base64", source);
    } else {
        const char *data = jget_string_of(text);
        size_t n = data ? (size_t)json_object_get_string_len(text) : 0;
        if (!data) {
            snprintf(k.error, sizeof(k.error), "%s: the key holds no string", source);
        } else if ((p->tgz = malloc(n + 1))) {
            memcpy(p->tgz, data, n + 1);
            p->tgz_len = n;
        } else {
            snprintf(k.error, sizeof(k.error), "%s: out of memory", source);
        }
    }
    if (!k.error[0]) {
        /* The same resourceVersion is the same bytes: read a bundle once, not every pass. */
        char memo[600];
        snprintf(memo, sizeof(memo), "%s/%s@%s", p->s.namespace, p->s.bundle_configmap,
                 jget_string(jget(cm, "metadata"), "resourceVersion")
                     ? jget_string(jget(cm, "metadata"), "resourceVersion")
                     : "");
        session_builds_bundle_key(p->r->builds, memo, p->tgz, p->tgz_len, source, &p->s, &k);
    }
    image_step(p, &k);
}

/* The bundle ConfigMap check before a pod is created: a missing bundle is the user's to fix,
 * and a pod waiting on a missing volume would only say "ContainerCreating". res is the read's
 * answer, or for a memo hit the key names the ConfigMap held moments ago. */
static void on_bundle(const struct kube_result *res, void *ud)
{
    struct pass *p = ud;
    char message[600];
    if (res->rc < 0 && res->code == 404) {
        snprintf(message, sizeof(message),
                 "ConfigMap %s (spec.bundle.configMap.name) does not exist in namespace %s; "
                 "create it with: kubectl create configmap %s -n %s --from-file=%s=app.tgz",
                 p->s.bundle_configmap, p->s.namespace, p->s.bundle_configmap, p->s.namespace,
                 p->s.bundle_configmap_key);
        converge(p, "BundleNotFound", message, NULL);
        return;
    }
    if (res->rc < 0) {
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "%s", res->err ? res->err->msg : "get failed");
        pass_done(p);
        return;
    }
    if (!jget(jget(res->object, "binaryData"), p->s.bundle_configmap_key) &&
        !jget(jget(res->object, "data"), p->s.bundle_configmap_key)) {
        snprintf(message, sizeof(message),
                 "ConfigMap %s has no key %s (spec.bundle.configMap.key): put the gzip tar of the "
                 "app under binaryData.%s",
                 p->s.bundle_configmap, p->s.bundle_configmap_key, p->s.bundle_configmap_key);
        converge(p, "BundleNotFound", message, NULL);
        return;
    }
    if (p->keep_image) {
        bundle_image_step(p, res->object);
        return;
    }
    converge(p, NULL, NULL, NULL);
}

/* A read of a bundle ConfigMap that other passes may be waiting on. */
struct bundle_read {
    struct session_reconciler *r;
    struct pass *p;
    char key[320];
};

static void hand_bundle(void *waiter, void *answer)
{
    on_bundle(answer, waiter);
}

static void on_bundle_read(const struct kube_result *res, void *ud)
{
    struct bundle_read *br = ud;
    session_cm_memo_settle(br->r->bundles, br->key, res->rc == 0 ? res->object : NULL,
                           loop_now(br->r), hand_bundle, (void *)res);
    on_bundle(res, br->p);
    free(br);
}

/* Starts the bundle check of a pass that may create the pod: answered from a read moments ago,
 * by joining a read in flight, or by a read of its own. Returns 0, or -1 with err filled (then
 * on_bundle is not called). */
static int check_bundle(struct pass *p, struct telo_err *err)
{
    struct session_reconciler *r = p->r;
    struct kube_ref ref = {.version = "v1",
                           .resource = "configmaps",
                           .namespace = p->s.namespace,
                           .name = p->s.bundle_configmap};
    /* A build reads the bytes themselves: always the current ones (builds.c memoises their key
     * by resourceVersion). */
    if (p->keep_image)
        return kube_rest_get(r->t, &ref, on_bundle, p, err) ? 0 : -1;
    struct bundle_read *br = calloc(1, sizeof(*br));
    if (!br) {
        telo_err_set(err, TELO_ENOMEM, "bundle check: out of memory");
        return -1;
    }
    br->r = r;
    br->p = p;
    snprintf(br->key, sizeof(br->key), "%s/%s", p->s.namespace, p->s.bundle_configmap);
    struct json_object *keys = NULL;
    switch (session_cm_memo_begin(r->bundles, br->key, loop_now(r), p, &keys)) {
    case SESSION_CM_HIT: {
        free(br);
        struct kube_result hit = {.rc = 0, .code = 200, .object = keys};
        on_bundle(&hit, p);
        return 0;
    }
    case SESSION_CM_WAIT:
        free(br);
        return 0;
    case SESSION_CM_FETCH:
        break;
    }
    if (kube_rest_get(r->t, &ref, on_bundle_read, br, err))
        return 0;
    /* Nobody joined yet (the loop has not run since begin): just end the read. */
    struct kube_result failed = {.rc = -err->code, .err = err};
    session_cm_memo_settle(r->bundles, br->key, NULL, loop_now(r), hand_bundle, &failed);
    free(br);
    return -1;
}

/* Reads the session's pod and asks the plan what must be learnt before planning: the bundle
 * (a ConfigMap read), a URL bundle's tag, or nothing; then learns it and converges. */
static void learn(struct pass *p, const char *key)
{
    struct session_reconciler *r = p->r;
    char child[64], pod_key[320];
    session_child_name(&p->s, child, sizeof(child));
    p->pod = cached(r->pods, p->s.namespace, child);
    p->pod_owner = session_child_owner(p->pod, p->s.name, p->s.uid);
    expect_key(pod_key, sizeof(pod_key), "pods", p->s.namespace, child);
    struct session_plan_obs obs = {.s = &p->s, .cfg = r->cfg, .pod = p->pod, .now = loop_now(r)};
    obs.expect[SESSION_PLAN_POD] = expect_seen(r, pod_key, p->pod_owner == SESSION_OWNER_OWN);
    /* Builds decide the image in the bundle's callback; other passes keep what was decided. */
    p->keep_image = r->builds && session_builds_needed(r->cfg, &p->s);
    struct telo_err err;
    switch (session_plan_learn(&obs)) {
    case SESSION_PLAN_LEARN_URL_KEY: {
        struct session_bundle_key k;
        if (session_builds_url_key(r->builds, &p->s, key, &k)) {
            image_step(p, &k);
            return;
        }
        p->requeue_after = SESSION_PLAN_ANSWER_WAIT_S;
        pass_done(p);
        return;
    }
    case SESSION_PLAN_LEARN_BUNDLE:
        if (check_bundle(p, &err) == 0)
            return;
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "%s", err.msg);
        pass_done(p);
        return;
    default: /* nothing to learn, or a base image refused: the plan says which */
        converge(p, NULL, NULL, NULL);
        return;
    }
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
        pass_done(p);
        return;
    }
    struct json_object *status = json_object_new_object();
    json_object_object_add(status, "phase", json_object_new_string("Failed"));
    json_object_object_add(status, "reason", json_object_new_string("InvalidSpec"));
    json_object_object_add(status, "message", json_object_new_string(why));
    struct json_object *old = jget(obj, "status");
    p->outcome = CTRL_TERMINAL_ERROR;
    snprintf(p->error, sizeof(p->error), "%s", why);
    p->pending++;
    if (!(old && json_object_equal(jget(old, "message"), jget(status, "message"))))
        write_status(p, status);
    json_object_put(status);
    pass_done(p);
}

/* Whether the config watches namespace ns. With one namespace the informers list only that one;
 * with several they list every namespace (the API has no "namespace in" selector), so the
 * others' sessions are in the cache and must be left alone. */
static int watched(const struct session_config *cfg, const char *ns, size_t nslen)
{
    if (cfg->nnamespaces == 0)
        return 1;
    for (size_t i = 0; i < cfg->nnamespaces; i++) {
        if (strlen(cfg->namespaces[i]) == nslen && strncmp(cfg->namespaces[i], ns, nslen) == 0)
            return 1;
    }
    return 0;
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
    if (!slash || !watched(r->cfg, key, (size_t)(slash - key))) {
        free(p);
        ctrl_reconcile_finish(rec, &ok);
        return;
    }
    const struct cache_object *co = cache_store_get(ctrl_informer_store(r->sessions), key);
    struct json_object *obj = co ? json_tokener_parse(co->json) : NULL;
    if (co)
        snprintf(p->base_rv, sizeof(p->base_rv), "%s", co->resource_version);
    if (!obj) {
        /* Deleted: its children go with it through their owner references. */
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
        pass_free(p);
        ctrl_reconcile_finish(rec, &ok);
        return;
    }
    p->pending = 1; /* held until every write of the pass has started */
    learn(p, key);
}

/* --- registration -------------------------------------------------------------------------- */

static const char *const pod_paths[] = {
    "metadata.labels",
    "metadata.creationTimestamp",
    "status.phase",
    "status.reason",
    "status.message",
    "status.podIP",
    "status.startTime",
    "status.conditions[].type",
    "status.conditions[].status",
    "status.conditions[].reason",
    "status.conditions[].message",
    "status.initContainerStatuses[].name",
    "status.initContainerStatuses[].state",
    "status.initContainerStatuses[].lastState",
    "status.containerStatuses[].name",
    "status.containerStatuses[].state",
    "status.containerStatuses[].lastState",
};
static const char *const service_paths[] = {"metadata.labels", "spec.ports"};
static const char *const ingress_paths[] = {"metadata.labels", "spec"};
static const char *const secret_paths[] = {"metadata.labels"};
static const char *const session_paths[] = {"metadata.labels", "metadata.creationTimestamp", "spec",
                                            "status"};
static const char *const job_paths[] = {"metadata.labels", "metadata.annotations",
                                        "metadata.creationTimestamp", "status"};

struct projection {
    const char *const *paths;
    size_t n;
};

static struct json_object *project(struct json_object *obj, void *arg)
{
    const struct projection *pr = arg;
    return cache_transform_project(obj, pr->paths, pr->n);
}

#define PROJECTION(list)                                                                           \
    {                                                                                              \
        (list), sizeof(list) / sizeof((list)[0])                                                   \
    }
static struct projection pod_projection = PROJECTION(pod_paths);
static struct projection service_projection = PROJECTION(service_paths);
static struct projection ingress_projection = PROJECTION(ingress_paths);
static struct projection secret_projection = PROJECTION(secret_paths);
static struct projection session_projection = PROJECTION(session_paths);
static struct projection job_projection = PROJECTION(job_paths);

/* Sessions waiting on a build, by its tag. */
static void index_build_tag(struct json_object *obj, const void *arg,
                            void (*emit)(void *ctx, const char *value), void *ctx)
{
    (void)arg;
    struct json_object *status = jget(obj, "status");
    const char *phase = jget_string(status, "phase");
    const char *tag = jget_string(jget(status, "image"), "tag");
    if (phase && tag && strcmp(phase, "Building") == 0)
        emit(ctx, tag);
}

struct job_waiters {
    void (*emit)(void *ctx, const char *key);
    void *ctx;
};

static void emit_session(void *ctx, const struct cache_object *obj)
{
    struct job_waiters *w = ctx;
    w->emit(w->ctx, obj->key);
}

/* A build Job's change concerns the sessions in another namespace waiting on its tag. */
static void job_to_sessions(void *ud, const struct cache_object *obj,
                            void (*emit)(void *ctx, const char *key), void *ctx)
{
    struct session_reconciler *r = ud;
    struct json_object *job = json_tokener_parse(obj->json);
    const char *tag = jget_string(jget(jget(job, "metadata"), "labels"), BUILD_LABEL_TAG);
    struct job_waiters w = {emit, ctx};
    if (tag)
        (void)cache_store_by_index(ctrl_informer_store(r->sessions), INDEX_BUILD_TAG, tag,
                                   emit_session, &w, NULL);
    json_object_put(job);
}

static void requeue_session(void *ud, const char *key)
{
    struct session_reconciler *r = ud;
    (void)ctrl_controller_enqueue(r->c, key);
}

/* The build Jobs in the build namespace, and the edge that talks to the registry. */
static int add_builds(struct session_reconciler *r, struct telo_err *err)
{
    char selector[320];
    snprintf(selector, sizeof(selector), SESSION_MANAGED_BY "=%s," BUILD_LABEL_BUILD "=true",
             r->cfg->managed_by);
    struct cache_reflector_config cfg = {
        .ref = {.group = "batch",
                .version = "v1",
                .resource = "jobs",
                .namespace = r->cfg->build_namespace},
        .label_selector = selector,
        .transform = project,
        .transform_arg = &job_projection,
    };
    if (!(r->jobs = ctrl_manager_add_informer(r->m, "jobs", &cfg, err)) ||
        ctrl_controller_watch_mapped(r->c, r->jobs, job_to_sessions, r, err) < 0 ||
        !(r->builds = session_builds_new(r->t, r->cfg, requeue_session, r, err)))
        return -1;
    return 0;
}

static struct ctrl_informer *child_informer(struct session_reconciler *r, const char *name,
                                            const char *group, const char *resource,
                                            struct projection *pr, const char *selector,
                                            struct telo_err *err)
{
    static const struct cache_index_def idx[] = {{"namespace", cache_index_namespace, NULL}};
    struct cache_reflector_config cfg = {
        .ref = {.group = group,
                .version = "v1",
                .resource = resource,
                .namespace = r->cfg->nnamespaces == 1 ? r->cfg->namespaces[0] : NULL},
        .label_selector = selector,
        .transform = project,
        .transform_arg = pr,
        .indexes = idx,
        .nindexes = 1,
    };
    struct ctrl_informer *inf = ctrl_manager_add_informer(r->m, name, &cfg, err);
    if (inf && r->c && ctrl_controller_watch_owned(r->c, inf, "TeloSession", err) < 0)
        return NULL;
    return inf;
}

struct session_reconciler *session_reconciler_new(struct ctrl_manager *m, struct kube_transport *t,
                                                  const struct session_config *cfg,
                                                  struct events_recorder *events,
                                                  struct telo_err *err)
{
    struct session_reconciler *r = calloc(1, sizeof(*r));
    if (!r) {
        telo_err_set(err, TELO_ENOMEM, "session reconciler: out of memory");
        return NULL;
    }
    r->m = m;
    r->t = t;
    r->cfg = cfg;
    r->events = events;
    if (!(r->expected = strmap_new()) || !(r->counted_jobs = strmap_new()) ||
        !(r->bundles = session_cm_memo_new(BUNDLE_MEMO_S))) {
        strmap_free(r->expected);
        strmap_free(r->counted_jobs);
        free(r);
        telo_err_set(err, TELO_ENOMEM, "session reconciler: out of memory");
        return NULL;
    }
    histogram_init_exponential(&r->stats.startup_seconds, STARTUP_BUCKET_START, 2, STARTUP_BUCKETS);
    histogram_init_exponential(&r->build_seconds, BUILD_BUCKET_START, 2, BUILD_BUCKETS);
    static const struct cache_index_def idx[] = {{"namespace", cache_index_namespace, NULL},
                                                 {INDEX_BUILD_TAG, index_build_tag, NULL}};
    struct cache_reflector_config scfg = {
        .ref = {.group = "telo.run",
                .version = "v1alpha1",
                .resource = "telosessions",
                .namespace = cfg->nnamespaces == 1 ? cfg->namespaces[0] : NULL},
        .transform = project,
        .transform_arg = &session_projection,
        .indexes = idx,
        .nindexes = 2,
    };
    char selector[256];
    snprintf(selector, sizeof(selector), SESSION_MANAGED_BY "=%s", cfg->managed_by);
    if (!(r->sessions = ctrl_manager_add_informer(m, "telosessions", &scfg, err)) ||
        !(r->c = ctrl_manager_add_controller(m, "telosession", r->sessions, reconcile, r, err)) ||
        !(r->pods = child_informer(r, "pods", NULL, "pods", &pod_projection, selector, err)) ||
        !(r->services = child_informer(r, "services", NULL, "services", &service_projection,
                                       selector, err)) ||
        !(r->ingresses = child_informer(r, "ingresses", "networking.k8s.io", "ingresses",
                                        &ingress_projection, selector, err)) ||
        !(r->secrets =
              child_informer(r, "secrets", NULL, "secrets", &secret_projection, selector, err)) ||
        (cfg->build_repository && add_builds(r, err) < 0)) {
        session_reconciler_free(r);
        return NULL;
    }
    return r;
}

void session_reconciler_free(struct session_reconciler *r)
{
    if (!r)
        return;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (r->expected && strmap_next(r->expected, &it, &key, &value))
        expectation_free(value);
    strmap_free(r->expected);
    it = (struct strmap_iter){0};
    while (r->counted_jobs && strmap_next(r->counted_jobs, &it, &key, &value))
        free(value);
    strmap_free(r->counted_jobs);
    session_cm_memo_free(r->bundles);
    session_builds_free(r->builds);
    free(r);
}

struct phase_count {
    const char *phase;
    unsigned long n;
};

struct phase_tally {
    struct phase_count counts[8];
    size_t n;
    const struct session_config *cfg;
};

static void tally(void *ud, const struct cache_object *obj)
{
    struct phase_tally *t = ud;
    const char *slash = strchr(obj->key, '/');
    if (!slash || !watched(t->cfg, obj->key, (size_t)(slash - obj->key)))
        return;
    struct json_object *o = json_tokener_parse(obj->json);
    const char *phase = jget_string(jget(o, "status"), "phase");
    static const char *const phases[] = {"Pending",   "Building", "Provisioning", "Running",
                                         "Succeeded", "Failed",   "Stopped"};
    const char *known = "Pending";
    for (size_t i = 0; phase && i < sizeof(phases) / sizeof(phases[0]); i++) {
        if (strcmp(phase, phases[i]) == 0)
            known = phases[i];
    }
    json_object_put(o);
    for (size_t i = 0; i < t->n; i++) {
        if (t->counts[i].phase == known) {
            t->counts[i].n++;
            return;
        }
    }
    if (t->n < 8)
        t->counts[t->n++] = (struct phase_count){known, 1};
}

void session_reconciler_count_phases(const struct session_reconciler *r,
                                     void (*fn)(void *ud, const char *phase, unsigned long n),
                                     void *ud)
{
    struct phase_tally t = {.n = 0, .cfg = r->cfg};
    cache_store_each(ctrl_informer_store(r->sessions), tally, &t);
    for (size_t i = 0; i < t.n; i++)
        fn(ud, t.counts[i].phase, t.counts[i].n);
}

const struct session_stats *session_reconciler_stats(const struct session_reconciler *r)
{
    return &r->stats;
}

struct phase_gauge {
    struct metrics_family *fam;
    int seen[8];
};

static const char *const all_phases[] = {"Pending",   "Building", "Provisioning", "Running",
                                         "Succeeded", "Failed",   "Stopped"};

static void set_phase(void *ud, const char *phase, unsigned long n)
{
    struct phase_gauge *g = ud;
    const char *v[] = {phase};
    metrics_gauge_set(metrics_series(g->fam, v, NULL), (double)n);
    for (size_t i = 0; i < sizeof(all_phases) / sizeof(all_phases[0]); i++) {
        if (strcmp(all_phases[i], phase) == 0)
            g->seen[i] = 1;
    }
}

static void collect(struct metrics_registry *reg, void *user)
{
    (void)reg;
    struct session_reconciler *r = user;
    struct phase_gauge g = {.fam = r->phases};
    session_reconciler_count_phases(r, set_phase, &g);
    /* Phases nobody is in read 0, not their last value. */
    for (size_t i = 0; i < sizeof(all_phases) / sizeof(all_phases[0]); i++) {
        if (!g.seen[i]) {
            const char *v[] = {all_phases[i]};
            metrics_gauge_set(metrics_series(r->phases, v, NULL), 0);
        }
    }
    metrics_counter_set(metrics_series(r->starts, NULL, NULL), (double)r->stats.starts);
    metrics_histogram_load(metrics_series(r->startup, NULL, NULL), &r->stats.startup_seconds);
    for (size_t i = 0; i < NBUILD_RESULTS; i++) {
        const char *v[] = {build_results[i]};
        metrics_counter_set(metrics_series(r->builds_fam, v, NULL), (double)r->builds_total[i]);
    }
    metrics_counter_set(metrics_series(r->hits_fam, NULL, NULL), (double)r->cache_hits);
    metrics_histogram_load(metrics_series(r->build_hist, NULL, NULL), &r->build_seconds);
}

/* A histogram family whose buckets are those of h (copied into buckets, n of them). */
static struct metrics_desc histogram_desc(const char *name, const char *help,
                                          const struct histogram *h, double *buckets, int n)
{
    for (int i = 0; i < n; i++)
        buckets[i] = h->bounds[i];
    return (struct metrics_desc){.type = METRICS_HISTOGRAM,
                                 .name = name,
                                 .help = help,
                                 .buckets = buckets,
                                 .nbuckets = (size_t)n};
}

int session_reconciler_register_metrics(struct session_reconciler *r, struct metrics_registry *reg,
                                        struct telo_err *err)
{
    static const char *const phase_label[] = {"phase", NULL};
    static const char *const reason_label[] = {"reason", NULL};
    double buckets[STARTUP_BUCKETS];
    struct metrics_desc phases = {.type = METRICS_GAUGE,
                                  .name = "telo_sessions",
                                  .help = "TeloSessions by phase",
                                  .labels = phase_label};
    struct metrics_desc starts = {.type = METRICS_COUNTER,
                                  .name = "telo_session_starts_total",
                                  .help = "Session pods created"};
    struct metrics_desc failures = {.type = METRICS_COUNTER,
                                    .name = "telo_session_failures_total",
                                    .help = "Sessions that ended Failed, by status.reason",
                                    .labels = reason_label};
    struct metrics_desc startup = histogram_desc(
        "telo_session_startup_seconds", "Seconds from a TeloSession's creation to Running",
        &r->stats.startup_seconds, buckets, STARTUP_BUCKETS);
    static const char *const result_label[] = {"result", NULL};
    double build_buckets[BUILD_BUCKETS];
    struct metrics_desc builds = {.type = METRICS_COUNTER,
                                  .name = "telo_image_builds_total",
                                  .help = "Image build Jobs that finished, by result",
                                  .labels = result_label};
    struct metrics_desc hits = {.type = METRICS_COUNTER,
                                .name = "telo_image_cache_hits_total",
                                .help = "Sessions that found their image in the registry"};
    struct metrics_desc build_hist =
        histogram_desc("telo_image_build_seconds", "Seconds from a build Job's creation to its end",
                       &r->build_seconds, build_buckets, BUILD_BUCKETS);
    if (!(r->builds_fam = metrics_register(reg, &builds, err)) ||
        !(r->hits_fam = metrics_register(reg, &hits, err)) ||
        !(r->build_hist = metrics_register(reg, &build_hist, err)))
        return -err->code;
    if (!(r->phases = metrics_register(reg, &phases, err)) ||
        !(r->starts = metrics_register(reg, &starts, err)) ||
        !(r->failures = metrics_register(reg, &failures, err)) ||
        !(r->startup = metrics_register(reg, &startup, err)))
        return -err->code;
    return metrics_add_collector(reg, collect, r, err);
}
