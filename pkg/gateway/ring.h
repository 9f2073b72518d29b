/* The replay ring of one session: the latest output as numbered chunks within a byte budget, so
 * every client reads from its own position and a late one gets the scrollback. Pure. */
#ifndef TELO_GATEWAY_RING_H
#define TELO_GATEWAY_RING_H

#include <stddef.h>
#include <stdint.h>

struct gw_ring;

/* A chunk as stored; data points into the ring and stays valid until the next gw_ring_append. */
struct gw_chunk {
    uint64_t seq; /* 1 for the first chunk ever appended, then +1 per chunk */
    const uint8_t *data;
    size_t len;
};

/* Creates an empty ring holding at most capacity bytes of output and max_chunks chunks (0: one
 * per 64 bytes of capacity). Returns NULL when capacity is 0 or out of memory. */
struct gw_ring *gw_ring_new(size_t capacity, size_t max_chunks);

/* Frees r. NULL is a no-op. */
void gw_ring_free(struct gw_ring *r);

/* Appends data as one chunk (longer than the capacity: only its last capacity bytes are kept,
 * still as one chunk) and evicts the oldest chunks to make room. Returns the chunk's seq, or 0
 * when len is 0 (nothing stored). Cannot fail. */
uint64_t gw_ring_append(struct gw_ring *r, const void *data, size_t len);

/* The oldest seq still held (equal to gw_ring_next when empty). */
uint64_t gw_ring_first(const struct gw_ring *r);

/* The seq the next chunk will get; gw_ring_next - 1 is the latest. */
uint64_t gw_ring_next(const struct gw_ring *r);

/* Total bytes ever appended (the running byte count). */
uint64_t gw_ring_total_bytes(const struct gw_ring *r);

/* Bytes currently held. */
size_t gw_ring_bytes(const struct gw_ring *r);

/* Fills *out with chunk seq. Returns 1, or 0 when seq is evicted or not written yet. */
int gw_ring_get(const struct gw_ring *r, uint64_t seq, struct gw_chunk *out);

/* Fills *out with chunk seq and the chunks after it that follow it in storage without a gap, as
 * one span of at most max_bytes (but always the whole of chunk seq): out->seq is seq, out->len the
 * span's bytes. Returns how many chunks the span holds, 0 when seq is evicted or not written
 * yet. For readers of a byte stream, which need not see the chunk boundaries. */
size_t gw_ring_get_run(const struct gw_ring *r, uint64_t seq, size_t max_bytes,
                       struct gw_chunk *out);

#endif
