/* A small HTTP client for arbitrary hosts (image registries and their token services): libcurl
 * multi-socket on a libev loop, one request at a time per call, no retries of its own. */
#ifndef TELO_BUILD_HTTP_H
#define TELO_BUILD_HTTP_H

#include "util/buf.h"
#include "util/err.h"

#include <stddef.h>

struct ev_loop;
struct build_http;
struct build_http_call;

/* One request. Pointers are borrowed and only read during build_http_submit. pkg/kube's
 * transport talks to one API server with its credentials; this one goes wherever url says. */
struct build_http_request {
    const char *method;         /* "GET" or "HEAD" */
    const char *url;            /* http:// or https:// */
    const char *const *headers; /* NULL-terminated "Name: value" lines, or NULL */
    long timeout_ms;            /* whole request; 0: 10000 */
    size_t max_body;            /* response body cap; 0: 1 MiB */
    int insecure_tls;           /* 1: do not verify the server's certificate */
};

/* What came back; valid only during the callback. */
struct build_http_response {
    int rc;                       /* 0 when an HTTP response arrived, else negative */
    const struct telo_err *err;   /* why, when rc != 0 ("connection refused", "timed out") */
    long code;                    /* HTTP status; 0 when none arrived */
    const char *www_authenticate; /* the last WWW-Authenticate header, or NULL */
    const char *content_digest;   /* Docker-Content-Digest, or NULL */
    const struct buf *body;       /* up to max_body bytes */
};

/* Called once per call that was not cancelled; the call is freed when it returns. It may submit
 * and cancel other calls. */
typedef void build_http_done_fn(struct build_http_call *call,
                                const struct build_http_response *resp, void *ud);

/* Creates a client on loop (borrowed; must outlive it). Returns NULL with err filled when out of
 * memory or libcurl cannot start. */
struct build_http *build_http_new(struct ev_loop *loop, struct telo_err *err);

/* Cancels every call without calling back and frees h. NULL is a no-op. */
void build_http_free(struct build_http *h);

/* Starts req on the next loop iteration (never calls back from inside this function). Returns the
 * call (owned by h; valid until its callback returns or it is cancelled), or NULL with err filled:
 * -TELO_EINVAL for a missing method, a url that is not http(s), or a missing callback;
 * -TELO_ENOMEM. */
struct build_http_call *build_http_submit(struct build_http *h,
                                          const struct build_http_request *req,
                                          build_http_done_fn *done, void *ud, struct telo_err *err);

/* Cancels call: no callback, freed now. NULL is a no-op. */
void build_http_cancel(struct build_http_call *call);

/* Calls in flight or queued. */
size_t build_http_pending(const struct build_http *h);

#endif
