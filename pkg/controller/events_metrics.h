/* The Event recorder's counters as Prometheus metrics: what it wrote, and what it lost. */
#ifndef TELO_CONTROLLER_EVENTS_METRICS_H
#define TELO_CONTROLLER_EVENTS_METRICS_H

#include "controller/events.h"
#include "controller/metrics.h"
#include "util/err.h"

/* What the collector needs; the caller provides the storage (it must outlive reg's renders). */
struct events_metrics {
    const struct events_stats *stats; /* borrowed: events_recorder_stats() */
    struct metrics_family *total;     /* telo_events_total{outcome} */
    struct metrics_family *queued;    /* telo_events_queued */
};

/* Registers on reg telo_events_total{outcome="created|patched|filtered|dropped|failed"} (Events
 * written as new, as a series bump, held back by the spam filter, lost to a full queue, given up
 * after errors) and the gauge telo_events_queued, mirrored from stats at each render. Returns 0
 * or a negative code with err filled (a duplicate registration, out of memory). */
int events_metrics_register(struct events_metrics *em, const struct events_stats *stats,
                            struct metrics_registry *reg, struct telo_err *err);

#endif
