/* Tests for pkg/session/basedigest.c (base-image freshness, issue 17): who needs a digest, the tag
 * with and without one, the registry's Docker-Content-Digest checked, image references split, the
 * table's TTL, shared lookups and failures; and the image step's decisions on them (image.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "imagebuild/depkey.h"
#include "session/basedigest.h"
#include "session/image.h"

#include <stdio.h>
#include <string.h>

#define TAG "0123456789abcdef0123456789abcdef"
#define D1  "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2  "sha256:2222222222222222222222222222222222222222222222222222222222222222"
#define IMG "127.0.0.1:5001/telo/base:slim"

static void test_wanted_only_under_always_and_unpinned(void **state)
{
    (void)state;
    assert_true(session_base_digest_wanted("Always", "telorun/node:latest-slim"));
    assert_false(session_base_digest_wanted("IfNotPresent", "telorun/node:latest-slim"));
    assert_false(session_base_digest_wanted("Never", "telorun/node:latest-slim"));
    assert_false(session_base_digest_wanted(NULL, "telorun/node:latest-slim"));
    assert_false(session_base_digest_wanted("Always", "telorun/node@" D1));
    assert_false(session_base_digest_wanted("Always", NULL));
}

static struct session_base_digest digest_of(enum session_digest_state st, const char *d)
{
    struct session_base_digest out;
    memset(&out, 0, sizeof(out));
    out.state = st;
    snprintf(out.digest, sizeof(out.digest), "%s", d);
    return out;
}

static void test_the_tag_with_and_without_a_digest(void **state)
{
    (void)state;
    char a[BUILD_TAG_LEN + 1], b[BUILD_TAG_LEN + 1], c[BUILD_TAG_LEN + 1];
    /* No digest: the bundle's tag itself (the reference's key without base-digest). */
    struct session_base_digest none = digest_of(SESSION_DIGEST_NONE, D1);
    session_base_digest_tag(TAG, &none, a);
    assert_string_equal(a, TAG);
    session_base_digest_tag(TAG, NULL, a);
    assert_string_equal(a, TAG);
    struct session_base_digest failed_unknown = digest_of(SESSION_DIGEST_FAILED, "");
    session_base_digest_tag(TAG, &failed_unknown, a);
    assert_string_equal(a, TAG);
    /* A digest: another tag, stable, and another digest another again. */
    struct session_base_digest d1 = digest_of(SESSION_DIGEST_FRESH, D1);
    struct session_base_digest d2 = digest_of(SESSION_DIGEST_FRESH, D2);
    session_base_digest_tag(TAG, &d1, a);
    session_base_digest_tag(TAG, &d1, b);
    session_base_digest_tag(TAG, &d2, c);
    assert_int_equal(strlen(a), BUILD_TAG_LEN);
    assert_int_equal(strspn(a, "0123456789abcdef"), BUILD_TAG_LEN);
    assert_string_equal(a, b);
    assert_string_not_equal(a, TAG);
    assert_string_not_equal(a, c);
    /* A failure with a last known digest keys on it: the cached image's tag. */
    struct session_base_digest stale = digest_of(SESSION_DIGEST_FAILED, D1);
    session_base_digest_tag(TAG, &stale, b);
    assert_string_equal(a, b);
    /* Vector: sha256("tag\0" TAG "\0base-digest\0" D1 "\0"), first 32 hex characters. */
    assert_string_equal(a, "4008ad10835b3cc05e271b9b5bbda2cc");
}

