/* Tests for pkg/session/plan.c: one table row per create, update and delete decision of a
 * TeloSession reconcile. Each row is an observation (the session's status and spec, its
 * children as the caches hold them, the writes of ours not cached yet, builds and their
 * answers, the clock) and the plan expected from it (the writes, the status written or held
 * back, the predecessor's children to delete, the requeue). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "imagebuild/job.h"
#include "session/config.h"
#include "session/desired.h"
#include "session/plan.h"
#include "session/refusal.h"
#include "session/spec.h"

#include <json.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 2026-03-01T10:00:00Z: every fixture pod was created then. */
#define T0       1772359200.0
#define UID      "0b6f2d7a-6a44-4c84-8a55-2d9b3c0e1f00"
#define PRED_UID "99999999-6a44-4c84-8a55-2d9b3c0e1f00"
#define TAG      "0123456789abcdef0123456789abcdef"
#define REF      "127.0.0.1:5001/telo/apps:" TAG
#define JOB      "telo-build-" TAG
/* The session's Ingress rules, as a patch carries them whole. */
#define RULES                                                                                      \
    "[{\"host\":\"8080-hello-demo-cjouygjdnwlb5vco.telo.test\",\"http\":{\"paths\":[{\"path\":"    \
    "\"/\",\"pathType\":\"Prefix\",\"backend\":{\"service\":{\"name\":\"telo-run-hello\","         \
    "\"port\":{\"number\":8080}}}}]}}]"

/* Whose a child under the session's name is. */
enum who {
    NONE,
    OWN,
    OWN_DIFF,   /* the session's own, with a spec other than the one it wants */
    PRED,       /* a deleted predecessor's (same name, another uid) */
    PRED_GOING, /* a predecessor's, being deleted already */
    FOREIGN,    /* someone else's: no controller reference */
};

/* Writes of ours held as expectations, by child bit. */
#define X_POD     (1 << SESSION_PLAN_POD)
#define X_SECRET  (1 << SESSION_PLAN_SECRET)
#define X_SERVICE (1 << SESSION_PLAN_SERVICE)
#define X_INGRESS (1 << SESSION_PLAN_INGRESS)
#define X_JOB     (1 << SESSION_PLAN_JOB)

/* Builds: what the image step gathered (IMG_NONE: no step ran). */
enum img {
    IMG_NONE,
    IMG_NO_ANSWER,  /* the registry not asked yet */
    IMG_PRESENT,    /* the registry has the image */
    IMG_ABSENT,     /* it has not, no Job */
    IMG_RUNNING,    /* its Job runs */
    IMG_SUCCEEDED,  /* its Job succeeded */
    IMG_FAILED,     /* its Job failed, no log yet */
    IMG_FAILED_LOG, /* its Job failed, the log's tail read */
    IMG_NO_DEPS,    /* the bundle imports nothing */
    IMG_BAD_BUNDLE, /* the bundle cannot be used */
};

struct row {
    const char *name;
    const char *spec;   /* members added to the spec: ",\"stopped\":true" */
    const char *status; /* the session's status, or NULL */
    const char *pod;    /* a fixture pod (test/unit/data/session/pod-<pod>.json), or NULL */
    enum who pod_who, secret, service, ingress;
    int held;       /* X_* expectations held (for 10 s more) */
    int held_other; /* X_* of those held for a body other than the one wanted */
    int pod_back;   /* the second read of the pod cache shows the session's pod */
    int builds;     /* build.repository set */
    int no_ingress; /* no ingress.baseDomain: no Ingress wanted */
    int no_token;   /* spec.attachToken unset: no attach-token Secret wanted (every other row
                     * sets it, so each row sees every child) */
    enum img img;
    const char *blocked; /* BundleNotFound */
    double now;          /* seconds after T0 */
    /* The plan expected. */
    const char *writes;   /* "create:pod* delete:service": '*' when the write is expected */
    const char *phase;    /* the status written, "-" when none */
    const char *deferred; /* the status held back for the pod's create, or NULL */
    double requeue;
    const char *gone;   /* "pod secret": predecessor's children to delete, or NULL */
    const char *reason; /* the status' reason when phase is written, or NULL: unchecked */
};

static const char *const child_names[] = {"pod", "secret", "service", "ingress", "job", "session"};
static const char *const verbs[] = {"patch", "create", "delete"};

static struct json_object *parse(const char *text)
{
    struct json_object *o = json_tokener_parse(text);
    if (!o)
        fail_msg("bad JSON: %s", text);
    return o;
}

static struct json_object *session_json(const struct row *row)
{
    char text[4096];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"telo.run/v1alpha1\",\"kind\":\"TeloSession\","
             "\"metadata\":{\"name\":\"hello\",\"namespace\":\"demo\",\"generation\":1,"
             "\"uid\":\"" UID "\",\"creationTimestamp\":\"2026-03-01T09:59:59Z\"},"
             "\"spec\":{\"entry\":\"app/telo.yaml\","
             "\"bundle\":{\"configMap\":{\"name\":\"hello-app\"}},"
             "\"ports\":[{\"port\":8080,\"protocol\":\"TCP\"}]%s%s}%s%s%s}",
             row->no_token ? "" : ",\"attachToken\":true", row->spec ? row->spec : "",
             row->status ? ",\"status\":" : "", row->status ? row->status : "", "");
    return parse(text);
}

/* Makes obj (a child the session would write) into who's. */
static struct json_object *owned_as(struct json_object *obj, enum who who, const char *uid)
{
    struct json_object *meta = json_object_object_get(obj, "metadata");
    json_object_object_add(meta, "uid", json_object_new_string(uid));
    struct json_object *owners = json_object_object_get(meta, "ownerReferences");
    struct json_object *ref = json_object_array_get_idx(owners, 0);
    if (who == PRED || who == PRED_GOING)
        json_object_object_add(ref, "uid", json_object_new_string(PRED_UID));
    if (who == PRED_GOING)
        json_object_object_add(meta, "deletionTimestamp",
                               json_object_new_string("2026-03-01T10:00:00Z"));
    if (who == FOREIGN)
        json_object_object_del(meta, "ownerReferences");
    return obj;
}

static struct json_object *load_pod(const char *name, enum who who)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/session/pod-%s.json", TELO_TEST_DATA, name);
    struct json_object *pod = json_object_from_file(path);
    if (!pod)
        fail_msg("cannot read %s", path);
    return owned_as(pod, who, "7c1e5b0e-2f4d-4d7e-9a51-3f1f0d2c8a11");
}

static struct json_object *child(const struct session *s, const struct session_config *cfg,
                                 enum session_plan_child which, enum who who)
{
    struct json_object *obj = NULL;
    if (who == NONE)
        return NULL;
    if (which == SESSION_PLAN_SECRET)
        obj = session_desired_secret(s, cfg, "t");
    else if (which == SESSION_PLAN_SERVICE)
        obj = session_desired_service(s, cfg);
    else
        obj = session_desired_ingress(s, cfg);
    if (!obj && which == SESSION_PLAN_INGRESS) {
        /* One made while an ingress domain was configured. */
        struct session_config *with = session_config_new();
        struct telo_err err;
        assert_int_equal(session_config_set(with, "ingress.baseDomain=telo.test", &err), 0);
        obj = session_desired_ingress(s, with);
        session_config_free(with);
    }
    assert_non_null(obj);
    if (who == OWN_DIFF)
        json_object_object_add(json_object_object_get(obj, "spec"),
                               which == SESSION_PLAN_SERVICE ? "ports" : "rules",
                               json_object_new_array());
    return owned_as(obj, who, child_names[which]);
}

/* A build Job created at T0 by this session, with status_json as its status. */
static struct json_object *job_json(const char *status_json)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"metadata\":{\"name\":\"" JOB "\",\"namespace\":\"telo-builds\",\"uid\":\"u1\","
             "\"creationTimestamp\":\"2026-03-01T10:00:00Z\","
             "\"annotations\":{\"" BUILD_ANNOTATION_BY "\":\"demo/hello\"}},\"status\":%s}",
             status_json);
    return parse(text);
}

