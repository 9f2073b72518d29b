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
