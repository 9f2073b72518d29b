/* Tests for pkg/session/limits.c: which sessions hold a slot, and the line of those waiting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "session/config.h"
#include "session/limits.h"

#include <json.h>

#include <limits.h>
#include <string.h>

static enum session_limits_state classify_text(const char *json, int has_pod, int admitted)
{
    struct json_object *obj = json_tokener_parse(json);
    assert_non_null(obj);
    enum session_limits_state s = session_limits_classify(obj, has_pod, admitted);
    json_object_put(obj);
    return s;
}

#define META "\"metadata\":{\"name\":\"a\",\"namespace\":\"n\"}"

static void classify_by_phase_spec_and_pod(void **state)
{
    (void)state;
    /* New: waits, unless its pod exists or we admitted it. */
    assert_int_equal(classify_text("{" META ",\"spec\":{}}", 0, 0), SESSION_LIMITS_WAITS);
    assert_int_equal(classify_text("{" META ",\"spec\":{}}", 1, 0), SESSION_LIMITS_HOLDS);
    assert_int_equal(classify_text("{" META ",\"spec\":{}}", 0, 1), SESSION_LIMITS_HOLDS);
    /* Going: holds. */
    assert_int_equal(
        classify_text("{" META ",\"spec\":{},\"status\":{\"phase\":\"Running\"}}", 0, 0),
        SESSION_LIMITS_HOLDS);
    assert_int_equal(
        classify_text("{" META ",\"spec\":{},\"status\":{\"phase\":\"Building\"}}", 0, 0),
        SESSION_LIMITS_HOLDS);
    /* Pending: SessionLimit waits, another reason was admitted, none waits. */
    assert_int_equal(classify_text("{" META
                                   ",\"spec\":{},\"status\":{\"phase\":\"Pending\",\"reason\":"
                                   "\"SessionLimit\"}}",
                                   0, 0),
                     SESSION_LIMITS_WAITS);
    assert_int_equal(classify_text("{" META
                                   ",\"spec\":{},\"status\":{\"phase\":\"Pending\",\"reason\":"
                                   "\"BundleNotFound\"}}",
                                   0, 0),
                     SESSION_LIMITS_HOLDS);
    assert_int_equal(
        classify_text("{" META ",\"spec\":{},\"status\":{\"phase\":\"Pending\"}}", 0, 0),
        SESSION_LIMITS_WAITS);
    /* A run restarted while going keeps its slot. */
    assert_int_equal(classify_text("{" META ",\"spec\":{},\"status\":{\"phase\":\"Pending\","
                                   "\"run\":2,\"lastRun\":{\"phase\":\"Running\"}}}",
                                   0, 0),
                     SESSION_LIMITS_HOLDS);
    /* Finished and stopped hold nothing, even with their pod kept for its logs. */
    assert_int_equal(
        classify_text("{" META ",\"spec\":{},\"status\":{\"phase\":\"Succeeded\"}}", 1, 0),
        SESSION_LIMITS_OUT);
    assert_int_equal(classify_text("{" META ",\"spec\":{\"stopped\":true},\"status\":{\"phase\":"
                                   "\"Running\"}}",
                                   1, 1),
                     SESSION_LIMITS_OUT);
    assert_int_equal(classify_text("{\"metadata\":{\"name\":\"a\",\"deletionTimestamp\":"
                                   "\"2026-01-01T00:00:00Z\"},\"spec\":{}}",
                                   1, 0),
                     SESSION_LIMITS_OUT);
    /* About to start again: resumed, or a finished one restarted. */
    assert_int_equal(
        classify_text("{" META ",\"spec\":{},\"status\":{\"phase\":\"Stopped\"}}", 1, 0),
        SESSION_LIMITS_WAITS);
    assert_int_equal(classify_text("{" META ",\"spec\":{\"restartGeneration\":2},\"status\":{"
                                   "\"phase\":\"Failed\",\"restartGeneration\":1}}",
                                   1, 0),
                     SESSION_LIMITS_WAITS);
    assert_int_equal(classify_text("{" META ",\"spec\":{\"restartGeneration\":1},\"status\":{"
                                   "\"phase\":\"Failed\",\"restartGeneration\":1}}",
                                   1, 0),
                     SESSION_LIMITS_OUT);
    /* Junk where the status should be: a new session. */
    assert_int_equal(classify_text("{" META ",\"spec\":{},\"status\":{\"phase\":7}}", 0, 0),
                     SESSION_LIMITS_WAITS);
}

#define H SESSION_LIMITS_HOLDS
#define W SESSION_LIMITS_WAITS
#define O SESSION_LIMITS_OUT

