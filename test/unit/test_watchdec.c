/* Tests for pkg/kube/watchdec.c: the incremental watch stream decoder. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "kube/status.h"
#include "kube/watchdec.h"
#include "util/err.h"

#include <json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EVENT 4096
#define MAX_SEEN  16

/* What the API server sends for a configmap watch with allowWatchBookmarks, ending in a 410; with
 * a blank line, a CRLF and non-ASCII text to make the splits interesting. */
static const char stream[] =
    "{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{"
    "\"name\":\"a\",\"namespace\":\"ns\",\"uid\":\"6b7c1c4e-0d4e-4f4e-9a0e-3a1d2b3c4d5e\","
    "\"resourceVersion\":\"101\",\"creationTimestamp\":\"2024-05-01T10:00:00Z\"},\"data\":{"
    "\"k\":\"v\"}}}\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":"
    "{\"name\":\"a\",\"namespace\":\"ns\",\"resourceVersion\":\"102\"},\"data\":{\"k\":"
    "\"h\xc3\xa9llo \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x9a\x80\"}}}\n"
    "\n"
    "{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{"
    "\"name\":\"b\",\"namespace\":\"ns\",\"resourceVersion\":\"103\",\"labels\":{\"app\":"
    "\"telo\"}},\"data\":{\"nested\":\"{\\\"json\\\":\\\"in a string\\\\n\\\"}\"}}}\r\n"
    "{\"type\":\"DELETED\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":"
    "{\"name\":\"a\",\"namespace\":\"ns\",\"resourceVersion\":\"104\"}}}\n"
    "   \n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":"
    "{\"resourceVersion\":\"105\",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}\n"
    "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
    "\"status\":\"Failure\",\"message\":\"too old resource version: 101 (2048)\",\"reason\":"
    "\"Expired\",\"code\":410}}\n";

static const enum kube_watch_type want_types[] = {
    KUBE_WATCH_ADDED,   KUBE_WATCH_MODIFIED, KUBE_WATCH_ADDED,
    KUBE_WATCH_DELETED, KUBE_WATCH_BOOKMARK, KUBE_WATCH_ERROR,
};
#define NWANT (sizeof(want_types) / sizeof(want_types[0]))

/* Everything on_event saw, serialized so runs can be compared. */
struct seen {
    size_t n;
    enum kube_watch_type types[MAX_SEEN];
    char *json[MAX_SEEN];
    size_t stop_at; /* 1-based event number at which to return stop_rc; 0 never */
    int stop_rc;
};

static int record(void *ud, enum kube_watch_type type, struct json_object *object)
{
    struct seen *s = ud;
    assert_true(s->n < MAX_SEEN);
    assert_true(json_object_is_type(object, json_type_object));
    s->types[s->n] = type;
    s->json[s->n] = strdup(json_object_to_json_string_ext(object, JSON_C_TO_STRING_PLAIN));
    assert_non_null(s->json[s->n]);
    s->n++;
    if (s->stop_at && s->n == s->stop_at)
        return s->stop_rc;
    return 0;
}

static void seen_release(struct seen *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->json[i]);
    memset(s, 0, sizeof(*s));
}

/* Feeds stream cut at the given offsets (ascending), then finishes; returns the final
 * resourceVersion in rv. */
static void feed_cut(const size_t *cuts, size_t ncuts, struct seen *s, char *rv, size_t rvcap)
{
    struct telo_err err = {0};
    struct kube_watchdec *d = kube_watchdec_new(MAX_EVENT, record, s);
    assert_non_null(d);
    size_t len = sizeof(stream) - 1;
    size_t from = 0;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t to = i < ncuts ? cuts[i] : len;
        int rc = kube_watchdec_feed(d, stream + from, to - from, &err);
        if (rc != 0)
            fail_msg("feed [%zu, %zu): %d %s", from, to, rc, err.msg);
        from = to;
    }
    assert_int_equal(kube_watchdec_finish(d, &err), 0);
    strncpy(rv, kube_watchdec_resource_version(d), rvcap - 1);
    rv[rvcap - 1] = '\0';
    kube_watchdec_free(d);
}

static void assert_same_events(const struct seen *a, const struct seen *b)
{
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        assert_int_equal(a->types[i], b->types[i]);
        assert_string_equal(a->json[i], b->json[i]);
    }
}

