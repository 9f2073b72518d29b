/* Tests for pkg/gateway/sse.c: the event-stream parser and the debug-frame filter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "gateway/sse.h"

#include <stdio.h>
#include <string.h>

struct seen {
    int n;
    char events[8][32];
    char data[8][128];
};

static void collect(const char *event, const char *data, size_t len, void *ud)
{
    struct seen *s = ud;
    if (s->n < 8) {
        snprintf(s->events[s->n], sizeof(s->events[0]), "%s", event);
        snprintf(s->data[s->n], sizeof(s->data[0]), "%.*s", (int)len, data);
    }
    s->n++;
}

static void parses_events_split_anywhere(void **state)
{
    (void)state;
    static const char stream[] = ": comment\n"
                                 "event: hello\ndata: {\"a\":1}\n\n"
                                 "data:x\r\ndata: y\r\n\r\n"
                                 "id: 7\nretry: 5\n\n" /* no data: nothing dispatched */
                                 "event: tick\rdata: {\"seq\":2}\r\r"
                                 "data: unfinished";
    /* Every split of the stream into two feeds gives the same events. */
    for (size_t cut = 0; cut <= sizeof(stream) - 1; cut++) {
        struct gw_sse_parser p;
        struct seen s = {0};
        gw_sse_init(&p, 1024);
        assert_int_equal(gw_sse_feed(&p, stream, cut, collect, &s), 0);
        assert_int_equal(gw_sse_feed(&p, stream + cut, sizeof(stream) - 1 - cut, collect, &s), 0);
        assert_int_equal(s.n, 3);
        assert_string_equal(s.events[0], "hello");
        assert_string_equal(s.data[0], "{\"a\":1}");
        assert_string_equal(s.events[1], "message");
        assert_string_equal(s.data[1], "x\ny");
        assert_string_equal(s.events[2], "tick");
        assert_string_equal(s.data[2], "{\"seq\":2}");
        gw_sse_release(&p);
    }
}

static void an_oversized_event_is_dropped_and_the_stream_goes_on(void **state)
{
    (void)state;
    struct gw_sse_parser p;
    struct seen s = {0};
    gw_sse_init(&p, 16);
    const char big[] = "data: 0123456789abcdefghijklmnop\n\ndata: ok\n\n";
    assert_int_equal(gw_sse_feed(&p, big, sizeof(big) - 1, collect, &s), -TELO_ETOOBIG);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.data[0], "ok");
    gw_sse_release(&p);
}

static void only_event_frames_are_relayed(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    const char *ev = "{\"timestamp\":1,\"event\":\"x\"}";
    assert_int_equal(gw_sse_debug_frame(&b, 3, ev, strlen(ev)), 1);
    assert_string_equal(b.data, "id: 3\nevent: debug\ndata: {\"type\":\"debug\",\"frame\":"
                                "{\"timestamp\":1,\"event\":\"x\"}}\n\n");
    buf_reset(&b);
    const char *kind_event = "{\"kind\":\"event\",\"event\":\"y\"}";
    assert_int_equal(gw_sse_debug_frame(&b, 4, kind_event, strlen(kind_event)), 1);
    buf_reset(&b);
    static const char *const dropped[] = {"{\"kind\":\"log\",\"stream\":\"stdout\",\"line\":\"l\"}",
                                          "{\"kind\":\"record\",\"record\":{}}", "[1,2]",
                                          "not json", "{\"a\":1} trailing"};
    for (size_t i = 0; i < sizeof(dropped) / sizeof(dropped[0]); i++)
        assert_int_equal(gw_sse_debug_frame(&b, 5, dropped[i], strlen(dropped[i])), 0);
    assert_int_equal(b.len, 0);
    buf_release(&b);
}

/* The app writes its inspector stream: a "kind" of any type must not crash the relay (a JSON
 * null did: issue 15, finding 2). null counts as absent (relayed, as the reference's
 * `!frame.kind` does); a number, array, object or boolean is not "event" (dropped). */
static void kind_of_any_type_is_read_safely(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    const char *null_kind = "{\"kind\":null,\"event\":\"z\"}";
    assert_int_equal(gw_sse_debug_frame(&b, 7, null_kind, strlen(null_kind)), 1);
    assert_string_equal(b.data, "id: 7\nevent: debug\ndata: {\"type\":\"debug\",\"frame\":"
                                "{\"kind\":null,\"event\":\"z\"}}\n\n");
    buf_reset(&b);
    static const char *const dropped[] = {
        "{\"kind\":1}",         "{\"kind\":0}", "{\"kind\":true}", "{\"kind\":[\"event\"]}",
        "{\"kind\":{\"a\":1}}", "null",         "\"event\"",       "3"};
    for (size_t i = 0; i < sizeof(dropped) / sizeof(dropped[0]); i++)
        assert_int_equal(gw_sse_debug_frame(&b, 8, dropped[i], strlen(dropped[i])), 0);
    assert_int_equal(b.len, 0);
    buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_events_split_anywhere),
        cmocka_unit_test(an_oversized_event_is_dropped_and_the_stream_goes_on),
        cmocka_unit_test(only_event_frames_are_relayed),
        cmocka_unit_test(kind_of_any_type_is_read_safely),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
