/* Tests for pkg/util/strmap.c and histogram.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/histogram.h"
#include "util/strmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_get_replace_remove(void **state)
{
    (void)state;
    struct strmap *m = strmap_new();
    int a = 1, b = 2;
    assert_null(strmap_get(m, "x"));
    assert_int_equal(strmap_put(m, "x", &a), 0);
    assert_ptr_equal(strmap_get(m, "x"), &a);
    assert_int_equal(strmap_put(m, "x", &b), 0);
    assert_ptr_equal(strmap_get(m, "x"), &b);
    assert_int_equal(strmap_len(m), 1);
    assert_ptr_equal(strmap_remove(m, "x"), &b);
    assert_null(strmap_remove(m, "x"));
    assert_int_equal(strmap_len(m), 0);
    strmap_free(m);
    strmap_free(NULL);
}

/* Many inserts and removes, with tombstones, checked against a plain array. */
static void churn_matches_an_array(void **state)
{
    (void)state;
    enum { N = 5000 };
    static char keys[N][16];
    static int present[N];
    struct strmap *m = strmap_new();
    srand(7);
    for (int i = 0; i < N; i++)
        snprintf(keys[i], sizeof(keys[i]), "ns/obj-%d", i);
    size_t live = 0;
    for (int step = 0; step < 200000; step++) {
        int i = rand() % N;
        if (rand() % 3) {
            if (!present[i])
                live++;
            present[i] = 1;
            assert_int_equal(strmap_put(m, keys[i], keys[i]), 0);
        } else {
            void *v = strmap_remove(m, keys[i]);
            assert_ptr_equal(v, present[i] ? keys[i] : NULL);
            if (present[i])
                live--;
            present[i] = 0;
        }
    }
    assert_int_equal(strmap_len(m), live);
    for (int i = 0; i < N; i++)
        assert_ptr_equal(strmap_get(m, keys[i]), present[i] ? keys[i] : NULL);
    size_t seen = 0;
    struct strmap_iter it = {0};
    const char *k;
    void *v;
    while (strmap_next(m, &it, &k, &v)) {
        assert_ptr_equal(k, v);
        seen++;
    }
    assert_int_equal(seen, live);
    strmap_free(m);
}

static void removing_during_iteration(void **state)
{
    (void)state;
    struct strmap *m = strmap_new();
    char keys[100][8];
    for (int i = 0; i < 100; i++) {
        snprintf(keys[i], sizeof(keys[i]), "%d", i);
        strmap_put(m, keys[i], keys[i]);
    }
    struct strmap_iter it = {0};
    const char *k;
    void *v;
    while (strmap_next(m, &it, &k, &v))
        strmap_remove(m, k);
    assert_int_equal(strmap_len(m), 0);
    strmap_free(m);
}

static void histogram_buckets_are_cumulative(void **state)
{
    (void)state;
    struct histogram h;
    histogram_init_exponential(&h, 0.001, 10, 4); /* 1ms 10ms 100ms 1s */
    histogram_observe(&h, 0.0005);
    histogram_observe(&h, 0.05);
    histogram_observe(&h, 0.05);
    histogram_observe(&h, 5);
    assert_int_equal(histogram_cumulative(&h, 0), 1);
    assert_int_equal(histogram_cumulative(&h, 1), 1);
    assert_int_equal(histogram_cumulative(&h, 2), 3);
    assert_int_equal(histogram_cumulative(&h, 3), 3);
    assert_int_equal(h.count, 4);
    assert_true(h.sum > 5.1 && h.sum < 5.11);
}

/* A value that ends in its own key: made once, found again under the same key, and the key the
 * map holds is the value's copy (the caller's string may change or go). */
struct counted {
    long n;
    char name[];
};

static void get_or_add_makes_a_value_that_holds_its_key(void **state)
{
    (void)state;
    struct strmap *m = strmap_new();
    char key[16] = "team-a";
    struct counted *a = strmap_get_or_add(m, key, sizeof(*a), offsetof(struct counted, name));
    assert_non_null(a);
    assert_int_equal(a->n, 0);
    assert_string_equal(a->name, "team-a");
    a->n++;
    strcpy(key, "team-b");
    struct counted *b = strmap_get_or_add(m, key, sizeof(*b), offsetof(struct counted, name));
    assert_ptr_not_equal(a, b);
    assert_ptr_equal(strmap_get_or_add(m, "team-a", sizeof(*a), offsetof(struct counted, name)), a);
    assert_int_equal(a->n, 1);
    assert_int_equal(strmap_len(m), 2);
    const char *k;
    void *v;
    struct strmap_iter it = {0};
    while (strmap_next(m, &it, &k, &v)) {
        assert_ptr_equal(k, ((struct counted *)v)->name);
        free(strmap_remove(m, k));
    }
    strmap_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(put_get_replace_remove),
        cmocka_unit_test(churn_matches_an_array),
        cmocka_unit_test(removing_during_iteration),
        cmocka_unit_test(get_or_add_makes_a_value_that_holds_its_key),
        cmocka_unit_test(histogram_buckets_are_cumulative),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
