#include "controller/events_metrics.h"

#include <stddef.h>

static void collect(struct metrics_registry *reg, void *user)
{
    (void)reg;
    const struct events_metrics *em = user;
    const struct events_stats *s = em->stats;
    /* Dropped and failed Events are otherwise visible only as a warning in the log, or not at
     * all: a recorder that falls behind under a burst (its queue holds 1,000) loses the story
     * `kubectl describe` tells, and this is where that shows. */
    const struct {
        const char *outcome;
        unsigned long n;
    } rows[] = {{"created", s->created},   {"patched", s->patched},
                {"filtered", s->filtered}, {"over_namespace_budget", s->budgeted},
                {"dropped", s->dropped},   {"failed", s->failed}};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const char *v[] = {rows[i].outcome};
        metrics_counter_set(metrics_series(em->total, v, NULL), (double)rows[i].n);
    }
    metrics_gauge_set(metrics_series(em->queued, NULL, NULL), (double)(s->queued + s->in_flight));
}

int events_metrics_register(struct events_metrics *em, const struct events_stats *stats,
                            struct metrics_registry *reg, struct telo_err *err)
{
    static const char *const outcome_label[] = {"outcome", NULL};
    struct metrics_desc total = {.type = METRICS_COUNTER,
                                 .name = "telo_events_total",
                                 .help = "Events the recorder handled, by outcome: created, "
                                         "patched (a series bumped), filtered (spam filter), "
                                         "over_namespace_budget (a new Normal Event past its "
                                         "namespace's budget), dropped (queue full), failed "
                                         "(gave up after errors)",
                                 .labels = outcome_label};
    struct metrics_desc queued = {.type = METRICS_GAUGE,
                                  .name = "telo_events_queued",
                                  .help = "Event writes waiting or in flight"};
    em->stats = stats;
    if (!(em->total = metrics_register(reg, &total, err)) ||
        !(em->queued = metrics_register(reg, &queued, err)))
        return -err->code;
    return metrics_add_collector(reg, collect, em, err);
}