static void test_docker_content_digest_is_checked(void **state)
{
    (void)state;
    assert_true(session_base_digest_valid(D1));
    assert_true(session_base_digest_valid(
        "sha512:"
        "00000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
        "000000000000000000000000000000000000000000"));
    assert_true(session_base_digest_valid("multihash+base58:QmRZxt2b1FVZPNqd8hsiykDL3TdBDeTSPX9Kv4"
                                          "6HmX4Gx8"));
    static const char *const bad[] = {
        NULL,
        "",
        "sha256",
        "sha256:",
        ":abc",
        "sha256:1111",                                                             /* short */
        "sha256:111111111111111111111111111111111111111111111111111111111111111G", /* not hex */
        "SHA256:1111111111111111111111111111111111111111111111111111111111111111",
        "sha256:1111111111111111111111111111111111111111111111111111111111111111\r\nX: y",
        "sha256:11111111111111111111111111111111111111111111111111111111111111111", /* long */
        "+sha:abc",
        "sha+:abc",
        "sh..a:abc",
        "sha:a b",
        "sha:a/b",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (session_base_digest_valid(bad[i]))
            fail_msg("accepted %s", bad[i] ? bad[i] : "NULL");
    }
    /* Longer than SESSION_DIGEST_MAX, though made of the grammar's characters. */
    char longest[SESSION_DIGEST_MAX + 2];
    memset(longest, 'a', sizeof(longest) - 1);
    longest[1] = ':';
    longest[sizeof(longest) - 1] = '\0';
    assert_false(session_base_digest_valid(longest));
    longest[sizeof(longest) - 2] = '\0';
    assert_true(session_base_digest_valid(longest));
}

static void split_is(const char *image, const char *repository, const char *tag)
{
    char r[600], t[200];
    if (session_base_image_split(image, r, sizeof(r), t, sizeof(t)) != 0)
        fail_msg("refused %s", image);
    assert_string_equal(r, repository);
    assert_string_equal(t, tag);
}

static void test_image_references_split_as_docker_reads_them(void **state)
{
    (void)state;
    split_is("telorun/node:latest-slim", "registry-1.docker.io/telorun/node", "latest-slim");
    split_is("node", "registry-1.docker.io/library/node", "latest");
    split_is("node:22", "registry-1.docker.io/library/node", "22");
    split_is("docker.io/telorun/node:1", "registry-1.docker.io/telorun/node", "1");
    split_is("index.docker.io/node:1", "registry-1.docker.io/library/node", "1");
    split_is(IMG, "127.0.0.1:5001/telo/base", "slim");
    split_is("127.0.0.1:5001/telo/base", "127.0.0.1:5001/telo/base", "latest");
    split_is("localhost/base:x", "localhost/base", "x");
    split_is("ghcr.io/a/b/c:v1.2", "ghcr.io/a/b/c", "v1.2");
    char r[600], t[200];
    static const char pinned[] = "node@" D1;
    const char *const bad[] = {"", pinned, "node:", "reg.example:5000/", "reg.example/:t"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (session_base_image_split(bad[i], r, sizeof(r), t, sizeof(t)) == 0)
            fail_msg("accepted '%s' as %s : %s", bad[i], r, t);
    }
    assert_int_equal(session_base_image_split(IMG, r, 10, t, sizeof(t)), -1);
    assert_int_equal(session_base_image_split(IMG, r, sizeof(r), t, 3), -1);
}

/* ---- the table ---- */

struct woken {
    char keys[8][32];
    size_t n;
};

static void wake(void *ud, const char *waiter)
{
    struct woken *w = ud;
    if (w->n < 8)
        snprintf(w->keys[w->n++], sizeof(w->keys[0]), "%s", waiter);
}

static void test_one_lookup_per_image_shared_by_all_who_ask(void **state)
{
    (void)state;
    struct session_base_digests *t = session_base_digests_new(0);
    struct session_base_digest d;
    session_base_digests_get(t, IMG, 100, 300, &d);
    assert_int_equal(d.state, SESSION_DIGEST_NONE);
    assert_string_equal(d.digest, "");
    /* 100 sessions on one base: the first looks up, the others join it. */
    assert_int_equal(session_base_digests_ask(t, IMG, 100, 300, "ns/s0"), SESSION_DIGEST_LOOKUP);
    char key[32];
    for (int i = 1; i < 100; i++) {
        snprintf(key, sizeof(key), "ns/s%d", i);
        assert_int_equal(session_base_digests_ask(t, IMG, 100, 300, key), SESSION_DIGEST_JOIN);
    }
    /* Asking twice parks once. */
    assert_int_equal(session_base_digests_ask(t, IMG, 100, 300, "ns/s1"), SESSION_DIGEST_JOIN);
    session_base_digests_get(t, IMG, 100, 300, &d);
    assert_int_equal(d.state, SESSION_DIGEST_NONE);
    struct woken w = {0};
    session_base_digests_settle(t, IMG, D1, NULL, 101, wake, &w);
    assert_int_equal(w.n, 8); /* capped by the test's record: 100 were woken */
    assert_string_equal(w.keys[0], "ns/s0");
    assert_string_equal(w.keys[1], "ns/s1");
    session_base_digests_get(t, IMG, 101, 300, &d);
    assert_int_equal(d.state, SESSION_DIGEST_FRESH);
    assert_string_equal(d.digest, D1);
    /* Within the TTL: held, no second lookup. */
    assert_int_equal(session_base_digests_ask(t, IMG, 400, 300, "ns/s100"), SESSION_DIGEST_HELD);
    /* Another image is its own lookup. */
    assert_int_equal(session_base_digests_ask(t, "node:22", 101, 300, "ns/x"),
                     SESSION_DIGEST_LOOKUP);
    assert_int_equal(session_base_digests_len(t), 2);
    session_base_digests_free(t);
}

