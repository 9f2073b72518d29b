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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct started {
    char job[320]; /* the map's key */
    char ns[64];
    double at;
};

struct session_build_slots {
    struct strmap *started; /* "ns/name" -> struct started */
};

struct session_build_slots *session_build_slots_new(void)
{
    struct session_build_slots *t = calloc(1, sizeof(*t));
    if (t && !(t->started = strmap_new())) {
        free(t);
        t = NULL;
    }
    return t;
}

void session_build_slots_free(struct session_build_slots *t)
{
    if (!t)
        return;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(t->started, &it, &key, &value))
        free(value);
    strmap_free(t->started);
    free(t);
}

/* Drops the creates never seen for longer than an expectation lives: deleted at once, or never
 * made. Run on every create too, so the table stays bounded by the creates of that span even
 * when no limit is set and nothing counts. */
static void sweep(struct session_build_slots *t, double now)
{
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(t->started, &it, &key, &value)) {
        if (now - ((struct started *)value)->at > SESSION_EXPECT_TTL_S)
            free(strmap_remove(t->started, key));
    }
}

int session_build_slots_started(struct session_build_slots *t, const char *job,
                                const char *session_ns, double now)
{
    sweep(t, now);
    struct started *s = calloc(1, sizeof(*s));
    if (!s)
        return -TELO_ENOMEM;
    snprintf(s->job, sizeof(s->job), "%s", job);
    snprintf(s->ns, sizeof(s->ns), "%s", session_ns);
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

struct count {
    const char *ns;
    long total, in_ns;
    struct strmap *started;
};

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
        c->total++;
        if (requested_from(jget_string(jget(meta, "annotations"), BUILD_ANNOTATION_BY), c->ns))
            c->in_ns++;
    }
    json_object_put(job);
}

int session_build_slots_free_for(struct session_build_slots *t, const struct session_config *cfg,
                                 const struct cache_store *jobs, const char *ns, double now,
                                 char *msg, size_t len)
{
    long max = cfg->build_max_concurrent, max_ns = cfg->build_max_concurrent_per_namespace;
    if (max == 0 && max_ns == 0)
        return 1;
    struct count c = {.ns = ns, .started = t->started};
    if (jobs)
        cache_store_each(jobs, count_cached, &c);
    sweep(t, now);
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(t->started, &it, &key, &value)) {
        const struct started *s = value;
        c.total++;
        if (strcmp(s->ns, ns) == 0)
            c.in_ns++;
    }
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
    return 1;
}
