/* Tests for pkg/ws/frame.c: WebSocket frame headers, masking, the accept key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "ws/frame.h"

#include <string.h>

static void accept_key_of_rfc6455_example(void **state)
{
    (void)state;
    char out[WS_ACCEPT_KEY_SIZE];
    /* RFC 6455 section 1.3. */
    assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", out), 0);
    assert_string_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    assert_int_equal(ws_accept_key("short", out), -TELO_EINVAL);
    assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ!!", out), -TELO_EINVAL);
}

static void masked_round_trip_of_every_length_class(void **state)
{
    (void)state;
    static const size_t lens[] = {0, 1, 125, 126, 65535, 65536, 70000};
    static uint8_t frame[WS_MAX_HEADER + 70000], payload[70000];
    const uint8_t mask[4] = {0x11, 0x22, 0x33, 0x44};
    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (uint8_t)(i * 7);
    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
        size_t n = lens[k];
        size_t h = ws_frame_header(frame, WS_OP_BINARY, 1, n, mask);
        assert_int_equal(h, (n < 126 ? 2 : n <= 65535 ? 4 : 10) + 4);
        memcpy(frame + h, payload, n);
        ws_mask(frame + h, n, mask, 0);
        struct ws_frame f;
        size_t used = 0;
        /* Every prefix is incomplete, never an error. */
        for (size_t cut = 0; cut < h + n; cut += (n > 1000 ? 997 : 1)) {
            assert_int_equal(ws_frame_parse(frame, cut, 1 << 20, 1, &f, &used, NULL), 0);
            assert_int_equal(used, 0);
        }
        assert_int_equal(ws_frame_parse(frame, h + n, 1 << 20, 1, &f, &used, NULL), 0);
        assert_int_equal(used, h + n);
        assert_int_equal(f.opcode, WS_OP_BINARY);
        assert_true(f.fin);
        assert_int_equal(f.payload_len, n);
        if (n > 0)
            assert_memory_equal(f.payload, payload, n);
    }
}

static void refuses_protocol_violations(void **state)
{
    (void)state;
    struct ws_frame f;
    size_t used;
    struct telo_err err = {0};
    uint8_t rsv[] = {0xC2, 0x00};                   /* RSV1 set */
    uint8_t opcode[] = {0x83, 0x00};                /* reserved opcode 3 */
    uint8_t frag_ping[] = {0x09, 0x00};             /* ping without FIN */
    uint8_t long_ping[] = {0x89, 0x7E, 0x00, 0x7E}; /* 126-byte control frame */
    uint8_t unmasked[] = {0x82, 0x01, 0x41};
    uint8_t top_bit[] = {0x82, 0x7F, 0x80, 0, 0, 0, 0, 0, 0, 1};
    assert_int_equal(ws_frame_parse(rsv, 2, 100, 0, &f, &used, &err), -TELO_EPROTO);
    assert_int_equal(ws_frame_parse(opcode, 2, 100, 0, &f, &used, &err), -TELO_EPROTO);
    assert_int_equal(ws_frame_parse(frag_ping, 2, 100, 0, &f, &used, &err), -TELO_EPROTO);
    assert_int_equal(ws_frame_parse(long_ping, 4, 1000, 0, &f, &used, &err), -TELO_EPROTO);
    /* A server insists on masked client frames; a client refuses masked server frames. */
    assert_int_equal(ws_frame_parse(unmasked, 3, 100, 1, &f, &used, &err), -TELO_EPROTO);
    assert_int_equal(ws_frame_parse(unmasked, 3, 100, 0, &f, &used, &err), 0);
    assert_int_equal(used, 3);
    assert_int_equal(ws_frame_parse(top_bit, 10, 100, 0, &f, &used, &err), -TELO_EPROTO);
    uint8_t big[] = {0x82, 0x7E, 0x01, 0x00}; /* 256 bytes announced */
    assert_int_equal(ws_frame_parse(big, 4, 255, 0, &f, &used, &err), -TELO_ETOOBIG);
    assert_non_null(strstr(err.msg, "256"));
}

static void mask_offset_continues_the_key(void **state)
{
    (void)state;
    const uint8_t mask[4] = {1, 2, 3, 4};
    uint8_t whole[6] = {0}, split[6] = {0};
    ws_mask(whole, 6, mask, 0);
    ws_mask(split, 3, mask, 0);
    ws_mask(split + 3, 3, mask, 3);
    assert_memory_equal(whole, split, 6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(accept_key_of_rfc6455_example),
        cmocka_unit_test(masked_round_trip_of_every_length_class),
        cmocka_unit_test(refuses_protocol_violations),
        cmocka_unit_test(mask_offset_continues_the_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
