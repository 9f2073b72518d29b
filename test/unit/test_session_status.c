/* Tests for pkg/session/status.c: one test per branch of session_status_compute, fed pods as the
 * API server returns them (test/unit/data/session/pod-*.json), and the failure message rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "appendf.h"
#include "session/config.h"
#include "session/failure.h"
#include "session/spec.h"
#include "session/status.h"
#include "util/timefmt.h"

#include <json.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 2026-03-01T10:00:00Z: every fixture pod was created then. */
#define T0 1772359200.0

#define HINT_DESCRIBE ". Run: kubectl describe pod -n demo telo-run-hello"
#define HINT_LOGS     ". Run: kubectl logs -n demo telo-run-hello -c session"

static const char hello_json[] =
    "{\"apiVersion\":\"telo.run/v1alpha1\",\"kind\":\"TeloSession\","
    "\"metadata\":{\"name\":\"hello\",\"namespace\":\"demo\",\"generation\":1,"
    "\"uid\":\"0b6f2d7a-6a44-4c84-8a55-2d9b3c0e1f00\","
    "\"creationTimestamp\":\"2026-03-01T09:59:59Z\"},"
    "\"spec\":{\"entry\":\"app/telo.yaml\",\"bundle\":{\"configMap\":{\"name\":\"hello-app\"}},"
    "\"ports\":[{\"port\":8080,\"protocol\":\"TCP\"},{\"port\":5353,\"protocol\":\"UDP\"}]}}";

/* A session, the config and the pod observed, as the reconciler hands them over. */
struct world {
    struct session_config *cfg;
    struct json_object *obj; /* the TeloSession */
    struct session s;
    struct json_object *pod;
    const char *blocked_reason, *blocked_message;
    int attach_secret;
    const struct session_image_plan *plan; /* builds: the image step of the pass */
    int keep_image;
};

static void world_parse(struct world *w)
{
    struct telo_err err;
    session_spec_release(&w->s);
    int rc = session_spec_parse(w->obj, &w->s, &err);
    if (rc != 0)
        fail_msg("session_spec_parse: %s", err.msg);
}

static void world_init(struct world *w, const char *session_json)
{
    memset(w, 0, sizeof(*w));
    w->cfg = session_config_new();
    assert_non_null(w->cfg);
    w->obj = json_tokener_parse(session_json);
    assert_non_null(w->obj);
    world_parse(w);
}

static void world_free(struct world *w)
{
    session_spec_release(&w->s);
    json_object_put(w->obj);
    json_object_put(w->pod);
    session_config_free(w->cfg);
}

static struct json_object *load_pod(const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/session/pod-%s.json", TELO_TEST_DATA, name);
    struct json_object *pod = json_object_from_file(path);
    if (!pod)
        fail_msg("cannot read %s", path);
    return pod;
}

static void world_pod(struct world *w, const char *name)
{
    json_object_put(w->pod);
    w->pod = name ? load_pod(name) : NULL;
}

/* Gives the session the status a verdict computed, as the next reconcile would read it. */
static void world_status(struct world *w, struct json_object *status)
{
    if (status)
        json_object_object_add(w->obj, "status", json_object_get(status));
    else
        json_object_object_del(w->obj, "status");
    world_parse(w);
}

static struct session_observation observation(struct world *w, double now)
{
    return (struct session_observation){
        .s = &w->s,
        .cfg = w->cfg,
        .pod = w->pod,
        .image = "telorun/node:latest-slim",
        .attach_secret = w->attach_secret,
        .blocked_reason = w->blocked_reason,
        .blocked_message = w->blocked_message,
        .image_plan = w->plan,
        .keep_image = w->keep_image,
        .now = now,
    };
}

static void compute(struct world *w, double now, struct session_verdict *v)
{
    struct session_observation obs = observation(w, now);
    assert_int_equal(session_status_compute(&obs, v), 0);
    assert_non_null(v->status);
}

/* session_status_wait_for_pod for the verdict v computed from w at now. */
static int waits_for_pod(struct world *w, double now, const struct session_verdict *v)
{
    struct session_observation obs = observation(w, now);
    return session_status_wait_for_pod(&obs, v);
}

/* The value at a dotted path ("progress.message"), or NULL. */
static struct json_object *at(struct json_object *o, const char *path)
{
    char key[64];
    while (o && *path) {
        size_t n = strcspn(path, ".");
        snprintf(key, sizeof(key), "%.*s", (int)n, path);
        struct json_object *next = NULL;
        if (!json_object_object_get_ex(o, key, &next))
            return NULL;
        o = next;
        path += n + (path[n] == '.');
    }
    return o;
}

static const char *text(struct json_object *o, const char *path)
{
    struct json_object *v = at(o, path);
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static struct json_object *condition(struct json_object *status, const char *type)
{
    struct json_object *conds = at(status, "conditions");
    assert_non_null(conds);
    for (size_t i = 0; i < json_object_array_length(conds); i++) {
        struct json_object *c = json_object_array_get_idx(conds, i);
        if (strcmp(text(c, "type"), type) == 0)
            return c;
    }
    fail_msg("no condition %s", type);
    return NULL;
}

static const char *cond_status(struct json_object *status, const char *type)
{
    return text(condition(status, type), "status");
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Counts UTF-8 characters; fails on a malformed sequence. */
static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int extra = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2 : 3;
        assert_true(*p < 0x80 || (*p & 0xc0) == 0xc0);
        p++;
        for (int i = 0; i < extra; i++, p++)
            assert_true((*p & 0xc0) == 0x80);
        n++;
    }
    return n;
}

/* Sets the waiting reason of the session container of w's pod. */
static void set_session_waiting(struct world *w, const char *reason, const char *message)
{
    struct json_object *cs = json_object_array_get_idx(at(w->pod, "status.containerStatuses"), 0),
                       *st, *wait;
    st = json_object_new_object();
    wait = json_object_new_object();
    json_object_object_add(wait, "reason", json_object_new_string(reason));
    if (message)
        json_object_object_add(wait, "message", json_object_new_string(message));
    json_object_object_add(st, "waiting", wait);
    json_object_object_add(cs, "state", st);
}

/* --- no pod ------------------------------------------------------------------------------ */

static void no_pod_is_pending_and_scheduling(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    struct session_verdict v;
    compute(&w, T0, &v);
    assert_string_equal(text(v.status, "phase"), "Pending");
    assert_null(at(v.status, "reason"));
    assert_null(at(v.status, "message"));
    assert_string_equal(text(v.status, "progress.phase"), "provision");
    assert_string_equal(text(v.status, "progress.message"), "Scheduling");
    assert_false(json_object_get_boolean(at(v.status, "progress.done")));
    assert_null(at(v.status, "podName"));
    assert_string_equal(text(v.status, "startTime"), "2026-03-01T10:00:00Z");
    assert_string_equal(cond_status(v.status, "Ready"), "False");
    assert_string_equal(cond_status(v.status, "Reconciling"), "True");
    assert_string_equal(cond_status(v.status, "Stalled"), "False");
    assert_string_equal(cond_status(v.status, "ImageReady"), "True");
    assert_string_equal(text(v.status, "image.ref"), "telorun/node:latest-slim");
    assert_true(v.changed);
    assert_false(v.delete_pod);
    assert_false(v.delete_session);
    assert_string_equal(v.event_type, "Normal");
    assert_string_equal(v.event_reason, "Pending");
    session_verdict_release(&v);
    world_free(&w);
}

/* A new session's Pending waits for its pod's arrival, which writes what follows from it. */
static void a_new_pending_session_waits_for_its_pod_to_write_its_status(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    struct session_verdict v;
    compute(&w, T0, &v);
    assert_true(v.changed);
    assert_true(waits_for_pod(&w, T0, &v));
    /* The pass after the pod's arrival writes: it is not Pending any more. */
    world_pod(&w, "pending-scheduled");
    session_verdict_release(&v);
    compute(&w, T0 + 1, &v);
    assert_string_equal(text(v.status, "phase"), "Provisioning");
    assert_true(v.changed);
    assert_false(waits_for_pod(&w, T0 + 1, &v));
    session_verdict_release(&v);
    world_free(&w);
}

/* Once a session shows a status, a Pending that changes it is written at once: the user may be
 * reading a block (BundleNotFound) that is over. */
static void a_pending_that_corrects_a_shown_status_is_written_at_once(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    w.blocked_reason = "BundleNotFound";
    w.blocked_message = "ConfigMap hello-app (spec.bundle.configMap.name) does not exist";
    struct session_verdict v;
    compute(&w, T0, &v);
    /* The block itself is shown at once: no pod comes to say more. */
    assert_false(waits_for_pod(&w, T0, &v));
    world_status(&w, v.status);
    session_verdict_release(&v);
    w.blocked_reason = w.blocked_message = NULL;
    compute(&w, T0 + 10, &v);
    assert_string_equal(text(v.status, "phase"), "Pending");
    assert_true(v.changed);
    assert_false(waits_for_pod(&w, T0 + 10, &v));
    session_verdict_release(&v);
    world_free(&w);
}

/* An image decided this pass is carried only by this write: it is not held back. */
static void a_pending_with_an_image_decided_is_written_at_once(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    struct session_image_plan plan = {.step = SESSION_IMAGE_READY,
                                      .ref = "reg.example:5000/telo/apps:0123",
                                      .tag = "0123",
                                      .reason = "CacheHit",
                                      .progress = "Using cached image",
                                      .progress_done = 1};
    w.plan = &plan;
    struct session_verdict v;
    compute(&w, T0, &v);
    assert_string_equal(text(v.status, "phase"), "Pending");
    assert_false(waits_for_pod(&w, T0, &v));
    session_verdict_release(&v);
    world_free(&w);
}

/* session_status_settle for the verdict v computed from w at now. */
static double settles(struct world *w, double now, const struct session_verdict *v)
{
    struct session_observation obs = observation(w, now);
    return session_status_settle(&obs, v);
}

/* A new session's first Provisioning waits until its pod is 2 s old (the fixture pod was created
 * at T0), then is written; a pod that is Running by then is written as Running at once. */
static void a_new_sessions_first_provisioning_waits_for_its_pod_to_settle(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-scheduled");
    struct session_verdict v;
    compute(&w, T0 + 0.5, &v);
    assert_string_equal(text(v.status, "phase"), "Provisioning");
    assert_true(v.changed);
    assert_float_equal(settles(&w, T0 + 0.5, &v), 1.5, 1e-9);
    session_verdict_release(&v);
    compute(&w, T0 + 2, &v);
    assert_true(v.changed);
    assert_float_equal(settles(&w, T0 + 2, &v), 0, 0);
    session_verdict_release(&v);
    world_pod(&w, "running");
    compute(&w, T0 + 0.5, &v);
    assert_string_equal(text(v.status, "phase"), "Running");
    assert_float_equal(settles(&w, T0 + 0.5, &v), 0, 0);
    session_verdict_release(&v);
    world_free(&w);
}

