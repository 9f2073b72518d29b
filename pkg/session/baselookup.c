/* The I/O edge of base-image freshness: looks base images' registry digests up (a manifest HEAD
 * for its Docker-Content-Digest) and keeps the answers in basedigest.h's pure table. The sessions
 * that asked are queued again when an answer arrives, and read it in their next reconcile. */
#include "session/baselookup.h"

#include "imagebuild/registry.h"
#include "kube/rest.h"
#include "util/base64.h"
#include "util/jget.h"
#include "util/log.h"

#include <ev.h>
#include <json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SECRET_KEY ".dockerconfigjson"

struct session_base_lookups {
    struct kube_transport *t;
    const struct session_config *cfg;
    session_base_digests_wake_fn *wake;
    void *ud;
    struct session_base_digests *digests; /* the answers (pure table) */
    struct build_registry *registry;      /* no positive cache: a tag's digest moves */
    struct digest_lookup *lookups;        /* in flight */
};

/* One base image's digest lookup in flight. */
struct digest_lookup {
    struct session_base_lookups *owner;
    struct digest_lookup *prev, *next;
    char image[600];
    char repository[600], tag[200];
    int own_registry; /* in build.repository's registry: asked as the tag check asks */
    struct build_registry_check *check;
    struct kube_call *secret_call;
};

static double now_of(const struct session_base_lookups *owner)
{
    return ev_now(kube_transport_loop(owner->t));
}

struct session_base_lookups *session_base_lookups_new(struct kube_transport *t,
                                                      const struct session_config *cfg,
                                                      session_base_digests_wake_fn *wake, void *ud,
                                                      struct telo_err *err)
{
    /* The reference gives the digest lookup one 10 s try; one more after a transient failure
     * (a 503 blip) costs at most 10.5 s more and spares a needless fallback. */
    const struct build_registry_opts opts = {.max_attempts = 2, .timeout_ms = 10000, .no_cache = 1};
    struct session_base_lookups *owner = calloc(1, sizeof(*owner));
    if (!owner) {
        telo_err_set(err, TELO_ENOMEM, "base image lookups: out of memory");
        return NULL;
    }
    owner->t = t;
    owner->cfg = cfg;
    owner->wake = wake;
    owner->ud = ud;
    if (!(owner->digests = session_base_digests_new(0)) ||
        !(owner->registry = build_registry_new(kube_transport_loop(t), &opts, err))) {
        session_base_lookups_free(owner);
        telo_err_set(err, TELO_ENOMEM, "base image lookups: out of memory");
        return NULL;
    }
    return owner;
}

static void lookup_free(struct digest_lookup *l)
{
    if (!l)
        return;
    build_registry_check_cancel(l->check);
    kube_call_cancel(l->secret_call);
    if (l->prev)
        l->prev->next = l->next;
    else
        l->owner->lookups = l->next;
    if (l->next)
        l->next->prev = l->prev;
    free(l);
}

void session_base_lookups_free(struct session_base_lookups *owner)
{
    if (!owner)
        return;
    while (owner->lookups)
        lookup_free(owner->lookups);
    session_base_digests_free(owner->digests);
    build_registry_free(owner->registry);
    free(owner);
}

/* Ends l's lookup with digest (the registry's answer, valid) or reason, and frees l. */
static void lookup_done(struct digest_lookup *l, const char *digest, const char *reason)
{
    struct session_base_lookups *owner = l->owner;
    l->check = NULL;
    l->secret_call = NULL;
    char image[sizeof(l->image)];
    snprintf(image, sizeof(image), "%s", l->image);
    if (digest)
        telo_log(TELO_LOG_INFO, "base image digest", "image=%s digest=%s", image, digest);
    else
        telo_log(TELO_LOG_WARN, "base image freshness check failed; using the cached image",
                 "image=%s error=\"%s\"", image, reason);
    lookup_free(l);
    session_base_digests_settle(owner->digests, image, digest, reason, now_of(owner), owner->wake,
                                owner->ud);
}

static void on_digest(struct build_registry_check *check, const struct build_registry_result *res,
                      void *ud)
{
    (void)check;
    struct digest_lookup *l = ud;
    l->check = NULL;
    char reason[512];
    switch (res->presence) {
    case BUILD_IMAGE_PRESENT:
        if (session_base_digest_valid(res->digest)) {
            lookup_done(l, res->digest, NULL);
            return;
        }
        /* The registry's word, checked: a missing or odd header is no digest to key on. */
        snprintf(reason, sizeof(reason),
                 "%.300s: the registry answered without a valid Docker-Content-Digest", l->image);
        break;
    case BUILD_IMAGE_ABSENT:
        snprintf(reason, sizeof(reason), "%.300s: the registry has no such image (HTTP 404)",
                 l->image);
        break;
    case BUILD_IMAGE_UNKNOWN:
        snprintf(reason, sizeof(reason), "%.200s: %.300s", l->image,
                 res->last_error && *res->last_error ? res->last_error : res->message);
        break;
    case BUILD_IMAGE_DENIED:
    default:
        snprintf(reason, sizeof(reason), "%.400s", res->message);
        break;
    }
    lookup_done(l, NULL, reason);
}

