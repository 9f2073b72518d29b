/* Tests for pkg/session/image.c: the image step of a session decided from the bundle's key, the
 * registry's answer, the build Job (as the API server returns it) and the build log. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "imagebuild/job.h"
#include "session/image.h"
#include "util/utf8.h"

#include <json.h>

#include <stdio.h>
#include <string.h>

/* 2026-03-01T10:00:00Z. */
#define T0 1772359200.0

#define TAG "0123456789abcdef0123456789abcdef"
#define REF "127.0.0.1:5001/telo/apps:" TAG
#define JOB "telo-build-" TAG

#define PLAIN (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

struct world {
    struct session_image_obs obs;
    struct json_object *job, *old;
    struct session_image_plan plan;
};

static void world_init(struct world *w)
{
    memset(w, 0, sizeof(*w));
    w->obs.self = "demo/a";
    w->obs.base_image = "telorun/node:latest-slim";
    w->obs.tag = TAG;
    w->obs.ref = REF;
    w->obs.build_namespace = "telo-builds";
    w->obs.job_name = JOB;
    w->obs.timeout_seconds = 600;
    w->obs.now = T0;
}

static void world_free(struct world *w)
{
    json_object_put(w->job);
    json_object_put(w->old);
}

/* A Job created at T0 by requested_by, with status_json as its status. */
static void world_job(struct world *w, const char *requested_by, const char *status_json)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "{\"metadata\":{\"name\":\"" JOB "\",\"namespace\":\"telo-builds\",\"uid\":\"u1\","
             "\"creationTimestamp\":\"2026-03-01T10:00:00Z\","
             "\"annotations\":{\"" BUILD_ANNOTATION_BY "\":\"%s\"}},\"status\":%s}",
             requested_by, status_json);
    json_object_put(w->job);
    w->job = json_tokener_parse(text);
    assert_non_null(w->job);
    w->obs.job = w->job;
}

/* The session's last written status: phase, and status.image.buildJob when job is set. */
static void world_old(struct world *w, const char *phase, const char *job)
{
    char text[512];
    snprintf(text, sizeof(text), "{\"phase\":\"%s\",\"image\":{\"tag\":\"" TAG "\"%s%s%s}}", phase,
             job ? ",\"buildJob\":\"" : "", job ? job : "", job ? "\"" : "");
    json_object_put(w->old);
    w->old = json_tokener_parse(text);
    assert_non_null(w->old);
    w->obs.old = w->old;
}

static void decide(struct world *w)
{
    session_image_decide(&w->obs, &w->plan);
}

static void a_bad_bundle_fails_the_session(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    w.obs.bundle_error = "bundle ConfigMap demo/app key bundle.tgz: ../x: '..' segment";
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_FAILED);
    assert_string_equal(w.plan.failure, "BundleInvalid");
    assert_string_equal(w.plan.message,
                        "bundle ConfigMap demo/app key bundle.tgz: ../x: '..' segment; fix the "
                        "bundle (spec.bundle) and create the session again");
    assert_false(w.plan.check_registry || w.plan.create_job);
    struct json_object *image = session_image_status(&w.plan);
    assert_string_equal(json_object_to_json_string_ext(image, JSON_C_TO_STRING_PLAIN |
                                                                  JSON_C_TO_STRING_NOSLASHESCAPE),
                        "{}");
    json_object_put(image);
    world_free(&w);
}

static void a_bundle_without_dependencies_runs_the_base_image(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    w.obs.no_dependencies = 1;
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_READY);
    assert_string_equal(w.plan.ref, "telorun/node:latest-slim");
    assert_string_equal(w.plan.reason, "BaseImage");
    assert_string_equal(w.plan.progress, "");
    assert_false(w.plan.check_registry || w.plan.create_job);
    struct json_object *image = session_image_status(&w.plan);
    assert_string_equal(json_object_to_json_string_ext(image, JSON_C_TO_STRING_PLAIN |
                                                                  JSON_C_TO_STRING_NOSLASHESCAPE),
                        "{\"ref\":\"telorun/node:latest-slim\",\"reason\":\"BaseImage\"}");
    json_object_put(image);
    world_free(&w);
}