/* Only the first write waits, and never one with something to report beside progress. */
static void a_shown_status_or_a_report_does_not_settle(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-scheduled");
    struct session_verdict v;
    compute(&w, T0 + 3, &v);
    world_status(&w, v.status);
    session_verdict_release(&v);
    world_pod(&w, "pending-containercreating");
    compute(&w, T0 + 0.5, &v);
    assert_true(v.changed);
    assert_float_equal(settles(&w, T0 + 0.5, &v), 0, 0);
    session_verdict_release(&v);
    world_free(&w);

    /* "waiting for a node: ...": the user must read it now. */
    world_init(&w, hello_json);
    world_pod(&w, "pending-unschedulable");
    compute(&w, T0 + 0.5, &v);
    assert_string_equal(text(v.status, "phase"), "Provisioning");
    assert_non_null(at(v.status, "message"));
    assert_float_equal(settles(&w, T0 + 0.5, &v), 0, 0);
    session_verdict_release(&v);
    world_free(&w);
}

/* An operator clock behind the API server's holds the status no longer than the window. */
static void settling_is_capped_by_the_window(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-scheduled");
    struct session_verdict v;
    compute(&w, T0 - 30, &v);
    assert_float_equal(settles(&w, T0 - 30, &v), SESSION_SETTLE_SECONDS, 0);
    session_verdict_release(&v);
    world_free(&w);
}

/* --- image builds ------------------------------------------------------------------------ */

#define BUILT_REF "reg.example:5000/telo/apps:0123456789abcdef0123456789abcdef"

static void a_running_build_is_building_with_its_progress(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    struct session_image_plan plan = {.step = SESSION_IMAGE_BUILDING,
                                      .ref = BUILT_REF,
                                      .tag = "0123456789abcdef0123456789abcdef",
                                      .build_job = "telo-build-0123456789abcdef0123456789abcdef",
                                      .progress = "Waiting for in-progress build\xe2\x80\xa6"};
    w.plan = &plan;
    struct session_verdict v;
    compute(&w, T0, &v);
    assert_string_equal(text(v.status, "phase"), "Building");
    assert_string_equal(text(v.status, "progress.phase"), "build");
    assert_string_equal(text(v.status, "progress.message"),
                        "Waiting for in-progress build\xe2\x80\xa6");
    assert_false(json_object_get_boolean(at(v.status, "progress.done")));
    assert_string_equal(text(v.status, "image.ref"), BUILT_REF);
    assert_string_equal(text(v.status, "image.buildJob"),
                        "telo-build-0123456789abcdef0123456789abcdef");
    assert_null(at(v.status, "image.reason"));
    assert_string_equal(cond_status(v.status, "ImageReady"), "False");
    assert_string_equal(text(condition(v.status, "ImageReady"), "reason"), "Building");
    assert_string_equal(cond_status(v.status, "Reconciling"), "True");
    assert_string_equal(cond_status(v.status, "Stalled"), "False");
    assert_false(v.delete_pod);
    assert_string_equal(v.event_reason, "Building");
    session_verdict_release(&v);
    world_free(&w);
}

static void a_built_image_is_pending_with_the_build_done(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    struct session_image_plan plan = {.step = SESSION_IMAGE_READY,
                                      .ref = BUILT_REF,
                                      .tag = "0123456789abcdef0123456789abcdef",
                                      .reason = "CacheHit",
                                      .progress = "Using cached image",
                                      .progress_done = 1};
    w.plan = &plan;
    struct session_verdict v;
    compute(&w, T0, &v);
    assert_string_equal(text(v.status, "phase"), "Pending");
    assert_string_equal(text(v.status, "progress.phase"), "build");
    assert_string_equal(text(v.status, "progress.message"), "Using cached image");
    assert_true(json_object_get_boolean(at(v.status, "progress.done")));
    assert_string_equal(text(v.status, "image.reason"), "CacheHit");
    assert_string_equal(cond_status(v.status, "ImageReady"), "True");
    assert_string_equal(text(condition(v.status, "ImageReady"), "reason"), "CacheHit");
    assert_string_equal(text(condition(v.status, "ImageReady"), "message"), BUILT_REF);
    /* Once the pod exists, the image stays as decided (no step is taken any more). */
    world_status(&w, v.status);
    session_verdict_release(&v);
    world_pod(&w, "running");
    w.plan = NULL;
    w.keep_image = 1;
    compute(&w, T0 + 5, &v);
    assert_string_equal(text(v.status, "phase"), "Running");
    assert_string_equal(text(v.status, "image.ref"), BUILT_REF);
    assert_string_equal(text(v.status, "image.reason"), "CacheHit");
    assert_string_equal(text(condition(v.status, "ImageReady"), "reason"), "CacheHit");
    assert_string_equal(cond_status(v.status, "ImageReady"), "True");
    session_verdict_release(&v);
    world_free(&w);
}

static void a_failed_build_fails_the_session_and_blocked_credentials_stall_it(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    struct session_image_plan plan = {.step = SESSION_IMAGE_FAILED,
                                      .ref = BUILT_REF,
                                      .failure = "BuildFailed",
                                      .message = "image build failed (job 'b/j'); the last "
                                                 "lines of its log:\nerror: x"};
    w.plan = &plan;
    struct session_verdict v;
    compute(&w, T0, &v);
    assert_string_equal(text(v.status, "phase"), "Failed");
    assert_string_equal(text(v.status, "reason"), "BuildFailed");
    assert_string_equal(text(v.status, "message"), plan.message);
    assert_string_equal(cond_status(v.status, "Stalled"), "True");
    assert_string_equal(text(condition(v.status, "ImageReady"), "reason"), "BuildFailed");
    assert_string_equal(v.event_type, "Warning");
    session_verdict_release(&v);

    struct session_image_plan denied = {.step = SESSION_IMAGE_BLOCKED,
                                        .failure = "RegistryAuthFailed",
                                        .message = "registry r refused the credentials"};
    w.plan = &denied;
    compute(&w, T0, &v);
    assert_string_equal(text(v.status, "phase"), "Pending");
    assert_string_equal(text(v.status, "reason"), "RegistryAuthFailed");
    assert_string_equal(cond_status(v.status, "Stalled"), "True");
    assert_string_equal(cond_status(v.status, "Reconciling"), "False");
    assert_string_equal(cond_status(v.status, "ImageReady"), "False");
    session_verdict_release(&v);
    world_free(&w);
}

static void blocked_on_a_missing_bundle_is_pending_and_stalled(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    w.blocked_reason = "BundleNotFound";
    w.blocked_message = "ConfigMap hello-app (spec.bundle.configMap.name) does not exist";
    struct session_verdict v;
    compute(&w, T0, &v);
    assert_string_equal(text(v.status, "phase"), "Pending");
    assert_string_equal(text(v.status, "reason"), "BundleNotFound");
    assert_string_equal(text(v.status, "message"), w.blocked_message);
    assert_string_equal(cond_status(v.status, "Stalled"), "True");
    assert_string_equal(text(condition(v.status, "Stalled"), "reason"), "BundleNotFound");
    assert_string_equal(text(condition(v.status, "Stalled"), "message"), w.blocked_message);
    assert_string_equal(cond_status(v.status, "Reconciling"), "False");
    assert_string_equal(cond_status(v.status, "Ready"), "False");
    assert_false(v.delete_pod);
    assert_string_equal(v.event_type, "Warning");
    assert_string_equal(v.event_reason, "BundleNotFound");
    assert_non_null(strstr(v.event_message, w.blocked_message));
    session_verdict_release(&v);
    world_free(&w);
}

/* --- provisioning ------------------------------------------------------------------------ */

/* The pod fixture gives the progress text, the session stays Provisioning, and the start
 * deadline is 120 s after the pod's creation. */
static void expect_progress(const char *pod, const char *want)
{
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, pod);
    struct session_verdict v;
    compute(&w, T0 + 20, &v);
    assert_string_equal(text(v.status, "phase"), "Provisioning");
    assert_string_equal(text(v.status, "progress.phase"), "provision");
    assert_string_equal(text(v.status, "progress.message"), want);
    assert_false(json_object_get_boolean(at(v.status, "progress.done")));
    assert_string_equal(text(v.status, "podName"), "telo-run-hello");
    assert_string_equal(cond_status(v.status, "Reconciling"), "True");
    assert_string_equal(text(condition(v.status, "Reconciling"), "message"), want);
    assert_string_equal(cond_status(v.status, "Stalled"), "False");
    assert_false(v.delete_pod);
    assert_true(fabs(v.requeue_after - 100) < 1e-6);
    assert_string_equal(text(v.status, "startTime"), "2026-03-01T10:00:00Z");
    session_verdict_release(&v);
    world_free(&w);
}

static void scheduled_pod_without_statuses_is_scheduling(void **state)
{
    (void)state;
    expect_progress("pending-scheduled", "Scheduling");
}

static void running_init_container_is_delivering_the_application(void **state)
{
    (void)state;
    expect_progress("pending-init-running", "Delivering application");
}

static void running_init_container_alone_is_delivering_the_application(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-init-running");
    json_object_object_del(at(w.pod, "status"), "containerStatuses");
    struct session_verdict v;
    compute(&w, T0 + 20, &v);
    assert_string_equal(text(v.status, "progress.message"), "Delivering application");
    session_verdict_release(&v);
    world_free(&w);
}

static void container_creating_is_creating_container(void **state)
{
    (void)state;
    expect_progress("pending-containercreating", "Creating container");
}

static void image_pull_backoff_is_pulling_image(void **state)
{
    (void)state;
    expect_progress("pending-imagepullbackoff", "Pulling image");
}

static void err_image_pull_is_pulling_image(void **state)
{
    (void)state;
    expect_progress("pending-errimagepull", "Pulling image");
}

static void another_waiting_reason_is_shown_verbatim(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-containercreating");
    set_session_waiting(&w, "RunContainerError", NULL);
    struct session_verdict v;
    compute(&w, T0 + 20, &v);
    assert_string_equal(text(v.status, "phase"), "Provisioning");
    assert_string_equal(text(v.status, "progress.message"), "RunContainerError");
    session_verdict_release(&v);
    world_free(&w);
}

static void unschedulable_before_the_deadline_waits_for_a_node(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-unschedulable");
    struct session_verdict v;
    compute(&w, T0 + 30, &v);
    assert_string_equal(text(v.status, "phase"), "Provisioning");
    assert_null(at(v.status, "reason"));
    assert_string_equal(text(v.status, "progress.message"), "Scheduling");
    assert_true(starts_with(text(v.status, "message"), "waiting for a node: 0/3 nodes are "));
    assert_false(v.delete_pod);
    assert_true(fabs(v.requeue_after - 90) < 1e-6);
    session_verdict_release(&v);
    world_free(&w);
}

static void unschedulable_after_the_deadline_fails(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-unschedulable");
    struct session_verdict v;
    compute(&w, T0 + 120, &v);
    assert_string_equal(text(v.status, "phase"), "Failed");
    assert_string_equal(text(v.status, "reason"), "Unschedulable");
    const char *msg = text(v.status, "message");
    assert_true(starts_with(msg, "no node could run the session within 120s: 0/3 nodes are "
                                 "available: 1 node(s) had untolerated taint"));
    assert_non_null(strstr(msg, "nodeSelector and tolerations"));
    assert_true(ends_with(msg, HINT_DESCRIBE));
    assert_true(v.delete_pod);
    assert_true(v.requeue_after == 0);
    assert_string_equal(cond_status(v.status, "Stalled"), "True");
    assert_string_equal(text(condition(v.status, "Stalled"), "reason"), "Unschedulable");
    assert_string_equal(cond_status(v.status, "Reconciling"), "False");
    assert_string_equal(v.event_type, "Warning");
    assert_string_equal(v.event_reason, "Failed");
    assert_true(starts_with(v.event_message, "Failed (Unschedulable): no node could run"));
    session_verdict_release(&v);
    world_free(&w);
}

