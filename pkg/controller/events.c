/* An event recorder writing events.k8s.io/v1 Events, with client-go's correlator (aggregation,
 * de-duplication into a series, spam filter) and a bounded queue of asynchronous writes. */
#include "controller/events.h"

#include "kube/rest.h"
#include "kube/status.h"
#include "kube/transport.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/strmap.h"
#include "util/text.h"
#include "util/timefmt.h"
#include "util/utf8.h"

#include <ev.h>
#include <json.h>

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMBINED_PREFIX "(combined from similar events): "
#define KEY_MAX         2048 /* correlation keys: identity fields, hashes, separators */

/* ---- a bounded LRU of entries keyed by string ----------------------------------------------- */

/* One cache entry; each cache uses its own fields. */
struct entry {
    struct entry *prev, *next; /* most recently used first */
    char *key;
    /* spam filter: a passive token bucket */
    double tokens;
    double tokens_time;
    /* aggregation: hashes of the distinct notes seen, and when the last one came */
    unsigned long long *hashes;
    int nhashes;
    double last_time;
    /* de-duplication: the Event written for this key (allocated: only this cache's entries have
     * one, and an inline name would cost every entry of all three 254 bytes) */
    char *name;
    long count;
    double first_time;
};

struct lru {
    struct strmap *map;
    struct entry head; /* sentinel of a circular list */
    size_t len, cap;
};

static int lru_init(struct lru *l, size_t cap)
{
    l->map = strmap_new();
    l->head.prev = l->head.next = &l->head;
    l->len = 0;
    l->cap = cap;
    return l->map ? 0 : -TELO_ENOMEM;
}

static void entry_free(struct entry *e)
{
    if (!e)
        return;
    free(e->key);
    free(e->hashes);
    free(e->name);
    free(e);
}

static void lru_unlink(struct entry *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
}

static void lru_push_front(struct lru *l, struct entry *e)
{
    e->next = l->head.next;
    e->prev = &l->head;
    l->head.next->prev = e;
    l->head.next = e;
}

static void lru_release(struct lru *l)
{
    if (!l->map)
        return;
    struct entry *e = l->head.next;
    while (e != &l->head) {
        struct entry *next = e->next;
        entry_free(e);
        e = next;
    }
    strmap_free(l->map);
    l->map = NULL;
}

/* Returns key's entry, moved to the front, or NULL. */
static struct entry *lru_get(struct lru *l, const char *key)
{
    struct entry *e = strmap_get(l->map, key);
    if (e) {
        lru_unlink(e);
        lru_push_front(l, e);
    }
    return e;
}

/* Returns a new zeroed entry for key at the front, evicting the least recently used entry when
 * full, or NULL when out of memory (l unchanged). key must not be in l. */
static struct entry *lru_add(struct lru *l, const char *key)
{
    struct entry *e = calloc(1, sizeof(*e));
    if (!e || !(e->key = strdup(key)) || strmap_put(l->map, e->key, e) < 0) {
        entry_free(e);
        return NULL;
    }
    lru_push_front(l, e);
    if (++l->len > l->cap) {
        struct entry *old = l->head.prev;
        lru_unlink(old);
        strmap_remove(l->map, old->key);
        entry_free(old);
        l->len--;
    }
    return e;
}

/* ---- the correlator -------------------------------------------------------------------------- */

struct events_correlator {
    struct events_correlator_config cfg;
    struct lru spam, aggregate, log, ns;
    long long last_name_ns; /* keeps generated names unique within one loop iteration */
    char key[KEY_MAX + 32];
};

void events_correlator_config_default(struct events_correlator_config *cfg)
{
    cfg->burst = 25;
    cfg->qps = 1.0 / 300.0;
    cfg->max_similar = 10;
    cfg->similar_window = 600;
    cfg->cache_size = 4096;
    cfg->namespace_burst = 0; /* client-go has no namespace budget */
    cfg->namespace_qps = 0;
}

