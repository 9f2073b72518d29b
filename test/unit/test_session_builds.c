/* Unit tests for pkg/session/builds.c: the bundle memo, which must never hand one session's
 * verdict to another whose bytes differ. */
#include "session/builds.h"
#include "session/config.h"
#include "session/spec.h"

#include "build_tgz.h"
#include "mock_client.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* Nothing here reaches the API server; every request is answered 404. */
static void no_route(int fd, const struct mock_req *req)
{
    (void)req;
    mock_reply(fd, 404, NULL, "{\"kind\":\"Status\",\"code\":404}");
}

static void requeue(void *ud, const char *key)
{
    (void)ud;
    (void)key;
}

struct fixture {
    struct mock_client *c;
    struct session_config *cfg;
    struct session_builds *b;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct telo_err err;
    if (!f || !(f->c = mock_client_new("builds", no_route, "t\n", NULL)) ||
        !(f->cfg = session_config_new()) ||
        !(f->b = session_builds_new(f->c->t, f->cfg, requeue, NULL, &err))) {
        if (f) {
            mock_client_free(f->c);
            session_config_free(f->cfg);
        }
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    session_builds_free(f->b);
    session_config_free(f->cfg);
    mock_client_free(f->c);
    free(f);
    return 0;
}

static struct session cm_session(const char *key)
{
    struct session s;
    memset(&s, 0, sizeof(s));
    s.name = "app";
    s.namespace = "team";
    s.entry = "main.js";
    s.bundle_configmap = "bundles";
    s.bundle_configmap_key = key;
    return s;
}

/* Two sessions on one ConfigMap (same resourceVersion) under different keys: the second one's
 * bytes are read, not answered with the first one's tag. */
static void test_memo_tells_configmap_keys_apart(void **state)
{
    struct fixture *f = *state;
    const struct tgz_entry good[] = {{.path = "main.js", .data = "console.log(1)\n"}};
    size_t len = 0;
    unsigned char *tgz = tgz_make(good, 1, &len);
    static const char bad[] = "not a gzip tar";

    struct session a = cm_session("good.tgz");
    struct session_bundle_key k;
    session_builds_bundle_key(f->b, "team/bundles@7", tgz, len, "good", &a, &k);
    assert_string_equal(k.error, "");
    assert_true(k.tag[0] != '\0');

    struct session b = cm_session("bad.tgz");
    session_builds_bundle_key(f->b, "team/bundles@7", bad, sizeof(bad) - 1, "bad", &b, &k);
    assert_true(k.error[0] != '\0');
    assert_non_null(strstr(k.error, "bad"));

    /* The first key is still remembered as it was. */
    session_builds_bundle_key(f->b, "team/bundles@7", bad, sizeof(bad) - 1, "bad", &a, &k);
    assert_string_equal(k.error, "");
    free(tgz);
}

/* An entry longer than the key can hold is refused by name, not cut short (a cut key would
 * match any session whose entry starts the same). */
static void test_memo_refuses_overlong_parts(void **state)
{
    struct fixture *f = *state;
    char entry[BUILD_ENTRY_MAX + 2];
    memset(entry, 'a', sizeof(entry) - 1);
    entry[sizeof(entry) - 1] = '\0';
    struct session s = cm_session("bundle.tgz");
    s.entry = entry;
    struct session_bundle_key k;
    session_builds_bundle_key(f->b, "team/bundles@7", "x", 1, "src", &s, &k);
    assert_non_null(strstr(k.error, "spec.entry has 1025 characters"));

    /* The longest legal parts together fit: the entry is the last part of the key, so a cut
     * would lose it first. */
    char url[2049], image[513];
    memset(url, 'u', sizeof(url) - 1);
    url[sizeof(url) - 1] = '\0';
    memset(image, 'i', sizeof(image) - 1);
    image[sizeof(image) - 1] = '\0';
    entry[BUILD_ENTRY_MAX] = '\0';
    s.registry_url = url;
    s.image = image;
    session_builds_bundle_key(f->b, "team/bundles@7", "x", 1, "src", &s, &k);
    assert_null(strstr(k.error, "characters"));
    assert_true(k.error[0] != '\0'); /* "x" is no gzip tar: read, not answered from the memo */
}

/* Past 256 keys the memo forgets the one used longest ago, not every key: a bundle in use stays
 * remembered while another tenant's stream of distinct bundles goes through. */
static void test_a_full_memo_forgets_the_least_recently_used(void **state)
{
    struct fixture *f = *state;
    const struct tgz_entry good[] = {{.path = "main.js", .data = "console.log(1)\n"}};
    size_t len = 0;
    unsigned char *tgz = tgz_make(good, 1, &len);
    static const char bad[] = "not a gzip tar";
    struct session s = cm_session("bundle.tgz");
    struct session_bundle_key k;
    session_builds_bundle_key(f->b, "team/mine@1", tgz, len, "mine", &s, &k);
    assert_string_equal(k.error, "");
    char memo[64];
    for (int i = 0; i < 600; i++) {
        snprintf(memo, sizeof(memo), "flood/cm-%d@1", i);
        session_builds_bundle_key(f->b, memo, tgz, len, "flood", &s, &k);
        if (i % 100 == 0) { /* in use meanwhile: answered from the memo (the bytes are not read) */
            session_builds_bundle_key(f->b, "team/mine@1", bad, sizeof(bad) - 1, "mine", &s, &k);
            assert_string_equal(k.error, "");
        }
    }
    session_builds_bundle_key(f->b, "team/mine@1", bad, sizeof(bad) - 1, "mine", &s, &k);
    assert_string_equal(k.error, "");
    /* The flood's first keys are gone: asked again, their (now bad) bytes are read. */
    session_builds_bundle_key(f->b, "flood/cm-0@1", bad, sizeof(bad) - 1, "flood", &s, &k);
    assert_true(k.error[0] != '\0');
    free(tgz);
}

/* The key of a session whose bundle is url, once its download has ended. */
static void url_key(struct fixture *f, const char *url, struct session_bundle_key *k)
{
    struct session s = cm_session(NULL);
    s.bundle_configmap = NULL;
    s.bundle_url = url;
    s.bundle_sha256 = "0000000000000000000000000000000000000000000000000000000000000000";
    const char *wait = NULL;
    assert_int_equal(session_builds_url_key(f->b, &s, "team/app", k, &wait), 0);
    size_t running = 1, waiting = 1;
    for (int i = 0; i < 2000 && running + waiting > 0; i++) {
        ev_run(f->c->loop, EVRUN_ONCE);
        session_builds_downloads(f->b, &running, &waiting);
    }
    assert_int_equal(session_builds_url_key(f->b, &s, "team/app", k, &wait), 1);
}

/* spec.bundle.url at the API server's own address and port (the mock's, on 127.0.0.1) is refused
 * though bundle.allowedUrlCidrs allows the address, and without advice to allow it; another port
 * of that address is not the API server. */
static void test_the_api_server_is_no_bundle_url(void **state)
{
    struct fixture *f = *state;
    struct telo_err err;
    assert_int_equal(session_config_set(f->cfg, "bundle.allowedUrlCidrs=127.0.0.0/8", &err), 0);
    session_builds_free(f->b);
    assert_non_null(f->b = session_builds_new(f->c->t, f->cfg, requeue, NULL, &err));
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/app.tgz", f->c->server.port);
    struct session_bundle_key k;
    url_key(f, url, &k);
    assert_string_equal(k.error, "download of spec.bundle.url refused: the address 127.0.0.1 is "
                                 "the Kubernetes API server");
    assert_string_equal(k.reason, "BundleFetchFailed");
    url_key(f, "http://127.0.0.1:1/app.tgz", &k);
    assert_string_equal(k.error, "download of spec.bundle.url failed: cannot connect");
}

int main(void)
{
    (void)mock_stream_start; /* the shared mock's streaming helper is not needed here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_memo_tells_configmap_keys_apart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memo_refuses_overlong_parts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_full_memo_forgets_the_least_recently_used, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_the_api_server_is_no_bundle_url, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