static void image_pull_backoff_past_the_deadline_fails_the_pull(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-imagepullbackoff");
    struct session_verdict v;
    compute(&w, T0 + 121, &v);
    assert_string_equal(text(v.status, "phase"), "Failed");
    assert_string_equal(text(v.status, "reason"), "ImagePullFailed");
    const char *msg = text(v.status, "message");
    assert_true(starts_with(msg, "the session did not start within 120s (last step: Pulling "
                                 "image): container \"session\" waiting: ImagePullBackOff: "
                                 "Back-off pulling image \"telorun/node:nope\""));
    assert_true(ends_with(msg, HINT_DESCRIBE));
    assert_true(v.delete_pod);
    assert_null(at(v.status, "exitCode"));
    session_verdict_release(&v);
    world_free(&w);
}

static void stuck_creating_past_the_deadline_is_start_timeout(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-containercreating");
    struct session_verdict v;
    compute(&w, T0 + 200, &v);
    assert_string_equal(text(v.status, "phase"), "Failed");
    assert_string_equal(text(v.status, "reason"), "StartTimeout");
    assert_string_equal(text(v.status, "message"),
                        "the session did not start within 120s (last step: Creating "
                        "container)" HINT_DESCRIBE);
    assert_true(v.delete_pod);
    session_verdict_release(&v);
    world_free(&w);
}

static void the_start_deadline_is_configurable(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    w.cfg->start_deadline_seconds = 300;
    world_pod(&w, "pending-init-running");
    struct session_verdict v;
    compute(&w, T0 + 200, &v);
    assert_string_equal(text(v.status, "phase"), "Provisioning");
    assert_true(fabs(v.requeue_after - 100) < 1e-6);
    session_verdict_release(&v);
    compute(&w, T0 + 300, &v);
    assert_string_equal(text(v.status, "reason"), "StartTimeout");
    assert_string_equal(text(v.status, "message"),
                        "the session did not start within 300s (last step: Delivering "
                        "application)" HINT_DESCRIBE);
    session_verdict_release(&v);
    world_free(&w);
}

static void invalid_image_name_fails_at_once(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-invalidimagename");
    struct session_verdict v;
    compute(&w, T0 + 5, &v);
    assert_string_equal(text(v.status, "phase"), "Failed");
    assert_string_equal(text(v.status, "reason"), "ImagePullFailed");
    const char *msg = text(v.status, "message");
    assert_true(starts_with(msg, "container \"session\" waiting: InvalidImageName: Failed to "
                                 "apply default image tag \"Telo/Node:x\""));
    /* A container that never ran has no logs: the pod's events say why. */
    assert_true(ends_with(msg, HINT_DESCRIBE));
    assert_true(v.delete_pod);
    assert_true(v.requeue_after == 0);
    session_verdict_release(&v);
    world_free(&w);
}

static void config_error_fails_at_once(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-configerror");
    struct session_verdict v;
    compute(&w, T0 + 5, &v);
    assert_string_equal(text(v.status, "phase"), "Failed");
    assert_string_equal(text(v.status, "reason"), "ConfigError");
    assert_string_equal(text(v.status, "message"),
                        "container \"session\" waiting: CreateContainerConfigError: secret "
                        "\"api-keys\" not found" HINT_DESCRIBE);
    assert_true(v.delete_pod);
    session_verdict_release(&v);
    world_free(&w);
}

static void never_pull_fails_at_once(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-containercreating");
    set_session_waiting(&w, "ErrImageNeverPull",
                        "Container image \"telorun/node:x\" is not present with pull policy of "
                        "Never");
    struct session_verdict v;
    compute(&w, T0 + 5, &v);
    assert_string_equal(text(v.status, "phase"), "Failed");
    assert_string_equal(text(v.status, "reason"), "ImagePullFailed");
    assert_true(v.delete_pod);
    session_verdict_release(&v);
    world_free(&w);
}

/* --- running ----------------------------------------------------------------------------- */

static void running_pod_is_running_and_ready(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "running");
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    assert_string_equal(text(v.status, "phase"), "Running");
    assert_null(at(v.status, "reason"));
    assert_null(at(v.status, "message"));
    assert_true(json_object_get_boolean(at(v.status, "progress.done")));
    assert_string_equal(text(v.status, "podName"), "telo-run-hello");
    assert_string_equal(text(v.status, "podIP"), "10.244.0.12");
    assert_string_equal(text(v.status, "startTime"), "2026-03-01T10:00:00Z");
    assert_null(at(v.status, "completionTime"));
    assert_null(at(v.status, "exitCode"));
    assert_string_equal(cond_status(v.status, "Ready"), "True");
    assert_string_equal(text(condition(v.status, "Ready"), "reason"), "Running");
    assert_string_equal(cond_status(v.status, "Reconciling"), "False");
    assert_string_equal(cond_status(v.status, "Stalled"), "False");
    assert_string_equal(text(condition(v.status, "Stalled"), "reason"), "NotStalled");
    assert_false(v.delete_pod);
    assert_true(v.requeue_after == 0);
    assert_string_equal(v.event_type, "Normal");
    assert_string_equal(v.event_reason, "Running");
    session_verdict_release(&v);
    world_free(&w);
}

static void endpoints_without_a_base_domain_name_the_service(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "running");
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    struct json_object *eps = at(v.status, "endpoints");
    assert_int_equal(json_object_array_length(eps), 2);
    struct json_object *tcp = json_object_array_get_idx(eps, 0);
    struct json_object *udp = json_object_array_get_idx(eps, 1);
    assert_string_equal(text(tcp, "name"), "p8080");
    assert_int_equal(json_object_get_int(at(tcp, "port")), 8080);
    assert_string_equal(text(tcp, "protocol"), "TCP");
    assert_string_equal(text(tcp, "host"), "telo-run-hello.demo.svc");
    assert_null(at(tcp, "url"));
    assert_string_equal(text(udp, "name"), "p5353-udp");
    assert_string_equal(text(udp, "protocol"), "UDP");
    assert_string_equal(text(udp, "host"), "telo-run-hello.demo.svc");
    assert_null(at(udp, "url"));
    session_verdict_release(&v);
    world_free(&w);
}

static void endpoints_with_a_base_domain_have_hosts_and_urls(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    free(w.cfg->ingress_base_domain);
    w.cfg->ingress_base_domain = strdup("sessions.example.com");
    world_pod(&w, "running");
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    struct json_object *eps = at(v.status, "endpoints");
    struct json_object *tcp = json_object_array_get_idx(eps, 0);
    struct json_object *udp = json_object_array_get_idx(eps, 1);
    assert_string_equal(text(tcp, "host"), "8080-hello-demo-cjouygjdnwlb5vco.sessions.example.com");
    assert_string_equal(text(tcp, "url"),
                        "http://8080-hello-demo-cjouygjdnwlb5vco.sessions.example.com");
    /* The Ingress fronts TCP only: a UDP port is reached through the Service, without a URL. */
    assert_string_equal(text(udp, "host"), "telo-run-hello.demo.svc");
    assert_null(at(udp, "url"));
    session_verdict_release(&v);

    w.cfg->ingress_tls_secret = strdup("sessions-tls");
    compute(&w, T0 + 10, &v);
    tcp = json_object_array_get_idx(at(v.status, "endpoints"), 0);
    assert_string_equal(text(tcp, "url"),
                        "https://8080-hello-demo-cjouygjdnwlb5vco.sessions.example.com");
    session_verdict_release(&v);
    world_free(&w);
}

static void named_ports_keep_their_names_in_endpoints(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    json_object_object_add(json_object_array_get_idx(at(w.obj, "spec.ports"), 0), "name",
                           json_object_new_string("web"));
    world_parse(&w);
    world_pod(&w, "running");
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    assert_string_equal(text(json_object_array_get_idx(at(v.status, "endpoints"), 0), "name"),
                        "web");
    session_verdict_release(&v);
    world_free(&w);
}

static void no_ports_no_endpoints(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    json_object_object_del(at(w.obj, "spec"), "ports");
    world_parse(&w);
    world_pod(&w, "running");
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    assert_null(at(v.status, "endpoints"));
    session_verdict_release(&v);
    world_free(&w);
}

static void attach_and_inspect_urls_need_the_gateway(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    json_object_object_add(at(w.obj, "spec"), "inspect", json_object_new_boolean(1));
    world_parse(&w);
    world_pod(&w, "running");
    w.attach_secret = 1;
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    assert_string_equal(text(v.status, "attach.secretName"), "telo-run-hello-attach");
    assert_null(at(v.status, "attach.url"));
    assert_null(at(v.status, "inspectUrl"));
    session_verdict_release(&v);

    w.cfg->gateway_url = strdup("https://gw.example.com");
    compute(&w, T0 + 10, &v);
    assert_string_equal(text(v.status, "attach.url"),
                        "https://gw.example.com/v1/namespaces/demo/telosessions/hello/attach");
    assert_string_equal(text(v.status, "inspectUrl"),
                        "https://gw.example.com/v1/namespaces/demo/telosessions/hello/debug");
    session_verdict_release(&v);

    /* No token asked for (spec.attachToken, issue 20): the URL all the same, for clients with
     * credentials of their own; without a gateway either, no attach at all. */
    w.attach_secret = 0;
    compute(&w, T0 + 10, &v);
    assert_string_equal(text(v.status, "attach.url"),
                        "https://gw.example.com/v1/namespaces/demo/telosessions/hello/attach");
    assert_null(at(v.status, "attach.secretName"));
    session_verdict_release(&v);
    free(w.cfg->gateway_url);
    w.cfg->gateway_url = NULL;
    compute(&w, T0 + 10, &v);
    assert_null(at(v.status, "attach"));
    session_verdict_release(&v);
    world_free(&w);
}

static void a_running_session_survives_an_unknown_pod_phase(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "running");
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    world_status(&w, v.status);
    session_verdict_release(&v);
    /* The node stopped reporting: the pod is not Pending again, and long past its start
     * deadline; the session must not fail with StartTimeout nor lose its pod. */
    json_object_object_add(at(w.pod, "status"), "phase", json_object_new_string("Unknown"));
    compute(&w, T0 + 3600, &v);
    assert_string_equal(text(v.status, "phase"), "Running");
    assert_false(v.delete_pod);
    assert_false(v.changed);
    session_verdict_release(&v);
    world_free(&w);
}

/* --- finished ---------------------------------------------------------------------------- */

