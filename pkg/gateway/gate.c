/* The admission gate in front of gw_auth: a short cache of verdicts keyed by (session, token
 * hash), one lookup in flight per key (identical requests meanwhile wait for it), and token
 * buckets, overall and per source address, on the lookups that reach the API server, so a flood
 * of requests costs the API server at most a bounded rate. */
#include "gateway/gate.h"

#include "gateway/limits.h"
#include "session/phase.h"
#include "util/strmap.h"

#include <ev.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_MAX 2048
#define KEY_MAX   (2 * SHA256_DIGEST_LENGTH + 2 * 254 + 3)
/* A source is suspect for SUSPECT_S after one of its lookups failed (401, 403, 404), and while
 * it has FREE_IN_FLIGHT lookups unanswered (an answer not yet in is no success yet). A suspect
 * source takes from the overall bucket only what lies above a reserve of SUSPECT_RESERVE of its
 * burst: sources sending garbage tokens (a random token never hits the cache) can empty the
 * bucket down to the reserve, never below, so everyone else always finds it there and gets the
 * refill first while it is under it. A suspect source on a quiet gateway (a person who mistyped
 * a token) still gets the whole rate, since nobody else drains the bucket. */
#define SUSPECT_S       10.0
#define SUSPECT_RESERVE 0.75
#define FREE_IN_FLIGHT  4

/* A verdict with its own copies of the strings. */
struct verdict {
    enum gw_verdict verdict;
    double retry_after;
    char reason[200];
    char subject[128];
    char phase[32];
    char pod[254];
    char pod_ip[64];
    char uid[64];
    int inspect;
    double ready_since;
    int exit_code;
};

struct cached {
    char key[KEY_MAX];
    double expires;
    struct verdict v;
};

struct lookup {
    struct gw_gate *g;
    char key[KEY_MAX];
    char source[64]; /* who started it: its in-flight count, and marked suspect on a failure */
    struct gw_admission *adm; /* the backend's, NULL once answered */
    struct gw_gate_req *waiters;
};

struct gw_gate_req {
    struct gw_gate *g;
    gw_admit_fn *cb;
    void *ud;
    struct lookup *lookup; /* waiting for it; NULL when on the ready list */
    struct verdict *ready; /* the verdict to deliver from the ready timer */
    struct gw_gate_req *prev, *next;
};

struct gw_gate {
    struct ev_loop *loop;
    struct gw_gate_backend be;
    struct gw_gate_opts opts;
    struct strmap *cache;    /* key -> struct cached */
    struct strmap *inflight; /* key -> struct lookup */
    struct gw_bucket bucket;
    struct gw_sources *sources;
    /* Per source: lookups in flight (the count) and a recent failure (its one-token bucket,
     * empty for SUSPECT_S after a failure). */
    struct gw_sources *suspects;
    struct gw_gate_req *ready; /* answered without a lookup, delivered on the next loop turn */
    ev_timer ready_timer;
    struct gw_gate_metrics m;
};

static void list_add(struct gw_gate_req **head, struct gw_gate_req *r)
{
    r->prev = NULL;
    r->next = *head;
    if (*head != NULL)
        (*head)->prev = r;
    *head = r;
}

static void list_remove(struct gw_gate_req **head, struct gw_gate_req *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        *head = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

static void deliver(struct gw_gate_req *r, const struct verdict *v)
{
    struct gw_admitted a = {.verdict = v->verdict,
                            .reason = v->reason,
                            .subject = v->subject,
                            .phase = v->phase,
                            .pod = v->pod,
                            .pod_ip = v->pod_ip,
                            .inspect = v->inspect,
                            .uid = v->uid,
                            .ready_since = v->ready_since,
                            .exit_code = v->exit_code,
                            .retry_after = v->retry_after};
    gw_admit_fn *cb = r->cb;
    void *ud = r->ud;
    struct verdict *owned = r->ready; /* v may be it: freed after the call */
    free(r);
    cb(&a, ud);
    free(owned);
}

static void ready_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct gw_gate *g = w->data;
    /* One at a time from the head: a callback may cancel others on the list. */
    while (g->ready != NULL) {
        struct gw_gate_req *r = g->ready;
        list_remove(&g->ready, r); // NOLINT(clang-analyzer-unix.Malloc): deliver freed only the
                                   // head it was given, unlinked
        deliver(r, r->ready);
    }
}