static void a_url_bundle_not_read_yet_says_what_its_download_waits_for(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    /* No tag yet: the bundle is what the tag is made of. */
    w.obs.tag = NULL;
    w.obs.ref = NULL;
    w.obs.bundle_wait = "Waiting for a bundle download slot (bundle.maxConcurrentDownloads)";
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_BUILDING);
    assert_string_equal(w.plan.progress, w.obs.bundle_wait);
    assert_false(w.plan.check_registry || w.plan.create_job || w.plan.fetch_progress);
    assert_null(w.plan.build_job);
    assert_true(w.plan.requeue_after > 0 && w.plan.requeue_after <= 30);
    struct json_object *image = session_image_status(&w.plan);
    assert_string_equal(json_object_to_json_string_ext(image, PLAIN), "{}");
    json_object_put(image);
    assert_null(session_image_build_status(&w.plan));
    world_free(&w);
}

static void a_new_session_asks_the_registry_first(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    /* Even with a Job of the tag around: reuse before build. */
    world_job(&w, "demo/other", "{}");
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_WAIT);
    assert_true(w.plan.check_registry);
    assert_false(w.plan.create_job);
    world_free(&w);
}

static void an_image_in_the_registry_is_a_cache_hit(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    w.obs.presence = SESSION_PRESENCE_PRESENT;
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_READY);
    assert_string_equal(w.plan.ref, REF);
    assert_string_equal(w.plan.reason, "CacheHit");
    assert_string_equal(w.plan.progress, BUILD_PROGRESS_CACHED);
    assert_true(w.plan.progress_done);
    assert_null(w.plan.build_job);
    assert_false(w.plan.create_job);
    struct json_object *image = session_image_status(&w.plan);
    assert_string_equal(json_object_to_json_string_ext(image, JSON_C_TO_STRING_PLAIN |
                                                                  JSON_C_TO_STRING_NOSLASHESCAPE),
                        "{\"ref\":\"" REF "\",\"tag\":\"" TAG "\",\"reason\":\"CacheHit\"}");
    json_object_put(image);
    world_free(&w);
}

static void refused_credentials_block_without_a_build(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    w.obs.presence = SESSION_PRESENCE_DENIED;
    w.obs.presence_message = "registry 127.0.0.1:5001 refused the credentials of Secret "
                             "telo-builds/push: HTTP 401; fix the username and password";
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_BLOCKED);
    assert_string_equal(w.plan.failure, "RegistryAuthFailed");
    assert_string_equal(w.plan.message, w.obs.presence_message);
    assert_false(w.plan.create_job);
    world_free(&w);
}

static void an_absent_image_creates_the_job(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    w.obs.presence = SESSION_PRESENCE_ABSENT;
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_BUILDING);
    assert_true(w.plan.create_job);
    assert_string_equal(w.plan.build_job, JOB);
    assert_string_equal(w.plan.progress, BUILD_PROGRESS_BUILDING);
    assert_false(w.plan.progress_done);
    struct json_object *image = session_image_status(&w.plan);
    assert_string_equal(json_object_to_json_string_ext(image, JSON_C_TO_STRING_PLAIN |
                                                                  JSON_C_TO_STRING_NOSLASHESCAPE),
                        "{\"ref\":\"" REF "\",\"tag\":\"" TAG "\",\"buildJob\":\"" JOB "\"}");
    json_object_put(image);
    /* Created a moment ago and not yet in the cache: building, not created twice. */
    w.obs.job_expected = 1;
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_BUILDING);
    assert_false(w.plan.create_job);
    world_free(&w);
}