static void succeeded_pod_records_exit_code_zero(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "succeeded");
    struct session_verdict v;
    compute(&w, T0 + 400, &v);
    assert_string_equal(text(v.status, "phase"), "Succeeded");
    assert_int_equal(json_object_get_int(at(v.status, "exitCode")), 0);
    assert_true(json_object_is_type(at(v.status, "exitCode"), json_type_int));
    assert_string_equal(text(v.status, "message"), "the app exited with code 0");
    assert_string_equal(text(v.status, "startTime"), "2026-03-01T10:00:00Z");
    assert_string_equal(text(v.status, "completionTime"), "2026-03-01T10:05:00Z");
    assert_null(at(v.status, "progress"));
    assert_string_equal(cond_status(v.status, "Ready"), "False");
    assert_string_equal(cond_status(v.status, "Stalled"), "False");
    assert_string_equal(cond_status(v.status, "Reconciling"), "False");
    assert_false(v.delete_pod);
    assert_string_equal(v.event_type, "Normal");
    assert_string_equal(v.event_reason, "Succeeded");
    session_verdict_release(&v);
    world_free(&w);
}

static void failed_app_names_container_and_exit_code(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "failed-exit3");
    struct session_verdict v;
    compute(&w, T0 + 400, &v);
    assert_string_equal(text(v.status, "phase"), "Failed");
    assert_string_equal(text(v.status, "reason"), "AppExited");
    assert_int_equal(json_object_get_int(at(v.status, "exitCode")), 3);
    /* The termination message is the log tail: one line in the status, no trailing newline. */
    assert_string_equal(text(v.status, "message"),
                        "container \"session\" failed: Error (exit code 3): Error: listen "
                        "EADDRINUSE: address already in use :::8080 at Server.setupListenHandle "
                        "[as _listen2] (node:net:1908:16)" HINT_LOGS);
    assert_string_equal(text(v.status, "completionTime"), "2026-03-01T10:05:00Z");
    assert_string_equal(cond_status(v.status, "Stalled"), "True");
    assert_string_equal(text(condition(v.status, "Stalled"), "reason"), "AppExited");
    assert_string_equal(cond_status(v.status, "Ready"), "False");
    assert_string_equal(text(condition(v.status, "Ready"), "reason"), "Failed");
    /* A pod that ended by itself is kept for its logs. */
    assert_false(v.delete_pod);
    assert_string_equal(v.event_type, "Warning");
    assert_string_equal(v.event_reason, "Failed");
    assert_true(starts_with(v.event_message, "Failed (AppExited): container \"session\""));
    session_verdict_release(&v);
    world_free(&w);
}

/* True when s holds nothing that acts on a terminal: no C0 control but newline and tab, no DEL,
 * no ESC, no C1 control as UTF-8. */
static int terminal_safe(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f)
            return 0;
        if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
            return 0;
    }
    return 1;
}

/* The app's termination message is the tenant's text, and the status is read by others
 * (`kubectl get -o wide`, `kubectl telo status`): escape sequences in it (clear the screen, an
 * OSC 8 link, the 8-bit CSI) reach no message of the status. */
static void an_apps_escape_sequences_reach_no_status_message(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "failed-exit3");
    struct json_object *term =
        at(json_object_array_get_idx(at(at(w.pod, "status"), "containerStatuses"), 0), "state");
    json_object_object_add(at(term, "terminated"), "message",
                           json_object_new_string("\x1b]8;;https://evil.example/\a"
                                                  "click\x1b]8;;\a\x1b[2J\xc2\x9b"
                                                  "31mred\r\x08"));
    struct session_verdict v;
    compute(&w, T0 + 400, &v);
    assert_string_equal(text(v.status, "reason"), "AppExited");
    const char *message = text(v.status, "message");
    assert_true(terminal_safe(message));
    assert_non_null(strstr(message, "]8;;https://evil.example/?click]8;;??31mred ?"));
    struct json_object *conds = at(v.status, "conditions");
    for (size_t i = 0; i < json_object_array_length(conds); i++)
        assert_true(terminal_safe(text(json_object_array_get_idx(conds, i), "message")));
    assert_non_null(strstr(text(condition(v.status, "Stalled"), "message"), "evil.example"));
    session_verdict_release(&v);
    world_free(&w);
}

static void oom_killed(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "failed-oomkilled");
    struct session_verdict v;
    compute(&w, T0 + 400, &v);
    assert_string_equal(text(v.status, "phase"), "Failed");
    assert_string_equal(text(v.status, "reason"), "OOMKilled");
    assert_int_equal(json_object_get_int(at(v.status, "exitCode")), 137);
    assert_string_equal(text(v.status, "message"),
                        "container \"session\" failed: OOMKilled (exit code 137)" HINT_LOGS);
    session_verdict_release(&v);
    world_free(&w);
}

static void bundle_fetch_failed(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "failed-init-fetch-bundle");
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    assert_string_equal(text(v.status, "phase"), "Failed");
    assert_string_equal(text(v.status, "reason"), "BundleFetchFailed");
    assert_null(at(v.status, "exitCode"));
    const char *msg = text(v.status, "message");
    assert_true(starts_with(msg, "init container \"fetch-bundle\" failed: Error (exit code 67): "
                                 "bundle sha256 mismatch for https://example.com/hello.tar.gz: "));
    assert_true(ends_with(msg, "cdcd. Run: kubectl logs -n demo telo-run-hello -c fetch-bundle"));
    assert_null(strchr(msg, '\n'));
    assert_string_equal(text(condition(v.status, "Stalled"), "reason"), "BundleFetchFailed");
    session_verdict_release(&v);
    world_free(&w);
}

static void deadline_exceeded(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "failed-deadline");
    struct session_verdict v;
    compute(&w, T0 + 21602, &v);
    assert_string_equal(text(v.status, "phase"), "Failed");
    /* The kubelet killed the container (exit 137) because the pod hit activeDeadlineSeconds:
     * that is the cause, not the app. */
    assert_string_equal(text(v.status, "reason"), "DeadlineExceeded");
    assert_string_equal(text(v.status, "message"),
                        "Pod was active on the node longer than the specified "
                        "deadline" HINT_DESCRIBE);
    assert_int_equal(json_object_get_int(at(v.status, "exitCode")), 137);
    session_verdict_release(&v);
    world_free(&w);
}

static void evicted(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "failed-evicted");
    struct session_verdict v;
    compute(&w, T0 + 500, &v);
    assert_string_equal(text(v.status, "phase"), "Failed");
    assert_string_equal(text(v.status, "reason"), "Evicted");
    assert_string_equal(text(v.status, "message"),
                        "Pod ephemeral local storage usage exceeds the total limit of containers "
                        "1Gi. Run: kubectl describe pod -n demo telo-run-hello");
    session_verdict_release(&v);
    world_free(&w);
}

static void pod_disappeared(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "running");
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    world_status(&w, v.status);
    session_verdict_release(&v);
    world_pod(&w, NULL);
    compute(&w, T0 + 60, &v);
    assert_string_equal(text(v.status, "phase"), "Failed");
    assert_string_equal(text(v.status, "reason"), "PodDisappeared");
    assert_true(starts_with(text(v.status, "message"), "pod telo-run-hello was deleted by "));
    assert_string_equal(text(v.status, "podName"), "telo-run-hello");
    assert_string_equal(text(v.status, "podIP"), "10.244.0.12");
    assert_string_equal(text(v.status, "startTime"), "2026-03-01T10:00:00Z");
    assert_string_equal(text(v.status, "completionTime"), "2026-03-01T10:01:00Z");
    assert_false(v.delete_pod);
    assert_string_equal(v.event_type, "Warning");
    session_verdict_release(&v);
    world_free(&w);
}

/* --- ownership (issue 21) ------------------------------------------------------------------ */

#define PREDECESSOR_UID "9a9a9a9a-0000-4000-8000-000000000001"
#define SESSION_UID     "0b6f2d7a-6a44-4c84-8a55-2d9b3c0e1f00"

/* Gives w's pod another controller: a TeloSession of name with uid, or none (uid NULL). */
static void world_pod_owner(struct world *w, const char *name, const char *uid)
{
    struct json_object *meta = at(w->pod, "metadata");
    json_object_object_del(meta, "ownerReferences");
    if (!uid)
        return;
    char text[512];
    snprintf(text, sizeof(text),
             "[{\"apiVersion\":\"telo.run/v1alpha1\",\"kind\":\"TeloSession\",\"name\":\"%s\","
             "\"uid\":\"%s\",\"controller\":true,\"blockOwnerDeletion\":true}]",
             name, uid);
    json_object_object_add(meta, "ownerReferences", json_tokener_parse(text));
}

static void world_status_json(struct world *w, const char *json)
{
    struct json_object *status = json_tokener_parse(json);
    assert_non_null(status);
    world_status(w, status);
    json_object_put(status);
}

/* The session records the uid of the pod it reports, its own. */
static void the_own_pod_is_reported_with_its_uid(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "running");
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    assert_string_equal(text(v.status, "phase"), "Running");
    assert_string_equal(text(v.status, "podName"), "telo-run-hello");
    assert_string_equal(text(v.status, "podUID"), "7c1e5b0e-2f4d-4d7e-9a51-3f1f0d2c8a11");
    session_verdict_release(&v);
    world_free(&w);
}

/* A Running pod of a deleted predecessor (same name, another uid) is not the new session's: it
 * is neither reported nor the basis of a phase; the session waits for its replacement. */
static void a_predecessors_pod_is_being_replaced(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "running");
    world_pod_owner(&w, "hello", PREDECESSOR_UID);
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    assert_string_equal(text(v.status, "phase"), "Pending");
    assert_null(at(v.status, "reason"));
    assert_string_equal(text(v.status, "progress.message"), "Replacing the previous session's pod");
    assert_null(at(v.status, "podName"));
    assert_null(at(v.status, "podIP"));
    assert_null(at(v.status, "podUID"));
    assert_string_equal(text(v.status, "startTime"), "2026-03-01T10:00:10Z");
    assert_string_equal(cond_status(v.status, "Ready"), "False");
    assert_string_equal(cond_status(v.status, "Reconciling"), "True");
    assert_string_equal(cond_status(v.status, "Stalled"), "False");
    assert_false(v.delete_pod); /* the reconciler replaces it, with a uid precondition */
    assert_true(session_status_settle(
                    &(struct session_observation){.s = &w.s, .cfg = w.cfg, .pod = w.pod, .now = T0},
                    &v) == 0);
    /* A predecessor's pod that has failed or ended says nothing either. */
    world_pod(&w, "failed-oomkilled");
    world_pod_owner(&w, "hello", PREDECESSOR_UID);
    session_verdict_release(&v);
    compute(&w, T0 + 10, &v);
    assert_string_equal(text(v.status, "phase"), "Pending");
    session_verdict_release(&v);
    world_free(&w);
}

/* The bug of issue 21: a status that reported the predecessor's pod (no podUID) must not turn
 * PodDisappeared when the garbage collector removes that pod, nor keep naming it. */
static void a_reported_predecessor_pod_is_no_pod_disappeared(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_status_json(&w, ("{\"phase\":\"Running\",\"podName\":\"telo-run-hello\","
                           "\"podIP\":\"10.244.0.9\"}"));
    world_pod(&w, "running");
    world_pod_owner(&w, "hello", PREDECESSOR_UID);
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    assert_string_equal(text(v.status, "phase"), "Pending");
    assert_null(at(v.status, "podName"));
    assert_null(at(v.status, "podIP"));
    session_verdict_release(&v);
    world_free(&w);
}

