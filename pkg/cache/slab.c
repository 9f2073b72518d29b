/* Size-classed blocks on 64 KiB pages of their own (slab.h says why). */
/* MAP_ANONYMOUS is not POSIX.1-2008's; glibc declares it for the default feature set. */
#define _DEFAULT_SOURCE
#include "cache/slab.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

/* Sanitizers and valgrind see the blocks as allocations of their own, so a read of a freed cached
 * object is reported as it was when the store used malloc. */
#if defined(__SANITIZE_ADDRESS__)
#define SLAB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLAB_ASAN 1
#endif
#endif
#ifdef SLAB_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n)   ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n)   ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif
#ifdef TELO_HAVE_VALGRIND_MEMCHECK /* CMakeLists.txt: when the headers are there */
#include <valgrind/memcheck.h>
#else
#define VALGRIND_MALLOCLIKE_BLOCK(p, n, redzone, zeroed) ((void)(p), (void)(n))
#define VALGRIND_FREELIKE_BLOCK(p, redzone)              ((void)(p))
#define VALGRIND_MAKE_MEM_NOACCESS(p, n)                 ((void)(p), (void)(n))
#endif

#define PAGE_BYTES ((size_t)64 * 1024)
#define MIN_BLOCK  ((size_t)16)
#define MAX_BLOCKS (PAGE_BYTES / MIN_BLOCK)
/* 16-byte steps up to 128 bytes, then 8 classes per doubling up to CACHE_SLAB_MAX: a block wastes
 * at most 1/8 of itself, and a store's objects spread over few classes. */
#define LINEAR_CLASSES       8
#define CLASSES_PER_DOUBLING 8
#define NCLASSES             (LINEAR_CLASSES + 5 * CLASSES_PER_DOUBLING) /* 128 .. 4096: 5 doublings */

struct page {
    struct cache_slab *owner;
    struct page *prev, *next; /* the owner's pages of this class with a free block */
    unsigned cls;
    unsigned nblocks, nused;
    unsigned hint;                  /* every word of used below this one is full */
    uint64_t used[MAX_BLOCKS / 64]; /* a set bit: the block is in use, or past nblocks */
};

#define HEADER_BYTES ((sizeof(struct page) + MIN_BLOCK - 1) & ~(MIN_BLOCK - 1))

struct cache_slab {
    struct page *partial[NCLASSES]; /* a full page is in no list: a free finds it by address */
    size_t pages;
    int released;
};

static unsigned class_of(size_t size)
{
    if (size <= LINEAR_CLASSES * MIN_BLOCK)
        return (unsigned)((size + MIN_BLOCK - 1) / MIN_BLOCK) - 1;
    /* size - 1 in [128, 4095]: the doubling is its highest bit. */
    unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)(size - 1));
    size_t base = (size_t)1 << k, step = base / CLASSES_PER_DOUBLING;
    return LINEAR_CLASSES + (k - 7) * CLASSES_PER_DOUBLING +
           (unsigned)((size - base + step - 1) / step) - 1;
}

static size_t class_bytes(unsigned cls)
{
    if (cls < LINEAR_CLASSES)
        return (cls + 1) * MIN_BLOCK;
    unsigned k = 7 + (cls - LINEAR_CLASSES) / CLASSES_PER_DOUBLING;
    size_t base = (size_t)1 << k;
    return base + base / CLASSES_PER_DOUBLING * ((cls - LINEAR_CLASSES) % CLASSES_PER_DOUBLING + 1);
}

size_t cache_slab_block_bytes(size_t size)
{
    return size == 0 || size > CACHE_SLAB_MAX ? 0 : class_bytes(class_of(size));
}

struct cache_slab *cache_slab_new(void)
{
    return calloc(1, sizeof(struct cache_slab));
}

void cache_slab_release(struct cache_slab *a)
{
    if (!a)
        return;
    a->released = 1;
    if (a->pages == 0)
        free(a);
}

