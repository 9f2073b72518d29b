/* Tests for pkg/session/cmmemo.c: one read of a bundle ConfigMap shared by the passes that need
 * it at once, its key names remembered for a while, failures never remembered. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "session/cmmemo.h"

#include <json.h>

#include <string.h>

#define TTL 5.0
#define KEY "demo/hello-bundle"

struct handed {
    void *waiters[8];
    void *answers[8];
    size_t n;
};

static void hand(void *waiter, void *answer)
{
    struct handed *h = *(struct handed **)answer;
    assert_true(h->n < 8);
    h->waiters[h->n] = waiter;
    h->answers[h->n] = answer;
    h->n++;
}

static struct json_object *configmap(void)
{
    return json_tokener_parse("{\"metadata\":{\"name\":\"hello-bundle\",\"resourceVersion\":\"7\"},"
                              "\"binaryData\":{\"bundle.tgz\":\"H4sIAAAA\"},"
                              "\"data\":{\"README\":\"hi\"}}");
}

static int has(struct json_object *keys, const char *section, const char *key)
{
    struct json_object *s = NULL, *v = NULL;
    return json_object_object_get_ex(keys, section, &s) && json_object_object_get_ex(s, key, &v) &&
           v != NULL;
}

static void test_first_caller_fetches_and_the_rest_wait_for_its_answer(void **state)
{
    (void)state;
    struct session_cm_memo *m = session_cm_memo_new(TTL);
    struct json_object *keys = NULL;
    int a, b, c;
    assert_int_equal(session_cm_memo_begin(m, KEY, 100, &a, &keys), SESSION_CM_FETCH);
    assert_int_equal(session_cm_memo_begin(m, KEY, 100.1, &b, &keys), SESSION_CM_WAIT);
    assert_int_equal(session_cm_memo_begin(m, KEY, 100.2, &c, &keys), SESSION_CM_WAIT);
    /* Another ConfigMap is a read of its own. */
    assert_int_equal(session_cm_memo_begin(m, "demo/other", 100.2, &c, &keys), SESSION_CM_FETCH);

    struct handed h = {0};
    struct handed *hp = &h;
    struct json_object *cm = configmap();
    session_cm_memo_settle(m, KEY, cm, 100.3, hand, &hp);
    json_object_put(cm);
    /* Every waiter, in order, with the answer of the read; the fetcher is not among them. */
    assert_int_equal(h.n, 2);
    assert_ptr_equal(h.waiters[0], &b);
    assert_ptr_equal(h.waiters[1], &c);
    assert_ptr_equal(h.answers[0], &hp);

    /* Within the ttl the key names answer at once, without the bytes. */
    assert_int_equal(session_cm_memo_begin(m, KEY, 105.2, &a, &keys), SESSION_CM_HIT);
    assert_true(has(keys, "binaryData", "bundle.tgz"));
    assert_true(has(keys, "data", "README"));
    assert_false(has(keys, "binaryData", "README"));
    assert_false(has(keys, "binaryData", "app.tgz"));
    struct json_object *v = NULL, *s = NULL;
    assert_true(json_object_object_get_ex(keys, "binaryData", &s));
    assert_true(json_object_object_get_ex(s, "bundle.tgz", &v));
    assert_true(json_object_is_type(v, json_type_boolean));
    session_cm_memo_free(m);
}

static void test_an_answer_expires_after_the_ttl_and_is_read_again(void **state)
{
    (void)state;
    struct session_cm_memo *m = session_cm_memo_new(TTL);
    struct json_object *keys = NULL, *cm = configmap();
    int a, b;
    struct handed h = {0};
    struct handed *hp = &h;
    assert_int_equal(session_cm_memo_begin(m, KEY, 100, &a, &keys), SESSION_CM_FETCH);
    session_cm_memo_settle(m, KEY, cm, 100, hand, &hp);
    assert_int_equal(session_cm_memo_begin(m, KEY, 104.9, &a, &keys), SESSION_CM_HIT);
    /* At 105 the answer is too old: this caller reads again, the next one waits for it. */
    assert_int_equal(session_cm_memo_begin(m, KEY, 105, &a, &keys), SESSION_CM_FETCH);
    assert_int_equal(session_cm_memo_begin(m, KEY, 105, &b, &keys), SESSION_CM_WAIT);
    session_cm_memo_settle(m, KEY, cm, 105.5, hand, &hp);
    assert_int_equal(h.n, 1);
    assert_ptr_equal(h.waiters[0], &b);
    assert_int_equal(session_cm_memo_begin(m, KEY, 110.4, &a, &keys), SESSION_CM_HIT);
    json_object_put(cm);
    session_cm_memo_free(m);
}

