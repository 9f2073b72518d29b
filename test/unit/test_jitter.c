/* Tests for pkg/util/jitter.c: draws stay in their ranges and are spread, not constant. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/jitter.h"

static void a_unit_draw_is_in_zero_one_and_spread(void **state)
{
    (void)state;
    double lo = 1, hi = 0;
    for (int i = 0; i < 2000; i++) {
        double u = util_random_unit();
        assert_true(u >= 0 && u < 1);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    /* 2000 uniform draws all within a tenth of the ends would be a broken generator. */
    assert_true(lo < 0.1);
    assert_true(hi > 0.9);
}

static void jitter_stretches_the_base_by_up_to_the_factor(void **state)
{
    (void)state;
    double lo = 100, hi = 0;
    for (int i = 0; i < 2000; i++) {
        double d = util_jitter(2.0, 1.2);
        assert_true(d >= 2.0 && d < 2.0 * 2.2);
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
    }
    assert_true(lo < 2.5);
    assert_true(hi > 3.9);
}

static void no_factor_means_no_jitter(void **state)
{
    (void)state;
    assert_true(util_jitter(5.0, 0) == 5.0);
    assert_true(util_jitter(5.0, -1) == 5.0);
}

static void a_first_tick_is_spread_over_the_second_half_of_its_period(void **state)
{
    (void)state;
    double lo = 100, hi = 0;
    for (int i = 0; i < 2000; i++) {
        double d = util_spread_first(60.0);
        assert_true(d >= 30.0 && d <= 60.0);
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
    }
    assert_true(lo < 32.0);
    assert_true(hi > 58.0);
    assert_true(util_spread_first(0) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_unit_draw_is_in_zero_one_and_spread),
        cmocka_unit_test(jitter_stretches_the_base_by_up_to_the_factor),
        cmocka_unit_test(no_factor_means_no_jitter),
        cmocka_unit_test(a_first_tick_is_spread_over_the_second_half_of_its_period),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
