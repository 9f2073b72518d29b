/* The session reconciler's metrics: telo_sessions{phase}, telo_session_*, telo_image_*. */
#include "session/session_metrics.h"

#include "cache/store.h"
#include "controller/metrics.h"
#include "session/builds.h"
#include "session/buildslots.h"
#include "session/informers.h"
#include "session/phase.h"
#include "util/jget.h"
#include "util/strmap.h"
#include "util/timefmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* telo_session_startup_seconds: 0.25 s doubling to 512 s. */
#define STARTUP_BUCKET_START 0.25
#define STARTUP_BUCKETS      12

/* telo_image_build_seconds: 5 s doubling to ~85 min. */
#define BUILD_BUCKET_START 5.0
#define BUILD_BUCKETS      11

/* Builds counted in telo_image_builds_total, remembered by Job uid so a Job followed by many
 * sessions counts once; forgotten wholesale beyond this many (Jobs go with their TTL anyway). */
#define COUNTED_JOBS_MAX 4096

static const char *const build_results[SESSION_METRICS_BUILD_RESULTS] = {"succeeded", "failed",
                                                                         "timed_out"};

static void forget_counted(struct strmap *counted)
{
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (counted && strmap_next(counted, &it, &key, &value)) {
        strmap_remove(counted, key);
        free(value);
    }
}

int session_metrics_init(struct session_metrics *m, const struct session_config *cfg)
{
    memset(m, 0, sizeof(*m));
    m->cfg = cfg;
    if (!(m->counted_jobs = strmap_new()))
        return -1;
    histogram_init_exponential(&m->stats.startup_seconds, STARTUP_BUCKET_START, 2, STARTUP_BUCKETS);
    histogram_init_exponential(&m->build_seconds, BUILD_BUCKET_START, 2, BUILD_BUCKETS);
    return 0;
}

void session_metrics_release(struct session_metrics *m)
{
    forget_counted(m->counted_jobs);
    strmap_free(m->counted_jobs);
    m->counted_jobs = NULL;
}

/* telo_session_failures_total{reason}: one more session that turned Failed for reason. */
void session_metrics_failure(struct session_metrics *r, const char *reason)
{
    r->stats.failures++;
    const char *values[] = {reason && *reason ? reason : "Unknown"};
    /* NULL (metrics not registered, or the series bound reached) is a no-op. */
    metrics_counter_add(r->failures ? metrics_series(r->failures, values, NULL) : NULL, 1);
}

/* telo_image_builds_total{result} and telo_image_build_seconds: once per finished Job. */
void session_metrics_build(struct session_metrics *r, const struct json_object *job,
                           const char *result, double now)
{
    const char *uid = jget_string(jget((struct json_object *)job, "metadata"), "uid");
    if (!uid || strmap_get(r->counted_jobs, uid))
        return;
    if (strmap_len(r->counted_jobs) >= COUNTED_JOBS_MAX)
        forget_counted(r->counted_jobs);
    char *copy = strdup(uid);
    if (!copy || strmap_put(r->counted_jobs, copy, copy) < 0) {
        free(copy);
        return;
    }
    for (size_t i = 0; i < SESSION_METRICS_BUILD_RESULTS; i++) {
        if (strcmp(build_results[i], result) == 0)
            r->builds_total[i]++;
    }
    struct json_object *status = jget((struct json_object *)job, "status");
    double start = timefmt_parse(
        jget_string(jget((struct json_object *)job, "metadata"), "creationTimestamp"));
    double end = timefmt_parse(jget_string(status, "completionTime"));
    struct json_object *conds = jget_array(status, "conditions");
    for (size_t i = 0; end < 0 && conds && i < json_object_array_length(conds); i++) {
        struct json_object *c = json_object_array_get_idx(conds, i);
        const char *type = jget_string(c, "type");
        if (type && strcmp(type, "Failed") == 0)
            end = timefmt_parse(jget_string(c, "lastTransitionTime"));
    }
    if (start >= 0)
        histogram_observe(&r->build_seconds, (end >= 0 ? end : now) - start);
}

