/* The gateway's wire formats beyond the channel protocol (kube/channel.h): the route, subprotocol
 * negotiation, telo.io.v1 control frames, refusal bodies and sequence numbers. Pure. */
#ifndef TELO_GATEWAY_PROTO_H
#define TELO_GATEWAY_PROTO_H

#include "util/buf.h"
#include "util/err.h"

#include <stddef.h>
#include <stdint.h>

enum gw_proto {
    GW_PROTO_NONE = 0,
    GW_PROTO_V5,    /* v5.channel.k8s.io */
    GW_PROTO_V4,    /* v4.channel.k8s.io */
    GW_PROTO_IO_V1, /* telo.io.v1 */
};

#define GW_SIZE_MAX_DIM  10000 /* the reference's clamp for rows and columns */
#define GW_CONTROL_MAX   4096  /* a telo.io.v1 control message's bytes: a resize takes ~40 */
#define GW_NAME_MAX      254
#define GW_BEARER_PREFIX "base64url.bearer.authorization.k8s.io."

/* The subprotocol name of p ("v5.channel.k8s.io"), "" for GW_PROTO_NONE. */
const char *gw_proto_name(enum gw_proto p);

/* Picks from a Sec-WebSocket-Protocol header (NULL: none sent) the first protocol we speak, in
 * the client's order as the Kubernetes server does, and takes a bearer token from a
 * base64url.bearer.authorization.k8s.io.<base64url> item into token (NUL-terminated; "" when
 * none; a token that does not decode or fit is left "" and *bad_token set to 1). */
enum gw_proto gw_pick_protocol(const char *header, char *token, size_t token_len, int *bad_token);

/* What a request target names. */
struct gw_target {
    char namespace[GW_NAME_MAX];
    char name[GW_NAME_MAX];
    char action[16];   /* "attach" or "debug" */
    const char *query; /* into the target given; "" when none */
};

/* Parses "/v1/namespaces/{ns}/telosessions/{name}/{attach|debug}[?query]". Returns 0, or
 * -TELO_ENOTFOUND when target is another path or a segment is empty, too long or not a DNS-1123
 * name (so no path trickery reaches an API URL). */
int gw_parse_target(const char *target, struct gw_target *out);

/* v clamped to 1..GW_SIZE_MAX_DIM: the size a terminal may be given (the reference's bound). */
int gw_clamp_dim(long long v);

/* A telo.io.v1 text frame from a client. */
enum gw_io_control_kind { GW_IO_UNKNOWN = 0, GW_IO_RESIZE };
struct gw_io_control {
    enum gw_io_control_kind kind;
    int cols, rows; /* GW_IO_RESIZE, clamped to 1..GW_SIZE_MAX_DIM */
};

/* Parses a telo.io.v1 control message (a text frame; binary frames are stdin and never come
 * here): {"type":"resize","cols":C,"rows":R}; any other valid JSON object, including one whose
 * "type" is not a string (null, a number, an array...), is GW_IO_UNKNOWN. Returns 0, or
 * -TELO_EPROTO when it is not a JSON object, is over GW_CONTROL_MAX bytes, or a resize lacks
 * integer cols/rows. */
int gw_parse_io_control(const uint8_t *data, size_t len, struct gw_io_control *out);

/* Appends a Kubernetes Status error body ({"kind":"Status",...,"code":code}) for refusals. */
int gw_error_status_json(struct buf *out, int code, const char *reason, const char *message);

/* Appends a telo.io.v1 error frame's text ({"type":"error","code","reason","message"}): how a
 * refusal reaches a client of that protocol, and a debug stream's error event. */
int gw_error_frame_json(struct buf *out, int code, const char *reason, const char *message);

/* Reconstructs the 64-bit sequence a telo.io.v1 client's 32-bit lastSeq refers to: the largest
 * value <= latest that equals last_seq modulo 2^32 (0 when there is none). */
uint64_t gw_seq_from_wire(uint32_t last_seq, uint64_t latest);

#endif