/* The image step's observation for row (the Job, if any, into *job). */
static void image_obs(const struct row *row, const struct session *s,
                      const struct session_config *cfg, struct session_image_obs *io,
                      struct json_object **job)
{
    memset(io, 0, sizeof(*io));
    io->self = "demo/hello";
    io->base_image = session_image(s, cfg);
    io->tag = TAG;
    io->ref = REF;
    io->build_namespace = "telo-builds";
    io->job_name = JOB;
    io->timeout_seconds = 600;
    io->old = s->status;
    io->now = T0 + row->now;
    static const char failed[] = "{\"failed\":1,\"conditions\":[{\"type\":\"Failed\","
                                 "\"status\":\"True\",\"reason\":\"BackoffLimitExceeded\"}]}";
    switch (row->img) {
    case IMG_PRESENT:
        io->presence = SESSION_PRESENCE_PRESENT;
        break;
    case IMG_ABSENT:
        io->presence = SESSION_PRESENCE_ABSENT;
        break;
    case IMG_RUNNING:
        io->presence = SESSION_PRESENCE_ABSENT;
        *job = job_json("{\"active\":1}");
        break;
    case IMG_SUCCEEDED:
        io->presence = SESSION_PRESENCE_ABSENT;
        *job = job_json("{\"succeeded\":1,\"completionTime\":\"2026-03-01T10:01:00Z\","
                        "\"conditions\":[{\"type\":\"Complete\",\"status\":\"True\"}]}");
        break;
    case IMG_FAILED:
    case IMG_FAILED_LOG:
        io->presence = SESSION_PRESENCE_ABSENT;
        *job = job_json(failed);
        io->log = row->img == IMG_FAILED_LOG ? SESSION_LOG_DONE : SESSION_LOG_NONE;
        io->log_tail = "error: npm install failed";
        break;
    case IMG_NO_DEPS:
        io->no_dependencies = 1;
        break;
    case IMG_BAD_BUNDLE:
        io->bundle_error = "bundle ConfigMap demo/hello-app key bundle.tgz: not a gzip tar";
        break;
    default:
        break;
    }
    io->job = *job;
}

static void render(const struct session_plan *plan, char *out, size_t len)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < plan->nwrites && n < len; i++) {
        const struct session_plan_write *w = &plan->writes[i];
        n += (size_t)snprintf(out + n, len - n, "%s%s:%s%s", i ? " " : "", verbs[w->verb],
                              child_names[w->child], w->expect ? "*" : "");
    }
}

static void render_gone(const struct session_plan *plan, char *out, size_t len)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < plan->ngone && n < len; i++)
        n += (size_t)snprintf(out + n, len - n, "%s%s", i ? " " : "",
                              child_names[plan->gone[i].child]);
}

struct world;
static void check_delete_uids(const struct session_plan *plan, const struct world *w);

/* A session's world for row: config, session, children, expectations; plans it into plan. */
struct world {
    struct session_config *cfg;
    struct json_object *obj, *pod, *secret, *service, *ingress, *job;
    struct session s;
    struct session_image_obs io;
    struct session_plan_obs obs;
};

static void world_init(struct world *w, const struct row *row)
{
    struct telo_err err;
    memset(w, 0, sizeof(*w));
    w->cfg = session_config_new();
    assert_non_null(w->cfg);
    if (!row->no_ingress)
        assert_int_equal(session_config_set(w->cfg, "ingress.baseDomain=telo.test", &err), 0);
    if (row->builds)
        assert_int_equal(
            session_config_set(w->cfg, "build.repository=127.0.0.1:5001/telo/apps", &err), 0);
    w->obj = session_json(row);
    if (session_spec_parse(w->obj, &w->s, &err) < 0)
        fail_msg("%s: session_spec_parse: %s", row->name, err.msg);
    w->pod = row->pod ? load_pod(row->pod, row->pod_who) : NULL;
    w->secret = child(&w->s, w->cfg, SESSION_PLAN_SECRET, row->secret);
    w->service = child(&w->s, w->cfg, SESSION_PLAN_SERVICE, row->service);
    w->ingress = child(&w->s, w->cfg, SESSION_PLAN_INGRESS, row->ingress);
    struct session_plan_obs *obs = &w->obs;
    obs->s = &w->s;
    obs->cfg = w->cfg;
    obs->pod = w->pod;
    obs->secret = w->secret;
    obs->service = w->service;
    obs->ingress = w->ingress;
    obs->pod_back = row->pod_back;
    obs->blocked_reason = row->blocked;
    obs->blocked_message = row->blocked ? "ConfigMap hello-app does not exist" : NULL;
    obs->now = T0 + row->now;
    for (int c = 0; c < SESSION_PLAN_NCHILDREN; c++) {
        struct session_plan_expect *e = &obs->expect[c];
        if (!(row->held & (1 << c)))
            continue;
        e->held = 1;
        e->until = obs->now + 10;
        struct json_object *want = NULL;
        if (c == SESSION_PLAN_SERVICE)
            want = session_desired_service(&w->s, w->cfg);
        if (c == SESSION_PLAN_INGRESS)
            want = session_desired_ingress(&w->s, w->cfg);
        e->body = want ? session_plan_body_hash(want) : 0;
        if (row->held_other & (1 << c))
            e->body = 12345;
        json_object_put(want);
    }
    if (row->img != IMG_NONE) {
        image_obs(row, &w->s, w->cfg, &w->io, &w->job);
        obs->image = &w->io;
    }
}

static void world_free(struct world *w)
{
    session_spec_release(&w->s);
    json_object_put(w->obj);
    json_object_put(w->pod);
    json_object_put(w->secret);
    json_object_put(w->service);
    json_object_put(w->ingress);
    json_object_put(w->job);
    session_config_free(w->cfg);
}

static const char *phase_of(const struct session_verdict *v)
{
    const char *phase =
        v->status ? json_object_get_string(json_object_object_get(v->status, "phase")) : NULL;
    return phase ? phase : "?";
}

/* Every delete is conditional on the uid of the object the plan saw under the name: by the time
 * it lands, the name may hold a successor (a new run's pod, a re-created session). */
static void check_delete_uids(const struct session_plan *plan, const struct world *w)
{
    for (size_t i = 0; i < plan->nwrites; i++) {
        const struct session_plan_write *d = &plan->writes[i];
        if (d->verb != SESSION_PLAN_DELETE)
            continue;
        const struct json_object *seen = d->child == SESSION_PLAN_POD       ? w->pod
                                         : d->child == SESSION_PLAN_SERVICE ? w->service
                                         : d->child == SESSION_PLAN_INGRESS ? w->ingress
                                         : d->child == SESSION_PLAN_SECRET  ? w->secret
                                                                            : w->obj;
        assert_non_null(seen);
        const char *uid = json_object_get_string(json_object_object_get(
            json_object_object_get((struct json_object *)seen, "metadata"), "uid"));
        assert_non_null(uid);
        assert_string_equal(d->uid, uid);
    }
}

static void check_row(const struct row *row)
{
    struct world w;
    world_init(&w, row);
    struct session_plan plan;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    char writes[512], gone[256];
    render(&plan, writes, sizeof(writes));
    render_gone(&plan, gone, sizeof(gone));
    check_delete_uids(&plan, &w);
    const char *phase = plan.verdict.changed ? phase_of(&plan.verdict) : "-";
    const char *deferred = plan.deferred.status ? phase_of(&plan.deferred) : NULL;
    const char *reason =
        plan.verdict.changed && plan.verdict.status
            ? json_object_get_string(json_object_object_get(plan.verdict.status, "reason"))
            : NULL;
    print_message("%-58s writes=[%s] phase=%s deferred=%s requeue=%.2f gone=[%s] reason=%s\n",
                  row->name, writes, phase, deferred ? deferred : "-", plan.requeue_after, gone,
                  reason ? reason : "-");
    assert_string_equal(writes, row->writes);
    assert_string_equal(phase, row->phase);
    assert_string_equal(deferred ? deferred : "-", row->deferred ? row->deferred : "-");
    assert_true(fabs(plan.requeue_after - row->requeue) < 0.001);
    assert_string_equal(gone, row->gone ? row->gone : "");
    if (row->reason)
        assert_string_equal(reason ? reason : "-", row->reason);
    session_plan_release(&plan);
    world_free(&w);
}

#define RUNNING                                                                                    \
    "{\"phase\":\"Running\",\"podName\":\"telo-run-hello\","                                       \
    "\"podUID\":\"7c1e5b0e-2f4d-4d7e-9a51-3f1f0d2c8a11\"}"
#define SUCCEEDED_LONG_AGO                                                                         \
    "{\"phase\":\"Succeeded\",\"podName\":\"telo-run-hello\","                                     \
    "\"completionTime\":\"2026-03-01T09:00:00Z\"}"