static void a_build_without_a_slot_waits_in_building_without_a_job(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    w.obs.presence = SESSION_PRESENCE_ABSENT;
    w.obs.build_slot_wait =
        "Waiting for a build slot: 2 builds run, at most 2 (build.maxConcurrent)";
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_BUILDING);
    assert_false(w.plan.create_job);
    assert_string_equal(w.plan.progress, w.obs.build_slot_wait);
    assert_null(w.plan.build_job); /* status.build names no Job that is not there */
    assert_true(w.plan.requeue_after > 0 && w.plan.requeue_after <= 10.0);
    struct json_object *image = session_image_status(&w.plan);
    assert_string_equal(json_object_to_json_string_ext(image, JSON_C_TO_STRING_PLAIN |
                                                                  JSON_C_TO_STRING_NOSLASHESCAPE),
                        "{\"ref\":\"" REF "\",\"tag\":\"" TAG "\"}");
    json_object_put(image);
    assert_null(session_image_build_status(&w.plan));
    /* A Job of the tag already there or on its way is followed: a slot is for a new Job. */
    w.obs.job_expected = 1;
    decide(&w);
    assert_string_equal(w.plan.progress, BUILD_PROGRESS_BUILDING);
    assert_string_equal(w.plan.build_job, JOB);
    world_free(&w);
}

static void a_failed_registry_check_builds_and_says_why(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    w.obs.presence = SESSION_PRESENCE_UNKNOWN;
    w.obs.presence_message = "registry check of " REF " failed 3 times (last: connection "
                             "refused); treating the image as missing and building it";
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_BUILDING);
    assert_true(w.plan.create_job);
    assert_string_equal(w.plan.progress,
                        BUILD_PROGRESS_BUILDING " (registry check of " REF " failed 3 times "
                                                "(last: connection refused); treating the image "
                                                "as missing and building it)");
    /* Following its Job, the session keeps saying why it builds. */
    char old[1024];
    snprintf(old, sizeof(old),
             "{\"phase\":\"Building\",\"image\":{\"buildJob\":\"" JOB "\"},"
             "\"progress\":{\"message\":\"%s\"}}",
             w.plan.progress);
    w.old = json_tokener_parse(old);
    w.obs.old = w.old;
    w.obs.presence = SESSION_PRESENCE_NONE;
    world_job(&w, "demo/a", "{\"active\":1}");
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_BUILDING);
    assert_false(w.plan.check_registry);
    assert_non_null(strstr(w.plan.progress, BUILD_PROGRESS_BUILDING " (registry check of "));
    world_free(&w);
}

static void another_sessions_running_job_is_shared(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    w.obs.presence = SESSION_PRESENCE_ABSENT;
    world_job(&w, "demo/other", "{\"active\":1}");
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_BUILDING);
    assert_false(w.plan.create_job);
    assert_string_equal(w.plan.progress, BUILD_PROGRESS_WAITING);
    /* Looked at again when the operator-side deadline (600 s + 30 s) passes. */
    assert_true(w.plan.requeue_after > 600 && w.plan.requeue_after <= 631);
    /* Its own Job reads "Building image…". */
    world_job(&w, "demo/a", "{\"active\":1}");
    decide(&w);
    assert_string_equal(w.plan.progress, BUILD_PROGRESS_BUILDING);
    world_free(&w);
}

static void a_running_build_shows_its_step_and_time(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    w.obs.presence = SESSION_PRESENCE_ABSENT;
    world_job(&w, "demo/a", "{\"active\":1}");
    /* Nothing read of the builder's log yet: the progress is as it was. */
    struct build_step step = {.steps = 6};
    w.obs.build_step = &step;
    w.obs.now = T0 + 45;
    decide(&w);
    assert_string_equal(w.plan.progress, BUILD_PROGRESS_BUILDING);
    assert_true(w.plan.fetch_progress);
    assert_true(w.plan.build_deadline == T0 + 630);
    /* The log shows step 3 of 6: said with the time since the Job's creation, by 10 s. */
    step.started = 1;
    step.step = 3;
    decide(&w);
    assert_string_equal(w.plan.progress, BUILD_PROGRESS_BUILDING " step 3/6, 40 s");
    w.obs.now = T0 + 49.9;
    decide(&w);
    assert_string_equal(w.plan.progress, BUILD_PROGRESS_BUILDING " step 3/6, 40 s");
    /* Still looked at again by the deadline only: the step's reads wake the session. */
    assert_true(w.plan.requeue_after > 570 && w.plan.requeue_after <= 631);
    /* status.build: where the Job runs and until when it may. */
    struct json_object *build = session_image_build_status(&w.plan);
    assert_string_equal(json_object_to_json_string_ext(build, PLAIN),
                        "{\"namespace\":\"telo-builds\",\"job\":\"" JOB "\","
                        "\"deadline\":\"2026-03-01T10:10:30Z\"}");
    json_object_put(build);
    /* Another session's Job: the same detail after its own words. */
    world_job(&w, "demo/other", "{\"active\":1}");
    step.pushing = 1;
    w.obs.now = T0 + 75;
    decide(&w);
    assert_string_equal(w.plan.progress, BUILD_PROGRESS_WAITING " pushing, 1 min 10 s");
    /* A following session keeps the registry's note after the detail, and finds it again. */
    world_old(&w, "Building", JOB);
    json_object_object_add(w.old, "progress",
                           json_tokener_parse("{\"message\":\"" BUILD_PROGRESS_WAITING
                                              " step 2/6, 20 s (registry check of x failed)\"}"));
    decide(&w);
    assert_string_equal(w.plan.progress,
                        BUILD_PROGRESS_WAITING " pushing, 1 min 10 s (registry check of x failed)");
    /* Done: no deadline in status.build, the Job still named. */
    world_job(&w, "demo/other", "{\"succeeded\":1}");
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_READY);
    assert_false(w.plan.fetch_progress);
    build = session_image_build_status(&w.plan);
    assert_string_equal(json_object_to_json_string_ext(build, PLAIN),
                        "{\"namespace\":\"telo-builds\",\"job\":\"" JOB "\"}");
    json_object_put(build);
    world_free(&w);
}