/* Only a pod the session had (status.podUID) can have disappeared. */
static void pod_disappeared_needs_the_sessions_own_pod(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_status_json(&w, ("{\"phase\":\"Running\",\"podName\":\"telo-run-hello\","
                           "\"podUID\":\"7c1e5b0e-2f4d-4d7e-9a51-3f1f0d2c8a11\"}"));
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    assert_string_equal(text(v.status, "reason"), "PodDisappeared");
    assert_string_equal(text(v.status, "podUID"), "7c1e5b0e-2f4d-4d7e-9a51-3f1f0d2c8a11");
    session_verdict_release(&v);
    /* Its own pod replaced by someone else's of the name: still gone. */
    world_pod(&w, "running");
    world_pod_owner(&w, "hello", NULL);
    compute(&w, T0 + 10, &v);
    assert_string_equal(text(v.status, "reason"), "PodDisappeared");
    session_verdict_release(&v);
    world_free(&w);
}

/* Someone else's pod holds the name: the session says so, and is stalled until it goes. The
 * third is a tenant's pod dressed as the session's (its controller reference carries the
 * session's uid) on the host's network, which the operator never asks for: reported Running, its
 * podIP (the node's) would be probed and relayed to. */
static void a_foreign_pod_is_a_name_conflict(void **state)
{
    (void)state;
    static const char *const owners[][2] = {
        {"hello", NULL}, {"another", PREDECESSOR_UID}, {"hello", SESSION_UID}};
    for (size_t i = 0; i < 3; i++) {
        struct world w;
        world_init(&w, hello_json);
        world_pod(&w, "running");
        world_pod_owner(&w, owners[i][0], owners[i][1]);
        if (i == 2)
            json_object_object_add(at(w.pod, "spec"), "hostNetwork", json_object_new_boolean(1));
        struct session_verdict v;
        compute(&w, T0 + 10, &v);
        assert_string_equal(text(v.status, "phase"), "Pending");
        assert_string_equal(text(v.status, "reason"), "NameConflict");
        assert_true(starts_with(text(v.status, "message"),
                                "pod demo/telo-run-hello exists and is not owned by this session; "
                                "delete or rename it"));
        assert_null(at(v.status, "podName"));
        assert_null(at(v.status, "podIP")); /* the gateway's relay connects to it */
        assert_string_equal(cond_status(v.status, "Stalled"), "True");
        assert_string_equal(cond_status(v.status, "Reconciling"), "False");
        assert_false(v.delete_pod);
        assert_string_equal(v.event_type, "Warning");
        assert_string_equal(v.event_reason, "NameConflict");
        session_verdict_release(&v);
        world_free(&w);
    }
}

/* The other children, classified by the reconciler: a foreign Service, Ingress or Secret is a
 * conflict; a predecessor's is being replaced. Neither counts while the session runs its pod. */
static void other_childrens_conflicts_and_replacements_are_said(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    struct session_observation obs = observation(&w, T0);
    obs.conflict = "secret demo/telo-run-hello-attach exists and is not owned by this session; "
                   "delete or rename it";
    struct session_verdict v;
    assert_int_equal(session_status_compute(&obs, &v), 0);
    assert_string_equal(text(v.status, "reason"), "NameConflict");
    assert_string_equal(text(v.status, "message"), obs.conflict);
    session_verdict_release(&v);
    static const char *const kinds[] = {"service", "ingress", "secret"};
    for (size_t i = 0; i < 3; i++) {
        obs = observation(&w, T0);
        obs.replacing = kinds[i];
        assert_int_equal(session_status_compute(&obs, &v), 0);
        assert_string_equal(text(v.status, "phase"), "Pending");
        assert_null(at(v.status, "reason"));
        char want[80];
        snprintf(want, sizeof(want), "Replacing the previous session's %s", kinds[i]);
        assert_string_equal(text(v.status, "progress.message"), want);
        session_verdict_release(&v);
    }
    /* With its own pod running, the session is Running whatever the rest. */
    world_pod(&w, "running");
    obs = observation(&w, T0 + 10);
    obs.replacing = "secret";
    assert_int_equal(session_status_compute(&obs, &v), 0);
    assert_string_equal(text(v.status, "phase"), "Running");
    session_verdict_release(&v);
    world_free(&w);
}

static void stopped_deletes_the_pod(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "running");
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    world_status(&w, v.status);
    session_verdict_release(&v);
    json_object_object_add(at(w.obj, "spec"), "stopped", json_object_new_boolean(1));
    json_object_object_add(at(w.obj, "metadata"), "generation", json_object_new_int(2));
    world_parse(&w);
    compute(&w, T0 + 70, &v);
    assert_string_equal(text(v.status, "phase"), "Stopped");
    assert_string_equal(text(v.status, "reason"), "Stopped");
    assert_true(v.delete_pod);
    assert_string_equal(cond_status(v.status, "Ready"), "False");
    assert_string_equal(cond_status(v.status, "Stalled"), "False");
    assert_string_equal(text(v.status, "completionTime"), "2026-03-01T10:01:10Z");
    assert_int_equal(json_object_get_int(at(v.status, "observedGeneration")), 2);
    assert_string_equal(v.event_type, "Normal");
    assert_string_equal(v.event_reason, "Stopped");
    world_status(&w, v.status);
    session_verdict_release(&v);

    /* While the pod terminates, the verdict keeps asking for its deletion; once gone, rest. */
    compute(&w, T0 + 71, &v);
    assert_true(v.delete_pod);
    assert_false(v.changed);
    assert_null(v.event_type);
    session_verdict_release(&v);
    world_pod(&w, NULL);
    compute(&w, T0 + 80, &v);
    assert_string_equal(text(v.status, "phase"), "Stopped");
    assert_false(v.delete_pod);
    assert_false(v.changed);
    session_verdict_release(&v);
    world_free(&w);
}

static void stopped_before_a_pod_exists(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    json_object_object_add(at(w.obj, "spec"), "stopped", json_object_new_boolean(1));
    world_parse(&w);
    struct session_verdict v;
    compute(&w, T0, &v);
    assert_string_equal(text(v.status, "phase"), "Stopped");
    assert_false(v.delete_pod);
    assert_string_equal(text(v.status, "startTime"), "2026-03-01T10:00:00Z");
    session_verdict_release(&v);
    world_free(&w);
}

static void a_failed_session_stays_failed_when_the_pod_disappears(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "failed-exit3");
    struct session_verdict v;
    compute(&w, T0 + 400, &v);
    world_status(&w, v.status);
    session_verdict_release(&v);
    world_pod(&w, NULL);
    compute(&w, T0 + 900, &v);
    assert_string_equal(text(v.status, "phase"), "Failed");
    assert_string_equal(text(v.status, "reason"), "AppExited");
    assert_int_equal(json_object_get_int(at(v.status, "exitCode")), 3);
    assert_false(v.changed);
    assert_null(v.event_type);
    assert_false(v.delete_pod);
    session_verdict_release(&v);
    /* Nor does a Succeeded one turn into anything else when its pod runs again. */
    world_free(&w);
}

static void a_succeeded_session_stays_succeeded(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "succeeded");
    struct session_verdict v;
    compute(&w, T0 + 400, &v);
    world_status(&w, v.status);
    session_verdict_release(&v);
    world_pod(&w, "failed-oomkilled");
    compute(&w, T0 + 500, &v);
    assert_string_equal(text(v.status, "phase"), "Succeeded");
    assert_false(v.changed);
    assert_false(v.delete_pod);
    session_verdict_release(&v);
    world_free(&w);
}

/* A session that failed to start asked for its pod's deletion; if that delete did not happen
 * (the API call failed, the operator restarted), the next pass must still ask for it. */
static void a_failed_start_keeps_deleting_its_pod(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-imagepullbackoff");
    struct session_verdict v;
    compute(&w, T0 + 130, &v);
    assert_true(v.delete_pod);
    world_status(&w, v.status);
    session_verdict_release(&v);
    compute(&w, T0 + 140, &v);
    assert_string_equal(text(v.status, "phase"), "Failed");
    assert_false(v.changed);
    assert_true(v.delete_pod);
    session_verdict_release(&v);
    world_free(&w);
}

static void ttl_after_finished_requeues_then_deletes(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    json_object_object_add(at(w.obj, "spec"), "ttlSecondsAfterFinished", json_object_new_int(600));
    world_parse(&w);
    world_pod(&w, "succeeded"); /* finished at T0 + 300 */
    struct session_verdict v;
    compute(&w, T0 + 400, &v);
    assert_false(v.delete_session);
    assert_true(fabs(v.requeue_after - 500) < 1e-6);
    world_status(&w, v.status);
    session_verdict_release(&v);
    compute(&w, T0 + 899, &v);
    assert_false(v.delete_session);
    assert_true(fabs(v.requeue_after - 1) < 1e-6);
    session_verdict_release(&v);
    compute(&w, T0 + 900, &v);
    assert_true(v.delete_session);
    session_verdict_release(&v);
    world_free(&w);
}

static void ttl_after_finished_zero_deletes_at_once(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    json_object_object_add(at(w.obj, "spec"), "ttlSecondsAfterFinished", json_object_new_int(0));
    world_parse(&w);
    world_pod(&w, "failed-exit3");
    struct session_verdict v;
    compute(&w, T0 + 300, &v);
    assert_true(v.delete_session);
    session_verdict_release(&v);
    /* Running sessions are not finished. */
    world_pod(&w, "running");
    compute(&w, T0 + 300, &v);
    assert_false(v.delete_session);
    assert_true(v.requeue_after == 0);
    session_verdict_release(&v);
    world_free(&w);
}

/* --- writes only on change --------------------------------------------------------------- */

static void recomputing_changes_nothing(void **state)
{
    (void)state;
    static const char *const pods[] = {
        NULL,
        "pending-unschedulable",
        "pending-scheduled",
        "pending-init-running",
        "pending-containercreating",
        "pending-imagepullbackoff",
        "pending-errimagepull",
        "pending-invalidimagename",
        "pending-configerror",
        "running",
        "succeeded",
        "failed-exit3",
        "failed-oomkilled",
        "failed-init-fetch-bundle",
        "failed-deadline",
        "failed-evicted",
    };
    for (size_t i = 0; i < sizeof(pods) / sizeof(pods[0]); i++) {
        struct world w;
        world_init(&w, hello_json);
        w.attach_secret = 1;
        world_pod(&w, pods[i]);
        struct session_verdict first, again;
        compute(&w, T0 + 10, &first);
        assert_true(first.changed);
        world_status(&w, first.status);
        compute(&w, T0 + 50, &again);
        if (again.changed)
            fail_msg("%s: recompute changed the status:\n%s\n%s", pods[i] ? pods[i] : "no pod",
                     json_object_to_json_string(first.status),
                     json_object_to_json_string(again.status));
        assert_null(again.event_type);
        assert_true(json_object_equal(first.status, again.status));
        session_verdict_release(&first);
        session_verdict_release(&again);
        world_free(&w);
    }
}

