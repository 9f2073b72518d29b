/* Tests for pkg/gateway/proxies.c: trusted networks, and the client X-Forwarded-For names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "gateway/proxies.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static struct sockaddr_storage addr_of(const char *text)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, text, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
    } else {
        assert_int_equal(inet_pton(AF_INET6, text, &in6->sin6_addr), 1);
        in6->sin6_family = AF_INET6;
    }
    return ss;
}

static struct gw_proxies *parsed(const char *list)
{
    struct gw_proxies *p = NULL;
    struct telo_err err;
    telo_err_clear(&err);
    assert_int_equal(gw_proxies_parse("--trusted-proxies", list, &p, &err), 0);
    return p;
}

static int trusts(const struct gw_proxies *p, const char *text)
{
    struct sockaddr_storage ss = addr_of(text);
    return gw_proxies_trusts(p, (const struct sockaddr *)&ss);
}

static void networks_are_matched_by_prefix(void **state)
{
    (void)state;
    struct gw_proxies *p = parsed(" 10.0.0.0/8, 192.0.2.7 ,fd00::/8,172.16.0.0/12,,2001:db8::/127");
    assert_true(trusts(p, "10.1.2.3"));
    assert_false(trusts(p, "11.0.0.1"));
    assert_true(trusts(p, "192.0.2.7"));
    assert_false(trusts(p, "192.0.2.8"));
    assert_true(trusts(p, "172.31.255.255"));
    assert_false(trusts(p, "172.32.0.0"));
    assert_true(trusts(p, "fd12::1"));
    assert_false(trusts(p, "fe80::1"));
    assert_true(trusts(p, "2001:db8::1"));
    assert_false(trusts(p, "2001:db8::2"));
    /* An IPv4-mapped peer (a dual-stack listener) is its IPv4 address. */
    assert_true(trusts(p, "::ffff:10.9.9.9"));
    assert_false(trusts(p, "::ffff:11.9.9.9"));
    gw_proxies_free(p);
    p = parsed("0.0.0.0/0");
    assert_true(trusts(p, "203.0.113.9"));
    assert_false(trusts(p, "2001:db8::1"));
    gw_proxies_free(p);
    /* None listed: nobody is trusted. */
    assert_null(parsed(NULL));
    assert_null(parsed(""));
    assert_null(parsed(" , "));
    assert_false(trusts(NULL, "10.1.2.3"));
}

static void bad_lists_name_the_flag_and_the_item(void **state)
{
    (void)state;
    const char *bad[] = {"10.0.0.0/33",  "10.0.0.0/",    "10.0.0/8",    "fd00::/129",
                         "10.0.0.0/8/8", "ingress",      "10.0.0.1:80", "10.0.0.0/-1",
                         "10.0.0.0/1x",  "10.0.0.0/0008"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct gw_proxies *p = (struct gw_proxies *)&p;
        struct telo_err err;
        telo_err_clear(&err);
        char list[64];
        snprintf(list, sizeof(list), "10.0.0.0/8,%s", bad[i]);
        assert_int_equal(gw_proxies_parse("--trusted-proxies", list, &p, &err), -TELO_EINVAL);
        assert_null(p);
        char want[128];
        snprintf(want, sizeof(want), "--trusted-proxies: '%s' is not an IPv4 or IPv6 address",
                 bad[i]);
        assert_non_null(strstr(err.msg, want));
    }
    /* A hostile value is not echoed raw. */
    struct gw_proxies *p = NULL;
    struct telo_err err;
    assert_int_equal(gw_proxies_parse("--trusted-proxies", "10.0.0.0/8\n\x1b[2J", &p, &err),
                     -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "'10.0.0.0/8??[2J'"));
    /* More networks than the set holds. */
    char many[(GW_PROXIES_MAX + 1) * 16] = "";
    size_t used = 0;
    for (int i = 0; i <= GW_PROXIES_MAX; i++)
        used += (size_t)snprintf(many + used, sizeof(many) - used, "10.0.%d.0/24,", i);
    assert_int_equal(gw_proxies_parse("--trusted-proxies", many, &p, &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "at most 64 networks"));
}

/* The key and address the request from peer with X-Forwarded-For xff is limited under. */
static int client(const struct gw_proxies *p, const char *peer, const char *xff, char *key,
                  char *remote)
{
    struct sockaddr_storage ss = addr_of(peer);
    return gw_proxies_client(p, (const struct sockaddr *)&ss, xff, key, remote);
}

/* A request from peer with X-Forwarded-For xff, through the proxies 10.0.0.0/8 (or none), and
 * the client it is limited as. */
struct forwarded_case {
    int trusted; /* 0: no proxy trusted */
    int taken;
    const char *peer, *xff;
    const char *key, *remote; /* remote NULL: as key */
};