static struct session_limits_place
decide(long max, long per_ns, const struct session_limits_entry *e, size_t n, size_t self)
{
    struct session_limits_config cfg = {.max_sessions = max, .max_per_namespace = per_ns};
    struct session_limits_place p;
    memset(&p, 0xff, sizeof(p));
    assert_int_equal(session_limits_decide(&cfg, e, n, self, &p), 0);
    return p;
}

static void the_namespace_line_is_oldest_first_then_by_name(void **state)
{
    (void)state;
    /* Three hold, a finished one does not count; four wait, given out of order. */
    const struct session_limits_entry e[] = {
        {"n", "a", 10, H}, {"n", "b", 11, H}, {"n", "c", 12, H}, {"n", "done", 1, O},
        {"n", "z", 20, W}, {"n", "e", 30, W}, {"n", "d", 20, W}, {"n", "late", -1, W},
    };
    size_t n = sizeof(e) / sizeof(e[0]);
    struct session_limits_place p = decide(0, 3, e, n, 6); /* d: first (20, "d" < "z") */
    assert_false(p.admitted);
    assert_string_equal(p.limit, "limits.maxSessionsPerNamespace");
    assert_int_equal(p.max, 3);
    assert_int_equal(p.holding, 3);
    assert_int_equal(p.position, 1);
    assert_int_equal(decide(0, 3, e, n, 4).position, 2); /* z */
    assert_int_equal(decide(0, 3, e, n, 5).position, 3); /* e */
    assert_int_equal(decide(0, 3, e, n, 7).position, 4); /* no creationTimestamp: last */
    /* Holding sessions are admitted whatever the count. */
    assert_true(decide(0, 3, e, n, 0).admitted);
    assert_int_equal(decide(0, 3, e, n, 4).holding, 3);
    /* One slot frees: the first in line starts, the second moves up. The slot is handed on, not
     * freed: the count of sessions holding one stays 3 (with 2 it would be written twice). */
    struct session_limits_entry f[sizeof(e) / sizeof(e[0])];
    memcpy(f, e, sizeof(e));
    f[0].state = O;
    assert_true(decide(0, 3, f, n, 6).admitted);
    p = decide(0, 3, f, n, 4);
    assert_false(p.admitted);
    assert_int_equal(p.position, 1);
    assert_int_equal(p.holding, 3);
    /* Once d holds its slot, the same. */
    f[6].state = H;
    p = decide(0, 3, f, n, 4);
    assert_int_equal(p.position, 1);
    assert_int_equal(p.holding, 3);
    /* No limit: everyone starts. */
    assert_true(decide(0, 0, e, n, 5).admitted);
}

static void namespaces_have_their_own_lines_and_the_cluster_one_skips_the_blocked(void **state)
{
    (void)state;
    const struct session_limits_entry e[] = {
        {"n", "a", 1, H}, {"n", "b", 2, H},
        {"m", "c", 3, H}, {"n", "x", 4, W}, /* blocked by n's limit of 2 */
        {"m", "y", 5, W},                   /* m has room: the cluster's next */
        {"m", "w", 6, W},
    };
    size_t n = sizeof(e) / sizeof(e[0]);
    /* Per namespace only: n full, m has room for both. */
    assert_false(decide(0, 2, e, n, 3).admitted);
    assert_true(decide(0, 2, e, n, 4).admitted);
    assert_false(decide(0, 2, e, n, 5).admitted); /* m: c and y make 2 */
    /* Cluster limit 4: x waits on its namespace, so y takes the last slot, w waits. */
    struct session_limits_place p = decide(4, 2, e, n, 4);
    assert_true(p.admitted);
    p = decide(4, 0, e, n, 3); /* without a namespace limit x is first */
    assert_true(p.admitted);
    p = decide(4, 0, e, n, 4);
    assert_false(p.admitted);
    assert_string_equal(p.limit, "limits.maxSessions");
    assert_int_equal(p.position, 1);
    assert_int_equal(p.holding, 4); /* a, b, c and x, which starts */
    p = decide(3, 0, e, n, 4);
    assert_int_equal(p.position, 2);
    assert_int_equal(p.holding, 3);                      /* x waits too */
    assert_int_equal(decide(4, 0, e, n, 5).position, 2); /* w: behind x and y */
}

