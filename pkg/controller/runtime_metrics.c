/* The controller runtime's Prometheus metrics, under controller-runtime's and client-go's names. */
#include "controller/runtime_metrics.h"

#include "cache/reflector.h"
#include "controller/leader.h"
#include "kube/transport.h"

#include <ev.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ctrl_metrics {
    struct ctrl_manager *m;
    struct kube_transport *t;
    struct leader_elector *el;
    struct metrics_family *reconcile_total, *reconcile_errors, *terminal_errors, *reconcile_time;
    struct metrics_family *active_workers, *max_workers;
    struct metrics_family *depth, *adds, *retries, *queue_duration, *work_duration;
    struct metrics_family *unfinished, *longest;
    struct metrics_family *requests, *request_duration;
    struct metrics_family *leader;
    struct metrics_family *cache_objects, *cache_bytes, *cache_relists;
    int max_concurrent;
};

/* Designated initializers keep -Wmissing-field-initializers quiet and the table readable. */
#define DESC(t, n, h, l)                                                                           \
    {                                                                                              \
        .type = (t), .name = (n), .help = (h), .labels = (l)                                       \
    }
#define HDESC(n, h, l, b, nb)                                                                      \
    {                                                                                              \
        .type = METRICS_HISTOGRAM, .name = (n), .help = (h), .labels = (l), .buckets = (b),        \
        .nbuckets = (nb)                                                                           \
    }

static const char *const controller_label[] = {"controller", NULL};
static const char *const controller_result[] = {"controller", "result", NULL};
static const char *const queue_label[] = {"name", NULL};
static const char *const code_method[] = {"code", "method", NULL};
static const char *const verb_label[] = {"verb", NULL};
static const char *const name_label[] = {"name", NULL};
static const char *const informer_label[] = {"informer", NULL};

static struct metrics_series *series1(struct metrics_family *f, const char *a)
{
    const char *v[] = {a};
    return metrics_series(f, v, NULL);
}

static struct metrics_series *series2(struct metrics_family *f, const char *a, const char *b)
{
    const char *v[] = {a, b};
    return metrics_series(f, v, NULL);
}

/* The HTTP method of one of the transport's verb labels. */
static const char *http_method(const char *verb)
{
    static const struct {
        const char *verb, *method;
    } map[] = {{"LIST", "GET"},
               {"WATCH", "GET"},
               {"APPLY", "PATCH"},
               {"CREATE", "POST"},
               {"UPDATE", "PUT"}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        if (strcmp(verb, map[i].verb) == 0)
            return map[i].method;
    }
    /* GET, PATCH, DELETE, POST and PUT are methods already. */
    static const char *const methods[] = {"GET", "PATCH", "DELETE", "POST", "PUT"};
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        if (strcmp(verb, methods[i]) == 0)
            return methods[i];
    }
    return "other";
}

