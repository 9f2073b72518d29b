/* Process-wide allocator settings for the long-running binaries that hold informer caches. */
#ifndef TELO_UTIL_MEMTUNE_H
#define TELO_UTIL_MEMTUNE_H

#include <stddef.h>

/* Fixes glibc's mmap threshold at its default of 128 KiB, so a list page's buffers (megabytes)
 * always get their own mappings and go back to the system when freed. glibc otherwise raises
 * the threshold to the size of the first such chunk it frees and serves the next pages from the
 * heap, where the cache's small objects then sit between their holes: 10,000 cached pods cost
 * 1.1 KiB each in RSS that way instead of 0.85. Call once at the start of main, before any
 * allocation of note; a no-op without glibc. */
void util_memtune(void);

/* Gives the heap's free pages back to the system (malloc_trim(3)) when at least min_free bytes
 * of the heap are free: glibc returns only the top of the heap by itself, and a burst of
 * reconciles leaves its garbage between the cache's live objects. Cheap when there is nothing
 * to do (mallinfo2 walks the free lists). Returns 1 when it trimmed, else 0 (and without glibc). */
int util_memtune_trim(size_t min_free);

/* The allocator's own figures: *in_use, the bytes handed out and not freed (mmapped chunks
 * included), and *free_bytes, the bytes it holds free, in holes or at the top of the heap. RSS
 * minus in_use is what fragmentation and the binary cost. Returns 0, or -1 without glibc's
 * allocator (a sanitizer's). */
int util_memtune_heap(double *in_use, double *free_bytes);

#endif
