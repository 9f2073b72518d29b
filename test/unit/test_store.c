/* Tests for pkg/cache/store.c and transform.c: keys, indexes, relist deletes, trimming. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "appendf.h"
#include "cache/pack.h"
#include "cache/store.h"
#include "cache/transform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const session_label = "telo.run/session";

static struct cache_store *new_store(void)
{
    const struct cache_index_def defs[] = {
        {"namespace", cache_index_namespace, NULL},
        {"owner", cache_index_owner_uid, NULL},
        {"session", cache_index_label, "telo.run/session"},
    };
    struct cache_store *s = cache_store_new(defs, 3);
    assert_non_null(s);
    return s;
}

static struct json_object *pod(const char *ns, const char *name, const char *rv, const char *owner,
                               const char *session)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\","
             "\"namespace\":\"%s\",\"uid\":\"uid-%s\",\"resourceVersion\":\"%s\","
             "\"labels\":{\"%s\":\"%s\"},\"ownerReferences\":[{\"uid\":\"%s\"}]}}",
             name, ns, name, rv, session_label, session, owner);
    struct json_object *o = json_tokener_parse(text);
    assert_non_null(o);
    return o;
}

/* Puts and frees whatever was replaced. */
static void put(struct cache_store *s, struct json_object *o)
{
    struct cache_object *replaced = NULL;
    assert_int_equal(cache_store_put(s, o, &replaced, NULL, NULL), 0);
    cache_object_free(replaced);
    json_object_put(o);
}

struct collected {
    char keys[16][64];
    int n;
};

static void collect(void *ctx, const struct cache_object *obj)
{
    struct collected *c = ctx;
    snprintf(c->keys[c->n++], sizeof(c->keys[0]), "%s", obj->key);
}

static int cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* The sorted keys indexed under value, joined by spaces. */
static const char *lookup(struct cache_store *s, const char *index, const char *value)
{
    static char out[512];
    struct collected c = {.n = 0};
    assert_true(cache_store_by_index(s, index, value, collect, &c, NULL) >= 0);
    qsort(c.keys, (size_t)c.n, sizeof(c.keys[0]), cmp);
    out[0] = '\0';
    for (int i = 0; i < c.n; i++)
        test_appendf(out, sizeof(out), "%s%s", i ? " " : "", c.keys[i]);
    return out;
}

static void put_get_and_replace(void **state)
{
    (void)state;
    struct cache_store *s = new_store();
    struct cache_object *replaced = (void *)1;
    const struct cache_object *stored = NULL;
    struct json_object *o = pod("ns1", "a", "1", "o1", "s1");
    assert_int_equal(cache_store_put(s, o, &replaced, &stored, NULL), 0);
    json_object_put(o);
    assert_null(replaced);
    assert_string_equal(stored->key, "ns1/a");
    assert_string_equal(stored->uid, "uid-a");
    assert_string_equal(stored->resource_version, "1");
    o = pod("ns1", "a", "2", "o1", "s1");
    assert_int_equal(cache_store_put(s, o, &replaced, NULL, NULL), 0);
    json_object_put(o);
    assert_non_null(replaced);
    assert_string_equal(replaced->resource_version, "1");
    cache_object_free(replaced);
    assert_string_equal(cache_store_get(s, "ns1/a")->resource_version, "2");
    assert_int_equal(cache_store_len(s), 1);
    cache_store_free(s);
}

