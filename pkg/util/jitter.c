/* Random spreads for retries, backoffs and resyncs, so that many clients do not act in step. */
#include "util/jitter.h"

#include <openssl/rand.h>

#include <stdint.h>
#include <stdlib.h>

double util_random_unit(void)
{
    uint32_t x = 0;
    if (RAND_bytes((unsigned char *)&x, sizeof(x)) != 1)
        x = (uint32_t)rand();
    return (double)x / 4294967296.0;
}

double util_jitter(double base, double factor)
{
    if (factor <= 0)
        return base;
    return base * (1.0 + factor * util_random_unit());
}

double util_spread_first(double period)
{
    if (period <= 0)
        return period;
    return period * (0.5 + 0.5 * util_random_unit());
}
