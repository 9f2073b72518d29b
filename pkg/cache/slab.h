/* Blocks for the informer cache's long-lived objects, on pages that hold nothing else.
 *
 * A burst of watch events interleaves every stored object's allocation with parse trees, request
 * bodies and the object's own older versions, all freed a moment later. In glibc's heap the
 * survivors end up scattered among those holes, and a page that keeps one survivor stays
 * resident: at 10,000 sessions the operator had 14.8 MB in use in a 45 MB resident heap at the end
 * of a burst, against 24.6 MB RSS for the same cache built by one list (bench/scale, 2026-12-03).
 * Here a page holds blocks of one size class only, so a version replaced by a larger one frees a
 * block that the next object of that class reuses, and a page whose last block is freed goes back
 * to the kernel at once.
 *
 * Single-threaded, like the store that owns it. */
#ifndef TELO_CACHE_SLAB_H
#define TELO_CACHE_SLAB_H

#include <stddef.h>

/* Larger blocks are the caller's to malloc. */
#define CACHE_SLAB_MAX 4096

struct cache_slab;

/* Returns an empty allocator, or NULL when out of memory. Its owner lets go of it with
 * cache_slab_release. */
struct cache_slab *cache_slab_new(void);

/* The owner is done with a: a is freed now if it holds no block, else when its last block is
 * freed (blocks may outlive their store: a handler can free a replaced object later). Accepts
 * NULL. */
void cache_slab_release(struct cache_slab *a);

/* Returns a block of at least size bytes (1..CACHE_SLAB_MAX), 16-byte aligned and uninitialized,
 * or NULL when size is out of that range or memory is out. Free it with cache_slab_free. */
void *cache_slab_alloc(struct cache_slab *a, size_t size);

/* Frees a block from cache_slab_alloc. Accepts NULL. */
void cache_slab_free(void *block);

/* The bytes a block of size bytes takes: its size class (at most 1/8 more than size). */
size_t cache_slab_block_bytes(size_t size);

/* Bytes of the pages a holds (mapped and resident once touched). */
size_t cache_slab_page_bytes(const struct cache_slab *a);

#endif
