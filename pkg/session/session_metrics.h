/* The session reconciler's metrics: telo_sessions{phase}, telo_session_*, telo_image_*. */
#ifndef TELO_SESSION_METRICS_H
#define TELO_SESSION_METRICS_H

#include "session/config.h"
#include "session/reconciler.h"
#include "util/err.h"
#include "util/histogram.h"

#include <json.h>

struct cache_store;
struct metrics_family;
struct session_builds;
struct session_build_slots;
struct metrics_registry;
struct strmap;

#define SESSION_METRICS_BUILD_RESULTS 3 /* succeeded, failed, timed_out */

struct session_metrics {
    struct session_stats stats;
    struct metrics_family *phases, *starts, *failures, *startup;
    struct strmap *counted_jobs; /* Job uid -> its own key string */
    unsigned long long builds_total[SESSION_METRICS_BUILD_RESULTS], cache_hits;
    struct histogram build_seconds;
    struct metrics_family *builds_fam, *hits_fam, *build_hist, *downloads_fam, *slot_waiters_fam;
    /* The sessions the telo_sessions gauge counts (set once the informer exists), and the
     * config that says which namespaces are watched. Borrowed. */
    const struct cache_store *sessions;
    const struct session_config *cfg;
    /* The URL bundle downloads telo_bundle_downloads counts, when builds are on. Borrowed. */
    const struct session_builds *builds;
    const struct session_build_slots *build_slots; /* telo_image_build_waiting; borrowed */
};

/* Initialises m for cfg (borrowed). Returns 0, or -1 when out of memory. */
int session_metrics_init(struct session_metrics *m, const struct session_config *cfg);

/* Frees what m owns. Accepts a zeroed m. */
void session_metrics_release(struct session_metrics *m);

/* telo_session_failures_total{reason}: one more session that turned Failed for reason. */
void session_metrics_failure(struct session_metrics *m, const char *reason);

/* telo_image_builds_total{result} and telo_image_build_seconds: once per finished Job (by its
 * uid), result one of "succeeded", "failed", "timed_out" (others are not counted). */
void session_metrics_build(struct session_metrics *m, const struct json_object *job,
                           const char *result, double now);

/* The session informer's tag (cache_store_set_tag): the enum session_phase of a TeloSession's
 * status, which session_metrics_count_phases counts. */
unsigned char session_metrics_phase_tag(struct json_object *session);

/* Sessions by phase ("Running" -> 3) in the watched namespaces, from each cached session's tag:
 * calls fn per phase. */
void session_metrics_count_phases(const struct session_metrics *m,
                                  void (*fn)(void *ud, const char *phase, unsigned long n),
                                  void *ud);

/* Registers the families on reg, mirrored from m at each scrape (m must outlive reg's
 * renders). Returns 0 or a negative code with err filled. */
int session_metrics_register(struct session_metrics *m, struct metrics_registry *reg,
                             struct telo_err *err);

#endif
