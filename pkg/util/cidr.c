/* Address prefixes (CIDR). */
#include "util/cidr.h"

#include <string.h>

int util_cidr_contains(const unsigned char *net, unsigned prefix, const unsigned char *a)
{
    unsigned full = prefix / 8, rest = prefix % 8;
    if (memcmp(a, net, full) != 0)
        return 0;
    if (rest == 0)
        return 1;
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    return (a[full] & mask) == (net[full] & mask);
}