static void the_message_names_the_limit_and_the_line(void **state)
{
    (void)state;
    struct session_limits_place p = {.admitted = 0,
                                     .limit = "limits.maxSessionsPerNamespace",
                                     .max = 3,
                                     .holding = 3,
                                     .position = 2};
    char msg[512];
    session_limits_message(&p, "team-a", msg, sizeof(msg));
    assert_non_null(strstr(msg, "limits.maxSessionsPerNamespace is 3 and 3 sessions in "
                                "namespace team-a hold a slot; 1 waiting ahead of this one "
                                "(place 2 in line)"));
    assert_non_null(strstr(msg, "kubectl get telosessions -n team-a"));
    p.limit = "limits.maxSessions";
    p.holding = 1;
    p.position = 1;
    session_limits_message(&p, "team-a", msg, sizeof(msg));
    assert_non_null(
        strstr(msg, "limits.maxSessions is 3 and 1 session in all namespaces holds a slot; 0 "
                    "waiting ahead"));
}

static void the_config_keys_take_zero_for_none(void **state)
{
    (void)state;
    struct session_config *c = session_config_new();
    struct telo_err err;
    assert_int_equal(c->max_sessions, 0);
    assert_int_equal(c->max_sessions_per_namespace, 0);
    assert_int_equal(session_config_set(c, "limits.maxSessionsPerNamespace=3", &err), 0);
    assert_int_equal(c->max_sessions_per_namespace, 3);
    assert_int_equal(session_config_set(c, "limits.maxSessions=0", &err), 0);
    assert_int_equal(c->max_sessions, 0);
    assert_true(session_config_set(c, "limits.maxSessions=-1", &err) < 0);
    assert_non_null(strstr(err.msg, "limits.maxSessions: want a whole number from 0 to"));
    assert_true(session_config_set(c, "limits.maxSessions=lots", &err) < 0);
    /* The other whole-number keys still refuse 0. */
    assert_true(session_config_set(c, "workers=0", &err) < 0);
    assert_non_null(strstr(err.msg, "from 1 to"));
    session_config_free(c);
}

/* The place shown: exact at the front, kept further back until it improves by a quarter. */
static void the_place_shown_is_exact_at_the_front_and_coarse_behind(void **state)
{
    (void)state;
    assert_int_equal(session_limits_shown_position(0, 700), 700); /* first time: as it is */
    assert_int_equal(session_limits_shown_position(11, 10), 10);  /* the front: exact */
    assert_int_equal(session_limits_shown_position(40, 31), 40);  /* up by less than a quarter */
    assert_int_equal(session_limits_shown_position(40, 30), 30);  /* up by a quarter */
    assert_int_equal(session_limits_shown_position(40, 45), 45);  /* moved back: as it is */
    assert_int_equal(session_limits_shown_position(12, 11), 12);
    /* status.queuePosition comes from a cache: any number, and no overflow (UBSan: 4e18 * 3). */
    assert_int_equal(session_limits_shown_position(LONG_MAX, 100), 100);
    assert_int_equal(session_limits_shown_position(4000000000000000000L, 3000000000000000001L),
                     4000000000000000000L);
    assert_int_equal(session_limits_shown_position(4000000000000000000L, 3000000000000000000L),
                     3000000000000000000L);
}

/* A line of 1,000 drained one slot at a time: every session's status is written when its place
 * shown changes. Shown exactly, that is N(N+1)/2 writes; here each session is written about
 * log(N) times, the place shown is never better than the real one, and the front is exact. */
static void draining_a_line_writes_each_session_about_log_n_times(void **state)
{
    (void)state;
    enum { N = 1000 };
    static long shown[N], written[N];
    long writes = 0, most = 0;
    for (long freed = 0; freed < N; freed++) {
        for (long i = freed; i < N; i++) {
            long place = i - freed + 1;
            long next = session_limits_shown_position(shown[i], place);
            assert_true(next >= place);
            if (place <= SESSION_LIMITS_EXACT_PLACES)
                assert_int_equal(next, place);
            if (next != shown[i]) {
                writes++;
                written[i]++;
                shown[i] = next;
            }
        }
    }
    for (long i = 0; i < N; i++)
        most = written[i] > most ? written[i] : most;
    print_message("draining %d: %ld status writes (exact: %d), at most %ld for one session\n", N,
                  writes, N * (N + 1) / 2, most);
    /* 10 exact places, then a quarter at a time from 1000 down to 10: 10 + log(100)/log(4/3). */
    assert_true(most <= 10 + 17);
    assert_true(writes <= 27L * N);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(classify_by_phase_spec_and_pod),
        cmocka_unit_test(the_namespace_line_is_oldest_first_then_by_name),
        cmocka_unit_test(namespaces_have_their_own_lines_and_the_cluster_one_skips_the_blocked),
        cmocka_unit_test(the_message_names_the_limit_and_the_line),
        cmocka_unit_test(the_config_keys_take_zero_for_none),
        cmocka_unit_test(the_place_shown_is_exact_at_the_front_and_coarse_behind),
        cmocka_unit_test(draining_a_line_writes_each_session_about_log_n_times),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
