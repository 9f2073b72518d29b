/* A Prometheus-style histogram with fixed bucket bounds. */
#include "util/histogram.h"

#include <string.h>

void histogram_init_exponential(struct histogram *h, double start, double factor, size_t nbounds)
{
    memset(h, 0, sizeof(*h));
    if (nbounds > HISTOGRAM_MAX_BUCKETS)
        nbounds = HISTOGRAM_MAX_BUCKETS;
    double bound = start;
    for (size_t i = 0; i < nbounds; i++) {
        h->bounds[i] = bound;
        bound *= factor;
    }
    h->nbounds = nbounds;
}

void histogram_observe(struct histogram *h, double value)
{
    h->count++;
    h->sum += value;
    for (size_t i = 0; i < h->nbounds; i++) {
        if (value <= h->bounds[i]) {
            h->counts[i]++;
            return;
        }
    }
}

unsigned long long histogram_cumulative(const struct histogram *h, size_t i)
{
    unsigned long long total = 0;
    for (size_t j = 0; j <= i && j < h->nbounds; j++)
        total += h->counts[j];
    return total;
}
