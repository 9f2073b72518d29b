/* The objects a TeloSession owns, built as pure functions of the session and the config. */
#ifndef TELO_SESSION_DESIRED_H
#define TELO_SESSION_DESIRED_H

#include "session/config.h"
#include "session/spec.h"

#include <json.h>

#define SESSION_LABEL         "telo.run/session"
#define SESSION_MANAGED_BY    "app.kubernetes.io/managed-by"
#define SESSION_CONTAINER     "session"
#define SESSION_INIT          "fetch-bundle"
#define SESSION_FIELD_MANAGER "telo-operator"
/* On a session Ingress: the keys of ingress.annotations it was written with, sorted and
 * comma-joined, so a configuration that drops one differs from what is there and the next patch
 * removes it (a null for each key listed there and no longer wanted). */
#define SESSION_INGRESS_ANNOTATION_KEYS "telo.run/ingress-annotations"

/* Each builder returns a new object (the caller json_object_put()s it) ready to create:
 * apiVersion, kind, metadata (name, namespace, labels, the controller owner reference to
 * the TeloSession), spec. They return NULL only when out of memory, or, for the Service and the
 * Ingress, when the session needs none. */

/* The session pod, hardened for Pod Security "restricted", running image. */
struct json_object *session_desired_pod(const struct session *s, const struct session_config *cfg,
                                        const char *image);

/* The Service for the session's ports; NULL when it has none. */
struct json_object *session_desired_service(const struct session *s,
                                            const struct session_config *cfg);

/* The Ingress: one rule per TCP port; NULL without a base domain or TCP ports. */
struct json_object *session_desired_ingress(const struct session *s,
                                            const struct session_config *cfg);

/* The attach-token Secret holding token (64 hex characters). */
struct json_object *session_desired_secret(const struct session *s,
                                           const struct session_config *cfg, const char *token);

/* The name of the attach-token Secret. */
void session_secret_name(const struct session *s, char *out, size_t len);

/* Seconds the init container may spend downloading a URL bundle: the start deadline less a
 * quarter of it, or less 15 s if that is more (scheduling, pulling and starting the init image
 * come first; on a loaded 2-core node that took over 5 s), and at least 5. So a silent server
 * ends in the download's own message rather than in StartTimeout. */
long session_download_timeout(const struct session_config *cfg);

/* The image a session runs: spec.image or the configured default. */
const char *session_image(const struct session *s, const struct session_config *cfg);

/* The effective limits after clamping to the ceilings (strings borrowed from s or cfg), and the
 * TTL in seconds. */
struct session_limits {
    const char *cpu, *memory, *ephemeral_storage;
    long long ttl_seconds;
};
void session_limits(const struct session *s, const struct session_config *cfg,
                    struct session_limits *out);

#endif
