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

/* Whether requested_by ("ns/name") is a session of namespace ns. */
static int requested_from(const char *requested_by, const char *ns)
{
    size_t n = strlen(ns);
    return requested_by && strncmp(requested_by, ns, n) == 0 && requested_by[n] == '/';
}

/* Builds running for one namespace. */
struct ns_count {
    long n;
    char ns[];
};

/* The caps are checked against total and in_ns, counted apart from by_ns: out of memory by_ns
 * may miss a namespace, which may only make the order of the line less fair, while a cap must
 * stay exact. */
struct count {
    const char *ns;
    long total, in_ns;
    struct strmap *started;
    struct strmap *by_ns; /* namespace -> struct ns_count, for the waiters' order */
};

/* One more build of namespace ns. Out of memory it is not counted there: the order of waiters
 * is then less fair. */
static void count_in(struct count *c, const char *ns)
{
    struct ns_count *nc =
        strmap_get_or_add(c->by_ns, ns, sizeof(*nc), offsetof(struct ns_count, ns));
    if (nc)
        nc->n++;
}

static long running_in(const struct count *c, const char *ns)
{
    const struct ns_count *nc = strmap_get(c->by_ns, ns);
    return nc ? nc->n : 0;
}

static void count_cached(void *ctx, const struct cache_object *obj)
{
    struct count *c = ctx;
    struct json_object *job = cache_object_parse(obj);
    if (!job)
        return; /* out of memory: this one is not counted */
    struct json_object *meta = jget(job, "metadata");
    char key[320];
    snprintf(key, sizeof(key), "%s/%s", util_str_or_empty(jget_string(meta, "namespace")),
             util_str_or_empty(jget_string(meta, "name")));
    /* The cache has it now: its copy counts, finished or not. */
    free(strmap_remove(c->started, key));
    if (session_build_slots_job_runs(job)) {
        const char *by = jget_string(jget(meta, "annotations"), BUILD_ANNOTATION_BY);
        c->total++;
        if (requested_from(by, c->ns))
            c->in_ns++;
        if (by) {
            char ns[64];
            wq_tenant_of_key(by, ns, sizeof(ns));
            count_in(c, ns);
        }
    }
    json_object_put(job);
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
    struct count c = {.ns = ns, .started = t->started, .by_ns = strmap_new()};
    if (!c.by_ns)
        return 0; /* out of memory: looked at again at the recheck */
    if (jobs)
        cache_store_each(jobs, count_cached, &c);
    sweep(t, now);
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    int creating = 0;
    while (strmap_next(t->started, &it, &key, &value)) {
        const struct started *s = value;
        c.total++;
        if (strcmp(s->ns, ns) == 0)
            c.in_ns++;
        count_in(&c, s->ns);
        creating |= strcmp(s->session, session) == 0;
    }
    if (creating) {
        /* Its own Job's create is out and the cache does not show it yet: the session holds a
         * slot already (counted above), and no place in line. */
        free_values(c.by_ns);
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
    free_values(c.by_ns);
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