struct events_correlator *events_correlator_new(const struct events_correlator_config *cfg)
{
    struct events_correlator *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    events_correlator_config_default(&c->cfg);
    if (cfg) {
        if (cfg->burst > 0)
            c->cfg.burst = cfg->burst;
        if (cfg->qps > 0)
            c->cfg.qps = cfg->qps;
        if (cfg->max_similar > 0)
            c->cfg.max_similar = cfg->max_similar;
        if (cfg->similar_window > 0)
            c->cfg.similar_window = cfg->similar_window;
        if (cfg->cache_size > 0)
            c->cfg.cache_size = cfg->cache_size;
        if (cfg->namespace_burst > 0) {
            c->cfg.namespace_burst = cfg->namespace_burst;
            c->cfg.namespace_qps = cfg->namespace_qps > 0 ? cfg->namespace_qps : 1;
        }
    }
    if (lru_init(&c->spam, c->cfg.cache_size) < 0 ||
        lru_init(&c->aggregate, c->cfg.cache_size) < 0 ||
        lru_init(&c->log, c->cfg.cache_size) < 0 || lru_init(&c->ns, c->cfg.cache_size) < 0) {
        events_correlator_free(c);
        return NULL;
    }
    return c;
}

void events_correlator_free(struct events_correlator *c)
{
    if (!c)
        return;
    lru_release(&c->spam);
    lru_release(&c->aggregate);
    lru_release(&c->log);
    lru_release(&c->ns);
    free(c);
}

static const char *str(const char *s)
{
    return s ? s : "";
}

/* Copies at most max bytes of src (dst has room for max + 1), cutting before a partial UTF-8
 * sequence, cleaned for a terminal: a note may carry a tenant's text (an app's termination
 * message), and `kubectl get events` shows it to others. */
static void copy_note(char *dst, const char *src, size_t max)
{
    size_t n = strlen(src);
    if (n > max)
        n = util_utf8_cut(src, max);
    util_text_clean(src, n, dst);
}

/* Takes a token from key's passive token bucket in l (full at first, refilled qps per second up
 * to burst). Returns 0 when it is empty, or when there is no memory for a new bucket. */
static int take_token(struct lru *l, const char *key, double now, double burst, double qps)
{
    struct entry *b = lru_get(l, key);
    if (!b) {
        b = lru_add(l, key);
        if (!b)
            return 0;
        b->tokens = burst;
        b->tokens_time = now;
    }
    if (now > b->tokens_time) {
        b->tokens += (now - b->tokens_time) * qps;
        if (b->tokens > burst)
            b->tokens = burst;
        b->tokens_time = now;
    }
    if (b->tokens < 1)
        return 0;
    b->tokens -= 1;
    return 1;
}

/* source + object, with a separator no name can hold (client-go joins with "", so "ab"+"c" and
 * "a"+"bc" collide there). */
static int spam_key(const struct events_input *in, char *out, size_t len)
{
    const struct events_object *o = in->regarding;
    int n = snprintf(out, len, "%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s",
                     str(in->reporting_controller), str(in->reporting_instance), str(o->kind),
                     str(o->namespace), str(o->name), str(o->uid), str(o->api_version));
    return n > 0 && (size_t)n < len ? 0 : -TELO_EINVAL;
}

int events_correlate(struct events_correlator *c, const struct events_input *in, double now,
                     struct events_outcome *out)
{
    const struct events_object *o = in->regarding;
    if (!o || !o->name || !*o->name || !in->reason || !*in->reason || !in->type ||
        (strcmp(in->type, "Normal") != 0 && strcmp(in->type, "Warning") != 0))
        return -TELO_EINVAL;
    const char *action = in->action && *in->action ? in->action : in->reason;
    char spam[KEY_MAX], agg[KEY_MAX];
    if (spam_key(in, spam, sizeof(spam)) < 0)
        return -TELO_EINVAL;
    int n = snprintf(agg, sizeof(agg), "%s\x1f%s\x1f%s\x1f%s", spam, in->type, in->reason, action);
    if (n < 0 || (size_t)n >= sizeof(agg))
        return -TELO_EINVAL;
    memset(out, 0, sizeof(*out));
    copy_note(out->note, str(in->note), EVENTS_NOTE_MAX);
    /* The note enters keys as a hash, so a cache entry costs its identity, not up to 1 KiB. */
    unsigned long long note_hash = strmap_hash(out->note);

