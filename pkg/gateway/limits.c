/* The gateway's limits on what strangers may cost it: token buckets and a bounded table of
 * per-source counters and buckets. Pure: the caller passes the clock. */
#include "gateway/limits.h"

#include "util/strmap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define OVERFLOW_KEY "(overflow)"

void gw_bucket_init(struct gw_bucket *b, double rate, double burst, double now)
{
    b->rate = rate;
    b->burst = burst >= 1 ? burst : 1;
    b->tokens = b->burst;
    b->last = now;
}

static void refill(struct gw_bucket *b, double now)
{
    if (now > b->last) {
        b->tokens += (now - b->last) * b->rate;
        if (b->tokens > b->burst)
            b->tokens = b->burst;
    }
    b->last = now;
}

int gw_bucket_take(struct gw_bucket *b, double now)
{
    if (b->rate <= 0)
        return 1;
    refill(b, now);
    if (b->tokens < 1)
        return 0;
    b->tokens -= 1;
    return 1;
}

double gw_bucket_wait_above(const struct gw_bucket *b, double reserve, double now)
{
    if (b->rate <= 0)
        return 0;
    struct gw_bucket copy = *b;
    refill(&copy, now);
    double need = reserve + 1;
    return copy.tokens >= need ? 0 : (need - copy.tokens) / copy.rate;
}

double gw_bucket_wait(const struct gw_bucket *b, double now)
{
    return gw_bucket_wait_above(b, 0, now);
}

struct source {
    char key[64];
    int count;
    struct gw_bucket bucket;
};

struct gw_sources {
    struct strmap *map;
    size_t max;
    double rate, burst;
};

struct gw_sources *gw_sources_new(size_t max_entries, double rate, double burst)
{
    struct gw_sources *t = calloc(1, sizeof(*t));
    if (t == NULL || (t->map = strmap_new()) == NULL) {
        free(t);
        return NULL;
    }
    t->max = max_entries > 1 ? max_entries : 2;
    t->rate = rate;
    t->burst = burst;
    return t;
}

void gw_sources_free(struct gw_sources *t)
{
    if (t == NULL)
        return;
    struct strmap_iter it = {0};
    const char *key;
    void *v;
    while (strmap_next(t->map, &it, &key, &v)) {
        strmap_remove(t->map, key);
        free(v);
    }
    strmap_free(t->map);
    free(t);
}

/* Whether s holds nothing worth keeping: no count, and a bucket as full as a new one. */
static int idle(struct source *s, double now)
{
    if (s->count > 0)
        return 0;
    if (s->bucket.rate <= 0)
        return 1;
    struct gw_bucket b = s->bucket;
    refill(&b, now);
    return b.tokens >= b.burst;
}

static void sweep(struct gw_sources *t, double now)
{
    struct strmap_iter it = {0};
    const char *key;
    void *v;
    while (strmap_next(t->map, &it, &key, &v)) {
        if (idle(v, now)) {
            strmap_remove(t->map, key);
            free(v);
        }
    }
}

/* source's entry, made when missing; the shared overflow entry when the table is full of live
 * ones; NULL only when out of memory. */
static struct source *entry(struct gw_sources *t, const char *source, double now)
{
    struct source *s = strmap_get(t->map, source);
    if (s != NULL)
        return s;
    if (strmap_len(t->map) >= t->max)
        sweep(t, now);
    if (strmap_len(t->map) >= t->max) {
        s = strmap_get(t->map, OVERFLOW_KEY);
        if (s != NULL)
            return s;
        source = OVERFLOW_KEY; /* one over the bound, once */
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    snprintf(s->key, sizeof(s->key), "%s", source);
    gw_bucket_init(&s->bucket, t->rate, t->burst, now);
    if (strmap_put(t->map, s->key, s) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

int gw_sources_count(const struct gw_sources *t, const char *source)
{
    const struct source *s = strmap_get(t->map, source);
    if (s == NULL && strmap_len(t->map) >= t->max)
        s = strmap_get(t->map, OVERFLOW_KEY);
    return s != NULL ? s->count : 0;
}

int gw_sources_add(struct gw_sources *t, const char *source, int delta, double now)
{
    struct source *s = delta > 0 ? entry(t, source, now) : strmap_get(t->map, source);
    if (s == NULL && delta < 0)
        s = strmap_get(t->map, OVERFLOW_KEY);
    if (s == NULL)
        return delta > 0 ? 1 : 0; /* out of memory: uncounted, as the server then refuses */
    s->count += delta;
    if (s->count < 0)
        s->count = 0;
    int count = s->count;
    if (idle(s, now)) {
        strmap_remove(t->map, s->key);
        free(s);
    }
    return count;
}

int gw_sources_take(struct gw_sources *t, const char *source, double now, double *wait)
{
    *wait = 0;
    if (t->rate <= 0)
        return 1;
    struct source *s = entry(t, source, now);
    if (s == NULL) {
        *wait = 1;
        return 0;
    }
    if (gw_bucket_take(&s->bucket, now))
        return 1;
    *wait = gw_bucket_wait(&s->bucket, now);
    return 0;
}

double gw_sources_wait(const struct gw_sources *t, const char *source, double now)
{
    if (t->rate <= 0)
        return 0;
    const struct source *s = strmap_get(t->map, source);
    if (s == NULL && strmap_len(t->map) >= t->max)
        s = strmap_get(t->map, OVERFLOW_KEY); /* where gw_sources_take would take from */
    return s != NULL ? gw_bucket_wait(&s->bucket, now) : 0; /* none yet: a full bucket */
}

size_t gw_sources_len(const struct gw_sources *t)
{
    return strmap_len(t->map);
}

void gw_source_key(const struct sockaddr *addr, char *out, size_t outlen)
{
    out[0] = '\0';
    if (addr->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)addr;
        inet_ntop(AF_INET, &in->sin_addr, out, (socklen_t)outlen);
    } else if (addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)addr;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            struct in_addr v4;
            memcpy(&v4, in6->sin6_addr.s6_addr + 12, 4);
            inet_ntop(AF_INET, &v4, out, (socklen_t)outlen);
            return;
        }
        struct in6_addr prefix = in6->sin6_addr;
        memset(prefix.s6_addr + 8, 0, 8);
        char text[INET6_ADDRSTRLEN];
        inet_ntop(AF_INET6, &prefix, text, sizeof(text));
        snprintf(out, outlen, "%s/64", text);
    }
}
