/* Which image a session runs, decided from what was observed of its build: the bundle's tag, the
 * registry's answer, the build Job and its log. Pure: the reconciler gathers, this decides. */
#include "session/image.h"

#include "imagebuild/job.h"
#include "session/buildslots.h"
#include "session/phase.h"
#include "util/jget.h"
#include "util/timefmt.h"
#include "util/utf8.h"

#include <stdio.h>
#include <string.h>

/* A Job being deleted is looked at again this often, so a new build starts once it is gone. */
#define JOB_GONE_RECHECK_S 2.0
/* A session waiting for its URL bundle's download is looked at again this often at most. */
#define BUNDLE_WAIT_RECHECK_S 30.0

static void ready(struct session_image_plan *out, const char *ref, const char *reason,
                  const char *progress)
{
    out->step = SESSION_IMAGE_READY;
    out->ref = ref;
    out->reason = reason;
    if (progress) {
        snprintf(out->progress, sizeof(out->progress), "%s", progress);
        out->progress_done = 1;
    }
}

/* detail: where the build stands ("step 3/6, 40 s", build_step_describe), or NULL. */
static void building_at(struct session_image_plan *out, const char *progress, const char *detail,
                        const char *note)
{
    out->step = SESSION_IMAGE_BUILDING;
    /* A failed registry check is why this build runs: the progress says so. */
    snprintf(out->progress, sizeof(out->progress), "%s%s%s%s%.700s%s", progress,
             detail && *detail ? " " : "", detail && *detail ? detail : "",
             note && *note ? " (" : "", note && *note ? note : "", note && *note ? ")" : "");
}

static void building(struct session_image_plan *out, const char *progress, const char *note)
{
    building_at(out, progress, NULL, note);
}

static void fail(struct session_image_plan *out, const char *reason)
{
    out->step = SESSION_IMAGE_FAILED;
    snprintf(out->failure, sizeof(out->failure), "%s", reason);
}

/* Whether a build log's tail says the registry refused the builder's push: kaniko checks it may
 * push before it builds ("error checking push permissions ... UNAUTHORIZED: authentication
 * required", v1.23) and says "failed to push to destination" when the push itself is refused. A
 * refused pull of the base image is not this (its registry may be another's). */
static int push_refused(const char *tail)
{
    if (!tail || (!strstr(tail, "push permission") && !strstr(tail, "failed to push")))
        return 0;
    static const char *const refusals[] = {"UNAUTHORIZED",  "401 Unauthorized",
                                           "unauthorized:", "authentication required",
                                           "DENIED",        "403 Forbidden"};
    for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++)
        if (strstr(tail, refusals[i]))
            return 1;
    return 0;
}

/* The build pod's log tail is the heart of the message: what kaniko or `telo install` said. */
static void build_failed(const struct session_image_obs *obs, const char *job_key,
                         struct session_image_plan *out)
{
    fail(out, "BuildFailed");
    const char *tail = obs->log_tail && *obs->log_tail ? obs->log_tail : "(the log was empty)";
    char why[640] = "";
    if (push_refused(obs->log_tail) && obs->push_secret)
        snprintf(why, sizeof(why),
                 "; the registry refused the push credentials: the push Secret %s "
                 "(build.pushSecret) was not accepted for %.400s (fix its password or token: "
                 "kubectl create secret docker-registry ... --dry-run=client -o yaml | kubectl "
                 "apply -f -)",
                 obs->push_secret, obs->ref ? obs->ref : "the image");
    else if (push_refused(obs->log_tail))
        snprintf(why, sizeof(why),
                 "; the registry refused the push: %.400s needs credentials, and no push Secret "
                 "is set (create a docker-registry Secret in the build namespace and name it in "
                 "build.pushSecret)",
                 obs->ref ? obs->ref : "the image");
    snprintf(out->message, sizeof(out->message),
             "image build failed (job '%s')%s; the last lines of its log:\n%s\nRun: kubectl logs "
             "-n %s job/%s --all-containers; after fixing the cause, delete the Job to build "
             "again: kubectl delete job -n %s %s",
             job_key, why, tail, obs->build_namespace, obs->job_name, obs->build_namespace,
             obs->job_name);
    /* A long tail fills the buffer, and snprintf cuts by bytes: never leave half a character in
     * status.message, which must be UTF-8. */
    out->message[util_utf8_cut(out->message, strlen(out->message))] = '\0';
}