    /* 4. The namespace budget for a new Normal Event, checked before anything is counted: an
     * event it drops leaves no entry behind (a burst of thousands would otherwise fill every
     * cache) and is new again next time. New: neither its own nor its group's combined Event
     * was written. */
    if (c->cfg.namespace_burst > 0 && strcmp(in->type, "Normal") == 0) {
        snprintf(c->key, sizeof(c->key), "%s\x1f%016llx", agg, note_hash);
        if (!lru_get(&c->log, c->key) && !lru_get(&c->log, agg) &&
            !take_token(&c->ns, str(o->namespace), now, c->cfg.namespace_burst,
                        c->cfg.namespace_qps)) {
            out->write = EVENTS_SKIP;
            out->over_budget = 1;
            return 0;
        }
    }

    /* Look everything up before changing anything, so a failure leaves c as it was. */
    struct entry *a = lru_get(&c->aggregate, agg);
    if (!a) {
        a = lru_add(&c->aggregate, agg);
        if (!a)
            return -TELO_ENOMEM;
    }
    if (!a->hashes) {
        a->hashes = calloc((size_t)c->cfg.max_similar, sizeof(*a->hashes));
        if (!a->hashes)
            return -TELO_ENOMEM;
    }
    /* 1. Aggregation (EventAggregator): a group idle longer than the window starts afresh. */
    if (now - a->last_time > c->cfg.similar_window)
        a->nhashes = 0;
    int known = 0;
    for (int i = 0; i < a->nhashes; i++)
        known |= a->hashes[i] == note_hash;
    if (!known && a->nhashes < c->cfg.max_similar)
        a->hashes[a->nhashes++] = note_hash;
    a->last_time = now;
    if (a->nhashes < c->cfg.max_similar) {
        snprintf(c->key, sizeof(c->key), "%s\x1f%016llx", agg, note_hash);
    } else {
        /* As client-go: keep the set one short of the limit, so every new note past it is
         * combined too, and key the combined event by the group. */
        a->nhashes--;
        snprintf(c->key, sizeof(c->key), "%s", agg);
        char combined[EVENTS_NOTE_MAX + sizeof(COMBINED_PREFIX)];
        snprintf(combined, sizeof(combined), "%s%s", COMBINED_PREFIX, out->note);
        copy_note(out->note, combined, EVENTS_NOTE_MAX);
        out->combined = 1;
    }
    out->key = c->key;

    /* 2. De-duplication (eventObserve): the same key bumps the Event already named for it. */
    struct entry *l = lru_get(&c->log, c->key);
    if (!l) {
        l = lru_add(&c->log, c->key);
        if (!l)
            return -TELO_ENOMEM;
    }
    if (l->count > 0) {
        out->write = EVENTS_PATCH;
        l->count++;
    } else {
        /* client-go names events "<object>.<UnixNano in hex>"; equal times within one loop
         * iteration are nudged so names stay unique. */
        long long ns = (long long)llround(now * 1e9);
        if (ns <= c->last_name_ns)
            ns = c->last_name_ns + 1;
        c->last_name_ns = ns;
        char prefix[EVENTS_NAME_MAX - 18], name[EVENTS_NAME_MAX];
        snprintf(prefix, sizeof(prefix), "%s", o->name);
        snprintf(name, sizeof(name), "%s.%llx", prefix, (unsigned long long)ns);
        if (!(l->name = strdup(name)))
            return -TELO_ENOMEM;
        l->count = 1;
        l->first_time = now;
        out->write = EVENTS_CREATE;
    }
    snprintf(out->name, sizeof(out->name), "%s", l->name);
    out->count = l->count;
    out->first_time = l->first_time;
    out->last_time = now;

    /* 3. Spam filter (EventSourceObjectSpamFilter): applied after the counting, as in
     * client-go, so the counts above include what it drops and the next write carries them. */
    if (!take_token(&c->spam, spam, now, c->cfg.burst, c->cfg.qps)) {
        out->write = EVENTS_SKIP;
        return 0;
    }
    return 0;
}

