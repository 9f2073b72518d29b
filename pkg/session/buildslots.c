/* Build slots: the build Jobs that run now, counted from the Job cache and this process's
 * creates the cache does not show yet. */
#include "session/buildslots.h"

#include "cache/store.h"
#include "imagebuild/job.h"
#include "session/expect.h"
#include "util/err.h"
#include "util/jget.h"
#include "util/str.h"
#include "util/strmap.h"
#include "workqueue/turns.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct started {
    char job[320]; /* the map's key */
    char session[320];
    char ns[64];
    double at;
};

/* A session told to wait for a slot: its place in line. */
struct waiter {
    char session[320]; /* the map's key */
    char ns[64];
    double since; /* its first wait: the longest waiting go first */
    double seen;  /* its last ask: a waiter that stops asking leaves the line */
};

struct session_build_slots {
    struct strmap *started; /* "ns/name" -> struct started */
    struct strmap *waiting; /* session "ns/name" -> struct waiter */
    /* The running Jobs of the cache, counted again only once it changed: every waiting
     * session's reconcile asks, and parsing every cached Job for each was the cost. */
    const struct cache_store *cached_of;
    unsigned long long cached_changes;
    long cached_total;
    struct strmap *cached_by_ns; /* namespace -> struct ns_count; NULL: not counted */
    unsigned long counts;        /* of the cached Jobs (session_build_slots_counts) */
};

static void free_values(struct strmap *m)
{
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (m && strmap_next(m, &it, &key, &value))
        free(value);
    strmap_free(m);
}

struct session_build_slots *session_build_slots_new(void)
{
    struct session_build_slots *t = calloc(1, sizeof(*t));
    if (t && (!(t->started = strmap_new()) || !(t->waiting = strmap_new()))) {
        strmap_free(t->started);
        free(t);
        t = NULL;
    }
    return t;
}

void session_build_slots_free(struct session_build_slots *t)
{
    if (!t)
        return;
    free_values(t->started);
    free_values(t->waiting);
    free_values(t->cached_by_ns);
    free(t);
}

/* Drops the creates never seen for longer than an expectation lives (deleted at once, or never
 * made), and the waiters that stopped asking. Run on every create too, so the tables stay
 * bounded by what that span saw even when no limit is set and nothing counts. */
static void sweep(struct session_build_slots *t, double now)
{
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(t->started, &it, &key, &value)) {
        if (now - ((struct started *)value)->at > SESSION_EXPECT_TTL_S)
            free(strmap_remove(t->started, key));
    }
    it = (struct strmap_iter){0};
    while (strmap_next(t->waiting, &it, &key, &value)) {
        if (now - ((struct waiter *)value)->seen > SESSION_BUILD_SLOTS_WAITER_TTL_S)
            free(strmap_remove(t->waiting, key));
    }
}

void session_build_slots_forget(struct session_build_slots *t, const char *session)
{
    free(strmap_remove(t->waiting, session));
}

void session_build_slots_heads(const struct session_build_slots *t,
                               void (*emit)(void *ctx, const char *session), void *ctx)
{
    /* Each namespace's first in line, kept to the longest waiting SESSION_BUILD_SLOTS_HEADS
     * namespaces as the line is read (no allocation: this runs on every Job event). */
    const struct waiter *heads[SESSION_BUILD_SLOTS_HEADS];
    size_t n = 0;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(t->waiting, &it, &key, &value)) {
        const struct waiter *w = value;
        size_t i = 0, youngest = 0;
        while (i < n && strcmp(heads[i]->ns, w->ns) != 0)
            i++;
        if (i < n) {
            if (w->since < heads[i]->since)
                heads[i] = w;
            continue;
        }
        if (n < SESSION_BUILD_SLOTS_HEADS) {
            heads[n++] = w;
            continue;
        }
        for (i = 1; i < n; i++) {
            if (heads[i]->since > heads[youngest]->since)
                youngest = i;
        }
        if (w->since < heads[youngest]->since)
            heads[youngest] = w;
    }
    for (size_t i = 0; i < n; i++)
        emit(ctx, heads[i]->session);
}

unsigned long session_build_slots_counts(const struct session_build_slots *t)
{
    return t->counts;
}

size_t session_build_slots_waiting(const struct session_build_slots *t)
{
    return strmap_len(t->waiting);
}

