/* Rate limiters of the work queue: per-item exponential backoff and an overall token bucket. */
#ifndef TELO_WORKQUEUE_RATELIMIT_H
#define TELO_WORKQUEUE_RATELIMIT_H

/* Per-item exponential backoff: the n-th failure of an item waits base * 2^n, capped at max
 * (client-go's ItemExponentialFailureRateLimiter; defaults 5 ms and 1000 s). */
double wq_backoff_delay(double base, double max, unsigned failures);

/* A token bucket holding up to burst tokens, refilled at qps per second (golang.org/x/time/rate
 * semantics: a reservation may drive the level negative, and later callers wait longer). */
struct wq_bucket {
    double qps;
    double burst;
    double tokens;
    double last; /* time of the last update, seconds on the caller's clock */
};

/* Starts a full bucket at time now. qps <= 0 disables it (every reservation is free). */
void wq_bucket_init(struct wq_bucket *b, double qps, int burst, double now);

/* Takes one token at time now and returns how long the caller must wait before using it (0 when a
 * token was there), at most burst / qps: what is owed stops at one burst. Cannot fail. */
double wq_bucket_reserve(struct wq_bucket *b, double now);

#endif