/* ---- the recorder -----------------------------------------------------------------------------
 */

struct pending {
    struct pending *next;
    char *key;    /* the correlation key (coalescing) */
    char *create; /* the whole Event, for a create or when the patched one is gone */
    char *patch;  /* merge patch of the series, NULL for a create */
    char name[EVENTS_NAME_MAX];
    char namespace[EVENTS_NAME_MAX];
    int tries;
};

struct events_recorder {
    struct kube_transport *t;
    struct ev_loop *loop;
    struct events_correlator *corr;
    char *controller;
    char *instance;
    size_t queue_max;
    int max_tries;
    double retry_interval;
    struct pending *head, *tail;
    struct strmap *queued; /* key -> pending not yet sent */
    /* namespace -> struct ns_queued: no namespace may fill more than its share of the queue,
     * or one tenant's stream of Warnings (its budget covers Normal Events) would have every
     * other tenant's Events dropped. */
    struct strmap *queued_by_ns;
    size_t ns_share;
    struct pending *sending;
    struct kube_call *call;
    int call_is_patch;
    ev_timer retry_timer;
    ev_timer flush_timer;
    events_done_fn *flush_done;
    void *flush_ud;
    unsigned long long rng;
    struct events_stats stats;
};

static void pending_free(struct pending *p)
{
    if (!p)
        return;
    free(p->key);
    free(p->create);
    free(p->patch);
    free(p);
}

static char *json_text(struct json_object *obj)
{
    const char *s = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN |
                                                            JSON_C_TO_STRING_NOSLASHESCAPE);
    return s ? strdup(s) : NULL;
}

static struct json_object *series_object(const struct events_outcome *o)
{
    char last[TIMEFMT_MICRO_MAX];
    timefmt_format_micro(o->last_time, last, sizeof(last));
    struct json_object *series = json_object_new_object();
    if (series) {
        json_object_object_add(series, "count", json_object_new_int64(o->count));
        json_object_object_add(series, "lastObservedTime", json_object_new_string(last));
    }
    return series;
}

static void add_str(struct json_object *obj, const char *key, const char *val)
{
    if (val && *val)
        json_object_object_add(obj, key, json_object_new_string(val));
}

/* The whole events.k8s.io/v1 Event for o. Deprecated core fields stay unset: the API server
 * refuses them on events.k8s.io creates. */
static char *event_body(const struct events_recorder *r, const struct events_input *in,
                        const struct events_outcome *o, const char *ns)
{
    char first[TIMEFMT_MICRO_MAX];
    timefmt_format_micro(o->first_time, first, sizeof(first));
    struct json_object *ev = json_object_new_object();
    struct json_object *meta = json_object_new_object();
    struct json_object *reg = json_object_new_object();
    char *text = NULL;
    if (ev && meta && reg) {
        add_str(ev, "apiVersion", "events.k8s.io/v1");
        add_str(ev, "kind", "Event");
        add_str(meta, "name", o->name);
        add_str(meta, "namespace", ns);
        json_object_object_add(ev, "metadata", meta);
        meta = NULL;
        add_str(ev, "eventTime", first);
        /* A series needs count >= 2; a first occurrence has none. */
        if (o->count >= 2)
            json_object_object_add(ev, "series", series_object(o));
        add_str(ev, "reportingController", r->controller);
        add_str(ev, "reportingInstance", r->instance);
        add_str(ev, "action", in->action && *in->action ? in->action : in->reason);
        add_str(ev, "reason", in->reason);
        add_str(ev, "type", in->type);
        add_str(ev, "note", o->note);
        const struct events_object *obj = in->regarding;
        add_str(reg, "apiVersion", obj->api_version);
        add_str(reg, "kind", obj->kind);
        add_str(reg, "namespace", obj->namespace);
        add_str(reg, "name", obj->name);
        add_str(reg, "uid", obj->uid);
        json_object_object_add(ev, "regarding", reg);
        reg = NULL;
        text = json_text(ev);
    }
    json_object_put(ev);
    json_object_put(meta);
    json_object_put(reg);
    return text;
}

