/* Tests for pkg/cache/reflector.c's list page decoder (cache_list_page_decode), with the cache's
 * strip transform the reflector applies to each item: pages as the API server sends them, and
 * pages whose members have the wrong type. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "cache/reflector.h"
#include "cache/transform.h"
#include "util/jget.h"

#include <json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct items {
    int n;
    char names[8][32];
};

/* As the reflector's list_apply: objects are stripped and kept, anything else stops the page. */
static int keep(void *ud, struct json_object *item)
{
    struct items *it = ud;
    if (!json_object_is_type(item, json_type_object))
        return -1;
    cache_transform_strip(item);
    struct json_object *meta = NULL, *name = NULL;
    const char *s = "";
    if (json_object_object_get_ex(item, "metadata", &meta) &&
        json_object_object_get_ex(meta, "name", &name) &&
        json_object_is_type(name, json_type_string))
        s = json_object_get_string(name);
    if (it->n < 8)
        snprintf(it->names[it->n], sizeof(it->names[0]), "%s", s);
    it->n++;
    return 0;
}

static void page_as_sent(void **state)
{
    (void)state;
    const char *text =
        "{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":"
        "\"1050\",\"continue\":\"tok\",\"remainingItemCount\":3},\"items\":[{\"metadata\":{"
        "\"name\":\"a\",\"managedFields\":[{}],\"annotations\":{\"kubectl.kubernetes.io/"
        "last-applied-configuration\":\"{}\"}}},{\"metadata\":{\"name\":\"b\"}}]}";
    struct items it = {0};
    struct cache_list_page page;
    assert_int_equal(cache_list_page_decode(text, strlen(text), keep, &it, &page), 0);
    assert_int_equal(it.n, 2);
    assert_string_equal(it.names[0], "a");
    assert_string_equal(it.names[1], "b");
    assert_string_equal(page.continue_token, "tok");
    assert_string_equal(page.resource_version, "1050");
    json_object_put(page.metadata);
}

/* A continue token or resourceVersion that is not a string is absent, not its text ("5"), and a
 * null is not a crash. */
static void mistyped_metadata_reads_as_absent(void **state)
{
    (void)state;
    const char *pages[] = {
        "{\"metadata\":{\"continue\":5,\"resourceVersion\":null},\"items\":[]}",
        "{\"metadata\":{\"continue\":null,\"resourceVersion\":[\"1\"]},\"items\":[]}",
        "{\"metadata\":7,\"items\":[]}",
        "{\"metadata\":null,\"items\":[]}",
    };
    for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++) {
        struct items it = {0};
        struct cache_list_page page;
        assert_int_equal(cache_list_page_decode(pages[i], strlen(pages[i]), keep, &it, &page), 0);
        assert_null(page.continue_token);
        assert_null(page.resource_version);
        json_object_put(page.metadata);
    }
}

/* test/fuzz/corpus/list_page/mistyped: an item whose annotations are a number reached json-c's
 * json_object_object_del, which asserts on a non-object (SIGABRT in the operator). */
static void item_with_mistyped_annotations_is_kept(void **state)
{
    (void)state;
    const char *text =
        "{\"kind\":\"List\",\"items\":[{\"metadata\":{\"name\":\"a\",\"annotations\":"
        "7}},{\"metadata\":[]},{\"metadata\":{\"name\":\"c\",\"annotations\":"
        "null,\"managedFields\":1}}]}";
    struct items it = {0};
    struct cache_list_page page;
    assert_int_equal(cache_list_page_decode(text, strlen(text), keep, &it, &page), 0);
    assert_int_equal(it.n, 3);
    assert_string_equal(it.names[0], "a");
    assert_string_equal(it.names[2], "c");
    json_object_put(page.metadata);
}

static void not_a_list(void **state)
{
    (void)state;
    const char *pages[] = {
        "",
        "[]",
        "{\"items\":[{\"metadata\":{}}",
        "{\"items\":[1,2]}",
        "{\"items\":[{]}",
        "{\"metadata\":{\"continue\":\"x\"},\"items\":[{\"a\":1}] ",
    };
    for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++) {
        struct items it = {0};
        struct cache_list_page page;
        assert_int_equal(cache_list_page_decode(pages[i], strlen(pages[i]), keep, &it, &page), -1);
        assert_null(page.metadata);
        assert_null(page.continue_token);
    }
}

/* "{"items":[" then an item nested depth levels under its metadata, then "]}": the caller frees. */
static char *page_nested(int depth)
{
    size_t cap = 64 + (size_t)depth * 12; /* 11 bytes in, 1 out, per level */
    char *text = malloc(cap), *at = text;
    assert_non_null(text);
    at += sprintf(at, "{\"items\":[{\"metadata\":{\"name\":\"deep\"}");
    for (int i = 0; i < depth; i++)
        at += sprintf(at, ",\"a\":{\"b\":1");
    for (int i = 0; i < depth; i++)
        *at++ = '}';
    sprintf(at, "}]}");
    return text;
}

/* A list page decodes what a watch event may hold (JGET_OBJECT_MAX_DEPTH): at json-c's default
 * depth of 32 one object nested deeper failed every LIST of its kind, and the cache never synced.
 */
static void items_nest_as_deep_as_watch_events(void **state)
{
    (void)state;
    char *deep = page_nested(40);
    struct items it = {0};
    struct cache_list_page page;
    assert_int_equal(cache_list_page_decode(deep, strlen(deep), keep, &it, &page), 0);
    assert_int_equal(it.n, 1);
    assert_string_equal(it.names[0], "deep");
    json_object_put(page.metadata);
    free(deep);

    /* Past the bound, the page is refused whole, not read in part. */
    char *deeper = page_nested(JGET_OBJECT_MAX_DEPTH);
    memset(&it, 0, sizeof(it));
    assert_int_equal(cache_list_page_decode(deeper, strlen(deeper), keep, &it, &page), -1);
    assert_null(page.metadata);
    free(deeper);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(page_as_sent),
        cmocka_unit_test(mistyped_metadata_reads_as_absent),
        cmocka_unit_test(item_with_mistyped_annotations_is_kept),
        cmocka_unit_test(not_a_list),
        cmocka_unit_test(items_nest_as_deep_as_watch_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