static void test_a_missing_configmap_or_a_failed_read_is_never_remembered(void **state)
{
    (void)state;
    struct session_cm_memo *m = session_cm_memo_new(TTL);
    struct json_object *keys = NULL;
    int a, b;
    struct handed h = {0};
    struct handed *hp = &h;
    assert_int_equal(session_cm_memo_begin(m, KEY, 100, &a, &keys), SESSION_CM_FETCH);
    assert_int_equal(session_cm_memo_begin(m, KEY, 100, &b, &keys), SESSION_CM_WAIT);
    /* 404: the waiter gets the same answer, and the next caller reads again (the user may have
     * created it since). */
    session_cm_memo_settle(m, KEY, NULL, 100.1, hand, &hp);
    assert_int_equal(h.n, 1);
    assert_int_equal(session_cm_memo_len(m), 0);
    assert_int_equal(session_cm_memo_begin(m, KEY, 100.2, &a, &keys), SESSION_CM_FETCH);
    session_cm_memo_free(m);
}

static void test_settling_an_unknown_key_calls_nobody(void **state)
{
    (void)state;
    struct session_cm_memo *m = session_cm_memo_new(TTL);
    struct handed h = {0};
    struct handed *hp = &h;
    struct json_object *cm = configmap();
    session_cm_memo_settle(m, KEY, cm, 100, hand, &hp);
    assert_int_equal(h.n, 0);
    /* Nothing was in flight, so nothing is remembered either. */
    assert_int_equal(session_cm_memo_len(m), 0);
    json_object_put(cm);
    session_cm_memo_free(m);
    session_cm_memo_free(NULL);
}

/* A waiter's call begins a read of the same key again (its pass needs it once more): the memo
 * answers from what settle just stored, and the list being called is not disturbed. */
static struct session_cm_memo *reentrant_memo;
static int reentrant_step = -1;

static void hand_and_begin(void *waiter, void *answer)
{
    (void)answer;
    struct json_object *keys = NULL;
    reentrant_step = (int)session_cm_memo_begin(reentrant_memo, KEY, 100.5, waiter, &keys);
}

static void test_a_waiter_may_call_back_into_the_memo(void **state)
{
    (void)state;
    reentrant_memo = session_cm_memo_new(TTL);
    struct json_object *keys = NULL, *cm = configmap();
    int a, b;
    assert_int_equal(session_cm_memo_begin(reentrant_memo, KEY, 100, &a, &keys), SESSION_CM_FETCH);
    assert_int_equal(session_cm_memo_begin(reentrant_memo, KEY, 100, &b, &keys), SESSION_CM_WAIT);
    session_cm_memo_settle(reentrant_memo, KEY, cm, 100.4, hand_and_begin, NULL);
    assert_int_equal(reentrant_step, SESSION_CM_HIT);
    json_object_put(cm);
    session_cm_memo_free(reentrant_memo);
}

static void test_old_answers_are_swept_and_waiters_dropped_on_free(void **state)
{
    (void)state;
    struct session_cm_memo *m = session_cm_memo_new(TTL);
    struct json_object *keys = NULL, *cm = configmap();
    int a, b;
    struct handed h = {0};
    struct handed *hp = &h;
    assert_int_equal(session_cm_memo_begin(m, "ns1/a", 100, &a, &keys), SESSION_CM_FETCH);
    session_cm_memo_settle(m, "ns1/a", cm, 100, hand, &hp);
    assert_int_equal(session_cm_memo_len(m), 1);
    /* A later look at another key sweeps ns1/a, which nobody asked for again. */
    assert_int_equal(session_cm_memo_begin(m, "ns2/b", 200, &a, &keys), SESSION_CM_FETCH);
    assert_int_equal(session_cm_memo_len(m), 1);
    /* A read in flight is never swept; its waiter is dropped by free (under ASan: no leak). */
    assert_int_equal(session_cm_memo_begin(m, "ns2/b", 300, &b, &keys), SESSION_CM_WAIT);
    assert_int_equal(session_cm_memo_len(m), 1);
    json_object_put(cm);
    session_cm_memo_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_caller_fetches_and_the_rest_wait_for_its_answer),
        cmocka_unit_test(test_an_answer_expires_after_the_ttl_and_is_read_again),
        cmocka_unit_test(test_a_missing_configmap_or_a_failed_read_is_never_remembered),
        cmocka_unit_test(test_settling_an_unknown_key_calls_nobody),
        cmocka_unit_test(test_a_waiter_may_call_back_into_the_memo),
        cmocka_unit_test(test_old_answers_are_swept_and_waiters_dropped_on_free),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
