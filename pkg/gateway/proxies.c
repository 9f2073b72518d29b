/* Trusted proxies and the client behind them: see proxies.h. */
#include "gateway/proxies.h"

#include "gateway/limits.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* One network: an address in 16 bytes (IPv4 in its first 4) and how many leading bits count. */
struct net {
    int family; /* AF_INET or AF_INET6 */
    uint8_t addr[16];
    unsigned bits;
};

struct gw_proxies {
    size_t n;
    struct net nets[GW_PROXIES_MAX];
};

/* An address as a family and 16 bytes, an IPv4-mapped IPv6 address as IPv4. */
struct ip {
    int family;
    uint8_t addr[16];
};

static int ip_of_sockaddr(const struct sockaddr *sa, struct ip *out)
{
    memset(out, 0, sizeof(*out));
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        out->family = AF_INET;
        memcpy(out->addr, &in->sin_addr, 4);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            out->family = AF_INET;
            memcpy(out->addr, in6->sin6_addr.s6_addr + 12, 4);
        } else {
            out->family = AF_INET6;
            memcpy(out->addr, &in6->sin6_addr, 16);
        }
        return 0;
    }
    return -1;
}

/* text (n bytes, no NUL needed) as an address, without a port. */
static int ip_parse(const char *text, size_t n, struct ip *out)
{
    char buf[INET6_ADDRSTRLEN];
    if (n == 0 || n >= sizeof(buf))
        return -1;
    memcpy(buf, text, n);
    buf[n] = '\0';
    memset(out, 0, sizeof(*out));
    if (inet_pton(AF_INET, buf, out->addr) == 1) {
        out->family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, buf, out->addr) == 1) {
        out->family = AF_INET6;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(out->addr, mapped, 12) == 0) {
            memmove(out->addr, out->addr + 12, 4);
            memset(out->addr + 4, 0, 12);
            out->family = AF_INET;
        }
        return 0;
    }
    return -1;
}

static int all_digits(const char *s, size_t n)
{
    if (n == 0 || n > 5)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

/* An X-Forwarded-For entry: an address, "v4:port", "[v6]" or "[v6]:port". */
static int entry_parse(const char *s, size_t n, struct ip *out)
{
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (close == NULL)
            return -1;
        size_t rest = n - (size_t)(close - s) - 1;
        if (rest > 0 && (close[1] != ':' || !all_digits(close + 2, rest - 1)))
            return -1;
        if (ip_parse(s + 1, (size_t)(close - s) - 1, out) != 0 || out->family != AF_INET6)
            return -1;
        return 0;
    }
    const char *colon = memchr(s, ':', n);
    if (colon != NULL && memchr(colon + 1, ':', n - (size_t)(colon - s) - 1) == NULL) {
        /* One colon: IPv4 with a port. */
        if (!all_digits(colon + 1, n - (size_t)(colon - s) - 1) ||
            ip_parse(s, (size_t)(colon - s), out) != 0 || out->family != AF_INET)
            return -1;
        return 0;
    }
    return ip_parse(s, n, out);
}

static int net_contains(const struct net *net, const struct ip *ip)
{
    if (net->family != ip->family)
        return 0;
    unsigned whole = net->bits / 8, rest = net->bits % 8;
    if (memcmp(net->addr, ip->addr, whole) != 0)
        return 0;
    if (rest == 0)
        return 1;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (net->addr[whole] & mask) == (ip->addr[whole] & mask);
}

static int trusts_ip(const struct gw_proxies *p, const struct ip *ip)
{
    for (size_t i = 0; p != NULL && i < p->n; i++)
        if (net_contains(&p->nets[i], ip))
            return 1;
    return 0;
}

static void trim(const char **s, size_t *n)
{
    while (*n > 0 && (**s == ' ' || **s == '\t')) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
        (*n)--;
}

/* What an error may show of a bad item: its printable bytes, at most 80. */
static void shown(const char *s, size_t n, char *out, size_t outlen)
{
    size_t o = 0;
    for (size_t i = 0; i < n && i < 80 && o + 1 < outlen; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f)
            out[o++] = s[i];
        else
            out[o++] = '?';
    }
    out[o] = '\0';
}