static void test_a_digest_expires_after_its_ttl(void **state)
{
    (void)state;
    struct session_base_digests *t = session_base_digests_new(0);
    struct session_base_digest d;
    assert_int_equal(session_base_digests_ask(t, IMG, 0, 300, "ns/a"), SESSION_DIGEST_LOOKUP);
    session_base_digests_settle(t, IMG, D1, NULL, 10, NULL, NULL);
    session_base_digests_get(t, IMG, 310, 300, &d);
    assert_int_equal(d.state, SESSION_DIGEST_FRESH);
    session_base_digests_get(t, IMG, 310.5, 300, &d);
    assert_int_equal(d.state, SESSION_DIGEST_NONE);
    assert_string_equal(d.digest, D1); /* still known, not fresh */
    assert_int_equal(session_base_digests_ask(t, IMG, 310.5, 300, "ns/b"), SESSION_DIGEST_LOOKUP);
    /* The tag moved: the new digest replaces the old. */
    session_base_digests_settle(t, IMG, D2, NULL, 311, NULL, NULL);
    session_base_digests_get(t, IMG, 311, 300, &d);
    assert_int_equal(d.state, SESSION_DIGEST_FRESH);
    assert_string_equal(d.digest, D2);
    /* A clock that went back by more than the TTL does not keep an answer forever. */
    session_base_digests_get(t, IMG, 0, 300, &d);
    assert_int_equal(d.state, SESSION_DIGEST_NONE);
    session_base_digests_free(t);
}

static void test_a_failed_lookup_keeps_the_last_known_digest(void **state)
{
    (void)state;
    struct session_base_digests *t = session_base_digests_new(0);
    struct session_base_digest d;
    /* Never known: FAILED with no digest (the key without one). */
    assert_int_equal(session_base_digests_ask(t, IMG, 0, 60, "ns/a"), SESSION_DIGEST_LOOKUP);
    struct woken w = {0};
    session_base_digests_settle(t, IMG, NULL, IMG ": Couldn't connect to server", 1, wake, &w);
    assert_int_equal(w.n, 1);
    session_base_digests_get(t, IMG, 1, 60, &d);
    assert_int_equal(d.state, SESSION_DIGEST_FAILED);
    assert_string_equal(d.digest, "");
    assert_string_equal(d.reason, IMG ": Couldn't connect to server");
    /* A failure stands for the TTL too: a registry that is down is not asked by every pass. */
    assert_int_equal(session_base_digests_ask(t, IMG, 30, 60, "ns/b"), SESSION_DIGEST_HELD);
    assert_int_equal(session_base_digests_ask(t, IMG, 62, 60, "ns/b"), SESSION_DIGEST_LOOKUP);
    session_base_digests_settle(t, IMG, D1, NULL, 62, NULL, NULL);
    /* Known, then the registry goes down: the last known digest, and why. */
    assert_int_equal(session_base_digests_ask(t, IMG, 200, 60, "ns/c"), SESSION_DIGEST_LOOKUP);
    session_base_digests_settle(t, IMG, NULL, "HTTP 503", 201, NULL, NULL);
    session_base_digests_get(t, IMG, 201, 60, &d);
    assert_int_equal(d.state, SESSION_DIGEST_FAILED);
    assert_string_equal(d.digest, D1);
    char note[640];
    assert_non_null(session_base_digest_note(&d, note, sizeof(note)));
    assert_string_equal(note, "Base image freshness check failed (HTTP 503); using cached image");
    /* An answer that is no digest is a failure too, and the last known one stays. */
    assert_int_equal(session_base_digests_ask(t, IMG, 300, 60, "ns/d"), SESSION_DIGEST_LOOKUP);
    session_base_digests_settle(t, IMG, "sha256:not-hex", NULL, 300, NULL, NULL);
    session_base_digests_get(t, IMG, 300, 60, &d);
    assert_int_equal(d.state, SESSION_DIGEST_FAILED);
    assert_string_equal(d.digest, D1);
    assert_string_equal(d.reason, "the registry gave no valid digest");
    struct session_base_digest fresh = digest_of(SESSION_DIGEST_FRESH, D1);
    assert_null(session_base_digest_note(&fresh, note, sizeof(note)));
    session_base_digests_free(t);
}

