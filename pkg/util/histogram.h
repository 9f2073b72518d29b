/* A Prometheus-style histogram with fixed bucket bounds. */
#ifndef TELO_UTIL_HISTOGRAM_H
#define TELO_UTIL_HISTOGRAM_H

#include <stddef.h>

#define HISTOGRAM_MAX_BUCKETS 16

struct histogram {
    double bounds[HISTOGRAM_MAX_BUCKETS];             /* upper bounds, ascending */
    unsigned long long counts[HISTOGRAM_MAX_BUCKETS]; /* per bucket, not cumulative */
    size_t nbounds;
    unsigned long long count; /* all observations, including those above the last bound */
    double sum;
};

/* Sets h to empty with nbounds bounds start, start*factor, ... (at most HISTOGRAM_MAX_BUCKETS;
 * more are cut). Cannot fail. */
void histogram_init_exponential(struct histogram *h, double start, double factor, size_t nbounds);

/* Records one value. Cannot fail. */
void histogram_observe(struct histogram *h, double value);

/* Cumulative count of observations <= bounds[i], as Prometheus' le buckets report it. */
unsigned long long histogram_cumulative(const struct histogram *h, size_t i);

#endif