/* The sessions without builds: every child in every phase. */
static const struct row plain_rows[] = {
    /* A new session: its pod, Service, Ingress and Secret at once; its Pending waits for the
     * pod's arrival, which writes what follows. */
    {.name = "new session creates every child",
     .writes = "create:pod* create:service* create:ingress* create:secret*",
     .phase = "-",
     .deferred = "Pending"},
    /* spec.attachToken unset (the default): no Secret, and one left from when it was set is
     * deleted, which revokes its token. */
    {.name = "new session without attachToken: no Secret",
     .no_token = 1,
     .writes = "create:pod* create:service* create:ingress*",
     .phase = "-",
     .deferred = "Pending"},
    {.name = "attachToken turned off: our Secret deleted",
     .no_token = 1,
     .pod = "pending-scheduled",
     .pod_who = OWN,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .now = 0.5,
     .writes = "delete:secret",
     .phase = "-",
     .requeue = 1.5},
    {.name = "attachToken off, stopped: our Secret deleted",
     .no_token = 1,
     .spec = ",\"stopped\":true",
     .secret = OWN,
     .now = 5,
     .writes = "delete:secret",
     .phase = "Stopped"},
    {.name = "attachToken off, another's Secret of that name: left alone",
     .no_token = 1,
     .pod = "pending-scheduled",
     .pod_who = OWN,
     .secret = FOREIGN,
     .service = OWN,
     .ingress = OWN,
     .now = 0.5,
     .writes = "",
     .phase = "-",
     .requeue = 1.5},
    {.name = "new session, no ingress domain: no Ingress",
     .no_ingress = 1,
     .writes = "create:pod* create:service* create:secret*",
     .phase = "-",
     .deferred = "Pending"},
    /* Our pod's create is on its way into the cache: not again; looked at when it lapses. */
    {.name = "pod written, not cached yet: no second create",
     .held = X_POD | X_SECRET | X_SERVICE | X_INGRESS,
     .writes = "",
     .phase = "-",
     .deferred = "Pending",
     .requeue = 10.1},
    /* A Service expectation for other contents: the spec changed meanwhile, apply again. */
    {.name = "service written with other ports: applied again",
     .held = X_POD | X_SECRET | X_SERVICE | X_INGRESS,
     .held_other = X_SERVICE,
     .writes = "create:service*",
     .phase = "-",
     .deferred = "Pending",
     .requeue = 10.1},
    {.name = "pod scheduled, children own: nothing to write (settling)",
     .pod = "pending-scheduled",
     .pod_who = OWN,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .now = 0.5,
     .writes = "",
     .phase = "-",
     .requeue = 1.5},
    {.name = "pod scheduled and settled: Provisioning",
     .pod = "pending-scheduled",
     .pod_who = OWN,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .now = 3,
     .writes = "",
     .phase = "Provisioning",
     .requeue = 117},
    {.name = "pod running: Running",
     .pod = "running",
     .pod_who = OWN,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .now = 5,
     .writes = "",
     .phase = "Running"},
    {.name = "running, status without conditions: written in full",
     .status = RUNNING,
     .pod = "running",
     .pod_who = OWN,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .now = 5,
     .writes = "",
     .phase = "Running"},
    {.name = "running, service ports differ: service patched",
     .pod = "running",
     .pod_who = OWN,
     .secret = OWN,
     .service = OWN_DIFF,
     .ingress = OWN,
     .now = 5,
     .writes = "patch:service",
     .phase = "Running"},
    {.name = "running, ingress rules differ: ingress patched",
     .pod = "running",
     .pod_who = OWN,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN_DIFF,
     .now = 5,
     .writes = "patch:ingress",
     .phase = "Running"},
    {.name = "running, no ingress domain: own ingress deleted",
     .pod = "running",
     .pod_who = OWN,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .no_ingress = 1,
     .now = 5,
     .writes = "delete:ingress",
     .phase = "Running"},
    {.name = "running, children gone: made again",
     .pod = "running",
     .pod_who = OWN,
     .now = 5,
     .writes = "create:service* create:ingress* create:secret*",
     .phase = "Running"},
    {.name = "running, Secret written not cached: trusted, not replaced",
     .pod = "running",
     .pod_who = OWN,
     .service = OWN,
     .ingress = OWN,
     .held = X_SECRET,
     .now = 5,
     .writes = "",
     .phase = "Running",
     .requeue = 10.1},
    /* Stop: the pod, Service and Ingress go; the record and its Secret stay. */
    {.name = "stopped: pod, service, ingress deleted",
     .spec = ",\"stopped\":true",
     .status = RUNNING,
     .pod = "running",
     .pod_who = OWN,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .now = 5,
     .writes = "delete:pod delete:service delete:ingress",
     .phase = "Stopped",
     .reason = "Stopped"},
    {.name = "stopped and gone: nothing",
     .spec = ",\"stopped\":true",
     .status = "{\"phase\":\"Stopped\",\"reason\":\"Stopped\"}",
     .secret = OWN,
     .writes = "",
     .phase = "Stopped"},
    {.name = "stopped, another's service: left alone",
     .spec = ",\"stopped\":true",
     .status = RUNNING,
     .pod = "running",
     .pod_who = OWN,
     .service = FOREIGN,
     .writes = "delete:pod",
     .phase = "Stopped",
     .requeue = 10},
    {.name = "pod succeeded: Succeeded, children kept",
     .status = RUNNING,
     .pod = "succeeded",
     .pod_who = OWN,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .now = 60,
     .writes = "",
     .phase = "Succeeded",
     .reason = "AppExited"},
    {.name = "pod failed (exit 3): Failed, pod kept for its logs",
     .status = RUNNING,
     .pod = "failed-exit3",
     .pod_who = OWN,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .now = 60,
     .writes = "",
     .phase = "Failed",
     .reason = "AppExited"},
    {.name = "start deadline passed: Failed StartTimeout, pod deleted",
     .status = "{\"phase\":\"Provisioning\",\"podName\":\"telo-run-hello\"}",
     .pod = "pending-scheduled",
     .pod_who = OWN,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .now = 200,
     .writes = "delete:pod",
     .phase = "Failed",
     .reason = "StartTimeout"},
    /* ttlSecondsAfterFinished: the record goes once it has passed, and only then. */
    {.name = "finished, TTL passed: session deleted",
     .spec = ",\"ttlSecondsAfterFinished\":60",
     .status = SUCCEEDED_LONG_AGO,
     .pod = "succeeded",
     .pod_who = OWN,
     .secret = OWN,
     .now = 60,
     .writes = "delete:session",
     .phase = "-"},
    {.name = "finished, TTL not passed: looked at then",
     .spec = ",\"ttlSecondsAfterFinished\":7200",
     .status = SUCCEEDED_LONG_AGO,
     .pod = "succeeded",
     .pod_who = OWN,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .now = 60,
     .writes = "",
     .phase = "Succeeded",
     .requeue = 3540},
    {.name = "running pod deleted by someone: Failed PodDisappeared",
     .status = RUNNING,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .now = 60,
     .writes = "",
     .phase = "Failed",
     .reason = "PodDisappeared"},
    {.name = "pod deleted, but back in the cache: look again",
     .status = RUNNING,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .pod_back = 1,
     .now = 60,
     .writes = "",
     .phase = "-",
     .requeue = 0.5},
    /* Issue 21: a deleted predecessor's children are replaced, anyone else's are a conflict. */
    {.name = "predecessor's pod: deleted (after a live read), Pending",
     .pod = "running",
     .pod_who = PRED,
     .writes = "create:service* create:ingress* create:secret*",
     .phase = "Pending",
     .gone = "pod",
     .requeue = 10},
    {.name = "predecessor's pod going already: waited for",
     .pod = "running",
     .pod_who = PRED_GOING,
     .writes = "create:service* create:ingress* create:secret*",
     .phase = "Pending",
     .requeue = 10},
    {.name = "predecessor's secret: replaced, pod created meanwhile",
     .secret = PRED,
     .writes = "create:pod* create:service* create:ingress*",
     .phase = "-",
     .deferred = "Pending",
     .gone = "secret",
     .requeue = 10},
    {.name = "predecessor's service and ingress: replaced",
     .service = PRED,
     .ingress = PRED,
     .writes = "create:pod* create:secret*",
     .phase = "-",
     .deferred = "Pending",
     .gone = "service ingress",
     .requeue = 10},
    {.name = "foreign pod: NameConflict, nothing created in its place",
     .pod = "running",
     .pod_who = FOREIGN,
     .writes = "create:service* create:ingress* create:secret*",
     .phase = "Pending",
     .reason = "NameConflict",
     .requeue = 10},
    {.name = "foreign secret: NameConflict, no pod",
     .secret = FOREIGN,
     .writes = "create:service* create:ingress*",
     .phase = "Pending",
     .reason = "NameConflict",
     .requeue = 10},
    {.name = "foreign service: NameConflict, no pod",
     .service = FOREIGN,
     .writes = "create:ingress* create:secret*",
     .phase = "Pending",
     .reason = "NameConflict",
     .requeue = 10},
    {.name = "bundle missing: Pending BundleNotFound, no pod, rechecked",
     .blocked = "BundleNotFound",
     .writes = "create:service* create:ingress* create:secret*",
     .phase = "Pending",
     .reason = "BundleNotFound",
     .requeue = 10},
};

