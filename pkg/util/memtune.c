/* Process-wide allocator settings for the long-running binaries that hold informer caches. */
#include "util/memtune.h"

#include <stdlib.h> /* defines __GLIBC__ when it is glibc */
#ifdef __GLIBC__
#include <malloc.h>
#endif

void util_memtune(void)
{
#ifdef __GLIBC__
    /* Setting it at all is what turns the dynamic adjustment off (mallopt(3)). */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
}

/* A sanitizer's allocator replaces glibc's, whose mallinfo2 then reports nothing. */
#if defined(__SANITIZE_ADDRESS__)
#define FOREIGN_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FOREIGN_MALLOC 1
#endif
#endif

int util_memtune_heap(double *in_use, double *free_bytes)
{
#if defined(__GLIBC__) && !defined(FOREIGN_MALLOC)
    struct mallinfo2 mi = mallinfo2();
    *in_use = (double)(mi.uordblks + mi.hblkhd);
    *free_bytes = (double)mi.fordblks;
    return 0;
#else
    (void)in_use;
    (void)free_bytes;
    return -1;
#endif
}

int util_memtune_trim(size_t min_free)
{
#ifdef __GLIBC__
    struct mallinfo2 mi = mallinfo2();
    if (mi.fordblks < min_free)
        return 0;
    (void)malloc_trim(0);
    return 1;
#else
    (void)min_free;
    return 0;
#endif
}
