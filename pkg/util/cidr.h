/* Address prefixes (CIDR): whether an IPv4 or IPv6 address lies in a network. */
#ifndef TELO_UTIL_CIDR_H
#define TELO_UTIL_CIDR_H

/* Whether the address a lies in net/prefix: both in network byte order, 4 bytes for IPv4 or 16
 * for IPv6 (the same family; the caller checks), prefix at most 32 or 128. */
int util_cidr_contains(const unsigned char *net, unsigned prefix, const unsigned char *a);

#endif
