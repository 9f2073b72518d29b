/* Tests for pkg/kube/watch.c: timeout jitter, query, and end reasons against a scripted server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "kube/config.h"
#include "kube/watch.h"
#include "util/err.h"
#include "util/log.h"

#include "mock_client.h"

#include <ev.h>
#include <json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void jitter_spans_five_to_ten_minutes(void **state)
{
    (void)state;
    assert_int_equal(kube_watch_timeout_for(0.0), 300);
    assert_int_equal(kube_watch_timeout_for(0.5), 450);
    assert_int_equal(kube_watch_timeout_for(0.999999), 600);
    assert_int_equal(kube_watch_timeout_for(1.0), 600);
    assert_int_equal(kube_watch_timeout_for(-3.0), 300);
    /* Uniform enough: every 30 s bucket of the range is hit by an even grid of inputs. */
    int buckets[11] = {0};
    for (int i = 0; i < 1000; i++) {
        long t = kube_watch_timeout_for(i / 1000.0);
        assert_true(t >= 300 && t <= 600);
        buckets[(t - 300) / 30]++;
    }
    for (int i = 0; i < 10; i++)
        assert_true(buckets[i] >= 90 && buckets[i] <= 110);
}

static void watch_query(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1024);
    buf_append_str(&b, "/api/v1/pods");
    struct kube_watch_opts o = {.resource_version = "42", .label_selector = "a=b"};
    assert_int_equal(kube_watch_query(&o, 321, &b), 0);
    assert_string_equal(b.data, "/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion=42"
                                "&labelSelector=a%3Db&timeoutSeconds=321");
    buf_reset(&b);
    struct kube_watch_opts nb = {.no_bookmarks = 1};
    assert_int_equal(kube_watch_query(&nb, 300, &b), 0);
    assert_string_equal(b.data, "?watch=1&timeoutSeconds=300");
    buf_release(&b);
}

/* ---- against the scripted server; the namespace picks the scenario ---- */

