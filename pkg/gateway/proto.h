/* The gateway's wire formats: the route, subprotocol negotiation, channel messages, resize JSON,
 * the exit Status and telo.io.v1 control frames. Pure. */
#ifndef TELO_GATEWAY_PROTO_H
#define TELO_GATEWAY_PROTO_H

#include "util/buf.h"
#include "util/err.h"

#include <stddef.h>
#include <stdint.h>

/* Kubernetes remote-command channels (apimachinery remotecommand constants). */
enum gw_channel {
    GW_CH_STDIN = 0,
    GW_CH_STDOUT = 1,
    GW_CH_STDERR = 2,
    GW_CH_STATUS = 3,
    GW_CH_RESIZE = 4,
    GW_CH_CLOSE = 255,
};

enum gw_proto {
    GW_PROTO_NONE = 0,
    GW_PROTO_V5,    /* v5.channel.k8s.io */
    GW_PROTO_V4,    /* v4.channel.k8s.io */
    GW_PROTO_IO_V1, /* telo.io.v1 */
};

#define GW_SIZE_MAX_DIM  10000 /* the reference's clamp for rows and columns */
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

/* Parses the resize channel's payload: one or more JSON objects {"Width":W,"Height":H} (client-go
 * uses json.Encoder, so objects may follow one another, with whitespace between). Sets *width and
 * *height from the last one, clamped to 1..GW_SIZE_MAX_DIM. Returns 0, or -TELO_EPROTO when the
 * payload holds no such object or is not JSON. */
int gw_parse_resize(const uint8_t *data, size_t len, int *width, int *height);

/* A telo.io.v1 text frame from a client. */
enum gw_io_control_kind { GW_IO_UNKNOWN = 0, GW_IO_RESIZE };
struct gw_io_control {
    enum gw_io_control_kind kind;
    int cols, rows; /* GW_IO_RESIZE, clamped to 1..GW_SIZE_MAX_DIM */
};

/* Parses {"type":"resize","cols":C,"rows":R}; any other valid JSON object is GW_IO_UNKNOWN.
 * Returns 0, or -TELO_EPROTO when it is not a JSON object or a resize lacks numeric cols/rows. */
int gw_parse_io_control(const uint8_t *data, size_t len, struct gw_io_control *out);

/* Appends the resize message the API server expects on channel 4, {"Width":W,"Height":H}. */
int gw_resize_json(struct buf *out, int width, int height);

/* Appends the channel-3 metav1.Status for an exit: Success for 0, else Failure with reason
 * NonZeroExitCode and an ExitCode cause (what client-go's v4 error decoder turns into the exit
 * code); exit_code < 0 means the session ended without one: Failure with reason InternalError
 * and message. */
int gw_exit_status_json(struct buf *out, int exit_code, const char *message);

/* Reads the exit code out of a channel-3 Status sent by the API server: 0 for Success, the
 * ExitCode cause for NonZeroExitCode; -1 when it carries none (other failures). */
int gw_status_exit_code(const uint8_t *data, size_t len);

/* Appends a Kubernetes Status error body ({"kind":"Status",...,"code":code}) for refusals. */
int gw_error_status_json(struct buf *out, int code, const char *reason, const char *message);

/* Reconstructs the 64-bit sequence a telo.io.v1 client's 32-bit lastSeq refers to: the largest
 * value <= latest that equals last_seq modulo 2^32 (0 when there is none). */
uint64_t gw_seq_from_wire(uint32_t last_seq, uint64_t latest);

#endif