static void a_following_session_does_not_ask_the_registry_again(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    world_old(&w, "Building", JOB);
    world_job(&w, "demo/a", "{\"active\":1}");
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_BUILDING);
    assert_false(w.plan.check_registry);
    world_free(&w);
}

static void a_finished_job_gives_a_built_image(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    world_old(&w, "Building", JOB);
    world_job(&w, "demo/other",
              "{\"succeeded\":1,\"conditions\":[{\"type\":\"Complete\",\"status\":\"True\"}]}");
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_READY);
    assert_string_equal(w.plan.ref, REF);
    assert_string_equal(w.plan.reason, "Built");
    assert_string_equal(w.plan.progress, BUILD_PROGRESS_BUILT);
    assert_string_equal(w.plan.job_result, "succeeded");
    struct json_object *image = session_image_status(&w.plan);
    assert_string_equal(json_object_to_json_string_ext(image, JSON_C_TO_STRING_PLAIN |
                                                                  JSON_C_TO_STRING_NOSLASHESCAPE),
                        "{\"ref\":\"" REF "\",\"tag\":\"" TAG "\",\"reason\":\"Built\","
                        "\"buildJob\":\"" JOB "\"}");
    json_object_put(image);
    world_free(&w);
}

static void a_failed_job_waits_for_its_log_then_fails_with_it(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    world_old(&w, "Building", JOB);
    world_job(&w, "demo/a",
              "{\"failed\":1,\"conditions\":[{\"type\":\"Failed\",\"status\":\"True\","
              "\"reason\":\"BackoffLimitExceeded\"}]}");
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_WAIT);
    assert_true(w.plan.fetch_log);
    assert_string_equal(w.plan.job_result, "failed");
    w.obs.log = SESSION_LOG_FETCHING;
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_WAIT);
    assert_false(w.plan.fetch_log);
    w.obs.log = SESSION_LOG_DONE;
    w.obs.log_tail = "step 1\nerror: module std/x not found";
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_FAILED);
    assert_string_equal(w.plan.failure, "BuildFailed");
    assert_string_equal(
        w.plan.message,
        "image build failed (job 'telo-builds/" JOB "'); the last lines of its log:\nstep 1\n"
        "error: module std/x not found\nRun: kubectl logs -n telo-builds job/" JOB
        " --all-containers; after fixing the cause, delete the Job to build again: kubectl "
        "delete job -n telo-builds " JOB);
    world_free(&w);
}

static int valid_utf8(const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0, len = 0; i < n; i += len)
        if ((len = util_utf8_len((const unsigned char *)s + i, n - i)) == 0)
            return 0;
    return 1;
}

/* A tail that fills the message (with the refused push's advice) is cut on a character boundary,
 * whatever its parity: the message lands in status.message, which must be UTF-8. */