/* The sessions with builds on (build.repository set). */
static const struct row build_rows[] = {
    {.name = "builds: registry not asked yet: wait for its answer",
     .builds = 1,
     .img = IMG_NO_ANSWER,
     .writes = "",
     .phase = "-",
     .requeue = 30},
    {.name = "builds: image in the registry: pod on it",
     .builds = 1,
     .img = IMG_PRESENT,
     .writes = "create:pod* create:service* create:ingress* create:secret*",
     .phase = "Pending"},
    {.name = "builds: no deps: the base image",
     .builds = 1,
     .img = IMG_NO_DEPS,
     .writes = "create:pod* create:service* create:ingress* create:secret*",
     .phase = "Pending"},
    {.name = "builds: image absent: Job created, no pod",
     .builds = 1,
     .img = IMG_ABSENT,
     .writes = "create:job* create:service* create:ingress* create:secret*",
     .phase = "Building"},
    {.name = "builds: Job written not cached: not created again",
     .builds = 1,
     .img = IMG_ABSENT,
     .held = X_JOB,
     .writes = "create:service* create:ingress* create:secret*",
     .phase = "Building",
     .requeue = 10.1},
    {.name = "builds: Job runs: Building, followed",
     .builds = 1,
     .img = IMG_RUNNING,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .now = 5,
     .writes = "",
     .phase = "Building",
     .requeue = 626},
    {.name = "builds: Job succeeded: pod on the built image",
     .builds = 1,
     .img = IMG_SUCCEEDED,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .now = 70,
     .writes = "create:pod*",
     .phase = "Pending"},
    {.name = "builds: Job failed, log not read: wait for it",
     .builds = 1,
     .img = IMG_FAILED,
     .now = 70,
     .writes = "",
     .phase = "-",
     .requeue = 30},
    {.name = "builds: Job failed, log read: Failed BuildFailed",
     .builds = 1,
     .img = IMG_FAILED_LOG,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .now = 70,
     .writes = "",
     .phase = "Failed",
     .reason = "BuildFailed"},
    {.name = "builds: bundle unusable: Failed",
     .builds = 1,
     .img = IMG_BAD_BUNDLE,
     .writes = "",
     .phase = "Failed",
     .reason = "BundleInvalid"},
    {.name = "builds: base image not allowed: blocked, rechecked",
     .builds = 1,
     .spec = ",\"image\":\"evil.example/node:1\"",
     .writes = "create:service* create:ingress* create:secret*",
     .phase = "Pending",
     .reason = "ImageNotAllowed",
     .requeue = 10},
    {.name = "builds: bundle missing: no step, no pod",
     .builds = 1,
     .blocked = "BundleNotFound",
     .writes = "create:service* create:ingress* create:secret*",
     .phase = "Pending",
     .reason = "BundleNotFound",
     .requeue = 10},
    {.name = "builds: self-contained: no build, base image pod",
     .builds = 1,
     .spec = ",\"selfContained\":true",
     .writes = "create:pod* create:service* create:ingress* create:secret*",
     .phase = "-",
     .deferred = "Pending"},
    {.name = "builds: pod exists: no step, Running",
     .builds = 1,
     .status = RUNNING,
     .pod = "running",
     .pod_who = OWN,
     .secret = OWN,
     .service = OWN,
     .ingress = OWN,
     .now = 5,
     .writes = "",
     .phase = "Running"},
};

static void plain_sessions(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(plain_rows) / sizeof(plain_rows[0]); i++)
        check_row(&plain_rows[i]);
}

static void sessions_with_builds(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(build_rows) / sizeof(build_rows[0]); i++)
        check_row(&build_rows[i]);
}

/* What must be learnt before the plan: the bundle (and its tag), or nothing. */
struct learn_row {
    const char *name;
    struct row world;
    enum session_plan_learn want;
};

static const struct learn_row learn_rows[] = {
    {"new session: read the bundle", {.writes = ""}, SESSION_PLAN_LEARN_BUNDLE},
    {"pod exists: nothing", {.pod = "running", .pod_who = OWN}, SESSION_PLAN_LEARN_NOTHING},
    {"another's pod: the bundle (no pod of its own yet)",
     {.pod = "running", .pod_who = FOREIGN},
     SESSION_PLAN_LEARN_BUNDLE},
    {"pod written, not cached: nothing", {.held = X_POD}, SESSION_PLAN_LEARN_NOTHING},
    {"stopped: nothing", {.spec = ",\"stopped\":true"}, SESSION_PLAN_LEARN_NOTHING},
    {"had a pod: nothing", {.status = RUNNING}, SESSION_PLAN_LEARN_NOTHING},
    {"Building: the bundle (and its tag)",
     {.builds = 1, .status = "{\"phase\":\"Building\"}"},
     SESSION_PLAN_LEARN_BUNDLE},
    {"Failed: nothing", {.status = "{\"phase\":\"Failed\"}"}, SESSION_PLAN_LEARN_NOTHING},
    {"builds, URL bundle: its tag",
     {.builds = 1,
      .spec = ",\"bundle\":{\"url\":{\"url\":\"https://example.test/a.tgz\",\"sha256\":"
              "\"0000000000000000000000000000000000000000000000000000000000000000\"}}"},
     SESSION_PLAN_LEARN_URL_KEY},
    {"no builds, URL bundle: nothing (the pod fetches it)",
     {.spec = ",\"bundle\":{\"url\":{\"url\":\"https://example.test/a.tgz\",\"sha256\":"
              "\"0000000000000000000000000000000000000000000000000000000000000000\"}}"},
     SESSION_PLAN_LEARN_NOTHING},
    {"builds, base image not allowed: refused before any read",
     {.builds = 1, .spec = ",\"image\":\"evil.example/node:1\""},
     SESSION_PLAN_LEARN_REFUSED},
};

static void what_to_learn_first(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(learn_rows) / sizeof(learn_rows[0]); i++) {
        struct world w;
        world_init(&w, &learn_rows[i].world);
        enum session_plan_learn got = session_plan_learn(&w.obs);
        print_message("%-58s learn=%d\n", learn_rows[i].name, (int)got);
        assert_int_equal(got, learn_rows[i].want);
        world_free(&w);
    }
}

/* The metrics a status write carries, and the Secret's token left to the executor. */
static void status_write_metrics_and_token(void **state)
{
    (void)state;
    struct row running = {.pod = "running", .pod_who = OWN, .now = 5};
    struct world w;
    world_init(&w, &running);
    struct session_plan plan;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    /* Created 09:59:59, Running seen at 10:00:05. */
    assert_true(fabs(plan.startup_seconds - 6) < 0.001);
    assert_null(plan.failed_reason);
    int secrets = 0;
    for (size_t i = 0; i < plan.nwrites; i++) {
        if (plan.writes[i].child != SESSION_PLAN_SECRET)
            continue;
        secrets++;
        assert_true(plan.writes[i].fill_token);
        assert_string_equal(plan.writes[i].name, "telo-run-hello-attach");
    }
    assert_int_equal(secrets, 1);
    session_plan_release(&plan);
    world_free(&w);

    /* status.attach names the Secret only while spec.attachToken asks for it and ours exists. */
    struct row with = {.pod = "running", .pod_who = OWN, .secret = OWN, .now = 5};
    struct row without = with;
    without.no_token = 1;
    const struct row *attach_rows[] = {&with, &without};
    for (size_t i = 0; i < 2; i++) {
        world_init(&w, attach_rows[i]);
        assert_int_equal(session_plan_make(&w.obs, &plan), 0);
        assert_true(plan.verdict.changed);
        struct json_object *attach = json_object_object_get(plan.verdict.status, "attach");
        const char *name = json_object_get_string(json_object_object_get(attach, "secretName"));
        if (attach_rows[i]->no_token)
            assert_null(name);
        else
            assert_string_equal(name, "telo-run-hello-attach");
        session_plan_release(&plan);
        world_free(&w);
    }

    struct row failed = {.status = RUNNING, .pod = "failed-oomkilled", .pod_who = OWN, .now = 5};
    world_init(&w, &failed);
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_non_null(plan.failed_reason);
    assert_string_equal(plan.failed_reason, "OOMKilled");
    assert_true(plan.startup_seconds < 0);
    session_plan_release(&plan);
    world_free(&w);

    struct row hit = {.builds = 1, .img = IMG_PRESENT};
    world_init(&w, &hit);
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_true(plan.cache_hit);
    assert_true(plan.image.check_registry == 0);
    session_plan_release(&plan);
    world_free(&w);

    struct row ask = {.builds = 1, .img = IMG_NO_ANSWER};
    world_init(&w, &ask);
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_true(plan.wait && plan.image.check_registry);
    session_plan_release(&plan);
    world_free(&w);
}

