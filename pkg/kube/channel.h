/* The Kubernetes remote-command channel protocol (attach/exec over WebSocket): pure framing. */
#ifndef TELO_KUBE_CHANNEL_H
#define TELO_KUBE_CHANNEL_H

#include <stddef.h>

#include "util/buf.h"
#include "util/err.h"

/* Subprotocol names (k8s.io/apimachinery/pkg/util/remotecommand/constants.go). v5 adds the close
 * channel; it is the only one the API server's WebSocket translator accepts. v4 is what the
 * kubelet serves directly and what older client libraries offer. */
#define KUBE_CHANNEL_V5 "v5.channel.k8s.io"
#define KUBE_CHANNEL_V4 "v4.channel.k8s.io"

/* Channel numbers: the first byte of every binary message. */
enum kube_channel {
    KUBE_CHANNEL_STDIN = 0,
    KUBE_CHANNEL_STDOUT = 1,
    KUBE_CHANNEL_STDERR = 2,
    KUBE_CHANNEL_ERROR = 3,  /* one JSON metav1.Status when the process ends (v4, v5) */
    KUBE_CHANNEL_RESIZE = 4, /* JSON {"Width":W,"Height":H} objects, client to server */
    KUBE_CHANNEL_CLOSE = 255 /* v5: [255, channel] closes that channel's stream */
};

/* Largest terminal dimension: Go's remotecommand.TerminalSize holds uint16 fields. */
#define KUBE_TERM_MAX 65535

/* Resize and channel-3 payloads are a few dozen bytes; anything larger is refused unparsed. */
#define KUBE_CHANNEL_JSON_MAX 4096

/* One received message, split. data points into the message given to kube_channel_split. */
struct kube_channel_msg {
    int channel; /* 0..255 */
    const unsigned char *data;
    size_t len;
};

/* Splits one binary WebSocket message into its channel byte and payload. An empty payload is a
 * valid message (the server's hello is an empty message on channel 1). Returns 0, or
 * -TELO_EPROTO with err filled for an empty message (it has no channel byte). Cannot fail
 * otherwise; out borrows msg. */
int kube_channel_split(const void *msg, size_t len, struct kube_channel_msg *out,
                       struct telo_err *err);

/* Appends the message [channel][data] to out. Returns 0, or buf_append's -TELO_ETOOBIG /
 * -TELO_ENOMEM with out unchanged. channel must be 0..255 (else -TELO_EINVAL). */
int kube_channel_frame(struct buf *out, int channel, const void *data, size_t len);

/* A terminal size in character cells. */
struct kube_term_size {
    unsigned width;
    unsigned height;
};

/* Parses a resize payload the way the server's json.Decoder reads the channel: one or more JSON
 * objects, whitespace between and after them allowed, keys matched case-insensitively as Go's
 * encoding/json does ("Width", "width"), unknown keys ignored, a missing key read as 0. Each value
 * must be an integer in 0..KUBE_TERM_MAX. Sets *out to the last size in the payload. Returns the
 * number of sizes read (at least 1), or -TELO_EPROTO with err naming the problem (not JSON, not an
 * object, a value out of range, nothing but whitespace, more than KUBE_CHANNEL_JSON_MAX bytes);
 * *out is unchanged on failure. Pure; data need not be NUL-terminated. */
int kube_resize_parse(const void *data, size_t len, struct kube_term_size *out,
                      struct telo_err *err);

/* Appends {"Width":W,"Height":H} to out. Returns 0 or buf_append's error with out unchanged. */
int kube_resize_format(struct buf *out, unsigned width, unsigned height);

/* How the remote process ended, from the channel-3 Status. */
struct kube_exit_status {
    int code; /* 0 Success; 1..255 for NonZeroExitCode; -1 for another failure (see message) */
    char reason[64];   /* the Status's reason ("NonZeroExitCode", "InternalError"), or "" */
    char message[256]; /* the Status's message, truncated, or "" */
};

/* Parses the channel-3 payload of v4/v5: a metav1.Status. "Success" gives code 0. "Failure" with
 * reason NonZeroExitCode gives the code of the cause of reason "ExitCode" (client-go's
 * errorDecoderV4 reads it as a uint8; a missing or unreadable one gives -1), any other failure -1
 * with the message. Returns 0, or -TELO_EPROTO with err filled when the payload is not a JSON
 * Status object (or is larger than KUBE_CHANNEL_JSON_MAX), *out then unchanged. Pure. */
int kube_exit_status_parse(const void *data, size_t len, struct kube_exit_status *out,
                           struct telo_err *err);

/* Appends the channel-3 Status for an exit code as the kubelet sends it: code 0
 * {"metadata":{},"status":"Success"}, code 1..255 the NonZeroExitCode Failure with an ExitCode
 * cause, and a negative code a Failure with reason InternalError and message (NULL: "the process
 * ended without an exit code"). Returns 0, -TELO_EINVAL for a code above 255, or buf_append's
 * error; out is unchanged on failure. */
int kube_exit_status_format(struct buf *out, int code, const char *message);

#endif
