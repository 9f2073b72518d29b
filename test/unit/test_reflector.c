/* Tests for pkg/cache/reflector.c: its list page decoder (cache_list_page_decode), with the
 * cache's strip transform the reflector applies to each item, on pages as the API server sends
 * them and pages whose members have the wrong type; and, against a scripted API server, how often
 * it lists when the server answers 410 Expired. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "cache/reflector.h"
#include "cache/transform.h"
#include "kube/config.h"
#include "kube/transport.h"
#include "mock_http.h"
#include "util/jget.h"

#include <ev.h>
#include <fcntl.h>
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

/* --- against a scripted API server ---------------------------------------------------------- */

static const char expired_status[] =
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"message\":"
    "\"too old resource version\",\"reason\":\"Expired\",\"code\":410}";

/* What the scripted server does beyond answering a first page with continue "c1". */
enum script {
    CONTINUE_EXPIRES,         /* continue=c1 is 410; an unpaged list answers */
    CONTINUE_AND_FULL_EXPIRE, /* continue=c1 and an unpaged list are both 410 */
    WATCH_EXPIRES,            /* the list is one page; every watch is 410 */
};

static enum script script;
/* The server writes one letter per request here, read by the test: F a first page, C a
 * continued page, U an unpaged list, W a watch. */
static int requests[2];

/* The letter of a request, as written to `requests`. */
static char request_kind(const char *path)
{
    if (strstr(path, "watch="))
        return 'W';
    if (strstr(path, "continue="))
        return 'C';
    return strstr(path, "limit=") ? 'F' : 'U';
}

static void route(int fd, const struct mock_req *req)
{
    char what = request_kind(req->path);
    mock_write_all(requests[1], &what, 1);
    const char *one = "{\"metadata\":{\"name\":\"a\",\"namespace\":\"ns\",\"uid\":\"u-a\","
                      "\"resourceVersion\":\"5\"}}";
    char body[512];
    switch (what) {
    case 'W':
        if (script == WATCH_EXPIRES) {
            mock_reply(fd, 410, NULL, expired_status);
            return;
        }
        /* A watch that stays open and quiet: the cache is the list's. */
        mock_stream_start(fd, 200);
        sleep(60);
        return;
    case 'F':
        snprintf(body, sizeof(body),
                 "{\"kind\":\"ConfigMapList\",\"metadata\":{\"resourceVersion\":\"5\"%s},"
                 "\"items\":[%s]}",
                 script == WATCH_EXPIRES ? "" : ",\"continue\":\"c1\"", one);
        mock_reply(fd, 200, NULL, body);
        return;
    case 'C':
        mock_reply(fd, 410, NULL, expired_status);
        return;
    default:
        if (script == CONTINUE_AND_FULL_EXPIRE) {
            mock_reply(fd, 410, NULL, expired_status);
            return;
        }
        snprintf(body, sizeof(body),
                 "{\"kind\":\"ConfigMapList\",\"metadata\":{\"resourceVersion\":\"6\"},"
                 "\"items\":[%s]}",
                 one);
        mock_reply(fd, 200, NULL, body);
        return;
    }
}

struct tally {
    int first, cont, unpaged, watches;
};

static void stop_loop(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

/* Runs a reflector of ConfigMaps against the scripted server for `seconds`, counting the
 * server's requests; returns whether the cache synced. */
static int run_script(enum script s, double seconds, struct tally *tally)
{
    script = s;
    assert_int_equal(pipe(requests), 0);
    struct mock_server server = {0};
    assert_int_equal(mock_start(&server, route), 0);
    char dir[64], token[128], kubeconfig[128];
    snprintf(dir, sizeof(dir), "/tmp/telo-test-reflector-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(token, sizeof(token), "%s/token", dir);
    snprintf(kubeconfig, sizeof(kubeconfig), "%s/kubeconfig", dir);
    FILE *f = fopen(token, "w");
    assert_non_null(f);
    fputs("t0ken\n", f);
    fclose(f);
    assert_int_equal(mock_kubeconfig(kubeconfig, server.port, token), 0);
    struct kube_config_options o = {.kubeconfig = kubeconfig};
    struct kube_config *cfg = NULL;
    struct telo_err err;
    if (kube_config_load(&o, &cfg, &err) != 0)
        fail_msg("%s", err.msg);
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct kube_transport *t = kube_transport_new(loop, cfg, NULL, &err);
    assert_non_null(t);
    struct cache_reflector_config rc = {.ref = {.version = "v1", .resource = "configmaps"}};
    struct cache_reflector *r = cache_reflector_new(t, &rc, NULL, &err);
    assert_non_null(r);
    assert_int_equal(cache_reflector_start(r, &err), 0);
    ev_timer timeout;
    ev_timer_init(&timeout, stop_loop, seconds, 0.);
    ev_timer_start(loop, &timeout);
    ev_run(loop, 0);
    int synced = cache_reflector_has_synced(r);

    cache_reflector_free(r);
    kube_transport_free(t);
    kube_config_free(cfg);
    ev_loop_destroy(loop);
    mock_stop(&server);
    unlink(token);
    unlink(kubeconfig);
    rmdir(dir);
    close(requests[1]);
    memset(tally, 0, sizeof(*tally));
    char c;
    while (read(requests[0], &c, 1) == 1) {
        tally->first += c == 'F';
        tally->cont += c == 'C';
        tally->unpaged += c == 'U';
        tally->watches += c == 'W';
    }
    close(requests[0]);
    return synced;
}

/* A continue token that expires (a list slower than etcd's compaction) is followed by one
 * unpaged list, as client-go's pager does, not by the paged list again at once: that ran
 * hundreds of first pages a second and never synced. */
static void expired_continue_falls_back_to_one_unpaged_list(void **state)
{
    (void)state;
    struct tally n;
    assert_true(run_script(CONTINUE_EXPIRES, 3, &n));
    assert_int_equal(n.first, 1);
    assert_int_equal(n.cont, 1);
    assert_int_equal(n.unpaged, 1);
    assert_int_equal(n.watches, 1);
}

/* When the unpaged list fails too, the next list waits for the backoff (0.8 s, doubling, with
 * jitter): at most four paged lists start in 3 s. */
static void expired_continue_then_failed_list_backs_off(void **state)
{
    (void)state;
    struct tally n;
    assert_false(run_script(CONTINUE_AND_FULL_EXPIRE, 3, &n));
    assert_in_range(n.first, 1, 4);
    assert_int_equal(n.unpaged, n.cont);
}

/* A watch that is 410 at once after every list (the list took longer than compaction) gets one
 * immediate relist; the second 410 in a row, with no event between, waits for the backoff. */
static void watch_expired_twice_backs_off(void **state)
{
    (void)state;
    struct tally n;
    assert_true(run_script(WATCH_EXPIRES, 3, &n));
    assert_in_range(n.first, 2, 5);
    assert_in_range(n.watches, n.first - 1, n.first);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(page_as_sent),
        cmocka_unit_test(mistyped_metadata_reads_as_absent),
        cmocka_unit_test(item_with_mistyped_annotations_is_kept),
        cmocka_unit_test(not_a_list),
        cmocka_unit_test(items_nest_as_deep_as_watch_events),
        cmocka_unit_test(expired_continue_falls_back_to_one_unpaged_list),
        cmocka_unit_test(expired_continue_then_failed_list_backs_off),
        cmocka_unit_test(watch_expired_twice_backs_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
