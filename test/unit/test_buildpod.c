/* Tests for pkg/session/buildpod.c and its use in pkg/session/image.c: a build Job's pod that
 * has Succeeded ends the build for the session following the Job, before the Job itself says
 * Complete (the job controller writes that a batch period, 1 s, after the pod's end:
 * bench/builds measured it at 1.0 s of a first build's time to Running). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "imagebuild/job.h"
#include "session/buildpod.h"
#include "session/image.h"

#include <json.h>

#include <stdio.h>
#include <string.h>

#define TAG "0123456789abcdef0123456789abcdef"
#define REF "127.0.0.1:5001/telo/apps:" TAG
#define JOB "telo-build-" TAG

static struct json_object *pod(const char *label, const char *uid, const char *phase)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"metadata\":{\"name\":\"" JOB "-x2k9q\",\"labels\":{\"telo.run/build\":\"true\","
             "\"telo.run/tag\":\"" TAG "\",\"%s\":\"%s\"}},\"status\":{\"phase\":\"%s\"}}",
             label, uid, phase);
    struct json_object *o = json_tokener_parse(text);
    assert_non_null(o);
    return o;
}

static void a_succeeded_pod_of_the_job_is_recognised(void **state)
{
    (void)state;
    struct json_object *p = pod(BUILD_POD_LABEL_JOB_UID, "u1", "Succeeded");
    assert_true(session_build_pod_succeeded(p, "u1"));
    json_object_put(p);
    /* Clusters before 1.27 label the Job's uid as controller-uid only. */
    p = pod(BUILD_POD_LABEL_JOB_UID_LEGACY, "u1", "Succeeded");
    assert_true(session_build_pod_succeeded(p, "u1"));
    json_object_put(p);
}

static void other_jobs_and_other_phases_are_not(void **state)
{
    (void)state;
    /* An earlier Job of the same tag (deleted to build again) had its own pod. */
    struct json_object *p = pod(BUILD_POD_LABEL_JOB_UID, "u0", "Succeeded");
    assert_false(session_build_pod_succeeded(p, "u1"));
    json_object_put(p);
    static const char *const phases[] = {"Pending", "Running", "Failed", "Unknown", ""};
    for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
        p = pod(BUILD_POD_LABEL_JOB_UID, "u1", phases[i]);
        assert_false(session_build_pod_succeeded(p, "u1"));
        json_object_put(p);
    }
    p = pod("job-name", JOB, "Succeeded"); /* no uid label at all */
    assert_false(session_build_pod_succeeded(p, "u1"));
    json_object_put(p);
    /* A phase of the wrong type, NULLs. */
    struct json_object *odd = json_tokener_parse(
        "{\"metadata\":{\"labels\":{\"" BUILD_POD_LABEL_JOB_UID "\":\"u1\"}},\"status\":"
        "{\"phase\":7}}");
    assert_false(session_build_pod_succeeded(odd, "u1"));
    json_object_put(odd);
    p = pod(BUILD_POD_LABEL_JOB_UID, "u1", "Succeeded");
    assert_false(session_build_pod_succeeded(NULL, "u1"));
    assert_false(session_build_pod_succeeded(p, NULL));
    assert_false(session_build_pod_succeeded(p, ""));
    json_object_put(p);
    assert_false(session_build_pods_succeeded(NULL, TAG, "u1"));
}

/* The session that created the Job follows it (phase Building, status.image.buildJob); the Job
 * is still active (no condition yet) when its pod has Succeeded. */
static void decide_following(int pod_succeeded, struct session_image_plan *plan)
{
    struct json_object *job = json_tokener_parse(
        "{\"metadata\":{\"name\":\"" JOB "\",\"namespace\":\"telo-builds\",\"uid\":\"u1\","
        "\"creationTimestamp\":\"2026-03-01T10:00:00Z\",\"annotations\":{\"" BUILD_ANNOTATION_BY
        "\":\"demo/a\"}},\"status\":{\"active\":1,\"ready\":0}}");
    struct json_object *old = json_tokener_parse("{\"phase\":\"Building\",\"image\":{\"tag\":\"" TAG
                                                 "\",\"buildJob\":\"" JOB "\"}}");
    assert_non_null(job);
    assert_non_null(old);
    struct session_image_obs obs = {
        .self = "demo/a",
        .base_image = "telorun/node:latest-slim",
        .tag = TAG,
        .ref = REF,
        .build_namespace = "telo-builds",
        .job_name = JOB,
        .job = job,
        .timeout_seconds = 600,
        .old = old,
        .now = 1772359204.0, /* 4 s after the Job's creation */
        .build_pod_succeeded = pod_succeeded,
    };
    session_image_decide(&obs, plan);
    json_object_put(job);
    json_object_put(old);
}

static void the_followed_build_ends_at_its_pods_success(void **state)
{
    (void)state;
    struct session_image_plan plan;
    decide_following(1, &plan);
    assert_int_equal(plan.step, SESSION_IMAGE_READY);
    assert_string_equal(plan.ref, REF);
    assert_string_equal(plan.reason, "Built");
    assert_string_equal(plan.progress, BUILD_PROGRESS_BUILT);
    assert_non_null(plan.job_result);
    assert_string_equal(plan.job_result, "succeeded");
    assert_false(plan.create_job || plan.check_registry);
}

static void without_it_the_session_keeps_following_the_job(void **state)
{
    (void)state;
    struct session_image_plan plan;
    decide_following(0, &plan);
    assert_int_equal(plan.step, SESSION_IMAGE_BUILDING);
    assert_null(plan.job_result);
    assert_false(plan.create_job);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_succeeded_pod_of_the_job_is_recognised),
        cmocka_unit_test(other_jobs_and_other_phases_are_not),
        cmocka_unit_test(the_followed_build_ends_at_its_pods_success),
        cmocka_unit_test(without_it_the_session_keeps_following_the_job),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
