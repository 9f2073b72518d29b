/* The reflector: keeps a store in step with one resource by list, then watch, with relists. */
#include "cache/reflector.h"

#include "cache/transform.h"
#include "kube/watch.h"
#include "util/jget.h"
#include "util/jitter.h"
#include "util/log.h"

#include <ev.h>
#include <json.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A watch that ends this soon without a single event counts as a failure, so a server that
 * closes every stream at once is not hammered (client-go does the same). */
#define SHORT_WATCH_S 1.0

struct cache_reflector {
    struct kube_transport *t;
    struct ev_loop *loop;
    char *group, *version, *resource, *namespace, *label_selector, *field_selector;
    struct kube_ref ref;
    long page_size;
    /* The page asked for now: halved when a page's answer passes the transport's body cap
     * (objects of up to 1.5 MiB each, which anyone who may create labelled objects can make),
     * and kept so for this reflector's life rather than met again at every list. */
    long page_now;
    char *cont; /* the continue token of the page asked for now; NULL: the first page */
    /* This list asks for everything in one answer: a continue token expired, and paging again
     * would meet the same wall on a server whose lists outlast etcd's compaction. */
    int unpaged;
    struct json_object *(*transform)(struct json_object *obj, void *arg);
    void *transform_arg;
    double backoff_initial, backoff_max, backoff_reset;
    struct cache_handlers handlers;
    struct cache_store *store;

    struct kube_call *list_call;
    int listing; /* a list (possibly several pages) is under way */
    struct kube_watch *watch;
    double watch_started;
    unsigned long watch_events;
    /* Watches in a row that ended 410 Expired without an event: the second is not relisted at
     * once, or a list that outlasts compaction relists back to back forever. */
    unsigned watch_expiries;
    ev_timer retry;
    int synced;
    int relist_next; /* the next retry lists instead of watching */
    char *rv;
    unsigned failures;
    double last_failure;
    char last_error[TELO_ERR_MSG_MAX + 16];
    struct cache_reflector_stats stats;
};

static void list_page(struct cache_reflector *r, const char *continue_token);
static void start_watch(struct cache_reflector *r);

double cache_reflector_backoff(double initial, double max, unsigned failures)
{
    double d = initial;
    for (unsigned i = 1; i < failures && d < max; i++)
        d *= 2;
    return d > max ? max : d;
}

static char *dup_opt(const char *s)
{
    return (s && *s) ? strdup(s) : NULL;
}

static void set_rv(struct cache_reflector *r, const char *rv)
{
    char *copy = strdup(rv ? rv : "");
    if (copy) {
        free(r->rv);
        r->rv = copy;
    }
}

/* "configmaps" or "ns/configmaps", for logs. */
static void describe(const struct cache_reflector *r, char *out, size_t len)
{
    if (r->namespace)
        snprintf(out, len, "%s/%s", r->namespace, r->resource);
    else
        snprintf(out, len, "%s", r->resource);
}

/* Arms the retry timer after a failure; what runs then depends on whether we ever synced. */
static void fail(struct cache_reflector *r, const char *what, const struct telo_err *err)
{
    double now = ev_now(r->loop);
    if (r->failures && now - r->last_failure >= r->backoff_reset)
        r->failures = 0;
    r->failures++;
    r->last_failure = now;
    r->stats.failures++;
    double delay = cache_reflector_backoff(r->backoff_initial, r->backoff_max, r->failures);
    delay = util_jitter(delay, 1.0); /* client-go's jitter factor 1.0 */
    r->stats.last_backoff = delay;
    snprintf(r->last_error, sizeof(r->last_error), "%.8s: %s", what,
             err && err->msg[0] ? err->msg : "failed");
    char name[160];
    describe(r, name, sizeof(name));
    telo_log(TELO_LOG_WARN, "reflector backing off", "resource=%s error=%s retry_in=%.2fs", name,
             r->last_error, delay);
    ev_timer_set(&r->retry, delay, 0);
    ev_timer_start(r->loop, &r->retry);
}

static void on_retry(struct ev_loop *loop, ev_timer *timer, int revents)
{
    (void)loop;
    (void)revents;
    struct cache_reflector *r = timer->data;
    if (!r->synced || !r->rv || !r->rv[0] || r->relist_next) {
        r->relist_next = 0;
        list_page(r, NULL);
    } else {
        start_watch(r);
    }
}