/* Puts r on the ready list with a copy of v. Returns 0 or -1 (out of memory). */
static int make_ready(struct gw_gate_req *r, const struct verdict *v)
{
    r->ready = malloc(sizeof(*r->ready));
    if (r->ready == NULL)
        return -1;
    *r->ready = *v;
    list_add(&r->g->ready, r);
    if (!ev_is_active(&r->g->ready_timer)) {
        ev_timer_set(&r->g->ready_timer, 0., 0.);
        ev_timer_start(r->g->loop, &r->g->ready_timer);
    }
    return 0;
}

static double now(const struct gw_gate *g)
{
    return ev_now(g->loop);
}

static void cache_clear(struct gw_gate *g, int expired_only)
{
    struct strmap_iter it = {0};
    const char *key;
    void *v;
    double t = now(g);
    while (strmap_next(g->cache, &it, &key, &v)) {
        if (!expired_only || ((struct cached *)v)->expires < t) {
            strmap_remove(g->cache, key);
            free(v);
        }
    }
}

static int cacheable(const struct verdict *v)
{
    switch (v->verdict) {
    case GW_UNAUTHENTICATED:
    case GW_FORBIDDEN:
    case GW_NOT_FOUND:
        return 1;
    case GW_ALLOW:
        /* A session still starting changes within the TTL (its pod, its phase): asked afresh. */
        return session_phase_parse(v->phase) == SESSION_PHASE_RUNNING ||
               session_phase_is_terminal(session_phase_parse(v->phase));
    default:
        return 0;
    }
}

static void remember(struct gw_gate *g, const char *key, const struct verdict *v)
{
    if (g->opts.cache_s <= 0 || !cacheable(v))
        return;
    if (strmap_len(g->cache) >= CACHE_MAX)
        cache_clear(g, 1);
    if (strmap_len(g->cache) >= CACHE_MAX)
        cache_clear(g, 0);
    struct cached *c = malloc(sizeof(*c));
    if (c == NULL)
        return;
    snprintf(c->key, sizeof(c->key), "%s", key);
    c->expires = now(g) + g->opts.cache_s;
    c->v = *v;
    free(strmap_remove(g->cache, c->key));
    if (strmap_put(g->cache, c->key, c) != 0)
        free(c);
}

static void lookup_done(const struct gw_admitted *a, void *ud)
{
    struct lookup *lk = ud;
    struct gw_gate *g = lk->g;
    lk->adm = NULL;
    struct verdict v = {.verdict = a->verdict,
                        .retry_after = a->retry_after,
                        .inspect = a->inspect,
                        .ready_since = a->ready_since,
                        .exit_code = a->exit_code};
    snprintf(v.reason, sizeof(v.reason), "%s", a->reason ? a->reason : "");
    snprintf(v.subject, sizeof(v.subject), "%s", a->subject ? a->subject : "");
    snprintf(v.phase, sizeof(v.phase), "%s", a->phase ? a->phase : "");
    snprintf(v.pod, sizeof(v.pod), "%s", a->pod ? a->pod : "");
    snprintf(v.pod_ip, sizeof(v.pod_ip), "%s", a->pod_ip ? a->pod_ip : "");
    snprintf(v.uid, sizeof(v.uid), "%s", a->uid ? a->uid : "");
    strmap_remove(g->inflight, lk->key);
    gw_sources_add(g->suspects, lk->source, -1, now(g));
    if (v.verdict == GW_UNAUTHENTICATED || v.verdict == GW_FORBIDDEN || v.verdict == GW_NOT_FOUND) {
        double ignored = 0;
        gw_sources_take(g->suspects, lk->source, now(g), &ignored);
    }
    remember(g, lk->key, &v);
    /* One at a time from the head: a callback may cancel other waiters. */
    while (lk->waiters != NULL) {
        struct gw_gate_req *r = lk->waiters;
        list_remove(&lk->waiters, r); // NOLINT(clang-analyzer-unix.Malloc): deliver freed only the
                                      // head it was given, unlinked
        deliver(r, &v);
    }
    free(lk);
}

