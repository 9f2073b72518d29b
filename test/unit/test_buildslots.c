/* Tests for pkg/session/buildslots.c: which build Jobs count, per namespace and in all, the
 * creates the cache does not show yet, and the order in which waiting sessions get a slot. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "cache/store.h"
#include "imagebuild/job.h"
#include "session/buildslots.h"
#include "session/config.h"
#include "session/expect.h"

#include <json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T0 1772359200.0

struct fixture {
    struct cache_store *jobs;
    struct session_build_slots *slots;
    struct session_config *cfg;
    char msg[256];
};

static void setup(struct fixture *f, long max, long max_ns)
{
    memset(f, 0, sizeof(*f));
    f->jobs = cache_store_new(NULL, 0);
    f->slots = session_build_slots_new();
    f->cfg = session_config_new();
    assert_non_null(f->jobs);
    assert_non_null(f->slots);
    assert_non_null(f->cfg);
    f->cfg->build_max_concurrent = max;
    f->cfg->build_max_concurrent_per_namespace = max_ns;
}

static void teardown(struct fixture *f)
{
    cache_store_free(f->jobs);
    session_build_slots_free(f->slots);
    session_config_free(f->cfg);
}

/* A build Job of the session requested_by ("ns/name"); condition: NULL (running) or the type of
 * a condition that is True. */
static void job(struct fixture *f, const char *name, const char *requested_by,
                const char *condition)
{
    char ended[128] = "";
    if (condition)
        snprintf(ended, sizeof(ended), "{\"type\":\"%s\",\"status\":\"True\"},", condition);
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"metadata\":{\"name\":\"%s\","
             "\"namespace\":\"telo-builds\",\"uid\":\"uid-%s\",\"resourceVersion\":\"1\","
             "\"annotations\":{\"" BUILD_ANNOTATION_BY "\":\"%s\"}},\"status\":{\"conditions\":"
             "[%s{\"type\":\"Failed\",\"status\":\"False\"}]}}",
             name, name, requested_by, ended);
    struct json_object *o = json_tokener_parse(text);
    assert_non_null(o);
    struct cache_object *replaced = NULL;
    assert_int_equal(cache_store_put(f->jobs, o, &replaced, NULL, NULL), 0);
    cache_object_free(replaced);
    json_object_put(o);
}

/* Whether session ("ns/name") may start a build now. */
static int may(struct fixture *f, const char *session, double now)
{
    char ns[64];
    snprintf(ns, sizeof(ns), "%.*s", (int)(strchr(session, '/') - session), session);
    f->msg[0] = '\0';
    return session_build_slots_free_for(f->slots, f->cfg, f->jobs, ns, session, now, f->msg,
                                        sizeof(f->msg));
}

/* Whether namespace ns's one session (ns/s) may start a build now. */
static int may_start(struct fixture *f, const char *ns, double now)
{
    char session[80];
    snprintf(session, sizeof(session), "%s/s", ns);
    return may(f, session, now);
}

static void no_limit_lets_every_build_start(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, 0, 0);
    for (int i = 0; i < 50; i++) {
        char name[32];
        snprintf(name, sizeof(name), "telo-build-%d", i);
        job(&f, name, "team-a/s", NULL);
    }
    assert_true(may_start(&f, "team-a", T0));
    assert_true(may_start(&f, "team-a", T0)); /* and with no store at all */
    assert_true(
        session_build_slots_free_for(f.slots, f.cfg, NULL, "x", "x/s", T0, f.msg, sizeof(f.msg)));
    teardown(&f);
}

static void finished_jobs_free_their_slot(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, 2, 0);
    job(&f, "telo-build-a", "team-a/s1", NULL);
    job(&f, "telo-build-b", "team-b/s1", "Complete");
    job(&f, "telo-build-c", "team-b/s2", "Failed");
    job(&f, "telo-build-d", "team-b/s3", "FailureTarget");
    job(&f, "telo-build-e", "team-b/s4", "SuccessCriteriaMet");
    assert_true(may_start(&f, "team-c", T0));
    job(&f, "telo-build-f", "team-b/s5", NULL);
    assert_false(may_start(&f, "team-c", T0));
    assert_string_equal(f.msg, "Waiting for a build slot: 2 builds run, at most 2 "
                               "(build.maxConcurrent)");
    job(&f, "telo-build-f", "team-b/s5", "Complete");
    assert_true(may_start(&f, "team-c", T0));
    teardown(&f);
}

static void one_namespace_cannot_take_every_slot(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, 10, 1);
    job(&f, "telo-build-a", "team-a/s1", NULL);
    assert_false(may_start(&f, "team-a", T0));
    assert_string_equal(f.msg, "Waiting for a build slot: 1 build of namespace team-a runs, at "
                               "most 1 (build.maxConcurrentPerNamespace)");
    /* Another tenant builds; a namespace that only starts with "team-a" is another one. */
    assert_true(may_start(&f, "team-b", T0));
    assert_true(may_start(&f, "team", T0));
    job(&f, "telo-build-b", "team-ab/s1", NULL);
    assert_true(may_start(&f, "team-b", T0));
    /* A Job without the annotation (made by hand) counts in all, for no namespace. */
    job(&f, "telo-build-c", "", NULL);
    assert_true(may_start(&f, "team-b", T0));
    teardown(&f);
}