static void a_long_log_tail_is_cut_between_characters(void **state)
{
    (void)state;
    char tail[2048], secret[254]; /* the longest tail the log reader keeps, the longest name */
    memset(secret, 's', sizeof(secret) - 1);
    secret[sizeof(secret) - 1] = '\0';
    for (size_t odd = 0; odd < 2; odd++) {
        size_t n = (size_t)snprintf(tail, sizeof(tail), "%sfailed to push: 403 Forbidden\n",
                                    odd ? "x" : "");
        while (n + 2 < sizeof(tail)) {
            tail[n++] = '\xc3';
            tail[n++] = '\xa9';
        }
        tail[n] = '\0';
        struct world w;
        world_init(&w);
        world_old(&w, "Building", JOB);
        world_job(&w, "demo/a",
                  "{\"failed\":1,\"conditions\":[{\"type\":\"Failed\",\"status\":\"True\"}]}");
        w.obs.log = SESSION_LOG_DONE;
        w.obs.log_tail = tail;
        w.obs.push_secret = secret;
        decide(&w);
        assert_string_equal(w.plan.failure, "BuildFailed");
        assert_true(strlen(w.plan.message) >= sizeof(w.plan.message) - 2);
        assert_true(valid_utf8(w.plan.message));
        world_free(&w);
    }
}

static void a_refused_push_names_the_push_secret(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    world_old(&w, "Building", JOB);
    world_job(&w, "demo/a",
              "{\"failed\":1,\"conditions\":[{\"type\":\"Failed\",\"status\":\"True\","
              "\"reason\":\"BackoffLimitExceeded\"}]}");
    w.obs.log = SESSION_LOG_DONE;
    w.obs.push_secret = "telo-builds/push";
    /* kaniko v1.23's words when the registry refuses the push credentials. */
    w.obs.log_tail = "error checking push permissions -- make sure you entered the correct tag "
                     "name, and that you are authenticated correctly, and try again: checking "
                     "push permission for \"" REF "\": POST http://127.0.0.1:5001/v2/telo/apps/"
                     "blobs/uploads/: UNAUTHORIZED: authentication required; [map[Action:push "
                     "Class: Name:telo/apps Type:repository]]";
    decide(&w);
    assert_string_equal(w.plan.failure, "BuildFailed");
    assert_non_null(strstr(w.plan.message,
                           "image build failed (job 'telo-builds/" JOB "'); the registry refused "
                           "the push credentials: the push Secret telo-builds/push "
                           "(build.pushSecret) was not accepted for " REF " (fix its password"));
    assert_non_null(strstr(w.plan.message, "the last lines of its log:\nerror checking push "));
    /* No Secret configured: said so. */
    w.obs.push_secret = NULL;
    decide(&w);
    assert_non_null(strstr(w.plan.message, "the registry refused the push: " REF
                                           " needs credentials, and no push Secret is set"));
    /* A refused pull of the base image is not the push Secret's fault. */
    w.obs.push_secret = "telo-builds/push";
    w.obs.log_tail = "error building image: GET https://index.docker.io/v2/x/manifests/1: "
                     "UNAUTHORIZED: authentication required";
    decide(&w);
    assert_null(strstr(w.plan.message, "push credentials"));
    world_free(&w);
}

static void a_job_past_its_deadline_times_out(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    world_old(&w, "Building", JOB);
    world_job(&w, "demo/a",
              "{\"failed\":1,\"conditions\":[{\"type\":\"Failed\",\"status\":\"True\","
              "\"reason\":\"DeadlineExceeded\"}]}");
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_FAILED);
    assert_string_equal(w.plan.failure, "BuildTimedOut");
    assert_string_equal(w.plan.job_result, "timed_out");
    assert_non_null(strstr(w.plan.message, "image build did not finish within 600s (job "
                                           "'telo-builds/" JOB "'); raise the operator's "
                                           "build.timeoutSeconds"));
    /* A Job no controller ends: the operator's own deadline, 30 s past the Job's. */
    world_job(&w, "demo/a", "{\"active\":1}");
    w.obs.now = T0 + 631;
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_FAILED);
    assert_string_equal(w.plan.failure, "BuildTimedOut");
    world_free(&w);
}