int session_build_slots_started(struct session_build_slots *t, const char *job, const char *session,
                                double now)
{
    sweep(t, now);
    session_build_slots_forget(t, session);
    struct started *s = calloc(1, sizeof(*s));
    if (!s)
        return -TELO_ENOMEM;
    snprintf(s->job, sizeof(s->job), "%s", job);
    snprintf(s->session, sizeof(s->session), "%s", session);
    wq_tenant_of_key(session, s->ns, sizeof(s->ns));
    s->at = now;
    free(strmap_remove(t->started, s->job));
    if (strmap_put(t->started, s->job, s) < 0) {
        free(s);
        return -TELO_ENOMEM;
    }
    return 0;
}

void session_build_slots_refused(struct session_build_slots *t, const char *job)
{
    free(strmap_remove(t->started, job));
}

int session_build_slots_job_runs(const struct json_object *job)
{
    static const char *const ended[] = {"Complete", "Failed", "SuccessCriteriaMet",
                                        "FailureTarget"};
    struct json_object *conds = jget_array(jget(job, "status"), "conditions");
    size_t n = conds ? json_object_array_length(conds) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *c = json_object_array_get_idx(conds, i);
        if (!jget_string_is(c, "status", "True"))
            continue;
        for (size_t k = 0; k < sizeof(ended) / sizeof(ended[0]); k++) {
            if (jget_string_is(c, "type", ended[k]))
                return 0;
        }
    }
    return 1;
}

/* Builds running for one namespace. */
struct ns_count {
    long n;
    char ns[];
};

/* The running builds: the cached Jobs' (t->cached_*) and this process's creates the cache does
 * not show yet (started). Per namespace for the waiters' order, and for the caps, which must be
 * exact: out of memory nothing is counted and the session waits for its recheck. */
struct count {
    const char *ns;
    long total, in_ns;
    const struct strmap *cached_by_ns;
    struct strmap *started_by_ns; /* namespace -> struct ns_count */
};

/* One more build of namespace ns in by_ns. Returns 0, or -1 out of memory. */
static int count_in(struct strmap *by_ns, const char *ns)
{
    struct ns_count *nc = strmap_get_or_add(by_ns, ns, sizeof(*nc), offsetof(struct ns_count, ns));
    if (!nc)
        return -1;
    nc->n++;
    return 0;
}

static long count_of(const struct strmap *by_ns, const char *ns)
{
    const struct ns_count *nc = strmap_get(by_ns, ns);
    return nc ? nc->n : 0;
}

static long running_in(const struct count *c, const char *ns)
{
    return count_of(c->cached_by_ns, ns) + count_of(c->started_by_ns, ns);
}

struct cached_count {
    long total;
    struct strmap *by_ns;
    int failed; /* out of memory: the count is incomplete */
};

static void count_cached(void *ctx, const struct cache_object *obj)
{
    struct cached_count *cc = ctx;
    struct json_object *job = cache_object_parse(obj);
    if (!job) {
        cc->failed = 1;
        return;
    }
    if (session_build_slots_job_runs(job)) {
        const char *by =
            jget_string(jget(jget(job, "metadata"), "annotations"), BUILD_ANNOTATION_BY);
        cc->total++;
        if (by) {
            char ns[64];
            wq_tenant_of_key(by, ns, sizeof(ns));
            if (count_in(cc->by_ns, ns) != 0)
                cc->failed = 1;
        }
    }
    json_object_put(job);
}

/* Counts the cached Jobs again if jobs changed since they were last counted. Returns 0, or -1
 * out of memory (nothing counted). */
static int count_cached_jobs(struct session_build_slots *t, const struct cache_store *jobs)
{
    if (t->cached_by_ns && t->cached_of == jobs && t->cached_changes == cache_store_changes(jobs))
        return 0;
    free_values(t->cached_by_ns);
    t->cached_by_ns = NULL;
    struct cached_count cc = {.by_ns = strmap_new()};
    if (!cc.by_ns)
        return -1;
    t->counts++;
    cache_store_each(jobs, count_cached, &cc);
    if (cc.failed) {
        free_values(cc.by_ns);
        return -1;
    }
    t->cached_of = jobs;
    t->cached_changes = cache_store_changes(jobs);
    t->cached_total = cc.total;
    t->cached_by_ns = cc.by_ns;
    return 0;
}

/* Whether waiter w goes before a session of namespace ns waiting since since: namespaces with
 * fewer builds running first, then the longest waiting. */
