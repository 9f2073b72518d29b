/* A TeloSession's status, computed from observed state only, and what that state calls for. */
#ifndef TELO_SESSION_STATUS_H
#define TELO_SESSION_STATUS_H

#include "session/config.h"
#include "session/image.h"
#include "session/reach.h"
#include "session/refusal.h"
#include "session/spec.h"

#include <json.h>

/* What the reconciler observed. Everything is borrowed. */
struct session_observation {
    const struct session *s;
    const struct session_config *cfg;
    /* The pod of the session's pod name from the cache, or NULL when there is none. Whose it is
     * is decided here (session_child_owner): only the session's own pod is reported and is the
     * basis of a phase; a deleted predecessor's pod is being replaced (Pending, "Replacing the
     * previous session's pod") and anyone else's is a NameConflict. */
    struct json_object *pod;
    /* The other children (Service, Ingress, Secret), classified by the reconciler: a child of
     * someone else holds one of their names (the NameConflict message, naming it), and the kind
     * of a predecessor's child being replaced ("Secret"). NULL: none. */
    const char *conflict;
    const char *replacing;
    const char *image; /* the image the session runs */
    int attach_secret; /* 1 when the attach-token Secret exists */
    /* Why the pod cannot be created yet (the bundle ConfigMap is missing, say): the session
     * stays Pending and Stalled with this reason and message until it is fixed. NULL: nothing. */
    const char *blocked_reason;
    const char *blocked_message;
    /* Builds: the image step decided this pass (never SESSION_IMAGE_WAIT), or NULL when none was
     * decided (no builds, or the pod exists already). */
    const struct session_image_plan *image_plan;
    /* Builds without a step this pass: status.image and ImageReady stay as last written. */
    int keep_image;
    double now; /* seconds since the Unix epoch */
    /* App reachability (issue 17): the prober's facts of each of s->ports (same index; zeroed:
     * nothing learnt yet), gathered for a Running pod. NULL: no prober, every port NotProbed. */
    const struct session_reach_facts *reach;
    /* The latest refused write of a child the session still wants (issue 17), or NULL: a session
     * that has not finished shows it as its reason (PodRejected...) and is not Ready; one that
     * never got a pod ends StartTimeout naming it. */
    const struct session_refusal *refusal;
    /* Session limits (issue 17, session/limits.h): what a Pending session with nothing else to
     * fix waits for (reason "SessionLimit"), the message naming the limit, and its place in line
     * (status.queuePosition, 1: next). NULL: it holds a slot, or no limit applies. */
    const char *waiting_reason, *waiting_message;
    long long queue_position;
};

/* The outcome: the status to hold, and the actions it calls for. */
struct session_verdict {
    struct json_object *status; /* owned by the verdict; see session_verdict_release */
    int changed;                /* status differs from what the session holds: write it */
    int delete_pod;             /* stop or start failure: the pod must go */
    int delete_session;         /* ttlSecondsAfterFinished has passed */
    double requeue_after;       /* seconds until a deadline needs a look; 0: none */
    /* A transition worth an Event; type is NULL when there is none. */
    const char *event_type; /* "Normal" or "Warning" */
    char event_reason[64];
    char event_message[640];
};

/* Computes the verdict. Pure: no I/O, no clock but obs->now. Returns 0, or -TELO_ENOMEM. */
int session_status_compute(const struct session_observation *obs, struct session_verdict *out);

/* Whether v's status write (and its Event) may wait for the pod this pass creates, or an earlier
 * pass created and the cache does not show yet: a new
 * session (no status yet) that is plainly Pending, with no image decided this pass that only
 * this write would carry. The pod's arrival in the cache then writes the state that follows from
 * it (Provisioning or Running), so a Pending written now would be overwritten at once: one status
 * write and one Event fewer per session. The caller writes it after all if the create fails. */
int session_status_wait_for_pod(const struct session_observation *obs,
                                const struct session_verdict *v);

/* Seconds the first status write of a new session may still wait, 0 when it is due now. A
 * session whose pod exists and is plainly on its way (Provisioning, nothing to report but
 * progress) writes nothing until its pod is SESSION_SETTLE_SECONDS old: under a burst most pods
 * are Running by then, and the session's first write says so, which spares a Provisioning write
 * and its Event per session. A pod still Pending then is shown as Provisioning. The pod's age is
 * from its creationTimestamp (whole seconds), so the real wait is between 1 and 2 s. */
#define SESSION_SETTLE_SECONDS 2.0
double session_status_settle(const struct session_observation *obs,
                             const struct session_verdict *v);

/* Frees what the verdict owns. */
void session_verdict_release(struct session_verdict *v);

#endif
