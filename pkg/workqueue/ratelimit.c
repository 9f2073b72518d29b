/* Rate limiters of the work queue: per-item exponential backoff and an overall token bucket. */
#include "workqueue/ratelimit.h"

#include <math.h>

double wq_backoff_delay(double base, double max, unsigned failures)
{
    /* 2^64 already exceeds any sane cap; ldexp keeps this free of integer overflow. */
    if (failures > 63)
        return max;
    double delay = ldexp(base, (int)failures);
    return delay > max ? max : delay;
}

void wq_bucket_init(struct wq_bucket *b, double qps, int burst, double now)
{
    b->qps = qps;
    b->burst = burst > 0 ? burst : 1;
    b->tokens = b->burst;
    b->last = now;
}

double wq_bucket_reserve(struct wq_bucket *b, double now)
{
    if (b->qps <= 0)
        return 0;
    if (now > b->last) {
        b->tokens += (now - b->last) * b->qps;
        if (b->tokens > b->burst)
            b->tokens = b->burst;
        b->last = now;
    }
    b->tokens -= 1;
    /* What is owed stops at one burst: the bucket is shared by every namespace's retries, and
     * one tenant whose writes fail without end must not push everyone's next retry hours away
     * (each key's own backoff still slows its retries). */
    if (b->tokens < -b->burst)
        b->tokens = -b->burst;
    return b->tokens >= 0 ? 0 : -b->tokens / b->qps;
}
