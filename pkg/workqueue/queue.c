/* A rate-limited, delaying work queue of string keys with client-go's semantics, fair across
 * namespaces. */
#include "workqueue/queue.h"

#include "util/err.h"
#include "util/strmap.h"
#include "workqueue/ratelimit.h"
#include "workqueue/turns.h"

#include <stdlib.h>
#include <string.h>

enum priority { PRIORITY_NORMAL = 0, PRIORITY_LOW = 1, PRIORITY_COUNT };

/* Everything the queue knows about one key. It lives while the key is dirty, processing,
 * waiting for a delay, or has a backoff to remember. */
struct item {
    struct wq_turn_link link; /* first: in ready[priority] while queued; holds the tenant */
    int queued;               /* in a ready list */
    int dirty;                /* to be processed (queued, or re-queued at done) */
    int processing;
    enum priority priority;
    size_t heap_index; /* position in the delay heap, or NOT_WAITING */
    double due;        /* when waiting */
    unsigned long long
        due_seq;       /* keys due at the same time come out in the order they were added */
    double added_at;   /* when it became dirty, for the queue-duration metric */
    double started_at; /* when handed out */
    unsigned requeues;
    char key[]; /* the map borrows this */
};

#define NOT_WAITING ((size_t)-1)

struct wq {
    struct wq_config cfg;
    struct strmap *items;
    struct wq_tenants *tenants; /* the namespaces of the items, each item holding a reference */
    struct wq_turns ready[PRIORITY_COUNT];
    struct item **heap; /* min-heap on due */
    size_t heap_len, heap_cap;
    size_t processing;
    unsigned long long seq;
    int shutting_down;
    struct wq_bucket bucket;
    struct wq_metrics metrics;
};

void wq_config_default(struct wq_config *cfg)
{
    cfg->backoff_base = 0.005;
    cfg->backoff_max = 1000;
    cfg->qps = 10;
    cfg->burst = 100;
}

struct wq *wq_new(const struct wq_config *cfg, double now)
{
    struct wq *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    if (cfg)
        q->cfg = *cfg;
    else
        wq_config_default(&q->cfg);
    q->items = strmap_new();
    q->tenants = wq_tenants_new(PRIORITY_COUNT);
    if (!q->items || !q->tenants) {
        strmap_free(q->items);
        wq_tenants_free(q->tenants);
        free(q);
        return NULL;
    }
    for (int p = 0; p < PRIORITY_COUNT; p++)
        wq_turns_init(&q->ready[p], (size_t)p);
    wq_bucket_init(&q->bucket, q->cfg.qps, q->cfg.burst, now);
    /* client-go's workqueue buckets: 10 ns to 1000 s, by tens. */
    histogram_init_exponential(&q->metrics.queue_duration, 1e-8, 10, 12);
    histogram_init_exponential(&q->metrics.work_duration, 1e-8, 10, 12);
    return q;
}

void wq_free(struct wq *q)
{
    if (!q)
        return;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(q->items, &it, &key, &value))
        free(value);
    strmap_free(q->items);
    wq_tenants_free(q->tenants);
    free(q->heap);
    free(q);
}

/* --- the delay heap ---------------------------------------------------------------------- */

static void heap_set(struct wq *q, size_t i, struct item *it)
{
    q->heap[i] = it;
    it->heap_index = i;
}

static int due_before(const struct item *a, const struct item *b)
{
    return a->due < b->due || (a->due == b->due && a->due_seq < b->due_seq);
}

static void heap_up(struct wq *q, size_t i)
{
    struct item *it = q->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!due_before(it, q->heap[parent]))
            break;
        heap_set(q, i, q->heap[parent]);
        i = parent;
    }
    heap_set(q, i, it);
}

static void heap_down(struct wq *q, size_t i)
{
    struct item *it = q->heap[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= q->heap_len)
            break;
        if (child + 1 < q->heap_len && due_before(q->heap[child + 1], q->heap[child]))
            child++;
        if (!due_before(q->heap[child], it))
            break;
        heap_set(q, i, q->heap[child]);
        i = child;
    }
    heap_set(q, i, it);
}

