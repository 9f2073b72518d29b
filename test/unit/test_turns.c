/* Tests for pkg/workqueue/turns.c: tenants shared by name and freed with their last reference,
 * a key's tenant, and turns over two rings sharing a tenant table. The work queue's randomized
 * model (test_queue.c) and the prober (test_session_reach.c) test the turns in use. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "workqueue/turns.h"

#include <string.h>

static void a_keys_tenant_is_its_namespace(void **state)
{
    (void)state;
    char out[8];
    wq_tenant_of_key("team-a/s1", out, sizeof(out));
    assert_string_equal(out, "team-a");
    wq_tenant_of_key("node-1", out, sizeof(out));
    assert_string_equal(out, "");
    wq_tenant_of_key("a-very-long-namespace/s", out, sizeof(out));
    assert_string_equal(out, "a-very-");
    wq_tenant_of_key("/leading", out, sizeof(out));
    assert_string_equal(out, "");
}

static void tenants_are_shared_by_name_and_go_with_their_last_reference(void **state)
{
    (void)state;
    struct wq_tenants *ts = wq_tenants_new(2);
    assert_non_null(ts);
    struct wq_tenant *a = wq_tenant_ref(ts, "a");
    struct wq_tenant *again = wq_tenant_ref(ts, "a");
    struct wq_tenant *b = wq_tenant_ref(ts, "b");
    assert_ptr_equal(a, again);
    assert_ptr_not_equal(a, b);
    assert_int_equal(wq_tenants_len(ts), 2);
    wq_tenant_unref(ts, a);
    assert_int_equal(wq_tenants_len(ts), 2);
    wq_tenant_unref(ts, again);
    assert_int_equal(wq_tenants_len(ts), 1);
    wq_tenant_unref(ts, NULL);
    /* b is still held: freeing the table frees it too. */
    wq_tenants_free(ts);
}

static void two_rings_keep_their_own_turns(void **state)
{
    (void)state;
    struct wq_tenants *ts = wq_tenants_new(2);
    struct wq_turns hi, lo;
    wq_turns_init(&hi, 0);
    wq_turns_init(&lo, 1);
    struct wq_tenant *a = wq_tenant_ref(ts, "a"), *b = wq_tenant_ref(ts, "b");
    struct wq_turn_link items[6];
    memset(items, 0, sizeof(items));
    for (int i = 0; i < 6; i++)
        items[i].tenant = i < 4 ? a : b;
    wq_turns_push(&hi, &items[0]); /* a */
    wq_turns_push(&hi, &items[1]); /* a */
    wq_turns_push(&lo, &items[2]); /* a, other ring */
    wq_turns_push(&hi, &items[4]); /* b */
    wq_turns_push(&lo, &items[5]); /* b, other ring */
    assert_int_equal(hi.len, 3);
    assert_int_equal(lo.len, 2);
    assert_ptr_equal(wq_turns_pop(&hi), &items[0]);
    assert_ptr_equal(wq_turns_pop(&hi), &items[4]);
    /* Taken out of the middle: the tenant leaves the turn once it has nothing left. */
    wq_turns_push(&hi, &items[3]); /* a again, behind items[1] */
    wq_turns_remove(&hi, &items[1]);
    assert_ptr_equal(wq_turns_pop(&hi), &items[3]);
    assert_null(wq_turns_pop(&hi));
    assert_int_equal(hi.len, 0);
    assert_ptr_equal(wq_turns_pop(&lo), &items[2]);
    assert_ptr_equal(wq_turns_pop(&lo), &items[5]);
    assert_null(wq_turns_pop(&lo));
    wq_tenant_unref(ts, a);
    wq_tenant_unref(ts, b);
    assert_int_equal(wq_tenants_len(ts), 0);
    wq_tenants_free(ts);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_keys_tenant_is_its_namespace),
        cmocka_unit_test(tenants_are_shared_by_name_and_go_with_their_last_reference),
        cmocka_unit_test(two_rings_keep_their_own_turns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
