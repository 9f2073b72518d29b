/* Fair turns: queued items belong to tenants (namespaces), and tenants take turns, one item
 * each, every tenant's items in the order they came. One tenant queueing thousands of items
 * delays another's next one by one item per tenant with work, not by the thousands. The work
 * queue and the reachability prober queue through it.
 *
 * Intrusive and allocation-free on the hot path: the caller embeds a struct wq_turn_link in its
 * item and holds a reference on the item's tenant for as long as the item lives, so queueing
 * never allocates and cannot fail. Several rings (priorities) may share one tenant table. */
#ifndef TELO_WORKQUEUE_TURNS_H
#define TELO_WORKQUEUE_TURNS_H

#include <stddef.h>

struct wq_tenant;
struct wq_tenants;

/* An item's place in a ring. tenant is the caller's reference (wq_tenant_ref). */
struct wq_turn_link {
    struct wq_turn_link *prev, *next;
    struct wq_tenant *tenant;
};

/* One ring: the tenants with queued items, in turn order. Zero-initialised by wq_turns_init. */
struct wq_turns {
    struct wq_tenant *head, *tail;
    size_t len;  /* items, over every tenant */
    size_t ring; /* this ring's index in its table, below the table's nrings */
};

/* A table of tenants for nrings rings. Returns NULL when out of memory. */
struct wq_tenants *wq_tenants_new(size_t nrings);

/* Frees ts and any tenant still in it (their items must not be queued any more). NULL: no-op. */
void wq_tenants_free(struct wq_tenants *ts);

/* The tenant called name, with one more reference; NULL when out of memory. */
struct wq_tenant *wq_tenant_ref(struct wq_tenants *ts, const char *name);

/* Drops a reference; the last one frees the tenant, which must have nothing queued. */
void wq_tenant_unref(struct wq_tenants *ts, struct wq_tenant *t);

/* Tenants held (for tests). */
size_t wq_tenants_len(const struct wq_tenants *ts);

/* The tenant of a key "namespace/name": the text before its first '/' ("" without one), into
 * out (size len; cut to fit). */
void wq_tenant_of_key(const char *key, char *out, size_t len);

/* Starts r empty, as ring index ring of its table. */
void wq_turns_init(struct wq_turns *r, size_t ring);

/* Queues l at the end of its tenant's line; a tenant with nothing queued in r joins the end of
 * the turn. Cannot fail. */
void wq_turns_push(struct wq_turns *r, struct wq_turn_link *l);

/* Takes a queued l out of r; a tenant left with nothing leaves the turn. */
void wq_turns_remove(struct wq_turns *r, struct wq_turn_link *l);

/* Takes the first item of the tenant whose turn it is, and sends that tenant to the end of the
 * turn; NULL when r is empty. */
struct wq_turn_link *wq_turns_pop(struct wq_turns *r);

#endif
