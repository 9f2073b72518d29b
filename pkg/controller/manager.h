/* The controller manager: informers feed work queues, reconcilers drain them, on one loop. */
#ifndef TELO_CONTROLLER_MANAGER_H
#define TELO_CONTROLLER_MANAGER_H

#include "cache/reflector.h"
#include "cache/store.h"
#include "controller/leader.h"
#include "util/err.h"
#include "util/histogram.h"
#include "workqueue/queue.h"

#include <stddef.h>

struct ev_loop;
struct kube_transport;
struct ctrl_manager;
struct ctrl_informer;
struct ctrl_controller;
struct ctrl_reconcile;

/* How a reconcile ended (controller-runtime's Result and error). */
enum ctrl_outcome {
    CTRL_SUCCESS = 0,    /* converged: forget the key's backoff */
    CTRL_REQUEUE_AFTER,  /* converged for now; look again after requeue_after seconds */
    CTRL_ERROR,          /* failed: retry with the key's exponential backoff */
    CTRL_TERMINAL_ERROR, /* failed in a way retrying cannot fix: no retry */
};

/* The metrics label of an outcome ("success", "requeue_after", "error", "terminal_error"). */
const char *ctrl_outcome_name(enum ctrl_outcome outcome);

struct ctrl_result {
    enum ctrl_outcome outcome;
    double requeue_after; /* seconds, for CTRL_REQUEUE_AFTER */
    const char *message;  /* for errors: logged; may be NULL */
};

/* Called with a key ("namespace/name") to converge. The reconciler reads what it needs from the
 * informers' stores, starts its writes, and calls ctrl_reconcile_finish(rec, ...) exactly once,
 * now or later from a callback on the loop. The key stays valid until then. A reconcile that
 * does not finish within the controller's deadline counts as an error (its late finish is
 * ignored), so one stuck request cannot wedge a key. */
typedef void ctrl_reconcile_fn(void *ud, struct ctrl_reconcile *rec, const char *key);

struct ctrl_manager_opts {
    int max_concurrent_reconciles; /* per controller; 1 when 0 */
    double resync_period;          /* seconds, jittered +-10%; 10 h when 0; < 0 disables */
    double cache_sync_timeout;     /* seconds; 120 when 0 */
    double shutdown_timeout;       /* seconds to drain on SIGTERM; 30 when 0 */
    double reconcile_timeout;      /* seconds per reconcile; 60 when 0 */
    struct wq_config queue;        /* zeroed: the work queue defaults */
    int handle_signals;            /* 1: SIGTERM/SIGINT start a graceful shutdown */
};

/* Per-controller counters, exported as controller_runtime_* metrics. */
struct ctrl_controller_stats {
    unsigned long long reconciles[4]; /* by outcome: success, requeue_after, error, terminal */
    unsigned long long timeouts;
    struct histogram reconcile_time; /* seconds */
    size_t in_flight;
};

/* Returns a manager on loop using t (both borrowed; they must outlive it), or NULL when out of
 * memory. opts may be NULL for the defaults. */
struct ctrl_manager *ctrl_manager_new(struct ev_loop *loop, struct kube_transport *t,
                                      const struct ctrl_manager_opts *opts);

/* Frees the manager with its informers and controllers. Accepts NULL. */
void ctrl_manager_free(struct ctrl_manager *m);

/* Adds an informer (a reflector with its store) named name, started by ctrl_manager_start.
 * Returns it (owned by the manager) or NULL with err filled. */
struct ctrl_informer *ctrl_manager_add_informer(struct ctrl_manager *m, const char *name,
                                                const struct cache_reflector_config *cfg,
                                                struct telo_err *err);

/* The informer's store, for reconcilers to read. */
const struct cache_store *ctrl_informer_store(const struct ctrl_informer *inf);

/* Adds a controller named name whose keys come from primary's objects (each object's own key).
 * Returns it (owned by the manager) or NULL with err filled. */
struct ctrl_controller *ctrl_manager_add_controller(struct ctrl_manager *m, const char *name,
                                                    struct ctrl_informer *primary,
                                                    ctrl_reconcile_fn *fn, void *ud,
                                                    struct telo_err *err);

/* Also reconciles the owner when an object of inf changes: the owner is the object's controller
 * owner reference of kind owner_kind, in the object's namespace. Returns 0 or -TELO_ENOMEM. */
int ctrl_controller_watch_owned(struct ctrl_controller *c, struct ctrl_informer *inf,
                                const char *owner_kind, struct telo_err *err);

