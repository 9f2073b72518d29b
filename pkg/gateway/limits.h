/* The gateway's limits on what strangers may cost it: token buckets and a bounded table of
 * per-source counters and buckets. Pure: the caller passes the clock. */
#ifndef TELO_GATEWAY_LIMITS_H
#define TELO_GATEWAY_LIMITS_H

#include <stddef.h>

struct sockaddr;

/* A token bucket: rate tokens a second up to burst. rate <= 0 means no limit. */
struct gw_bucket {
    double rate, burst;
    double tokens;
    double last; /* when tokens was last brought up to date */
};

/* Starts b full at now. */
void gw_bucket_init(struct gw_bucket *b, double rate, double burst, double now);

/* Takes one token: returns 1, or 0 when the bucket is empty (b unchanged but for the refill). */
int gw_bucket_take(struct gw_bucket *b, double now);

/* Seconds until a token is there (0 when one is), for Retry-After. */
double gw_bucket_wait(const struct gw_bucket *b, double now);

/* Seconds until b holds a token above reserve (0 when it does): a taker held to this leaves the
 * reserve to others. */
double gw_bucket_wait_above(const struct gw_bucket *b, double reserve, double now);

/* Per source address: a count (connections before admission) and a bucket (API lookups). Keeps at
 * most max_entries sources; an entry goes when its count is 0 and its bucket has refilled. When
 * the table is full of live entries, new sources share one overflow entry, so an attacker with
 * many addresses gets one address's allowance, not one each. */
struct gw_sources;

/* Returns a table whose buckets take rate/burst (rate <= 0: no per-source bucket), or NULL when
 * out of memory. */
struct gw_sources *gw_sources_new(size_t max_entries, double rate, double burst);

/* Frees t. NULL is a no-op. */
void gw_sources_free(struct gw_sources *t);

/* The count of source; 0 when unknown. */
int gw_sources_count(const struct gw_sources *t, const char *source);

/* Adds delta (+1 or -1) to source's count at now; returns the new count (never below 0). */
int gw_sources_add(struct gw_sources *t, const char *source, int delta, double now);

/* Takes a token from source's bucket at now: returns 1, or 0 with *wait set to the seconds until
 * one is there. */
int gw_sources_take(struct gw_sources *t, const char *source, double now, double *wait);

/* Seconds until source's bucket has a token (0 when it has one), without taking it: for
 * checking several buckets before taking from any. */
double gw_sources_wait(const struct gw_sources *t, const char *source, double now);

/* Entries held (for tests and metrics). */
size_t gw_sources_len(const struct gw_sources *t);

/* Writes the key a peer's address is limited under into out (size >= 64): the IPv4 address, or
 * the /64 prefix of an IPv6 one (one host holds a whole /64; an IPv4-mapped address counts as
 * IPv4). "" for other families. */
void gw_source_key(const struct sockaddr *addr, char *out, size_t outlen);

#endif
