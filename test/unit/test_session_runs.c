/* Tests for pkg/session/runs.c and the runs in the status (issue 17): resume after a stop, a
 * restart by spec.restartGeneration, status.lastRun, and a pod of an earlier run never reported
 * as the session's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "session/config.h"
#include "session/plan.h"
#include "session/runs.h"
#include "session/spec.h"
#include "session/status.h"

#include <json.h>

#include <stdio.h>
#include <string.h>

/* 2026-03-01T10:00:00Z: the fixture pod was created then. */
#define T0 1772359200.0

static const char hello_json[] =
    "{\"apiVersion\":\"telo.run/v1alpha1\",\"kind\":\"TeloSession\","
    "\"metadata\":{\"name\":\"hello\",\"namespace\":\"demo\",\"generation\":1,"
    "\"uid\":\"0b6f2d7a-6a44-4c84-8a55-2d9b3c0e1f00\","
    "\"creationTimestamp\":\"2026-03-01T09:59:59Z\"},"
    "\"spec\":{\"entry\":\"app/telo.yaml\",\"bundle\":{\"configMap\":{\"name\":\"hello-app\"}}}}";

struct world {
    struct session_config *cfg;
    struct json_object *obj;
    struct session s;
    struct json_object *pod;
};

static void world_parse(struct world *w)
{
    session_spec_release(&w->s);
    struct telo_err err;
    assert_int_equal(session_spec_parse(w->obj, &w->s, &err), 0);
}

static void world_init(struct world *w, const char *spec_extra, const char *status)
{
    memset(w, 0, sizeof(*w));
    w->cfg = session_config_new();
    w->obj = json_tokener_parse(hello_json);
    assert_non_null(w->obj);
    struct json_object *spec = json_object_object_get(w->obj, "spec");
    if (spec_extra) {
        struct json_object *extra = json_tokener_parse(spec_extra);
        json_object_object_foreach(extra, k, v)
        {
            json_object_object_add(spec, k, json_object_get(v));
        }
        json_object_put(extra);
    }
    if (status)
        json_object_object_add(w->obj, "status", json_tokener_parse(status));
    world_parse(w);
}

static void world_set(struct world *w, const char *key, struct json_object *v)
{
    json_object_object_add(json_object_object_get(w->obj, "spec"), key, v);
    world_parse(w);
}

static void world_status(struct world *w, struct json_object *status)
{
    json_object_object_add(w->obj, "status", json_object_get(status));
    world_parse(w);
}

static void world_pod(struct world *w, const char *name, const char *run)
{
    json_object_put(w->pod);
    w->pod = NULL;
    if (!name)
        return;
    char path[512];
    snprintf(path, sizeof(path), "%s/session/pod-%s.json", TELO_TEST_DATA, name);
    w->pod = json_object_from_file(path);
    assert_non_null(w->pod);
    if (run)
        json_object_object_add(
            json_object_object_get(json_object_object_get(w->pod, "metadata"), "labels"),
            SESSION_RUN_LABEL, json_object_new_string(run));
}

static void world_free(struct world *w)
{
    session_spec_release(&w->s);
    json_object_put(w->obj);
    json_object_put(w->pod);
    session_config_free(w->cfg);
}

static void compute(struct world *w, double now, struct session_verdict *v)
{
    struct session_observation obs = {
        .s = &w->s, .cfg = w->cfg, .pod = w->pod, .image = "telorun/node:latest-slim", .now = now};
    assert_int_equal(session_status_compute(&obs, v), 0);
    assert_non_null(v->status);
}

static struct json_object *at(struct json_object *o, const char *path)
{
    char part[64];
    while (o && *path) {
        size_t n = strcspn(path, ".");
        snprintf(part, sizeof(part), "%.*s", (int)n, path);
        o = json_object_object_get(o, part);
        path += n + (path[n] == '.');
    }
    return o;
}

static const char *text(struct json_object *o, const char *path)
{
    return json_object_get_string(at(o, path));
}

static long long num(struct json_object *o, const char *path)
{
    return json_object_get_int64(at(o, path));
}

static void run_numbers_come_from_status_and_pod_label(void **state)
{
    (void)state;
    struct json_object *st = json_tokener_parse("{\"run\":3}");
    assert_int_equal(session_run_number(st), 3);
    assert_int_equal(session_run_number(NULL), 1);
    json_object_object_add(st, "run", json_object_new_string("3"));
    assert_int_equal(session_run_number(st), 1);
    json_object_put(st);
    struct json_object *pod =
        json_tokener_parse("{\"metadata\":{\"labels\":{\"telo.run/run\":\"2\"}}}");
    assert_int_equal(session_run_of_pod(pod), 2);
    json_object_object_add(at(pod, "metadata.labels"), SESSION_RUN_LABEL,
                           json_object_new_string("2x"));
    assert_int_equal(session_run_of_pod(pod), 1);
    json_object_put(pod);
    assert_int_equal(session_run_of_pod(NULL), 1);
}

