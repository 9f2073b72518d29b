/* WebSocket framing (RFC 6455): frame headers, masking and the handshake's accept key. Pure. */
#ifndef TELO_WS_FRAME_H
#define TELO_WS_FRAME_H

#include "util/err.h"

#include <stddef.h>
#include <stdint.h>

enum ws_opcode {
    WS_OP_CONT = 0x0,
    WS_OP_TEXT = 0x1,
    WS_OP_BINARY = 0x2,
    WS_OP_CLOSE = 0x8,
    WS_OP_PING = 0x9,
    WS_OP_PONG = 0xA,
};

/* Close codes we send (RFC 6455 section 7.4.1). */
enum ws_close_code {
    WS_CLOSE_NORMAL = 1000,
    WS_CLOSE_GOING_AWAY = 1001,
    WS_CLOSE_PROTOCOL_ERROR = 1002,
    WS_CLOSE_TOO_BIG = 1009,
    WS_CLOSE_INTERNAL = 1011,
};

#define WS_MAX_HEADER      14 /* 2 + 8 (64-bit length) + 4 (mask) */
#define WS_MAX_CONTROL     125
#define WS_ACCEPT_KEY_SIZE 29 /* base64 of a SHA-1 plus NUL */

/* One parsed frame. payload points into the buffer given to ws_frame_parse, already unmasked. */
struct ws_frame {
    int fin;
    int opcode;
    int masked;
    uint8_t *payload;
    size_t payload_len;
};

/* Parses the frame at the start of buf[0..len). A whole frame present: returns 0, fills f and
 * sets *consumed to its size, and unmasks the payload in place. Not all of it there yet: returns 0
 * with *consumed 0. A frame that breaks the protocol returns -TELO_EPROTO (reserved bits set,
 * unknown opcode, fragmented or oversized control frame, 64-bit length with the top bit set, a
 * client frame without a mask when expect_masked, a server frame with one when not), and one whose
 * payload exceeds max_payload -TELO_ETOOBIG, both with err filled. Never reads past len. */
int ws_frame_parse(uint8_t *buf, size_t len, size_t max_payload, int expect_masked,
                   struct ws_frame *f, size_t *consumed, struct telo_err *err);

/* Writes the header of a frame with payload length len into out; mask (4 bytes) makes it a
 * masked (client) frame, NULL an unmasked (server) one. Returns the header's size. Cannot fail. */
size_t ws_frame_header(uint8_t out[WS_MAX_HEADER], int opcode, int fin, uint64_t len,
                       const uint8_t *mask);

/* XORs data with mask, as if data started at byte offset of the payload. Cannot fail. */
void ws_mask(uint8_t *data, size_t len, const uint8_t mask[4], size_t offset);

/* Computes Sec-WebSocket-Accept for a client's Sec-WebSocket-Key into out (NUL-terminated).
 * Returns 0, or -TELO_EINVAL when key is not 24 characters of base64 (a 16-byte nonce). */
int ws_accept_key(const char *key, char out[WS_ACCEPT_KEY_SIZE]);

#endif