static void transition_times_move_only_when_a_condition_flips(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-containercreating");
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    assert_string_equal(text(condition(v.status, "Ready"), "lastTransitionTime"),
                        "2026-03-01T10:00:10Z");
    world_status(&w, v.status);
    session_verdict_release(&v);

    world_pod(&w, "running");
    compute(&w, T0 + 20, &v);
    assert_string_equal(text(condition(v.status, "Ready"), "lastTransitionTime"),
                        "2026-03-01T10:00:20Z");
    assert_string_equal(text(condition(v.status, "Reconciling"), "lastTransitionTime"),
                        "2026-03-01T10:00:20Z");
    /* Stalled and ImageReady did not flip. */
    assert_string_equal(text(condition(v.status, "Stalled"), "lastTransitionTime"),
                        "2026-03-01T10:00:10Z");
    assert_string_equal(text(condition(v.status, "ImageReady"), "lastTransitionTime"),
                        "2026-03-01T10:00:10Z");
    const char *start = text(v.status, "startTime");
    assert_string_equal(start, "2026-03-01T10:00:00Z");
    world_status(&w, v.status);
    session_verdict_release(&v);

    compute(&w, T0 + 3000, &v);
    assert_false(v.changed);
    assert_string_equal(text(v.status, "startTime"), "2026-03-01T10:00:00Z");
    assert_string_equal(text(condition(v.status, "Ready"), "lastTransitionTime"),
                        "2026-03-01T10:00:20Z");
    session_verdict_release(&v);
    world_free(&w);
}

static void observed_generation_follows_the_spec(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "running");
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    assert_int_equal(json_object_get_int64(at(v.status, "observedGeneration")), 1);
    world_status(&w, v.status);
    session_verdict_release(&v);

    json_object_object_add(at(w.obj, "metadata"), "generation", json_object_new_int(3));
    world_parse(&w);
    compute(&w, T0 + 20, &v);
    assert_true(v.changed);
    assert_null(v.event_type);
    assert_int_equal(json_object_get_int64(at(v.status, "observedGeneration")), 3);
    struct json_object *conds = at(v.status, "conditions");
    for (size_t i = 0; i < json_object_array_length(conds); i++)
        assert_int_equal(
            json_object_get_int64(at(json_object_array_get_idx(conds, i), "observedGeneration")),
            3);
    session_verdict_release(&v);

    /* Finished sessions follow the generation too. */
    world_pod(&w, "failed-exit3");
    compute(&w, T0 + 400, &v);
    world_status(&w, v.status);
    session_verdict_release(&v);
    json_object_object_add(at(w.obj, "metadata"), "generation", json_object_new_int(4));
    world_parse(&w);
    compute(&w, T0 + 500, &v);
    assert_true(v.changed);
    assert_int_equal(json_object_get_int64(at(v.status, "observedGeneration")), 4);
    assert_int_equal(
        json_object_get_int64(at(condition(v.status, "Stalled"), "observedGeneration")), 4);
    assert_string_equal(text(v.status, "reason"), "AppExited");
    session_verdict_release(&v);
    world_free(&w);
}

/* Issue 20: a Provisioning with no reason and no message (the pod on its way) records no Event,
 * one Event fewer per session under a burst; the scheduler's complaint is told once, when it
 * first appears; Running is told as before. */
static void plain_provisioning_is_told_only_when_it_has_something_to_say(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    struct session_verdict v;

    /* Pending -> plain Provisioning: a status write, no Event. */
    world_pod(&w, "pending-scheduled");
    compute(&w, T0 + 5, &v);
    assert_true(v.changed);
    assert_string_equal(text(v.status, "phase"), "Provisioning");
    assert_null(at(v.status, "message"));
    assert_null(v.event_type);
    world_status(&w, v.status);
    session_verdict_release(&v);

    /* The scheduler complains: the first message of the Provisioning is an Event. */
    world_pod(&w, "pending-unschedulable");
    compute(&w, T0 + 10, &v);
    assert_true(v.changed);
    assert_string_equal(v.event_type, "Normal");
    assert_string_equal(v.event_reason, "Provisioning");
    assert_true(starts_with(v.event_message, "Provisioning: waiting for a node: "));
    world_status(&w, v.status);
    session_verdict_release(&v);

    /* Still complaining (the same or another text): no second Event. */
    compute(&w, T0 + 20, &v);
    assert_null(v.event_type);
    session_verdict_release(&v);

    /* Scheduled after all: plain again, no Event; then Running is told. */
    world_pod(&w, "pending-containercreating");
    compute(&w, T0 + 30, &v);
    assert_null(v.event_type);
    world_status(&w, v.status);
    session_verdict_release(&v);
    world_pod(&w, "running");
    compute(&w, T0 + 40, &v);
    assert_string_equal(v.event_reason, "Running");
    session_verdict_release(&v);
    world_free(&w);

    /* A first status that already has the scheduler's complaint: one Event, as before. */
    world_init(&w, hello_json);
    world_pod(&w, "pending-unschedulable");
    compute(&w, T0 + 10, &v);
    assert_string_equal(v.event_reason, "Provisioning");
    session_verdict_release(&v);
    world_free(&w);
}

static void events_only_on_phase_or_reason_change(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-containercreating");
    struct session_verdict v;
    compute(&w, T0 + 10, &v);
    /* A plain Provisioning is written but not told as an Event (issue 20): see
     * plain_provisioning_is_told_only_when_it_has_something_to_say. */
    assert_true(v.changed);
    assert_string_equal(text(v.status, "phase"), "Provisioning");
    assert_null(v.event_type);
    world_status(&w, v.status);
    session_verdict_release(&v);

    /* The progress text moves: a status write, no Event. */
    world_pod(&w, "pending-imagepullbackoff");
    compute(&w, T0 + 20, &v);
    assert_true(v.changed);
    assert_null(v.event_type);
    assert_string_equal(text(v.status, "progress.message"), "Pulling image");
    world_status(&w, v.status);
    session_verdict_release(&v);

    /* Same phase, new reason: an Event. */
    compute(&w, T0 + 130, &v);
    assert_string_equal(text(v.status, "reason"), "ImagePullFailed");
    assert_string_equal(v.event_type, "Warning");
    session_verdict_release(&v);
    world_free(&w);
}

/* --- failure message rules --------------------------------------------------------------- */

static struct json_object *pod_with(const char *status_json)
{
    char doc[4096];
    snprintf(doc, sizeof(doc),
             "{\"metadata\":{\"name\":\"telo-run-x\",\"namespace\":\"ns\"},\"status\":%s}",
             status_json);
    struct json_object *pod = json_tokener_parse(doc);
    assert_non_null(pod);
    return pod;
}

struct failure {
    char message[1024];
    char reason[64];
    long long exit_code;
};

static void failure_of(const char *status_json, struct failure *f)
{
    struct json_object *pod = pod_with(status_json);
    f->exit_code = -1;
    session_failure_message(pod, "ns", f->message, sizeof(f->message), f->reason, sizeof(f->reason),
                            &f->exit_code);
    json_object_put(pod);
}

static void init_containers_come_first(void **state)
{
    (void)state;
    struct failure f;
    failure_of("{\"phase\":\"Failed\",\"initContainerStatuses\":[{\"name\":\"setup\","
               "\"state\":{\"terminated\":{\"exitCode\":2}}}],\"containerStatuses\":[{\"name\":"
               "\"session\",\"state\":{\"terminated\":{\"exitCode\":1,\"reason\":\"Error\"}}}]}",
               &f);
    assert_string_equal(f.message, "init container \"setup\" failed: Error (exit code 2). Run: "
                                   "kubectl logs -n ns telo-run-x -c setup");
    assert_string_equal(f.reason, "InitContainerFailed");
    assert_int_equal(f.exit_code, 2);
}

static void state_comes_before_last_state(void **state)
{
    (void)state;
    struct failure f;
    failure_of("{\"containerStatuses\":[{\"name\":\"session\","
               "\"state\":{\"terminated\":{\"exitCode\":4,\"reason\":\"Error\"}},"
               "\"lastState\":{\"terminated\":{\"exitCode\":5,\"reason\":\"Error\"}}}]}",
               &f);
    assert_non_null(strstr(f.message, "(exit code 4)"));
    /* A clean exit in state sends the reader to lastState. */
    failure_of("{\"containerStatuses\":[{\"name\":\"session\","
               "\"state\":{\"terminated\":{\"exitCode\":0,\"reason\":\"Completed\"}},"
               "\"lastState\":{\"terminated\":{\"exitCode\":5,\"reason\":\"Error\"}}}]}",
               &f);
    assert_non_null(strstr(f.message, "(exit code 5)"));
    assert_int_equal(f.exit_code, 5);
}

static void waiting_to_start_is_not_a_failure(void **state)
{
    (void)state;
    struct failure f;
    failure_of("{\"phase\":\"Failed\",\"message\":\"the node was shut down\","
               "\"initContainerStatuses\":[{\"name\":\"fetch-bundle\",\"state\":{\"waiting\":"
               "{\"reason\":\"PodInitializing\"}}}],\"containerStatuses\":[{\"name\":\"session\","
               "\"state\":{\"waiting\":{\"reason\":\"ContainerCreating\"}}}]}",
               &f);
    assert_string_equal(f.message,
                        "the node was shut down. Run: kubectl describe pod -n ns telo-run-x");
    assert_string_equal(f.reason, "PodFailed");
}

static void fallbacks_are_message_then_reason_then_pod_failed(void **state)
{
    (void)state;
    struct failure f;
    failure_of("{\"phase\":\"Failed\",\"reason\":\"NodeLost\"}", &f);
    assert_string_equal(f.message, "NodeLost. Run: kubectl describe pod -n ns telo-run-x");
    assert_string_equal(f.reason, "NodeLost");
    failure_of("{\"phase\":\"Failed\"}", &f);
    assert_string_equal(f.message, "pod failed. Run: kubectl describe pod -n ns telo-run-x");
    assert_string_equal(f.reason, "PodFailed");
    assert_int_equal(f.exit_code, -1);
}

static void details_are_capped_at_500_characters(void **state)
{
    (void)state;
    char long_msg[800], status[1200];
    memset(long_msg, 'x', 700);
    long_msg[700] = '\0';
    snprintf(status, sizeof(status),
             "{\"containerStatuses\":[{\"name\":\"session\",\"state\":{\"terminated\":"
             "{\"exitCode\":1,\"reason\":\"Error\",\"message\":\"%s\"}}}]}",
             long_msg);
    struct failure f;
    failure_of(status, &f);
    const char *hint = ". Run: kubectl logs -n ns telo-run-x -c session";
    assert_true(ends_with(f.message, hint));
    size_t detail = strlen(f.message) - strlen(hint);
    /* 500 characters, then "…" (three bytes). */
    assert_int_equal(detail, 503);
    assert_memory_equal(f.message + 500, "\xe2\x80\xa6", 3);
    assert_true(starts_with(f.message, "container \"session\" failed: Error (exit code 1): xxx"));
}

