#include "util/soon.h"

#include <stddef.h>

static struct util_soon *of_idle(ev_idle *w)
{
    return (struct util_soon *)((char *)w - offsetof(struct util_soon, idle));
}

static struct util_soon *of_timer(ev_timer *w)
{
    return (struct util_soon *)((char *)w - offsetof(struct util_soon, late));
}

static void run(struct ev_loop *loop, struct util_soon *s)
{
    util_soon_cancel(loop, s);
    s->fn(s->ud);
}

static void on_idle(struct ev_loop *loop, ev_idle *w, int revents)
{
    (void)revents;
    run(loop, of_idle(w));
}

static void on_late(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    run(loop, of_timer(w));
}

void util_soon_init(struct util_soon *s, double max_delay_s, util_soon_fn *fn, void *ud)
{
    ev_idle_init(&s->idle, on_idle);
    ev_timer_init(&s->late, on_late, max_delay_s, 0.);
    s->max_delay_s = max_delay_s;
    s->fn = fn;
    s->ud = ud;
}

void util_soon_schedule(struct ev_loop *loop, struct util_soon *s)
{
    if (ev_is_active(&s->idle))
        return;
    ev_idle_start(loop, &s->idle);
    /* Set again each time: a stopped timer keeps what was left of its wait, not the wait. */
    ev_timer_set(&s->late, s->max_delay_s, 0.);
    ev_timer_start(loop, &s->late);
}

void util_soon_cancel(struct ev_loop *loop, struct util_soon *s)
{
    ev_idle_stop(loop, &s->idle);
    ev_timer_stop(loop, &s->late);
}