static char *patch_body(const struct events_outcome *o)
{
    struct json_object *p = json_object_new_object();
    char *text = NULL;
    if (p) {
        json_object_object_add(p, "series", series_object(o));
        text = json_text(p);
    }
    json_object_put(p);
    return text;
}

static void start_next(struct events_recorder *r);

struct ns_queued {
    size_t n;
    char ns[]; /* the map borrows this */
};

/* Counts one more queued Event of ns (delta 1) or one fewer (-1). Returns 0, or -1 when ns is
 * at its share (nothing counted) or out of memory. */
static int ns_queued_add(struct events_recorder *r, const char *ns, int delta)
{
    if (delta < 0) {
        struct ns_queued *c = strmap_get(r->queued_by_ns, ns);
        if (c && --c->n == 0) {
            strmap_remove(r->queued_by_ns, ns);
            free(c);
        }
        return 0;
    }
    struct ns_queued *c =
        strmap_get_or_add(r->queued_by_ns, ns, sizeof(*c), offsetof(struct ns_queued, ns));
    if (!c || c->n >= r->ns_share)
        return -1;
    c->n++;
    return 0;
}

static void check_flush(struct events_recorder *r)
{
    if (r->flush_done && !r->head && !r->sending) {
        /* Deferred to the loop so done never runs inside events_recorder_flush. */
        ev_timer_stop(r->loop, &r->flush_timer);
        ev_timer_set(&r->flush_timer, 0, 0);
        ev_timer_start(r->loop, &r->flush_timer);
    }
}

static void finish_sending(struct events_recorder *r)
{
    pending_free(r->sending);
    r->sending = NULL;
    r->stats.in_flight = 0;
    start_next(r);
    check_flush(r);
}

static double rand01(struct events_recorder *r)
{
    r->rng = r->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(r->rng >> 11) / 9007199254740992.0;
}

static void retry_later(struct events_recorder *r, const char *why)
{
    struct pending *p = r->sending;
    if (++p->tries >= r->max_tries) {
        r->stats.failed++;
        telo_log(TELO_LOG_WARN, "event dropped after retries", "event=%s/%s tries=%d error=\"%s\"",
                 p->namespace, p->name, p->tries, why);
        finish_sending(r);
        return;
    }
    r->stats.retries++;
    /* client-go: the first wait is randomized so recorders do not retry in step after an API
     * server outage; later ones are the full interval. The queue waits behind it, in order. */
    double delay = p->tries == 1 ? r->retry_interval * rand01(r) : r->retry_interval;
    ev_timer_stop(r->loop, &r->retry_timer);
    ev_timer_set(&r->retry_timer, delay, 0);
    ev_timer_start(r->loop, &r->retry_timer);
}

static void on_written(const struct kube_result *res, void *ud);

static void send_current(struct events_recorder *r)
{
    struct pending *p = r->sending;
    struct telo_err err;
    struct kube_ref ref = {.group = "events.k8s.io",
                           .version = "v1",
                           .resource = "events",
                           .namespace = p->namespace,
                           .name = p->name};
    r->call_is_patch = p->patch != NULL;
    if (p->patch)
        r->call = kube_rest_patch(r->t, &ref, KUBE_PATCH_MERGE, p->patch, strlen(p->patch), NULL,
                                  on_written, r, &err);
    else
        r->call =
            kube_rest_create(r->t, &ref, p->create, strlen(p->create), NULL, on_written, r, &err);
    if (!r->call) {
        r->stats.failed++;
        telo_log(TELO_LOG_WARN, "event not written", "event=%s/%s error=\"%s\"", p->namespace,
                 p->name, err.msg);
        finish_sending(r);
    }
}

static void start_next(struct events_recorder *r)
{
    if (r->sending || !r->head)
        return;
    struct pending *p = r->head;
    r->head = p->next;
    if (!r->head)
        r->tail = NULL;
    p->next = NULL;
    strmap_remove(r->queued, p->key);
    ns_queued_add(r, p->namespace, -1);
    r->stats.queued--;
    r->sending = p;
    r->stats.in_flight = 1;
    send_current(r);
}

