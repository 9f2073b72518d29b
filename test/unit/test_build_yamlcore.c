/* Tests for pkg/imagebuild/yamlcore.c: which plain scalars YAML 1.2's core schema (the
 * reference's eemeli/yaml) leaves as strings. The table follows the schema's tag resolution
 * (yaml.org/spec/1.2.2, 10.3.2): null, bool, int (decimal, 0o, 0x) and float forms are not
 * strings; near misses are. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "imagebuild/yamlcore.h"

#include <string.h>

static void core_schema_forms_are_not_strings(void **state)
{
    (void)state;
    static const char *const not_strings[] = {
        "",      "~",     "null",  "Null",  "NULL", "true", "True",   "TRUE",   "false",
        "False", "FALSE", "0",     "12",    "-12",  "+12",  "007",    "0o17",   "0x1F",
        "0xab",  "1.5",   "1.",    ".5",    "-.5",  "1e3",  "1.5e-3", "+2E+10", ".inf",
        ".Inf",  ".INF",  "+.inf", "-.Inf", ".nan", ".NaN", ".NAN"};
    for (size_t i = 0; i < sizeof(not_strings) / sizeof(not_strings[0]); i++) {
        const char *s = not_strings[i];
        if (build_yaml_plain_is_string(s, strlen(s)))
            fail_msg("\"%s\" resolved to a string", s);
    }
}

static void near_misses_stay_strings(void **state)
{
    (void)state;
    static const char *const strings[] = {
        "std/a@1.0.0", "yes",  "no",    "on",    "nULL",      "tRue",  "0x",    "0xg", "0o",
        "0o8",         "+0o7", "-0x1",  "1_000", "0b101",     "1e",    "e3",    ".e3", ".",
        "+",           "-",    "+.nan", "-.NaN", ".infinity", "1.5.2", "1e3.0", "12 ", " 12"};
    for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++) {
        const char *s = strings[i];
        if (!build_yaml_plain_is_string(s, strlen(s)))
            fail_msg("\"%s\" did not resolve to a string", s);
    }
}

static void only_n_bytes_are_read(void **state)
{
    (void)state;
    /* A scalar inside a larger buffer: "12" of "12abc" is an integer, all five bytes a string. */
    assert_false(build_yaml_plain_is_string("12abc", 2));
    assert_true(build_yaml_plain_is_string("12abc", 5));
    assert_false(build_yaml_plain_is_string("nullx", 4));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(core_schema_forms_are_not_strings),
        cmocka_unit_test(near_misses_stay_strings),
        cmocka_unit_test(only_n_bytes_are_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
