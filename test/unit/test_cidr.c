/* Tests for pkg/util/cidr.c: whole bytes, a partial last byte, /0 and full-length prefixes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/cidr.h"

#include <arpa/inet.h>
#include <string.h>
#include <sys/socket.h>

static int in(const char *net, unsigned prefix, const char *addr)
{
    int family = strchr(net, ':') ? AF_INET6 : AF_INET;
    unsigned char n[16], a[16];
    assert_int_equal(inet_pton(family, net, n), 1);
    assert_int_equal(inet_pton(family, addr, a), 1);
    return util_cidr_contains(n, prefix, a);
}

static void prefixes_match_on_their_bits_only(void **state)
{
    (void)state;
    assert_true(in("10.85.0.0", 24, "10.85.0.9"));
    assert_false(in("10.85.0.0", 24, "10.85.1.9"));
    assert_false(in("10.85.0.0", 24, "10.244.0.5")); /* kwok's pods are not the real node's */
    /* 172.16.0.0/12: the last prefix byte is partial (0xf0). */
    assert_true(in("172.16.0.0", 12, "172.31.255.255"));
    assert_false(in("172.16.0.0", 12, "172.32.0.0"));
    assert_false(in("172.16.0.0", 12, "172.15.255.255"));
    assert_true(in("0.0.0.0", 0, "203.0.113.7"));
    assert_true(in("169.254.169.254", 32, "169.254.169.254"));
    assert_false(in("169.254.169.254", 32, "169.254.169.253"));
    assert_true(in("fd00::", 8, "fdab::1"));
    assert_false(in("fd00::", 8, "fe80::1"));
    assert_true(in("2001:db8::", 33, "2001:db8:7fff::1"));
    assert_false(in("2001:db8::", 33, "2001:db8:8000::1"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(prefixes_match_on_their_bits_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
