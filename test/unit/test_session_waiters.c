/* Tests for pkg/session/waiters.c: the sessions waiting on one answer of the image builds' I/O
 * edge are each queued once, in the order they asked, and forgotten once woken. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "session/waiters.h"

#include <stdio.h>
#include <string.h>

struct woken {
    char keys[8][32];
    size_t n;
};

static void wake(void *ud, const char *key)
{
    struct woken *w = ud;
    if (w->n < 8)
        snprintf(w->keys[w->n++], sizeof(w->keys[0]), "%s", key);
}

static void each_waiter_is_woken_once_in_order(void **state)
{
    (void)state;
    struct session_waiters w = {0};
    struct woken got = {0};
    session_waiters_add(&w, "ns/a");
    session_waiters_add(&w, "ns/b");
    session_waiters_add(&w, "ns/a");
    session_waiters_add(&w, "ns/c");
    assert_int_equal(w.n, 3);
    session_waiters_wake(&w, wake, &got);
    assert_int_equal(got.n, 3);
    assert_string_equal(got.keys[0], "ns/a");
    assert_string_equal(got.keys[1], "ns/b");
    assert_string_equal(got.keys[2], "ns/c");
    /* Forgotten once woken, and usable again. */
    assert_int_equal(w.n, 0);
    session_waiters_wake(&w, wake, &got);
    assert_int_equal(got.n, 3);
    session_waiters_add(&w, "ns/a");
    session_waiters_wake(&w, wake, &got);
    assert_int_equal(got.n, 4);
    session_waiters_free(&w);
}

static void the_list_is_bounded_and_freed_without_wakes(void **state)
{
    (void)state;
    struct session_waiters w = {0};
    struct woken got = {0};
    char key[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "ns/s%d", i);
        session_waiters_add(&w, key);
    }
    assert_int_equal(w.n, 4096);
    session_waiters_free(&w);
    assert_int_equal(w.n, 0);
    assert_null(w.keys);
    assert_int_equal(got.n, 0);
    session_waiters_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(each_waiter_is_woken_once_in_order),
        cmocka_unit_test(the_list_is_bounded_and_freed_without_wakes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