static int is_transient(const struct kube_result *res)
{
    /* No answer, or the server could not act (5xx, 429 after the transport's own retries). */
    return res->code == 0 || res->code == 429 || res->code >= 500;
}

static void on_written(const struct kube_result *res, void *ud)
{
    struct events_recorder *r = ud;
    struct pending *p = r->sending;
    r->call = NULL;
    if (res->rc == 0) {
        if (r->call_is_patch)
            r->stats.patched++;
        else
            r->stats.created++;
        finish_sending(r);
        return;
    }
    if (r->call_is_patch && res->status && kube_status_is(res->status, KUBE_REASON_NOT_FOUND)) {
        /* The Event expired (1 h TTL) or was deleted: write it anew, with its series. */
        free(p->patch);
        p->patch = NULL;
        send_current(r);
        return;
    }
    if (is_transient(res)) {
        retry_later(r, res->err ? res->err->msg : "unknown");
        return;
    }
    /* An API error will not change on retry. AlreadyExists (a retried create that had landed) and
     * a terminating namespace are expected; anything else is worth a line. */
    int quiet = res->status && (kube_status_is(res->status, KUBE_REASON_ALREADY_EXISTS) ||
                                (kube_status_is(res->status, KUBE_REASON_FORBIDDEN) &&
                                 strstr(res->status->message, "being terminated") != NULL));
    if (!quiet) {
        r->stats.failed++;
        telo_log(TELO_LOG_WARN, "event rejected", "event=%s/%s error=\"%s\"", p->namespace, p->name,
                 res->err ? res->err->msg : "unknown");
    }
    finish_sending(r);
}

static void on_retry(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct events_recorder *r = w->data;
    if (r->sending && !r->call)
        send_current(r);
}

static void on_flush_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct events_recorder *r = w->data;
    events_done_fn *done = r->flush_done;
    r->flush_done = NULL;
    if (done)
        done(r->head || r->sending ? -TELO_ETIMEDOUT : 0, r->flush_ud);
}

struct events_recorder *events_recorder_new(struct kube_transport *t,
                                            const struct events_recorder_config *cfg,
                                            struct telo_err *err)
{
    if (!t || !cfg || !cfg->reporting_instance || !*cfg->reporting_instance) {
        telo_err_set(err, TELO_EINVAL, "event recorder needs a transport and a reporting instance");
        return NULL;
    }
    struct events_recorder *r = calloc(1, sizeof(*r));
    if (!r) {
        telo_err_set(err, TELO_ENOMEM, "out of memory");
        return NULL;
    }
    r->t = t;
    r->loop = kube_transport_loop(t);
    r->corr = events_correlator_new(&cfg->correlator);
    r->queued = strmap_new();
    r->queued_by_ns = strmap_new();
    r->controller =
        strdup(cfg->reporting_controller && *cfg->reporting_controller ? cfg->reporting_controller
                                                                       : "telo-operator");
    r->instance = strdup(cfg->reporting_instance);
    if (!r->corr || !r->queued || !r->queued_by_ns || !r->controller || !r->instance) {
        events_recorder_free(r);
        telo_err_set(err, TELO_ENOMEM, "out of memory");
        return NULL;
    }
    r->queue_max = cfg->queue_max ? cfg->queue_max : 1000;
    r->ns_share = r->queue_max < 8 ? r->queue_max : r->queue_max / 4;
    r->max_tries = cfg->max_tries > 0 ? cfg->max_tries : 12;
    r->retry_interval = cfg->retry_interval > 0 ? cfg->retry_interval : 10;
    r->rng = (unsigned long long)(uintptr_t)r ^ 0x9e3779b97f4a7c15ULL;
    ev_timer_init(&r->retry_timer, on_retry, 0, 0);
    r->retry_timer.data = r;
    ev_timer_init(&r->flush_timer, on_flush_timer, 0, 0);
    r->flush_timer.data = r;
    return r;
}