/* A session whose status is what the plan wrote last pass: no write at all (steady state makes
 * zero API writes), for a running session and a stopped one. */
static void steady_state_writes_nothing(void **state)
{
    (void)state;
    static const struct row rows[] = {
        {.pod = "running", .pod_who = OWN, .secret = OWN, .service = OWN, .ingress = OWN, .now = 5},
        {.spec = ",\"stopped\":true", .secret = OWN, .now = 5},
        {.pod = "succeeded",
         .pod_who = OWN,
         .secret = OWN,
         .service = OWN,
         .ingress = OWN,
         .now = 60},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct world w;
        struct session_plan plan;
        world_init(&w, &rows[i]);
        assert_int_equal(session_plan_make(&w.obs, &plan), 0);
        assert_true(plan.verdict.changed);
        char *written =
            strdup(json_object_to_json_string_ext(plan.verdict.status, JSON_C_TO_STRING_PLAIN));
        assert_non_null(written);
        session_plan_release(&plan);
        world_free(&w);
        struct row again = rows[i];
        again.status = written;
        again.now += 30;
        world_init(&w, &again);
        assert_int_equal(session_plan_make(&w.obs, &plan), 0);
        assert_false(plan.verdict.changed);
        assert_int_equal(plan.nwrites, 0);
        assert_int_equal(plan.ngone, 0);
        assert_true(plan.requeue_after == 0);
        session_plan_release(&plan);
        world_free(&w);
        free(written);
    }
}

/* A foreign child names itself for the log; a predecessor's carries its uids. */
static void conflict_and_gone_details(void **state)
{
    (void)state;
    struct row row = {.service = FOREIGN, .secret = PRED};
    struct world w;
    world_init(&w, &row);
    struct session_plan plan;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_string_equal(plan.conflict_kind, "service");
    assert_string_equal(plan.conflict_name, "telo-run-hello");
    assert_int_equal(plan.ngone, 1);
    assert_string_equal(plan.gone[0].name, "telo-run-hello-attach");
    assert_string_equal(plan.gone[0].uid, "secret");
    assert_string_equal(plan.gone[0].owner_uid, PRED_UID);
    session_plan_release(&plan);
    world_free(&w);
}

/* --- refused writes (issue 17) --------------------------------------------------------------- */

/* A refusal of child held by the executor: code, its message, at T0 + at, attempts in a row. */
static void refuse(struct world *w, enum session_plan_child c, long code, const char *message,
                   double at, unsigned attempts)
{
    struct session_refusal *r = &w->obs.refusal[c];
    memset(r, 0, sizeof(*r));
    r->held = 1;
    r->child = (int)c;
    r->code = code;
    snprintf(r->api_reason, sizeof(r->api_reason), "%s", code == 403 ? "Forbidden" : "Other");
    snprintf(r->message, sizeof(r->message), "%s", message);
    snprintf(r->object, sizeof(r->object), "demo/%s", c == SESSION_PLAN_JOB ? JOB : "x");
    r->at = T0 + at;
    r->attempts = attempts;
    r->generation = 1;
}

static const char *status_text(const struct session_plan *plan, const char *key)
{
    const char *v = json_object_get_string(json_object_object_get(plan->verdict.status, key));
    return v ? v : "";
}

static const char *plan_condition(const struct session_plan *plan, const char *type,
                                  const char *field)
{
    struct json_object *conds = json_object_object_get(plan->verdict.status, "conditions");
    for (size_t i = 0; conds && i < json_object_array_length(conds); i++) {
        struct json_object *c = json_object_array_get_idx(conds, i);
        const char *t = json_object_get_string(json_object_object_get(c, "type"));
        if (t && strcmp(t, type) == 0)
            return json_object_get_string(json_object_object_get(c, field));
    }
    return "?";
}

static int plans_write(const struct session_plan *plan, enum session_plan_child c)
{
    for (size_t i = 0; i < plan->nwrites; i++)
        if (plan->writes[i].child == c && plan->writes[i].verb != SESSION_PLAN_DELETE)
            return 1;
    return 0;
}

/* A Running session with every child its own, at T0 + 5. */
static struct row running_row(const char *name)
{
    struct row row = {.name = name,
                      .status = RUNNING,
                      .pod = "running",
                      .pod_who = OWN,
                      .secret = OWN,
                      .service = OWN,
                      .ingress = OWN,
                      .now = 5};
    return row;
}

/* The write of child c in plan, or NULL. */
static const struct session_plan_write *write_of(const struct session_plan *plan,
                                                 enum session_plan_child c)
{
    for (size_t i = 0; i < plan->nwrites; i++)
        if (plan->writes[i].child == c)
            return &plan->writes[i];
    return NULL;
}

