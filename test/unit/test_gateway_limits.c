/* Tests for pkg/gateway/limits.c: token buckets, the per-source table and source keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "gateway/limits.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

static void bucket_allows_burst_then_rate(void **state)
{
    (void)state;
    struct gw_bucket b;
    gw_bucket_init(&b, 2, 3, 100.0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(gw_bucket_take(&b, 100.0), 1);
    assert_int_equal(gw_bucket_take(&b, 100.0), 0);
    assert_true(gw_bucket_wait(&b, 100.0) > 0.49 && gw_bucket_wait(&b, 100.0) < 0.51);
    assert_int_equal(gw_bucket_take(&b, 100.25), 0);
    assert_int_equal(gw_bucket_take(&b, 100.5), 1);
    /* Over ten seconds at 2 a second: 20 more, never more than the burst at once. */
    int took = 0;
    for (int t = 0; t <= 1000; t++) {
        while (gw_bucket_take(&b, 100.5 + t * 0.01))
            took++;
    }
    assert_in_range(took, 19, 21);
    assert_int_equal(gw_bucket_take(&b, 1000.0), 1);
    /* No rate: no limit. */
    gw_bucket_init(&b, 0, 0, 0);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(gw_bucket_take(&b, 0), 1);
}

static void sources_count_and_forget(void **state)
{
    (void)state;
    struct gw_sources *t = gw_sources_new(4, 0, 0);
    assert_int_equal(gw_sources_add(t, "10.0.0.1", 1, 0), 1);
    assert_int_equal(gw_sources_add(t, "10.0.0.1", 1, 0), 2);
    assert_int_equal(gw_sources_add(t, "10.0.0.2", 1, 0), 1);
    assert_int_equal(gw_sources_count(t, "10.0.0.1"), 2);
    assert_int_equal(gw_sources_add(t, "10.0.0.1", -1, 0), 1);
    assert_int_equal(gw_sources_add(t, "10.0.0.1", -1, 0), 0);
    assert_int_equal(gw_sources_len(t), 1); /* an entry at 0 goes */
    /* Full of live entries: new sources share one overflow entry (one over the bound). */
    for (int i = 0; i < 10; i++) {
        char ip[32];
        snprintf(ip, sizeof(ip), "10.1.0.%d", i);
        gw_sources_add(t, ip, 1, 0);
    }
    assert_int_equal(gw_sources_len(t), 5);
    assert_int_equal(gw_sources_count(t, "10.1.0.9"), 7); /* 10.1.0.3..9 in the overflow */
    gw_sources_free(t);
}

static void sources_rate_per_source_and_overflow(void **state)
{
    (void)state;
    struct gw_sources *t = gw_sources_new(3, 1, 2);
    double wait = 0;
    assert_int_equal(gw_sources_take(t, "a", 0, &wait), 1);
    assert_int_equal(gw_sources_take(t, "a", 0, &wait), 1);
    assert_int_equal(gw_sources_take(t, "a", 0, &wait), 0);
    assert_true(wait > 0.99 && wait < 1.01);
    assert_int_equal(gw_sources_take(t, "b", 0, &wait), 1); /* another source: its own */
    /* Many new sources at once: after the table fills they share the overflow bucket. */
    int took = 0;
    for (int i = 0; i < 100; i++) {
        char ip[32];
        snprintf(ip, sizeof(ip), "s%d", i);
        took += gw_sources_take(t, ip, 0, &wait);
    }
    assert_true(took <= 2 + 2 + 1); /* two own entries fill the table, then the overflow */
    assert_true(gw_sources_len(t) <= 4);
    /* Later, refilled entries are swept to make room. */
    assert_int_equal(gw_sources_take(t, "late", 100, &wait), 1);
    assert_true(gw_sources_len(t) <= 4);
    gw_sources_free(t);
}

static void source_keys(void **state)
{
    (void)state;
    char out[64];
    struct sockaddr_in in = {.sin_family = AF_INET};
    inet_pton(AF_INET, "192.0.2.7", &in.sin_addr);
    gw_source_key((struct sockaddr *)&in, out, sizeof(out));
    assert_string_equal(out, "192.0.2.7");
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, "2001:db8:1:2:3:4:5:6", &in6.sin6_addr);
    gw_source_key((struct sockaddr *)&in6, out, sizeof(out));
    assert_string_equal(out, "2001:db8:1:2::/64");
    inet_pton(AF_INET6, "2001:db8:1:2:ffff::1", &in6.sin6_addr);
    char other[64];
    gw_source_key((struct sockaddr *)&in6, other, sizeof(other));
    assert_string_equal(out, other); /* one /64, one source */
    inet_pton(AF_INET6, "::ffff:192.0.2.7", &in6.sin6_addr);
    gw_source_key((struct sockaddr *)&in6, out, sizeof(out));
    assert_string_equal(out, "192.0.2.7");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bucket_allows_burst_then_rate),
        cmocka_unit_test(sources_count_and_forget),
        cmocka_unit_test(sources_rate_per_source_and_overflow),
        cmocka_unit_test(source_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
