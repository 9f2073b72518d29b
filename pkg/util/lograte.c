/* The log-line budget: a token bucket, and a summary of what it held back. */
#include "util/lograte.h"

#include "util/log.h"

void telo_log_rate_init(struct telo_log_rate *r, const char *what, double per_s, double burst)
{
    *r = (struct telo_log_rate){.what = what, .per_s = per_s, .burst = burst, .tokens = burst};
    r->last = -1;
}

void telo_log_rate_flush(struct telo_log_rate *r, double now)
{
    if (r->held == 0)
        return;
    telo_log(TELO_LOG_WARN, "log lines suppressed", "of=\"%s\" suppressed=%lu seconds=%.1f",
             r->what, r->held, now > r->held_since ? now - r->held_since : 0.);
    r->held = 0;
}

int telo_log_rate_allow(struct telo_log_rate *r, double now)
{
    if (r->last >= 0 && now > r->last) {
        r->tokens += (now - r->last) * r->per_s;
        if (r->tokens > r->burst)
            r->tokens = r->burst;
    }
    if (r->last < 0 || now > r->last)
        r->last = now;
    if (r->tokens < 1) {
        if (r->held++ == 0)
            r->held_since = now;
        r->held_total++;
        return 0;
    }
    r->tokens -= 1;
    telo_log_rate_flush(r, now);
    return 1;
}
