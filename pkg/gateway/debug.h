/* The debug stream relay: a client's server-sent-event stream fed from the session pod's
 * inspector (GET http://<podIP>:9230/events), event frames only, reconnecting, with heartbeats. */
#ifndef TELO_GATEWAY_DEBUG_H
#define TELO_GATEWAY_DEBUG_H

#include "util/err.h"
#include "ws/conn.h"

#include <stddef.h>

struct ev_loop;
struct gw_auth;
struct gw_relays;
struct kube_transport;

#define GW_INSPECT_PORT 9230

/* Creates the set of relays on loop (borrowed; must outlive it). t (borrowed; must outlive it)
 * reads each relay's session pod before each connect; NULL only for relays added without a
 * client (tests of the stream alone). heartbeat_s: a comment line this often so proxies keep idle
 * streams (0: 20 s). Returns NULL when out of memory. */
struct gw_relays *gw_relays_new(struct ev_loop *loop, struct kube_transport *t, double heartbeat_s);

/* Re-authorizes every relay's client with auth (borrowed) every reauth_s seconds (0: 60 s), as
 * attach clients are: one refused gets `event: error` with a Status-like JSON and is closed. */
void gw_relays_set_auth(struct gw_relays *r, struct gw_auth *auth, double reauth_s);

/* Who a relay's client is, for its re-authorization: the session's namespace, name and uid (a
 * successor of the same name ends the stream), its status.podName (the pod read before each
 * connect) and the credential admitted (copied). */
struct gw_relay_client {
    const char *namespace, *name, *uid, *pod, *token;
};

/* Replaces the relays' deadlines (0 keeps the default): answer_s from connecting to the inspector
 * to its answer's head (10 s; then the reconnect's backoff runs), stall_s for a client that takes
 * none of its queue (60 s; then its relay ends). Call before adding relays. For tests, which
 * cannot wait that long. */
void gw_relays_set_deadlines(struct gw_relays *r, double answer_s, double stall_s);

/* Ends every relay (closing its client) and frees r. NULL is a no-op. */
void gw_relays_free(struct gw_relays *r);

/* Starts relaying to the client on fd (a connected, non-blocking socket whose request was read and
 * admitted) written through io (TLS; NULL or one without close: plain writes); the relay owns
 * both from now on, also on failure): answers 200 text/event-stream, then
 * relays the inspector at pod_ip:port until the client leaves. When the inspector is away it
 * reconnects (after 0.5 s, doubling to 10 s), each time to the address the session names then,
 * read again with the client's credential: a stream follows its session's new pod, ends when the
 * session no longer runs or was replaced, and never reaches an address the session gave up. Before
 * each connect the pod the session names is read with r's transport: it is connected to only when
 * the session controls it, it is not being deleted and its podIP is the address (else the
 * inspector is away; a pod of a successor of the session's name ends the stream with 410). session
 * names the session for the log; who (NULL: never re-checked; given exactly when r has a
 * transport) lets the relay re-authorize its client and check its pod. Returns 0, or a negative
 * code with err filled (fd closed). */
int gw_relays_add(struct gw_relays *r, int fd, const struct ws_conn_io *io, const char *pod_ip,
                  int port, const char *session, const struct gw_relay_client *who,
                  struct telo_err *err);

/* Relays running now. */
size_t gw_relays_count(const struct gw_relays *r);

/* Relays running now for session (as named to gw_relays_add, "ns/name"). */
size_t gw_relays_session_count(const struct gw_relays *r, const char *session);

/* Relays running now for the sessions of namespace. */
size_t gw_relays_namespace_count(const struct gw_relays *r, const char *namespace);

/* Debug frames relayed to clients since the start. */
unsigned long gw_relays_frames(const struct gw_relays *r);

/* Relays ended since the start because their client took nothing for the stall deadline. */
unsigned long gw_relays_stalled(const struct gw_relays *r);

#endif