static void test_the_table_is_bounded(void **state)
{
    (void)state;
    struct session_base_digests *t = session_base_digests_new(2);
    assert_int_equal(session_base_digests_ask(t, "a:1", 0, 60, "w"), SESSION_DIGEST_LOOKUP);
    assert_int_equal(session_base_digests_ask(t, "b:1", 0, 60, "w"), SESSION_DIGEST_LOOKUP);
    /* Both in flight: no room, nothing parked. */
    assert_int_equal(session_base_digests_ask(t, "c:1", 0, 60, "w"), SESSION_DIGEST_FULL);
    session_base_digests_settle(t, "a:1", D1, NULL, 1, NULL, NULL);
    session_base_digests_settle(t, "b:1", D1, NULL, 2, NULL, NULL);
    /* The oldest answer makes room. */
    assert_int_equal(session_base_digests_ask(t, "c:1", 3, 60, "w"), SESSION_DIGEST_LOOKUP);
    assert_int_equal(session_base_digests_len(t), 2);
    struct session_base_digest d;
    session_base_digests_get(t, "a:1", 3, 60, &d);
    assert_int_equal(d.state, SESSION_DIGEST_NONE);
    session_base_digests_get(t, "b:1", 3, 60, &d);
    assert_int_equal(d.state, SESSION_DIGEST_FRESH);
    /* Settling what was dropped is harmless. */
    session_base_digests_settle(t, "zzz:1", D1, NULL, 3, NULL, NULL);
    session_base_digests_free(t);
    session_base_digests_free(NULL);
}

/* ---- the image step (image.c) on them ---- */

static void obs_init(struct session_image_obs *obs, const struct session_base_digest *d,
                     enum session_presence presence, const char *presence_message)
{
    memset(obs, 0, sizeof(*obs));
    obs->self = "demo/a";
    obs->base_image = IMG;
    obs->tag = TAG;
    obs->ref = "127.0.0.1:5001/telo/apps:" TAG;
    obs->build_namespace = "telo-builds";
    obs->job_name = "telo-build-" TAG;
    obs->timeout_seconds = 600;
    obs->now = 1772359200.0;
    obs->presence = presence;
    obs->presence_message = presence_message;
    obs->base_digest_wanted = 1;
    obs->base_digest = d;
}