/* The compact text the store serializes obj to. */
static const char *text_of(struct json_object *obj)
{
    return json_object_to_json_string_ext(obj,
                                          JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
}

/* Puts the object text under its key and checks that the stored one parses back to it. */
static const struct cache_object *put_and_read_back(struct cache_store *s, const char *text)
{
    struct json_object *o = json_tokener_parse(text);
    assert_non_null(o);
    struct cache_object *replaced = NULL;
    const struct cache_object *stored = NULL;
    assert_int_equal(cache_store_put(s, o, &replaced, &stored, NULL), 0);
    if (replaced) {
        /* A replaced object still reads back while the store lives, as handlers need. */
        struct json_object *old = cache_object_parse(replaced);
        assert_non_null(old);
        json_object_put(old);
        cache_object_free(replaced);
    }
    assert_int_equal(stored->json_len, strlen(text_of(o)));
    assert_true(stored->stored_len <= stored->json_len);
    struct json_object *back = cache_object_parse(stored);
    assert_non_null(back);
    assert_string_equal(text_of(back), text_of(o));
    json_object_put(back);
    json_object_put(o);
    return stored;
}

static void objects_of_every_shape_read_back(void **state)
{
    (void)state;
    struct cache_store *s = new_store();
    /* An atypical first object: the dictionary then helps the others little, but they still
     * read back. */
    (void)put_and_read_back(s, "{\"metadata\":{\"name\":\"first\"}}");
    char text[1024];
    for (int i = 0; i < 20; i++) {
        struct json_object *o = pod("ns1", "p", "1", "owner-1", "s1");
        snprintf(text, sizeof(text), "%s", text_of(o));
        json_object_put(o);
        text[strlen(text) - 1] = '\0';
        test_appendf(text, sizeof(text), ",\"n\":%d}", i);
        (void)put_and_read_back(s, text); /* replaces ns1/p each time */
    }
    /* Non-ASCII and escaped strings: quotes, backslashes, control characters, slashes. */
    (void)put_and_read_back(s,
                            "{\"metadata\":{\"name\":\"esc\",\"namespace\":\"ns1\"},\"s\":"
                            "\"caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x9a\x80 \\\" \\\\ \\n\\t\\u0001 "
                            "</script> \\u00e9\"}");
    /* Larger than the dictionary and than deflate's window. */
    struct json_object *big = json_tokener_parse("{\"metadata\":{\"name\":\"big\"}}");
    struct json_object *items = json_object_new_array();
    for (int i = 0; i < 2000; i++)
        json_object_array_add(items, json_object_new_int(i * 7919 % 10007));
    json_object_object_add(big, "items", items);
    char *big_text = strdup(text_of(big));
    json_object_put(big);
    assert_true(strlen(big_text) > (size_t)2 * CACHE_PACK_DICT_MAX);
    const struct cache_object *o = put_and_read_back(s, big_text);
    assert_true(o->stored_len < o->json_len);
    free(big_text);
    /* Incompressible: kept as it is. */
    /* Random Cyrillic letters: deflate's fixed codes spend 9 bits on each of their bytes. */
    snprintf(text, sizeof(text), "{\"metadata\":{\"name\":\"noise\"},\"data\":\"");
    uint32_t x = 88172645U;
    for (size_t n = strlen(text); n < 900; n += 2) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        text[n] = (char)(0xd0 + x % 4);
        text[n + 1] = (char)(0x80 + (x >> 8) % 64);
        text[n + 2] = '\0';
    }
    test_appendf(text, sizeof(text), "\"}");
    o = put_and_read_back(s, text);
    assert_int_equal(o->stored_len, o->json_len);
    assert_int_equal(cache_store_len(s), 5);
    cache_store_free(s);
}

static void equal_objects_store_equal_bytes(void **state)
{
    (void)state;
    struct cache_store *s = new_store();
    put(s, pod("ns1", "a", "1", "owner-1", "s1"));
    const struct cache_object *first = cache_store_get(s, "ns1/a");
    unsigned len = first->stored_len;
    char bytes[1024];
    memcpy(bytes, first->data, len);
    put(s, pod("ns1", "b", "1", "owner-2", "s2"));
    put(s, pod("ns1", "a", "1", "owner-1", "s1"));
    const struct cache_object *again = cache_store_get(s, "ns1/a");
    assert_ptr_not_equal(again, first);
    assert_int_equal(again->stored_len, len);
    assert_memory_equal(again->data, bytes, len);
    cache_store_free(s);
}