/* The body of child c's patch in plan ("" when there is none), valid until the plan goes. */
static const char *patch_text(const struct session_plan *plan, enum session_plan_child c)
{
    const struct session_plan_write *w = write_of(plan, c);
    if (!w || w->verb != SESSION_PLAN_PATCH)
        return "";
    return json_object_to_json_string_ext(w->obj,
                                          JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
}

/* A Service of the session's with other ports gets a merge patch of its ports alone, the list
 * whole, with its uid as the precondition; one still as wanted, nothing. */
static void a_services_ports_are_patched_with_its_uid(void **state)
{
    (void)state;
    struct row row = running_row("ports");
    row.service = OWN_DIFF;
    struct world w;
    world_init(&w, &row);
    struct session_plan plan;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_string_equal(
        patch_text(&plan, SESSION_PLAN_SERVICE),
        "{\"metadata\":{\"uid\":\"service\"},\"spec\":{\"ports\":[{\"name\":\"p8080\","
        "\"port\":8080,\"targetPort\":8080,\"protocol\":\"TCP\"}]}}");
    assert_null(write_of(&plan, SESSION_PLAN_INGRESS));
    session_plan_release(&plan);
    world_free(&w);
}

/* The keys annotation is on an object others may edit: empty entries and a key longer than any
 * annotation key are skipped, the rest nulled; nothing else of the object is touched. */
static void an_ingresss_noted_keys_are_read_as_untrusted(void **state)
{
    (void)state;
    struct row row = running_row("keys");
    struct world w;
    world_init(&w, &row);
    char keys[1024];
    snprintf(keys, sizeof(keys), ",,x.example/a,,%0*d,b,", 1000, 0);
    struct json_object *ann = json_object_new_object();
    json_object_object_add(ann, SESSION_INGRESS_ANNOTATION_KEYS, json_object_new_string(keys));
    json_object_object_add(json_object_object_get(w.ingress, "metadata"), "annotations", ann);
    struct session_plan plan;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_string_equal(
        patch_text(&plan, SESSION_PLAN_INGRESS),
        "{\"metadata\":{\"uid\":\"ingress\",\"annotations\":{\"x.example/a\":null,"
        "\"b\":null,\"telo.run/ingress-annotations\":null}},\"spec\":{\"rules\":" RULES "}}");
    session_plan_release(&plan);
    world_free(&w);
}

/* A create answered 409 AlreadyExists: the name is held by an object without the operator's
 * labels, outside its caches. Nothing writes to it: the session says NameConflict (Stalled, as
 * for a labelled stranger), holds its create back for 10 s (doubling to 1 min) and then creates
 * again, still saying so. Another child's name taken keeps the pod from being created at all. */
static void a_name_taken_outside_the_caches_is_a_name_conflict_tried_again(void **state)
{
    (void)state;
    static const enum session_plan_child taken[] = {SESSION_PLAN_POD, SESSION_PLAN_SECRET,
                                                    SESSION_PLAN_SERVICE, SESSION_PLAN_INGRESS};
    static const char *const said[] = {
        "pod demo/telo-run-hello exists", "secret demo/telo-run-hello-attach exists",
        "service demo/telo-run-hello exists", "ingress demo/telo-run-hello exists"};
    for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++) {
        enum session_plan_child c = taken[i];
        struct row row = {.name = "taken", .now = 3};
        struct world w;
        world_init(&w, &row);
        refuse(&w, c, 409, "already exists", 0, 1);
        snprintf(w.obs.refusal[c].api_reason, sizeof(w.obs.refusal[c].api_reason), "%s",
                 "AlreadyExists");
        assert_true(session_refusal_name_taken(&w.obs.refusal[c]));
        assert_float_equal(session_refusal_retry_at(&w.obs.refusal[c]), T0 + 10, 1e-9);
        w.obs.refusal[c].attempts = 3;
        assert_float_equal(session_refusal_retry_at(&w.obs.refusal[c]), T0 + 40, 1e-9);
        w.obs.refusal[c].attempts = 40;
        assert_float_equal(session_refusal_retry_at(&w.obs.refusal[c]), T0 + 60, 1e-9);
        w.obs.refusal[c].attempts = 1;

        struct session_plan plan;
        assert_int_equal(session_plan_make(&w.obs, &plan), 0);
        assert_null(write_of(&plan, c));
        assert_null(write_of(&plan, SESSION_PLAN_POD));
        assert_string_equal(status_text(&plan, "phase"), "Pending");
        assert_string_equal(status_text(&plan, "reason"), "NameConflict");
        assert_non_null(strstr(status_text(&plan, "message"), said[i]));
        assert_string_equal(plan_condition(&plan, "Stalled", "status"), "True");
        assert_true(plan.requeue_after > 0 && plan.requeue_after <= 7 + 1e-9);
        session_plan_release(&plan);
        /* Further into the backoff the session is looked at when the create is due, not every
         * 10 s: the cache cannot show an object without the operator's labels. */
        w.obs.refusal[c].attempts = 40;
        assert_int_equal(session_plan_make(&w.obs, &plan), 0);
        assert_float_equal(plan.requeue_after, 57, 1e-9); /* due at T0+60, now T0+3 */
        session_plan_release(&plan);
        w.obs.refusal[c].attempts = 1;

        /* Due: created again (never patched: nothing of ours is there to patch). */
        w.obs.now = T0 + 10;
        assert_int_equal(session_plan_make(&w.obs, &plan), 0);
        const struct session_plan_write *again = write_of(&plan, c);
        assert_non_null(again);
        assert_int_equal(again->verb, SESSION_PLAN_CREATE);
        if (c != SESSION_PLAN_POD)
            assert_null(write_of(&plan, SESSION_PLAN_POD));
        const struct json_object *shown =
            plan.verdict.status ? plan.verdict.status : plan.deferred.status;
        assert_string_equal(
            json_object_get_string(json_object_object_get((struct json_object *)shown, "reason")),
            "NameConflict");
        session_plan_release(&plan);
        world_free(&w);
    }
    /* The name's object in the cache as the session's own (ours all along, the cache behind):
     * no conflict, and the refusal is forgotten. */
    struct row own = {.name = "taken, then cached", .service = OWN, .now = 3};
    struct world w;
    world_init(&w, &own);
    refuse(&w, SESSION_PLAN_SERVICE, 409, "already exists", 0, 1);
    snprintf(w.obs.refusal[SESSION_PLAN_SERVICE].api_reason,
             sizeof(w.obs.refusal[SESSION_PLAN_SERVICE].api_reason), "%s", "AlreadyExists");
    struct session_plan plan;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_true(plan.refusal_clear & (1u << SESSION_PLAN_SERVICE));
    assert_non_null(write_of(&plan, SESSION_PLAN_POD));
    assert_null(write_of(&plan, SESSION_PLAN_SERVICE));
    session_plan_release(&plan);
    world_free(&w);
    /* A Running session meets it when its pod's create went out with the child's: it runs, not
     * Ready, Stalled, naming the object. */
    struct row running = {.name = "taken while running",
                          .status = RUNNING,
                          .pod = "running",
                          .pod_who = OWN,
                          .secret = OWN,
                          .ingress = OWN,
                          .now = 5};
    world_init(&w, &running);
    refuse(&w, SESSION_PLAN_SERVICE, 409, "already exists", 0, 1);
    snprintf(w.obs.refusal[SESSION_PLAN_SERVICE].api_reason,
             sizeof(w.obs.refusal[SESSION_PLAN_SERVICE].api_reason), "%s", "AlreadyExists");
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_null(write_of(&plan, SESSION_PLAN_SERVICE));
    assert_string_equal(status_text(&plan, "phase"), "Running");
    assert_string_equal(status_text(&plan, "reason"), "NameConflict");
    assert_non_null(
        strstr(status_text(&plan, "message"), "service demo/x exists and is not owned"));
    assert_string_equal(plan_condition(&plan, "Stalled", "status"), "True");
    assert_string_equal(plan_condition(&plan, "Ready", "status"), "False");
    session_plan_release(&plan);
    world_free(&w);
    /* The build Job's 409 is another session's Job, shared: never a taken name. */
    struct session_refusal job = {.held = 1, .code = 409, .child = SESSION_PLAN_JOB};
    snprintf(job.api_reason, sizeof(job.api_reason), "%s", "Conflict");
    assert_false(session_refusal_name_taken(&job));
}

/* Each child's refusal names the child's reason, holds its write back until the backoff is
 * over, is Stalled (403) and never Ready. */
static void each_childs_refusal_is_its_reason_and_held_back(void **state)
{
    (void)state;
    static const struct {
        const char *reason;
        const char *status;
        const char *pod;
        enum session_plan_child child;
        int builds;
    } cases[] = {
        {"PodRejected", NULL, NULL, SESSION_PLAN_POD, 0},
        {"SecretRejected", NULL, NULL, SESSION_PLAN_SECRET, 0},
        {"ServiceRejected", NULL, NULL, SESSION_PLAN_SERVICE, 0},
        {"IngressRejected", NULL, NULL, SESSION_PLAN_INGRESS, 0},
        {"ServiceRejected", RUNNING, "running", SESSION_PLAN_SERVICE, 0},
        {"BuildJobRejected", NULL, NULL, SESSION_PLAN_JOB, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct row row = {.name = cases[i].reason,
                          .status = cases[i].status,
                          .pod = cases[i].pod,
                          .pod_who = cases[i].pod ? OWN : NONE,
                          .builds = cases[i].builds,
                          .img = cases[i].builds ? IMG_ABSENT : IMG_NONE,
                          .now = 1};
        struct world w;
        world_init(&w, &row);
        refuse(&w, cases[i].child, 403,
               "pods \"x\" is forbidden: exceeded quota: pods, requested: pods=1", 0, 1);
        struct session_plan plan;
        assert_int_equal(session_plan_make(&w.obs, &plan), 0);
        print_message("%-18s phase=%s reason=%s message=%s\n", cases[i].reason,
                      status_text(&plan, "phase"), status_text(&plan, "reason"),
                      status_text(&plan, "message"));
        assert_true(plan.verdict.changed);
        assert_string_equal(status_text(&plan, "reason"), cases[i].reason);
        assert_non_null(strstr(status_text(&plan, "message"), "exceeded quota"));
        assert_non_null(strstr(status_text(&plan, "message"), "(403 Forbidden)"));
        assert_non_null(
            strstr(status_text(&plan, "message"), "Run: kubectl describe resourcequota"));
        assert_string_equal(plan_condition(&plan, "Ready", "status"), "False");
        assert_string_equal(plan_condition(&plan, "Stalled", "status"), "True");
        assert_string_equal(plan_condition(&plan, "Stalled", "reason"), cases[i].reason);
        assert_false(plans_write(&plan, cases[i].child));
        assert_true(plan.requeue_after > 0 && plan.requeue_after <= 4.0 + 1e-9);
        assert_int_equal(plan.refusal_clear, 0);
        assert_null(plan.deferred.status);
        session_plan_release(&plan);
        world_free(&w);
    }
}

/* 409, 429, 5xx: retried, said, but not Stalled (Reconciling); 400, 403, 422: Stalled. */
static void only_refusals_that_need_a_change_are_stalled(void **state)
{
    (void)state;
    static const long codes[] = {400, 403, 409, 422, 429, 500, 503, 504};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        int stalled = codes[i] == 400 || codes[i] == 403 || codes[i] == 422;
        assert_int_equal(session_refusal_stalled(codes[i]), stalled);
        struct row row = {.name = "codes", .now = 1};
        struct world w;
        world_init(&w, &row);
        refuse(&w, SESSION_PLAN_POD, codes[i], "the server said no", 0, 1);
        struct session_plan plan;
        assert_int_equal(session_plan_make(&w.obs, &plan), 0);
        assert_string_equal(status_text(&plan, "reason"), "PodRejected");
        assert_string_equal(status_text(&plan, "phase"), "Pending");
        assert_string_equal(plan_condition(&plan, "Stalled", "status"), stalled ? "True" : "False");
        assert_string_equal(plan_condition(&plan, "Reconciling", "status"),
                            stalled ? "False" : "True");
        assert_string_equal(plan_condition(&plan, "Ready", "status"), "False");
        session_plan_release(&plan);
        world_free(&w);
    }
}