unsigned char session_metrics_phase_tag(struct json_object *session)
{
    return (unsigned char)session_phase_of(jget(session, "status"));
}

struct phase_count {
    const char *phase;
    unsigned long n;
};

struct phase_tally {
    struct phase_count counts[8];
    size_t n;
    const struct session_config *cfg;
};

static void tally(void *ud, const struct cache_object *obj)
{
    struct phase_tally *t = ud;
    const char *slash = strchr(obj->key, '/');
    if (!slash || !session_informers_watched(t->cfg, obj->key, (size_t)(slash - obj->key)))
        return;
    /* A session without a phase this operator writes counts as Pending. The names are the
     * table's own strings, so they compare by address below. */
    enum session_phase p = (enum session_phase)obj->tag;
    const char *known = session_phase_name(p == SESSION_PHASE_UNKNOWN ? SESSION_PHASE_PENDING : p);
    for (size_t i = 0; i < t->n; i++) {
        if (t->counts[i].phase == known) {
            t->counts[i].n++;
            return;
        }
    }
    if (t->n < 8)
        t->counts[t->n++] = (struct phase_count){known, 1};
}

void session_metrics_count_phases(const struct session_metrics *r,
                                  void (*fn)(void *ud, const char *phase, unsigned long n),
                                  void *ud)
{
    struct phase_tally t = {.n = 0, .cfg = r->cfg};
    if (r->sessions)
        cache_store_each(r->sessions, tally, &t);
    for (size_t i = 0; i < t.n; i++)
        fn(ud, t.counts[i].phase, t.counts[i].n);
}

struct phase_gauge {
    struct metrics_family *fam;
    int seen[8];
};

static void set_phase(void *ud, const char *phase, unsigned long n)
{
    struct phase_gauge *g = ud;
    const char *v[] = {phase};
    metrics_gauge_set(metrics_series(g->fam, v, NULL), (double)n);
    enum session_phase p = session_phase_parse(phase);
    if (p != SESSION_PHASE_UNKNOWN)
        g->seen[p - SESSION_PHASE_FIRST] = 1;
}

static void collect(struct metrics_registry *reg, void *user)
{
    (void)reg;
    struct session_metrics *r = user;
    struct phase_gauge g = {.fam = r->phases};
    session_metrics_count_phases(r, set_phase, &g);
    /* Phases nobody is in read 0, not their last value. */
    for (enum session_phase p = SESSION_PHASE_FIRST; p <= SESSION_PHASE_LAST; p++) {
        if (!g.seen[p - SESSION_PHASE_FIRST]) {
            const char *v[] = {session_phase_name(p)};
            metrics_gauge_set(metrics_series(r->phases, v, NULL), 0);
        }
    }
    metrics_counter_set(metrics_series(r->starts, NULL, NULL), (double)r->stats.starts);
    metrics_histogram_load(metrics_series(r->startup, NULL, NULL), &r->stats.startup_seconds);
    for (size_t i = 0; i < SESSION_METRICS_BUILD_RESULTS; i++) {
        const char *v[] = {build_results[i]};
        metrics_counter_set(metrics_series(r->builds_fam, v, NULL), (double)r->builds_total[i]);
    }
    metrics_counter_set(metrics_series(r->hits_fam, NULL, NULL), (double)r->cache_hits);
    metrics_histogram_load(metrics_series(r->build_hist, NULL, NULL), &r->build_seconds);
    size_t running = 0, waiting = 0;
    if (r->builds)
        session_builds_downloads(r->builds, &running, &waiting);
    const char *run[] = {"running"}, *wait[] = {"waiting"};
    metrics_gauge_set(metrics_series(r->downloads_fam, run, NULL), (double)running);
    metrics_gauge_set(metrics_series(r->downloads_fam, wait, NULL), (double)waiting);
    metrics_gauge_set(metrics_series(r->slot_waiters_fam, NULL, NULL),
                      r->build_slots ? (double)session_build_slots_waiting(r->build_slots) : 0);
}