static void a_create_counts_before_the_cache_shows_it(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, 0, 2);
    /* A burst: both creates are out before the informer shows either. */
    assert_int_equal(
        session_build_slots_started(f.slots, "telo-builds/telo-build-a", "team-a/s1", T0), 0);
    assert_true(may_start(&f, "team-a", T0));
    assert_int_equal(
        session_build_slots_started(f.slots, "telo-builds/telo-build-b", "team-a/s2", T0), 0);
    assert_false(may_start(&f, "team-a", T0 + 1));
    assert_string_equal(f.msg, "Waiting for a build slot: 2 builds of namespace team-a run, at "
                               "most 2 (build.maxConcurrentPerNamespace)");
    /* The cache shows a, finished: it counts no more, as cached, nor as started. */
    job(&f, "telo-build-a", "team-a/s1", "Complete");
    assert_true(may_start(&f, "team-a", T0 + 1));
    /* b's create was refused: it never ran. */
    session_build_slots_refused(f.slots, "telo-builds/telo-build-b");
    assert_int_equal(
        session_build_slots_started(f.slots, "telo-builds/telo-build-c", "team-a/s3", T0), 0);
    assert_int_equal(
        session_build_slots_started(f.slots, "telo-builds/telo-build-c", "team-a/s3", T0),
        0); /* started twice: still one */
    assert_true(may_start(&f, "team-a", T0 + 1));
    assert_int_equal(
        session_build_slots_started(f.slots, "telo-builds/telo-build-d", "team-a/s4", T0), 0);
    assert_false(may_start(&f, "team-a", T0 + 1));
    /* Never seen for longer than an expectation lives: deleted at once, or never made. */
    assert_true(may_start(&f, "team-a", T0 + SESSION_EXPECT_TTL_S + 1));
    teardown(&f);
}

static void a_free_slot_goes_to_the_namespace_with_fewer_builds_running(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, 2, 0);
    job(&f, "telo-build-a1", "team-a/s1", NULL);
    job(&f, "telo-build-a2", "team-a/s2", NULL);
    assert_false(may(&f, "team-a/s3", T0));
    assert_false(may(&f, "team-b/s1", T0 + 1));
    assert_int_equal(session_build_slots_waiting(f.slots), 2);
    /* a1 ends. team-a's waiter asked first, but team-b has no build running. */
    job(&f, "telo-build-a1", "team-a/s1", "Complete");
    assert_false(may(&f, "team-a/s3", T0 + 2));
    assert_string_equal(f.msg, "Waiting for a build slot: 1 session ahead (namespaces with fewer "
                               "builds running first, then the longest waiting)");
    assert_true(may(&f, "team-b/s1", T0 + 3));
    /* Granted, it holds its place until its Job's create; then the Job counts. */
    assert_false(may(&f, "team-a/s3", T0 + 4));
    assert_int_equal(
        session_build_slots_started(f.slots, "telo-builds/telo-build-b1", "team-b/s1", T0 + 4), 0);
    assert_int_equal(session_build_slots_waiting(f.slots), 1);
    assert_false(may(&f, "team-a/s3", T0 + 5));
    assert_string_equal(f.msg, "Waiting for a build slot: 2 builds run, at most 2 "
                               "(build.maxConcurrent)");
    teardown(&f);
}

static void within_a_namespace_the_longest_waiting_goes_first(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, 0, 1);
    job(&f, "telo-build-a1", "team-a/s1", NULL);
    assert_false(may(&f, "team-a/s2", T0));
    assert_false(may(&f, "team-a/s3", T0 + 1));
    job(&f, "telo-build-a1", "team-a/s1", "Complete");
    /* s3 is looked at first; s2 has waited longer. */
    assert_false(may(&f, "team-a/s3", T0 + 12));
    assert_string_equal(f.msg, "Waiting for a build slot: 1 session ahead (namespaces with fewer "
                               "builds running first, then the longest waiting)");
    assert_true(may(&f, "team-a/s2", T0 + 12));
    /* Another namespace is not behind team-a's line. */
    assert_true(may(&f, "team-b/s1", T0 + 12));
    teardown(&f);
}

