/* The operator's /healthz, /readyz and /metrics, served by a pkg/httpd server. */
#include "controller/endpoints.h"

#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>

#define READY_REASON_MAX 4096

struct readiness {
    endpoints_ready_fn *ready;
    void *user;
};

static int healthz(const struct httpd_request *req, struct httpd_response *resp, void *user)
{
    (void)req;
    (void)user;
    return httpd_response_text(resp, 200, NULL, "ok\n");
}

static int readyz(const struct httpd_request *req, struct httpd_response *resp, void *user)
{
    (void)req;
    const struct readiness *r = user;
    struct buf reason;
    buf_init(&reason, READY_REASON_MAX);
    /* A reason cut at its bound still says why; only an empty one gets a generic text. */
    if (r->ready == NULL || r->ready(r->user, &reason)) {
        buf_release(&reason);
        return httpd_response_text(resp, 200, NULL, "ok\n");
    }
    int rc = httpd_response_text(resp, 503, NULL, reason.len > 0 ? reason.data : "not ready");
    if (rc == 0 && (reason.len == 0 || reason.data[reason.len - 1] != '\n'))
        rc = buf_append_str(&resp->body, "\n");
    buf_release(&reason);
    return rc;
}

static int metrics(const struct httpd_request *req, struct httpd_response *resp, void *user)
{
    (void)req;
    struct telo_err err = {0};
    int rc = metrics_render(user, &resp->body, &err);
    if (rc < 0) {
        telo_log(TELO_LOG_ERROR, "cannot serve /metrics", "error=\"%s\"", err.msg);
        return rc;
    }
    resp->status = 200;
    snprintf(resp->content_type, sizeof(resp->content_type), "%s", METRICS_CONTENT_TYPE);
    return 0;
}

int endpoints_register(struct httpd_server *srv, struct metrics_registry *reg,
                       endpoints_ready_fn *ready, void *user, struct telo_err *err)
{
    int rc = httpd_route(srv, "/healthz", healthz, NULL, NULL, err);
    if (rc < 0)
        return rc;
    struct readiness *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return telo_err_set(err, TELO_ENOMEM, "endpoints: out of memory");
    r->ready = ready;
    r->user = user;
    rc = httpd_route(srv, "/readyz", readyz, r, free, err);
    if (rc < 0)
        return rc;
    return httpd_route(srv, "/metrics", metrics, reg, NULL, err);
}
