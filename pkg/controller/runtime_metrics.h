/* The controller runtime's Prometheus metrics, under controller-runtime's and client-go's names. */
#ifndef TELO_CONTROLLER_RUNTIME_METRICS_H
#define TELO_CONTROLLER_RUNTIME_METRICS_H

#include "controller/manager.h"
#include "controller/metrics.h"
#include "util/err.h"

struct kube_transport;
struct leader_elector;

/* Registers on reg, with a collector that mirrors the live counters at each scrape:
 * controller_runtime_reconcile_total{controller,result}, _reconcile_errors_total,
 * _terminal_reconcile_errors_total, _reconcile_time_seconds, _active_workers,
 * _max_concurrent_reconciles; workqueue_depth, _adds_total, _retries_total,
 * _queue_duration_seconds, _work_duration_seconds, _unfinished_work_seconds,
 * _longest_running_processor_seconds (label name = the controller);
 * rest_client_requests_total{code,method}, rest_client_request_duration_seconds{verb};
 * leader_election_master_status{name} (when el is not NULL); and per informer
 * telo_cache_objects, telo_cache_bytes, telo_cache_relists_total{informer}. m, t and el are
 * borrowed and must outlive reg's renders. Returns the collector's state (free it with
 * ctrl_metrics_free after the registry) or NULL with err filled. */
struct ctrl_metrics *ctrl_metrics_register(struct metrics_registry *reg, struct ctrl_manager *m,
                                           struct kube_transport *t, struct leader_elector *el,
                                           struct telo_err *err);

/* Frees what ctrl_metrics_register returned. Accepts NULL. */
void ctrl_metrics_free(struct ctrl_metrics *cm);

#endif
