/* Tests for pkg/session/expect.c: a written status comes back whole while the cache is behind
 * it, is dropped once the cache has moved on or the expectation lapsed, and keys of any length. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "session/expect.h"

#include <json.h>
#include <stdio.h>
#include <string.h>

static struct json_object *status_of(int i)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"phase\":\"Running\",\"podName\":\"telo-run-s-%05d\",\"podIP\":\"10.0.%d.%d\","
             "\"observedGeneration\":1,\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\","
             "\"reason\":\"Running\",\"message\":\"the session's pod is running\","
             "\"lastTransitionTime\":\"2026-12-03T18:00:%02dZ\"}],\"progress\":{\"message\":"
             "\"Running\"}}",
             i, i / 250, i % 250, i % 60);
    return json_tokener_parse(text);
}

static void a_written_status_comes_back_while_the_cache_is_behind(void **state)
{
    (void)state;
    struct session_expectations *x = session_expect_new();
    enum { N = 200 };
    char key[320], rv[32], made[32];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "status/team-a/s-%05d", i);
        assert_int_equal(session_expect_set(x, key, 0, 100.0), 0);
        struct json_object *st = status_of(i);
        snprintf(rv, sizeof(rv), "%d", 1000 + i);
        session_expect_status(x, key, st, rv);
        snprintf(made, sizeof(made), "%d", 5000 + i);
        session_expect_status_made(x, key, made);
        json_object_put(st);
    }
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "status/team-a/s-%05d", i);
        snprintf(rv, sizeof(rv), "%d", 1000 + i);
        char got_rv[32] = "";
        struct json_object *got =
            session_expect_written_status(x, key, rv, 101.0, got_rv, sizeof(got_rv));
        assert_non_null(got);
        struct json_object *want = status_of(i);
        assert_true(json_object_equal(got, want));
        snprintf(made, sizeof(made), "%d", 5000 + i);
        assert_string_equal(got_rv, made);
        json_object_put(got);
        json_object_put(want);
        /* The cache shows the write (another resourceVersion): the cache is the truth now, and
         * the expectation is gone. */
        assert_null(session_expect_written_status(x, key, made, 101.0, got_rv, sizeof(got_rv)));
        assert_null(session_expect_written_status(x, key, rv, 101.0, got_rv, sizeof(got_rv)));
    }
    session_expect_free(x);
}

static void a_lapsed_expectation_gives_no_status(void **state)
{
    (void)state;
    struct session_expectations *x = session_expect_new();
    const char *key = "status/team-a/s";
    assert_int_equal(session_expect_set(x, key, 0, 100.0), 0);
    struct json_object *st = status_of(1);
    session_expect_status(x, key, st, "7");
    json_object_put(st);
    char made[32];
    assert_null(session_expect_written_status(x, key, "7", 100.0 + SESSION_EXPECT_TTL_S, made,
                                              sizeof(made)));
    session_expect_free(x);
}

/* Keys are kept at their own length: a long one (a 253-character name) is kept whole. */
static void keys_of_any_length(void **state)
{
    (void)state;
    struct session_expectations *x = session_expect_new();
    char name[254], key[320];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    session_expect_key(key, sizeof(key), "pods", "team-a", name);
    assert_int_equal(session_expect_set(x, key, 42, 10.0), 0);
    struct session_plan_expect e = session_expect_seen(x, key, 0, 11.0);
    assert_int_equal(e.held, 1);
    assert_int_equal(e.body, 42);
    assert_true(session_expect_answered(x, key, 11.0));
    session_expect_drop(x, key);
    assert_false(session_expect_answered(x, key, 11.0));
    session_expect_free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_written_status_comes_back_while_the_cache_is_behind),
        cmocka_unit_test(a_lapsed_expectation_gives_no_status),
        cmocka_unit_test(keys_of_any_length),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
