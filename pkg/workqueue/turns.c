/* Fair turns: tenants with queued items take turns, one item each. */
#include "workqueue/turns.h"

#include "util/strmap.h"

#include <stdlib.h>
#include <string.h>

/* A tenant's queued items of one ring, in order, and its place in that ring's turn. */
struct lane {
    struct wq_turn_link *head, *tail;
    struct wq_tenant *prev, *next; /* in the ring while the lane has items */
    int in_ring;
};

struct wq_tenant {
    size_t refs;
    struct lane *lanes; /* one per ring of the table */
    char name[];        /* the map borrows this */
};

struct wq_tenants {
    struct strmap *by_name;
    size_t nrings;
};

struct wq_tenants *wq_tenants_new(size_t nrings)
{
    struct wq_tenants *ts = calloc(1, sizeof(*ts));
    if (!ts)
        return NULL;
    ts->nrings = nrings;
    if (!(ts->by_name = strmap_new())) {
        free(ts);
        return NULL;
    }
    return ts;
}

static void tenant_free(struct wq_tenant *t)
{
    free(t->lanes);
    free(t);
}

void wq_tenants_free(struct wq_tenants *ts)
{
    if (!ts)
        return;
    struct strmap_iter it = {0};
    const char *name;
    void *value;
    while (strmap_next(ts->by_name, &it, &name, &value))
        tenant_free(value);
    strmap_free(ts->by_name);
    free(ts);
}

struct wq_tenant *wq_tenant_ref(struct wq_tenants *ts, const char *name)
{
    struct wq_tenant *t = strmap_get(ts->by_name, name);
    if (!t) {
        size_t len = strlen(name);
        if (!(t = calloc(1, sizeof(*t) + len + 1)))
            return NULL;
        memcpy(t->name, name, len + 1);
        if (!(t->lanes = calloc(ts->nrings ? ts->nrings : 1, sizeof(struct lane))) ||
            strmap_put(ts->by_name, t->name, t) < 0) {
            tenant_free(t);
            return NULL;
        }
    }
    t->refs++;
    return t;
}

void wq_tenant_unref(struct wq_tenants *ts, struct wq_tenant *t)
{
    if (!t || --t->refs > 0)
        return;
    strmap_remove(ts->by_name, t->name);
    tenant_free(t);
}

size_t wq_tenants_len(const struct wq_tenants *ts)
{
    return strmap_len(ts->by_name);
}

void wq_tenant_of_key(const char *key, char *out, size_t len)
{
    if (len == 0)
        return;
    const char *slash = strchr(key, '/');
    size_t n = slash ? (size_t)(slash - key) : 0;
    if (n >= len)
        n = len - 1;
    memcpy(out, key, n);
    out[n] = '\0';
}

void wq_turns_init(struct wq_turns *r, size_t ring)
{
    memset(r, 0, sizeof(*r));
    r->ring = ring;
}

static void ring_append(struct wq_turns *r, struct wq_tenant *t)
{
    struct lane *l = &t->lanes[r->ring];
    l->prev = r->tail;
    l->next = NULL;
    if (r->tail)
        r->tail->lanes[r->ring].next = t;
    else
        r->head = t;
    r->tail = t;
    l->in_ring = 1;
}

static void ring_remove(struct wq_turns *r, struct wq_tenant *t)
{
    struct lane *l = &t->lanes[r->ring];
    if (l->prev)
        l->prev->lanes[r->ring].next = l->next;
    else
        r->head = l->next;
    if (l->next)
        l->next->lanes[r->ring].prev = l->prev;
    else
        r->tail = l->prev;
    l->prev = l->next = NULL;
    l->in_ring = 0;
}

void wq_turns_push(struct wq_turns *r, struct wq_turn_link *item)
{
    struct lane *l = &item->tenant->lanes[r->ring];
    item->prev = l->tail;
    item->next = NULL;
    if (l->tail)
        l->tail->next = item;
    else
        l->head = item;
    l->tail = item;
    if (!l->in_ring)
        ring_append(r, item->tenant);
    r->len++;
}

void wq_turns_remove(struct wq_turns *r, struct wq_turn_link *item)
{
    struct lane *l = &item->tenant->lanes[r->ring];
    if (item->prev)
        item->prev->next = item->next;
    else
        l->head = item->next;
    if (item->next)
        item->next->prev = item->prev;
    else
        l->tail = item->prev;
    if (!l->head)
        ring_remove(r, item->tenant);
    r->len--;
    item->prev = item->next = NULL;
}

struct wq_turn_link *wq_turns_pop(struct wq_turns *r)
{
    struct wq_tenant *t = r->head;
    if (!t)
        return NULL;
    struct wq_turn_link *item = t->lanes[r->ring].head;
    wq_turns_remove(r, item);
    /* One item per tenant per turn: a tenant with more goes to the back. */
    if (t->lanes[r->ring].in_ring && r->tail != t) {
        ring_remove(r, t);
        ring_append(r, t);
    }
    return item;
}
