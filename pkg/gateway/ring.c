/* The replay ring of one session: the latest output as numbered chunks within a byte budget, so
 * every client reads from its own position and a late one gets the scrollback. Pure. */
#include "gateway/ring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Chunks are stored whole and contiguous: one that does not fit before the end of the storage
 * starts again at offset 0, and the oldest chunks in its way are evicted. So the chunks run in age
 * order from the write position round to it again, and eviction always takes the oldest. */
struct entry {
    size_t off;
    size_t len;
};

struct gw_ring {
    uint8_t *data;
    size_t cap;
    size_t write_pos;
    struct entry *entries;
    size_t max_chunks;
    size_t head; /* index of the oldest entry */
    size_t count;
    uint64_t first_seq;
    uint64_t total;
    size_t held;
};

struct gw_ring *gw_ring_new(size_t capacity, size_t max_chunks)
{
    if (capacity == 0)
        return NULL;
    if (max_chunks == 0)
        max_chunks = capacity / 64 + 1;
    struct gw_ring *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->data = malloc(capacity);
    r->entries = calloc(max_chunks, sizeof(*r->entries));
    if (r->data == NULL || r->entries == NULL) {
        gw_ring_free(r);
        return NULL;
    }
    r->cap = capacity;
    r->max_chunks = max_chunks;
    r->first_seq = 1;
    return r;
}

void gw_ring_free(struct gw_ring *r)
{
    if (r == NULL)
        return;
    free(r->data);
    free(r->entries);
    free(r);
}

static void evict_oldest(struct gw_ring *r)
{
    r->held -= r->entries[r->head].len;
    r->head = (r->head + 1) % r->max_chunks;
    r->count--;
    r->first_seq++;
}

uint64_t gw_ring_append(struct gw_ring *r, const void *data, size_t len)
{
    if (len == 0)
        return 0;
    const uint8_t *p = data;
    r->total += len;
    if (len > r->cap) {
        p += len - r->cap;
        len = r->cap;
    }
    size_t pos = r->write_pos;
    int wrapped = 0;
    if (pos + len > r->cap) {
        pos = 0;
        wrapped = 1;
    }
    while (r->count > 0) {
        const struct entry *old = &r->entries[r->head];
        int tail = wrapped && old->off >= r->write_pos;
        int overlaps = old->off < pos + len && old->off + old->len > pos;
        if (!tail && !overlaps && r->count < r->max_chunks)
            break;
        evict_oldest(r);
    }
    memcpy(r->data + pos, p, len);
    r->entries[(r->head + r->count) % r->max_chunks] = (struct entry){.off = pos, .len = len};
    r->count++;
    r->held += len;
    r->write_pos = pos + len;
    return r->first_seq + r->count - 1;
}

uint64_t gw_ring_first(const struct gw_ring *r)
{
    return r->first_seq;
}

uint64_t gw_ring_next(const struct gw_ring *r)
{
    return r->first_seq + r->count;
}

uint64_t gw_ring_total_bytes(const struct gw_ring *r)
{
    return r->total;
}

size_t gw_ring_bytes(const struct gw_ring *r)
{
    return r->held;
}

static const struct entry *entry_of(const struct gw_ring *r, uint64_t seq)
{
    return &r->entries[(r->head + (size_t)(seq - r->first_seq)) % r->max_chunks];
}

int gw_ring_get(const struct gw_ring *r, uint64_t seq, struct gw_chunk *out)
{
    return gw_ring_get_run(r, seq, 0, out) > 0;
}

size_t gw_ring_get_run(const struct gw_ring *r, uint64_t seq, size_t max_bytes,
                       struct gw_chunk *out)
{
    uint64_t next = r->first_seq + r->count;
    if (seq < r->first_seq || seq >= next)
        return 0;
    const struct entry *e = entry_of(r, seq);
    out->seq = seq;
    out->data = r->data + e->off;
    out->len = e->len;
    size_t n = 1;
    /* A chunk that wrapped to offset 0 starts a new span. */
    for (uint64_t s = seq + 1; s < next; s++, n++) {
        e = entry_of(r, s);
        if (e->off != (size_t)(out->data - r->data) + out->len || out->len + e->len > max_bytes)
            break;
        out->len += e->len;
    }
    return n;
}
