/* Tests for pkg/kube/channel.c: channel framing, resize JSON and the exit Status. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "kube/channel.h"
#include "util/buf.h"
#include "util/err.h"

static void split_and_frame(void **state)
{
    (void)state;
    struct telo_err err = {0};
    struct kube_channel_msg m;
    assert_int_equal(kube_channel_split("", 0, &m, &err), -TELO_EPROTO);
    assert_non_null(strstr(err.msg, "empty message"));
    assert_int_equal(kube_channel_split("\x01", 1, &m, &err), 0);
    assert_int_equal(m.channel, 1);
    assert_int_equal(m.len, 0);
    assert_int_equal(kube_channel_split("\xff\x00", 2, &m, &err), 0);
    assert_int_equal(m.channel, 255);
    assert_int_equal(m.len, 1);
    assert_int_equal(m.data[0], 0);

    struct buf b;
    buf_init(&b, 8);
    assert_int_equal(kube_channel_frame(&b, 0, "ls\r", 3), 0);
    assert_int_equal(b.len, 4);
    assert_memory_equal(b.data, "\x00ls\r", 4);
    assert_int_equal(kube_channel_frame(&b, 256, "x", 1), -TELO_EINVAL);
    /* All or nothing: 4 + 1 + 4 > 8 leaves the first frame alone. */
    assert_int_equal(kube_channel_frame(&b, 4, "abcd", 4), -TELO_ETOOBIG);
    assert_int_equal(b.len, 4);
    buf_release(&b);
}

static void resize_objects_as_go_decodes_them(void **state)
{
    (void)state;
    struct telo_err err = {0};
    struct kube_term_size s = {7, 7};
    const char *one = "{\"Width\":132,\"Height\":43}";
    assert_int_equal(kube_resize_parse(one, strlen(one), &s, &err), 1);
    assert_int_equal(s.width, 132);
    assert_int_equal(s.height, 43);
    /* Several objects, newline after each (browser UIs), the last wins. */
    const char *many = "{\"Width\":80,\"Height\":24}\n {\"Width\":100,\"Height\":30}\n";
    assert_int_equal(kube_resize_parse(many, strlen(many), &s, &err), 2);
    assert_int_equal(s.width, 100);
    assert_int_equal(s.height, 30);
    /* Case-insensitive keys, unknown keys ignored, a missing one is 0, an exact one wins. */
    const char *loose = "{\"width\":5,\"extra\":[1,2],\"Width\":9}";
    assert_int_equal(kube_resize_parse(loose, strlen(loose), &s, &err), 1);
    assert_int_equal(s.width, 9);
    assert_int_equal(s.height, 0);
    const char *max = "{\"Width\":65535,\"Height\":null}";
    assert_int_equal(kube_resize_parse(max, strlen(max), &s, &err), 1);
    assert_int_equal(s.width, 65535);
    assert_int_equal(s.height, 0);
}

static void resize_refusals_name_the_problem(void **state)
{
    (void)state;
    struct telo_err err = {0};
    struct kube_term_size s = {7, 8};
    struct {
        const char *in;
        const char *says;
    } bad[] = {
        {"", "empty message"},
        {" \n", "empty message"},
        {"{\"Width\":65536,\"Height\":1}", "outside 0..65535"},
        {"{\"Width\":-1,\"Height\":1}", "outside 0..65535"},
        {"{\"Width\":1.5,\"Height\":1}", "must be an integer"},
        {"{\"Width\":\"80\"}", "must be an integer"},
        {"[80,24]", "expected a JSON object"},
        {"{\"Width\":80", "incomplete"},
        {"{\"Width\":80} x", "not JSON at byte 13"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(kube_resize_parse(bad[i].in, strlen(bad[i].in), &s, &err), -TELO_EPROTO);
        if (strstr(err.msg, bad[i].says) == NULL)
            fail_msg("%s: got \"%s\", want \"%s\"", bad[i].in, err.msg, bad[i].says);
        assert_int_equal(s.width, 7);
        assert_int_equal(s.height, 8);
    }
    /* Not NUL-terminated: only len bytes are read. */
    assert_int_equal(kube_resize_parse("{\"Width\":3}{", 11, &s, &err), 1);
    assert_int_equal(s.width, 3);

    char big[KUBE_CHANNEL_JSON_MAX + 2];
    memset(big, ' ', sizeof(big));
    assert_int_equal(kube_resize_parse(big, sizeof(big), &s, &err), -TELO_EPROTO);
    assert_non_null(strstr(err.msg, "exceeds"));
}

static void resize_format_round_trips(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 64);
    assert_int_equal(kube_resize_format(&b, 120, 40), 0);
    assert_string_equal(b.data, "{\"Width\":120,\"Height\":40}");
    struct kube_term_size s;
    assert_int_equal(kube_resize_parse(b.data, b.len, &s, NULL), 1);
    assert_int_equal(s.width, 120);
    assert_int_equal(s.height, 40);
    buf_release(&b);
}

