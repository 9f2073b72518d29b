/* The operator's configuration: a YAML file, overridden by --set flags, validated at start. */
#ifndef TELO_SESSION_CONFIG_H
#define TELO_SESSION_CONFIG_H

#include "imagebuild/http.h"
#include "util/err.h"

#include <json.h>
#include <stddef.h>
#include <stdio.h>

/* Every knob, with the defaults of session_config_new in the comments. Strings are owned by the
 * config; NULL means unset. */
struct session_config {
    char **namespaces; /* namespaces to watch; none: all */
    size_t nnamespaces;
    char *default_image;               /* images.default: "telorun/node:latest-slim" */
    char *init_image;                  /* images.init: "busybox:stable" (timeout, wget, tar...) */
    char *max_cpu;                     /* limits.cpu: "500m" */
    char *max_memory;                  /* limits.memory: "512Mi" */
    char *max_ephemeral_storage;       /* limits.ephemeralStorage: "1Gi" */
    long max_ttl_seconds;              /* limits.ttlSeconds: 21600 */
    char *ingress_base_domain;         /* ingress.baseDomain: unset (no Service/Ingress URLs) */
    char *ingress_class;               /* ingress.className */
    char *ingress_tls_secret;          /* ingress.tlsSecretName */
    char *runtime_class;               /* runtimeClassName */
    char *image_pull_secret;           /* imagePullSecret */
    char *managed_by;                  /* managedBy: "telo-operator" */
    long start_deadline_seconds;       /* startDeadlineSeconds: 120 */
    struct json_object *node_selector; /* nodeSelector: {} (string map) */
    struct json_object *tolerations;   /* tolerations: [] (as in a PodSpec) */
    char *registry_url;                /* registryUrl: "https://registry.telo.run" */
    char *gateway_url;                 /* gatewayUrl: unset (no status.attach.url) */
    long workers;                      /* workers: 16 concurrent reconciles */

    /* On-cluster image builds (build.*): off while build.repository is unset, and then every
     * session runs its base image as it is. */
    char *build_repository;                  /* build.repository: unset */
    char *build_namespace;                   /* build.namespace: "telo-builds" */
    char *build_builder_image;               /* build.builderImage: kaniko's executor */
    long build_timeout_seconds;              /* build.timeoutSeconds: 600 */
    long build_ttl_seconds;                  /* build.ttlSecondsAfterFinished: 300 */
    int build_insecure;                      /* build.insecureRegistry: false */
    char *build_registry_api_url;            /* build.registryApiUrl: unset (from the host) */
    char *build_push_secret;                 /* build.pushSecret: unset (an open registry) */
    struct json_object *build_node_selector; /* build.nodeSelector: {} */
    struct json_object *build_tolerations;   /* build.tolerations: [] */
    /* build.allowedBaseImages: [] (images.default alone): the spec.image values a build may
     * use as FROM; "repo:*" allows every tag of repo. */
    char **build_allowed_base_images;
    size_t nbuild_allowed_base_images;
    int build_share_across_namespaces; /* build.shareAcrossNamespaces: false (tag per namespace) */
    /* Build Jobs running at once (buildslots.h): a session whose build would pass either waits
     * in Building. 0: none. */
    long build_max_concurrent;               /* build.maxConcurrent: 0 */
    long build_max_concurrent_per_namespace; /* build.maxConcurrentPerNamespace: 0 */

    /* Bundles the operator reads for a tenant (bundle.*). */
    long bundle_max_downloads; /* bundle.maxConcurrentDownloads: 4 (others wait their turn) */
    long bundle_max_queued;    /* bundle.maxQueuedDownloads: 4096 (running and waiting) */
    struct session_cidrs {
        struct build_cidr *items;
        size_t n;
    } bundle_allowed_cidrs; /* bundle.allowedUrlCidrs: none (no private, loopback or link-local
                             * destination for spec.bundle.url) */
    /* bundle.deniedUrlCidrs: none. Networks spec.bundle.url may never reach, allowed or not: the
     * cluster's own addresses that look public (GKE's Service range 34.118.224.0/20). */
    struct session_cidrs bundle_denied_cidrs;

    /* App reachability (reachability.*, issue 17): the TCP ports of a Running session are
     * probed from the operator, and Ready waits for them. */
    int reach_enabled;                    /* reachability.enabled: true */
    long reach_timeout_seconds;           /* reachability.timeoutSeconds: 30 (then Degraded) */
    long reach_interval_seconds;          /* reachability.intervalSeconds: 5 (until reachable) */
    struct session_cidrs reach_pod_cidrs; /* reachability.podCIDRs: none (every pod IP) */
    /* build.baseDigestTtlSeconds: 300. How long a base image's registry digest (looked up for
     * sessions with pullPolicy Always, issue 17) is trusted before it is asked again. */
    long build_base_digest_ttl_seconds;
    /* Session limits (issue 17): sessions over them wait in Pending (SessionLimit). 0: none. */
    long max_sessions;               /* limits.maxSessions: 0 */
    long max_sessions_per_namespace; /* limits.maxSessionsPerNamespace: 0 */
    /* The event recorder's namespace budget for new Normal Events (controller/events.h, step
     * 4; issue 20): a burst of sessions in one namespace is told at a rate, not line by line. */
    long events_namespace_burst;          /* events.namespaceBurst: 25 (0: none) */
    long events_namespace_refill_seconds; /* events.namespaceRefillSeconds: 10 */
    /* Metadata added to session children (issue 19), checked by session/meta.h: valid keys,
     * none of the operator's own. NULL: none. */
    struct json_object *ingress_annotations; /* ingress.annotations: {} */
    struct json_object *pod_labels;          /* pod.labels: {} */
    struct json_object *pod_annotations;     /* pod.annotations: {} */
};

/* Returns the defaults, or NULL when out of memory. Free with session_config_free. */
struct session_config *session_config_new(void);

/* Frees c. Accepts NULL. */
void session_config_free(struct session_config *c);

/* Reads a YAML config file over c. Returns 0, or -TELO_EINVAL with err naming the file and the
 * key path ("config /etc/telo.yaml: limits.cpu: \"lots\" is not a quantity"); unknown keys are
 * rejected with the list of known ones. On failure c may be partly updated: discard it. */
int session_config_load_file(struct session_config *c, const char *path, struct telo_err *err);

/* Applies one "key.path=value" override (the --set flag): scalars as text, lists
 * comma-separated, maps as k=v pairs separated by commas, tolerations as JSON. Same errors. */
int session_config_set(struct session_config *c, const char *assignment, struct telo_err *err);

/* Whether a session with builds on may use image (its spec.image, or images.default) as the FROM
 * of its build: images.default always, an entry of build.allowedBaseImages equal to it, or a
 * "repo:*" entry and image is "repo:<tag>"; never an image build_base_image_check refuses. */
int session_base_image_allowed(const struct session_config *c, const char *image);

/* Why image is not allowed, into out: names spec.image, what is allowed and the key to change
 * ("spec.image \"evil/node:1\" is not an allowed base image for builds: ... allowed:
 * telorun/node:latest-slim; use one of them, or have the operator's build.allowedBaseImages
 * include it"). */
void session_base_image_refusal(const struct session_config *c, const char *image, char *out,
                                size_t len);

/* Writes the config's keys and defaults as commented YAML, for --help and the chart. */
void session_config_describe(FILE *out);

#endif
