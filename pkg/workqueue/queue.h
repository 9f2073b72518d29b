/* A rate-limited, delaying work queue of string keys with client-go's semantics, fair across
 * namespaces. */
#ifndef TELO_WORKQUEUE_QUEUE_H
#define TELO_WORKQUEUE_QUEUE_H

#include "util/histogram.h"

#include <stddef.h>

/* The rules (client-go util/workqueue, controller-runtime's priority queue):
 * - a key is queued at most once (adding a queued key does nothing);
 * - a key is never handed out twice at once: adding a key that is being processed marks it, and
 *   it is queued again when wq_done is called for it;
 * - wq_add_after keeps the earliest of several pending times for one key;
 * - keys added at low priority (initial list, resync) are handed out after every normal key; a
 *   normal add of a key waiting at low priority moves it up;
 * - within a priority, namespaces (the text of a key before its first '/'; keys without one
 *   share a namespace) take turns, one key each, and a namespace's keys come out in the order
 *   they were queued. So one tenant queueing thousands of keys delays another tenant's next
 *   key by one key per namespace with work, not by the thousands (client-go is one FIFO);
 * - wq_add_rate_limited waits max(per-item backoff, overall token bucket); wq_forget resets the
 *   item's backoff;
 * - after wq_shutdown no add is accepted and pending delays are dropped, but queued keys are still
 *   handed out, so callers drain the queue.
 * Time is passed in by the caller (seconds on a monotonic clock), so the queue does no I/O and
 * tests drive it with a fake clock. */

struct wq_config {
    double backoff_base; /* seconds; default 0.005 */
    double backoff_max;  /* seconds; default 1000 */
    double qps;          /* overall bucket; default 10, <= 0 disables it */
    int burst;           /* default 100 */
};

/* The counters controller-runtime exports as workqueue_* metrics. */
struct wq_metrics {
    unsigned long long adds;         /* workqueue_adds_total */
    unsigned long long retries;      /* workqueue_retries_total */
    struct histogram queue_duration; /* seconds from add to get */
    struct histogram work_duration;  /* seconds from get to done */
};

/* Fills cfg with the defaults above. */
void wq_config_default(struct wq_config *cfg);

/* Returns a new empty queue (cfg NULL = defaults) whose bucket starts full at time now, or NULL
 * when out of memory. Free it with wq_free. */
struct wq *wq_new(const struct wq_config *cfg, double now);

/* Frees the queue and every key in it. Accepts NULL. */
void wq_free(struct wq *q);

/* Queues key at normal priority. The queue copies key. Returns 0, or -TELO_ENOMEM with the queue
 * unchanged. Ignored (returns 0) after shutdown. Counted in metrics.adds only when the key was not
 * already queued, as client-go counts. */
int wq_add(struct wq *q, const char *key, double now);

/* Queues key at low priority (initial list and resync events). Same results as wq_add. */
int wq_add_low(struct wq *q, const char *key, double now);

/* Queues key once delay seconds have passed (delay <= 0: now). Same results as wq_add. */
int wq_add_after(struct wq *q, const char *key, double delay, double now);

/* Queues key after its backoff (and the bucket's wait); counts a retry. Same results as wq_add. */
int wq_add_rate_limited(struct wq *q, const char *key, double now);

/* Resets key's backoff, after a success. Cannot fail. */
void wq_forget(struct wq *q, const char *key);

/* How many times key was rate-limited since its last forget. */
unsigned wq_num_requeues(const struct wq *q, const char *key);

/* Moves keys whose delay has passed into the queue, then hands out the next key, or returns NULL
 * when none is ready. The key belongs to the queue and stays valid until wq_done(q, key). */
const char *wq_get(struct wq *q, double now);

/* Ends the processing of key (as returned by wq_get); queues it again if it was added meanwhile.
 * Cannot fail; a key that is not being processed is ignored. */
void wq_done(struct wq *q, const char *key, double now);

/* The time at which the earliest delayed key becomes due, or a negative value when no key waits.
 * The caller arms its timer for it. */
double wq_next_due(const struct wq *q);

/* Keys ready to be handed out (the workqueue_depth gauge). */
size_t wq_len(const struct wq *q);

/* Keys being processed. */
size_t wq_processing(const struct wq *q);

/* Seconds the longest-running key has been processed at time now, and the sum over all of them
 * (workqueue_longest_running_processor_seconds, workqueue_unfinished_work_seconds). */
void wq_running_times(const struct wq *q, double now, double *longest, double *total);

/* Stops accepting adds and drops pending delays. Cannot fail. */
void wq_shutdown(struct wq *q);

/* 1 after shutdown once nothing is queued or being processed, else 0. */
int wq_drained(const struct wq *q);

/* The queue's counters; valid as long as the queue. */
const struct wq_metrics *wq_metrics(const struct wq *q);

#endif