static void restarts_are_due_on_resume_and_a_raised_generation_only(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, NULL, NULL);
    assert_int_equal(session_restart_due(&w.s), SESSION_RESTART_NONE);
    world_free(&w);
    /* A new session with a generation takes it as acted on. */
    world_init(&w, "{\"restartGeneration\":4}", NULL);
    assert_int_equal(session_restart_due(&w.s), SESSION_RESTART_NONE);
    struct session_verdict v;
    compute(&w, T0, &v);
    assert_int_equal(num(v.status, "restartGeneration"), 4);
    world_status(&w, v.status);
    session_verdict_release(&v);
    assert_int_equal(session_restart_due(&w.s), SESSION_RESTART_NONE);
    world_set(&w, "restartGeneration", json_object_new_int(5));
    assert_int_equal(session_restart_due(&w.s), SESSION_RESTART_GENERATION);
    /* Stopped wins. */
    world_set(&w, "stopped", json_object_new_boolean(1));
    assert_int_equal(session_restart_due(&w.s), SESSION_RESTART_NONE);
    world_free(&w);
    world_init(&w, NULL, "{\"phase\":\"Stopped\",\"reason\":\"Stopped\"}");
    assert_int_equal(session_restart_due(&w.s), SESSION_RESTART_RESUME);
    world_free(&w);
    world_init(&w, "{\"stopped\":true}", "{\"phase\":\"Stopped\",\"reason\":\"Stopped\"}");
    assert_int_equal(session_restart_due(&w.s), SESSION_RESTART_NONE);
    world_free(&w);
}

static void resume_starts_run_two_and_keeps_the_stopped_run(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, NULL,
               "{\"phase\":\"Stopped\",\"reason\":\"Stopped\",\"message\":\"stopped by "
               "spec.stopped\",\"podName\":\"telo-run-hello\",\"podUID\":\"pod-1\","
               "\"startTime\":\"2026-03-01T10:00:02Z\",\"completionTime\":"
               "\"2026-03-01T10:05:00Z\"}");
    struct session_verdict v;
    compute(&w, T0 + 600, &v);
    assert_true(v.changed);
    assert_false(v.delete_pod);
    assert_string_equal(text(v.status, "phase"), "Pending");
    assert_int_equal(num(v.status, "run"), 2);
    assert_null(at(v.status, "podName"));
    assert_null(at(v.status, "podUID"));
    assert_null(at(v.status, "completionTime"));
    /* The new run's start is this reconcile (issue 17's startTime), not the old run's. */
    assert_non_null(text(v.status, "startTime"));
    assert_string_not_equal(text(v.status, "startTime"), "2026-03-01T10:00:02Z");
    assert_null(at(v.status, "reason"));
    assert_string_equal(text(v.status, "lastRun.podName"), "telo-run-hello");
    assert_string_equal(text(v.status, "lastRun.podUID"), "pod-1");
    assert_string_equal(text(v.status, "lastRun.phase"), "Stopped");
    assert_string_equal(text(v.status, "lastRun.reason"), "Stopped");
    assert_string_equal(text(v.status, "lastRun.finishedAt"), "2026-03-01T10:05:00Z");
    assert_string_equal(text(v.status, "lastRun.startTime"), "2026-03-01T10:00:02Z");
    assert_string_equal(v.event_type, "Normal");
    assert_string_equal(v.event_reason, "Resumed");
    /* The next pass keeps the history and goes on as a new session. */
    world_status(&w, v.status);
    session_verdict_release(&v);
    compute(&w, T0 + 601, &v);
    assert_false(v.changed);
    assert_int_equal(num(v.status, "run"), 2);
    assert_string_equal(text(v.status, "lastRun.podUID"), "pod-1");
    /* Its pod (labelled run 2) is the session's. */
    world_pod(&w, "running", "2");
    session_verdict_release(&v);
    compute(&w, T0 + 602, &v);
    assert_string_equal(text(v.status, "phase"), "Running");
    assert_string_equal(text(v.status, "podUID"), "7c1e5b0e-2f4d-4d7e-9a51-3f1f0d2c8a11");
    assert_int_equal(num(v.status, "run"), 2);
    assert_string_equal(text(v.status, "lastRun.podUID"), "pod-1");
    session_verdict_release(&v);
    world_free(&w);
}