static void a_vanished_job_asks_the_registry_then_fails(void **state)
{
    (void)state;
    struct world w;
    world_init(&w);
    world_old(&w, "Building", JOB);
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_WAIT);
    assert_true(w.plan.check_registry);
    /* Pushed before it went: the image is there. */
    w.obs.presence = SESSION_PRESENCE_PRESENT;
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_READY);
    assert_string_equal(w.plan.reason, "Built");
    w.obs.presence = SESSION_PRESENCE_ABSENT;
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_FAILED);
    assert_string_equal(w.plan.failure, "BuildFailed");
    assert_non_null(strstr(w.plan.message,
                           "image build job 'telo-builds/" JOB "' disappeared before completing"));
    assert_false(w.plan.create_job);
    /* Being deleted counts as gone for a follower; a new session waits and then builds anew. */
    world_job(&w, "demo/a", "{\"active\":1}");
    json_object_object_add(json_object_object_get(w.job, "metadata"), "deletionTimestamp",
                           json_object_new_string("2026-03-01T10:00:05Z"));
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_FAILED);
    w.obs.old = NULL;
    decide(&w);
    assert_int_equal(w.plan.step, SESSION_IMAGE_BUILDING);
    assert_false(w.plan.create_job);
    assert_true(w.plan.requeue_after > 0);
    world_free(&w);
}

/* Issue 21: a Job of the tag being deleted is an earlier generation of the build. Whatever it
 * ended as (failed, even succeeded), a session that is not following it takes nothing from it:
 * it waits for it to go and then builds anew. */
static void a_job_being_deleted_is_not_trusted_by_a_new_session(void **state)
{
    (void)state;
    static const char *const statuses[] = {
        "{\"failed\":1,\"conditions\":[{\"type\":\"Failed\",\"status\":\"True\"}]}",
        "{\"succeeded\":1}", "{\"active\":1}"};
    for (size_t i = 0; i < 3; i++) {
        struct world w;
        world_init(&w);
        w.obs.presence = SESSION_PRESENCE_ABSENT;
        world_job(&w, "demo/earlier", statuses[i]);
        json_object_object_add(json_object_object_get(w.job, "metadata"), "deletionTimestamp",
                               json_object_new_string("2026-03-01T10:00:05Z"));
        decide(&w);
        assert_int_equal(w.plan.step, SESSION_IMAGE_BUILDING);
        assert_null(w.plan.job_result);
        assert_false(w.plan.create_job);
        assert_false(w.plan.fetch_log);
        assert_true(w.plan.requeue_after > 0);
        /* Gone: a build of its own. */
        w.obs.job = NULL;
        decide(&w);
        assert_true(w.plan.create_job);
        world_free(&w);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_bad_bundle_fails_the_session),
        cmocka_unit_test(a_job_being_deleted_is_not_trusted_by_a_new_session),
        cmocka_unit_test(a_bundle_without_dependencies_runs_the_base_image),
        cmocka_unit_test(a_url_bundle_not_read_yet_says_what_its_download_waits_for),
        cmocka_unit_test(a_new_session_asks_the_registry_first),
        cmocka_unit_test(an_image_in_the_registry_is_a_cache_hit),
        cmocka_unit_test(refused_credentials_block_without_a_build),
        cmocka_unit_test(an_absent_image_creates_the_job),
        cmocka_unit_test(a_build_without_a_slot_waits_in_building_without_a_job),
        cmocka_unit_test(a_failed_registry_check_builds_and_says_why),
        cmocka_unit_test(another_sessions_running_job_is_shared),
        cmocka_unit_test(a_running_build_shows_its_step_and_time),
        cmocka_unit_test(a_following_session_does_not_ask_the_registry_again),
        cmocka_unit_test(a_finished_job_gives_a_built_image),
        cmocka_unit_test(a_failed_job_waits_for_its_log_then_fails_with_it),
        cmocka_unit_test(a_long_log_tail_is_cut_between_characters),
        cmocka_unit_test(a_refused_push_names_the_push_secret),
        cmocka_unit_test(a_job_past_its_deadline_times_out),
        cmocka_unit_test(a_vanished_job_asks_the_registry_then_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
