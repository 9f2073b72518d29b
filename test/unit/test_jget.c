/* Tests for pkg/util/jget.c: every accessor refuses null, missing and mistyped members. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/jget.h"

static struct json_object *parse(const char *text)
{
    struct json_object *o = json_tokener_parse(text);
    assert_non_null(o);
    return o;
}

static void null_missing_and_mistyped_members_read_as_absent(void **state)
{
    (void)state;
    struct json_object *o =
        parse("{\"s\":\"x\",\"n\":null,\"i\":5,\"o\":{\"k\":\"v\"},\"a\":[1],\"b\":true}");
    assert_null(jget_string(o, "n"));
    assert_null(jget_string(o, "missing"));
    assert_null(jget_string(o, "i"));
    assert_null(jget_string(o, "o"));
    assert_string_equal(jget_string(o, "s"), "x");
    assert_null(jget_object(o, "s"));
    assert_non_null(jget_object(o, "o"));
    assert_null(jget_array(o, "o"));
    assert_non_null(jget_array(o, "a"));
    assert_null(jget(o, "n"));
    assert_true(jget_string_is(o, "s", "x"));
    assert_false(jget_string_is(o, "n", "x"));
    assert_false(jget_string_is(o, "i", "5"));
    int b = -1;
    assert_int_equal(jget_bool(o, "b", &b), 0);
    assert_int_equal(b, 1);
    assert_int_equal(jget_bool(o, "s", &b), -1);
    json_object_put(o);
}

static void non_objects_have_no_members(void **state)
{
    (void)state;
    struct json_object *a = parse("[\"type\"]");
    struct json_object *s = parse("\"type\"");
    assert_null(jget(a, "type"));
    assert_null(jget(s, "type"));
    assert_null(jget(NULL, "type"));
    assert_null(jget_string_of(NULL));
    json_object_put(a);
    json_object_put(s);
}

static void quantities_are_strings_or_numbers(void **state)
{
    (void)state;
    struct json_object *o = parse("{\"s\":\"1Gi\",\"i\":268435456,\"d\":0.50000000000000001,"
                                  "\"b\":true,\"a\":[1],\"n\":null}");
    assert_string_equal(jget_number_or_string_of(jget(o, "s")), "1Gi");
    assert_string_equal(jget_number_or_string_of(jget(o, "i")), "268435456");
    assert_string_equal(jget_number_or_string_of(jget(o, "d")), "0.50000000000000001");
    assert_null(jget_number_or_string_of(jget(o, "b")));
    assert_null(jget_number_or_string_of(jget(o, "a")));
    assert_null(jget_number_or_string_of(jget(o, "n")));
    assert_null(jget_number_or_string_of(NULL));
    json_object_put(o);
}

static void integers_are_checked(void **state)
{
    (void)state;
    struct json_object *o =
        parse("{\"i\":-3,\"d\":5.0,\"f\":5.5,\"s\":\"5\",\"big\":1e300,\"n\":null}");
    int64_t v = 42;
    assert_int_equal(jget_int(o, "i", &v), 0);
    assert_int_equal(v, -3);
    assert_int_equal(jget_int(o, "d", &v), 0);
    assert_int_equal(v, 5);
    v = 42;
    assert_int_equal(jget_int(o, "f", &v), -1);
    assert_int_equal(jget_int(o, "s", &v), -1);
    assert_int_equal(jget_int(o, "big", &v), -1);
    assert_int_equal(jget_int(o, "n", &v), -1);
    assert_int_equal(v, 42);
    json_object_put(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(null_missing_and_mistyped_members_read_as_absent),
        cmocka_unit_test(non_objects_have_no_members),
        cmocka_unit_test(quantities_are_strings_or_numbers),
        cmocka_unit_test(integers_are_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
