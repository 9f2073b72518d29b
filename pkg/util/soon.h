/* Work to run soon on a libev loop: once the callbacks of the current iteration are done and the
 * loop has nothing else pending (an idle watcher), and at the latest after a bound even when it
 * never has nothing pending (a timer). An idle watcher alone waits for a pass of the loop with no
 * event pending: a loop kept busy by a stream of events (one tenant's watch traffic, say) would
 * never get to the work at all. */
#ifndef TELO_UTIL_SOON_H
#define TELO_UTIL_SOON_H

#include <ev.h>

typedef void util_soon_fn(void *ud);

/* Embedded in its owner, which keeps it in place while scheduled. */
struct util_soon {
    ev_idle idle;
    ev_timer late;
    double max_delay_s;
    util_soon_fn *fn;
    void *ud;
};

/* Prepares s to call fn(ud), once per schedule, at most max_delay_s after the schedule (> 0).
 * Cannot fail. */
void util_soon_init(struct util_soon *s, double max_delay_s, util_soon_fn *fn, void *ud);

/* Asks for one call of fn; a schedule already waiting is kept (not pushed back). Cannot fail. */
void util_soon_schedule(struct ev_loop *loop, struct util_soon *s);

/* Withdraws a waiting schedule; nothing when there is none. Cannot fail. */
void util_soon_cancel(struct ev_loop *loop, struct util_soon *s);

#endif