static void the_cap_counts_characters_not_bytes(void **state)
{
    (void)state;
    /* 400 two-byte characters: within 500 characters, well over 500 bytes. */
    char msg[1300] = "", status[1600];
    for (int i = 0; i < 400; i++)
        test_appendf(msg, sizeof(msg), "\xc3\xa9");
    snprintf(status, sizeof(status),
             "{\"containerStatuses\":[{\"name\":\"session\",\"state\":{\"terminated\":"
             "{\"exitCode\":1,\"message\":\"%s\"}}}]}",
             msg);
    struct failure f;
    failure_of(status, &f);
    assert_non_null(strstr(f.message, msg));
    assert_null(strstr(f.message, "\xe2\x80\xa6"));

    /* 600 of them: cut after 500 characters, never inside one. */
    msg[0] = '\0';
    for (int i = 0; i < 600; i++)
        test_appendf(msg, sizeof(msg), "\xc3\xa9");
    snprintf(status, sizeof(status),
             "{\"containerStatuses\":[{\"name\":\"session\",\"state\":{\"terminated\":"
             "{\"exitCode\":1,\"message\":\"%s\"}}}]}",
             msg);
    failure_of(status, &f);
    const char *hint = ". Run: kubectl logs -n ns telo-run-x -c session";
    assert_true(ends_with(f.message, hint));
    f.message[strlen(f.message) - strlen(hint)] = '\0';
    assert_true(ends_with(f.message, "\xc3\xa9\xe2\x80\xa6"));
    assert_int_equal(utf8_chars(f.message), 501);
}

static void the_cap_holds_in_start_timeouts(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-imagepullbackoff");
    char big[900];
    memset(big, 'y', 800);
    big[800] = '\0';
    set_session_waiting(&w, "ImagePullBackOff", big);
    struct session_verdict v;
    compute(&w, T0 + 200, &v);
    const char *msg = text(v.status, "message");
    assert_non_null(strstr(msg, "yyy\xe2\x80\xa6" HINT_DESCRIBE));
    utf8_chars(msg);
    utf8_chars(v.event_message);
    session_verdict_release(&v);

    world_pod(&w, "pending-unschedulable");
    json_object_object_add(json_object_array_get_idx(at(w.pod, "status.conditions"), 0), "message",
                           json_object_new_string(big));
    compute(&w, T0 + 200, &v);
    msg = text(v.status, "message");
    assert_string_equal(text(v.status, "reason"), "Unschedulable");
    assert_non_null(strstr(msg, "yyy\xe2\x80\xa6. Check"));
    session_verdict_release(&v);
    world_free(&w);
}

static void event_messages_stay_valid_utf8(void **state)
{
    (void)state;
    /* Three-byte characters at each alignment against the Event's byte bound. */
    for (int pad = 0; pad < 3; pad++) {
        struct world w;
        world_init(&w, hello_json);
        world_pod(&w, "failed-exit3");
        char msg[1600] = "";
        for (int i = 0; i < pad; i++)
            test_appendf(msg, sizeof(msg), "a");
        for (int i = 0; i < 499; i++)
            test_appendf(msg, sizeof(msg), "\xe2\x82\xac"); /* "€" */
        struct json_object *term =
            at(json_object_array_get_idx(at(w.pod, "status.containerStatuses"), 0),
               "state.terminated");
        json_object_object_add(term, "message", json_object_new_string(msg));
        struct session_verdict v;
        compute(&w, T0 + 400, &v);
        assert_non_null(v.event_type);
        utf8_chars(v.event_message);
        utf8_chars(text(v.status, "message"));
        assert_true(ends_with(text(v.status, "message"), HINT_LOGS));
        session_verdict_release(&v);
        world_free(&w);
    }
}

/* --- phases read from a status ----------------------------------------------------------- */

/* Gives w the status written as JSON text. */
static void world_status_text(struct world *w, const char *json)
{
    struct json_object *status = json_tokener_parse(json);
    assert_non_null(status);
    world_status(w, status);
    json_object_put(status);
}

/* status.phase is whatever the status subresource holds: a name this operator does not write
 * (another case, another type, "Unknown") is no phase at all, never a crash nor a verdict kept. */
static void an_unknown_status_phase_is_decided_afresh(void **state)
{
    (void)state;
    static const char *const statuses[] = {
        "{\"phase\":\"Exploded\"}", "{\"phase\":\"succeeded\"}",
        "{\"phase\":\"Unknown\"}",  "{\"phase\":7}",
        "{\"phase\":[\"Failed\"]}", "{\"phase\":\"\"}",
        "{\"phase\":null}",
    };
    for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++) {
        struct world w;
        world_init(&w, hello_json);
        world_status_text(&w, statuses[i]);
        struct session_verdict v;
        compute(&w, T0, &v);
        assert_string_equal(text(v.status, "phase"), "Pending");
        assert_true(v.changed);
        assert_false(v.delete_pod);
        assert_string_equal(v.event_type, "Normal");
        assert_string_equal(v.event_reason, "Pending");
        session_verdict_release(&v);
        world_free(&w);
    }
}

/* A session that ran ends with its pod: only Unknown keeps it Running. */
static void a_running_session_ends_with_its_pod(void **state)
{
    (void)state;
    static const char *const ends[][2] = {{"succeeded", "Succeeded"}, {"failed-exit3", "Failed"}};
    for (size_t i = 0; i < 2; i++) {
        struct world w;
        world_init(&w, hello_json);
        world_pod(&w, "running");
        struct session_verdict v;
        compute(&w, T0 + 10, &v);
        world_status(&w, v.status);
        session_verdict_release(&v);
        world_pod(&w, ends[i][0]);
        compute(&w, T0 + 400, &v);
        assert_string_equal(text(v.status, "phase"), ends[i][1]);
        assert_true(v.changed);
        assert_non_null(at(v.status, "completionTime"));
        session_verdict_release(&v);
        world_free(&w);
    }
}

/* A pod without a creationTimestamp starts its deadline now, and does not settle. */
static void a_pod_without_a_creation_time_counts_from_now(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "pending-scheduled");
    json_object_object_del(at(w.pod, "metadata"), "creationTimestamp");
    struct session_verdict v;
    compute(&w, T0 + 1000, &v);
    assert_string_equal(text(v.status, "phase"), "Provisioning");
    assert_false(v.delete_pod);
    assert_float_equal(v.requeue_after, 120, 1e-9);
    assert_float_equal(settles(&w, T0 + 1000, &v), 0, 0);
    session_verdict_release(&v);
    world_free(&w);
}

/* A finished session's pod that reports no phase has not ended by itself: it goes. */
static void a_finished_session_deletes_a_pod_without_a_phase(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "succeeded");
    struct session_verdict v;
    compute(&w, T0 + 400, &v);
    world_status(&w, v.status);
    session_verdict_release(&v);
    compute(&w, T0 + 500, &v);
    assert_false(v.delete_pod);
    session_verdict_release(&v);
    json_object_object_del(at(w.pod, "status"), "phase");
    compute(&w, T0 + 500, &v);
    assert_string_equal(text(v.status, "phase"), "Succeeded");
    assert_true(v.delete_pod);
    assert_false(v.changed);
    session_verdict_release(&v);
    world_free(&w);
}

/* A finished status as written by hand (no conditions, no completionTime) is kept as it is, the
 * generation observed, and its TTL counts from now. */
static void a_bare_finished_status_is_kept_and_its_ttl_counts_from_now(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    json_object_object_add(at(w.obj, "spec"), "ttlSecondsAfterFinished", json_object_new_int(60));
    /* Still stopped: a Stopped status with spec.stopped false is a resume (issue 17). */
    json_object_object_add(at(w.obj, "spec"), "stopped", json_object_new_boolean(1));
    world_parse(&w);
    world_status_text(&w, "{\"phase\":\"Stopped\"}");
    struct session_verdict v;
    compute(&w, T0, &v);
    assert_string_equal(text(v.status, "phase"), "Stopped");
    assert_null(at(v.status, "conditions"));
    assert_int_equal(json_object_get_int64(at(v.status, "observedGeneration")), 1);
    assert_true(v.changed);
    assert_null(v.event_type);
    assert_false(v.delete_session);
    assert_float_equal(v.requeue_after, 60, 1e-9);
    session_verdict_release(&v);
    json_object_object_add(at(w.obj, "spec"), "ttlSecondsAfterFinished", json_object_new_int(0));
    world_parse(&w);
    compute(&w, T0, &v);
    assert_true(v.delete_session);
    session_verdict_release(&v);
    world_free(&w);
}

/* A ready image without progress text leaves the pod's first word: Scheduling. */
static void a_ready_image_without_progress_is_scheduling(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    struct session_image_plan plan = {
        .step = SESSION_IMAGE_READY, .ref = BUILT_REF, .tag = "0123", .reason = "CacheHit"};
    w.plan = &plan;
    struct session_verdict v;
    compute(&w, T0, &v);
    assert_string_equal(text(v.status, "phase"), "Pending");
    assert_string_equal(text(v.status, "progress.phase"), "provision");
    assert_string_equal(text(v.status, "progress.message"), "Scheduling");
    assert_false(json_object_get_boolean(at(v.status, "progress.done")));
    session_verdict_release(&v);
    world_free(&w);
}

/* Only a plain Pending waits for the pod: a new session stopped at once is written now. */
static void a_new_stopped_session_does_not_wait_for_a_pod(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    json_object_object_add(at(w.obj, "spec"), "stopped", json_object_new_boolean(1));
    world_parse(&w);
    struct session_verdict v;
    compute(&w, T0, &v);
    assert_true(v.changed);
    assert_false(waits_for_pod(&w, T0, &v));
    session_verdict_release(&v);
    world_free(&w);
}

/* --- app reachability (issue 17) ---------------------------------------------------------------
 */

static struct json_object *endpoint_of(struct json_object *status, size_t i)
{
    return json_object_array_get_idx(at(status, "endpoints"), i);
}

/* The Running pod (app started at T0 + 5, IP 10.244.0.12) with the prober's facts of the TCP
 * port 8080 (index 0) and the UDP port 5353 (index 1). */
static void compute_reach(struct world *w, double now, const struct session_reach_facts *facts,
                          struct session_verdict *v)
{
    struct session_observation obs = observation(w, now);
    obs.reach = facts;
    assert_int_equal(session_status_compute(&obs, v), 0);
}

