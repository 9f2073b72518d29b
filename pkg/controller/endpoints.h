/* The operator's /healthz, /readyz and /metrics, served by a pkg/httpd server. */
#ifndef TELO_CONTROLLER_ENDPOINTS_H
#define TELO_CONTROLLER_ENDPOINTS_H

#include "controller/metrics.h"
#include "httpd/server.h"
#include "util/buf.h"
#include "util/err.h"

/* Says whether the process is ready for traffic (caches synced; with leader election, leader or
 * warm follower). Returns 1 when ready; else 0 after appending to reason a short text a person
 * can act on ("informer telosessions: not synced"), which /readyz returns with its 503. */
typedef int endpoints_ready_fn(void *user, struct buf *reason);

/* Registers on srv: /healthz, always 200 "ok" (answering proves the loop runs); /readyz, 200 "ok"
 * when ready(user) says so, else 503 with the reason (ready NULL: always ready); /metrics, reg's
 * rendering as METRICS_CONTENT_TYPE, or 500 when it does not fit the server's response bound.
 * reg, ready and user are borrowed and must outlive srv. Returns 0, or the errors of httpd_route
 * (-TELO_EINVAL when a path is taken, -TELO_ENOMEM); routes registered before a failure stay. */
int endpoints_register(struct httpd_server *srv, struct metrics_registry *reg,
                       endpoints_ready_fn *ready, void *user, struct telo_err *err);

#endif
