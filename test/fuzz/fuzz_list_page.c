/* libFuzzer target: a list page from the API server ({"kind":..,"metadata":{..},"items":[..]}),
 * decoded item by item as the reflector does (cache_list_page_decode) and put into a store with
 * the indexes the operator uses, after the cache's strip transform, and read back. */
#include "cache/reflector.h"
#include "cache/store.h"
#include "cache/transform.h"

#include <json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct cache_index_def indexes[] = {
    {.name = "namespace", .fn = cache_index_namespace},
    {.name = "owner", .fn = cache_index_owner_uid},
    {.name = "app", .fn = cache_index_label, .arg = "app"},
};

static int on_item(void *ud, struct json_object *item)
{
    struct cache_store *store = ud;
    if (!json_object_is_type(item, json_type_object))
        return -1; /* as the reflector: a page of non-objects is not a list */
    cache_transform_strip(item);
    struct cache_object *old = NULL;
    const struct cache_object *now = NULL;
    struct telo_err err;
    if (cache_store_put(store, item, &old, &now, &err) == 0) {
        if (!now)
            abort();
        /* What the cache took reads back (the store keeps it packed). */
        struct json_object *back = cache_object_parse(now);
        if (!back)
            abort();
        json_object_put(back);
        cache_object_free(old);
    }
    return 0;
}

static void swept(void *ctx, struct cache_object *obj)
{
    (void)ctx;
    cache_object_free(obj);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cache_store *store = cache_store_new(indexes, sizeof(indexes) / sizeof(indexes[0]));
    if (!store)
        abort();
    struct cache_list_page page;
    if (cache_list_page_decode((const char *)data, size, on_item, store, &page) == 0) {
        if (page.continue_token && !json_object_is_type(page.metadata, json_type_object))
            abort();
        if (page.resource_version)
            (void)strlen(page.resource_version);
        json_object_put(page.metadata);
    } else if (page.metadata || page.continue_token || page.resource_version) {
        abort();
    }
    /* A relist that lists nothing: every object goes. */
    cache_store_mark_stale(store);
    size_t had = cache_store_len(store);
    if (cache_store_sweep_stale(store, swept, NULL) != had || cache_store_len(store) != 0)
        abort();
    cache_store_free(store);
    return 0;
}
