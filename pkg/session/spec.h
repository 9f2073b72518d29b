/* A TeloSession as the reconciler reads it: identity, spec and the status it last wrote. */
#ifndef TELO_SESSION_SPEC_H
#define TELO_SESSION_SPEC_H

#include "util/err.h"

#include <json.h>
#include <stddef.h>

#define SESSION_MAX_PORTS 20

struct session_port {
    int port;
    const char *protocol; /* "TCP" or "UDP" */
    const char *name;     /* or NULL */
};

/* Strings point into the parsed object (session_spec_parse keeps a reference to it). */
struct session {
    struct json_object *obj; /* the whole TeloSession */
    const char *name, *namespace, *uid;
    long long generation;
    int deleting; /* metadata.deletionTimestamp is set */

    const char *entry;
    const char *bundle_configmap, *bundle_configmap_key;
    const char *bundle_url, *bundle_sha256;
    const char *image, *pull_policy, *registry_url;
    struct json_object *env; /* array as in the CRD, or NULL */
    struct session_port ports[SESSION_MAX_PORTS];
    size_t nports;
    int inspect;
    const char *cpu, *memory, *ephemeral_storage; /* requested, or NULL */
    long long ttl_seconds;                        /* 0: unset */
    int stopped;
    int attach_token;             /* spec.attachToken: the attach-token Secret is wanted */
    long long ttl_after_finished; /* -1: unset */
    int self_contained;

    struct json_object *status; /* .status as last written, or NULL */

    /* spec.restartGeneration (issue 17): above status.restartGeneration, the current run is
     * ended and a new one started. 0: unset. */
    long long restart_generation;
};

/* Reads obj (a TeloSession; the session keeps a reference until session_spec_release) into s.
 * The CRD's schema already rejects malformed specs; this checks again what the reconciler relies
 * on. Returns 0, or -TELO_EINVAL with err naming the field ("spec.ports[2].port: 0 is not in
 * 1..65535"). */
int session_spec_parse(struct json_object *obj, struct session *s, struct telo_err *err);

/* Drops s's reference to its object. */
void session_spec_release(struct session *s);

/* The name of every object the session owns: "telo-run-<name>", shortened with a hash suffix
 * to stay a valid DNS label of at most 63 characters. */
void session_child_name(const struct session *s, char *out, size_t len);

/* The part of the session's ingress hosts ("<port>-<id>.<baseDomain>") that identifies it:
 * "<name>-<namespace>" cut to SESSION_HOST_PREFIX_LEN characters (dots as dashes, no trailing
 * dash), then "-" and SESSION_HOST_HASH_LEN characters of the base32 SHA-256 of the session's
 * uid: not computable from the name, stable for the session's life (across operator restarts),
 * different for a session re-created under the same name, and "<port>-<id>" is always a DNS
 * label of at most 63 characters. out needs 58 bytes. */
#define SESSION_HOST_PREFIX_LEN 40
#define SESSION_HOST_HASH_LEN   16
void session_host_id(const struct session *s, char *out, size_t len);

#endif