/* An Ingress made before ingress.annotations changed is patched again: the spec alone is not
 * the whole of what the operator wants; others' annotations do not count. */
static void an_ingress_without_the_configured_annotations_is_patched_again(void **state)
{
    (void)state;
    struct row row = running_row("annotations");
    struct world w;
    world_init(&w, &row);
    struct telo_err err;
    assert_int_equal(
        session_config_set(w.cfg, "ingress.annotations=example.com/timeout=3600", &err), 0);
    struct session_plan plan;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_true(plans_write(&plan, SESSION_PLAN_INGRESS));
    session_plan_release(&plan);

    struct json_object *meta = json_object_object_get(w.ingress, "metadata");
    struct json_object *ann = json_object_new_object();
    json_object_object_add(ann, "cert-manager.io/issuer", json_object_new_string("theirs"));
    json_object_object_add(ann, "example.com/timeout", json_object_new_string("3600"));
    json_object_object_add(meta, "annotations", ann);
    /* Applied before the operator noted the keys it applies: once more, to note them. */
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_true(plans_write(&plan, SESSION_PLAN_INGRESS));
    session_plan_release(&plan);
    json_object_object_add(ann, SESSION_INGRESS_ANNOTATION_KEYS,
                           json_object_new_string("example.com/timeout"));
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_false(plans_write(&plan, SESSION_PLAN_INGRESS));
    session_plan_release(&plan);

    json_object_object_add(ann, "example.com/timeout", json_object_new_string("60"));
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_true(plans_write(&plan, SESSION_PLAN_INGRESS));
    session_plan_release(&plan);
    json_object_object_add(ann, "example.com/timeout", json_object_new_string("3600"));

    /* A key the configuration no longer names is patched away (a null in the merge patch, for
     * the keys the operator noted it applied), and so is the last one; others' stay. */
    assert_int_equal(session_config_set(w.cfg, "ingress.annotations=example.com/other=1", &err), 0);
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_string_equal(
        patch_text(&plan, SESSION_PLAN_INGRESS),
        "{\"metadata\":{\"uid\":\"ingress\",\"annotations\":{\"example.com/other\":\"1\","
        "\"telo.run/ingress-annotations\":\"example.com/other\","
        "\"example.com/timeout\":null}},\"spec\":{\"rules\":" RULES "}}");
    session_plan_release(&plan);
    json_object_object_del(ann, "example.com/timeout");
    json_object_object_add(ann, "example.com/other", json_object_new_string("1"));
    json_object_object_add(ann, SESSION_INGRESS_ANNOTATION_KEYS,
                           json_object_new_string("example.com/other"));
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_false(plans_write(&plan, SESSION_PLAN_INGRESS));
    session_plan_release(&plan);
    json_object_put(w.cfg->ingress_annotations);
    w.cfg->ingress_annotations = json_object_new_object();
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_string_equal(
        patch_text(&plan, SESSION_PLAN_INGRESS),
        "{\"metadata\":{\"uid\":\"ingress\",\"annotations\":{\"example.com/other\":null,"
        "\"telo.run/ingress-annotations\":null}},\"spec\":{\"rules\":" RULES "}}");
    session_plan_release(&plan);
    json_object_object_del(ann, "example.com/other");
    json_object_object_del(ann, SESSION_INGRESS_ANNOTATION_KEYS);
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_false(plans_write(&plan, SESSION_PLAN_INGRESS));
    session_plan_release(&plan);
    world_free(&w);
}

/* A Running session whose Service write is refused with a code worth retrying is not Ready and
 * still on its way (kstatus InProgress, Argo CD Progressing), never read as Current. */
static void a_running_session_retrying_a_refused_write_is_reconciling(void **state)
{
    (void)state;
    static const long codes[] = {409, 429, 503};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        struct row row = {
            .name = "retrying", .status = RUNNING, .pod = "running", .pod_who = OWN, .now = 1};
        struct world w;
        world_init(&w, &row);
        refuse(&w, SESSION_PLAN_SERVICE, codes[i], "try again later", 0, 1);
        struct session_plan plan;
        assert_int_equal(session_plan_make(&w.obs, &plan), 0);
        assert_string_equal(status_text(&plan, "phase"), "Running");
        assert_string_equal(plan_condition(&plan, "Ready", "status"), "False");
        assert_string_equal(plan_condition(&plan, "Stalled", "status"), "False");
        assert_string_equal(plan_condition(&plan, "Reconciling", "status"), "True");
        assert_string_equal(plan_condition(&plan, "Reconciling", "reason"), "ServiceRejected");
        session_plan_release(&plan);
        world_free(&w);
    }
}

/* The backoff: 5 s doubling per refusal in a row, at most 5 min; once over, the write is tried
 * again (the status still names the refusal until it succeeds); a new generation tries at once. */
static void a_refused_write_is_retried_after_its_backoff(void **state)
{
    (void)state;
    struct session_refusal r = {.held = 1, .at = 100, .attempts = 1};
    assert_float_equal(session_refusal_retry_at(&r), 105, 1e-9);
    r.attempts = 2;
    assert_float_equal(session_refusal_retry_at(&r), 110, 1e-9);
    r.attempts = 4;
    assert_float_equal(session_refusal_retry_at(&r), 140, 1e-9);
    r.attempts = 7;
    assert_float_equal(session_refusal_retry_at(&r), 400, 1e-9);
    r.attempts = 1000;
    assert_float_equal(session_refusal_retry_at(&r), 400, 1e-9);

    /* Within the backoff of the third refusal (20 s): held back, looked at when it is over. */
    struct row row = {.name = "backoff", .now = 15};
    struct world w;
    world_init(&w, &row);
    refuse(&w, SESSION_PLAN_POD, 403, "forbidden", 0, 3);
    struct session_plan plan;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_false(plans_write(&plan, SESSION_PLAN_POD));
    assert_float_equal(plan.requeue_after, 5, 1e-9);
    session_plan_release(&plan);
    /* Over: the pod's create again, the refusal still said. */
    w.obs.now = T0 + 20;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_true(plans_write(&plan, SESSION_PLAN_POD));
    assert_string_equal(status_text(&plan, "reason"), "PodRejected");
    session_plan_release(&plan);
    /* A new spec: at once. */
    w.obs.now = T0 + 15;
    w.obs.refusal[SESSION_PLAN_POD].generation = 0;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_true(plans_write(&plan, SESSION_PLAN_POD));
    session_plan_release(&plan);
    world_free(&w);

    /* The store counts refusals in a row, per generation. */
    struct session_refusals *x = session_refusals_new();
    struct session_refusal got[SESSION_REFUSAL_NCHILDREN];
    assert_int_equal(session_refusals_note(x, "demo/hello", SESSION_PLAN_POD, 403, "Forbidden",
                                           "no", "demo/telo-run-hello", 1, 10),
                     0);
    assert_int_equal(session_refusals_note(x, "demo/hello", SESSION_PLAN_POD, 403, "Forbidden",
                                           "no", "demo/telo-run-hello", 1, 20),
                     0);
    session_refusals_get(x, "demo/hello", got);
    assert_int_equal(got[SESSION_PLAN_POD].attempts, 2);
    assert_float_equal(got[SESSION_PLAN_POD].at, 20, 1e-9);
    assert_int_equal(session_refusals_note(x, "demo/hello", SESSION_PLAN_POD, 403, "Forbidden",
                                           "no", "demo/telo-run-hello", 2, 30),
                     0);
    session_refusals_get(x, "demo/hello", got);
    assert_int_equal(got[SESSION_PLAN_POD].attempts, 1);
    assert_false(got[SESSION_PLAN_SERVICE].held);
    session_refusals_free(x);
}

/* A write that succeeds clears its refusal (the executor), and a refusal of a child the plan no
 * longer writes (it exists as wanted, the session stopped) is cleared and not shown. */
