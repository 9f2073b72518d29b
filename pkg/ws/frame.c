/* WebSocket framing (RFC 6455): frame headers, masking and the handshake's accept key. Pure. */
#include "ws/frame.h"

#include "util/base64.h"

#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

static int known_opcode(int op)
{
    return op == WS_OP_CONT || op == WS_OP_TEXT || op == WS_OP_BINARY || op == WS_OP_CLOSE ||
           op == WS_OP_PING || op == WS_OP_PONG;
}

int ws_frame_parse(uint8_t *buf, size_t len, size_t max_payload, int expect_masked,
                   struct ws_frame *f, size_t *consumed, struct telo_err *err)
{
    *consumed = 0;
    if (len < 2)
        return 0;
    int fin = buf[0] >> 7;
    int opcode = buf[0] & 0x0F;
    int masked = buf[1] >> 7;
    uint64_t plen = buf[1] & 0x7F;
    size_t pos = 2;

    /* No extension is negotiated, so every reserved bit must be clear (section 5.2). */
    if (buf[0] & 0x70)
        return telo_err_set(err, TELO_EPROTO, "websocket: reserved bits set in a frame header");
    if (!known_opcode(opcode))
        return telo_err_set(err, TELO_EPROTO, "websocket: unknown opcode 0x%x", opcode);
    if (opcode >= WS_OP_CLOSE && (!fin || plen > WS_MAX_CONTROL))
        return telo_err_set(err, TELO_EPROTO,
                            "websocket: control frame fragmented or longer than 125 bytes");
    if (masked != (expect_masked != 0))
        return telo_err_set(err, TELO_EPROTO, "websocket: %s",
                            expect_masked ? "client frame without a mask"
                                          : "server frame with a mask");
    if (plen == 126) {
        if (len < pos + 2)
            return 0;
        plen = ((uint64_t)buf[2] << 8) | buf[3];
        pos += 2;
    } else if (plen == 127) {
        if (len < pos + 8)
            return 0;
        plen = 0;
        for (int i = 0; i < 8; i++)
            plen = (plen << 8) | buf[2 + i];
        pos += 8;
        if (plen >> 63)
            return telo_err_set(err, TELO_EPROTO, "websocket: 64-bit length with the top bit set");
    }
    if (plen > max_payload)
        return telo_err_set(err, TELO_ETOOBIG,
                            "websocket: frame of %llu bytes is over the limit of %zu",
                            (unsigned long long)plen, max_payload);
    uint8_t mask[4] = {0};
    if (masked) {
        if (len < pos + 4)
            return 0;
        memcpy(mask, buf + pos, 4);
        pos += 4;
    }
    if (len - pos < plen)
        return 0;
    f->fin = fin;
    f->opcode = opcode;
    f->masked = masked;
    f->payload = buf + pos;
    f->payload_len = (size_t)plen;
    if (masked)
        ws_mask(f->payload, f->payload_len, mask, 0);
    *consumed = pos + (size_t)plen;
    return 0;
}

size_t ws_frame_header(uint8_t out[WS_MAX_HEADER], int opcode, int fin, uint64_t len,
                       const uint8_t *mask)
{
    size_t pos = 2;
    out[0] = (uint8_t)((fin ? 0x80 : 0) | (opcode & 0x0F));
    uint8_t mbit = mask != NULL ? 0x80 : 0;
    if (len < 126) {
        out[1] = (uint8_t)(mbit | len);
    } else if (len <= 0xFFFF) {
        out[1] = (uint8_t)(mbit | 126);
        out[2] = (uint8_t)(len >> 8);
        out[3] = (uint8_t)len;
        pos = 4;
    } else {
        out[1] = (uint8_t)(mbit | 127);
        for (int i = 0; i < 8; i++)
            out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
        pos = 10;
    }
    if (mask != NULL) {
        memcpy(out + pos, mask, 4);
        pos += 4;
    }
    return pos;
}

void ws_mask(uint8_t *data, size_t len, const uint8_t mask[4], size_t offset)
{
    for (size_t i = 0; i < len; i++)
        data[i] ^= mask[(i + offset) & 3];
}

int ws_accept_key(const char *key, char out[WS_ACCEPT_KEY_SIZE])
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    size_t klen = strlen(key), rawlen = 0;
    /* A 16-byte nonce in base64 is 24 characters ending in "==" (section 4.1). */
    unsigned char *raw = klen == 24 ? util_base64_decode(key, klen, &rawlen) : NULL;
    free(raw);
    if (raw == NULL || rawlen != 16 || key[22] != '=' || key[23] != '=')
        return -TELO_EINVAL;
    unsigned char cat[24 + sizeof(guid)];
    memcpy(cat, key, 24);
    memcpy(cat + 24, guid, sizeof(guid) - 1);
    unsigned char digest[SHA_DIGEST_LENGTH];
    SHA1(cat, 24 + sizeof(guid) - 1, digest);
    util_base64_encode_into(out, digest, SHA_DIGEST_LENGTH);
    return 0;
}