static void collect(struct metrics_registry *reg, void *user)
{
    (void)reg;
    struct ctrl_metrics *rm = user;
    struct ev_loop *loop = kube_transport_loop(rm->t);
    double now = ev_now(loop);
    struct ctrl_controller *c;
    for (size_t i = 0; (c = ctrl_manager_controller(rm->m, i)); i++) {
        const char *name = ctrl_controller_name(c);
        const struct ctrl_controller_stats *st = ctrl_controller_stats(c);
        for (int o = CTRL_SUCCESS; o <= CTRL_TERMINAL_ERROR; o++)
            metrics_counter_set(series2(rm->reconcile_total, name, ctrl_outcome_name(o)),
                                (double)st->reconciles[o]);
        metrics_counter_set(series1(rm->reconcile_errors, name),
                            (double)st->reconciles[CTRL_ERROR]);
        metrics_counter_set(series1(rm->terminal_errors, name),
                            (double)st->reconciles[CTRL_TERMINAL_ERROR]);
        metrics_histogram_load(series1(rm->reconcile_time, name), &st->reconcile_time);
        metrics_gauge_set(series1(rm->active_workers, name), (double)st->in_flight);
        metrics_gauge_set(series1(rm->max_workers, name), rm->max_concurrent);
        const struct wq *q = ctrl_controller_queue(c);
        const struct wq_metrics *qm = wq_metrics(q);
        metrics_gauge_set(series1(rm->depth, name), (double)wq_len(q));
        metrics_counter_set(series1(rm->adds, name), (double)qm->adds);
        metrics_counter_set(series1(rm->retries, name), (double)qm->retries);
        metrics_histogram_load(series1(rm->queue_duration, name), &qm->queue_duration);
        metrics_histogram_load(series1(rm->work_duration, name), &qm->work_duration);
        double longest, total;
        wq_running_times(q, now, &longest, &total);
        metrics_gauge_set(series1(rm->unfinished, name), total);
        metrics_gauge_set(series1(rm->longest, name), longest);
    }
    const struct kube_metrics *km = kube_transport_metrics(rm->t);
    /* client-go labels requests by HTTP method; the transport keeps finer verbs (LIST, WATCH,
     * APPLY): fold them into their methods, summing the series that share one. */
    struct {
        char code[16];
        const char *method;
        unsigned long count;
    } requests[KUBE_METRICS_MAX_SERIES] = {0};
    int nrequests = 0;
    struct histogram by_method[KUBE_METRICS_MAX_SERIES];
    const char *methods[KUBE_METRICS_MAX_SERIES];
    int nmethods = 0;
    for (int i = 0; i < km->nseries; i++) {
        const struct kube_metrics_series *s = &km->series[i];
        const char *method = http_method(s->verb);
        char code[16];
        if (s->code)
            snprintf(code, sizeof(code), "%ld", s->code);
        else
            snprintf(code, sizeof(code), "<error>");
        int r;
        for (r = 0; r < nrequests; r++) {
            if (strcmp(requests[r].method, method) == 0 && strcmp(requests[r].code, code) == 0)
                break;
        }
        if (r == nrequests) {
            snprintf(requests[r].code, sizeof(requests[r].code), "%s", code);
            requests[r].method = method;
            requests[r].count = s->count;
            nrequests++;
        } else {
            requests[r].count += s->count;
        }
        int m;
        for (m = 0; m < nmethods && strcmp(methods[m], method) != 0; m++)
            ;
        if (m == nmethods) {
            methods[m] = method;
            memset(&by_method[m], 0, sizeof(by_method[m]));
            by_method[m].nbounds = KUBE_METRICS_BUCKETS;
            memcpy(by_method[m].bounds, kube_metrics_bucket_bounds,
                   sizeof(kube_metrics_bucket_bounds));
            nmethods++;
        }
        by_method[m].count += s->count;
        by_method[m].sum += s->duration_sum_s;
        /* transport buckets are cumulative; histogram counts are per bucket */
        for (int b = 0; b < KUBE_METRICS_BUCKETS; b++)
            by_method[m].counts[b] += s->buckets[b] - (b ? s->buckets[b - 1] : 0);
    }
    for (int r = 0; r < nrequests; r++)
        metrics_counter_set(series2(rm->requests, requests[r].code, requests[r].method),
                            (double)requests[r].count);
    for (int m = 0; m < nmethods; m++)
        metrics_histogram_load(series1(rm->request_duration, methods[m]), &by_method[m]);
    if (rm->el) {
        const struct leader_status *ls = leader_status(rm->el);
        metrics_gauge_set(series1(rm->leader, ls->name), ls->is_leader);
    }
    struct ctrl_informer *inf;
    for (size_t i = 0; (inf = ctrl_manager_informer(rm->m, i)); i++) {
        const struct cache_reflector *r = ctrl_informer_reflector(inf);
        const struct cache_store *store = cache_reflector_store(r);
        const char *name = ctrl_informer_name(inf);
        metrics_gauge_set(series1(rm->cache_objects, name), (double)cache_store_len(store));
        metrics_gauge_set(series1(rm->cache_bytes, name), (double)cache_store_bytes(store));
        metrics_counter_set(series1(rm->cache_relists, name),
                            (double)cache_reflector_stats(r)->relists_410);
    }
}

void ctrl_metrics_free(struct ctrl_metrics *cm)
{
    free(cm);
}

