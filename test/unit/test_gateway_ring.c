/* Tests for pkg/gateway/ring.c: the replay ring's chunks, eviction and byte count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "gateway/ring.h"

#include <stdio.h>
#include <string.h>

static void numbers_chunks_from_one_and_counts_bytes(void **state)
{
    (void)state;
    struct gw_ring *r = gw_ring_new(100, 0);
    assert_non_null(r);
    assert_int_equal(gw_ring_first(r), 1);
    assert_int_equal(gw_ring_next(r), 1);
    assert_int_equal(gw_ring_append(r, "", 0), 0);
    assert_int_equal(gw_ring_append(r, "abc", 3), 1);
    assert_int_equal(gw_ring_append(r, "de", 2), 2);
    struct gw_chunk c;
    assert_true(gw_ring_get(r, 1, &c));
    assert_int_equal(c.len, 3);
    assert_memory_equal(c.data, "abc", 3);
    assert_true(gw_ring_get(r, 2, &c));
    assert_memory_equal(c.data, "de", 2);
    assert_false(gw_ring_get(r, 3, &c));
    assert_false(gw_ring_get(r, 0, &c));
    assert_int_equal(gw_ring_total_bytes(r), 5);
    assert_int_equal(gw_ring_bytes(r), 5);
    gw_ring_free(r);
}

/* Whatever the pattern of sizes, the ring holds a contiguous run of the newest chunks, each
 * intact, within its capacity, and the running byte count covers everything ever written. */
/* A run spans the chunks that lie together in storage, never more than asked (save a first chunk
 * that alone is more), and stops where the storage wrapped; what the chunks hold, in order. */
static void a_run_spans_the_chunks_that_lie_together(void **state)
{
    (void)state;
    struct gw_ring *r = gw_ring_new(60, 32);
    struct gw_chunk c;
    assert_int_equal(gw_ring_get_run(r, 1, 100, &c), 0);
    for (int i = 0; i < 9; i++)
        gw_ring_append(r, "0123456789" + i, 10 - (size_t)i); /* 10 + 9 + ... + 2 = 54 bytes */
    assert_int_equal(gw_ring_get_run(r, 1, 1000, &c), 9);
    assert_int_equal(c.seq, 1);
    assert_int_equal(c.len, 54);
    assert_memory_equal(c.data, "0123456789123456789", 19);
    assert_int_equal(gw_ring_get_run(r, 2, 20, &c), 2); /* 9 + 8; 7 more would pass 20 */
    assert_int_equal(c.seq, 2);
    assert_int_equal(c.len, 17);
    assert_memory_equal(c.data, "12345678923456789", 17);
    assert_int_equal(gw_ring_get_run(r, 1, 5, &c), 1); /* the first chunk whole */
    assert_int_equal(c.len, 10);
    assert_int_equal(gw_ring_get_run(r, 9, 1000, &c), 1);
    assert_memory_equal(c.data, "89", 2);
    assert_int_equal(gw_ring_get_run(r, 10, 1000, &c), 0);
    /* 30 bytes do not fit after the 54 (of 60): they go to offset 0 and evict chunks 1-4 (the first
     * 34 bytes); the run from 5 ends at the end of the storage, the next starts at 0. */
    char thirty[30];
    memset(thirty, 'x', sizeof(thirty));
    assert_int_equal(gw_ring_append(r, thirty, sizeof(thirty)), 10);
    assert_int_equal(gw_ring_first(r), 5);
    assert_int_equal(gw_ring_get_run(r, 1, 1000, &c), 0);
    assert_int_equal(gw_ring_get_run(r, 5, 1000, &c), 5); /* 6 + 5 + 4 + 3 + 2 */
    assert_int_equal(c.len, 20);
    assert_memory_equal(c.data, "45678956789678978989", 20);
    assert_int_equal(gw_ring_get_run(r, 10, 1000, &c), 1);
    assert_int_equal(c.len, 30);
    assert_int_equal(c.data[0], 'x');
    /* gw_ring_get is a run of one. */
    assert_true(gw_ring_get(r, 7, &c));
    assert_int_equal(c.len, 4);
    assert_memory_equal(c.data, "6789", 4);
    assert_false(gw_ring_get(r, 4, &c));
    gw_ring_free(r);
}

static void evicts_oldest_first_and_keeps_chunks_intact(void **state)
{
    (void)state;
    struct gw_ring *r = gw_ring_new(1000, 0);
    uint64_t total = 0;
    char text[400];
    for (unsigned i = 1; i <= 5000; i++) {
        size_t n = (i * 37) % 300 + 1;
        memset(text, 'a' + (int)(i % 26), n);
        char prefix[16];
        int pl = snprintf(prefix, sizeof(prefix), "%u:", i);
        if ((size_t)pl < n)
            memcpy(text, prefix, (size_t)pl);
        assert_int_equal(gw_ring_append(r, text, n), i);
        total += n;
        assert_true(gw_ring_bytes(r) <= 1000);
        assert_int_equal(gw_ring_next(r), i + 1);
        /* The newest chunk is always there. */
        struct gw_chunk c;
        assert_true(gw_ring_get(r, i, &c));
        assert_int_equal(c.len, n);
        assert_memory_equal(c.data, text, n);
    }
    assert_int_equal(gw_ring_total_bytes(r), total);
    size_t held = 0;
    for (uint64_t s = gw_ring_first(r); s < gw_ring_next(r); s++) {
        struct gw_chunk c;
        assert_true(gw_ring_get(r, s, &c));
        assert_int_equal(c.len, (s * 37) % 300 + 1);
        assert_int_equal(c.data[c.len - 1], 'a' + (int)(s % 26));
        held += c.len;
    }
    assert_int_equal(held, gw_ring_bytes(r));
    assert_false(gw_ring_get(r, gw_ring_first(r) - 1, NULL));
    gw_ring_free(r);
}

static void a_chunk_larger_than_the_ring_keeps_its_tail(void **state)
{
    (void)state;
    struct gw_ring *r = gw_ring_new(8, 0);
    assert_int_equal(gw_ring_append(r, "xy", 2), 1);
    assert_int_equal(gw_ring_append(r, "0123456789", 10), 2);
    assert_int_equal(gw_ring_first(r), 2);
    struct gw_chunk c;
    assert_true(gw_ring_get(r, 2, &c));
    assert_int_equal(c.len, 8);
    assert_memory_equal(c.data, "23456789", 8);
    assert_int_equal(gw_ring_total_bytes(r), 12);
    gw_ring_free(r);
}

static void the_chunk_count_is_bounded_too(void **state)
{
    (void)state;
    struct gw_ring *r = gw_ring_new(1 << 20, 4);
    for (int i = 0; i < 10; i++)
        gw_ring_append(r, "k", 1);
    assert_int_equal(gw_ring_first(r), 7);
    assert_int_equal(gw_ring_next(r), 11);
    assert_int_equal(gw_ring_bytes(r), 4);
    gw_ring_free(r);
    assert_null(gw_ring_new(0, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(numbers_chunks_from_one_and_counts_bytes),
        cmocka_unit_test(a_run_spans_the_chunks_that_lie_together),
        cmocka_unit_test(evicts_oldest_first_and_keeps_chunks_intact),
        cmocka_unit_test(a_chunk_larger_than_the_ring_keeps_its_tail),
        cmocka_unit_test(the_chunk_count_is_bounded_too),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
