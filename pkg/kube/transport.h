/* HTTP transport to one API server: libcurl multi-socket on a libev loop, HTTP/2 multiplexed. */
#ifndef TELO_KUBE_TRANSPORT_H
#define TELO_KUBE_TRANSPORT_H

#include <stddef.h>

#include "util/buf.h"
#include "util/err.h"

struct ev_loop;
struct kube_config;
struct kube_transport;
struct kube_call;

/* Limits and timeouts; a zero field takes the default named in its comment. */
struct kube_transport_opts {
    size_t max_body;             /* response body cap in bytes; 64 MiB (lists are the big ones) */
    long connect_timeout_ms;     /* TCP + TLS handshake; 5000 */
    long request_timeout_ms;     /* whole request, non-streaming; 30000 */
    int max_retries;             /* 429/503 Retry-After and GET connection-error retries; 3 */
    long max_retry_delay_ms;     /* cap on one Retry-After wait; 30000 */
    long http1_max_connections;  /* connection cap once the server is known not to speak h2; 16 */
    long max_concurrent_streams; /* streams we allow per h2 connection; 1000 (server caps it) */
    const char *user_agent;      /* "telo-operator/<version>" */
};

/* One HTTP request. All pointers are borrowed and only read during kube_transport_submit. */
struct kube_request {
    const char *method;       /* "GET", "POST", "PUT", "PATCH", "DELETE" */
    const char *path;         /* absolute path with query, e.g. "/api/v1/namespaces?limit=5" */
    const char *content_type; /* of body; NULL when there is no body */
    const char *body;         /* request body or NULL */
    size_t body_len;
    const char *verb; /* metrics label (e.g. "WATCH", "LIST"); NULL uses method */
    long timeout_ms;  /* 0: opts.request_timeout_ms; -1: none (streams rely on keepalive) */
    size_t max_body;  /* 0: opts.max_body */
    int streaming;    /* 1: a 2xx body goes to on_data as it arrives, never buffered */
    int no_retry;     /* 1: never retry (a caller with its own retry policy) */
};

/* What came back. Valid only during the on_done callback. */
struct kube_response {
    int rc;                     /* 0 when an HTTP response arrived, else a negative telo code */
    const struct telo_err *err; /* message when rc != 0 (connection refused, timeout, ...) */
    long code;                  /* HTTP status, 0 when none arrived */
    struct buf *body;           /* buffered body (for streaming calls: only a non-2xx body); the
                                 * callback may take its storage with buf_steal */
    long retry_after_s;         /* parsed Retry-After of the final response, -1 when absent */
    int http_version;           /* 2 for HTTP/2, 1 for HTTP/1.x, 0 unknown */
    double duration_s;          /* of the final attempt */
    int attempts;               /* 1 + retries made */
};

/* Called once when the call finishes (success, HTTP error or transport failure), unless the call
 * was cancelled first. The call handle is freed right after the callback returns. The callback
 * may submit and cancel other calls. */
typedef void kube_done_fn(struct kube_call *call, const struct kube_response *resp, void *ud);

/* Streaming calls: receives 2xx body bytes as they arrive. Return 0 to continue or -1 to abort
 * the call (on_done then reports -TELO_EIO "aborted by the receiver"). Must not cancel its own
 * call; may submit other calls. */
typedef int kube_data_fn(struct kube_call *call, const char *data, size_t len, void *ud);

/* Request counters and duration histograms, as client-go's rest_client_requests_total{code,verb}
 * and rest_client_request_duration_seconds{verb}. */
#define KUBE_METRICS_MAX_SERIES 64
#define KUBE_METRICS_BUCKETS    12
extern const double kube_metrics_bucket_bounds[KUBE_METRICS_BUCKETS]; /* seconds, upper bounds */

struct kube_metrics_series {
    char verb[12];
    long code; /* 0: no response (connection error) */
    unsigned long count;
    double duration_sum_s;
    unsigned long buckets[KUBE_METRICS_BUCKETS]; /* cumulative counts, Prometheus style */
};

