/* Tests for pkg/cache/slab.c: size classes, blocks that never overlap, pages that go back when
 * empty, an allocator that outlives its owner's release, and the churn it exists for. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "cache/slab.h"

#include <stdlib.h>
#include <string.h>

#define PAGE ((size_t)64 * 1024)

static void size_classes_round_up_by_at_most_an_eighth(void **state)
{
    (void)state;
    assert_int_equal(cache_slab_block_bytes(0), 0);
    assert_int_equal(cache_slab_block_bytes(1), 16);
    assert_int_equal(cache_slab_block_bytes(16), 16);
    assert_int_equal(cache_slab_block_bytes(17), 32);
    assert_int_equal(cache_slab_block_bytes(128), 128);
    assert_int_equal(cache_slab_block_bytes(129), 144);
    assert_int_equal(cache_slab_block_bytes(256), 256);
    assert_int_equal(cache_slab_block_bytes(257), 288);
    assert_int_equal(cache_slab_block_bytes(600), 640);
    assert_int_equal(cache_slab_block_bytes(4095), 4096);
    assert_int_equal(cache_slab_block_bytes(CACHE_SLAB_MAX), CACHE_SLAB_MAX);
    assert_int_equal(cache_slab_block_bytes(CACHE_SLAB_MAX + 1), 0);
    size_t last = 0;
    for (size_t size = 1; size <= CACHE_SLAB_MAX; size++) {
        size_t b = cache_slab_block_bytes(size);
        assert_true(b >= size);
        assert_true(b % 16 == 0);
        assert_true(b >= last); /* monotonic: a larger request never gets a smaller class */
        if (size > 128)
            assert_true(b - size < size / 8 + 1);
        last = b;
    }
}

static void out_of_range_sizes_get_no_block(void **state)
{
    (void)state;
    struct cache_slab *a = cache_slab_new();
    assert_null(cache_slab_alloc(a, 0));
    assert_null(cache_slab_alloc(a, CACHE_SLAB_MAX + 1));
    assert_int_equal(cache_slab_page_bytes(a), 0);
    cache_slab_free(NULL);
    cache_slab_release(a);
}

/* Every block holds its own bytes: filled with its index, all still intact once all exist. */
static void blocks_are_aligned_and_never_overlap(void **state)
{
    (void)state;
    enum { N = 5000 };
    struct cache_slab *a = cache_slab_new();
    unsigned char **blocks = calloc(N, sizeof(*blocks));
    size_t *sizes = calloc(N, sizeof(*sizes));
    unsigned seed = 7;
    for (int i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        sizes[i] = 1 + (seed >> 8) % CACHE_SLAB_MAX;
        blocks[i] = cache_slab_alloc(a, sizes[i]);
        assert_non_null(blocks[i]);
        assert_int_equal((uintptr_t)blocks[i] % 16, 0);
        memset(blocks[i], i & 0xff, sizes[i]);
        /* Free every third at once, so later blocks reuse its slot. */
        if (i % 3 == 0) {
            cache_slab_free(blocks[i]);
            blocks[i] = NULL;
        }
    }
    for (int i = 0; i < N; i++) {
        for (size_t j = 0; blocks[i] && j < sizes[i]; j++)
            assert_int_equal(blocks[i][j], i & 0xff);
    }
    for (int i = 0; i < N; i++)
        cache_slab_free(blocks[i]);
    assert_int_equal(cache_slab_page_bytes(a), 0);
    cache_slab_release(a);
    free(sizes);
    free(blocks);
}

/* The pattern of a burst: every object replaced by a larger version. The old versions' class
 * empties and its pages go back; what stays is the new versions' pages, nearly full. */
static void replaced_versions_leave_no_pages_behind(void **state)
{
    (void)state;
    enum { N = 10000, V1 = 420, V2 = 610 };
    struct cache_slab *a = cache_slab_new();
    void **objs = calloc(N, sizeof(*objs));
    for (int i = 0; i < N; i++)
        objs[i] = cache_slab_alloc(a, V1);
    size_t v1_pages = cache_slab_page_bytes(a);
    for (int i = 0; i < N; i++) {
        void *next = cache_slab_alloc(a, V2);
        assert_non_null(next);
        cache_slab_free(objs[i]);
        objs[i] = next;
    }
    size_t need = (size_t)N * cache_slab_block_bytes(V2);
    size_t have = cache_slab_page_bytes(a);
    print_message("%d blocks of %d B: %zu B of blocks on %zu B of pages (%zu B for the first "
                  "version's)\n",
                  N, V2, need, have, v1_pages);
    assert_true(have >= need);
    assert_true(have < need + need / 50 + PAGE); /* under 2 % and a page of slack */
    for (int i = 0; i < N; i++)
        cache_slab_free(objs[i]);
    assert_int_equal(cache_slab_page_bytes(a), 0);
    cache_slab_release(a);
    free(objs);
}

/* A handler may free a replaced object after its store is gone: the allocator lives until its
 * last block is freed (valgrind and ASan see a leak or a use after free if it does not). */
static void a_released_allocator_lives_until_its_last_block(void **state)
{
    (void)state;
    struct cache_slab *a = cache_slab_new();
    void *x = cache_slab_alloc(a, 100), *y = cache_slab_alloc(a, 3000);
    assert_non_null(x);
    assert_non_null(y);
    cache_slab_release(a);
    memset(y, 1, 3000);
    cache_slab_free(x);
    cache_slab_free(y);
}

/* A freed block is reused before a new page is mapped. */
static void a_freed_block_is_reused(void **state)
{
    (void)state;
    struct cache_slab *a = cache_slab_new();
    void *keep = cache_slab_alloc(a, 500);
    void *x = cache_slab_alloc(a, 500);
    cache_slab_free(x);
    void *y = cache_slab_alloc(a, 490);
    assert_ptr_equal(x, y);
    assert_int_equal(cache_slab_page_bytes(a), PAGE);
    cache_slab_free(y);
    cache_slab_free(keep);
    cache_slab_release(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(size_classes_round_up_by_at_most_an_eighth),
        cmocka_unit_test(out_of_range_sizes_get_no_block),
        cmocka_unit_test(blocks_are_aligned_and_never_overlap),
        cmocka_unit_test(replaced_versions_leave_no_pages_behind),
        cmocka_unit_test(a_released_allocator_lives_until_its_last_block),
        cmocka_unit_test(a_freed_block_is_reused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
