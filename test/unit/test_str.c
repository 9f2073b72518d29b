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

static void subdomains_are_labels_joined_by_dots_up_to_253(void **state)
{
    (void)state;
    assert_true(util_str_dns_subdomain("a"));
    assert_true(util_str_dns_subdomain("my.app-1.v2"));
    char max[254];
    for (size_t i = 0; i < 253; i++)
        max[i] = i % 2 ? '.' : 'a';
    max[253] = '\0';
    assert_true(util_str_dns_subdomain(max));
    static const char *const bad[] = {"", ".", "a.", ".a", "a..b", "A.b", "a.-b", "a_b.c", "\xc3"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_false(util_str_dns_subdomain(bad[i]));
    char long_one[255];
    memcpy(long_one, max, 253);
    long_one[253] = 'a';
    long_one[254] = '\0';
    assert_false(util_str_dns_subdomain(long_one));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(labels_are_lower_alnum_and_inner_dashes_up_to_63),
        cmocka_unit_test(anything_else_is_not_a_label),
        cmocka_unit_test(subdomains_are_labels_joined_by_dots_up_to_253),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
