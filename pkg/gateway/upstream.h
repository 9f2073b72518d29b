/* The gateway's one connection per session to the API server's pods/attach, over WebSocket
 * v5.channel.k8s.io with the gateway's own credentials. */
#ifndef TELO_GATEWAY_UPSTREAM_H
#define TELO_GATEWAY_UPSTREAM_H

#include "util/err.h"

#include <stddef.h>
#include <stdint.h>

struct ev_loop;
struct kube_config;
struct gw_upstream;

struct gw_upstream_callbacks {
    /* The API server accepted the upgrade; stdin and resize may flow. */
    void (*on_open)(void *ud);
    /* Bytes the container wrote (stdout and stderr are one stream under a TTY). */
    void (*on_output)(const uint8_t *data, size_t len, void *ud);
    /* The Status the API server sends on channel 3 when the stream ends. */
    void (*on_status)(const uint8_t *json, size_t len, void *ud);
    /* The connection ended or could not be made: http_status is the API server's answer when it
     * refused the upgrade (403, 404, ...), else 0; why says what happened. Called once, never
     * from inside gw_upstream_open; the owner then frees u (also from inside this call). */
    void (*on_closed)(int http_status, const char *why, void *ud);
};

/* Opens pods/attach of container in namespace/pod with stdin, stdout and a TTY. cfg and loop are
 * borrowed and must outlive the upstream. The TCP and TLS connection is made synchronously,
 * bounded by connect_timeout_ms (the local API server answers in milliseconds); the upgrade and
 * everything after run on the loop. Returns the upstream, or NULL with err filled when it could not
 * connect (-TELO_EIO), a credential is missing, or out of memory. */
struct gw_upstream *gw_upstream_open(struct ev_loop *loop, struct kube_config *cfg,
                                     const char *namespace, const char *pod, const char *container,
                                     long connect_timeout_ms, double ping_interval_s,
                                     const struct gw_upstream_callbacks *cb, void *ud,
                                     struct telo_err *err);

/* Sends bytes to the container's stdin. Returns 0, or -TELO_EIO when not open (nothing is sent;
 * the caller keeps what it wants to send later), or -TELO_ETOOBIG when the send queue is full. */
int gw_upstream_stdin(struct gw_upstream *u, const void *data, size_t len);

/* Sends a terminal size on the resize channel. Returns as gw_upstream_stdin. */
int gw_upstream_resize(struct gw_upstream *u, int width, int height);

/* 1 after on_open and before on_closed. */
int gw_upstream_is_open(const struct gw_upstream *u);

/* Closes the connection without callbacks and frees u. NULL is a no-op. */
void gw_upstream_free(struct gw_upstream *u);

#endif