/* status.run comes from a cache: a restart at the largest run keeps it rather than overflow
 * (UBSan: 9223372036854775807 + 1). */
static void a_restart_at_the_last_run_number_keeps_it(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, NULL,
               "{\"phase\":\"Stopped\",\"reason\":\"Stopped\",\"run\":9223372036854775807}");
    struct session_verdict v;
    compute(&w, T0 + 600, &v);
    assert_string_equal(text(v.status, "phase"), "Pending");
    assert_int_equal(num(v.status, "run"), INT64_MAX);
    session_verdict_release(&v);
    world_free(&w);
}

static void a_raised_generation_ends_the_running_pod_and_never_reports_it_again(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, NULL, NULL);
    world_pod(&w, "running", NULL);
    struct session_verdict v;
    compute(&w, T0 + 5, &v);
    assert_string_equal(text(v.status, "phase"), "Running");
    world_status(&w, v.status);
    session_verdict_release(&v);
    world_set(&w, "restartGeneration", json_object_new_int(1));
    compute(&w, T0 + 100, &v);
    assert_true(v.changed);
    assert_true(v.delete_pod);
    assert_string_equal(v.event_reason, "Restarted");
    assert_string_equal(text(v.status, "phase"), "Pending");
    assert_int_equal(num(v.status, "run"), 2);
    assert_int_equal(num(v.status, "restartGeneration"), 1);
    assert_null(at(v.status, "podName"));
    assert_string_equal(text(v.status, "lastRun.phase"), "Running");
    assert_string_equal(text(v.status, "lastRun.reason"), "Restarted");
    assert_string_equal(text(v.status, "lastRun.podUID"), "7c1e5b0e-2f4d-4d7e-9a51-3f1f0d2c8a11");
    assert_string_equal(text(v.status, "lastRun.finishedAt"), "2026-03-01T10:01:40Z");
    world_status(&w, v.status);
    session_verdict_release(&v);
    /* The old pod, still in the cache (run 1, no label): not the session's, and it goes. */
    compute(&w, T0 + 101, &v);
    assert_false(v.changed);
    assert_true(v.delete_pod);
    assert_string_equal(text(v.status, "phase"), "Pending");
    assert_null(at(v.status, "podName"));
    assert_string_equal(text(v.status, "progress.message"),
                        "Waiting for the previous run's pod to go");
    session_verdict_release(&v);
    /* Being deleted already: not deleted again. */
    json_object_object_add(json_object_object_get(w.pod, "metadata"), "deletionTimestamp",
                           json_object_new_string("2026-03-01T10:01:41Z"));
    compute(&w, T0 + 102, &v);
    assert_false(v.delete_pod);
    session_verdict_release(&v);
    /* Gone: an ordinary Pending, no PodDisappeared. */
    world_pod(&w, NULL, NULL);
    compute(&w, T0 + 103, &v);
    assert_string_equal(text(v.status, "phase"), "Pending");
    assert_null(at(v.status, "reason"));
    assert_string_equal(text(v.status, "progress.message"), "Scheduling");
    session_verdict_release(&v);
    world_free(&w);
}

static void a_finished_session_restarts_and_keeps_its_exit(void **state)
{
    (void)state;
    struct world w;
    world_init(
        &w, "{\"restartGeneration\":2}",
        "{\"phase\":\"Failed\",\"reason\":\"AppExited\",\"exitCode\":3,\"restartGeneration\":1,"
        "\"podName\":\"telo-run-hello\",\"podUID\":\"7c1e5b0e-2f4d-4d7e-9a51-3f1f0d2c8a11\","
        "\"completionTime\":\"2026-03-01T10:02:00Z\"}");
    world_pod(&w, "failed-exit3", NULL);
    struct session_verdict v;
    compute(&w, T0 + 200, &v);
    assert_true(v.changed);
    assert_true(v.delete_pod);
    assert_int_equal(num(v.status, "restartGeneration"), 2);
    assert_int_equal(num(v.status, "lastRun.exitCode"), 3);
    assert_string_equal(text(v.status, "lastRun.reason"), "AppExited");
    assert_string_equal(text(v.status, "lastRun.phase"), "Failed");
    assert_string_equal(text(v.status, "lastRun.finishedAt"), "2026-03-01T10:02:00Z");
    assert_null(at(v.status, "exitCode"));
    session_verdict_release(&v);
    world_free(&w);
}

