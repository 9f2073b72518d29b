/* Admission of an attach request: finds the TeloSession and decides whether the presented token
 * may attach to it (the session's own attach token, or a Kubernetes bearer token that passes
 * TokenReview and a SubjectAccessReview for create on telosessions/attach). */
#ifndef TELO_GATEWAY_AUTH_H
#define TELO_GATEWAY_AUTH_H

#include "util/err.h"

#include <stddef.h>

struct kube_transport;
struct gw_auth;
struct gw_admission;

enum gw_verdict {
    GW_ALLOW = 0,
    GW_UNAUTHENTICATED, /* 401: no token, or one nobody vouches for */
    GW_FORBIDDEN,       /* 403: a known user without the RBAC verb */
    GW_NOT_FOUND,       /* 404: the (authorized) session does not exist */
    GW_UNAVAILABLE,     /* 503: the API server could not be asked */
    GW_TOO_MANY,        /* 429: over the admission rate (gateway/gate.h); retry_after says when */
};

/* What admission learnt; strings valid during the callback. */
struct gw_admitted {
    enum gw_verdict verdict;
    const char *reason;  /* for the log and the refusal body: never holds the token */
    const char *subject; /* "session-token" or the Kubernetes user name; "" when unknown */
    const char *phase;   /* the TeloSession's status.phase ("" when absent) */
    const char *pod;     /* status.podName ("" when absent) */
    const char *pod_ip;  /* status.podIP ("" when absent) */
    int inspect;         /* 1 when the session publishes status.inspectUrl (spec.inspect) */
    const char *uid;     /* the TeloSession's metadata.uid ("" when not found) */
    double ready_since;  /* when its Ready condition last became True (epoch s), 0 when not */
    int exit_code;       /* status.exitCode, -1 when absent */
    double retry_after;  /* GW_TOO_MANY: seconds until a lookup would be allowed */
};

typedef void gw_admit_fn(const struct gw_admitted *a, void *ud);

/* Creates the admission service on t (borrowed; must outlive it). Decisions about bearer tokens
 * are cached for cache_ttl_s seconds (keyed by a SHA-256 of the token, never the token). Returns
 * NULL when out of memory. */
struct gw_auth *gw_auth_new(struct kube_transport *t, double cache_ttl_s);

/* Frees a. Every admission must have finished or been cancelled. NULL is a no-op. */
void gw_auth_free(struct gw_auth *a);

/* Starts deciding whether token may attach to TeloSession namespace/name; cb runs exactly once
 * (never from inside this call) unless the admission is cancelled first. token must not be empty.
 * Returns the handle, or NULL with err filled (out of memory). */
struct gw_admission *gw_admit(struct gw_auth *a, const char *namespace, const char *name,
                              const char *token, gw_admit_fn *cb, void *ud, struct telo_err *err);

/* As gw_admit, for a client already attached: the same checks (the session's token still matches
 * its Secret, or TokenReview and SubjectAccessReview still pass), never answered from the cache. */
struct gw_admission *gw_reauthorize(struct gw_auth *a, const char *namespace, const char *name,
                                    const char *token, gw_admit_fn *cb, void *ud,
                                    struct telo_err *err);

/* Sets the audience Kubernetes tokens must be issued for (--token-audience): sent in the
 * TokenReview's spec.audiences, and a review whose status.audiences lacks it is refused. NULL or
 * "": none (the API server's own audiences, any token valid for it). Returns 0 or -TELO_ENOMEM. */
int gw_auth_set_audience(struct gw_auth *a, const char *audience);

/* What a re-authorization's verdict means for a client already attached to the TeloSession with
 * uid (NULL or "": not known, not compared): the refusal (HTTP code, Status reason and message)
 * it is closed with, gw_replaced_refusal's when the name now holds another session (an attach
 * token is scoped to one uid). Returns 1 with the three filled for a refusal; 0 when the client
 * stays (allowed, or the API server could not be asked: the next period asks again). */
int gw_reauth_refusal(const struct gw_admitted *a, const char *uid, int *code, const char **reason,
                      const char **message);

/* The refusal (HTTP code, Status reason and message) a client admitted to a TeloSession is closed
 * with once another TeloSession of its name (another uid) has taken its place: 410 Gone, as for
 * any resource deleted and created again. Cannot fail. */
void gw_replaced_refusal(int *code, const char **reason, const char **message);

/* Cancels adm: cb is not called. NULL is a no-op. Not from inside cb. */
void gw_admission_cancel(struct gw_admission *adm);

/* Compares two secrets in constant time with respect to their content (lengths are hidden too:
 * both are hashed first). Returns 1 when equal. */
int gw_token_equal(const char *a, const char *b);

#endif
