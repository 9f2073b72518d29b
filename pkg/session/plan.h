/* The decisions of one TeloSession reconcile: what was observed in, the writes to make out. */
#ifndef TELO_SESSION_PLAN_H
#define TELO_SESSION_PLAN_H

#include "session/config.h"
#include "session/image.h"
#include "session/owner.h"
#include "session/spec.h"
#include "session/status.h"

#include <json.h>

/* How often a session blocked on something the user must fix (a missing bundle ConfigMap, a
 * base image not allowed, a name held by someone else) is looked at again. Creating the
 * ConfigMap does not trigger a reconcile: ConfigMaps are not watched, since caching every
 * ConfigMap of a namespace would cost far more than polling. */
#define SESSION_PLAN_BLOCKED_RECHECK_S 10.0

/* A pass that waits on an answer of ours (the registry, a build log, a URL bundle's download)
 * is queued again when it arrives; this is the safety net should it never come. */
#define SESSION_PLAN_ANSWER_WAIT_S 30.0

/* The objects a session writes. */
enum session_plan_child {
    SESSION_PLAN_POD,
    SESSION_PLAN_SECRET,
    SESSION_PLAN_SERVICE,
    SESSION_PLAN_INGRESS,
    SESSION_PLAN_JOB,     /* the build Job, in the build namespace */
    SESSION_PLAN_SESSION, /* the TeloSession itself (ttlSecondsAfterFinished) */
    SESSION_PLAN_NCHILDREN,
};

/* A write of ours the child's cache has not shown yet, as the executor holds it: within its
 * time the write is trusted instead of repeated (a second create would be answered 409, a name
 * taken). */
struct session_plan_expect {
    int held;                /* 1: one is held (and has not lapsed) */
    unsigned long long body; /* hash of what was written (session_plan_body_hash); 0: any */
    double until;            /* when it lapses, on obs.now's clock */
};

/* What the executor observed before planning. Everything is borrowed and must outlive the plan
 * made from it (the plan points into it). */
struct session_plan_obs {
    const struct session *s; /* status: the one to go by (ours, while the cache lags our write) */
    const struct session_config *cfg;
    /* The children of the session's names in the caches, NULL when there is none: the pod,
     * Service and Ingress named session_child_name, the Secret named session_secret_name. */
    struct json_object *pod, *secret, *service, *ingress;
    /* Writes of ours not in the caches yet, by child (SESSION_PLAN_SESSION unused). */
    struct session_plan_expect expect[SESSION_PLAN_NCHILDREN];
    /* The pod cache read once more when the plan is made (a bundle read may lie between the
     * first read and now) shows the session's own pod, or one of ours on its way. Only consulted
     * before a PodDisappeared verdict. */
    int pod_back;
    /* The bundle ConfigMap check found the bundle missing (BundleNotFound): the session stays
     * Pending until it is fixed. NULL: nothing blocks. */
    const char *blocked_reason, *blocked_message;
    /* Builds: what the image step gathered this pass (job_expected is derived here from
     * expect[SESSION_PLAN_JOB]), or NULL when no step ran (no builds, the pod exists, the
     * bundle is missing). */
    const struct session_image_obs *image;
    /* With image: the bundle for the Job's context, and who asks ("ns/name"). */
    const char *self;
    double now; /* seconds since the Unix epoch, the loop's clock */
    /* App reachability (issue 17): the prober's facts of each of s->ports (same index), for a
     * Running pod; NULL: no prober (every port NotProbed). */
    const struct session_reach_facts *reach;
    /* The children's writes the API server refused and that no write has succeeded since, as
     * the executor holds them (issue 17), by child (SESSION_PLAN_POD .. SESSION_PLAN_JOB). */
    struct session_refusal refusal[SESSION_REFUSAL_NCHILDREN];
    /* Session limits (issue 17): the session waits for a slot (SessionLimit), with the message
     * naming the limit and its place in line (1: next). 0: it holds one, or no limit applies. */
    int limit_waiting;
    const char *limit_message;
    long long queue_position;
};