/* The reference run: the whole stream in one chunk, checked against what it says. */
static void reference(struct seen *s)
{
    char rv[64];
    memset(s, 0, sizeof(*s));
    feed_cut(NULL, 0, s, rv, sizeof(rv));
    assert_string_equal(rv, "105");
    assert_int_equal(s->n, NWANT);
    for (size_t i = 0; i < NWANT; i++)
        assert_int_equal(s->types[i], want_types[i]);
}

static void whole_stream(void **state)
{
    (void)state;
    struct seen s;
    reference(&s);
    assert_string_equal(
        s.json[0], "{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"a\","
                   "\"namespace\":\"ns\",\"uid\":\"6b7c1c4e-0d4e-4f4e-9a0e-3a1d2b3c4d5e\","
                   "\"resourceVersion\":\"101\",\"creationTimestamp\":\"2024-05-01T10:00:00Z\"},"
                   "\"data\":{\"k\":\"v\"}}");
    /* The non-ASCII value came through byte for byte. */
    assert_non_null(strstr(s.json[1], "h\xc3\xa9llo \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac "
                                      "\xf0\x9f\x9a\x80"));
    assert_string_equal(s.json[4], "{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{"
                                   "\"resourceVersion\":\"105\",\"annotations\":{"
                                   "\"k8s.io\\/initial-events-end\":\"true\"}}}");
    seen_release(&s);
}

static void one_byte_at_a_time(void **state)
{
    (void)state;
    struct seen want, got;
    reference(&want);
    size_t len = sizeof(stream) - 1;
    size_t *cuts = malloc(len * sizeof(*cuts));
    assert_non_null(cuts);
    for (size_t i = 0; i < len - 1; i++)
        cuts[i] = i + 1;
    memset(&got, 0, sizeof(got));
    char rv[64];
    feed_cut(cuts, len - 1, &got, rv, sizeof(rv));
    assert_string_equal(rv, "105");
    assert_same_events(&want, &got);
    free(cuts);
    seen_release(&want);
    seen_release(&got);
}

static void every_two_chunk_split(void **state)
{
    (void)state;
    struct seen want;
    reference(&want);
    for (size_t i = 0; i <= sizeof(stream) - 1; i++) {
        struct seen got;
        memset(&got, 0, sizeof(got));
        char rv[64];
        feed_cut(&i, 1, &got, rv, sizeof(rv));
        assert_string_equal(rv, "105");
        assert_same_events(&want, &got);
        seen_release(&got);
    }
    seen_release(&want);
}

