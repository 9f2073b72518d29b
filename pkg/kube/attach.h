/* A WebSocket client for the remote-command channel protocol (pods/attach, the gateway's attach),
 * on the project's own WebSocket stack (pkg/ws) and the caller's libev loop. Bounds: a message
 * from the server (fragments joined) of at most 1 MiB (a bigger one ends the stream with
 * -TELO_EPROTO), a response head of at most 16 KiB, 1 MiB of stdin queued; a connect, TLS
 * handshake and upgrade within 30 s. No call blocks the loop but the name lookup of a host that
 * is not an IP address. */
#ifndef TELO_KUBE_ATTACH_H
#define TELO_KUBE_ATTACH_H

#include <stddef.h>

#include "kube/channel.h"
#include "util/err.h"

struct buf;
struct ev_loop;
struct kube_config;
struct kube_attach;

/* How the stream ended. Valid only during on_end. */
struct kube_attach_end {
    int rc;                       /* 0: the server closed after (or without) a Status; else < 0 */
    const struct telo_err *err;   /* what went wrong when rc != 0 */
    long http_status;             /* the upgrade's HTTP status when it was refused, else 0 */
    int have_status;              /* 1 when channel 3 carried a Status */
    struct kube_exit_status exit; /* that Status, when have_status */
    int close_code;               /* the WebSocket close code the server sent, 0 when none */
};

/* Callbacks; all run on the loop. The handle stays valid in them; on_end is the last call and the
 * only one in which the caller may kube_attach_free the handle (or later). */
struct kube_attach_callbacks {
    /* The upgrade succeeded; protocol is the subprotocol the server chose. May be NULL. */
    void (*on_open)(struct kube_attach *a, const char *protocol, void *ud);
    /* Output on channel 1 or 2 (other channels but 3 are dropped). The server's hello, an empty
     * message, is not reported. Required. */
    void (*on_output)(struct kube_attach *a, int channel, const unsigned char *data, size_t len,
                      void *ud);
    /* The connection is gone (refused, failed, or closed by either side). Required. */
    void (*on_end)(struct kube_attach *a, const struct kube_attach_end *end, void *ud);
};

struct kube_attach_opts {
    /* Where to connect: http(s):// or ws(s):// with path and query, e.g.
     * "https://127.0.0.1:16443/api/v1/namespaces/ns/pods/p/attach?container=c&stdin=true&..."
     * Required. */
    const char *url;
    /* TLS trust and client certificate, and the bearer token when token is NULL: the API server's
     * settings from the user's kubeconfig. NULL verifies against the system's CAs and sends no
     * client certificate. Borrowed; must outlive the handle. */
    struct kube_config *cfg;
    /* Bearer token to send instead of cfg's (a session's attach token for the gateway); NULL to
     * use cfg's. Copied. */
    const char *token;
    /* PEM file of the certificate authorities to trust instead of cfg's or the system's: a
     * gateway whose certificate a private CA signed. NULL: cfg's, else the system's. Borrowed. */
    const char *ca_file;
    /* 1: verify nothing about the server's certificate (tests, self-signed gateways). */
    int insecure_skip_tls_verify;
    /* Subprotocols to offer, most preferred first, NULL-terminated; NULL offers v5 then v4. */
    const char *const *protocols;
    /* Seconds between WebSocket pings, so idle terminals survive proxy idle timeouts; 0: 20. */
    int ping_interval_s;
    /* The User-Agent the API server's audit log shows ("telo-gateway/0.1.0"); NULL:
     * "telo/<version>". Copied; at most 95 bytes, no line break. */
    const char *user_agent;
    /* A bearer token for the server behind a proxy: offered as one more subprotocol,
     * base64url.bearer.authorization.k8s.io.<base64url(token)>, after protocols, while token (or
     * cfg's credential) authenticates to the proxy. The API server's service proxy removes the
     * Authorization header it authenticated (and never forwards the user's identity) but passes
     * the other subprotocols on; the gateway takes its token from there. NULL: none. Copied; a
     * server that chooses this subprotocol ends the attempt as one that chose a foreign one. */
    const char *protocol_token;
};

/* Starts connecting to opts->url on loop; the callbacks report what happens. loop is borrowed and
 * must outlive the handle. Returns the handle (free with kube_attach_free), or NULL with err
 * filled: -TELO_EINVAL for a URL that is not http(s)/ws(s) (or holds user info, a blank or a
 * control character) or a missing callback, -TELO_EIO when the host cannot be resolved or the TLS
 * settings cannot be loaded (the message names the file or field), -TELO_ENOMEM. Credential
 * errors (an exec plugin that fails) also come back here. A connection that fails later (refused,
 * TLS: the message then starts "SSL:" after the step, a status other than 101, a 101 that is not
 * an answer to our key or chose a subprotocol we did not offer) is reported by on_end. */
struct kube_attach *kube_attach_open(struct ev_loop *loop, const struct kube_attach_opts *opts,
                                     const struct kube_attach_callbacks *cb, void *ud,
                                     struct telo_err *err);

/* Queues data for the stdin channel. Returns 0, -TELO_ETOOBIG when more than 1 MiB is already
 * queued (the server is not reading: the caller should stop reading its own input), or
 * -TELO_EINVAL when the stream is not open (before on_open or after on_end). */
int kube_attach_write(struct kube_attach *a, const void *data, size_t len);

/* Queues a resize to width x height cells (1..KUBE_TERM_MAX each; 0 x 0 is ignored and returns
 * 0). Resizes not yet sent are replaced by the newest. Returns 0 or -TELO_EINVAL as
 * kube_attach_write. */
int kube_attach_resize(struct kube_attach *a, unsigned width, unsigned height);

/* Ends the stdin stream: on v5 sends the close message [255, 0] (the process sees EOF on stdin),
 * on older protocols does nothing. Returns 0 or -TELO_EINVAL as kube_attach_write. */
int kube_attach_close_stdin(struct kube_attach *a);

/* The subprotocol the server chose, or NULL before on_open. */
const char *kube_attach_protocol(const struct kube_attach *a);

/* Bytes queued for the server and not yet written. */
size_t kube_attach_queued(const struct kube_attach *a);

/* Closes the connection (a normal close if it is open) and frees a, without calling on_end.
 * NULL is a no-op. May be called from any callback of a, which then must not touch a again. */
void kube_attach_free(struct kube_attach *a);

/* Appends to out the URL of pods/attach for container in pod namespace/pod on server (the API
 * server's base URL), as kubectl attach -it asks: stdin, stdout and a TTY (stderr=false: the TTY
 * merges it into stdout). The path is kube_ref_path's, every part escaped. Returns 0, or
 * -TELO_EINVAL (err filled) / -TELO_ETOOBIG / -TELO_ENOMEM. */
int kube_attach_pod_url(const char *server, const char *namespace, const char *pod,
                        const char *container, struct buf *out, struct telo_err *err);

#endif