/* Also reconciles "namespace/<value of label>" when an object of inf changes. For children that
 * live in another namespace or carry no owner reference. Returns 0 or -TELO_ENOMEM. */
int ctrl_controller_watch_labelled(struct ctrl_controller *c, struct ctrl_informer *inf,
                                   const char *label, struct telo_err *err);

/* Maps an object of a watched informer to the keys to reconcile: calls emit(ctx, key) for each
 * (none is fine). Must not change the informer's store. */
typedef void ctrl_map_fn(void *ud, const struct cache_object *obj,
                         void (*emit)(void *ctx, const char *key), void *ctx);

/* Also reconciles the keys fn maps each changed object of inf to (ud is passed through), for
 * relations no owner reference or label expresses (a shared object in another namespace).
 * Returns 0 or a negative code with err filled. */
int ctrl_controller_watch_mapped(struct ctrl_controller *c, struct ctrl_informer *inf,
                                 ctrl_map_fn *fn, void *ud, struct telo_err *err);

/* Ends a reconcile (see ctrl_reconcile_fn). rec is freed. */
void ctrl_reconcile_finish(struct ctrl_reconcile *rec, const struct ctrl_result *res);

/* Queues key on c now (e.g. from an unrelated event). Returns 0 or -TELO_ENOMEM. */
int ctrl_controller_enqueue(struct ctrl_controller *c, const char *key);

/* Starts the informers at once; reconciles start when every informer has synced and, if
 * ctrl_manager_set_active(m, 0) was called, only after ctrl_manager_set_active(m, 1) (leader
 * election: followers keep their caches warm). Returns 0. A cache that does not sync within the
 * timeout stops the manager with an error (see ctrl_manager_error). */
int ctrl_manager_start(struct ctrl_manager *m, struct telo_err *err);

struct ctrl_leader_opts {
    const char *namespace;       /* of the Lease */
    const char *name;            /* of the Lease */
    const char *identity;        /* unique per process (leader_default_identity) */
    struct leader_timing timing; /* zero fields take client-go's 15/10/2 s */
};

/* Makes reconciling wait for leadership of the Lease (o->timing, by default client-go's 15/10/2 s
 * lease duration, renew deadline and retry period; a follower takes over a crashed leader's
 * lease within about lease duration + 2 x retry period x 2.2 of its last renew): informers
 * still start at once, so a follower takes over with warm caches. Losing the lease stops
 * reconciles at once and stops the manager with an error (the process restarts and rejoins as a
 * follower, as with controller-runtime); a graceful stop releases the lease after draining, so
 * a follower takes over within its retry period. Call before ctrl_manager_start. Returns 0 or a
 * negative code with err filled. */
int ctrl_manager_enable_leader_election(struct ctrl_manager *m, const struct ctrl_leader_opts *o,
                                        struct telo_err *err);

/* The manager's elector (for metrics), or NULL without leader election. */
struct leader_elector *ctrl_manager_leader(const struct ctrl_manager *m);

/* Switches reconciling on or off (on by default). Off stops dispatching new reconciles at once;
 * those in flight finish. */
void ctrl_manager_set_active(struct ctrl_manager *m, int active);

/* Starts a graceful shutdown: queues stop accepting keys, queued and running reconciles drain
 * (up to the shutdown timeout), informers stop, then the loop is broken. */
void ctrl_manager_stop(struct ctrl_manager *m);

/* The configured reconciles in flight per controller. */
int ctrl_manager_max_concurrent(const struct ctrl_manager *m);

/* 1 once every informer has synced. */
int ctrl_manager_synced(const struct ctrl_manager *m);

/* The error that stopped the manager ("" when none); when non-empty, the process should exit 1. */
const char *ctrl_manager_error(const struct ctrl_manager *m);

/* Counters of c and its queue. */
const struct ctrl_controller_stats *ctrl_controller_stats(const struct ctrl_controller *c);
const struct wq *ctrl_controller_queue(const struct ctrl_controller *c);
const char *ctrl_controller_name(const struct ctrl_controller *c);

/* Iteration over the manager's controllers and informers (for metrics): the i-th, or NULL. */
struct ctrl_controller *ctrl_manager_controller(const struct ctrl_manager *m, size_t i);
struct ctrl_informer *ctrl_manager_informer(const struct ctrl_manager *m, size_t i);
const char *ctrl_informer_name(const struct ctrl_informer *inf);
const struct cache_reflector *ctrl_informer_reflector(const struct ctrl_informer *inf);

#endif
