/* The session reconciler's informers: TeloSessions, their children and the build Jobs, each
 * cached as a trimmed projection, and the controller they feed. */
#include "session/informers.h"

#include "cache/transform.h"
#include "imagebuild/job.h"
#include "session/buildpod.h"
#include "session/desired.h"
#include "session/phase.h"
#include "session/session_metrics.h"
#include "util/jget.h"

#include <stdio.h>
#include <string.h>

/* The sessions cache index of status.image.tag: the sessions a build Job's change concerns. */
#define INDEX_BUILD_TAG "buildTag"

static const char *const pod_paths[] = {
    "metadata.labels",
    "metadata.creationTimestamp",
    /* Never set on a pod the operator writes: a planted pod is told by it (owner.c). */
    "spec.hostNetwork",
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
/* The annotations too: the operator's (ingress.annotations) are compared with the config's. */
static const char *const ingress_paths[] = {"metadata.labels", "metadata.annotations", "spec"};
static const char *const secret_paths[] = {"metadata.labels"};
static const char *const session_paths[] = {"metadata.labels", "metadata.creationTimestamp", "spec",
                                            "status"};
/* The context container (its DOCKERFILE) too: a running build's progress counts its steps
 * (buildprogress.c); one init container of about 2 KiB per build Job. */
static const char *const job_paths[] = {"metadata.labels", "metadata.annotations",
                                        "metadata.creationTimestamp", "status",
                                        "spec.template.spec.initContainers"};

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
    const char *tag = jget_string(jget(status, "image"), "tag");
    if (tag && session_phase_of(status) == SESSION_PHASE_BUILDING)
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
    const struct session_informers *inf = ud;
    struct json_object *job = cache_object_parse(obj);
    const char *tag = jget_string(jget(jget(job, "metadata"), "labels"), BUILD_LABEL_TAG);
    struct job_waiters w = {emit, ctx};
    if (tag)
        (void)cache_store_by_index(ctrl_informer_store(inf->sessions), INDEX_BUILD_TAG, tag,
                                   emit_session, &w, NULL);
    json_object_put(job);
}

/* The build Jobs in the build namespace. */
static int add_jobs(struct session_informers *r, struct ctrl_manager *m,
                    const struct session_config *c, struct telo_err *err)
{
    char selector[320];
    snprintf(selector, sizeof(selector), SESSION_MANAGED_BY "=%s," BUILD_LABEL_BUILD "=true",
             c->managed_by);
    struct cache_reflector_config cfg = {
        .ref = {.group = "batch",
                .version = "v1",
                .resource = "jobs",
                .namespace = c->build_namespace},
        .label_selector = selector,
        .transform = project,
        .transform_arg = &job_projection,
    };
    if (!(r->jobs = ctrl_manager_add_informer(m, "jobs", &cfg, err)) ||
        ctrl_controller_watch_mapped(r->c, r->jobs, job_to_sessions, r, err) < 0)
        return -err->code;
    return 0;
}

/* The build Jobs' pods in the build namespace, indexed by their tag: a Succeeded pod ends the
 * build before its Job says so (buildpod.h); their events queue the sessions waiting on the tag
 * as the Jobs' do. */
static int add_build_pods(struct session_informers *r, struct ctrl_manager *m,
                          const struct session_config *c, struct telo_err *err)
{
    static const struct cache_index_def idx[] = {
        {BUILD_POD_INDEX_TAG, cache_index_label, BUILD_LABEL_TAG}};
    char selector[320];
    snprintf(selector, sizeof(selector), SESSION_MANAGED_BY "=%s," BUILD_LABEL_BUILD "=true",
             c->managed_by);
    struct cache_reflector_config cfg = {
        .ref = {.version = "v1", .resource = "pods", .namespace = c->build_namespace},
        .label_selector = selector,
        .transform = project,
        .transform_arg = &pod_projection,
        .indexes = idx,
        .nindexes = 1,
    };
    if (!(r->build_pods = ctrl_manager_add_informer(m, "build-pods", &cfg, err)) ||
        ctrl_controller_watch_mapped(r->c, r->build_pods, job_to_sessions, r, err) < 0)
        return -err->code;
    return 0;
}

static struct ctrl_informer *child_informer(struct session_informers *r, struct ctrl_manager *m,
                                            const struct session_config *c, const char *name,
                                            const char *group, const char *resource,
                                            struct projection *pr, const char *selector,
                                            struct telo_err *err)
{
    /* No index: a child is looked up by its name only, and mapped to its session through its
     * owner reference. An index would cost a slot per object and, on every update, parsing the
     * replaced object to unindex it (issue 20). */
    struct cache_reflector_config cfg = {
        .ref = {.group = group,
                .version = "v1",
                .resource = resource,
                .namespace = c->nnamespaces == 1 ? c->namespaces[0] : NULL},
        .label_selector = selector,
        .transform = project,
        .transform_arg = pr,
    };
    struct ctrl_informer *inf = ctrl_manager_add_informer(m, name, &cfg, err);
    if (inf && r->c && ctrl_controller_watch_owned(r->c, inf, "TeloSession", err) < 0)
        return NULL;
    return inf;
}

int session_informers_register(struct session_informers *inf, struct ctrl_manager *m,
                               const struct session_config *cfg, ctrl_reconcile_fn *fn, void *ud,
                               struct telo_err *err)
{
    static const struct cache_index_def idx[] = {{"namespace", cache_index_namespace, NULL},
                                                 {INDEX_BUILD_TAG, index_build_tag, NULL}};
    /* The phase of every session, counted at each /metrics scrape without parsing 10,000 of
     * them (issue 20: that was 0.18 CPU seconds a scrape). */
    struct cache_reflector_config scfg = {
        .tag = session_metrics_phase_tag,
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
    memset(inf, 0, sizeof(*inf));
    if (!(inf->sessions = ctrl_manager_add_informer(m, "telosessions", &scfg, err)) ||
        !(inf->c = ctrl_manager_add_controller(m, "telosession", inf->sessions, fn, ud, err)) ||
        !(inf->pods =
              child_informer(inf, m, cfg, "pods", NULL, "pods", &pod_projection, selector, err)) ||
        !(inf->services = child_informer(inf, m, cfg, "services", NULL, "services",
                                         &service_projection, selector, err)) ||
        !(inf->ingresses = child_informer(inf, m, cfg, "ingresses", "networking.k8s.io",
                                          "ingresses", &ingress_projection, selector, err)) ||
        !(inf->secrets = child_informer(inf, m, cfg, "secrets", NULL, "secrets", &secret_projection,
                                        selector, err)) ||
        (cfg->build_repository && add_jobs(inf, m, cfg, err) < 0) ||
        (cfg->build_repository && add_build_pods(inf, m, cfg, err) < 0))
        return -err->code;
    return 0;
}

int session_informers_watched(const struct session_config *cfg, const char *ns, size_t nslen)
{
    if (cfg->nnamespaces == 0)
        return 1;
    for (size_t i = 0; i < cfg->nnamespaces; i++) {
        if (strlen(cfg->namespaces[i]) == nslen && strncmp(cfg->namespaces[i], ns, nslen) == 0)
            return 1;
    }
    return 0;
}

struct json_object *session_informers_get(const struct ctrl_informer *inf, const char *ns,
                                          const char *name)
{
    char key[512];
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    const struct cache_object *o = cache_store_get(ctrl_informer_store(inf), key);
    return o ? cache_object_parse(o) : NULL;
}