static int net_parse(const char *s, size_t n, struct net *out)
{
    const char *slash = memchr(s, '/', n);
    size_t alen = slash != NULL ? (size_t)(slash - s) : n;
    struct ip ip;
    if (ip_parse(s, alen, &ip) != 0)
        return -1;
    unsigned max = ip.family == AF_INET ? 32 : 128, bits = max;
    if (slash != NULL) {
        size_t blen = n - alen - 1;
        if (blen == 0 || blen > 3 || !all_digits(slash + 1, blen))
            return -1;
        bits = 0;
        for (size_t i = 0; i < blen; i++)
            bits = bits * 10 + (unsigned)(slash[1 + i] - '0');
        if (bits > max)
            return -1;
    }
    out->family = ip.family;
    out->bits = bits;
    memcpy(out->addr, ip.addr, sizeof(out->addr));
    return 0;
}

int gw_proxies_parse(const char *flag, const char *list, struct gw_proxies **out,
                     struct telo_err *err)
{
    *out = NULL;
    if (list == NULL)
        return 0;
    struct gw_proxies *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return telo_err_set(err, TELO_ENOMEM, "%s: out of memory", flag);
    for (const char *at = list; *at != '\0';) {
        const char *comma = strchr(at, ',');
        size_t n = comma != NULL ? (size_t)(comma - at) : strlen(at);
        const char *item = at;
        at += n + (comma != NULL);
        trim(&item, &n);
        if (n == 0)
            continue;
        if (p->n == GW_PROXIES_MAX) {
            gw_proxies_free(p);
            return telo_err_set(err, TELO_EINVAL, "%s: at most %d networks", flag, GW_PROXIES_MAX);
        }
        if (net_parse(item, n, &p->nets[p->n]) != 0) {
            char what[96];
            shown(item, n, what, sizeof(what));
            gw_proxies_free(p);
            return telo_err_set(err, TELO_EINVAL,
                                "%s: '%s' is not an IPv4 or IPv6 address with an optional "
                                "/prefix length (10.0.0.0/8, fd00::/8, 192.0.2.7)",
                                flag, what);
        }
        p->n++;
    }
    if (p->n == 0) {
        gw_proxies_free(p);
        return 0;
    }
    *out = p;
    return 0;
}

void gw_proxies_free(struct gw_proxies *p)
{
    free(p);
}

int gw_proxies_trusts(const struct gw_proxies *p, const struct sockaddr *addr)
{
    struct ip ip;
    return p != NULL && ip_of_sockaddr(addr, &ip) == 0 && trusts_ip(p, &ip);
}

static void describe(const struct ip *ip, char *key, char *remote)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (ip->family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        in->sin_family = AF_INET;
        memcpy(&in->sin_addr, ip->addr, 4);
        inet_ntop(AF_INET, &in->sin_addr, remote, GW_ADDRESS_KEY_MAX);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        in6->sin6_family = AF_INET6;
        memcpy(&in6->sin6_addr, ip->addr, 16);
        inet_ntop(AF_INET6, &in6->sin6_addr, remote, GW_ADDRESS_KEY_MAX);
    }
    gw_source_key((const struct sockaddr *)&ss, key, GW_ADDRESS_KEY_MAX);
}

int gw_proxies_client(const struct gw_proxies *p, const struct sockaddr *peer, const char *xff,
                      char *key, char *remote)
{
    struct ip believed;
    key[0] = remote[0] = '\0';
    if (ip_of_sockaddr(peer, &believed) != 0)
        return 0;
    int taken = 0;
    size_t end = xff != NULL ? strlen(xff) : 0;
    /* Each step: the address believed so far is a trusted proxy, so the entry it added (the
     * rightmost not yet read) is believed too, if it is an address. */
    while (end > 0 && taken < GW_FORWARDED_HOPS && trusts_ip(p, &believed)) {
        size_t start = end;
        while (start > 0 && xff[start - 1] != ',')
            start--;
        const char *item = xff + start;
        size_t n = end - start;
        end = start > 0 ? start - 1 : 0;
        trim(&item, &n);
        struct ip ip;
        if (n == 0 || entry_parse(item, n, &ip) != 0)
            break;
        believed = ip;
        taken++;
        if (start == 0)
            break;
    }
    describe(&believed, key, remote);
    return taken;
}