static void vanished(const struct session_image_obs *obs, const char *job_key,
                     struct session_image_plan *out)
{
    fail(out, "BuildFailed");
    snprintf(out->message, sizeof(out->message),
             "image build job '%s' disappeared before completing (deleted by someone else, or "
             "the operator could not see it finish); create the session again to build anew. "
             "Run: kubectl get events -n %s --field-selector involvedObject.name=%s",
             job_key, obs->build_namespace, obs->job_name);
}

/* The note a session's build progress carries, "Building image… (<note>)", kept while it
 * follows its Job: the registry's answer that explains the build is gone by then. Copied into
 * buf; NULL when there is none. */
static const char *kept_note(const struct json_object *old, char *buf, size_t len)
{
    const char *text = jget_string(jget(old, "progress"), "message");
    static const char *const bases[] = {BUILD_PROGRESS_BUILDING, BUILD_PROGRESS_WAITING};
    for (size_t i = 0; text && i < 2; i++) {
        size_t n = strlen(bases[i]), tl = strlen(text);
        if (tl <= n + 3 || strncmp(text, bases[i], n) != 0 || text[tl - 1] != ')')
            continue;
        /* The build's step and time may stand between the base and the note: our own words,
         * with no parenthesis ("step 3/6, 40 s"). */
        size_t at = n;
        while (at < tl && strncmp(text + at, " (", 2) != 0 &&
               strchr("abcdefghijklmnopqrstuvwxyz0123456789/, ", text[at]) != NULL)
            at++;
        if (tl > at + 3 && strncmp(text + at, " (", 2) == 0) {
            snprintf(buf, len, "%.*s", (int)(tl - at - 3), text + at + 2);
            return buf;
        }
    }
    return NULL;
}

/* Follows an observed Job. */
static void follow_job(const struct session_image_obs *obs, int following, const char *note,
                       struct session_image_plan *out)
{
    char job_key[320];
    snprintf(job_key, sizeof(job_key), "%s/%s", obs->build_namespace, obs->job_name);
    if (!following && jget(jget(obs->job, "metadata"), "deletionTimestamp")) {
        /* A Job of the tag on its way out (deleted by hand to build again, or by its TTL) is an
         * earlier generation of the build: none of its verdicts is this session's, and its
         * context may go with it (issue 21). Wait for it to go, then build anew. A session
         * already following it keeps its verdict below. */
        building(out, BUILD_PROGRESS_WAITING, note);
        out->requeue_after = JOB_GONE_RECHECK_S;
        return;
    }
    struct build_status st;
    build_status_read(obs->job, job_key, obs->self, obs->timeout_seconds, obs->now, &st);
    switch (st.state) {
    case BUILD_RUNNING: {
        if (obs->build_pod_succeeded) {
            /* The builder exited 0 after its push; the Job's Complete comes a batch later. */
            out->job_result = "succeeded";
            ready(out, obs->ref, "Built", BUILD_PROGRESS_BUILT);
            return;
        }
        char detail[96] = "";
        if (obs->build_step)
            build_step_describe(obs->build_step, st.created > 0 ? obs->now - st.created : 0, detail,
                                sizeof(detail));
        building_at(out, st.progress, detail, note);
        out->fetch_progress = 1;
        out->build_deadline = st.deadline;
        out->requeue_after = (double)st.requeue_after_s;
        return;
    }
    case BUILD_SUCCEEDED:
        out->job_result = "succeeded";
        ready(out, obs->ref, "Built", BUILD_PROGRESS_BUILT);
        return;
    case BUILD_FAILED:
        out->job_result = "failed";
        if (obs->log == SESSION_LOG_DONE) {
            build_failed(obs, job_key, out);
            return;
        }
        out->step = SESSION_IMAGE_WAIT;
        out->fetch_log = obs->log == SESSION_LOG_NONE;
        return;
    case BUILD_TIMED_OUT:
        out->job_result = "timed_out";
        fail(out, "BuildTimedOut");
        snprintf(out->message, sizeof(out->message),
                 "%s; raise the operator's build.timeoutSeconds if the build needs longer, or see "
                 "what it waited on. Run: kubectl describe job -n %s %s",
                 st.message, obs->build_namespace, obs->job_name);
        return;
    case BUILD_VANISHED:
        if (following) {
            vanished(obs, job_key, out);
            return;
        }
        /* Someone deletes a finished or stuck Job: build anew once it is gone. */
        building(out, BUILD_PROGRESS_WAITING, note);
        out->requeue_after = JOB_GONE_RECHECK_S;
        return;
    }
}