static void a_waiter_that_stops_asking_or_needs_no_slot_leaves_the_line(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, 1, 0);
    job(&f, "telo-build-a1", "team-a/s1", NULL);
    assert_false(may(&f, "team-b/s1", T0));
    assert_false(may(&f, "team-c/s1", T0 + 1));
    job(&f, "telo-build-a1", "team-a/s1", "Complete");
    /* team-b's session was deleted: it asks no more, and leaves the line after the TTL. */
    assert_false(may(&f, "team-c/s1", T0 + 10));
    assert_true(may(&f, "team-c/s1", T0 + 1 + SESSION_BUILD_SLOTS_WAITER_TTL_S));
    assert_int_equal(session_build_slots_waiting(f.slots), 1);
    /* team-c's image appeared meanwhile: it says so, and the next one need not wait for it. */
    session_build_slots_forget(f.slots, "team-c/s1");
    assert_true(may(&f, "team-d/s1", T0 + 30));
    teardown(&f);
}

struct emitted {
    char keys[32][80];
    size_t n;
};

static void collect(void *ctx, const char *session)
{
    struct emitted *e = ctx;
    assert_true(e->n < 32);
    snprintf(e->keys[e->n++], sizeof(e->keys[0]), "%s", session);
}

static int by_text(const void *a, const void *b)
{
    return strcmp(a, b);
}

static void a_job_change_wakes_the_first_in_line_of_the_longest_waiting_namespaces(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, 1, 0);
    job(&f, "telo-build-x", "team-x/s", NULL);
    struct emitted e = {0};
    session_build_slots_heads(f.slots, collect, &e);
    assert_int_equal(e.n, 0);
    /* 20 namespaces wait with two sessions each, ns-k's first since T0 + k/2: the later ones
     * ask first, so a namespace's head is found after its other session. */
    char session[80];
    for (int k = 19; k >= 0; k--) {
        snprintf(session, sizeof(session), "ns-%02d/late", k);
        assert_false(may(&f, session, T0 + 12 + k * 0.5));
    }
    for (int k = 0; k < 20; k++) {
        snprintf(session, sizeof(session), "ns-%02d/early", k);
        assert_false(may(&f, session, T0 + k * 0.5));
    }
    assert_int_equal(session_build_slots_waiting(f.slots), 40);
    session_build_slots_heads(f.slots, collect, &e);
    assert_int_equal(e.n, SESSION_BUILD_SLOTS_HEADS);
    qsort(e.keys, e.n, sizeof(e.keys[0]), by_text);
    for (int k = 0; k < SESSION_BUILD_SLOTS_HEADS; k++) {
        snprintf(session, sizeof(session), "ns-%02d/early", k);
        assert_string_equal(e.keys[k], session);
    }
    teardown(&f);
}

static void a_job_runs_until_a_true_end_condition(void **state)
{
    (void)state;
    struct json_object *j = json_tokener_parse(
        "{\"status\":{\"conditions\":[{\"type\":\"Complete\",\"status\":\"False\"}]}}");
    assert_true(session_build_slots_job_runs(j));
    json_object_put(j);
    j = json_tokener_parse("{\"status\":{\"conditions\":{\"type\":\"Complete\"}}}");
    assert_true(session_build_slots_job_runs(j)); /* not an array: read as none */
    json_object_put(j);
    assert_true(session_build_slots_job_runs(NULL));
}

/* Every waiting session asks at each of its reconciles: the cached Jobs are counted once per
 * change of the cache, not once per ask (each count parses every cached Job). A change is seen
 * at the next ask: a Job that finished frees its slot at once. */
static void the_cached_jobs_are_counted_once_per_change(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, 2, 0);
    for (int i = 0; i < 200; i++) {
        char name[32];
        snprintf(name, sizeof(name), "telo-build-%d", i);
        job(&f, name, "team-a/s", i < 2 ? NULL : "Complete");
    }
    for (int i = 0; i < 100; i++) {
        char session[32];
        snprintf(session, sizeof(session), "team-%d/s", i % 7);
        assert_int_equal(may(&f, session, 1.0), 0);
    }
    assert_int_equal(session_build_slots_counts(f.slots), 1);
    job(&f, "telo-build-0", "team-a/s", "Complete");
    assert_int_equal(may(&f, "team-0/s", 2.0), 1);
    assert_int_equal(session_build_slots_counts(f.slots), 2);
    teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(no_limit_lets_every_build_start),
        cmocka_unit_test(finished_jobs_free_their_slot),
        cmocka_unit_test(one_namespace_cannot_take_every_slot),
        cmocka_unit_test(a_create_counts_before_the_cache_shows_it),
        cmocka_unit_test(a_free_slot_goes_to_the_namespace_with_fewer_builds_running),
        cmocka_unit_test(within_a_namespace_the_longest_waiting_goes_first),
        cmocka_unit_test(a_waiter_that_stops_asking_or_needs_no_slot_leaves_the_line),
        cmocka_unit_test(a_job_change_wakes_the_first_in_line_of_the_longest_waiting_namespaces),
        cmocka_unit_test(a_job_runs_until_a_true_end_condition),
        cmocka_unit_test(the_cached_jobs_are_counted_once_per_change),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