/* A tag: the length of metadata.resourceVersion, standing in for a session's phase. */
static unsigned char rv_length(struct json_object *obj)
{
    const char *rv = json_object_get_string(
        json_object_object_get(json_object_object_get(obj, "metadata"), "resourceVersion"));
    return (unsigned char)(rv ? strlen(rv) : 0);
}

static void objects_carry_their_tag_from_each_put(void **state)
{
    (void)state;
    struct cache_store *s = new_store();
    put(s, pod("ns", "a", "7", "o", "s"));
    assert_int_equal(cache_store_get(s, "ns/a")->tag, 0); /* no tag function yet */
    cache_store_set_tag(s, rv_length);
    put(s, pod("ns", "a", "123", "o", "s"));
    assert_int_equal(cache_store_get(s, "ns/a")->tag, 3);
    put(s, pod("ns", "a", "12345", "o", "s"));
    assert_int_equal(cache_store_get(s, "ns/a")->tag, 5);
    cache_store_free(s);
}

static void cluster_scoped_keys_have_no_namespace(void **state)
{
    (void)state;
    char key[64];
    struct json_object *o = json_tokener_parse("{\"metadata\":{\"name\":\"node-1\"}}");
    assert_int_equal(cache_object_key(o, key, sizeof(key), NULL), 0);
    assert_string_equal(key, "node-1");
    json_object_put(o);
}

static void an_object_without_a_name_is_refused(void **state)
{
    (void)state;
    struct cache_store *s = new_store();
    struct telo_err err;
    struct cache_object *replaced;
    struct json_object *o = json_tokener_parse("{\"metadata\":{\"namespace\":\"x\"}}");
    assert_int_equal(cache_store_put(s, o, &replaced, NULL, &err), -TELO_EINVAL);
    assert_string_equal(err.msg, "object has no metadata.name");
    assert_int_equal(cache_store_len(s), 0);
    json_object_put(o);
    cache_store_free(s);
}

static void indexes_follow_puts_updates_and_deletes(void **state)
{
    (void)state;
    struct cache_store *s = new_store();
    put(s, pod("ns1", "a", "1", "owner-1", "s1"));
    put(s, pod("ns1", "b", "1", "owner-1", "s2"));
    put(s, pod("ns2", "c", "1", "owner-2", "s1"));
    assert_string_equal(lookup(s, "namespace", "ns1"), "ns1/a ns1/b");
    assert_string_equal(lookup(s, "owner", "owner-1"), "ns1/a ns1/b");
    assert_string_equal(lookup(s, "session", "s1"), "ns1/a ns2/c");
    /* A label change moves the object between index values. */
    put(s, pod("ns1", "a", "2", "owner-2", "s2"));
    assert_string_equal(lookup(s, "session", "s1"), "ns2/c");
    assert_string_equal(lookup(s, "session", "s2"), "ns1/a ns1/b");
    assert_string_equal(lookup(s, "owner", "owner-1"), "ns1/b");
    assert_string_equal(lookup(s, "owner", "owner-2"), "ns1/a ns2/c");
    cache_object_free(cache_store_delete(s, "ns1/b"));
    assert_null(cache_store_delete(s, "ns1/b"));
    assert_string_equal(lookup(s, "namespace", "ns1"), "ns1/a");
    assert_string_equal(lookup(s, "owner", "owner-1"), "");
    assert_string_equal(lookup(s, "session", "nothing"), "");
    cache_store_free(s);
}

/* An object whose text no longer parses (as when inflating it runs out of memory) leaves every
 * index on its delete or replacement: the indexes are found by search, since its values cannot
 * be read. A bucket kept pointing at it handed the freed object to the next lookup. */