/* What the executor must learn before the plan can be made. */
enum session_plan_learn {
    SESSION_PLAN_LEARN_NOTHING, /* plan now */
    SESSION_PLAN_LEARN_BUNDLE,  /* read the bundle ConfigMap (and with builds, its tag) first */
    SESSION_PLAN_LEARN_URL_KEY, /* builds: the URL bundle's tag (a download) first */
    SESSION_PLAN_LEARN_REFUSED, /* plan now: the base image may not be built on (blocked) */
};

/* Decides what must be learnt before planning, from obs (blocked_reason and image unset). */
enum session_plan_learn session_plan_learn(const struct session_plan_obs *obs);

enum session_plan_verb {
    /* A merge patch (obj) of a child the session owns: obj's metadata.uid is the child's, so the
     * patch cannot land on an object that took its name since (the API server answers 422 on
     * metadata.uid then). */
    SESSION_PLAN_PATCH,
    /* Create obj, never overwriting: a name already taken answers 409 AlreadyExists. A child's
     * is then held by an object outside the caches, which lack the operator's labels (a
     * NameConflict, tried again later); the build Job's is another session's, shared. */
    SESSION_PLAN_CREATE,
    SESSION_PLAN_DELETE, /* delete, background propagation */
};

/* One write. */
struct session_plan_write {
    enum session_plan_verb verb;
    enum session_plan_child child;
    char name[96];
    struct json_object *obj; /* PATCH and CREATE: the body, owned by the plan */
    /* Remember the write until the child's cache shows it, as body_hash (0: any content). */
    int expect;
    unsigned long long body_hash;
    int fill_token;   /* the Secret: the executor puts a fresh random token in stringData.token */
    int counts_start; /* the pod's create: telo_session_starts_total, and the deferred status */
    long grace;       /* DELETE: grace period seconds, -1 the object's default */
    /* DELETE: the uid of the object the plan decided on, sent as a precondition: the name may
     * hold a successor by the time the delete lands (a new run's pod, a re-created session). */
    char uid[64];
};

/* A deleted predecessor's child (issue 21): deleted with its uid as precondition, and only after
 * a live read says the session's name holds obs.s->uid and that differs from owner_uid. */
struct session_plan_gone {
    enum session_plan_child child;
    char name[96];
    char uid[64];
    char owner_uid[64];
};

#define SESSION_PLAN_MAX_WRITES 8
#define SESSION_PLAN_MAX_GONE   4

struct session_plan {
    /* The image step (builds), when one was decided: the executor asks what it says
     * (check_registry, fetch_log) and counts job_result. Its strings point into obs.image. */
    struct session_image_plan image;
    int has_image;
    /* The image step waits for an answer of ours: nothing else is planned; requeue_after set. */
    int wait;
    /* The status: written (with its Event) when verdict.changed. */
    struct session_verdict verdict;
    /* A new session's first status, held back while its pod is being created: written (with
     * its Event) only if the pod's create fails. status NULL: none. */
    struct session_verdict deferred;
    struct session_plan_write writes[SESSION_PLAN_MAX_WRITES];
    size_t nwrites;
    struct session_plan_gone gone[SESSION_PLAN_MAX_GONE];
    size_t ngone;
    /* The first child held by someone else (NameConflict), for the log: its kind and name. */
    const char *conflict_kind;
    char conflict_name[96];
    /* Metrics of the status write: a session that turned Failed (its reason, never NULL then),
     * one that found its image in the registry, seconds from creation to Running (< 0: none). */
    const char *failed_reason;
    int cache_hit;
    double startup_seconds;
    /* Something the plan could not build (the Job object): the pass fails with it. "": none. */
    char error[512];
    double requeue_after; /* 0: none */
    /* Bits (1 << child) of the refusals the executor forgets: the plan no longer writes those
     * children (the session stopped, ended, or has the object now). */
    unsigned refusal_clear;
};

/* Makes the plan for obs into out. Pure: no I/O, no clock but obs->now. Returns 0, or
 * -TELO_ENOMEM (out is released then). Release out with session_plan_release. */
int session_plan_make(const struct session_plan_obs *obs, struct session_plan *out);

/* Frees what plan owns (the verdicts, the write bodies). Accepts a zeroed plan. */
void session_plan_release(struct session_plan *plan);

/* The hash a write's expectation holds of body: never 0. */
unsigned long long session_plan_body_hash(struct json_object *body);

#endif
