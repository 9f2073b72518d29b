/* Tests for pkg/util/yamljson.c: YAML documents to json-c values with line/column errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/yamljson.h"

#include <json.h>

#include <stdio.h>
#include <string.h>

static struct json_object *parse_ok(const char *yaml)
{
    struct json_object *out = NULL;
    struct telo_err err;
    if (yamljson_parse(yaml, strlen(yaml), "test", &out, &err) != 0)
        fail_msg("%s", err.msg);
    return out;
}

static void expect_json(const char *yaml, const char *want)
{
    struct json_object *o = parse_ok(yaml);
    assert_string_equal(
        json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE),
        want);
    json_object_put(o);
}

static void expect_error(const char *yaml, const char *want)
{
    struct json_object *out = NULL;
    struct telo_err err;
    assert_true(yamljson_parse(yaml, strlen(yaml), "config c.yaml", &out, &err) < 0);
    assert_null(out);
    assert_string_equal(err.msg, want);
}

static void scalars_follow_the_core_schema(void **state)
{
    (void)state;
    expect_json("a: 1\nb: -7\nc: 0.5\nd: 1e3\ne: true\nf: False\ng: ~\nh: null\ni:\n"
                "j: yes\nk: \"1\"\nl: '0.5'\nm: !!str 2\nn: 1.2.3\no: 0x1F\np: .5",
                "{\"a\":1,\"b\":-7,\"c\":0.5,\"d\":1e3,\"e\":true,\"f\":false,\"g\":null,"
                "\"h\":null,\"i\":null,\"j\":\"yes\",\"k\":\"1\",\"l\":\"0.5\",\"m\":\"2\","
                "\"n\":\"1.2.3\",\"o\":\"0x1F\",\"p\":0.5}");
    struct json_object *o = parse_ok("c: 0.5\nd: 1e3\n");
    struct json_object *v = NULL;
    assert_true(json_object_object_get_ex(o, "d", &v));
    assert_true(json_object_is_type(v, json_type_double));
    assert_true(json_object_get_double(v) == 1000.0);
    json_object_put(o);
    /* Kept text is valid JSON; YAML-only spellings are written as json-c writes a double. */
    expect_json("a: .5\nb: 5.\nc: +1.5\nd: -0.25e-2\n",
                "{\"a\":0.5,\"b\":5.0,\"c\":1.5,\"d\":-0.25e-2}");
}

static void nesting_and_flow_style(void **state)
{
    (void)state;
    expect_json("limits:\n  cpu: 500m\nnamespaces: [a, b]\nlist:\n  - {k: v}\n  - - 1\n",
                "{\"limits\":{\"cpu\":\"500m\"},\"namespaces\":[\"a\",\"b\"],\"list\":[{\"k\":"
                "\"v\"},[1]]}");
    expect_json("", "{}");
    expect_json("# only a comment\n", "{}");
    expect_json("---\nx: 1\n...\n", "{\"x\":1}");
}

static void errors_name_line_and_column(void **state)
{
    (void)state;
    expect_error("a: 1\na: 2\n", "config c.yaml: line 2 column 1: duplicate key 'a'");
    expect_error("a: &x 1\nb: *x\n",
                 "config c.yaml: line 2 column 4: aliases (*name) are not supported");
    expect_error("a: [1\n", "config c.yaml: line 2 column 1: did not find expected ',' or ']'");
    expect_error("? [a]\n: 1\n", "config c.yaml: line 1 column 3: mapping keys must be plain "
                                 "strings");
    expect_error("a: 1\n---\nb: 2\n", "config c.yaml: holds several YAML documents; want one");
}

static void depth_is_bounded(void **state)
{
    (void)state;
    char deep[151];
    memset(deep, '[', 150);
    deep[150] = '\0';
    struct json_object *out = NULL;
    struct telo_err err;
    assert_true(yamljson_parse(deep, strlen(deep), "deep", &out, &err) < 0);
    assert_non_null(strstr(err.msg, "nested more than 100 levels deep"));
}

static int count_docs(void *ud, struct json_object *doc, int index)
{
    int *n = ud;
    assert_int_equal(index, *n);
    assert_non_null(doc);
    (*n)++;
    return 0;
}

static void several_documents(void **state)
{
    (void)state;
    const char *yaml = "kind: A\n---\n---\nkind: B\n---\n- 1\n";
    int n = 0;
    struct telo_err err;
    assert_int_equal(yamljson_parse_docs(yaml, strlen(yaml), "m", count_docs, &n, &err), 0);
    assert_int_equal(n, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(scalars_follow_the_core_schema),
        cmocka_unit_test(nesting_and_flow_style),
        cmocka_unit_test(errors_name_line_and_column),
        cmocka_unit_test(depth_is_bounded),
        cmocka_unit_test(several_documents),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