static void an_object_that_cannot_be_parsed_still_leaves_its_indexes(void **state)
{
    (void)state;
    struct cache_store *s = new_store();
    const struct cache_object *stored[2];
    struct cache_object *replaced = NULL;
    for (int i = 0; i < 2; i++) {
        struct json_object *o = pod("ns1", i ? "b" : "a", "1", "owner-1", "s1");
        assert_int_equal(cache_store_put(s, o, &replaced, &stored[i], NULL), 0);
        assert_null(replaced);
        json_object_put(o);
    }
    put(s, pod("ns2", "c", "1", "owner-1", "s1"));
    /* Claiming one byte more than the text holds: the inflate or the parse fails. */
    for (int i = 0; i < 2; i++) {
        ((struct cache_object *)stored[i])->json_len++;
        assert_null(cache_object_parse(stored[i]));
    }
    cache_object_free(cache_store_delete(s, "ns1/a"));
    assert_string_equal(lookup(s, "namespace", "ns1"), "ns1/b");
    assert_string_equal(lookup(s, "owner", "owner-1"), "ns1/b ns2/c");
    /* Replaced by a new version, the old one leaves too. */
    put(s, pod("ns1", "b", "2", "owner-2", "s2"));
    assert_string_equal(lookup(s, "namespace", "ns1"), "ns1/b");
    assert_string_equal(lookup(s, "owner", "owner-1"), "ns2/c");
    assert_string_equal(lookup(s, "session", "s1"), "ns2/c");
    assert_string_equal(lookup(s, "session", "s2"), "ns1/b");
    /* The buckets left are sound: another object joins them. */
    put(s, pod("ns1", "d", "1", "owner-1", "s1"));
    assert_string_equal(lookup(s, "owner", "owner-1"), "ns1/d ns2/c");
    cache_store_free(s);
}

static void unknown_index_names_itself(void **state)
{
    (void)state;
    struct cache_store *s = new_store();
    struct telo_err err;
    struct collected c = {.n = 0};
    assert_int_equal(cache_store_by_index(s, "nodeName", "x", collect, &c, &err), -TELO_EINVAL);
    assert_string_equal(err.msg, "the store has no index named 'nodeName'");
    cache_store_free(s);
}

static void take_deleted(void *ctx, struct cache_object *obj)
{
    struct collected *c = ctx;
    snprintf(c->keys[c->n++], sizeof(c->keys[0]), "%s", obj->key);
    cache_object_free(obj);
}

static void relist_deletes_objects_that_vanished(void **state)
{
    (void)state;
    struct cache_store *s = new_store();
    put(s, pod("ns", "kept", "1", "o", "s"));
    put(s, pod("ns", "gone-1", "1", "o", "s"));
    put(s, pod("ns", "gone-2", "1", "o", "s"));
    cache_store_mark_stale(s);
    put(s, pod("ns", "kept", "5", "o", "s"));
    put(s, pod("ns", "new", "6", "o", "s"));
    struct collected c = {.n = 0};
    assert_int_equal(cache_store_sweep_stale(s, take_deleted, &c), 2);
    qsort(c.keys, (size_t)c.n, sizeof(c.keys[0]), cmp);
    assert_string_equal(c.keys[0], "ns/gone-1");
    assert_string_equal(c.keys[1], "ns/gone-2");
    assert_string_equal(lookup(s, "session", "s"), "ns/kept ns/new");
    assert_int_equal(cache_store_len(s), 2);
    cache_store_free(s);
}

static void strip_drops_managed_fields_and_last_applied(void **state)
{
    (void)state;
    struct json_object *o = json_tokener_parse(
        "{\"metadata\":{\"name\":\"a\",\"managedFields\":[{\"manager\":\"kubectl\"}],"
        "\"annotations\":{\"kubectl.kubernetes.io/last-applied-configuration\":\"{...}\","
        "\"keep\":\"me\"}}}");
    cache_transform_strip(o);
    assert_string_equal(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
                        "{\"metadata\":{\"name\":\"a\",\"annotations\":{\"keep\":\"me\"}}}");
    json_object_put(o);
}

