/* What the gateway's HTTP front writes besides the WebSocket handshake: response heads, the
 * counters of refused and limited requests, and the /metrics text. Pure. */
#ifndef TELO_GATEWAY_FRONT_H
#define TELO_GATEWAY_FRONT_H

#include "gateway/gate.h"
#include "gateway/hub.h"
#include "util/buf.h"

#include <stddef.h>

/* Why a request was turned away before costing anything (telo_gateway_limited_total). */
enum gw_limit {
    GW_L_PENDING_PER_SOURCE,
    GW_L_PENDING,
    GW_L_CLIENTS_PER_SESSION,
    GW_L_CLIENTS,
    GW_L_ADMISSION_RATE_PER_SOURCE,
    GW_L_ADMISSION_RATE,
    GW_L_SESSIONS,
    GW_L_DEBUG_STREAMS,
    GW_L_CLIENTS_PER_NAMESPACE,
    GW_L_SESSIONS_PER_NAMESPACE,
    GW_L_DEBUG_STREAMS_PER_NAMESPACE,
    GW_L_COUNT
};

/* The HTTP statuses refusals are counted under (telo_gateway_refusals_total{code}). */
#define GW_REFUSAL_CODES 7

/* The front's own counters. */
struct gw_front_stats {
    unsigned long refusals[GW_REFUSAL_CODES]; /* 400, 401, 403, 404, 409, 429, 503 */
    unsigned long requests;
    unsigned long accept_exhausted; /* accepts that failed for want of descriptors or memory */
    unsigned long limited[GW_L_COUNT];
};

/* The gauges and counters of the other parts, read when /metrics is asked for. */
struct gw_front_gauges {
    const struct gw_hub_metrics *hub;
    const struct gw_gate_metrics *gate;
    size_t debug_streams;
    unsigned long debug_frames;
    unsigned long debug_stalled; /* debug streams ended: their client stopped reading */
    size_t pending;       /* connections before admission, the /metrics request not counted */
    size_t client_queued; /* bytes queued to attached clients (gw_hub_queued_bytes) */
    double accept_backoff_s;
    unsigned long long log_lines_suppressed; /* refusal lines held back by their budget */
};

/* "pending_per_source", ...: the limit label of which. */
const char *gw_limit_name(enum gw_limit which);

/* Counts a refusal with HTTP status code (codes outside the seven are not counted). */
void gw_front_refused(struct gw_front_stats *s, int code);

/* Counts a refusal with code over the limit which. */
void gw_front_limited(struct gw_front_stats *s, enum gw_limit which, int code);

/* "Not Found" for 404, ...; "Service Unavailable" for a code it does not know. */
const char *gw_http_status_text(int code);

/* Appends a whole HTTP/1.1 answer that ends the connection: status, Content-Type, Content-Length,
 * Cache-Control: no-store, Connection: close, extra_headers (each ending in CRLF; may be NULL),
 * then body (may be NULL). Returns 0 or buf's -TELO_ETOOBIG / -TELO_ENOMEM. */
int gw_http_answer(struct buf *out, int code, const char *content_type, const char *body,
                   const char *extra_headers);

/* Appends the Prometheus text of s and g (/metrics). Returns 0 or buf's error. */
int gw_front_metrics(struct buf *out, const struct gw_front_stats *s,
                     const struct gw_front_gauges *g);

#endif