static void running_is_ready_only_once_its_tcp_ports_accept_connections(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "running");
    struct session_reach_facts facts[SESSION_MAX_PORTS] = {{0}};
    struct session_verdict v;
    /* Running, nothing learnt yet: Checking, not Ready, still reconciling (kstatus InProgress). */
    compute_reach(&w, T0 + 6, facts, &v);
    assert_string_equal(text(v.status, "phase"), "Running");
    assert_string_equal(cond_status(v.status, "Ready"), "False");
    assert_string_equal(text(condition(v.status, "Ready"), "reason"), "WaitingForPorts");
    assert_string_equal(cond_status(v.status, "AppReachable"), "False");
    assert_string_equal(text(condition(v.status, "AppReachable"), "reason"), "Checking");
    assert_string_equal(cond_status(v.status, "Reconciling"), "True");
    assert_string_equal(cond_status(v.status, "Stalled"), "False");
    assert_string_equal(text(endpoint_of(v.status, 0), "state"), "Checking");
    assert_string_equal(text(endpoint_of(v.status, 0), "since"), "2026-03-01T10:00:05Z");
    assert_string_equal(text(endpoint_of(v.status, 1), "state"), "NotProbed");
    assert_non_null(strstr(text(endpoint_of(v.status, 1), "message"), "UDP"));
    assert_null(at(v.status, "reason"));
    /* Looked at again when the timeout would pass. */
    assert_true(v.requeue_after > 28 && v.requeue_after < 30);
    world_status(&w, v.status);
    session_verdict_release(&v);

    /* Refused again: nothing changes, nothing is written. */
    facts[0] = (struct session_reach_facts){.results = 2, .fail_since = T0 + 6};
    compute_reach(&w, T0 + 12, facts, &v);
    assert_false(v.changed);
    session_verdict_release(&v);

    /* It connects: Ready, AppReachable, the endpoint Reachable since the probe. */
    facts[0] = (struct session_reach_facts){
        .results = 3, .last_ok = 1, .ok_since = T0 + 15, .last_seen = T0 + 15};
    compute_reach(&w, T0 + 15.2, facts, &v);
    assert_true(v.changed);
    assert_string_equal(cond_status(v.status, "Ready"), "True");
    assert_string_equal(cond_status(v.status, "AppReachable"), "True");
    assert_string_equal(cond_status(v.status, "Reconciling"), "False");
    assert_string_equal(text(endpoint_of(v.status, 0), "state"), "Reachable");
    assert_string_equal(text(endpoint_of(v.status, 0), "since"), "2026-03-01T10:00:15Z");
    world_status(&w, v.status);
    session_verdict_release(&v);
    /* Probed again at the resync: still reachable, no write. */
    facts[0].results = 9;
    facts[0].last_seen = T0 + 3600;
    compute_reach(&w, T0 + 3600.5, facts, &v);
    assert_false(v.changed);
    session_verdict_release(&v);
    world_free(&w);
}

static void a_port_never_reachable_degrades_the_session_after_the_timeout(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    world_pod(&w, "running");
    struct session_reach_facts facts[SESSION_MAX_PORTS] = {{0}};
    facts[0] = (struct session_reach_facts){.results = 6, .fail_since = T0 + 6};
    struct session_verdict v;
    compute_reach(&w, T0 + 20, facts, &v);
    world_status(&w, v.status);
    session_verdict_release(&v);
    compute_reach(&w, T0 + 36, facts, &v);
    assert_true(v.changed);
    assert_string_equal(text(v.status, "phase"), "Running"); /* not Failed */
    assert_string_equal(text(v.status, "reason"), "AppUnreachable");
    const char *msg = text(v.status, "message");
    assert_non_null(strstr(msg, "TCP port 8080"));
    assert_non_null(strstr(msg, "for 30s"));
    assert_non_null(strstr(msg, "kubectl logs -n demo telo-run-hello -c session"));
    assert_string_equal(cond_status(v.status, "Ready"), "False");
    assert_string_equal(text(condition(v.status, "Ready"), "reason"), "AppUnreachable");
    assert_string_equal(cond_status(v.status, "Stalled"), "True");
    assert_string_equal(text(condition(v.status, "Stalled"), "reason"), "AppUnreachable");
    assert_string_equal(cond_status(v.status, "Reconciling"), "False");
    assert_string_equal(text(condition(v.status, "AppReachable"), "reason"), "Unreachable");
    assert_string_equal(text(endpoint_of(v.status, 0), "state"), "Unreachable");
    assert_string_equal(text(endpoint_of(v.status, 0), "since"), "2026-03-01T10:00:35Z");
    assert_string_equal(v.event_type, "Warning");
    world_status(&w, v.status);
    session_verdict_release(&v);
    /* It stays so without a write while it keeps refusing. */
    facts[0].results = 20;
    compute_reach(&w, T0 + 100, facts, &v);
    assert_false(v.changed);
    session_verdict_release(&v);
    /* And recovers by itself once it listens. */
    facts[0] = (struct session_reach_facts){
        .results = 21, .last_ok = 1, .ok_since = T0 + 105, .last_seen = T0 + 105};
    compute_reach(&w, T0 + 105.1, facts, &v);
    assert_null(at(v.status, "reason"));
    assert_string_equal(cond_status(v.status, "Ready"), "True");
    assert_string_equal(cond_status(v.status, "Stalled"), "False");
    session_verdict_release(&v);
    world_free(&w);
}

static void pods_outside_the_pod_cidrs_are_not_probed_and_ready_as_before(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, hello_json);
    struct telo_err err;
    assert_int_equal(session_config_set(w.cfg, "reachability.podCIDRs=10.85.0.0/24", &err), 0);
    world_pod(&w, "running"); /* 10.244.0.12: a kwok pod */
    struct session_reach_facts facts[SESSION_MAX_PORTS] = {{0}};
    struct session_verdict v;
    compute_reach(&w, T0 + 6, facts, &v);
    assert_string_equal(cond_status(v.status, "Ready"), "True");
    assert_string_equal(text(condition(v.status, "Ready"), "reason"), "Running");
    assert_string_equal(cond_status(v.status, "AppReachable"), "True");
    assert_string_equal(text(condition(v.status, "AppReachable"), "reason"), "NotProbed");
    assert_string_equal(cond_status(v.status, "Reconciling"), "False");
    assert_string_equal(text(endpoint_of(v.status, 0), "state"), "NotProbed");
    assert_string_equal(text(endpoint_of(v.status, 0), "message"),
                        "the pod IP 10.244.0.12 is outside the operator's reachability.podCIDRs: "
                        "not probed");
    session_verdict_release(&v);
    world_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(no_pod_is_pending_and_scheduling),
        cmocka_unit_test(the_own_pod_is_reported_with_its_uid),
        cmocka_unit_test(a_predecessors_pod_is_being_replaced),
        cmocka_unit_test(a_reported_predecessor_pod_is_no_pod_disappeared),
        cmocka_unit_test(pod_disappeared_needs_the_sessions_own_pod),
        cmocka_unit_test(a_foreign_pod_is_a_name_conflict),
        cmocka_unit_test(other_childrens_conflicts_and_replacements_are_said),
        cmocka_unit_test(blocked_on_a_missing_bundle_is_pending_and_stalled),
        cmocka_unit_test(a_new_pending_session_waits_for_its_pod_to_write_its_status),
        cmocka_unit_test(a_pending_that_corrects_a_shown_status_is_written_at_once),
        cmocka_unit_test(a_pending_with_an_image_decided_is_written_at_once),
        cmocka_unit_test(a_new_sessions_first_provisioning_waits_for_its_pod_to_settle),
        cmocka_unit_test(a_shown_status_or_a_report_does_not_settle),
        cmocka_unit_test(settling_is_capped_by_the_window),
        cmocka_unit_test(a_running_build_is_building_with_its_progress),
        cmocka_unit_test(a_built_image_is_pending_with_the_build_done),
        cmocka_unit_test(a_failed_build_fails_the_session_and_blocked_credentials_stall_it),
        cmocka_unit_test(scheduled_pod_without_statuses_is_scheduling),
        cmocka_unit_test(running_init_container_is_delivering_the_application),
        cmocka_unit_test(running_init_container_alone_is_delivering_the_application),
        cmocka_unit_test(container_creating_is_creating_container),
        cmocka_unit_test(image_pull_backoff_is_pulling_image),
        cmocka_unit_test(err_image_pull_is_pulling_image),
        cmocka_unit_test(another_waiting_reason_is_shown_verbatim),
        cmocka_unit_test(unschedulable_before_the_deadline_waits_for_a_node),
        cmocka_unit_test(unschedulable_after_the_deadline_fails),
        cmocka_unit_test(image_pull_backoff_past_the_deadline_fails_the_pull),
        cmocka_unit_test(stuck_creating_past_the_deadline_is_start_timeout),
        cmocka_unit_test(the_start_deadline_is_configurable),
        cmocka_unit_test(invalid_image_name_fails_at_once),
        cmocka_unit_test(config_error_fails_at_once),
        cmocka_unit_test(never_pull_fails_at_once),
        cmocka_unit_test(running_pod_is_running_and_ready),
        cmocka_unit_test(endpoints_without_a_base_domain_name_the_service),
        cmocka_unit_test(endpoints_with_a_base_domain_have_hosts_and_urls),
        cmocka_unit_test(named_ports_keep_their_names_in_endpoints),
        cmocka_unit_test(no_ports_no_endpoints),
        cmocka_unit_test(running_is_ready_only_once_its_tcp_ports_accept_connections),
        cmocka_unit_test(a_port_never_reachable_degrades_the_session_after_the_timeout),
        cmocka_unit_test(pods_outside_the_pod_cidrs_are_not_probed_and_ready_as_before),
        cmocka_unit_test(attach_and_inspect_urls_need_the_gateway),
        cmocka_unit_test(a_running_session_survives_an_unknown_pod_phase),
        cmocka_unit_test(succeeded_pod_records_exit_code_zero),
        cmocka_unit_test(failed_app_names_container_and_exit_code),
        cmocka_unit_test(an_apps_escape_sequences_reach_no_status_message),
        cmocka_unit_test(oom_killed),
        cmocka_unit_test(bundle_fetch_failed),
        cmocka_unit_test(deadline_exceeded),
        cmocka_unit_test(evicted),
        cmocka_unit_test(pod_disappeared),
        cmocka_unit_test(stopped_deletes_the_pod),
        cmocka_unit_test(stopped_before_a_pod_exists),
        cmocka_unit_test(a_failed_session_stays_failed_when_the_pod_disappears),
        cmocka_unit_test(a_succeeded_session_stays_succeeded),
        cmocka_unit_test(a_failed_start_keeps_deleting_its_pod),
        cmocka_unit_test(ttl_after_finished_requeues_then_deletes),
        cmocka_unit_test(ttl_after_finished_zero_deletes_at_once),
        cmocka_unit_test(recomputing_changes_nothing),
        cmocka_unit_test(transition_times_move_only_when_a_condition_flips),
        cmocka_unit_test(observed_generation_follows_the_spec),
        cmocka_unit_test(events_only_on_phase_or_reason_change),
        cmocka_unit_test(plain_provisioning_is_told_only_when_it_has_something_to_say),
        cmocka_unit_test(init_containers_come_first),
        cmocka_unit_test(state_comes_before_last_state),
        cmocka_unit_test(waiting_to_start_is_not_a_failure),
        cmocka_unit_test(fallbacks_are_message_then_reason_then_pod_failed),
        cmocka_unit_test(details_are_capped_at_500_characters),
        cmocka_unit_test(the_cap_counts_characters_not_bytes),
        cmocka_unit_test(the_cap_holds_in_start_timeouts),
        cmocka_unit_test(event_messages_stay_valid_utf8),
        cmocka_unit_test(an_unknown_status_phase_is_decided_afresh),
        cmocka_unit_test(a_running_session_ends_with_its_pod),
        cmocka_unit_test(a_pod_without_a_creation_time_counts_from_now),
        cmocka_unit_test(a_finished_session_deletes_a_pod_without_a_phase),
        cmocka_unit_test(a_bare_finished_status_is_kept_and_its_ttl_counts_from_now),
        cmocka_unit_test(a_ready_image_without_progress_is_scheduling),
        cmocka_unit_test(a_new_stopped_session_does_not_wait_for_a_pod),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
