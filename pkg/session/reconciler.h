/* The TeloSession reconciler: observed state in, writes out, registered on a manager. */
#ifndef TELO_SESSION_RECONCILER_H
#define TELO_SESSION_RECONCILER_H

#include "controller/manager.h"
#include "session/config.h"
#include "util/err.h"

struct kube_transport;
struct events_recorder;

/* Counters for the telo_session_* metrics. */
struct session_stats {
    unsigned long long starts;   /* pods created */
    unsigned long long failures; /* sessions that turned Failed */
    unsigned long long writes;   /* API writes made */
    unsigned long long status_writes;
    struct histogram startup_seconds; /* creation of the session to Running */
};

/* Registers the TeloSession informers and controller on m, writing through t. cfg and events
 * (NULL: no Events) are borrowed and must outlive the reconciler. Returns the reconciler (free
 * with session_reconciler_free after the manager) or NULL with err filled. */
struct session_reconciler *session_reconciler_new(struct ctrl_manager *m, struct kube_transport *t,
                                                  const struct session_config *cfg,
                                                  struct events_recorder *events,
                                                  struct telo_err *err);

/* Frees r. Accepts NULL. */
void session_reconciler_free(struct session_reconciler *r);

/* Sessions by phase ("Running" -> 3) for the telo_sessions{phase} gauge: calls fn per phase. */
void session_reconciler_count_phases(const struct session_reconciler *r,
                                     void (*fn)(void *ud, const char *phase, unsigned long n),
                                     void *ud);

const struct session_stats *session_reconciler_stats(const struct session_reconciler *r);

struct metrics_registry;

/* Registers telo_sessions{phase}, telo_session_starts_total, telo_session_failures_total and
 * telo_session_startup_seconds on reg, mirrored from r at each scrape. r must outlive reg's
 * renders. Returns 0 or a negative code with err filled. */
int session_reconciler_register_metrics(struct session_reconciler *r, struct metrics_registry *reg,
                                        struct telo_err *err);

#endif
