/* The gateway's HTTP front: the attach route with its WebSocket handshake and admission, and
 * /healthz, /readyz and /metrics, on the client listening socket of the libev loop; the last
 * three also on a health listener of their own, for the kubelet's probes. */
#ifndef TELO_GATEWAY_SERVER_H
#define TELO_GATEWAY_SERVER_H

#include "gateway/gate.h"
#include "gateway/hub.h"
#include "util/err.h"

#include <stddef.h>

struct ev_loop;
struct kube_transport;
struct gw_server;

struct gw_server_config {
    const char *address; /* IPv4 or IPv6 literal; NULL or "": every interface */
    int port;            /* 0: the kernel picks (read it with gw_server_port) */
    /* The health listener: /healthz, /readyz and /metrics only, with a small connection cap of
     * its own and a 2 s deadline, so clients filling max_pending cannot fail the kubelet's
     * probes (and get the gateway restarted). Same TLS as the client port. IPv4 or IPv6 literal
     * ("": every interface); NULL: none. */
    const char *health_address;
    int health_port;            /* 0: the kernel picks (gw_server_health_port) */
    const char *tls_cert_path;  /* PEM chain; with tls_key_path serves HTTPS/WSS (read at start,
                                 * and again when the files change: ws_tls_ctx_reload) */
    const char *tls_key_path;   /* PEM key; both NULL: plain HTTP */
    const char *const *origins; /* allowed browser Origin values ("*": any); none: a request
                                 * with an Origin header is refused (one without is no
                                 * browser's and passes) */
    size_t norigins;
    const char *token_audience; /* TokenReview audience Kubernetes tokens must carry; NULL or
                                 * "": the API server's own */
    double auth_cache_s;        /* bearer-token decisions cached this long; 0: 10 s */
    /* What one stranger can cost: connections before admission (reading the head, waiting for
     * the verdict) overall and per source address (an IPv6 /64), answered 503 and 429 at once;
     * attached clients (and debug streams) overall and per session, answered 503 and 429 after
     * admission; the admission cache and lookup rates (gateway/gate.h). 0: the defaults. */
    size_t max_pending; /* 0: 1024 */
    /* A client that has sent nothing at all this long is closed (the head's own deadline is
     * 10 s): a silent connection is the cheapest way to hold a pending slot, and every real
     * client speaks at once (a ClientHello, a request line). 0: 2 s. */
    double first_byte_s;
    size_t max_pending_per_source; /* 0: 64 */
    /* Networks whose connections are proxies (an Ingress controller, the API server's service
     * proxy), comma-separated (gateway/proxies.h); NULL or "": none. Such a connection is limited
     * under the client its X-Forwarded-For names, not under the proxy's address; checked by
     * gw_server_start. Before its head names one it counts under the proxy's address against
     * max_pending_per_proxy: a proxy carries many clients, so more than one client's cap, but
     * a host in a trusted range cannot hold the whole max_pending silent. */
    const char *trusted_proxies;
    size_t max_pending_per_proxy;     /* 0: 4 x max_pending_per_source (256) */
    size_t max_clients;               /* 0: 4096 */
    size_t max_clients_per_session;   /* attach clients and debug streams together; 0: 64 */
    size_t max_clients_per_namespace; /* the same over one namespace's sessions, so one tenant
                                       * cannot take every client slot; 0:
                                       * gw_hub_namespace_share(max_clients) */
    size_t max_debug_streams;         /* debug streams of all sessions (each holds up to ~1.5 MiB);
                                       * 0: 32 */
    size_t max_debug_streams_per_namespace; /* the same over one namespace's sessions; 0:
                                             * gw_hub_namespace_share(max_debug_streams) */
    struct gw_gate_opts admission;
    struct gw_hub_opts hub; /* sessions: ring, queues, pings, resize throttle, reauth_s (its
                             * auth is the server's) */
};

/* Creates a server for loop and t (borrowed, must outlive it) with a copy of cfg. Returns NULL
 * with err filled (-TELO_ENOMEM). */
struct gw_server *gw_server_new(struct ev_loop *loop, struct kube_transport *t,
                                const struct gw_server_config *cfg, struct telo_err *err);

/* Binds and listens. Returns 0, or -TELO_EIO / -TELO_EINVAL with err naming the address. */
int gw_server_start(struct gw_server *srv, struct telo_err *err);

/* The bound port, or -1 before start. */
int gw_server_port(const struct gw_server *srv);

/* The health listener's bound port, or -1 before start or without one. */
int gw_server_health_port(const struct gw_server *srv);

/* Closes the listener, every connection and session, and frees srv. NULL is a no-op. */
void gw_server_free(struct gw_server *srv);

#endif
