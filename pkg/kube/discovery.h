/* API discovery: resolves kinds and resource names to group/version/resource, cached per client. */
#ifndef TELO_KUBE_DISCOVERY_H
#define TELO_KUBE_DISCOVERY_H

#include "kube/transport.h"
#include "util/err.h"

struct kube_discovery;

/* One entry of an APIResourceList. Strings are owned by the discovery cache. */
struct kube_api_resource {
    const char *group; /* "" for core */
    const char *version;
    const char *resource; /* plural, "configmaps" */
    const char *kind;     /* "ConfigMap" */
    int namespaced;
};

/* Called once with the resolved resource (valid during the call; NULL when rc != 0) or an error:
 * -TELO_ENOTFOUND ("no resource \"foo\" in the cluster"), or the discovery request's failure. */
typedef void kube_resolve_fn(const struct kube_api_resource *res, int rc,
                             const struct telo_err *err, void *ud);

/* Creates an empty cache on t (borrowed; must outlive it). Returns NULL on out of memory. */
struct kube_discovery *kube_discovery_new(struct kube_transport *t);

/* Frees the cache. Lookups still in flight are dropped without their callbacks. NULL is a no-op. */
void kube_discovery_free(struct kube_discovery *d);

/* Resolves apiVersion ("v1", "apps/v1") and kind ("Deployment") through GET /api/v1 or
 * /apis/<group>/<version>, fetched once per group-version. cb may run before this returns when
 * the answer is cached. Returns 0, or a negative code with err filled and cb never called. */
int kube_discovery_resolve_kind(struct kube_discovery *d, const char *api_version, const char *kind,
                                kube_resolve_fn *cb, void *ud, struct telo_err *err);

/* Resolves what a user types, as kubectl does: "configmaps", "configmap", "cm", "ConfigMap",
 * "deployments.apps", "deployments.v1.apps". Without a group the core group wins, then every
 * group's preferred version in /apis order. Same contract as kube_discovery_resolve_kind. */
int kube_discovery_resolve_name(struct kube_discovery *d, const char *name, kube_resolve_fn *cb,
                                void *ud, struct telo_err *err);

/* Splits "apps/v1" into group "apps" and version "v1" and "v1" into "" and "v1", into the
 * caller's buffers (truncated to fit). Pure. */
void kube_split_api_version(const char *api_version, char *group, size_t group_len, char *version,
                            size_t version_len);

#endif