static void exit_status_as_client_go_reads_it(void **state)
{
    (void)state;
    struct telo_err err = {0};
    struct kube_exit_status st;
    const char *ok = "{\"metadata\":{},\"status\":\"Success\"}\n";
    assert_int_equal(kube_exit_status_parse(ok, strlen(ok), &st, &err), 0);
    assert_int_equal(st.code, 0);
    const char *three =
        "{\"metadata\":{},\"status\":\"Failure\",\"message\":\"command terminated with non-zero "
        "exit code: error executing command [sh -c exit 3], exit code 3\",\"reason\":"
        "\"NonZeroExitCode\",\"details\":{\"causes\":[{\"reason\":\"ExitCode\",\"message\":\"3\"}]}"
        "}";
    assert_int_equal(kube_exit_status_parse(three, strlen(three), &st, &err), 0);
    assert_int_equal(st.code, 3);
    assert_string_equal(st.reason, "NonZeroExitCode");
    const char *other =
        "{\"status\":\"Failure\",\"reason\":\"InternalError\",\"message\":\"boom\"}";
    assert_int_equal(kube_exit_status_parse(other, strlen(other), &st, &err), 0);
    assert_int_equal(st.code, -1);
    assert_string_equal(st.message, "boom");
    /* An exit code client-go cannot read as uint8 is not an exit code. */
    const char *wide = "{\"status\":\"Failure\",\"reason\":\"NonZeroExitCode\",\"details\":{"
                       "\"causes\":[{\"reason\":\"ExitCode\",\"message\":\"300\"}]}}";
    assert_int_equal(kube_exit_status_parse(wide, strlen(wide), &st, &err), 0);
    assert_int_equal(st.code, -1);

    st.code = 42;
    assert_int_equal(kube_exit_status_parse("not json", 8, &st, &err), -TELO_EPROTO);
    assert_int_equal(kube_exit_status_parse("[]", 2, &st, &err), -TELO_EPROTO);
    assert_int_equal(kube_exit_status_parse("{} {}", 5, &st, &err), -TELO_EPROTO);
    assert_int_equal(st.code, 42);
}

static void exit_status_format_round_trips(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1024);
    struct kube_exit_status st;
    for (int code = -1; code <= 255; code++) {
        buf_reset(&b);
        assert_int_equal(kube_exit_status_format(&b, code, code < 0 ? "pod \"x\" vanished" : NULL),
                         0);
        assert_int_equal(kube_exit_status_parse(b.data, b.len, &st, NULL), 0);
        assert_int_equal(st.code, code);
    }
    assert_string_equal(st.reason, "NonZeroExitCode");
    buf_reset(&b);
    assert_int_equal(kube_exit_status_format(&b, 0, NULL), 0);
    assert_string_equal(b.data, "{\"metadata\":{},\"status\":\"Success\"}");
    buf_reset(&b);
    kube_exit_status_format(&b, -1, "pod \"x\" vanished");
    assert_int_equal(kube_exit_status_parse(b.data, b.len, &st, NULL), 0);
    assert_string_equal(st.message, "pod \"x\" vanished");
    assert_int_equal(kube_exit_status_format(&b, 256, NULL), -TELO_EINVAL);
    buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(split_and_frame),
        cmocka_unit_test(resize_objects_as_go_decodes_them),
        cmocka_unit_test(resize_refusals_name_the_problem),
        cmocka_unit_test(resize_format_round_trips),
        cmocka_unit_test(exit_status_as_client_go_reads_it),
        cmocka_unit_test(exit_status_format_round_trips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
