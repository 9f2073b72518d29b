/* Tests for pkg/util/str.c's DNS-1123 label check (the plugin's --name, the service proxy's URL).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/str.h"

#include <string.h>

static int label(const char *s)
{
    return util_str_dns_label(s, strlen(s));
}

static void labels_are_lower_alnum_and_inner_dashes_up_to_63(void **state)
{
    (void)state;
    assert_true(label("a"));
    assert_true(label("telo-gw"));
    assert_true(label("0x9"));
    char max[64];
    memset(max, 'a', 63);
    max[63] = '\0';
    assert_true(label(max));
}

static void anything_else_is_not_a_label(void **state)
{
    (void)state;
    static const char *const bad[] = {"", "-a", "a-", "A", "a.b", "a_b", "a b", "ä", "a\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_false(label(bad[i]));
    char long_one[65];
    memset(long_one, 'a', 64);
    long_one[64] = '\0';
    assert_false(label(long_one));
    assert_false(util_str_dns_label("ab", 0));
    assert_true(util_str_dns_label("ab.c", 2)); /* only the n bytes count */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(labels_are_lower_alnum_and_inner_dashes_up_to_63),
        cmocka_unit_test(anything_else_is_not_a_label),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