struct ctrl_metrics *ctrl_metrics_register(struct metrics_registry *reg, struct ctrl_manager *m,
                                           struct kube_transport *t, struct leader_elector *el,
                                           struct telo_err *err)
{
    struct ctrl_metrics *rm = calloc(1, sizeof(*rm));
    if (!rm) {
        telo_err_set(err, TELO_ENOMEM, "metrics: out of memory");
        return NULL;
    }
    rm->m = m;
    rm->t = t;
    rm->el = el;
    rm->max_concurrent = ctrl_manager_max_concurrent(m);
    double reconcile_buckets[15], queue_buckets[12];
    for (int i = 0; i < 15; i++)
        reconcile_buckets[i] = 0.005 * (double)(1 << i);
    queue_buckets[0] = 1e-8;
    for (int i = 1; i < 12; i++)
        queue_buckets[i] = queue_buckets[i - 1] * 10;
    struct {
        struct metrics_family **slot;
        struct metrics_desc desc;
    } families[] = {
        {&rm->reconcile_total,
         DESC(METRICS_COUNTER, "controller_runtime_reconcile_total",
              "Total number of reconciliations per controller", controller_result)},
        {&rm->reconcile_errors,
         DESC(METRICS_COUNTER, "controller_runtime_reconcile_errors_total",
              "Total number of reconciliation errors per controller", controller_label)},
        {&rm->terminal_errors,
         DESC(METRICS_COUNTER, "controller_runtime_terminal_reconcile_errors_total",
              "Total number of terminal reconciliation errors per controller", controller_label)},
        {&rm->reconcile_time, HDESC("controller_runtime_reconcile_time_seconds",
                                    "Length of time per reconciliation per controller",
                                    controller_label, reconcile_buckets, 15)},
        {&rm->active_workers,
         DESC(METRICS_GAUGE, "controller_runtime_active_workers",
              "Number of currently used workers per controller", controller_label)},
        {&rm->max_workers,
         DESC(METRICS_GAUGE, "controller_runtime_max_concurrent_reconciles",
              "Maximum number of concurrent reconciles per controller", controller_label)},
        {&rm->depth,
         DESC(METRICS_GAUGE, "workqueue_depth", "Current depth of workqueue", queue_label)},
        {&rm->adds, DESC(METRICS_COUNTER, "workqueue_adds_total",
                         "Total number of adds handled by workqueue", queue_label)},
        {&rm->retries, DESC(METRICS_COUNTER, "workqueue_retries_total",
                            "Total number of retries handled by workqueue", queue_label)},
        {&rm->queue_duration, HDESC("workqueue_queue_duration_seconds",
                                    "How long in seconds an item stays in workqueue before being "
                                    "requested",
                                    queue_label, queue_buckets, 12)},
        {&rm->work_duration, HDESC("workqueue_work_duration_seconds",
                                   "How long in seconds processing an item from workqueue takes",
                                   queue_label, queue_buckets, 12)},
        {&rm->unfinished,
         DESC(METRICS_GAUGE, "workqueue_unfinished_work_seconds",
              "How many seconds of work has been done that is in progress", queue_label)},
        {&rm->longest, DESC(METRICS_GAUGE, "workqueue_longest_running_processor_seconds",
                            "How many seconds has the longest running processor for workqueue been "
                            "running",
                            queue_label)},
        {&rm->requests,
         DESC(METRICS_COUNTER, "rest_client_requests_total",
              "Number of HTTP requests, partitioned by status code and method", code_method)},
        {&rm->request_duration, HDESC("rest_client_request_duration_seconds",
                                      "Request latency in seconds, broken down by verb", verb_label,
                                      kube_metrics_bucket_bounds, KUBE_METRICS_BUCKETS)},
        {&rm->leader, DESC(METRICS_GAUGE, "leader_election_master_status",
                           "Gauge of if the reporting system is master of the relevant lease, 0 "
                           "indicates backup, 1 indicates master",
                           name_label)},
        {&rm->cache_objects, DESC(METRICS_GAUGE, "telo_cache_objects",
                                  "Objects held by an informer's cache", informer_label)},
        {&rm->cache_bytes,
         DESC(METRICS_GAUGE, "telo_cache_bytes",
              "Bytes held by an informer's cache (objects and indexes)", informer_label)},
        {&rm->cache_relists,
         DESC(METRICS_COUNTER, "telo_cache_relists_total",
              "Relists forced by 410 Gone (resourceVersion too old)", informer_label)},
    };
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        if (families[i].slot == &rm->leader && !el)
            continue;
        *families[i].slot = metrics_register(reg, &families[i].desc, err);
        if (!*families[i].slot) {
            free(rm);
            return NULL;
        }
    }
    if (metrics_add_collector(reg, collect, rm, err) < 0) {
        free(rm);
        return NULL;
    }
    return rm;
}
