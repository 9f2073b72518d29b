/* What a session's pass reads before it plans: the bundle ConfigMap (shared by a burst), a
 * URL bundle's tag, and with builds the image step's observation (registry, Job, build log). */
#include "session/pass.h"

#include "session/buildpod.h"
#include "util/base64.h"
#include "util/jget.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void self_key(const struct pass *p, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", p->s.namespace, p->s.name);
}

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
    /* Under pullPolicy Always the base image's registry digest is keyed into the tag too (issue
     * 17): a moved base tag is a new image. */
    struct session_base_digest digest;
    memset(&digest, 0, sizeof(digest));
    int wanted = !scoped.error[0] && !scoped.no_dependencies &&
                 session_base_digest_wanted(p->s.pull_policy, session_image(&p->s, cfg));
    if (wanted)
        session_builds_base_digest(r->builds, session_image(&p->s, cfg), NULL, 0, &digest);
    if (!scoped.error[0]) {
        char fresh[BUILD_TAG_LEN + 1];
        session_base_digest_tag(bundle_key->tag, &digest, fresh);
        session_builds_tag(cfg, &p->s, fresh, scoped.tag);
    }
    struct build_config bc;
    session_pass_job_config(p, &bc);
    char self[320];
    self_key(p, self, sizeof(self));
    snprintf(p->tag, sizeof(p->tag), "%.*s", BUILD_TAG_LEN, k->tag);
    if (build_image_ref(&bc, k->tag, p->ref, sizeof(p->ref)) < 0)
        p->ref[0] = '\0';
    build_job_name(k->tag, p->job_name, sizeof(p->job_name));
    int builds = !k->error[0] && !k->no_dependencies;
    struct json_object *job =
        builds ? session_informers_get(r->inf.jobs, cfg->build_namespace, p->job_name) : NULL;
    const char *message = "", *tail = "";
    enum session_presence presence =
        builds ? session_builds_presence(r->builds, k->tag, self, 0, &message)
               : SESSION_PRESENCE_NONE;
    const char *uid = jget_string(jget(job, "metadata"), "uid");
    enum session_build_log log =
        uid ? session_builds_log(r->builds, p->job_name, uid, self, 0, &tail) : SESSION_LOG_NONE;
    struct build_step step;
    session_builds_progress(r->builds, job, self, 0, &step);
    char push_secret[320];
    snprintf(push_secret, sizeof(push_secret), "%s/%s", cfg->build_namespace,
             cfg->build_push_secret ? cfg->build_push_secret : "");
    /* Slots are counted only where a build may be about to start (the count reads every Job). */
    char slot_wait[256];
    int may_build = builds && !job &&
                    (presence == SESSION_PRESENCE_ABSENT || presence == SESSION_PRESENCE_UNKNOWN);
    int waits_for_slot =
        may_build && !session_build_slots_free_for(
                         r->build_slots, cfg, ctrl_informer_store(r->inf.jobs), p->s.namespace,
                         self, session_pass_now(r), slot_wait, sizeof(slot_wait));
    /* A session waiting for the registry's answer (asked again at each recheck) keeps its place
     * in line; one that builds no more leaves it. */
    if (r->build_slots && (!builds || job || presence == SESSION_PRESENCE_PRESENT ||
                           presence == SESSION_PRESENCE_DENIED))
        session_build_slots_forget(r->build_slots, self);
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
        .now = session_pass_now(r),
        .base_digest_wanted = wanted,
        .base_digest = &digest,
        .build_pod_succeeded = uid && session_build_pods_succeeded(r->inf.build_pods, k->tag, uid),
        .build_step = &step,
        .push_secret = cfg->build_push_secret ? push_secret : NULL,
        .build_slot_wait = waits_for_slot ? slot_wait : NULL,
    };
    session_pass_converge(p, NULL, NULL, &obs);
    json_object_put(job);
}

