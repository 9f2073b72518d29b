/* The reflector: keeps a store in step with one resource by list, then watch, with relists. */
#ifndef TELO_CACHE_REFLECTOR_H
#define TELO_CACHE_REFLECTOR_H

#include "cache/store.h"
#include "kube/rest.h"
#include "util/err.h"

#include <stddef.h>

struct kube_transport;
struct json_object;

/* Where a change came from: the initial list or a relist (queued behind real changes, as
 * controller-runtime's priority queue does), or the watch. */
enum cache_origin { CACHE_FROM_WATCH = 0, CACHE_FROM_LIST = 1 };

/* What the reflector tells its owner. Objects are borrowed for the call. Any may be NULL. */
struct cache_handlers {
    void (*on_add)(void *ud, const struct cache_object *obj, enum cache_origin origin);
    void (*on_update)(void *ud, const struct cache_object *old, const struct cache_object *obj,
                      enum cache_origin origin);
    void (*on_delete)(void *ud, const struct cache_object *old, enum cache_origin origin);
    /* Once per completed list: the store now reflects the server. */
    void (*on_synced)(void *ud);
    void *ud;
};

struct cache_reflector_config {
    struct kube_ref ref;        /* the collection; strings are copied */
    const char *label_selector; /* copied; NULL for all */
    const char *field_selector; /* copied; NULL for all */
    long page_size;             /* list page; 500 when 0 */
    /* Turns an object from the server into what the store keeps (returns a new reference the
     * reflector puts, or NULL when out of memory). NULL: cache_transform_strip only. */
    struct json_object *(*transform)(struct json_object *obj, void *arg);
    void *transform_arg;
    const struct cache_index_def *indexes;
    size_t nindexes;
    unsigned char (*tag)(struct json_object *obj); /* NULL: none (cache_store_set_tag) */
    double backoff_initial;                        /* seconds; 0.8 when 0 (client-go's reflector) */
    double backoff_max;                            /* 30 when 0 */
    double backoff_reset; /* healthy for this long resets the backoff; 120 when 0 */
};

/* Counters for metrics and tests. */
struct cache_reflector_stats {
    unsigned long lists;       /* completed lists, the first included */
    unsigned long relists_410; /* relists forced by 410 Gone / Expired */
    unsigned long watches;     /* watch streams started */
    unsigned long failures;    /* list or watch failures that backed off */
    unsigned long events;      /* watch events applied */
    double last_backoff;       /* seconds, of the latest backoff */
};

/* Creates a reflector on t (borrowed; must outlive it) with its own store. Nothing happens until
 * cache_reflector_start. Returns NULL with err filled on bad config or out of memory. */
struct cache_reflector *cache_reflector_new(struct kube_transport *t,
                                            const struct cache_reflector_config *cfg,
                                            const struct cache_handlers *handlers,
                                            struct telo_err *err);

/* Stops any request in flight (no further callbacks) and frees r and its store. Accepts NULL. */
void cache_reflector_free(struct cache_reflector *r);

/* Starts the first list. Returns 0, or a negative code with err filled. */
int cache_reflector_start(struct cache_reflector *r, struct telo_err *err);

/* 1 once the first list completed (the informer's HasSynced), else 0. */
int cache_reflector_has_synced(const struct cache_reflector *r);

/* The reflector's store, read-only for everyone else. */
const struct cache_store *cache_reflector_store(const struct cache_reflector *r);

/* The resourceVersion the next watch resumes from ("" before the first list). */
const char *cache_reflector_resource_version(const struct cache_reflector *r);

/* The latest failure, "" when none, for /readyz and logs. */
const char *cache_reflector_last_error(const struct cache_reflector *r);

const struct cache_reflector_stats *cache_reflector_stats(const struct cache_reflector *r);

/* What a list page says beyond its items. The strings are borrowed from metadata. */
struct cache_list_page {
    struct json_object
        *metadata; /* the page's parsed metadata (owned: json_object_put it), or NULL */
    const char *continue_token;   /* metadata.continue when a string, else NULL */
    const char *resource_version; /* metadata.resourceVersion when a string, else NULL */
};

/* Decodes one list page as the API server sends it ({"kind":..,"metadata":{..},"items":[..]}),
 * one item at a time from the text so a page of thousands of objects is never one json-c tree:
 * on_item(ud, item) is called for every item in order, item borrowed for the call (whatever JSON
 * value it is). Returns 0 with *out filled; or -1 with *out empty when the text is not such a
 * list, an item is not complete JSON, or on_item returned a negative value (the rest is not
 * read). Exposed for the reflector's tests and test/fuzz/fuzz_list_page.c. */
int cache_list_page_decode(const char *text, size_t len,
                           int (*on_item)(void *ud, struct json_object *item), void *ud,
                           struct cache_list_page *out);

/* The backoff after `failures` consecutive failures, before jitter: initial * 2^(failures-1),
 * capped. Pure; exposed for tests. */
double cache_reflector_backoff(double initial, double max, unsigned failures);

#endif