/* The steps decided before the tag matters: a bundle that cannot be used, one with nothing to
 * install, a base digest still unknown. Returns 1 when out is decided. */
static int decide_without_tag(const struct session_image_obs *obs, struct session_image_plan *out)
{
    if (obs->bundle_error) {
        out->tag = NULL;
        out->ref = NULL;
        fail(out, obs->bundle_error_reason ? obs->bundle_error_reason : "BundleInvalid");
        snprintf(out->message, sizeof(out->message),
                 "%s; fix the bundle (spec.bundle) and create the session again",
                 obs->bundle_error);
        return 1;
    }
    if (obs->bundle_wait) {
        /* Said in status while it lasts (slow URLs, a queue of them): no tag, no Job yet. The
         * download's start and end queue the session again; the recheck is a fallback. */
        out->tag = NULL;
        out->ref = NULL;
        building(out, obs->bundle_wait, NULL);
        out->requeue_after = BUNDLE_WAIT_RECHECK_S;
        return 1;
    }
    if (obs->no_dependencies) {
        /* `telo install` would bake nothing: the base image runs the app as it is. */
        out->tag = NULL;
        ready(out, obs->base_image, "BaseImage", NULL);
        return 1;
    }
    if (obs->base_digest_wanted &&
        (!obs->base_digest || obs->base_digest->state == SESSION_DIGEST_NONE)) {
        /* The tag depends on the base image's digest: know it first (one lookup per image and
         * TTL, shared by every session that asks meanwhile). */
        out->step = SESSION_IMAGE_WAIT;
        out->check_base_digest = 1;
        return 1;
    }
    return 0;
}

/* A new build's registry answer (obs->presence). Returns 1 when out is decided; else the build
 * goes on, with *note replaced by the registry's word when it is unsure (notes holds the text
 * with the freshness note, nlen bytes). */
static int decide_by_registry(const struct session_image_obs *obs, const char *freshness,
                              char *notes, size_t nlen, const char **note,
                              struct session_image_plan *out)
{
    switch (obs->presence) {
    case SESSION_PRESENCE_NONE:
        out->step = SESSION_IMAGE_WAIT;
        out->check_registry = 1;
        return 1;
    case SESSION_PRESENCE_PRESENT:
        ready(out, obs->ref, "CacheHit", freshness ? freshness : BUILD_PROGRESS_CACHED);
        return 1;
    case SESSION_PRESENCE_DENIED:
        /* Building would fail to push with the same credentials: no build, no loop. */
        out->step = SESSION_IMAGE_BLOCKED;
        snprintf(out->failure, sizeof(out->failure), "RegistryAuthFailed");
        snprintf(out->message, sizeof(out->message), "%s",
                 obs->presence_message && *obs->presence_message
                     ? obs->presence_message
                     : "the registry refused the operator's credentials");
        return 1;
    case SESSION_PRESENCE_UNKNOWN:
        *note = obs->presence_message;
        if (freshness) {
            snprintf(notes, nlen, "%s; %.700s", freshness,
                     obs->presence_message ? obs->presence_message : "");
            *note = notes;
        }
        break;
    case SESSION_PRESENCE_ABSENT:
        break;
    }
    return 0;
}