static int heap_push(struct wq *q, struct item *it)
{
    if (q->heap_len == q->heap_cap) {
        size_t cap = q->heap_cap ? q->heap_cap * 2 : 16;
        struct item **heap = realloc(q->heap, cap * sizeof(struct item *));
        if (!heap)
            return -TELO_ENOMEM;
        q->heap = heap;
        q->heap_cap = cap;
    }
    heap_set(q, q->heap_len++, it);
    heap_up(q, it->heap_index);
    return 0;
}

static void heap_remove(struct wq *q, struct item *it)
{
    size_t i = it->heap_index;
    it->heap_index = NOT_WAITING;
    struct item *last = q->heap[--q->heap_len];
    if (i == q->heap_len)
        return;
    heap_set(q, i, last);
    heap_down(q, i);
    heap_up(q, last->heap_index);
}

/* --- items --------------------------------------------------------------------------------- */

static struct item *item_get_or_create(struct wq *q, const char *key)
{
    struct item *it = strmap_get(q->items, key);
    if (it)
        return it;
    size_t len = strlen(key);
    it = calloc(1, sizeof(*it) + len + 1);
    if (!it)
        return NULL;
    memcpy(it->key, key, len + 1);
    it->heap_index = NOT_WAITING;
    char tenant[256];
    wq_tenant_of_key(key, tenant, sizeof(tenant));
    if (!(it->link.tenant = wq_tenant_ref(q->tenants, tenant))) {
        free(it);
        return NULL;
    }
    if (strmap_put(q->items, it->key, it) < 0) {
        wq_tenant_unref(q->tenants, it->link.tenant);
        free(it);
        return NULL;
    }
    return it;
}

/* Frees an item nothing refers to any more. */
static void item_release_if_idle(struct wq *q, struct item *it)
{
    if (it->dirty || it->processing || it->heap_index != NOT_WAITING || it->requeues)
        return;
    strmap_remove(q->items, it->key);
    wq_tenant_unref(q->tenants, it->link.tenant);
    free(it);
}

static void ready_push(struct wq *q, struct item *it)
{
    wq_turns_push(&q->ready[it->priority], &it->link);
    it->queued = 1;
}

static void ready_unlink(struct wq *q, struct item *it)
{
    wq_turns_remove(&q->ready[it->priority], &it->link);
    it->queued = 0;
}

static int add(struct wq *q, const char *key, enum priority priority, double now)
{
    if (q->shutting_down)
        return 0;
    struct item *it = item_get_or_create(q, key);
    if (!it)
        return -TELO_ENOMEM;
    if (it->dirty) {
        /* Already queued (or to be re-queued at done): only a priority upgrade matters. */
        if (priority == PRIORITY_NORMAL && it->priority == PRIORITY_LOW) {
            if (it->queued) {
                ready_unlink(q, it);
                it->priority = priority;
                ready_push(q, it);
            } else {
                it->priority = priority;
            }
        }
        return 0;
    }
    q->metrics.adds++;
    it->dirty = 1;
    it->priority = priority;
    it->added_at = now;
    if (!it->processing)
        ready_push(q, it);
    return 0;
}

int wq_add(struct wq *q, const char *key, double now)
{
    return add(q, key, PRIORITY_NORMAL, now);
}

int wq_add_low(struct wq *q, const char *key, double now)
{
    return add(q, key, PRIORITY_LOW, now);
}

int wq_add_after(struct wq *q, const char *key, double delay, double now)
{
    if (q->shutting_down)
        return 0;
    if (delay <= 0)
        return add(q, key, PRIORITY_NORMAL, now);
    struct item *it = item_get_or_create(q, key);
    if (!it)
        return -TELO_ENOMEM;
    double due = now + delay;
    if (it->heap_index != NOT_WAITING) {
        if (due < it->due) {
            it->due = due;
            it->due_seq = ++q->seq;
            heap_up(q, it->heap_index);
        }
        return 0;
    }
    it->due = due;
    it->due_seq = ++q->seq;
    if (heap_push(q, it) < 0) {
        item_release_if_idle(q, it);
        return -TELO_ENOMEM;
    }
    return 0;
}

