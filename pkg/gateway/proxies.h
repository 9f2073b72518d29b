/* Trusted proxies: whom the gateway believes about a client's address. Behind an Ingress
 * controller or the API server's service proxy every client arrives from the proxy's address, and
 * the per-address limits (gateway/limits.h) would make one tenant's flood everyone's 429. A
 * connection from a trusted proxy is limited under the client its X-Forwarded-For names instead:
 * the rightmost address that is not itself a trusted proxy, as nginx's real_ip_recursive reads
 * it, so a client cannot choose its own key by sending a forged header. Pure: no I/O. */
#ifndef TELO_GATEWAY_PROXIES_H
#define TELO_GATEWAY_PROXIES_H

#include "util/err.h"

#include <stddef.h>

struct sockaddr;

/* The most networks a list may name, and the most X-Forwarded-For entries looked at (from the
 * right: a longer chain's left part is the client's own words anyway). */
#define GW_PROXIES_MAX     64
#define GW_FORWARDED_HOPS  32
#define GW_ADDRESS_KEY_MAX 64 /* a gw_source_key or an address as text, with its NUL */

struct gw_proxies;

/* Parses list, comma-separated IPv4 or IPv6 networks ("10.0.0.0/8", "fd00::/8", "192.0.2.7": a
 * single address); spaces around items are ignored. On success *out holds the set (free it with
 * gw_proxies_free), or NULL when list is NULL or empty (no proxy is trusted). Returns 0, or
 * -TELO_EINVAL with err naming flag and the item (at most 80 bytes of it, printable only) and
 * the form wanted, or -TELO_ENOMEM. */
int gw_proxies_parse(const char *flag, const char *list, struct gw_proxies **out,
                     struct telo_err *err);

/* Frees p. NULL is a no-op. */
void gw_proxies_free(struct gw_proxies *p);

/* Whether addr (AF_INET or AF_INET6; an IPv4-mapped IPv6 address counts as IPv4) lies in one of
 * p's networks. 0 for NULL p. */
int gw_proxies_trusts(const struct gw_proxies *p, const struct sockaddr *addr);

/* The client a request from a trusted proxy speaks for. peer is the proxy's address; xff the
 * request's X-Forwarded-For value (NULL: none). Walks xff from its right end: a trusted address
 * is one more proxy and the walk goes on; the first untrusted one is the client; an entry that
 * is no address ("unknown", garbage), or the end of the list or GW_FORWARDED_HOPS entries, ends
 * the walk at the last address believed (the peer when none). Entries are IPv4 or IPv6
 * addresses, with an optional port ("192.0.2.1:4711", "[2001:db8::1]:4711"). Writes the
 * client's limit key (gw_source_key) into key and its address as text into remote (each
 * GW_ADDRESS_KEY_MAX bytes). Returns the number of entries taken from xff (0: the peer itself). */
int gw_proxies_client(const struct gw_proxies *p, const struct sockaddr *peer, const char *xff,
                      char *key, char *remote);

#endif
