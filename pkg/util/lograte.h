/* A budget for one kind of log line that other people can cause at will (a refused request, a
 * client's input the container does not take): at most `burst` such lines at once and `per_s` a
 * second after that; the lines held back are counted and told in one line of their own, so a
 * flood cannot fill the log (or push what came before it out of a rotated one) at the rate it
 * sends. */
#ifndef TELO_UTIL_LOGRATE_H
#define TELO_UTIL_LOGRATE_H

/* Embedded by its owner; set up with telo_log_rate_init. The fields are for this module, but
 * held_total may be read (a counter for metrics). */
struct telo_log_rate {
    const char *what; /* the msg of the lines it covers (static text), named in its summary */
    double per_s, burst;
    double tokens, last; /* last: when tokens were counted (a monotonic clock, seconds) */
    unsigned long held;  /* lines held back since the last summary */
    double held_since;
    unsigned long long held_total; /* lines held back since init */
};

/* Starts r full (burst lines may go at once). per_s > 0, burst >= 1. */
void telo_log_rate_init(struct telo_log_rate *r, const char *what, double per_s, double burst);

/* Whether one more line of r's kind may be written at now (a monotonic clock in seconds).
 * When it may and lines were held back before it, the summary of those is written first:
 * `level=warn msg="log lines suppressed" of="<what>" suppressed=N seconds=S`. When it may not,
 * the line is counted as held back. */
int telo_log_rate_allow(struct telo_log_rate *r, double now);

/* Writes the summary of the lines held back, if any: call it now and then (a timer), so that a
 * flood which has stopped is still told without waiting for the next line of its kind. */
void telo_log_rate_flush(struct telo_log_rate *r, double now);

#endif