int wq_add_rate_limited(struct wq *q, const char *key, double now)
{
    if (q->shutting_down)
        return 0;
    struct item *it = item_get_or_create(q, key);
    if (!it)
        return -TELO_ENOMEM;
    double item_delay = wq_backoff_delay(q->cfg.backoff_base, q->cfg.backoff_max, it->requeues);
    it->requeues++;
    double bucket_delay = wq_bucket_reserve(&q->bucket, now);
    q->metrics.retries++;
    return wq_add_after(q, key, item_delay > bucket_delay ? item_delay : bucket_delay, now);
}

void wq_forget(struct wq *q, const char *key)
{
    struct item *it = strmap_get(q->items, key);
    if (!it)
        return;
    it->requeues = 0;
    item_release_if_idle(q, it);
}

unsigned wq_num_requeues(const struct wq *q, const char *key)
{
    const struct item *it = strmap_get(q->items, key);
    return it ? it->requeues : 0;
}

/* Queues every waiting key whose time has come. */
static void promote_due(struct wq *q, double now)
{
    while (q->heap_len > 0 && q->heap[0]->due <= now) {
        struct item *it = q->heap[0];
        heap_remove(q, it);
        /* Cannot fail: the item exists, so add allocates nothing. */
        (void)add(q, it->key, PRIORITY_NORMAL, now);
    }
}

const char *wq_get(struct wq *q, double now)
{
    promote_due(q, now);
    for (int p = 0; p < PRIORITY_COUNT; p++) {
        struct item *it = (struct item *)wq_turns_pop(&q->ready[p]);
        if (!it)
            continue;
        it->queued = 0;
        it->dirty = 0;
        it->processing = 1;
        it->started_at = now;
        q->processing++;
        histogram_observe(&q->metrics.queue_duration, now - it->added_at);
        return it->key;
    }
    return NULL;
}

void wq_done(struct wq *q, const char *key, double now)
{
    struct item *it = strmap_get(q->items, key);
    if (!it || !it->processing)
        return;
    it->processing = 0;
    q->processing--;
    histogram_observe(&q->metrics.work_duration, now - it->started_at);
    /* Even during shutdown: a key added before it is still owed a run, and draining gives it. */
    if (it->dirty)
        ready_push(q, it);
    else
        item_release_if_idle(q, it);
}

double wq_next_due(const struct wq *q)
{
    return q->heap_len ? q->heap[0]->due : -1;
}

size_t wq_len(const struct wq *q)
{
    return q->ready[PRIORITY_NORMAL].len + q->ready[PRIORITY_LOW].len;
}

size_t wq_processing(const struct wq *q)
{
    return q->processing;
}

void wq_running_times(const struct wq *q, double now, double *longest, double *total)
{
    *longest = 0;
    *total = 0;
    struct strmap_iter iter = {0};
    const char *key;
    void *value;
    while (strmap_next(q->items, &iter, &key, &value)) {
        const struct item *it = value;
        if (!it->processing)
            continue;
        double running = now - it->started_at;
        *total += running;
        if (running > *longest)
            *longest = running;
    }
}

void wq_shutdown(struct wq *q)
{
    q->shutting_down = 1;
    /* Every waiting item leaves, so the heap is emptied from its end without re-ordering. */
    while (q->heap_len > 0) {
        struct item *it = q->heap[--q->heap_len];
        it->heap_index = NOT_WAITING;
        item_release_if_idle(q, it);
    }
}

int wq_drained(const struct wq *q)
{
    return q->shutting_down && wq_len(q) == 0 && q->processing == 0;
}

const struct wq_metrics *wq_metrics(const struct wq *q)
{
    return &q->metrics;
}
