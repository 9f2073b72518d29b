/* One pass of the session reconciler: its state and the executor's steps shared by the files
 * that run it (reconciler.c: the pass, its writes and the plan; learn.c: what is read before
 * planning; jobwrite.c: the build Job and its context). Private to pkg/session. */
#ifndef TELO_SESSION_PASS_H
#define TELO_SESSION_PASS_H

#include "controller/manager.h"
#include "imagebuild/job.h"
#include "kube/rest.h"
#include "session/builds.h"
#include "session/buildslots.h"
#include "session/cmmemo.h"
#include "session/config.h"
#include "session/desired.h"
#include "session/expect.h"
#include "session/image.h"
#include "session/informers.h"
#include "session/owner.h"
#include "session/plan.h"
#include "session/prober.h"
#include "session/refusal.h"
#include "session/session_metrics.h"
#include "session/spec.h"
#include "session/status.h"
#include "util/err.h"

#include <json.h>

struct events_recorder;
struct kube_transport;
struct session_admission;

struct session_reconciler {
    struct ctrl_manager *m;
    struct kube_transport *t;
    const struct session_config *cfg;
    struct events_recorder *events;
    struct session_informers inf;
    struct session_metrics metrics;
    struct session_builds *builds;           /* NULL without build.repository */
    struct session_build_slots *build_slots; /* NULL without build.repository */
    struct session_expectations *expected;
    struct session_cm_memo *bundles; /* bundle ConfigMaps read moments ago or being read */
    struct session_prober *prober;   /* app reachability; NULL with reachability.enabled off */
    /* Children's writes the API server refused, by session "ns/name" (issue 17): what the
     * plan reads to say so in the status and to back off. */
    struct session_refusals *refusals;
    struct session_admission *admission; /* session limits (admission.c); NULL: no limits */
};

/* One write of a pass; the expectation it set is dropped again when the write fails. */
struct write_ctx {
    struct pass *p;
    char expect_key[320];
    int counts_start; /* a pod create: telo_session_starts_total on 201 */
    int status;       /* a status write: remember the resourceVersion it made; 409: stale */
    /* A delete with a uid precondition (409), or a child's patch with the child's uid (422 on
     * metadata.uid): the name holds someone else's object now, which the next pass looks at. */
    int precondition;
    int create_child; /* a child's create: 409 AlreadyExists is its name taken (a refusal) */
    /* A create or patch of a child (issue 17): its refusal is recorded, its success clears it. */
    int has_child;
    int child;        /* enum session_plan_child */
    char object[200]; /* "ns/name" of the child */
};

/* A deleted predecessor's child (issue 21), to delete once the session's uid is confirmed. */
struct gone_child {
    const char *group, *resource; /* static strings */
    char name[96];                /* as session_plan_gone.name */
    char uid[64];                 /* the child's own uid: the delete's precondition */
    char owner_uid[64];           /* its controller's, the predecessor's */
};

#define MAX_GONE 4

/* One reconcile in flight: its writes run in parallel; the last to finish ends the reconcile. */
struct pass {
    struct session_reconciler *r;
    struct ctrl_reconcile *rec;
    struct session s;
    struct json_object *pod;
    struct json_object *written_status; /* our last status write, when the cache lags it */
    /* A new session's first status, held back while its pod is being created: the pod's arrival
     * in the cache writes the status that follows from it, so this one would be overwritten at
     * once. Written only if the create fails (see on_write). */
    struct session_verdict deferred;
    char base_rv[64]; /* resourceVersion of the cached session we read */
    /* The resourceVersion our last status write made, when the cache lags it (written_status):
     * the session as we last left it, which this pass's status write is conditional on. */
    char written_rv[64];
    enum session_owner pod_owner; /* whose the cached pod of the session's pod name is */
    /* A deleted predecessor's children to delete (after a live read confirms the session's
     * uid, issue 21). */
    struct gone_child gone[MAX_GONE];
    size_t ngone;
    int pending;
    int failed;
    char error[TELO_ERR_MSG_MAX];
    double requeue_after;
    enum ctrl_outcome outcome;
    /* Builds: the image step of this pass and what the build Job's context needs. */
    int keep_image;
    unsigned char *tgz; /* the bundle, for the build's context ConfigMap */
    size_t tgz_len;
    char tag[BUILD_TAG_LEN + 1];
    char ref[600];
    char job_name[64];
    /* Session limits (admission.c): the session waits for a slot, why, and its place. */
    int limit_waiting;
    char limit_message[512];
    long long queue_position;
};

/* The loop's clock. */
double session_pass_now(const struct session_reconciler *r);

/* Ends one share of p's work (the pass holds one share until all its writes started, and each
 * write or read one more); the last ends the reconcile and frees p. */
void session_pass_done(struct pass *p);

/* The answer of a write started with a session_pass_write_ctx (ud): errors fail the pass, a
 * failed write drops its expectation. Ends the write's share. */
void session_pass_on_write(const struct kube_result *res, void *ud);

/* A write's context for p (expect_key: its expectation, or NULL), or NULL (p failed) when out of
 * memory. */
struct write_ctx *session_pass_write_ctx(struct pass *p, const char *expect_key);

/* A write the transport refused to start (err says why): fails w's pass, takes back its pending
 * share and expectation, and frees w. */
void session_pass_write_refused(struct write_ctx *w, const struct telo_err *err);

/* Deletes ref; with uid, only while the name still holds that object (a precondition: what we
 * looked at may have been replaced since). */
void session_pass_delete(struct pass *p, const struct kube_ref *ref, long grace, const char *uid);

/* The expectations of p's reconciler at the loop's clock. */
void session_pass_expect_drop(struct session_reconciler *r, const char *key);
int session_pass_expect_set(struct session_reconciler *r, const char *key, unsigned long long body);

/* Gathers the rest of the observation, plans and executes; ends the pass's own share.
 * blocked_*: the bundle check's finding; img: the image step's observation, or NULL. */
void session_pass_converge(struct pass *p, const char *blocked_reason, const char *blocked_message,
                           const struct session_image_obs *img);

/* learn.c: reads what the plan needs first (session_plan_learn), then converges. key is the
 * session's "ns/name". */
void session_pass_learn(struct pass *p, const char *key);

/* jobwrite.c: the build Job's configuration for p's session. */
void session_pass_job_config(const struct pass *p, struct build_config *bc);

/* jobwrite.c: creates the build Job (job consumed) the plan asks for; a new Job gets its
 * context ConfigMap, and without one it is deleted again. */
void session_pass_create_job(struct pass *p, struct json_object *job);

/* admission.c: session limits. Registers the wake of waiting sessions on r's session informer
 * when limits are configured (r->admission stays NULL otherwise). Returns 0 or a negative code
 * with err filled. */
int session_admission_new(struct session_reconciler *r, struct telo_err *err);

/* Frees r's admission state. Accepts a reconciler without one. */
void session_admission_free(struct session_reconciler *r);

/* Decides whether p's session may start now (fills p->limit_*), and remembers an admission until
 * the cache shows it, so a burst never admits more than the limits. No-op without limits. */
void session_admission_decide(struct pass *p);

#endif