/* The followed Job is gone before we saw it end: the registry says whether it pushed. */
static void followed_job_gone(const struct session_image_obs *obs, struct session_image_plan *out)
{
    if (obs->presence == SESSION_PRESENCE_PRESENT) {
        ready(out, obs->ref, "Built", BUILD_PROGRESS_BUILT);
    } else if (obs->presence == SESSION_PRESENCE_NONE) {
        out->step = SESSION_IMAGE_WAIT;
        out->check_registry = 1;
    } else {
        char job_key[320];
        snprintf(job_key, sizeof(job_key), "%s/%s", obs->build_namespace, obs->job_name);
        vanished(obs, job_key, out);
    }
}

void session_image_decide(const struct session_image_obs *obs, struct session_image_plan *out)
{
    memset(out, 0, sizeof(*out));
    out->tag = obs->tag;
    out->ref = obs->ref;
    if (decide_without_tag(obs, out))
        return;
    /* A failed lookup: the tag was made with the last digest known (or none), and the progress
     * says so, in the reference runner's words. */
    char fresh[640], notes[1400];
    const char *freshness = obs->base_digest_wanted
                                ? session_base_digest_note(obs->base_digest, fresh, sizeof(fresh))
                                : NULL;
    if (freshness)
        snprintf(out->freshness, sizeof(out->freshness), "%s", freshness);
    const struct json_object *old_image = jget(obs->old, "image");
    const char *old_job = jget_string(old_image, "buildJob");
    /* A session that waits on a build follows its Job; only a new one asks the registry. */
    int following = session_phase_of(obs->old) == SESSION_PHASE_BUILDING && old_job &&
                    strcmp(old_job, obs->job_name) == 0;
    char kept[sizeof(out->progress)];
    const char *note = following ? kept_note(obs->old, kept, sizeof(kept)) : freshness;
    if (!following && decide_by_registry(obs, freshness, notes, sizeof(notes), &note, out))
        return;
    out->build_job = obs->job_name;
    out->build_namespace = obs->build_namespace;
    if (obs->job) {
        follow_job(obs, following, note, out);
        return;
    }
    if (obs->job_expected) {
        building(out, BUILD_PROGRESS_BUILDING, note);
        return;
    }
    if (following) {
        followed_job_gone(obs, out);
        return;
    }
    if (obs->build_slot_wait) {
        /* No Job yet: nothing to follow, and nothing to show in status.build. */
        out->build_job = NULL;
        out->build_namespace = NULL;
        building(out, obs->build_slot_wait, note);
        if (out->requeue_after == 0 || out->requeue_after > SESSION_BUILD_SLOTS_RECHECK_S)
            out->requeue_after = SESSION_BUILD_SLOTS_RECHECK_S;
        return;
    }
    out->create_job = 1;
    building(out, BUILD_PROGRESS_BUILDING, note);
}

struct json_object *session_image_status(const struct session_image_plan *plan)
{
    struct json_object *image = json_object_new_object();
    if (!image)
        return NULL;
    if (plan->ref)
        json_object_object_add(image, "ref", json_object_new_string(plan->ref));
    if (plan->tag)
        json_object_object_add(image, "tag", json_object_new_string(plan->tag));
    if (plan->step == SESSION_IMAGE_READY && plan->reason)
        json_object_object_add(image, "reason", json_object_new_string(plan->reason));
    if (plan->build_job)
        json_object_object_add(image, "buildJob", json_object_new_string(plan->build_job));
    return image;
}

struct json_object *session_image_build_status(const struct session_image_plan *plan)
{
    if (!plan->build_job || !plan->build_namespace)
        return NULL;
    struct json_object *build = json_object_new_object();
    if (!build)
        return NULL;
    json_object_object_add(build, "namespace", json_object_new_string(plan->build_namespace));
    json_object_object_add(build, "job", json_object_new_string(plan->build_job));
    if (plan->step == SESSION_IMAGE_BUILDING && plan->build_deadline > 0) {
        char when[40];
        timefmt_format(plan->build_deadline, when, sizeof(when));
        json_object_object_add(build, "deadline", json_object_new_string(when));
    }
    return build;
}
