/* The admission gate in front of gw_auth: a short cache of verdicts keyed by (session, token
 * hash), one lookup in flight per key (identical requests meanwhile wait for it), and token
 * buckets, overall and per source address, on the lookups that reach the API server, so a flood
 * of requests costs the API server at most a bounded rate. */
#ifndef TELO_GATEWAY_GATE_H
#define TELO_GATEWAY_GATE_H

#include "gateway/auth.h"
#include "util/err.h"

#include <stddef.h>

/* The reason of a GW_TOO_MANY verdict over a source's own rate (the overall one says less). */
#define GW_GATE_PER_SOURCE_REASON "too many admission requests from this address"

struct ev_loop;
struct gw_gate;
struct gw_gate_req;

/* What answers a lookup: gw_admit and gw_admission_cancel on a gw_auth in the server, a fake in
 * tests. admit must never call cb from inside itself. */
struct gw_gate_backend {
    struct gw_admission *(*admit)(void *ud, const char *namespace, const char *name,
                                  const char *token, gw_admit_fn *cb, void *cb_ud,
                                  struct telo_err *err);
    void (*cancel)(struct gw_admission *adm);
    void *ud;
};

struct gw_gate_opts {
    /* Verdicts are reused this long: 401, 403 and 404, and an allow for a session that runs or
     * has ended (not one still starting). A revoked token or binding, or a rotated session
     * token, is honoured at most this late; 0: 2 s, < 0: no cache. */
    double cache_s;
    /* Lookups a second overall and their burst; 0: 10, 2 x rate. Sources whose lookups failed
     * recently take only what lies above three quarters of the burst (gate.c: SUSPECT_RESERVE). */
    double rate, burst;
    double rate_per_source, burst_per_source; /* per source address; 0: 5, 4 x rate */
    size_t max_sources;                       /* per-source buckets kept; 0: 16384 */
};

struct gw_gate_metrics {
    unsigned long lookups;            /* lookups started (each 1-3 API requests) */
    unsigned long hits;               /* verdicts from the cache */
    unsigned long coalesced;          /* requests that waited for an identical lookup */
    unsigned long limited;            /* refused over the overall rate */
    unsigned long limited_per_source; /* refused over a source's rate */
};

/* Creates a gate on loop (borrowed) with a copy of be and opts (NULL: defaults). Returns NULL
 * when out of memory. */
struct gw_gate *gw_gate_new(struct ev_loop *loop, const struct gw_gate_backend *be,
                            const struct gw_gate_opts *opts);

/* Cancels every lookup in flight (callbacks of requests still waiting are not called) and frees
 * g. NULL is a no-op. */
void gw_gate_free(struct gw_gate *g);

/* Decides as gw_admit does whether token may attach to namespace/name, for a request from source
 * (gw_source_key): from the cache, by waiting for the same lookup in flight, or by a new lookup
 * when the buckets allow one; otherwise the verdict is GW_TOO_MANY with retry_after. cb runs
 * exactly once, never from inside this call, unless the request is cancelled first. Returns the
 * handle, or NULL with err filled (out of memory, or the backend's error). */
struct gw_gate_req *gw_gate_admit(struct gw_gate *g, const char *source, const char *namespace,
                                  const char *name, const char *token, gw_admit_fn *cb, void *ud,
                                  struct telo_err *err);

/* Cancels r: its cb is not called (a lookup it started goes on for the cache). NULL is a no-op.
 * Not from inside r's cb. */
void gw_gate_cancel(struct gw_gate_req *r);

/* The counters; valid for the gate's lifetime. */
const struct gw_gate_metrics *gw_gate_metrics(const struct gw_gate *g);

#endif