/* The URL bundle is not read yet: the session says what its download waits for. */
static void bundle_wait_step(struct pass *p, const char *wait)
{
    char self[320];
    self_key(p, self, sizeof(self));
    struct session_image_obs obs = {
        .self = self,
        .base_image = session_image(&p->s, p->r->cfg),
        .bundle_wait = wait,
        .old = p->s.status,
        .now = session_pass_now(p->r),
    };
    session_pass_converge(p, NULL, NULL, &obs);
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
        /* The same resourceVersion is the same ConfigMap: read a bundle once, not every pass
         * (the memo adds the key that picks the bytes out of it). A resourceVersion too long to
         * hold is read every pass rather than keyed by a part of it. */
        const char *rv = jget_string(jget(cm, "metadata"), "resourceVersion");
        char memo[SESSION_BUILDS_MEMO_MAX];
        int n = snprintf(memo, sizeof(memo), "%s/%s@%s", p->s.namespace, p->s.bundle_configmap,
                         rv ? rv : "");
        session_builds_bundle_key(p->r->builds, n >= 0 && (size_t)n < sizeof(memo) ? memo : NULL,
                                  p->tgz, p->tgz_len, source, &p->s, &k);
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
        session_pass_converge(p, "BundleNotFound", message, NULL);
        return;
    }
    if (res->rc < 0) {
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "%s", res->err ? res->err->msg : "get failed");
        session_pass_done(p);
        return;
    }
    if (!jget(jget(res->object, "binaryData"), p->s.bundle_configmap_key) &&
        !jget(jget(res->object, "data"), p->s.bundle_configmap_key)) {
        snprintf(message, sizeof(message),
                 "ConfigMap %s has no key %s (spec.bundle.configMap.key): put the gzip tar of the "
                 "app under binaryData.%s",
                 p->s.bundle_configmap, p->s.bundle_configmap_key, p->s.bundle_configmap_key);
        session_pass_converge(p, "BundleNotFound", message, NULL);
        return;
    }
    if (p->keep_image) {
        bundle_image_step(p, res->object);
        return;
    }
    session_pass_converge(p, NULL, NULL, NULL);
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
                           session_pass_now(br->r), hand_bundle, (void *)res);
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
    switch (session_cm_memo_begin(r->bundles, br->key, session_pass_now(r), p, &keys)) {
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
    session_cm_memo_settle(r->bundles, br->key, NULL, session_pass_now(r), hand_bundle, &failed);
    free(br);
    return -1;
}

/* Reads the session's pod and asks the plan what must be learnt before planning: the bundle
 * (a ConfigMap read), a URL bundle's tag, or nothing; then learns it and converges. */
void session_pass_learn(struct pass *p, const char *key)
{
    struct session_reconciler *r = p->r;
    char child[64], pod_key[320];
    session_child_name(&p->s, child, sizeof(child));
    p->pod = session_informers_get(r->inf.pods, p->s.namespace, child);
    p->pod_owner = session_child_owner(p->pod, p->s.name, p->s.uid);
    session_expect_key(pod_key, sizeof(pod_key), "pods", p->s.namespace, child);
    struct session_plan_obs obs = {.s = &p->s,
                                   .cfg = r->cfg,
                                   .pod = p->pod,
                                   .now = session_pass_now(r),
                                   .limit_waiting = p->limit_waiting};
    obs.expect[SESSION_PLAN_POD] = session_expect_seen(
        r->expected, pod_key, p->pod_owner == SESSION_OWNER_OWN, session_pass_now(r));
    /* Builds decide the image in the bundle's callback; other passes keep what was decided. */
    p->keep_image = r->builds && session_builds_needed(r->cfg, &p->s);
    struct telo_err err;
    switch (session_plan_learn(&obs)) {
    case SESSION_PLAN_LEARN_URL_KEY: {
        struct session_bundle_key k;
        const char *wait;
        if (session_builds_url_key(r->builds, &p->s, key, &k, &wait)) {
            image_step(p, &k);
            return;
        }
        bundle_wait_step(p, wait);
        return;
    }
    case SESSION_PLAN_LEARN_BUNDLE:
        if (check_bundle(p, &err) == 0)
            return;
        p->failed = 1;
        snprintf(p->error, sizeof(p->error), "%s", err.msg);
        session_pass_done(p);
        return;
    default: /* nothing to learn, or a base image refused: the plan says which */
        session_pass_converge(p, NULL, NULL, NULL);
        return;
    }
}