/* A histogram family whose buckets are those of h (copied into buckets, n of them). */
static struct metrics_desc histogram_desc(const char *name, const char *help,
                                          const struct histogram *h, double *buckets, int n)
{
    for (int i = 0; i < n; i++)
        buckets[i] = h->bounds[i];
    return (struct metrics_desc){.type = METRICS_HISTOGRAM,
                                 .name = name,
                                 .help = help,
                                 .buckets = buckets,
                                 .nbuckets = (size_t)n};
}

int session_metrics_register(struct session_metrics *r, struct metrics_registry *reg,
                             struct telo_err *err)
{
    static const char *const phase_label[] = {"phase", NULL};
    static const char *const reason_label[] = {"reason", NULL};
    double buckets[STARTUP_BUCKETS];
    struct metrics_desc phases = {.type = METRICS_GAUGE,
                                  .name = "telo_sessions",
                                  .help = "TeloSessions by phase",
                                  .labels = phase_label};
    struct metrics_desc starts = {.type = METRICS_COUNTER,
                                  .name = "telo_session_starts_total",
                                  .help = "Session pods created"};
    struct metrics_desc failures = {.type = METRICS_COUNTER,
                                    .name = "telo_session_failures_total",
                                    .help = "Sessions that ended Failed, by status.reason",
                                    .labels = reason_label};
    struct metrics_desc startup = histogram_desc(
        "telo_session_startup_seconds", "Seconds from a TeloSession's creation to Running",
        &r->stats.startup_seconds, buckets, STARTUP_BUCKETS);
    static const char *const result_label[] = {"result", NULL};
    double build_buckets[BUILD_BUCKETS];
    struct metrics_desc builds = {.type = METRICS_COUNTER,
                                  .name = "telo_image_builds_total",
                                  .help = "Image build Jobs that finished, by result",
                                  .labels = result_label};
    struct metrics_desc hits = {.type = METRICS_COUNTER,
                                .name = "telo_image_cache_hits_total",
                                .help = "Sessions that found their image in the registry"};
    static const char *const state_label[] = {"state", NULL};
    struct metrics_desc downloads = {
        .type = METRICS_GAUGE,
        .name = "telo_bundle_downloads",
        .help =
            "URL bundle downloads running and waiting for a slot (bundle.maxConcurrentDownloads)",
        .labels = state_label};
    struct metrics_desc slot_waiters = {
        .type = METRICS_GAUGE,
        .name = "telo_image_build_waiting",
        .help = "Sessions waiting for a build slot (build.maxConcurrent, "
                "build.maxConcurrentPerNamespace)"};
    struct metrics_desc build_hist =
        histogram_desc("telo_image_build_seconds", "Seconds from a build Job's creation to its end",
                       &r->build_seconds, build_buckets, BUILD_BUCKETS);
    if (!(r->builds_fam = metrics_register(reg, &builds, err)) ||
        !(r->hits_fam = metrics_register(reg, &hits, err)) ||
        !(r->build_hist = metrics_register(reg, &build_hist, err)) ||
        !(r->downloads_fam = metrics_register(reg, &downloads, err)) ||
        !(r->slot_waiters_fam = metrics_register(reg, &slot_waiters, err)))
        return -err->code;
    if (!(r->phases = metrics_register(reg, &phases, err)) ||
        !(r->starts = metrics_register(reg, &starts, err)) ||
        !(r->failures = metrics_register(reg, &failures, err)) ||
        !(r->startup = metrics_register(reg, &startup, err)))
        return -err->code;
    return metrics_add_collector(reg, collect, r, err);
}