static void make_key(char *out, const char *namespace, const char *name, const char *token)
{
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)token, strlen(token), digest);
    size_t pos = 0;
    for (size_t i = 0; i < sizeof(digest); i++)
        pos += (size_t)snprintf(out + pos, KEY_MAX - pos, "%02x", digest[i]);
    snprintf(out + pos, KEY_MAX - pos, "/%s/%s", namespace, name);
}

/* The part of b a suspect source cannot take; below the whole burst, so that one can still take
 * from a full bucket (a burst of 1 to 3). */
static double suspect_reserve(const struct gw_bucket *b)
{
    double reserve = b->burst * SUSPECT_RESERVE;
    return reserve < b->burst - 1 ? reserve : b->burst - 1;
}

struct gw_gate_req *gw_gate_admit(struct gw_gate *g, const char *source, const char *namespace,
                                  const char *name, const char *token, gw_admit_fn *cb, void *ud,
                                  struct telo_err *err)
{
    struct gw_gate_req *r = calloc(1, sizeof(*r));
    if (r == NULL)
        goto nomem;
    r->g = g;
    r->cb = cb;
    r->ud = ud;
    char key[KEY_MAX];
    make_key(key, namespace, name, token);
    struct cached *c = strmap_get(g->cache, key);
    if (c != NULL && c->expires < now(g)) {
        free(strmap_remove(g->cache, key));
        c = NULL;
    }
    if (c != NULL) {
        g->m.hits++;
        if (make_ready(r, &c->v) != 0)
            goto nomem;
        return r;
    }
    struct lookup *lk = strmap_get(g->inflight, key);
    if (lk != NULL) {
        g->m.coalesced++;
        r->lookup = lk;
        list_add(&lk->waiters, r);
        return r;
    }
    /* Every bucket is checked before any is taken from, so a request refused by one costs
     * nothing from the others (a source's own allowance is not spent on an overall refusal).
     * The source's first: one source emptying its own leaves the overall one to the others. */
    const char *src = source ? source : "";
    int suspect = gw_sources_count(g->suspects, src) >= FREE_IN_FLIGHT ||
                  gw_sources_wait(g->suspects, src, now(g)) > 0;
    double wait = gw_sources_wait(g->sources, src, now(g));
    int per_source = wait > 0;
    if (!per_source)
        wait = gw_bucket_wait_above(&g->bucket, suspect ? suspect_reserve(&g->bucket) : 0, now(g));
    if (wait > 0) {
        if (per_source)
            g->m.limited_per_source++;
        else
            g->m.limited++;
        struct verdict v = {.verdict = GW_TOO_MANY, .retry_after = wait, .exit_code = -1};
        snprintf(v.reason, sizeof(v.reason), "%s",
                 per_source ? GW_GATE_PER_SOURCE_REASON : "too many admission requests");
        if (make_ready(r, &v) != 0)
            goto nomem;
        return r;
    }
    lk = calloc(1, sizeof(*lk));
    if (lk == NULL)
        goto nomem;
    lk->g = g;
    snprintf(lk->key, sizeof(lk->key), "%s", key);
    if (strmap_put(g->inflight, lk->key, lk) != 0) {
        free(lk);
        goto nomem;
    }
    snprintf(lk->source, sizeof(lk->source), "%s", src);
    gw_bucket_take(&g->bucket, now(g));
    double ignored = 0;
    gw_sources_take(g->sources, src, now(g), &ignored);
    gw_sources_add(g->suspects, src, 1, now(g));
    r->lookup = lk;
    list_add(&lk->waiters, r);
    g->m.lookups++;
    lk->adm = g->be.admit(g->be.ud, namespace, name, token, lookup_done, lk, err);
    if (lk->adm == NULL) {
        gw_sources_add(g->suspects, src, -1, now(g));
        strmap_remove(g->inflight, lk->key);
        free(lk);
        free(r);
        return NULL;
    }
    return r;
nomem:
    free(r);
    telo_err_set(err, TELO_ENOMEM, "admission: out of memory");
    return NULL;
}