/* xorshift64: a fixed seed makes a failure reproducible. */
static uint64_t next_random(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void random_splits(void **state)
{
    (void)state;
    struct seen want;
    reference(&want);
    uint64_t x = 0x7e10c0ffee15900dULL;
    size_t len = sizeof(stream) - 1;
    size_t cuts[64];
    for (int iter = 0; iter < 1000; iter++) {
        /* Between 1 and 64 chunks, biased towards small ones some of the time. */
        size_t ncuts = 0;
        size_t at = 0;
        size_t span = 1 + next_random(&x) % (iter % 2 ? 40 : 400);
        while (ncuts < 63) {
            at += next_random(&x) % span;
            if (at >= len)
                break;
            cuts[ncuts++] = at;
        }
        struct seen got;
        memset(&got, 0, sizeof(got));
        char rv[64];
        feed_cut(cuts, ncuts, &got, rv, sizeof(rv));
        assert_string_equal(rv, "105");
        assert_same_events(&want, &got);
        seen_release(&got);
    }
    seen_release(&want);
}

struct expired {
    int errors;
    bool expired;
    char message[128];
};

static int on_error_event(void *ud, enum kube_watch_type type, struct json_object *object)
{
    struct expired *e = ud;
    if (type != KUBE_WATCH_ERROR)
        return 0;
    struct kube_status st;
    struct telo_err err = {0};
    assert_int_equal(kube_status_from_json(0, object, &st, &err), 0);
    e->errors++;
    e->expired = kube_status_is_expired(&st);
    strncpy(e->message, st.message, sizeof(e->message) - 1);
    kube_status_release(&st);
    return 0;
}

static void error_event_carries_an_expired_status(void **state)
{
    (void)state;
    struct expired e = {0};
    struct telo_err err = {0};
    struct kube_watchdec *d = kube_watchdec_new(MAX_EVENT, on_error_event, &e);
    assert_int_equal(kube_watchdec_feed(d, stream, sizeof(stream) - 1, &err), 0);
    assert_int_equal(e.errors, 1);
    assert_true(e.expired);
    assert_string_equal(e.message, "too old resource version: 101 (2048)");
    /* The ERROR's Status metadata does not move the resume point. */
    assert_string_equal(kube_watchdec_resource_version(d), "105");
    kube_watchdec_free(d);
}

static const char small_event[] =
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"resourceVersion\":\"7\"}}}";

static void oversize_event_fails_however_it_arrives(void **state)
{
    (void)state;
    size_t limit = sizeof(small_event) - 1; /* exactly one small event, without its newline */
    struct telo_err err = {0};
    struct seen s = {0};

    /* At the limit: fine. */
    struct kube_watchdec *d = kube_watchdec_new(limit, record, &s);
    assert_int_equal(kube_watchdec_feed(d, small_event, limit, &err), 0);
    assert_int_equal(kube_watchdec_feed(d, "\n", 1, &err), 0);
    assert_int_equal(s.n, 1);
    kube_watchdec_free(d);
    seen_release(&s);

    /* One byte over, whole. */
    char big[256];
    (void)snprintf(big, sizeof(big), "%s \n", small_event);
    d = kube_watchdec_new(limit, record, &s);
    assert_int_equal(kube_watchdec_feed(d, big, strlen(big), &err), -TELO_ETOOBIG);
    assert_int_equal(err.code, TELO_ETOOBIG);
    assert_string_equal(err.msg, "watch event #1 is larger than the 62-byte limit (63 bytes "
                                 "without a newline); raise the watch's max event size");
    assert_int_equal(s.n, 0);
    /* The decoder is dead: it says so rather than decode a stream it lost its place in. */
    assert_int_equal(kube_watchdec_feed(d, "\n", 1, &err), -TELO_EINVAL);
    assert_string_equal(err.msg, "watch decoder already failed (too big); start a new watch");
    assert_int_equal(kube_watchdec_finish(d, &err), -TELO_EINVAL);
    kube_watchdec_free(d);

    /* One byte over, a byte at a time: fails as soon as the limit is passed, newline or not. */
    d = kube_watchdec_new(limit, record, &s);
    int rc = 0;
    size_t i;
    for (i = 0; i < strlen(big) && rc == 0; i++)
        rc = kube_watchdec_feed(d, big + i, 1, &err);
    assert_int_equal(rc, -TELO_ETOOBIG);
    assert_int_equal(i, limit + 1);
    kube_watchdec_free(d);

    /* An event after a good one, straddling chunks. */
    char two[512];
    (void)snprintf(two, sizeof(two), "%s\n%s%s\n", small_event, small_event, small_event);
    d = kube_watchdec_new(limit, record, &s);
    assert_int_equal(kube_watchdec_feed(d, two, limit + 10, &err), 0);
    assert_int_equal(kube_watchdec_feed(d, two + limit + 10, strlen(two) - limit - 10, &err),
                     -TELO_ETOOBIG);
    assert_int_equal(s.n, 1);
    assert_string_equal(kube_watchdec_resource_version(d), "7");
    kube_watchdec_free(d);
    seen_release(&s);
}

/* Feeds text whole to a fresh decoder and returns feed's result, with err filled. */
static int feed_one(const char *text, struct seen *s, struct telo_err *err)
{
    struct kube_watchdec *d = kube_watchdec_new(MAX_EVENT, record, s);
    assert_non_null(d);
    int rc = kube_watchdec_feed(d, text, strlen(text), err);
    kube_watchdec_free(d);
    return rc;
}

static void malformed_json(void **state)
{
    (void)state;
    struct seen s = {0};
    struct telo_err err = {0};
    char text[256];
    (void)snprintf(text, sizeof(text), "%s\n{\"type\":\"ADDED\",\"object\":{\"a\":1,}}\n",
                   small_event);
    assert_int_equal(feed_one(text, &s, &err), -TELO_EPROTO);
    assert_int_equal(s.n, 1);
    assert_string_equal(err.msg,
                        "watch event #2 is not valid JSON: unexpected character at byte 32");

    assert_int_equal(feed_one("{\"type\":\"ADDED\",\"object\":{\"a\":\n", &s, &err), -TELO_EPROTO);
    assert_string_equal(err.msg, "watch event #1 is truncated JSON (30 bytes)");

    assert_int_equal(
        feed_one("{\"type\":\"ADDED\",\"object\":{}} {\"type\":\"ADDED\"}\n", &s, &err),
        -TELO_EPROTO);
    assert_string_equal(err.msg, "watch event #1 has data after its JSON object at byte 29");

    /* A UTF-8 sequence cut short: bytes were lost, not split. */
    assert_int_equal(feed_one("{\"type\":\"ADDED\",\"object\":{\"a\":\"\xe6\x97\"}}\n", &s, &err),
                     -TELO_EPROTO);
    assert_non_null(strstr(err.msg, "is not valid JSON"));
    seen_release(&s);
}

static void missing_or_unknown_type_and_object(void **state)
{
    (void)state;
    struct seen s = {0};
    struct telo_err err = {0};
    assert_int_equal(feed_one("{\"type\":\"SYNC\",\"object\":{}}\n", &s, &err), -TELO_EPROTO);
    assert_string_equal(err.msg, "watch event #1 has unknown type \"SYNC\" (want ADDED, MODIFIED, "
                                 "DELETED, BOOKMARK or ERROR)");
    assert_int_equal(feed_one("{\"object\":{}}\n", &s, &err), -TELO_EPROTO);
    assert_string_equal(err.msg, "watch event #1 has no \"type\" string");
    assert_int_equal(feed_one("{\"type\":3,\"object\":{}}\n", &s, &err), -TELO_EPROTO);
    assert_string_equal(err.msg, "watch event #1 has no \"type\" string");
    assert_int_equal(feed_one("{\"type\":\"added\",\"object\":{}}\n", &s, &err), -TELO_EPROTO);
    assert_int_equal(feed_one("{\"type\":\"DELETED\"}\n", &s, &err), -TELO_EPROTO);
    assert_string_equal(err.msg, "watch event #1 (DELETED) has no \"object\" object");
    assert_int_equal(feed_one("{\"type\":\"DELETED\",\"object\":null}\n", &s, &err), -TELO_EPROTO);
    assert_int_equal(feed_one("[1,2]\n", &s, &err), -TELO_EPROTO);
    assert_string_equal(err.msg, "watch event #1 is a JSON array, not an object");
    assert_int_equal(feed_one("null\n", &s, &err), -TELO_EPROTO);
    assert_string_equal(err.msg, "watch event #1 is a JSON null, not an object");
    assert_int_equal(s.n, 0);
}

static void callback_stops_decoding(void **state)
{
    (void)state;
    struct seen s = {0};
    s.stop_at = 3;
    s.stop_rc = -TELO_EIO;
    struct telo_err err = {0};
    struct kube_watchdec *d = kube_watchdec_new(MAX_EVENT, record, &s);
    assert_int_equal(kube_watchdec_feed(d, stream, sizeof(stream) - 1, &err), -TELO_EIO);
    assert_int_equal(err.code, TELO_EIO);
    assert_string_equal(err.msg, "watch event #3 (ADDED): the event handler stopped decoding");
    /* Nothing after the refusing event was delivered, and the refused event is not the resume
     * point: a new watch from "102" will send it again. */
    assert_int_equal(s.n, 3);
    assert_string_equal(kube_watchdec_resource_version(d), "102");
    assert_int_equal(kube_watchdec_feed(d, "\n", 1, &err), -TELO_EINVAL);
    kube_watchdec_free(d);
    seen_release(&s);
}

static void finish_checks_for_a_partial_event(void **state)
{
    (void)state;
    struct seen s = {0};
    struct telo_err err = {0};

    /* Cut inside the third event. */
    struct kube_watchdec *d = kube_watchdec_new(MAX_EVENT, record, &s);
    const char *third = strstr(stream, "{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\","
                                       "\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"b\"");
    assert_non_null(third);
    size_t cut = (size_t)(third - stream) + 40;
    assert_int_equal(kube_watchdec_feed(d, stream, cut, &err), 0);
    assert_int_equal(s.n, 2);
    assert_int_equal(kube_watchdec_finish(d, &err), -TELO_EPROTO);
    assert_string_equal(err.msg, "watch stream ended inside event #3 (40 bytes)");
    kube_watchdec_free(d);
    seen_release(&s);

    /* Trailing whitespace is not an event. */
    d = kube_watchdec_new(MAX_EVENT, record, &s);
    assert_int_equal(kube_watchdec_feed(d, "\n  \r\n \t", 7, &err), 0);
    assert_int_equal(kube_watchdec_finish(d, &err), 0);
    assert_int_equal(s.n, 0);
    assert_string_equal(kube_watchdec_resource_version(d), "");

    /* A complete last event without its newline is delivered. */
    assert_int_equal(kube_watchdec_feed(d, small_event, strlen(small_event), &err), 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(kube_watchdec_finish(d, &err), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(kube_watchdec_resource_version(d), "7");
    assert_int_equal(kube_watchdec_finish(d, &err), 0);
    assert_int_equal(s.n, 1);
    kube_watchdec_free(d);
    seen_release(&s);
}

static int keep_first(void *ud, enum kube_watch_type type, struct json_object *object)
{
    (void)type;
    struct json_object **kept = ud;
    if (!*kept)
        *kept = json_object_get(object);
    return 0;
}

static void kept_object_outlives_the_decoder(void **state)
{
    (void)state;
    struct json_object *kept = NULL;
    struct telo_err err = {0};
    struct kube_watchdec *d = kube_watchdec_new(MAX_EVENT, keep_first, &kept);
    assert_int_equal(kube_watchdec_feed(d, stream, sizeof(stream) - 1, &err), 0);
    kube_watchdec_free(d);
    struct json_object *metadata, *name;
    assert_true(json_object_object_get_ex(kept, "metadata", &metadata));
    assert_true(json_object_object_get_ex(metadata, "name", &name));
    assert_string_equal(json_object_get_string(name), "a");
    json_object_put(kept);
}

static void arguments_and_names(void **state)
{
    (void)state;
    struct seen s = {0};
    struct telo_err err = {0};
    assert_null(kube_watchdec_new(0, record, &s));
    assert_null(kube_watchdec_new(MAX_EVENT, NULL, &s));
    kube_watchdec_free(NULL);
    assert_string_equal(kube_watchdec_resource_version(NULL), "");
    assert_int_equal(kube_watchdec_feed(NULL, "x", 1, &err), -TELO_EINVAL);
    assert_int_equal(kube_watchdec_finish(NULL, &err), -TELO_EINVAL);

    struct kube_watchdec *d = kube_watchdec_new(MAX_EVENT, record, &s);
    assert_int_equal(kube_watchdec_feed(d, NULL, 0, &err), 0);
    assert_int_equal(kube_watchdec_feed(d, NULL, 1, &err), -TELO_EINVAL);
    kube_watchdec_free(d);

    assert_string_equal(kube_watch_type_name(KUBE_WATCH_ADDED), "ADDED");
    assert_string_equal(kube_watch_type_name(KUBE_WATCH_MODIFIED), "MODIFIED");
    assert_string_equal(kube_watch_type_name(KUBE_WATCH_DELETED), "DELETED");
    assert_string_equal(kube_watch_type_name(KUBE_WATCH_BOOKMARK), "BOOKMARK");
    assert_string_equal(kube_watch_type_name(KUBE_WATCH_ERROR), "ERROR");
    assert_string_equal(kube_watch_type_name((enum kube_watch_type)42), "UNKNOWN");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(whole_stream),
        cmocka_unit_test(one_byte_at_a_time),
        cmocka_unit_test(every_two_chunk_split),
        cmocka_unit_test(random_splits),
        cmocka_unit_test(error_event_carries_an_expired_status),
        cmocka_unit_test(oversize_event_fails_however_it_arrives),
        cmocka_unit_test(malformed_json),
        cmocka_unit_test(missing_or_unknown_type_and_object),
        cmocka_unit_test(callback_stops_decoding),
        cmocka_unit_test(finish_checks_for_a_partial_event),
        cmocka_unit_test(kept_object_outlives_the_decoder),
        cmocka_unit_test(arguments_and_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
