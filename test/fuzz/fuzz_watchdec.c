/* libFuzzer target: the watch stream decoder (newline-delimited JSON events from the API server),
 * fed in one piece and in two pieces split where the input's first byte says: both must deliver
 * the same events, end the same way and resume from the same resourceVersion. Each event then
 * goes where the reflector sends it: ADDED and MODIFIED objects through the cache's strip
 * transform into a store with the operator's indexes, DELETED ones out of it by key, and an
 * ERROR's object is decoded as a Status, as the watch does. */
#include "cache/store.h"
#include "cache/transform.h"
#include "kube/status.h"
#include "kube/watchdec.h"

#include <json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct digest {
    unsigned long n;
    unsigned long long sum;
    struct cache_store *store;
};

static const struct cache_index_def indexes[] = {
    {.name = "namespace", .fn = cache_index_namespace},
    {.name = "owner", .fn = cache_index_owner_uid},
    {.name = "app", .fn = cache_index_label, .arg = "app"},
};

/* As the reflector's apply and remove_object. */
static void to_store(struct cache_store *store, enum kube_watch_type type,
                     struct json_object *object)
{
    if (type == KUBE_WATCH_DELETED) {
        char key[512];
        if (cache_object_key(object, key, sizeof(key), NULL) == 0)
            cache_object_free(cache_store_delete(store, key));
        return;
    }
    if (type != KUBE_WATCH_ADDED && type != KUBE_WATCH_MODIFIED)
        return;
    struct json_object *copy = NULL;
    if (json_object_deep_copy(object, &copy, NULL) < 0)
        return;
    cache_transform_strip(copy);
    struct cache_object *old = NULL;
    const struct cache_object *now = NULL;
    struct telo_err err;
    if (cache_store_put(store, copy, &old, &now, &err) == 0)
        cache_object_free(old);
    json_object_put(copy);
}

static void mix(struct digest *d, const char *s)
{
    for (; *s != '\0'; s++)
        d->sum = d->sum * 31 + (unsigned char)*s;
}

static int on_event(void *ud, enum kube_watch_type type, struct json_object *object)
{
    struct digest *d = ud;
    if (!json_object_is_type(object, json_type_object))
        abort();
    d->n++;
    mix(d, kube_watch_type_name(type));
    mix(d, json_object_to_json_string_ext(object, JSON_C_TO_STRING_PLAIN));
    to_store(d->store, type, object);
    if (type == KUBE_WATCH_ERROR) {
        struct kube_status st;
        struct telo_err err;
        if (kube_status_from_json(500, object, &st, &err) == 0) {
            (void)kube_status_to_err(&st, "watch", &err);
            (void)kube_status_retryable(&st);
            (void)kube_status_is_expired(&st);
        }
        kube_status_release(&st);
    }
    return 0;
}

/* Decodes the stream in pieces cut at the given offsets; returns the final code and fills *d and
 * rv (the resume point). */
static int run(const char *text, size_t len, size_t cut, size_t max, struct digest *d, char *rv,
               size_t rvlen)
{
    struct kube_watchdec *dec = kube_watchdec_new(max, on_event, d);
    d->store = cache_store_new(indexes, sizeof(indexes) / sizeof(indexes[0]));
    if (!dec || !d->store)
        abort();
    struct telo_err err;
    int rc = kube_watchdec_feed(dec, text, cut, &err);
    if (rc == 0)
        rc = kube_watchdec_feed(dec, text + cut, len - cut, &err);
    if (rc == 0)
        rc = kube_watchdec_finish(dec, &err);
    const char *v = kube_watchdec_resource_version(dec);
    if (!v)
        abort();
    strncpy(rv, v, rvlen - 1);
    rv[rvlen - 1] = '\0';
    kube_watchdec_free(dec);
    d->sum = d->sum * 31 + cache_store_len(d->store);
    cache_store_free(d->store);
    d->store = NULL;
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    /* byte 0: where to cut; byte 1: the event size limit, small or roomy. */
    size_t max = data[1] < 128 ? 64 + data[1] * 8 : 1 << 20;
    const char *text = (const char *)data + 2;
    size_t len = size - 2;
    size_t cut = len ? data[0] % (len + 1) : 0;
    struct digest a = {0}, b = {0};
    char rva[256], rvb[256];
    int ra = run(text, len, len, max, &a, rva, sizeof(rva));
    int rb = run(text, len, cut, max, &b, rvb, sizeof(rvb));
    if (ra != rb || a.n != b.n || a.sum != b.sum || strcmp(rva, rvb) != 0)
        abort();
    return 0;
}
