/* The attach sessions of the gateway: one upstream pods/attach per TeloSession, its replay ring,
 * and the clients it fans out to (each with its own cursor, so a slow one never stalls the rest).
 */
#ifndef TELO_GATEWAY_HUB_H
#define TELO_GATEWAY_HUB_H

#include "gateway/proto.h"
#include "util/err.h"
#include "ws/conn.h"

#include <stddef.h>
#include <stdint.h>

/* What the API server's audit log shows for the gateway's requests (pods/attach, TokenReview). */
#define GW_USER_AGENT "telo-gateway/" TELO_VERSION

struct ev_loop;
struct kube_transport;
struct gw_auth;
struct gw_hub;

struct gw_hub_opts {
    size_t ring_bytes;         /* replay ring per session; 0: 1 MiB */
    size_t client_queue_bytes; /* a client's send queue before it counts as slow; 0: 256 KiB */
    size_t client_queue_total; /* what all clients' send queues share: with many clients each
                                * stops at this over their number (at least 16 KiB) rather than
                                * at client_queue_bytes; 0: 32 MiB */
    size_t max_sessions;       /* sessions held at once (each a ring and an upstream); a new one
                                * past it takes the place of the one without clients that has
                                * had none the longest, or is refused; 0: 128 */
    size_t max_sessions_per_namespace; /* sessions of one namespace held at once, so one tenant
                                        * cannot hold them all; a new one past it takes the place
                                        * of that namespace's own one without clients that has
                                        * had none the longest, or is refused; 0:
                                        * gw_hub_namespace_share(max_sessions) */
    double ping_interval_s;            /* clients and upstreams; 0: 20 s */
    double resize_throttle_s;          /* at most one resize upstream per this; 0: 0.05 s */
    double ended_keep_s;  /* an ended session's output stays for late clients; 0: 300 s */
    double idle_keep_s;   /* a running session nobody is attached to keeps its upstream and
                           * scrollback this long, then both go (a later client starts afresh);
                           * 0: 3600 s */
    struct gw_auth *auth; /* re-authorizes attached clients (borrowed); NULL: never */
    double reauth_s;      /* every client's credential is checked again this often; 0: 60 s */
};

struct gw_hub_metrics {
    unsigned long sessions;          /* in memory, live or ended */
    unsigned long clients;           /* attached now */
    unsigned long clients_total;     /* ever attached */
    unsigned long upstream_connects; /* upgrades the API server accepted */
    unsigned long upstream_failures; /* connections that could not be made or were refused */
    unsigned long gaps;              /* times a client lost output (behind the ring) */
    unsigned long idle_closes;       /* sessions dropped after idle_keep_s without a client */
    unsigned long evictions;         /* sessions without clients dropped early for a new one */
    unsigned long resizes;           /* resizes sent upstream */
    unsigned long reauth_closes;     /* clients closed because re-authorization refused them */
    unsigned long long bytes_in;     /* output from containers */
    unsigned long long bytes_out;    /* output queued to clients */
    unsigned long long stdin_bytes;  /* input forwarded to containers */
    unsigned long long stdin_writes; /* upstream messages that carried it */
    unsigned long long stdin_dropped_bytes; /* input lost: the container not reading, or the
                                             * wait for an upstream past its buffer */
};

/* A client the server has admitted and upgraded. Strings are borrowed for the call. */
struct gw_attach {
    const char *namespace, *name;
    const char *pod;    /* the TeloSession's status.podName */
    const char *phase;  /* its status.phase */
    int exit_code;      /* its status.exitCode, -1 when absent */
    const char *uid;    /* its metadata.uid */
    double ready_since; /* when its Ready condition last became True (epoch s), 0 when not */
    enum gw_proto proto;
    int has_last_seq; /* telo.io.v1: the client sent ?lastSeq= */
    uint32_t last_seq;
    const char *subject; /* who, for the log */
    const char *token;   /* the credential admitted, kept (copied) to re-authorize the client */
};

/* Creates the hub on loop with t (both borrowed, must outlive it); opts may be NULL. Returns NULL
 * when out of memory. */
struct gw_hub *gw_hub_new(struct ev_loop *loop, struct kube_transport *t,
                          const struct gw_hub_opts *opts);

/* Closes every client and upstream and frees h. NULL is a no-op. */
void gw_hub_free(struct gw_hub *h);

/* Whether a client may be attached for req: returns 0, or an HTTP status with *why set: 409
 * when the session is neither running with a pod, nor ended, nor held in memory for its uid
 * (what is held for another TeloSession of the name counts as nothing held); 429 when it is
 * not held and its namespace holds max_sessions_per_namespace, each with a client attached; 503
 * when it is not held and max_sessions are, each with a client attached. */
int gw_hub_check(const struct gw_hub *h, const struct gw_attach *req, const char **why);

/* Takes the upgraded socket fd and how to read and write it (io: plain or TLS; NULL for plain),
 * both closed by the hub from now on, also on failure, and the bytes already read past the
 * handshake, and attaches the client: the hello, the scrollback, then live output; the exit
 * Status at the end. What is held for another TeloSession of the name (another uid) is dropped
 * first, its clients closed with 410 Gone. Returns 0, or a negative code with err filled (the
 * client is then gone). */
int gw_hub_attach(struct gw_hub *h, int fd, const struct ws_conn_io *io, const void *extra,
                  size_t extra_len, const struct gw_attach *req, struct telo_err *err);

/* The counters; valid for the hub's lifetime. */
const struct gw_hub_metrics *gw_hub_metrics(const struct gw_hub *h);

/* Bytes queued to all attached clients and not yet written to their sockets. */
size_t gw_hub_queued_bytes(const struct gw_hub *h);

/* The default share of one namespace under a gateway-wide cap: a quarter of it, so it takes
 * four tenants to fill it; all of it when it is under 8 (a cap that small is a test's or a
 * one-tenant gateway's). */
size_t gw_hub_namespace_share(size_t cap);

/* Clients attached to the sessions of namespace now. */
size_t gw_hub_namespace_clients(const struct gw_hub *h, const char *namespace);

/* Clients attached to the session namespace/name now (0 when it is not held). */
size_t gw_hub_session_clients(const struct gw_hub *h, const char *namespace, const char *name);

#endif