/* Transforms obj and stores it, telling the handlers what changed. */
static void apply(struct cache_reflector *r, struct json_object *obj, enum cache_origin origin)
{
    struct json_object *kept;
    if (r->transform) {
        kept = r->transform(obj, r->transform_arg);
    } else {
        cache_transform_strip(obj);
        kept = json_object_get(obj);
    }
    if (!kept)
        return;
    struct cache_object *old = NULL;
    const struct cache_object *now = NULL;
    struct telo_err err;
    if (cache_store_put(r->store, kept, &old, &now, &err) < 0) {
        telo_log(TELO_LOG_ERROR, "reflector cannot cache object", "error=\"%s\"", err.msg);
    } else if (!old) {
        if (r->handlers.on_add)
            r->handlers.on_add(r->handlers.ud, now, origin);
    } else {
        /* A relist hands back every object; only real changes are news. */
        if (r->handlers.on_update && (origin == CACHE_FROM_WATCH ||
                                      strcmp(old->resource_version, now->resource_version) != 0))
            r->handlers.on_update(r->handlers.ud, old, now, origin);
        cache_object_free(old);
    }
    json_object_put(kept);
}

static void remove_object(struct cache_reflector *r, struct json_object *obj)
{
    char key[512];
    if (cache_object_key(obj, key, sizeof(key), NULL) < 0)
        return;
    struct cache_object *old = cache_store_delete(r->store, key);
    if (!old)
        return;
    if (r->handlers.on_delete)
        r->handlers.on_delete(r->handlers.ud, old, CACHE_FROM_WATCH);
    cache_object_free(old);
}

static void swept(void *ctx, struct cache_object *obj)
{
    struct cache_reflector *r = ctx;
    if (r->handlers.on_delete)
        r->handlers.on_delete(r->handlers.ud, obj, CACHE_FROM_LIST);
    cache_object_free(obj);
}

/* --- list -------------------------------------------------------------------------------- */

/* Pages are decoded one item at a time from the raw text: a parsed page of 500 pods is tens of
 * MiB of small json-c allocations, and the cache objects made while it lives would pin that
 * memory for good (measured: 61 MiB RSS instead of 20 for 3,000 pods). */

static size_t skip_space(const char *t, size_t n, size_t i)
{
    while (i < n && (t[i] == ' ' || t[i] == '\n' || t[i] == '\r' || t[i] == '\t'))
        i++;
    return i;
}

/* The end of the JSON value starting at t[i] (one past it), or 0 when malformed. */
static size_t skip_value(const char *t, size_t n, size_t i)
{
    if (i >= n)
        return 0;
    if (t[i] != '{' && t[i] != '[' && t[i] != '"') {
        while (i < n && !strchr(",}] \t\r\n", t[i]))
            i++;
        return i;
    }
    int depth = 0;
    for (; i < n; i++) {
        char c = t[i];
        if (c == '"') {
            for (i++; i < n && t[i] != '"'; i++) {
                if (t[i] == '\\')
                    i++;
            }
            if (i >= n)
                return 0;
            if (depth == 0)
                return i + 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth == 0)
                return i + 1;
        }
    }
    return 0;
}

struct page {
    struct json_tokener *tok;
    int (*on_item)(void *ud, struct json_object *item);
    void *ud;
    struct json_object *metadata;
};

/* Parses t[start, end) and hands it to on_item. */
static int list_item(struct page *pg, const char *t, size_t start, size_t end)
{
    json_tokener_reset(pg->tok);
    struct json_object *obj = json_tokener_parse_ex(pg->tok, t + start, (int)(end - start));
    if (!obj || json_tokener_get_error(pg->tok) != json_tokener_success) {
        json_object_put(obj);
        return -1;
    }
    int rc = pg->on_item(pg->ud, obj);
    json_object_put(obj);
    return rc < 0 ? -1 : 0;
}

/* Walks {"kind":..,"metadata":{..},"items":[..]}: items go to on_item one by one, metadata is
 * parsed for continue and resourceVersion. Returns 0, or -1 for text that is not such a list. */
