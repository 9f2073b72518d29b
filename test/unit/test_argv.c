/* Tests for pkg/util/argv.c: options as "--name value" and as "--name=value". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/argv.h"

#include <string.h>

static void reads_a_value_from_the_next_word(void **state)
{
    (void)state;
    char *argv[] = {"--config", "/etc/c.yaml", "--leader-elect"};
    struct util_arg arg;
    util_arg_read(3, argv, 0, &arg);
    assert_string_equal(arg.name, "--config");
    assert_string_equal(arg.value, "/etc/c.yaml");
    assert_int_equal(util_arg_consumed(&arg), 1);
    util_arg_read(3, argv, 2, &arg);
    assert_string_equal(arg.name, "--leader-elect");
    assert_null(arg.value); /* the last word has no next one */
}

static void reads_a_value_joined_with_an_equals_sign(void **state)
{
    (void)state;
    char *argv[] = {"--config=/etc/c.yaml", "--set=a=b", "--empty=", "next"};
    struct util_arg arg;
    util_arg_read(4, argv, 0, &arg);
    assert_string_equal(arg.name, "--config");
    assert_string_equal(arg.value, "/etc/c.yaml");
    assert_int_equal(util_arg_consumed(&arg), 0);
    util_arg_read(4, argv, 1, &arg); /* only the first '=' splits */
    assert_string_equal(arg.name, "--set");
    assert_string_equal(arg.value, "a=b");
    util_arg_read(4, argv, 2, &arg); /* an explicit empty value is not the next word */
    assert_string_equal(arg.value, "");
    assert_true(arg.joined);
}

static void reads_a_short_flag_joined_with_an_equals_sign(void **state)
{
    (void)state;
    char *argv[] = {"-v=4", "next"}; /* as kube components take -v=4 */
    struct util_arg arg;
    util_arg_read(2, argv, 0, &arg);
    assert_true(arg.joined);
    assert_string_equal(arg.name, "-v");
    assert_string_equal(arg.value, "4");
    assert_int_equal(util_arg_consumed(&arg), 0);
}

static void leaves_other_words_whole(void **state)
{
    (void)state;
    char long_name[100];
    memset(long_name, 'x', sizeof(long_name));
    memcpy(long_name, "--", 2);
    long_name[80] = '=';
    long_name[99] = '\0';
    char *argv[] = {"a=b", "-=1", long_name, "v"};
    struct util_arg arg;
    for (int i = 0; i < 3; i++) {
        util_arg_read(4, argv, i, &arg);
        assert_false(arg.joined);
        assert_ptr_equal(arg.name, argv[i]); /* reported whole, as an unknown argument */
        assert_ptr_equal(arg.value, argv[i + 1]);
    }
}

static void take_advances_past_the_value(void **state)
{
    (void)state;
    char *argv[] = {"--ns", "a", "--ns=b", "--last"};
    struct util_arg arg;
    int i = 0;
    util_arg_read(4, argv, i, &arg);
    assert_string_equal(util_arg_take(&arg, &i), "a");
    assert_int_equal(i, 1); /* the loop's i++ then moves to the next option */
    i = 2;
    util_arg_read(4, argv, i, &arg);
    assert_string_equal(util_arg_take(&arg, &i), "b");
    assert_int_equal(i, 2);
    i = 3;
    util_arg_read(4, argv, i, &arg);
    assert_null(util_arg_take(&arg, &i));
    assert_int_equal(i, 3);
}

static void kube_flags_are_read_as_kubectl_takes_them(void **state)
{
    (void)state;
    char *argv[] = {"--kubeconfig=/k", "-n", "ns", "--context", "c", "--other", "x", "--context"};
    struct util_kube_args k = {0};
    struct util_arg arg;
    int i = 0;
    util_arg_read(8, argv, i, &arg);
    assert_int_equal(util_arg_kube(&arg, &i, &k), 1);
    assert_int_equal(i, 0);
    util_arg_read(8, argv, ++i, &arg);
    assert_int_equal(util_arg_kube(&arg, &i, &k), 1);
    assert_int_equal(i, 2);
    util_arg_read(8, argv, ++i, &arg);
    assert_int_equal(util_arg_kube(&arg, &i, &k), 1);
    util_arg_read(8, argv, ++i, &arg);
    assert_int_equal(util_arg_kube(&arg, &i, &k), 0); /* --other: not one of them */
    assert_int_equal(i, 5);
    util_arg_read(8, argv, i = 7, &arg);
    assert_int_equal(util_arg_kube(&arg, &i, &k), -1); /* --context with no value */
    assert_string_equal(k.kubeconfig, "/k");
    assert_string_equal(k.namespace, "ns");
    assert_string_equal(k.context, "c");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_a_value_from_the_next_word),
        cmocka_unit_test(take_advances_past_the_value),
        cmocka_unit_test(kube_flags_are_read_as_kubectl_takes_them),
        cmocka_unit_test(reads_a_value_joined_with_an_equals_sign),
        cmocka_unit_test(reads_a_short_flag_joined_with_an_equals_sign),
        cmocka_unit_test(leaves_other_words_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