static void a_refusal_is_cleared_by_success_or_when_no_longer_wanted(void **state)
{
    (void)state;
    struct session_refusals *x = session_refusals_new();
    struct session_refusal got[SESSION_REFUSAL_NCHILDREN];
    assert_int_equal(session_refusals_note(x, "demo/hello", SESSION_PLAN_SERVICE, 403, "Forbidden",
                                           "no", "demo/telo-run-hello", 1, 10),
                     0);
    assert_int_equal(session_refusals_count(x), 1);
    session_refusals_clear(x, "demo/hello", SESSION_PLAN_SERVICE);
    session_refusals_get(x, "demo/hello", got);
    assert_false(got[SESSION_PLAN_SERVICE].held);
    assert_int_equal(session_refusals_count(x), 0);
    assert_int_equal(session_refusals_note(x, "demo/gone", SESSION_PLAN_POD, 403, "Forbidden", "no",
                                           "demo/telo-run-gone", 1, 10),
                     0);
    session_refusals_forget(x, "demo/gone");
    assert_int_equal(session_refusals_count(x), 0);
    session_refusals_free(x);

    /* Running with its Service in place: the Service's old refusal goes, the session is Ready. */
    struct row row = {.name = "clear",
                      .status = RUNNING,
                      .pod = "running",
                      .pod_who = OWN,
                      .secret = OWN,
                      .service = OWN,
                      .ingress = OWN,
                      .now = 100};
    struct world w;
    world_init(&w, &row);
    refuse(&w, SESSION_PLAN_SERVICE, 403, "denied", 0, 1);
    struct session_plan plan;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_int_equal(plan.refusal_clear, 1u << SESSION_PLAN_SERVICE);
    assert_string_equal(status_text(&plan, "reason"), "");
    assert_string_equal(plan_condition(&plan, "Ready", "status"), "True");
    session_plan_release(&plan);
    world_free(&w);

    /* Stopped: nothing of the pod's refusal remains. */
    struct row stopped = {.name = "stopped", .spec = ",\"stopped\":true", .now = 1};
    world_init(&w, &stopped);
    refuse(&w, SESSION_PLAN_POD, 403, "denied", 0, 1);
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_true(plan.refusal_clear & (1u << SESSION_PLAN_POD));
    assert_string_equal(status_text(&plan, "phase"), "Stopped");
    assert_null(strstr(status_text(&plan, "reason"), "Rejected"));
    session_plan_release(&plan);
    world_free(&w);
}

/* The start deadline counts from status.startTime: a session that never got a pod ends
 * StartTimeout naming the last refusal; before, it is looked at when the deadline is due. */
static void a_session_that_never_got_a_pod_times_out_naming_the_refusal(void **state)
{
    (void)state;
    struct row row = {.name = "deadline",
                      .status = "{\"phase\":\"Pending\",\"reason\":\"PodRejected\","
                                "\"startTime\":\"2026-03-01T10:00:00Z\"}",
                      .secret = OWN,
                      .service = OWN,
                      .ingress = OWN,
                      .now = 100};
    struct world w;
    world_init(&w, &row);
    refuse(&w, SESSION_PLAN_POD, 403, "pods \"telo-run-hello\" is forbidden: exceeded quota", 90,
           5);
    struct session_plan plan;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_string_equal(status_text(&plan, "phase"), "Pending");
    assert_float_equal(plan.requeue_after, 20, 1e-9); /* the deadline, before the backoff's 70 */
    session_plan_release(&plan);

    w.obs.now = T0 + 120;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    print_message("%s\n", status_text(&plan, "message"));
    assert_string_equal(status_text(&plan, "phase"), "Failed");
    assert_string_equal(status_text(&plan, "reason"), "StartTimeout");
    const char *m = status_text(&plan, "message");
    assert_non_null(strstr(m, "the session did not start within 120s: it never got a pod"));
    assert_non_null(strstr(m, "Last refusal: the API server refused the session's pod demo/x"));
    assert_non_null(strstr(m, "exceeded quota"));
    assert_null(strstr(m, "tries again")); /* it gave up */
    assert_string_equal(plan_condition(&plan, "Stalled", "reason"), "StartTimeout");
    assert_string_equal(plan.failed_reason, "StartTimeout");
    assert_false(plans_write(&plan, SESSION_PLAN_POD));
    assert_true(plan.refusal_clear & (1u << SESSION_PLAN_POD));
    session_plan_release(&plan);
    world_free(&w);
}

/* A session that waited long without a pod for a reason of its own (a slot, a bundle, a build)
 * and only then met a refusal gets the whole deadline from that first refusal, not from its
 * start: before, the first refusal after startDeadlineSeconds ended it at once. */
static void the_no_pod_deadline_counts_from_the_first_refusal_in_a_row(void **state)
{
    (void)state;
    struct row row = {.name = "late refusal",
                      .status = "{\"phase\":\"Pending\",\"reason\":\"PodRejected\","
                                "\"startTime\":\"2026-03-01T10:00:00Z\"}",
                      .secret = OWN,
                      .service = OWN,
                      .ingress = OWN,
                      .now = 500};
    struct world w;
    world_init(&w, &row);
    refuse(&w, SESSION_PLAN_POD, 403, "pods \"telo-run-hello\" is forbidden: exceeded quota", 495,
           2);
    w.obs.refusal[SESSION_PLAN_POD].first_at = T0 + 490;
    struct session_plan plan;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_string_equal(status_text(&plan, "phase"), "Pending");
    assert_string_equal(status_text(&plan, "reason"), "PodRejected");
    assert_float_equal(plan.requeue_after, 5, 1e-9); /* the backoff's retry, before the deadline */
    session_plan_release(&plan);

    w.obs.now = T0 + 609;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_string_equal(status_text(&plan, "phase"), "Pending");
    session_plan_release(&plan);

    w.obs.now = T0 + 610;
    assert_int_equal(session_plan_make(&w.obs, &plan), 0);
    assert_string_equal(status_text(&plan, "reason"), "StartTimeout");
    session_plan_release(&plan);
    world_free(&w);
}

/* The API's message is tenant-controlled in part: its first line only, control characters as
 * spaces, at most SESSION_REFUSAL_MESSAGE_MAX characters. */
static void the_apis_message_is_cut_to_its_first_line_and_sanitised(void **state)
{
    (void)state;
    char out[SESSION_REFUSAL_MESSAGE_MAX + 8];
    session_refusal_first_line("  denied:\tbad\x1b[31m image\r\nsecond line", out, sizeof(out));
    assert_string_equal(out, "denied: bad [31m image");
    char longer[2000];
    memset(longer, 'a', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    session_refusal_first_line(longer, out, sizeof(out));
    assert_true(strlen(out) <= SESSION_REFUSAL_MESSAGE_MAX + 4);
    session_refusal_first_line(NULL, out, sizeof(out));
    assert_string_equal(out, "");
    assert_string_equal(session_refusal_reason(SESSION_PLAN_POD), "PodRejected");
    assert_string_equal(session_refusal_reason(SESSION_PLAN_SECRET), "SecretRejected");
    assert_string_equal(session_refusal_reason(SESSION_PLAN_SERVICE), "ServiceRejected");
    assert_string_equal(session_refusal_reason(SESSION_PLAN_INGRESS), "IngressRejected");
    assert_string_equal(session_refusal_reason(SESSION_PLAN_JOB), "BuildJobRejected");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plain_sessions),
        cmocka_unit_test(each_childs_refusal_is_its_reason_and_held_back),
        cmocka_unit_test(only_refusals_that_need_a_change_are_stalled),
        cmocka_unit_test(a_name_taken_outside_the_caches_is_a_name_conflict_tried_again),
        cmocka_unit_test(a_running_session_retrying_a_refused_write_is_reconciling),
        cmocka_unit_test(an_ingress_without_the_configured_annotations_is_patched_again),
        cmocka_unit_test(a_services_ports_are_patched_with_its_uid),
        cmocka_unit_test(an_ingresss_noted_keys_are_read_as_untrusted),
        cmocka_unit_test(a_refused_write_is_retried_after_its_backoff),
        cmocka_unit_test(a_refusal_is_cleared_by_success_or_when_no_longer_wanted),
        cmocka_unit_test(a_session_that_never_got_a_pod_times_out_naming_the_refusal),
        cmocka_unit_test(the_no_pod_deadline_counts_from_the_first_refusal_in_a_row),
        cmocka_unit_test(the_apis_message_is_cut_to_its_first_line_and_sanitised),
        cmocka_unit_test(sessions_with_builds),
        cmocka_unit_test(what_to_learn_first),
        cmocka_unit_test(status_write_metrics_and_token),
        cmocka_unit_test(conflict_and_gone_details),
        cmocka_unit_test(steady_state_writes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