static const char *const events =
    "{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\","
    "\"resourceVersion\":\"6\"}}}\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\","
    "\"resourceVersion\":\"7\"}}}\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":{"
    "\"resourceVersion\":\"9\"}}}\n"
    "{\"type\":\"DELETED\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\","
    "\"resourceVersion\":\"10\"}}}\n";

static void route(int fd, const struct mock_req *r)
{
    if (strstr(r->path, "/namespaces/events/") != NULL) {
        int ok = strstr(r->path, "watch=1&allowWatchBookmarks=true&resourceVersion=5&") != NULL;
        const char *t = strstr(r->path, "timeoutSeconds=");
        long secs = t != NULL ? strtol(t + 15, NULL, 10) : 0;
        if (!ok || secs < 300 || secs > 600) {
            mock_reply(fd, 400, NULL,
                       "{\"kind\":\"Status\",\"code\":400,\"message\":\"bad query\"}");
            return;
        }
        mock_stream_start(fd, 200);
        /* Odd splits: events must survive any chunking. */
        size_t len = strlen(events);
        for (size_t off = 0; off < len; off += 37) {
            mock_write_all(fd, events + off, len - off < 37 ? len - off : 37);
            nanosleep(&(struct timespec){0, 2000000}, NULL);
        }
    } else if (strstr(r->path, "/namespaces/expired-event/") != NULL) {
        mock_stream_start(fd, 200);
        const char *ev =
            "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\","
            "\"status\":\"Failure\",\"message\":\"too old resource version: 1 "
            "(50)\",\"reason\":\"Expired\",\"code\":410}}\n";
        mock_write_all(fd, ev, strlen(ev));
    } else if (strstr(r->path, "/namespaces/expired-http/") != NULL) {
        mock_reply(fd, 410, NULL,
                   "{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":\"gone\",\"reason\":"
                   "\"Gone\",\"code\":410}");
    } else if (strstr(r->path, "/namespaces/forbidden/") != NULL) {
        mock_reply(fd, 403, NULL,
                   "{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":\"no\",\"reason\":"
                   "\"Forbidden\",\"code\":403}");
    } else if (strstr(r->path, "/namespaces/garbage/") != NULL) {
        mock_stream_start(fd, 200);
        mock_write_all(fd, "this is not json\n", 17);
    } else if (strstr(r->path, "/namespaces/hangup/") != NULL) {
        /* Headers, one event, then the connection drops mid-event. */
        mock_stream_start(fd, 200);
        const char *ev =
            "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"resourceVersion\":\"3\"}}}\n"
            "{\"type\":\"ADD";
        mock_write_all(fd, ev, strlen(ev));
        shutdown(fd, SHUT_RDWR);
    } else {
        mock_reply(fd, 404, NULL, "{}");
    }
}

struct seen {
    char log[1024];
    int ended;
    enum kube_watch_end reason;
    int status_code;
    char rv[64];
    char err[TELO_ERR_MSG_MAX];
    int stop_after;
    int nevents;
};

static int setup(void **state)
{
    *state = mock_client_new("watch", route, "t\n", NULL);
    return *state ? 0 : -1;
}

static int teardown(void **state)
{
    mock_client_free(*state);
    return 0;
}

static int on_event(struct kube_watch *w, enum kube_watch_type type, struct json_object *obj,
                    void *ud)
{
    (void)w;
    struct seen *s = ud;
    struct json_object *meta = NULL, *rv = NULL;
    json_object_object_get_ex(obj, "metadata", &meta);
    json_object_object_get_ex(meta, "resourceVersion", &rv);
    size_t n = strlen(s->log);
    snprintf(s->log + n, sizeof(s->log) - n, "%s:%s ", kube_watch_type_name(type),
             json_object_get_string(rv));
    s->nevents++;
    return s->stop_after > 0 && s->nevents >= s->stop_after;
}

static void on_end(struct kube_watch *w, enum kube_watch_end reason, const struct kube_status *st,
                   const struct telo_err *err, void *ud)
{
    struct seen *s = ud;
    s->ended++;
    s->reason = reason;
    s->status_code = st != NULL ? st->code : 0;
    snprintf(s->rv, sizeof(s->rv), "%s", kube_watch_resource_version(w));
    snprintf(s->err, sizeof(s->err), "%s", err != NULL ? err->msg : "");
    kube_watch_free(w); /* allowed from on_end */
}

static void watch_ns(struct mock_client *f, const char *ns, struct seen *s)
{
    struct kube_ref ref = {.version = "v1", .resource = "configmaps", .namespace = ns};
    struct kube_watch_opts o = {.resource_version = "5"};
    struct telo_err err;
    struct kube_watch *w = kube_watch_start(f->t, &ref, &o, on_event, on_end, s, &err);
    assert_non_null(w);
    assert_true(kube_watch_timeout_seconds(w) >= 300 && kube_watch_timeout_seconds(w) <= 600);
    assert_string_equal(kube_watch_resource_version(w), "5");
    ev_run(f->loop, 0);
    assert_int_equal(s->ended, 1);
}

static void events_then_clean_close(void **state)
{
    struct seen s = {0};
    watch_ns(*state, "events", &s);
    assert_string_equal(s.log, "ADDED:6 MODIFIED:7 BOOKMARK:9 DELETED:10 ");
    assert_int_equal(s.reason, KUBE_WATCH_END_CLOSED);
    assert_string_equal(s.rv, "10");
    assert_string_equal(s.err, "");
}

static void receiver_can_stop(void **state)
{
    struct seen s = {.stop_after = 2};
    watch_ns(*state, "events", &s);
    assert_string_equal(s.log, "ADDED:6 MODIFIED:7 ");
    assert_int_equal(s.reason, KUBE_WATCH_END_RECEIVER);
    assert_string_equal(s.rv, "6"); /* the refused event is not a resume point */
}

static void expired_as_error_event(void **state)
{
    struct seen s = {0};
    watch_ns(*state, "expired-event", &s);
    assert_int_equal(s.reason, KUBE_WATCH_END_EXPIRED);
    assert_int_equal(s.status_code, 410);
    assert_non_null(strstr(s.err, "410 Expired: too old resource version"));
    assert_string_equal(s.rv, "5");
}

static void expired_as_http_410(void **state)
{
    struct seen s = {0};
    watch_ns(*state, "expired-http", &s);
    assert_int_equal(s.reason, KUBE_WATCH_END_EXPIRED);
    assert_int_equal(s.status_code, 410);
}

static void other_status_is_error(void **state)
{
    struct seen s = {0};
    watch_ns(*state, "forbidden", &s);
    assert_int_equal(s.reason, KUBE_WATCH_END_ERROR);
    assert_int_equal(s.status_code, 403);
    assert_non_null(strstr(s.err, "403 Forbidden: no"));
}

static void garbage_is_decode_error(void **state)
{
    struct seen s = {0};
    watch_ns(*state, "garbage", &s);
    assert_int_equal(s.reason, KUBE_WATCH_END_DECODE);
}

static void dropped_connection_keeps_resume_point(void **state)
{
    struct seen s = {0};
    watch_ns(*state, "hangup", &s);
    assert_string_equal(s.log, "ADDED:3 ");
    /* The server closed mid-event: either the transport saw the connection die or the decoder
     * saw the stream stop inside an event; both are resumable ends. */
    assert_true(s.reason == KUBE_WATCH_END_CONNECTION || s.reason == KUBE_WATCH_END_DECODE);
    assert_string_equal(s.rv, "3");
}

static void free_before_end_means_no_callbacks(void **state)
{
    struct mock_client *f = *state;
    struct seen s = {0};
    struct kube_ref ref = {.version = "v1", .resource = "configmaps", .namespace = "events"};
    struct kube_watch_opts o = {.resource_version = "5"};
    struct telo_err err;
    struct kube_watch *w = kube_watch_start(f->t, &ref, &o, on_event, on_end, &s, &err);
    assert_non_null(w);
    kube_watch_free(w);
    ev_run(f->loop, 0);
    assert_int_equal(s.ended, 0);
    assert_int_equal(s.nevents, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(jitter_spans_five_to_ten_minutes),
        cmocka_unit_test(watch_query),
        cmocka_unit_test_setup_teardown(events_then_clean_close, setup, teardown),
        cmocka_unit_test_setup_teardown(receiver_can_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(expired_as_error_event, setup, teardown),
        cmocka_unit_test_setup_teardown(expired_as_http_410, setup, teardown),
        cmocka_unit_test_setup_teardown(other_status_is_error, setup, teardown),
        cmocka_unit_test_setup_teardown(garbage_is_decode_error, setup, teardown),
        cmocka_unit_test_setup_teardown(dropped_connection_keeps_resume_point, setup, teardown),
        cmocka_unit_test_setup_teardown(free_before_end_means_no_callbacks, setup, teardown),
    };
    telo_log_set_level(TELO_LOG_WARN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