static void test_the_image_step_waits_for_the_digest_first(void **state)
{
    (void)state;
    struct session_base_digest none = digest_of(SESSION_DIGEST_NONE, D1);
    struct session_image_obs obs;
    struct session_image_plan plan;
    /* Even with a registry answer at hand: the tag it was asked about may be stale. */
    obs_init(&obs, &none, SESSION_PRESENCE_PRESENT, NULL);
    session_image_decide(&obs, &plan);
    assert_int_equal(plan.step, SESSION_IMAGE_WAIT);
    assert_true(plan.check_base_digest);
    assert_false(plan.check_registry);
    obs.base_digest = NULL;
    session_image_decide(&obs, &plan);
    assert_int_equal(plan.step, SESSION_IMAGE_WAIT);
    assert_true(plan.check_base_digest);
    /* With the digest: the registry's answer about the tag made with it. */
    struct session_base_digest fresh = digest_of(SESSION_DIGEST_FRESH, D1);
    obs.base_digest = &fresh;
    obs.presence = SESSION_PRESENCE_NONE;
    session_image_decide(&obs, &plan);
    assert_int_equal(plan.step, SESSION_IMAGE_WAIT);
    assert_false(plan.check_base_digest);
    assert_true(plan.check_registry);
    obs.presence = SESSION_PRESENCE_PRESENT;
    session_image_decide(&obs, &plan);
    assert_int_equal(plan.step, SESSION_IMAGE_READY);
    assert_string_equal(plan.reason, "CacheHit");
    assert_string_equal(plan.progress, "Using cached image");
    assert_string_equal(plan.freshness, "");
    /* IfNotPresent: no digest asked, as today. */
    obs.base_digest_wanted = 0;
    obs.base_digest = &none;
    session_image_decide(&obs, &plan);
    assert_int_equal(plan.step, SESSION_IMAGE_READY);
    assert_false(plan.check_base_digest);
    /* Nothing to build: the base image runs as it is, no digest needed. */
    obs.base_digest_wanted = 1;
    obs.no_dependencies = 1;
    session_image_decide(&obs, &plan);
    assert_int_equal(plan.step, SESSION_IMAGE_READY);
    assert_string_equal(plan.reason, "BaseImage");
    assert_false(plan.check_base_digest);
}

static void test_a_failed_lookup_says_so_in_the_progress(void **state)
{
    (void)state;
    struct session_base_digest failed = digest_of(SESSION_DIGEST_FAILED, D1);
    snprintf(failed.reason, sizeof(failed.reason), "%s", IMG ": Couldn't connect to server");
    struct session_image_obs obs;
    struct session_image_plan plan;
    /* The cached image: a cache hit, in the reference runner's words. */
    obs_init(&obs, &failed, SESSION_PRESENCE_PRESENT, NULL);
    session_image_decide(&obs, &plan);
    assert_int_equal(plan.step, SESSION_IMAGE_READY);
    assert_string_equal(plan.reason, "CacheHit");
    assert_string_equal(plan.progress, "Base image freshness check failed (" IMG
                                       ": Couldn't connect to server); using cached image");
    assert_true(plan.progress_done);
    /* The note the ImageReady condition keeps once the progress is the pod's. */
    assert_string_equal(plan.freshness, "Base image freshness check failed (" IMG
                                        ": Couldn't connect to server); using cached image");
    /* Not in the registry: built, and the progress says why the digest is not fresh. */
    obs.presence = SESSION_PRESENCE_ABSENT;
    session_image_decide(&obs, &plan);
    assert_int_equal(plan.step, SESSION_IMAGE_BUILDING);
    assert_true(plan.create_job);
    assert_string_equal(plan.progress,
                        "Building image\u2026 (Base image freshness check failed (" IMG
                        ": Couldn't connect to server); using cached image)");
    /* The registry check failed too: both are said. */
    obs.presence = SESSION_PRESENCE_UNKNOWN;
    obs.presence_message = "registry check of x failed 3 times";
    session_image_decide(&obs, &plan);
    assert_int_equal(plan.step, SESSION_IMAGE_BUILDING);
    assert_non_null(strstr(plan.progress, "Base image freshness check failed ("));
    assert_non_null(strstr(plan.progress, "; registry check of x failed 3 times)"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wanted_only_under_always_and_unpinned),
        cmocka_unit_test(test_the_tag_with_and_without_a_digest),
        cmocka_unit_test(test_docker_content_digest_is_checked),
        cmocka_unit_test(test_image_references_split_as_docker_reads_them),
        cmocka_unit_test(test_one_lookup_per_image_shared_by_all_who_ask),
        cmocka_unit_test(test_a_digest_expires_after_its_ttl),
        cmocka_unit_test(test_a_failed_lookup_keeps_the_last_known_digest),
        cmocka_unit_test(test_the_table_is_bounded),
        cmocka_unit_test(test_the_image_step_waits_for_the_digest_first),
        cmocka_unit_test(test_a_failed_lookup_says_so_in_the_progress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