void gw_gate_cancel(struct gw_gate_req *r)
{
    if (r == NULL)
        return;
    if (r->lookup != NULL)
        list_remove(&r->lookup->waiters, r);
    else
        list_remove(&r->g->ready, r);
    free(r->ready);
    free(r);
}

struct gw_gate *gw_gate_new(struct ev_loop *loop, const struct gw_gate_backend *be,
                            const struct gw_gate_opts *opts)
{
    struct gw_gate *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    g->loop = loop;
    g->be = *be;
    if (opts != NULL)
        g->opts = *opts;
    if (g->opts.cache_s == 0)
        g->opts.cache_s = 2;
    if (g->opts.rate <= 0)
        g->opts.rate = 10;
    if (g->opts.burst <= 0)
        g->opts.burst = 2 * g->opts.rate;
    if (g->opts.rate_per_source <= 0)
        g->opts.rate_per_source = 5;
    if (g->opts.burst_per_source <= 0)
        g->opts.burst_per_source = 4 * g->opts.rate_per_source;
    if (g->opts.max_sources == 0)
        g->opts.max_sources = 16384;
    gw_bucket_init(&g->bucket, g->opts.rate, g->opts.burst, ev_now(loop));
    g->cache = strmap_new();
    g->inflight = strmap_new();
    g->sources =
        gw_sources_new(g->opts.max_sources, g->opts.rate_per_source, g->opts.burst_per_source);
    g->suspects = gw_sources_new(g->opts.max_sources, 1 / SUSPECT_S, 1);
    ev_timer_init(&g->ready_timer, ready_cb, 0., 0.);
    g->ready_timer.data = g;
    if (g->cache == NULL || g->inflight == NULL || g->sources == NULL || g->suspects == NULL) {
        gw_gate_free(g);
        return NULL;
    }
    return g;
}

void gw_gate_free(struct gw_gate *g)
{
    if (g == NULL)
        return;
    ev_timer_stop(g->loop, &g->ready_timer);
    while (g->ready != NULL)
        gw_gate_cancel(g->ready); // NOLINT(clang-analyzer-unix.Malloc): gw_gate_cancel unlinks it
    if (g->inflight != NULL) {
        struct strmap_iter it = {0};
        const char *key;
        void *v;
        while (strmap_next(g->inflight, &it, &key, &v)) {
            struct lookup *lk = v;
            strmap_remove(g->inflight, key);
            g->be.cancel(lk->adm);
            /* gw_gate_cancel unlinks each. */
            while (lk->waiters != NULL)
                gw_gate_cancel(lk->waiters); // NOLINT(clang-analyzer-unix.Malloc)
            free(lk);
        }
        strmap_free(g->inflight);
    }
    if (g->cache != NULL) {
        cache_clear(g, 0);
        strmap_free(g->cache);
    }
    gw_sources_free(g->sources);
    gw_sources_free(g->suspects);
    free(g);
}

const struct gw_gate_metrics *gw_gate_metrics(const struct gw_gate *g)
{
    return &g->m;
}