struct kube_metrics {
    struct kube_metrics_series series[KUBE_METRICS_MAX_SERIES];
    int nseries;            /* series past the maximum are folded into verb "other" */
    unsigned long connects; /* new connections curl opened (CURLINFO_NUM_CONNECTS summed) */
    unsigned long retries;
    unsigned long in_flight;
};

/* Creates a transport for cfg's server on loop. cfg and loop are borrowed and must outlive the
 * transport; cfg's credentials are read at each request (so rotated tokens are picked up). opts
 * may be NULL. Returns NULL with err filled (-TELO_ENOMEM, or -TELO_EINVAL for a server URL that
 * is not https:// or http://). */
struct kube_transport *kube_transport_new(struct ev_loop *loop, struct kube_config *cfg,
                                          const struct kube_transport_opts *opts,
                                          struct telo_err *err);

/* Cancels every call in flight without calling their callbacks, closes connections and frees t.
 * NULL is a no-op. */
void kube_transport_free(struct kube_transport *t);

/* Starts req. on_done is required, on_data only for streaming requests. The request is added to
 * curl on the next loop iteration, so this may be called from any callback. Returns the call
 * handle (owned by the transport; valid until on_done returns or kube_call_cancel), or NULL with
 * err filled: -TELO_EINVAL for a malformed request or -TELO_ENOMEM. Credentials are fetched when
 * the request is started, so a credential error (exec plugin failed, token file unreadable)
 * arrives in on_done as resp->rc with resp->code 0. An exec plugin that must run first runs as a
 * child process watched by the loop, never blocking it; the requests wait for it in a queue. */
struct kube_call *kube_transport_submit(struct kube_transport *t, const struct kube_request *req,
                                        kube_done_fn *on_done, kube_data_fn *on_data, void *ud,
                                        struct telo_err *err);

/* Cancels call: its callbacks are not called again and the handle is freed now. NULL is a no-op.
 * Must not be called from the call's own on_data. */
void kube_call_cancel(struct kube_call *call);

/* Has release(ud) called when call ends without its on_done: cancelled, or the transport freed
 * with it still running. Lets a caller that allocated ud for on_done to free (the REST verbs'
 * context) free it then too; set it right after kube_transport_submit. */
void kube_call_set_release(struct kube_call *call, void (*release)(void *ud));

/* Returns the transport's counters; the pointer stays valid for the transport's lifetime. */
const struct kube_metrics *kube_transport_metrics(const struct kube_transport *t);

/* The loop the transport runs on. */
struct ev_loop *kube_transport_loop(const struct kube_transport *t);

/* The config the transport authenticates with. */
struct kube_config *kube_transport_config(const struct kube_transport *t);

/* Kinds of failed attempt, for kube_retry_delay_ms. */
enum kube_failure {
    KUBE_FAIL_NONE = 0,   /* an HTTP response arrived; look at the code */
    KUBE_FAIL_CONNECT,    /* could not connect or TLS failed before sending: safe for any verb */
    KUBE_FAIL_CONNECTION, /* connection lost after the request may have been sent */
    KUBE_FAIL_TIMEOUT,
    KUBE_FAIL_OTHER,
};

/* Pure retry policy. attempt is the number of attempts made so far (1 after the first).
 * retry_after_s is the response's Retry-After (-1 when absent). Returns the delay in ms before
 * the next attempt, or -1 for "do not retry". Rules: at most max_retries retries; 429 always, and
 * 5xx only with Retry-After, wait Retry-After (capped at max_delay_ms; 1 s when 429 has none), as
 * client-go does, because the server did not act on the request; connection failures are retried
 * only for idempotent methods (GET) unless the request was never sent (KUBE_FAIL_CONNECT), with
 * 200 ms doubling backoff. */
long kube_retry_delay_ms(const char *method, long code, enum kube_failure failure,
                         long retry_after_s, int attempt, int max_retries, long max_delay_ms);

#endif