static const struct forwarded_case FORWARDED[] = {
    /* Through one proxy. */
    {1, 1, "10.0.0.5", "203.0.113.9", "203.0.113.9", NULL},
    /* A client's forged entries stand left of its own address, which the proxy appended. */
    {1, 1, "10.0.0.5", "1.1.1.1, 10.0.0.9, 203.0.113.9", "203.0.113.9", NULL},
    /* Through two proxies (an outer load balancer, then the Ingress controller). */
    {1, 2, "10.0.0.5", "1.1.1.1,203.0.113.9 , 10.2.3.4", "203.0.113.9", NULL},
    /* Every entry a proxy: the leftmost is the client. */
    {1, 2, "10.0.0.5", "10.7.7.7,10.2.3.4", "10.7.7.7", NULL},
    /* Not from a proxy: the header is the client's own words, and ignored. */
    {1, 0, "198.51.100.1", "203.0.113.9", "198.51.100.1", NULL},
    /* No header, or an empty one: the proxy itself. */
    {1, 0, "10.0.0.5", NULL, "10.0.0.5", NULL},
    {1, 0, "10.0.0.5", " ", "10.0.0.5", NULL},
    /* An entry that is no address ends the walk at the last address believed. */
    {1, 0, "10.0.0.5", "203.0.113.9, unknown", "10.0.0.5", NULL},
    {1, 1, "10.0.0.5", "203.0.113.9,,10.2.3.4", "10.2.3.4", NULL},
    /* Ports, and IPv6: its /64 is the key, as for a direct peer. */
    {1, 1, "10.0.0.5", "203.0.113.9:4711", "203.0.113.9", NULL},
    {1, 1, "10.0.0.5", "[2001:db8:1:2::7]:4711", "2001:db8:1:2::/64", "2001:db8:1:2::7"},
    {1, 1, "10.0.0.5", "2001:db8:1:2::7", "2001:db8:1:2::/64", "2001:db8:1:2::7"},
    {1, 1, "10.0.0.5", "::ffff:203.0.113.9", "203.0.113.9", NULL},
    /* Not addresses. */
    {1, 0, "10.0.0.5", "[2001:db8::1", "10.0.0.5", NULL},
    {1, 0, "10.0.0.5", "[2001:db8::1]x", "10.0.0.5", NULL},
    {1, 0, "10.0.0.5", "[2001:db8::1]:", "10.0.0.5", NULL},
    {1, 0, "10.0.0.5", "[10.0.0.1]", "10.0.0.5", NULL},
    {1, 0, "10.0.0.5", "203.0.113.9:", "10.0.0.5", NULL},
    {1, 0, "10.0.0.5", "203.0.113.9:123456", "10.0.0.5", NULL},
    {1, 0, "10.0.0.5", "203.0.113.9:http", "10.0.0.5", NULL},
    {1, 0, "10.0.0.5", "1.2.3", "10.0.0.5", NULL},
    {1, 0, "10.0.0.5", "2001:db8::1:80:x", "10.0.0.5", NULL},
    /* Without trusted proxies nothing is believed. */
    {0, 0, "10.0.0.5", "203.0.113.9", "10.0.0.5", NULL},
};

static void the_client_is_the_rightmost_untrusted_address(void **state)
{
    (void)state;
    struct gw_proxies *p = parsed("10.0.0.0/8");
    for (size_t i = 0; i < sizeof(FORWARDED) / sizeof(FORWARDED[0]); i++) {
        const struct forwarded_case *c = &FORWARDED[i];
        char key[GW_ADDRESS_KEY_MAX], remote[GW_ADDRESS_KEY_MAX];
        int taken = client(c->trusted ? p : NULL, c->peer, c->xff, key, remote);
        if (taken != c->taken || strcmp(key, c->key) != 0 ||
            strcmp(remote, c->remote ? c->remote : c->key) != 0)
            fail_msg("case %zu (%s via %s): got %d %s %s", i, c->xff ? c->xff : "(none)", c->peer,
                     taken, key, remote);
    }
    gw_proxies_free(p);
}

static void a_long_chain_is_walked_a_bounded_way(void **state)
{
    (void)state;
    struct gw_proxies *p = parsed("0.0.0.0/0");
    /* Every hop trusted, 1000 of them: the walk stops after GW_FORWARDED_HOPS. */
    size_t len = (size_t)1000 * 12, used = 0;
    char *xff = malloc(len + 1);
    assert_non_null(xff);
    for (int i = 0; i < 1000; i++)
        used += (size_t)snprintf(xff + used, len + 1 - used, "%s10.0.%d.%d", i ? "," : "", i / 250,
                                 i % 250);
    char key[GW_ADDRESS_KEY_MAX], remote[GW_ADDRESS_KEY_MAX];
    assert_int_equal(client(p, "10.0.0.5", xff, key, remote), GW_FORWARDED_HOPS);
    char want[16];
    snprintf(want, sizeof(want), "10.0.%d.%d", (1000 - GW_FORWARDED_HOPS) / 250,
             (1000 - GW_FORWARDED_HOPS) % 250);
    assert_string_equal(key, want);
    free(xff);
    gw_proxies_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(networks_are_matched_by_prefix),
        cmocka_unit_test(bad_lists_name_the_flag_and_the_item),
        cmocka_unit_test(the_client_is_the_rightmost_untrusted_address),
        cmocka_unit_test(a_long_chain_is_walked_a_bounded_way),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
