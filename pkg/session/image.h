/* Which image a session runs, decided from what was observed of its build: the bundle's tag, the
 * registry's answer, the build Job and its log. Pure: the reconciler gathers, this decides. */
#ifndef TELO_SESSION_IMAGE_H
#define TELO_SESSION_IMAGE_H

#include "imagebuild/buildstep.h"
#include "session/basedigest.h"

#include <json.h>
#include <stddef.h>

/* The registry's answer about <repository>:<tag>, as the reconciler holds it. */
enum session_presence {
    SESSION_PRESENCE_NONE,    /* no answer yet (none asked, or one in flight) */
    SESSION_PRESENCE_PRESENT, /* the registry has the image */
    SESSION_PRESENCE_ABSENT,  /* it has not: build it */
    SESSION_PRESENCE_UNKNOWN, /* the check failed after its retries: build, and say so */
    SESSION_PRESENCE_DENIED,  /* the registry refused our credentials: the user must fix them */
};

/* Where the failed build's log stands. */
enum session_build_log {
    SESSION_LOG_NONE,     /* not asked for */
    SESSION_LOG_FETCHING, /* a request is in flight */
    SESSION_LOG_DONE,     /* log_tail holds the tail, or why it could not be read */
};

/* What was observed. Strings and objects are borrowed. */
struct session_image_obs {
    const char *self;                /* "ns/name" of the session */
    const char *base_image;          /* FROM of the per-app image */
    const char *bundle_error;        /* the bundle cannot be read or used: why; NULL when it can */
    const char *bundle_error_reason; /* the session's reason for it; NULL: "BundleInvalid" */
    /* The URL bundle is not read yet (no tag): what its download waits for (builds.h
     * SESSION_BUNDLE_ texts); NULL when the bundle is read. */
    const char *bundle_wait;
    int no_dependencies; /* the bundle imports nothing: the base image runs as it is */
    const char *tag;     /* BUILD_TAG_LEN hex characters */
    const char *ref;     /* <repository>:<tag> */
    enum session_presence presence;
    const char *presence_message; /* for UNKNOWN and DENIED */
    const char *build_namespace;
    const char *job_name;          /* "telo-build-<tag>" */
    const struct json_object *job; /* the Job from the cache, or NULL */
    int job_expected;              /* we created it and the cache has not shown it yet */
    long timeout_seconds;          /* the Job's activeDeadlineSeconds */
    enum session_build_log log;
    const char *log_tail;          /* with SESSION_LOG_DONE */
    const struct json_object *old; /* the session's status as last written, or NULL */
    double now;                    /* Unix time */
    /* Base-image freshness (pullPolicy Always, issue 17): whether the tag must carry the base
     * image's registry digest, and what is held of it (tag was made with it); NULL: none. */
    int base_digest_wanted;
    const struct session_base_digest *base_digest;
    /* The Job's pod has Succeeded (buildpod.h): the builder pushed, the Job has not said so. */
    int build_pod_succeeded;
    /* A running build's step as its log shows it (buildprogress.h), or NULL: none read. */
    const struct build_step *build_step;
    /* "ns/name" of the push Secret (build.pushSecret), or NULL: a failed build whose log says
     * the registry refused the push names it. */
    const char *push_secret;
    /* Why a build of this session may not start now (buildslots.h: every slot is taken), or
     * NULL: it may. */
    const char *build_slot_wait;
};

/* The next step of the session. */
enum session_image_step {
    SESSION_IMAGE_READY,    /* plan.ref is the image: create the pod */
    SESSION_IMAGE_WAIT,     /* an answer of ours is on its way (registry, log): write nothing */
    SESSION_IMAGE_BUILDING, /* a build runs: phase Building */
    SESSION_IMAGE_BLOCKED,  /* the user must fix something: Pending and Stalled, looked at again */
    SESSION_IMAGE_FAILED,   /* the session fails with plan.reason_failed and plan.message */
};

struct session_image_plan {
    enum session_image_step step;
    const char *ref;       /* READY: the image; else the image being built, or NULL */
    const char *tag;       /* or NULL (the base image) */
    const char *reason;    /* READY: "CacheHit", "Built" or "BaseImage" */
    const char *build_job; /* the Job's name once one is involved, or NULL */
    char progress[768];    /* build progress text, or "" (none to show) */
    int progress_done;
    char failure[32];   /* FAILED and BLOCKED: the session's reason */
    char message[2560]; /* FAILED and BLOCKED: what happened and what to do */
    /* Actions for the reconciler. */
    int check_registry;     /* ask the registry about ref (no answer held) */
    int create_job;         /* create the build Job and its context */
    int fetch_log;          /* read the failed build pod's log tail */
    const char *job_result; /* a finished Job: "succeeded", "failed", "timed_out", "vanished";
                             * NULL while it runs or when there is none */
    double requeue_after;   /* seconds until a deadline needs a look; 0: none */
    int check_base_digest;  /* look the base image's digest up (none held): WAIT */
    char freshness[640];    /* a failed base digest lookup's note (READY and BUILDING), or "" */
    int fetch_progress;     /* read the running build's log for its step (buildprogress.h) */
    const char *build_namespace; /* with build_job: where the Job runs */
    double build_deadline;       /* BUILDING, its Job observed: when the operator gives up on
                                  * it (Unix time; creation + timeout + grace), else 0 */
};

/* Decides the step from obs into out. Cannot fail. */
void session_image_decide(const struct session_image_obs *obs, struct session_image_plan *out);

/* status.image for a plan: {ref, tag, reason, buildJob} (fields the plan has), or NULL when out
 * of memory. The caller json_object_put()s it. */
struct json_object *session_image_status(const struct session_image_plan *plan);

/* status.build for a plan: {namespace, job} of the build Job it involves, with deadline
 * (RFC 3339) while it builds, so a client can follow the build's log and wait as long as the
 * build may take; NULL when the plan involves no Job or out of memory. The caller
 * json_object_put()s it. */
struct json_object *session_image_build_status(const struct session_image_plan *plan);

#endif
