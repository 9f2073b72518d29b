/* Random spreads for retries, backoffs and resyncs, so that many clients do not act in step. */
#ifndef TELO_UTIL_JITTER_H
#define TELO_UTIL_JITTER_H

/* A uniform draw in [0, 1) from OpenSSL's generator (rand() should it fail). Not for secrets. */
double util_random_unit(void);

/* client-go's wait.Jitter: base stretched by up to factor times itself, a uniform draw in
 * [base, base * (1 + factor)). A factor <= 0 answers base. */
double util_jitter(double base, double factor);

/* The first wait of a periodic timer started for many connections at once (a crowd attached
 * together, or reconnected after a restart): a uniform draw in [period / 2, period], so that
 * their ticks spread instead of firing together, and the first is never later than a period
 * (a re-check every `period` stays a bound). A period <= 0 answers period. */
double util_spread_first(double period);

#endif