/* A pod as the API server returns it for a session, trimmed of nothing. */
static const char *const full_pod =
    "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"telo-run-hello-world\","
    "\"namespace\":\"telo-sessions\",\"uid\":\"7d4b6c1e-2a7f-4a57-9a55-0f0c1e5b9d21\","
    "\"resourceVersion\":\"123456\",\"generation\":1,\"creationTimestamp\":\"2026-11-29T16:00:"
    "00Z\","
    "\"labels\":{\"app.kubernetes.io/managed-by\":\"telo-operator\",\"telo.run/session\":"
    "\"hello-world\"},\"ownerReferences\":[{\"apiVersion\":\"telo.run/v1alpha1\",\"kind\":"
    "\"TeloSession\",\"name\":\"hello-world\",\"uid\":\"0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0\","
    "\"controller\":true,\"blockOwnerDeletion\":true}],\"managedFields\":[{\"manager\":"
    "\"telo-operator\",\"operation\":\"Apply\",\"apiVersion\":\"v1\",\"time\":"
    "\"2026-11-29T16:00:00Z\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:metadata\":{"
    "\"f:labels\":{\"f:telo.run/session\":{}}},\"f:spec\":{\"f:containers\":{\"k:{\\\"name\\\":"
    "\\\"session\\\"}\":{\".\":{},\"f:image\":{},\"f:name\":{}}}}}}]},\"spec\":{\"containers\":[{"
    "\"name\":\"session\",\"image\":\"registry.local/telo-session:0123456789abcdef\",\"command\":"
    "[\"telo\",\"run\",\"/app/app/telo.yaml\",\"--no-cache-write\"],\"resources\":{\"limits\":{"
    "\"cpu\":\"1\",\"memory\":\"512Mi\"},\"requests\":{\"cpu\":\"1\",\"memory\":\"512Mi\"}},"
    "\"securityContext\":{\"allowPrivilegeEscalation\":false,\"readOnlyRootFilesystem\":true,"
    "\"runAsNonRoot\":true,\"runAsUser\":1000,\"capabilities\":{\"drop\":[\"ALL\"]}},\"tty\":true,"
    "\"stdin\":true,\"volumeMounts\":[{\"name\":\"app\",\"mountPath\":\"/app\"},{\"name\":\"tmp\","
    "\"mountPath\":\"/tmp\"}]}],\"nodeName\":\"kwok-node-0\",\"restartPolicy\":\"Never\","
    "\"activeDeadlineSeconds\":3600,\"automountServiceAccountToken\":false,\"volumes\":[{\"name\":"
    "\"app\",\"emptyDir\":{}},{\"name\":\"tmp\",\"emptyDir\":{}}]},\"status\":{\"phase\":"
    "\"Running\",\"podIP\":\"10.244.0.17\",\"hostIP\":\"127.0.0.1\",\"startTime\":"
    "\"2026-11-29T16:00:01Z\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\","
    "\"lastTransitionTime\":\"2026-11-29T16:00:02Z\"}],\"containerStatuses\":[{\"name\":"
    "\"session\",\"ready\":true,\"restartCount\":0,\"image\":"
    "\"registry.local/telo-session:0123456789abcdef\",\"imageID\":\"\",\"started\":true,"
    "\"state\":{\"running\":{\"startedAt\":\"2026-11-29T16:00:02Z\"}}}]}}";