static int goes_before(const struct count *c, const struct waiter *w, const char *ns, double since)
{
    long theirs = running_in(c, w->ns), mine = running_in(c, ns);
    if (theirs != mine)
        return theirs < mine;
    return w->since < since;
}

/* Notes that session waits (or, granted, is about to start): its place in line from its first
 * ask. Out of memory it is not in line: it is then served as if it had just come. */
static const struct waiter *in_line(struct session_build_slots *t, const char *session,
                                    const char *ns, double now)
{
    struct waiter *w = strmap_get(t->waiting, session);
    if (!w) {
        if (!(w = calloc(1, sizeof(*w))))
            return NULL;
        snprintf(w->session, sizeof(w->session), "%s", session);
        snprintf(w->ns, sizeof(w->ns), "%s", ns);
        w->since = now;
        if (strmap_put(t->waiting, w->session, w) < 0) {
            free(w);
            return NULL;
        }
    }
    w->seen = now;
    return w;
}

int session_build_slots_free_for(struct session_build_slots *t, const struct session_config *cfg,
                                 const struct cache_store *jobs, const char *ns,
                                 const char *session, double now, char *msg, size_t len)
{
    long max = cfg->build_max_concurrent, max_ns = cfg->build_max_concurrent_per_namespace;
    if (max == 0 && max_ns == 0)
        return 1;
    if (jobs && count_cached_jobs(t, jobs) != 0)
        return 0; /* out of memory: looked at again at the recheck */
    struct count c = {.ns = ns, .started_by_ns = strmap_new()};
    if (!c.started_by_ns)
        return 0;
    if (jobs) {
        c.total = t->cached_total;
        c.cached_by_ns = t->cached_by_ns;
        c.in_ns = count_of(c.cached_by_ns, ns);
    }
    sweep(t, now);
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    int creating = 0;
    while (strmap_next(t->started, &it, &key, &value)) {
        const struct started *s = value;
        /* The cache has it now: its copy counts, finished or not. */
        if (jobs && cache_store_get(jobs, key)) {
            free(strmap_remove(t->started, key));
            continue;
        }
        c.total++;
        if (strcmp(s->ns, ns) == 0)
            c.in_ns++;
        if (count_in(c.started_by_ns, s->ns) != 0) {
            free_values(c.started_by_ns);
            return 0;
        }
        creating |= strcmp(s->session, session) == 0;
    }
    if (creating) {
        /* Its own Job's create is out and the cache does not show it yet: the session holds a
         * slot already (counted above), and no place in line. */
        free_values(c.started_by_ns);
        session_build_slots_forget(t, session);
        return 1;
    }
    const struct waiter *me = in_line(t, session, ns, now);
    double since = me ? me->since : now;
    /* Those in line before this session who could take the slot it wants. */
    long ahead = 0, ahead_ns = 0;
    it = (struct strmap_iter){0};
    while (strmap_next(t->waiting, &it, &key, &value)) {
        const struct waiter *w = value;
        if (w == me || !goes_before(&c, w, ns, since))
            continue;
        if (strcmp(w->ns, ns) == 0)
            ahead_ns++;
        if (max_ns == 0 || running_in(&c, w->ns) < max_ns)
            ahead++;
    }
    free_values(c.started_by_ns);
    if (max_ns > 0 && c.in_ns >= max_ns) {
        snprintf(msg, len,
                 "Waiting for a build slot: %ld build%s of namespace %s run%s, at most %ld "
                 "(build.maxConcurrentPerNamespace)",
                 c.in_ns, c.in_ns == 1 ? "" : "s", ns, c.in_ns == 1 ? "s" : "", max_ns);
        return 0;
    }
    if (max > 0 && c.total >= max) {
        snprintf(msg, len,
                 "Waiting for a build slot: %ld build%s run%s, at most %ld (build.maxConcurrent)",
                 c.total, c.total == 1 ? "" : "s", c.total == 1 ? "s" : "", max);
        return 0;
    }
    if ((max_ns > 0 && ahead_ns >= max_ns - c.in_ns) || (max > 0 && ahead >= max - c.total)) {
        long n = max > 0 && ahead >= max - c.total ? ahead : ahead_ns;
        snprintf(msg, len,
                 "Waiting for a build slot: %ld session%s ahead (namespaces with fewer builds "
                 "running first, then the longest waiting)",
                 n, n == 1 ? "" : "s");
        return 0;
    }
    return 1;
}
