/* libFuzzer target: WebSocket frames as pkg/ws parses them off the socket (RFC 6455 section
 * 5.2), for both sides. The first input byte picks the side and the payload cap; the rest is a
 * stream of frames. Every frame parsed lies inside the bytes it consumed, control frames are
 * short and final, and a frame written again with ws_frame_header parses back to itself. */
#include "ws/frame.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_round_trip(const struct ws_frame *f)
{
    static const uint8_t mask[4] = {0x12, 0x34, 0x56, 0x78};
    uint8_t hdr[WS_MAX_HEADER];
    size_t h = ws_frame_header(hdr, f->opcode, f->fin, f->payload_len, f->masked ? mask : NULL);
    if (h > WS_MAX_HEADER)
        abort();
    uint8_t *frame = malloc(h + f->payload_len + 1);
    if (frame == NULL)
        return;
    memcpy(frame, hdr, h);
    memcpy(frame + h, f->payload, f->payload_len);
    if (f->masked)
        ws_mask(frame + h, f->payload_len, mask, 0);
    struct ws_frame again;
    size_t consumed = 0;
    struct telo_err err;
    if (ws_frame_parse(frame, h + f->payload_len, f->payload_len, f->masked, &again, &consumed,
                       &err) != 0 ||
        consumed != h + f->payload_len || again.fin != f->fin || again.opcode != f->opcode ||
        again.masked != f->masked || again.payload_len != f->payload_len ||
        memcmp(again.payload, f->payload, f->payload_len) != 0)
        abort();
    free(frame);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int expect_masked = data[0] & 1;
    size_t max_payload = data[0] & 2 ? WS_MAX_CONTROL : (size_t)1 << 20;
    size_t len = size - 1;
    /* The parser unmasks in place: give it a writable copy of exactly len bytes. */
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data + 1, len);
    size_t off = 0;
    while (off < len) {
        struct ws_frame f;
        size_t consumed = 0;
        struct telo_err err;
        if (ws_frame_parse(buf + off, len - off, max_payload, expect_masked, &f, &consumed, &err) !=
                0 ||
            consumed == 0)
            break;
        if (consumed > len - off || f.payload < buf + off ||
            f.payload + f.payload_len > buf + off + consumed || f.payload_len > max_payload ||
            f.masked != expect_masked)
            abort();
        if (f.opcode >= WS_OP_CLOSE && (!f.fin || f.payload_len > WS_MAX_CONTROL))
            abort();
        check_round_trip(&f);
        off += consumed;
    }
    free(buf);
    return 0;
}