static void projection_keeps_identity_and_paths_and_fits_the_budget(void **state)
{
    (void)state;
    struct json_object *full = json_tokener_parse(full_pod);
    assert_non_null(full);
    const char *const paths[] = {"metadata.labels",
                                 "status.phase",
                                 "status.podIP",
                                 "status.containerStatuses[].name",
                                 "status.containerStatuses[].state",
                                 "status.containerStatuses[].restartCount",
                                 "spec.nodeName"};
    struct json_object *p = cache_transform_project(full, paths, 7);
    assert_non_null(p);
    struct json_object *v;
    assert_true(json_object_object_get_ex(p, "spec", &v));
    assert_int_equal(json_object_object_length(v), 1); /* only nodeName */
    assert_true(json_object_object_get_ex(p, "metadata", &v));
    assert_false(json_object_object_get_ex(v, "managedFields", NULL));
    assert_true(json_object_object_get_ex(v, "ownerReferences", NULL));
    assert_false(json_object_object_get_ex(v, "creationTimestamp", NULL));

    assert_true(json_object_object_get_ex(v, "ownerReferences", &v));
    assert_string_equal(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN),
                        "[{\"uid\":\"0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0\",\"kind\":"
                        "\"TeloSession\",\"name\":\"hello-world\",\"controller\":true}]");
    assert_true(json_object_object_get_ex(p, "status", &v));
    assert_true(json_object_object_get_ex(v, "containerStatuses", &v));
    assert_string_equal(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN),
                        "[{\"name\":\"session\",\"state\":{\"running\":{\"startedAt\":"
                        "\"2026-11-29T16:00:02Z\"}},\"restartCount\":0}]");

    /* The budget: well under 1 KiB of cache per pod, indexes included, with a distinct owner
     * per pod as sessions have. A pod informer indexes by namespace and owner (a child maps to
     * its session through its owner reference); a third, label, index is shown for scale. */
    const struct cache_index_def defs[] = {
        {"namespace", cache_index_namespace, NULL},
        {"owner", cache_index_owner_uid, NULL},
        {"session", cache_index_label, "telo.run/session"},
    };
    struct cache_store *s = cache_store_new(defs, 2);
    struct cache_store *s3 = cache_store_new(defs, 3);
    enum { PODS = 2000 };
    for (int i = 0; i < PODS; i++) {
        char name[64], uid[64];
        snprintf(name, sizeof(name), "telo-run-session-%d", i);
        snprintf(uid, sizeof(uid), "0b1c2d3e-4f50-6172-8394-%012d", i);
        struct json_object *meta, *labels, *refs;
        json_object_object_get_ex(p, "metadata", &meta);
        json_object_object_add(meta, "name", json_object_new_string(name));
        json_object_object_get_ex(meta, "labels", &labels);
        json_object_object_add(labels, "telo.run/session", json_object_new_string(name + 9));
        json_object_object_get_ex(meta, "ownerReferences", &refs);
        json_object_object_add(json_object_array_get_idx(refs, 0), "uid",
                               json_object_new_string(uid));
        struct cache_object *replaced;
        assert_int_equal(cache_store_put(s, p, &replaced, NULL, NULL), 0);
        assert_int_equal(cache_store_put(s3, p, &replaced, NULL, NULL), 0);
    }
    size_t per_pod = cache_store_bytes(s) / PODS;
    /* Not the first pod: its text is the store's dictionary, so it packs to a few bytes. */
    const struct cache_object *one = cache_store_get(s, "telo-sessions/telo-run-session-1999");
    print_message("full pod %zu bytes of JSON; cached projection %u bytes of JSON, %u stored; per "
                  "pod with namespace+owner indexes %zu bytes, with a label index too %zu bytes\n",
                  strlen(full_pod), one->json_len, one->stored_len, per_pod,
                  cache_store_bytes(s3) / PODS);
    /* Compressed: less than the text alone, half the budget of 1 KiB before compression. */
    assert_true(per_pod < one->json_len);
    assert_true(per_pod < 512);
    cache_store_free(s3);
    cache_store_free(s);
    json_object_put(p);
    json_object_put(full);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(put_get_and_replace),
        cmocka_unit_test(objects_of_every_shape_read_back),
        cmocka_unit_test(equal_objects_store_equal_bytes),
        cmocka_unit_test(objects_carry_their_tag_from_each_put),
        cmocka_unit_test(cluster_scoped_keys_have_no_namespace),
        cmocka_unit_test(an_object_without_a_name_is_refused),
        cmocka_unit_test(indexes_follow_puts_updates_and_deletes),
        cmocka_unit_test(an_object_that_cannot_be_parsed_still_leaves_its_indexes),
        cmocka_unit_test(unknown_index_names_itself),
        cmocka_unit_test(relist_deletes_objects_that_vanished),
        cmocka_unit_test(strip_drops_managed_fields_and_last_applied),
        cmocka_unit_test(projection_keeps_identity_and_paths_and_fits_the_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