int events_record(struct events_recorder *r, const struct events_object *obj, const char *type,
                  const char *reason, const char *action, const char *fmt, ...)
{
    char note[EVENTS_NOTE_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(note, sizeof(note), fmt, ap);
    va_end(ap);
    struct events_input in = {.regarding = obj,
                              .type = type,
                              .reason = reason,
                              .action = action,
                              .note = note,
                              .reporting_controller = r->controller,
                              .reporting_instance = r->instance};
    struct events_outcome out;
    int rc = events_correlate(r->corr, &in, ev_now(r->loop), &out);
    if (rc < 0)
        return rc;
    r->stats.recorded++;
    if (out.combined)
        r->stats.combined++;
    if (out.write == EVENTS_SKIP) {
        if (out.over_budget)
            r->stats.budgeted++;
        else
            r->stats.filtered++;
        return 0;
    }
    const char *ns = obj->namespace && *obj->namespace ? obj->namespace : "default";
    char *create = event_body(r, &in, &out, ns);
    char *patch = out.write == EVENTS_PATCH ? patch_body(&out) : NULL;
    if (!create || (out.write == EVENTS_PATCH && !patch)) {
        free(create);
        free(patch);
        return -TELO_ENOMEM;
    }
    struct pending *q = strmap_get(r->queued, out.key);
    if (q) {
        /* Still waiting for the same Event: one write with the newest numbers. A queued create of
         * the same Event stays a create (now with its series); otherwise the newest write wins. */
        free(q->create);
        q->create = create;
        if (!q->patch && strcmp(q->name, out.name) == 0) {
            free(patch);
        } else {
            free(q->patch);
            q->patch = patch;
            snprintf(q->name, sizeof(q->name), "%s", out.name);
        }
        r->stats.coalesced++;
        return 0;
    }
    if (r->stats.queued >= r->queue_max || ns_queued_add(r, ns, 1) < 0) {
        free(create);
        free(patch);
        r->stats.dropped++;
        return -TELO_ETOOBIG;
    }
    q = calloc(1, sizeof(*q));
    if (!q || !(q->key = strdup(out.key)) || strmap_put(r->queued, q->key, q) < 0) {
        if (q)
            free(q->key);
        free(q);
        free(create);
        free(patch);
        ns_queued_add(r, ns, -1);
        return -TELO_ENOMEM;
    }
    q->create = create;
    q->patch = patch;
    snprintf(q->name, sizeof(q->name), "%s", out.name);
    snprintf(q->namespace, sizeof(q->namespace), "%s", ns);
    if (r->tail)
        r->tail->next = q;
    else
        r->head = q;
    r->tail = q;
    r->stats.queued++;
    start_next(r);
    return 0;
}

void events_recorder_flush(struct events_recorder *r, double timeout, events_done_fn *done,
                           void *ud)
{
    events_done_fn *old = r->flush_done;
    void *old_ud = r->flush_ud;
    r->flush_done = done;
    r->flush_ud = ud;
    ev_timer_stop(r->loop, &r->flush_timer);
    ev_timer_set(&r->flush_timer, !r->head && !r->sending ? 0 : (timeout > 0 ? timeout : 0), 0);
    ev_timer_start(r->loop, &r->flush_timer);
    if (old)
        old(-TELO_ETIMEDOUT, old_ud);
}

const struct events_stats *events_recorder_stats(const struct events_recorder *r)
{
    return &r->stats;
}

void events_recorder_free(struct events_recorder *r)
{
    if (!r)
        return;
    if (r->loop) {
        ev_timer_stop(r->loop, &r->retry_timer);
        ev_timer_stop(r->loop, &r->flush_timer);
    }
    kube_call_cancel(r->call);
    pending_free(r->sending);
    struct pending *p = r->head;
    while (p) {
        struct pending *next = p->next;
        pending_free(p);
        p = next;
    }
    strmap_free(r->queued);
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (r->queued_by_ns && strmap_next(r->queued_by_ns, &it, &key, &value))
        free(value);
    strmap_free(r->queued_by_ns);
    events_correlator_free(r->corr);
    free(r->controller);
    free(r->instance);
    free(r);
}