static int decode_page(struct page *pg, const char *t, size_t n)
{
    size_t i = skip_space(t, n, 0);
    if (i >= n || t[i] != '{')
        return -1;
    i = skip_space(t, n, i + 1);
    while (i < n && t[i] != '}') {
        size_t key_end = skip_value(t, n, i);
        if (!key_end || t[i] != '"')
            return -1;
        int is_items = key_end - i == 7 && memcmp(t + i, "\"items\"", 7) == 0;
        int is_meta = key_end - i == 10 && memcmp(t + i, "\"metadata\"", 10) == 0;
        i = skip_space(t, n, key_end);
        if (i >= n || t[i] != ':')
            return -1;
        i = skip_space(t, n, i + 1);
        if (is_items && i < n && t[i] == '[') {
            i = skip_space(t, n, i + 1);
            while (i < n && t[i] != ']') {
                size_t end = skip_value(t, n, i);
                if (!end || list_item(pg, t, i, end) < 0)
                    return -1;
                i = skip_space(t, n, end);
                if (i < n && t[i] == ',')
                    i = skip_space(t, n, i + 1);
            }
            i++;
        } else {
            size_t end = skip_value(t, n, i);
            if (!end)
                return -1;
            if (is_meta && !pg->metadata) {
                json_tokener_reset(pg->tok);
                pg->metadata = json_tokener_parse_ex(pg->tok, t + i, (int)(end - i));
            }
            i = end;
        }
        i = skip_space(t, n, i);
        if (i < n && t[i] == ',')
            i = skip_space(t, n, i + 1);
    }
    return i < n ? 0 : -1;
}

int cache_list_page_decode(const char *text, size_t len,
                           int (*on_item)(void *ud, struct json_object *item), void *ud,
                           struct cache_list_page *out)
{
    out->continue_token = NULL;
    out->resource_version = NULL;
    out->metadata = NULL;
    if (!text || !on_item)
        return -1;
    struct page pg = {
        .tok = json_tokener_new_ex(JGET_OBJECT_MAX_DEPTH), .on_item = on_item, .ud = ud};
    int rc = !pg.tok ? -1 : decode_page(&pg, text, len);
    json_tokener_free(pg.tok);
    if (rc < 0) {
        json_object_put(pg.metadata);
        return -1;
    }
    out->metadata = pg.metadata;
    out->continue_token = jget_string(pg.metadata, "continue");
    out->resource_version = jget_string(pg.metadata, "resourceVersion");
    return 0;
}

/* A listed item: an object goes to the cache; anything else means the page is not a list. */
static int list_apply(void *ud, struct json_object *item)
{
    if (!json_object_is_type(item, json_type_object))
        return -1;
    apply(ud, item, CACHE_FROM_LIST);
    return 0;
}

static void on_list_page(const struct kube_result *res, void *ud)
{
    struct cache_reflector *r = ud;
    r->list_call = NULL;
    int unpaged = r->unpaged;
    r->unpaged = 0;
    if (res->rc < 0) {
        r->listing = 0;
        if (r->cont && res->status && kube_status_is_expired(res->status)) {
            /* The continue token outlived its snapshot: the pages took longer than compaction,
             * and so would the next paged list. One unpaged list, as client-go's pager does
             * (FullListIfExpired); when that fails too, the backoff decides. */
            r->stats.relists_410++;
            r->unpaged = 1;
            list_page(r, NULL);
            return;
        }
        if (!unpaged && res->rc == -TELO_ETOOBIG && r->page_now > 1) {
            /* The same page again, half as long: a page of one object always fits. */
            r->page_now /= 2;
            char name[160];
            describe(r, name, sizeof(name));
            telo_log(TELO_LOG_WARN, "list page too large; asking for smaller pages",
                     "resource=%s page_size=%ld", name, r->page_now);
            r->listing = 1;
            list_page(r, r->cont);
            return;
        }
        fail(r, "list", res->err);
        return;
    }
    struct cache_list_page pg;
    int bad = !res->body || !res->body->data ||
              cache_list_page_decode(res->body->data, res->body->len, list_apply, r, &pg) < 0;
    if (bad) {
        r->listing = 0;
        struct telo_err err;
        telo_err_set(&err, TELO_EPROTO, "the API server's list page is not a JSON list");
        fail(r, "list", &err);
        return;
    }
    const char *cont = pg.continue_token, *rv = pg.resource_version;
    if (cont && *cont) {
        list_page(r, cont);
        json_object_put(pg.metadata);
        return;
    }
    /* The pages share one snapshot; the last page's version is where the watch resumes. */
    set_rv(r, rv);
    json_object_put(pg.metadata);
    cache_store_sweep_stale(r->store, swept, r);
    r->listing = 0;
#ifdef __GLIBC__
    /* Hand the pages' transient memory back to the system, or the process keeps the list's
     * high-water mark for good (glibc keeps freed heap by default). */
    malloc_trim(0);
#endif
    r->stats.lists++;
    if (!r->synced) {
        r->synced = 1;
        char name[160];
        describe(r, name, sizeof(name));
        telo_log(TELO_LOG_INFO, "cache synced", "resource=%s objects=%zu resourceVersion=%s", name,
                 cache_store_len(r->store), r->rv);
    }
    if (r->handlers.on_synced)
        r->handlers.on_synced(r->handlers.ud);
    start_watch(r);
}