size_t cache_slab_page_bytes(const struct cache_slab *a)
{
    return a->pages * PAGE_BYTES;
}

static void list_push(struct page **head, struct page *p)
{
    p->prev = NULL;
    p->next = *head;
    if (*head)
        (*head)->prev = p;
    *head = p;
}

static void list_unlink(struct page **head, struct page *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        *head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    p->prev = p->next = NULL;
}

static struct page *page_new(struct cache_slab *a, unsigned cls)
{
    /* mmap aligns to 4 KiB only: map twice the size and keep the aligned page, so that a block's
     * page is its address rounded down. */
    size_t span = 2 * PAGE_BYTES;
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    size_t head = (PAGE_BYTES - (uintptr_t)raw % PAGE_BYTES) % PAGE_BYTES;
    size_t tail = span - head - PAGE_BYTES;
    if (head)
        (void)munmap(raw, head);
    if (tail)
        (void)munmap(raw + head + PAGE_BYTES, tail);
    struct page *p = (struct page *)(void *)(raw + head); /* zeroed by mmap */
    p->owner = a;
    p->cls = cls;
    p->nblocks = (unsigned)((PAGE_BYTES - HEADER_BYTES) / class_bytes(cls));
    for (size_t i = p->nblocks; i < MAX_BLOCKS; i++)
        p->used[i / 64] |= 1ull << (i % 64);
    POISON((char *)p + HEADER_BYTES, PAGE_BYTES - HEADER_BYTES);
    VALGRIND_MAKE_MEM_NOACCESS((char *)p + HEADER_BYTES, PAGE_BYTES - HEADER_BYTES);
    a->pages++;
    return p;
}

static unsigned take_block(struct page *p)
{
    unsigned w = p->hint;
    while (p->used[w] == ~0ull)
        w++; /* the page has a free block, so the scan ends inside used */
    unsigned bit = (unsigned)__builtin_ctzll(~p->used[w]);
    p->used[w] |= 1ull << bit;
    p->hint = w;
    p->nused++;
    return w * 64 + bit;
}

void *cache_slab_alloc(struct cache_slab *a, size_t size)
{
    if (size == 0 || size > CACHE_SLAB_MAX)
        return NULL;
    unsigned cls = class_of(size);
    struct page *p = a->partial[cls];
    if (!p) {
        p = page_new(a, cls);
        if (!p)
            return NULL;
        list_push(&a->partial[cls], p);
    }
    unsigned i = take_block(p);
    if (p->nused == p->nblocks)
        list_unlink(&a->partial[cls], p);
    char *block = (char *)p + HEADER_BYTES + (size_t)i * class_bytes(cls);
    UNPOISON(block, size);
    VALGRIND_MALLOCLIKE_BLOCK(block, size, 0, 0);
    return block;
}

void cache_slab_free(void *block)
{
    if (!block)
        return;
    struct page *p = (struct page *)(void *)((char *)block - (uintptr_t)block % PAGE_BYTES);
    struct cache_slab *a = p->owner;
    size_t bytes = class_bytes(p->cls);
    size_t i = (size_t)((char *)block - (char *)p - HEADER_BYTES) / bytes;
    uint64_t bit = 1ull << (i % 64);
    if (!(p->used[i / 64] & bit))
        abort(); /* a double free, as glibc's free() stops at one */
    VALGRIND_FREELIKE_BLOCK(block, 0);
    POISON(block, bytes);
    p->used[i / 64] &= ~bit;
    if (i / 64 < p->hint)
        p->hint = (unsigned)(i / 64);
    if (p->nused-- == p->nblocks)
        list_push(&a->partial[p->cls], p);
    if (p->nused > 0)
        return;
    list_unlink(&a->partial[p->cls], p);
    UNPOISON(p, PAGE_BYTES);
    (void)munmap(p, PAGE_BYTES);
    if (--a->pages == 0 && a->released)
        free(a);
}
