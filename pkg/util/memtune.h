/* Process-wide allocator settings for the long-running binaries that hold informer caches. */
#ifndef TELO_UTIL_MEMTUNE_H
#define TELO_UTIL_MEMTUNE_H

/* Fixes glibc's mmap threshold at its default of 128 KiB, so a list page's buffers (megabytes)
 * always get their own mappings and go back to the system when freed. glibc otherwise raises
 * the threshold to the size of the first such chunk it frees and serves the next pages from the
 * heap, where the cache's small objects then sit between their holes: 10,000 cached pods cost
 * 1.1 KiB each in RSS that way instead of 0.85. Call once at the start of main, before any
 * allocation of note; a no-op without glibc. */
void util_memtune(void);

#endif