static void list_page(struct cache_reflector *r, const char *continue_token)
{
    if (!continue_token) {
        r->listing = 1;
        cache_store_mark_stale(r->store);
    }
    if (continue_token != r->cont) {
        free(r->cont);
        r->cont = continue_token ? strdup(continue_token) : NULL;
        if (continue_token && !r->cont) {
            struct telo_err err;
            telo_err_set(&err, TELO_ENOMEM, "out of memory");
            r->listing = 0;
            fail(r, "list", &err);
            return;
        }
    }
    struct kube_list_opts o = {
        .label_selector = r->label_selector,
        .field_selector = r->field_selector,
        .limit = r->unpaged ? 0 : r->page_now,
        .continue_token = continue_token,
        .raw_body = 1,
    };
    struct telo_err err;
    r->list_call = kube_rest_list(r->t, &r->ref, &o, on_list_page, r, &err);
    if (!r->list_call) {
        r->listing = 0;
        fail(r, "list", &err);
    }
}

/* --- watch ------------------------------------------------------------------------------- */

static int on_watch_event(struct kube_watch *w, enum kube_watch_type type, struct json_object *obj,
                          void *ud)
{
    (void)w;
    struct cache_reflector *r = ud;
    r->watch_events++;
    r->stats.events++;
    switch (type) {
    case KUBE_WATCH_ADDED:
    case KUBE_WATCH_MODIFIED:
        apply(r, obj, CACHE_FROM_WATCH);
        break;
    case KUBE_WATCH_DELETED:
        remove_object(r, obj);
        break;
    default: /* bookmarks only move the resourceVersion, which the watch tracks */
        break;
    }
    return 0;
}

static void on_watch_end(struct kube_watch *w, enum kube_watch_end reason,
                         const struct kube_status *st, const struct telo_err *err, void *ud)
{
    (void)st;
    struct cache_reflector *r = ud;
    set_rv(r, kube_watch_resource_version(w));
    double lasted = ev_now(r->loop) - r->watch_started;
    /* err belongs to the watch: keep a copy for fail() before freeing it. */
    struct telo_err saved;
    telo_err_clear(&saved);
    if (err)
        saved = *err;
    err = err ? &saved : NULL;
    kube_watch_free(w);
    r->watch = NULL;
    if (r->watch_events > 0)
        r->watch_expiries = 0;
    switch (reason) {
    case KUBE_WATCH_END_EXPIRED:
        /* Our resourceVersion was compacted away: only a fresh list can say what exists. */
        r->stats.relists_410++;
        set_rv(r, "");
        if (r->watch_expiries++ == 0) {
            list_page(r, NULL);
            return;
        }
        r->relist_next = 1;
        fail(r, "watch", err);
        return;
    case KUBE_WATCH_END_CLOSED:
        if (lasted >= SHORT_WATCH_S || r->watch_events > 0) {
            start_watch(r);
            return;
        }
        fail(r, "watch", err);
        return;
    case KUBE_WATCH_END_CONNECTION:
        /* The server went away; what we have is still right up to our version: resume. */
        fail(r, "watch", err);
        return;
    default:
        /* The server could not stream our version (an error Status, a stream we could not
         * decode): resuming would likely hit the same wall, so relist after the backoff, as
         * client-go's reflector does after any watch error. */
        r->relist_next = 1;
        fail(r, "watch", err);
        return;
    }
}