static void a_new_runs_pod_carries_its_run_label(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, NULL, "{\"phase\":\"Pending\",\"run\":3}");
    struct json_object *pod = json_tokener_parse("{\"metadata\":{\"labels\":{}}}");
    session_run_label_pod(&w.s, pod);
    assert_string_equal(json_object_get_string(
                            json_object_object_get(at(pod, "metadata.labels"), SESSION_RUN_LABEL)),
                        "3");
    json_object_put(pod);
    world_free(&w);
    world_init(&w, NULL, NULL);
    pod = json_tokener_parse("{\"metadata\":{\"labels\":{}}}");
    session_run_label_pod(&w.s, pod);
    assert_int_equal(json_object_object_length(at(pod, "metadata.labels")), 0);
    json_object_put(pod);
    world_free(&w);
}

static size_t pod_writes(const struct session_plan *plan)
{
    size_t n = 0;
    for (size_t i = 0; i < plan->nwrites; i++)
        n += plan->writes[i].child == SESSION_PLAN_POD &&
             plan->writes[i].verb != SESSION_PLAN_DELETE;
    return n;
}

/* The pass that starts a new run writes its status first: the pod follows in the next pass,
 * labelled with the run, so it is never taken for an earlier run's and deleted. */
static void the_plan_makes_a_new_runs_pod_after_its_status(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, NULL, "{\"phase\":\"Stopped\",\"reason\":\"Stopped\"}");
    struct session_plan_obs obs = {.s = &w.s, .cfg = w.cfg, .now = T0};
    struct session_plan plan;
    assert_int_equal(session_plan_make(&obs, &plan), 0);
    assert_true(plan.verdict.changed);
    assert_int_equal(num(plan.verdict.status, "run"), 2);
    assert_int_equal(pod_writes(&plan), 0);
    world_status(&w, plan.verdict.status);
    session_plan_release(&plan);
    assert_int_equal(session_plan_make(&obs, &plan), 0);
    assert_int_equal(pod_writes(&plan), 1);
    struct json_object *labels = at(plan.writes[0].obj, "metadata.labels");
    for (size_t i = 0; i < plan.nwrites; i++) {
        if (plan.writes[i].child == SESSION_PLAN_POD)
            labels = at(plan.writes[i].obj, "metadata.labels");
    }
    assert_string_equal(json_object_get_string(json_object_object_get(labels, SESSION_RUN_LABEL)),
                        "2");
    session_plan_release(&plan);
    world_free(&w);
}

/* A session waiting for a slot gets its SessionLimit status and nothing else. */
static void the_plan_of_a_waiting_session_writes_only_its_status(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, NULL, NULL);
    struct session_plan_obs obs = {.s = &w.s,
                                   .cfg = w.cfg,
                                   .now = T0,
                                   .limit_waiting = 1,
                                   .limit_message = "limits.maxSessions is 1",
                                   .queue_position = 4};
    assert_int_equal(session_plan_learn(&obs), SESSION_PLAN_LEARN_NOTHING);
    struct session_plan plan;
    assert_int_equal(session_plan_make(&obs, &plan), 0);
    assert_int_equal(plan.nwrites, 0);
    assert_true(plan.verdict.changed);
    assert_null(plan.deferred.status);
    assert_string_equal(text(plan.verdict.status, "phase"), "Pending");
    assert_string_equal(text(plan.verdict.status, "reason"), "SessionLimit");
    assert_string_equal(text(plan.verdict.status, "message"), "limits.maxSessions is 1");
    assert_int_equal(num(plan.verdict.status, "queuePosition"), 4);
    assert_string_equal(text(plan.verdict.status, "progress.message"),
                        "Waiting for a session slot");
    assert_true(plan.requeue_after > 0 && plan.requeue_after <= 30);
    session_plan_release(&plan);
    /* Admitted: the slot's status goes, the children come. */
    obs.limit_waiting = 0;
    obs.limit_message = NULL;
    obs.queue_position = 0;
    assert_int_equal(session_plan_learn(&obs), SESSION_PLAN_LEARN_BUNDLE);
    world_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(run_numbers_come_from_status_and_pod_label),
        cmocka_unit_test(restarts_are_due_on_resume_and_a_raised_generation_only),
        cmocka_unit_test(resume_starts_run_two_and_keeps_the_stopped_run),
        cmocka_unit_test(a_restart_at_the_last_run_number_keeps_it),
        cmocka_unit_test(a_raised_generation_ends_the_running_pod_and_never_reports_it_again),
        cmocka_unit_test(a_finished_session_restarts_and_keeps_its_exit),
        cmocka_unit_test(a_new_runs_pod_carries_its_run_label),
        cmocka_unit_test(the_plan_makes_a_new_runs_pod_after_its_status),
        cmocka_unit_test(the_plan_of_a_waiting_session_writes_only_its_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