static void digest_check(struct digest_lookup *l, const char *config, size_t config_len)
{
    const struct session_config *cfg = l->owner->cfg;
    char secret[320] = "";
    if (config && cfg->build_push_secret)
        snprintf(secret, sizeof(secret), "%s/%s", cfg->build_namespace, cfg->build_push_secret);
    struct build_registry_query q = {
        .repository = l->repository,
        .tag = l->tag,
        .api_url = l->own_registry ? cfg->build_registry_api_url : NULL,
        .dockerconfigjson = config,
        .dockerconfigjson_len = config_len,
        .secret_name = secret[0] ? secret : NULL,
        .insecure = l->own_registry ? cfg->build_insecure : 0,
    };
    struct telo_err err;
    telo_err_clear(&err);
    l->check = build_registry_check(l->owner->registry, &q, on_digest, l, &err);
    if (!l->check) {
        char reason[512];
        snprintf(reason, sizeof(reason), "%.200s: %.300s", l->image, err.msg);
        lookup_done(l, NULL, reason);
    }
}

static void on_digest_secret(const struct kube_result *res, void *ud)
{
    struct digest_lookup *l = ud;
    l->secret_call = NULL;
    const char *text = res->rc < 0 ? NULL : jget_string(jget(res->object, "data"), SECRET_KEY);
    size_t len = 0;
    unsigned char *config = text ? util_base64_decode(text, strlen(text), &len) : NULL;
    if (!config) {
        char reason[512];
        snprintf(reason, sizeof(reason),
                 "%.150s: the push Secret %.60s/%.60s cannot be read (%.200s)", l->image,
                 l->owner->cfg->build_namespace, l->owner->cfg->build_push_secret,
                 res->rc < 0 ? (res->err ? res->err->msg : "failed") : "no " SECRET_KEY);
        lookup_done(l, NULL, reason);
        return;
    }
    digest_check(l, (const char *)config, len);
    free(config);
}

/* Whether repository ("host/path") is in build.repository's registry. */
static int own_registry(const struct session_config *cfg, const char *repository)
{
    char host[256], path[512], own[256];
    struct telo_err err;
    telo_err_clear(&err);
    if (!cfg->build_repository ||
        build_repository_split(cfg->build_repository, own, sizeof(own), path, sizeof(path), &err) <
            0 ||
        build_repository_split(repository, host, sizeof(host), path, sizeof(path), &err) < 0)
        return 0;
    return strcmp(host, own) == 0;
}

/* Starts image's lookup (the table said LOOKUP). */
static void start_lookup(struct session_base_lookups *owner, const char *image)
{
    struct digest_lookup *l = calloc(1, sizeof(*l));
    if (!l) {
        session_base_digests_settle(owner->digests, image, NULL, "out of memory", now_of(owner),
                                    owner->wake, owner->ud);
        return;
    }
    l->owner = owner;
    snprintf(l->image, sizeof(l->image), "%s", image);
    l->next = owner->lookups;
    if (owner->lookups)
        owner->lookups->prev = l;
    owner->lookups = l;
    if (session_base_image_split(image, l->repository, sizeof(l->repository), l->tag,
                                 sizeof(l->tag)) < 0) {
        char reason[512];
        snprintf(reason, sizeof(reason),
                 "%.300s: not an image reference the registry can be "
                 "asked about",
                 image);
        lookup_done(l, NULL, reason);
        return;
    }
    l->own_registry = own_registry(owner->cfg, l->repository);
    if (!l->own_registry || !owner->cfg->build_push_secret) {
        digest_check(l, NULL, 0);
        return;
    }
    /* Read for every lookup, as the tag check reads it: a fixed password takes effect at once. */
    struct kube_ref ref = {.version = "v1",
                           .resource = "secrets",
                           .namespace = owner->cfg->build_namespace,
                           .name = owner->cfg->build_push_secret};
    struct telo_err err;
    telo_err_clear(&err);
    l->secret_call = kube_rest_get(owner->t, &ref, on_digest_secret, l, &err);
    if (!l->secret_call) {
        char reason[512];
        snprintf(reason, sizeof(reason), "%.200s: %.300s", image, err.msg);
        lookup_done(l, NULL, reason);
    }
}

void session_base_lookups_get(struct session_base_lookups *owner, const char *image,
                              const char *waiter, int ask, struct session_base_digest *out)
{
    double now = now_of(owner), ttl = (double)owner->cfg->build_base_digest_ttl_seconds;
    session_base_digests_get(owner->digests, image, now, ttl, out);
    if (!ask || out->state != SESSION_DIGEST_NONE)
        return;
    if (session_base_digests_ask(owner->digests, image, now, ttl, waiter) == SESSION_DIGEST_LOOKUP)
        start_lookup(owner, image);
}