static void start_watch(struct cache_reflector *r)
{
    struct kube_watch_opts o = {
        .resource_version = r->rv,
        .label_selector = r->label_selector,
        .field_selector = r->field_selector,
    };
    struct telo_err err;
    r->watch_events = 0;
    r->watch_started = ev_now(r->loop);
    r->watch = kube_watch_start(r->t, &r->ref, &o, on_watch_event, on_watch_end, r, &err);
    if (!r->watch) {
        fail(r, "watch", &err);
        return;
    }
    r->stats.watches++;
}

/* --- lifecycle --------------------------------------------------------------------------- */

struct cache_reflector *cache_reflector_new(struct kube_transport *t,
                                            const struct cache_reflector_config *cfg,
                                            const struct cache_handlers *handlers,
                                            struct telo_err *err)
{
    if (!cfg->ref.version || !cfg->ref.resource) {
        telo_err_set(err, TELO_EINVAL, "reflector: ref.version and ref.resource are required");
        return NULL;
    }
    struct cache_reflector *r = calloc(1, sizeof(*r));
    if (!r)
        goto nomem;
    r->t = t;
    r->loop = kube_transport_loop(t);
    r->group = dup_opt(cfg->ref.group);
    r->version = strdup(cfg->ref.version);
    r->resource = strdup(cfg->ref.resource);
    r->namespace = dup_opt(cfg->ref.namespace);
    r->label_selector = dup_opt(cfg->label_selector);
    r->field_selector = dup_opt(cfg->field_selector);
    r->rv = strdup("");
    r->store = cache_store_new(cfg->indexes, cfg->nindexes);
    if (!r->version || !r->resource || !r->rv || !r->store ||
        (cfg->ref.group && *cfg->ref.group && !r->group) ||
        (cfg->ref.namespace && *cfg->ref.namespace && !r->namespace))
        goto nomem;
    cache_store_set_tag(r->store, cfg->tag);
    r->ref = (struct kube_ref){.group = r->group,
                               .version = r->version,
                               .resource = r->resource,
                               .namespace = r->namespace};
    r->page_size = cfg->page_size > 0 ? cfg->page_size : 500;
    r->page_now = r->page_size;
    r->transform = cfg->transform;
    r->transform_arg = cfg->transform_arg;
    r->backoff_initial = cfg->backoff_initial > 0 ? cfg->backoff_initial : 0.8;
    r->backoff_max = cfg->backoff_max > 0 ? cfg->backoff_max : 30;
    r->backoff_reset = cfg->backoff_reset > 0 ? cfg->backoff_reset : 120;
    if (handlers)
        r->handlers = *handlers;
    ev_timer_init(&r->retry, on_retry, 0, 0);
    r->retry.data = r;
    return r;
nomem:
    cache_reflector_free(r);
    telo_err_set(err, TELO_ENOMEM, "reflector: out of memory");
    return NULL;
}

void cache_reflector_free(struct cache_reflector *r)
{
    if (!r)
        return;
    if (r->loop)
        ev_timer_stop(r->loop, &r->retry);
    kube_call_cancel(r->list_call);
    kube_watch_free(r->watch);
    free(r->cont);
    cache_store_free(r->store);
    free(r->group);
    free(r->version);
    free(r->resource);
    free(r->namespace);
    free(r->label_selector);
    free(r->field_selector);
    free(r->rv);
    free(r);
}

int cache_reflector_start(struct cache_reflector *r, struct telo_err *err)
{
    (void)err;
    list_page(r, NULL);
    return 0;
}

int cache_reflector_has_synced(const struct cache_reflector *r)
{
    return r->synced;
}

const struct cache_store *cache_reflector_store(const struct cache_reflector *r)
{
    return r->store;
}

const char *cache_reflector_resource_version(const struct cache_reflector *r)
{
    return r->rv;
}

const char *cache_reflector_last_error(const struct cache_reflector *r)
{
    return r->last_error;
}

const struct cache_reflector_stats *cache_reflector_stats(const struct cache_reflector *r)
{
    return &r->stats;
}
