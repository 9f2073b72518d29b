/* HTTP transport to one API server: libcurl multi-socket on a libev loop, HTTP/2 multiplexed. */
#include "kube/transport.h"

#include "kube/config.h"
#include "kube/status.h"
#include "util/curlev.h"
#include "util/log.h"

#include <curl/curl.h>
#include <ev.h>

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define DEFAULT_MAX_BODY              ((size_t)64 << 20)
#define DEFAULT_CONNECT_TIMEOUT_MS    5000L
#define DEFAULT_REQUEST_TIMEOUT_MS    30000L
#define DEFAULT_MAX_RETRIES           3
#define DEFAULT_MAX_RETRY_DELAY_MS    30000L
#define DEFAULT_HTTP1_MAX_CONNECTIONS 16L
#define DEFAULT_MAX_STREAMS           1000L
/* A non-2xx body on a stream is a metav1.Status: small. */
#define ERROR_BODY_MAX ((size_t)1 << 20)
/* Every request and watch shares one HTTP/2 connection. When the API server vanishes without a
 * reset, Linux sends no keepalive probes while our data waits for an ACK, so the connection
 * would be given up only after tcp_retries2 (~15 minutes), and a request's timeout resets just
 * its stream. 30 s without an ACK drops the connection instead; the next request reconnects. */
#define USER_TIMEOUT_MS 30000U

const double kube_metrics_bucket_bounds[KUBE_METRICS_BUCKETS] = {0.005, 0.025, 0.1, 0.25, 0.5, 1,
                                                                 2,     4,     8,   15,   30,  60};

/* PENDING: in t->pending or t->kicking; AUTH: in t->auth_wait, waiting for an exec plugin;
 * WAITING: for its retry timer. */
enum call_state { CALL_PENDING, CALL_AUTH, CALL_RUNNING, CALL_WAITING, CALL_DEAD };

struct kube_call {
    struct kube_transport *t;
    struct kube_call *prev, *next; /* t->calls: every live call */
    struct kube_call *queue_next;  /* t->pending, t->kicking, t->auth_wait or t->dead */
    enum call_state state;
    int cancelled;

    char *method;
    char *path;
    char *content_type;
    char *body;
    size_t body_len;
    char verb[12];
    long timeout_ms;
    size_t max_body;
    int streaming;
    int no_retry;

    kube_done_fn *on_done;
    kube_data_fn *on_data;
    void (*release)(void *ud); /* when the call ends without on_done */
    void *ud;

    CURL *easy;
    struct curl_slist *headers;
    char errbuf[CURL_ERROR_SIZE];
    struct buf resp;
    long code;
    long retry_after_s;
    int header_http_version;
    int attempts;
    int auth_retried;
    int too_big;
    int receiver_aborted;
    ev_timer retry_timer;
};

struct kube_transport {
    struct ev_loop *loop;
    struct kube_config *cfg;
    struct kube_transport_opts opts;
    char *user_agent_header;
    char *url_base;   /* scheme://host[:port][/prefix] used in request URLs */
    char *connect_to; /* "sni:port:host:port" when tls_server_name is set, else NULL */
    struct curl_slist connect_to_list; /* one node pointing at connect_to */
    struct curlev *cv;
    ev_timer kick;     /* adds pending calls outside of curl callbacks */
    int http1;         /* the server answered HTTP/1.x: stop waiting for multiplexing */
    int http1_pending; /* http1 was just learnt; raise the connection cap */
    struct kube_call *calls;
    struct kube_call *pending, *pending_tail;
    struct kube_call *kicking; /* taken from pending by the kick being run */
    /* Calls waiting for the credentials (an exec plugin running on the loop), and our wait. */
    struct kube_call *auth_wait, *auth_wait_tail;
    struct kube_execcred_wait *cred_wait;
    struct kube_call *dead;
    struct kube_metrics metrics;
};

long kube_retry_delay_ms(const char *method, long code, enum kube_failure failure,
                         long retry_after_s, int attempt, int max_retries, long max_delay_ms)
{
    if (attempt > max_retries)
        return -1;
    if (failure == KUBE_FAIL_NONE) {
        long delay_ms;
        if (code == 429)
            delay_ms = retry_after_s >= 0 ? retry_after_s * 1000 : 1000;
        else if (code >= 500 && code < 600 && retry_after_s >= 0)
            delay_ms = retry_after_s * 1000;
        else
            return -1;
        if (retry_after_s > max_delay_ms / 1000)
            delay_ms = max_delay_ms;
        return delay_ms < max_delay_ms ? delay_ms : max_delay_ms;
    }
    int idempotent = method != NULL && strcmp(method, "GET") == 0;
    if (failure == KUBE_FAIL_CONNECT || (failure == KUBE_FAIL_CONNECTION && idempotent)) {
        long delay_ms = 200L << (attempt - 1 < 8 ? attempt - 1 : 8);
        return delay_ms < max_delay_ms ? delay_ms : max_delay_ms;
    }
    return -1;
}

static enum kube_failure classify(CURLcode rc)
{
    switch (rc) {
    case CURLE_OK:
        return KUBE_FAIL_NONE;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
        return KUBE_FAIL_CONNECT;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_PARTIAL_FILE:
        return KUBE_FAIL_CONNECTION;
    case CURLE_OPERATION_TIMEDOUT:
        return KUBE_FAIL_TIMEOUT;
    default:
        return KUBE_FAIL_OTHER;
    }
}

static char *dup_or_null(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

/* ---- metrics ---- */

static void metrics_record(struct kube_transport *t, const char *verb, long code, double secs)
{
    struct kube_metrics *m = &t->metrics;
    struct kube_metrics_series *s = NULL;
    for (int i = 0; i < m->nseries; i++) {
        if (m->series[i].code == code && strcmp(m->series[i].verb, verb) == 0) {
            s = &m->series[i];
            break;
        }
    }
    if (s == NULL && m->nseries < KUBE_METRICS_MAX_SERIES) {
        s = &m->series[m->nseries++];
        memset(s, 0, sizeof(*s));
        snprintf(s->verb, sizeof(s->verb), "%s", verb);
        s->code = code;
    }
    if (s == NULL) {
        /* Bounded memory: an unexpected (verb, code) mix lands in the last series. */
        s = &m->series[KUBE_METRICS_MAX_SERIES - 1];
        snprintf(s->verb, sizeof(s->verb), "other");
        s->code = 0;
    }
    s->count++;
    s->duration_sum_s += secs;
    for (int i = 0; i < KUBE_METRICS_BUCKETS; i++)
        if (secs <= kube_metrics_bucket_bounds[i])
            s->buckets[i]++;
}

/* ---- per-call curl callbacks ---- */

static size_t on_header(char *data, size_t size, size_t n, void *userp)
{
    struct kube_call *c = userp;
    size_t len = size * n;
    if (len >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        /* A new response head (after 100 Continue, or a retry): forget the previous one. */
        c->retry_after_s = -1;
        c->header_http_version = (len >= 6 && data[5] == '2') ? 2 : 1;
        if (c->header_http_version == 1 && !c->t->http1) {
            /* The server will not multiplex: open parallel keep-alive connections instead.
             * Applied in after_curl, outside curl's callbacks. */
            c->t->http1 = 1;
            c->t->http1_pending = 1;
        }
        return len;
    }
    static const char name[] = "retry-after:";
    if (len > sizeof(name) - 1 && strncasecmp(data, name, sizeof(name) - 1) == 0) {
        char value[32];
        size_t vlen = len - (sizeof(name) - 1);
        if (vlen >= sizeof(value))
            vlen = sizeof(value) - 1;
        memcpy(value, data + sizeof(name) - 1, vlen);
        while (vlen > 0 && (value[vlen - 1] == '\r' || value[vlen - 1] == '\n'))
            vlen--;
        value[vlen] = '\0';
        c->retry_after_s = kube_retry_after_parse(value);
    }
    return len;
}

static size_t on_write(char *data, size_t size, size_t n, void *userp)
{
    struct kube_call *c = userp;
    size_t len = size * n;
    if (c->cancelled)
        return 0;
    if (c->code == 0)
        curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &c->code);
    if (c->streaming && c->code >= 200 && c->code < 300) {
        if (c->on_data(c, data, len, c->ud) != 0) {
            c->receiver_aborted = 1;
            return 0;
        }
        return len;
    }
    if (buf_append(&c->resp, data, len) != 0) {
        c->too_big = 1;
        return 0;
    }
    return len;
}

/* ---- call lifecycle ---- */

static void call_unlink(struct kube_call *c)
{
    struct kube_transport *t = c->t;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        t->calls = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static void call_release_easy(struct kube_call *c)
{
    if (c->easy != NULL) {
        /* Counted here rather than on completion so cancelled calls (watches) count too. */
        long connects = 0;
        curl_easy_getinfo(c->easy, CURLINFO_NUM_CONNECTS, &connects);
        c->t->metrics.connects += (unsigned long)connects;
        curlev_remove(c->t->cv, c->easy);
        curl_easy_cleanup(c->easy);
        c->easy = NULL;
        c->t->metrics.in_flight--;
    }
    curl_slist_free_all(c->headers);
    c->headers = NULL;
}

static void call_free(struct kube_call *c)
{
    /* finish() marks a call DEAD before its on_done; any other end skipped on_done. */
    if (c->release != NULL && c->state != CALL_DEAD)
        c->release(c->ud);
    ev_timer_stop(c->t->loop, &c->retry_timer);
    call_release_easy(c);
    call_unlink(c);
    buf_release(&c->resp);
    free(c->method);
    free(c->path);
    free(c->content_type);
    free(c->body);
    free(c);
}

static void kick_cb(struct ev_loop *loop, ev_timer *w, int revents);

static void queue_pending(struct kube_call *c)
{
    struct kube_transport *t = c->t;
    c->state = CALL_PENDING;
    c->queue_next = NULL;
    if (t->pending_tail != NULL)
        t->pending_tail->queue_next = c;
    else
        t->pending = c;
    t->pending_tail = c;
    if (!ev_is_active(&t->kick)) {
        ev_timer_set(&t->kick, 0., 0.);
        ev_timer_start(t->loop, &t->kick);
    }
}

/* Every connection to the API server gives up on data unacknowledged for USER_TIMEOUT_MS. */
static int on_sockopt(void *ud, curl_socket_t fd, curlsocktype purpose)
{
    (void)ud;
    (void)purpose;
    unsigned timeout = USER_TIMEOUT_MS;
    /* A socket that refuses it still works: a dead peer is only noticed later. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, sizeof(timeout));
    return CURL_SOCKOPT_OK;
}

/* Builds the easy handle for the next attempt. Returns 0 or a negative code with err filled. */
static int call_prepare(struct kube_call *c, struct telo_err *err)
{
    struct kube_transport *t = c->t;
    struct kube_config *cfg = t->cfg;
    const char *token = NULL, *cert_pem = NULL, *key_pem = NULL;
    /* kube_config_fetch_credentials made them ready: reading them never blocks. */
    kube_config_current_credentials(cfg, &token, &cert_pem, &key_pem);
    struct curl_slist *h = NULL;
    struct buf line;
    buf_init(&line, 16384);
    if (token != NULL) {
        if (buf_printf(&line, "Authorization: Bearer %s", token) != 0) {
            buf_release(&line);
            return telo_err_set(err, TELO_ETOOBIG, "%s: bearer token longer than 16 KiB",
                                cfg->source);
        }
        h = curl_slist_append(h, line.data);
        buf_reset(&line);
    }
    h = curl_slist_append(h, "Accept: application/json");
    h = curl_slist_append(h, t->user_agent_header);
    /* curl would otherwise wait up to 1 s for "100 Continue" before sending big HTTP/1.1 bodies. */
    h = curl_slist_append(h, "Expect:");
    if (c->content_type != NULL && buf_printf(&line, "Content-Type: %s", c->content_type) == 0)
        h = curl_slist_append(h, line.data);
    buf_reset(&line);
    int url_ok = buf_printf(&line, "%s%s", t->url_base, c->path) == 0;
    CURL *e = curl_easy_init();
    if (h == NULL || e == NULL || !url_ok) {
        curl_slist_free_all(h);
        curl_easy_cleanup(e);
        buf_release(&line);
        return telo_err_set(err, TELO_ENOMEM, "out of memory preparing %s %s", c->method, c->path);
    }
    c->headers = h;
    c->easy = e;
    curl_easy_setopt(e, CURLOPT_URL, line.data);
    buf_release(&line);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    /* A request that ends (timed out, cancelled) while the server's name is still being
     * resolved would otherwise wait for the resolver thread's getaddrinfo, stalling every
     * reconcile, probe and the leader lease (curl issues #2975, #4852, #8515). */
    curl_easy_setopt(e, CURLOPT_QUICK_EXIT, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    /* Wait for the first connection's ALPN answer rather than racing a second connection:
     * with CURLMOPT_MAX_HOST_CONNECTIONS 1 every request and watch shares one h2 connection. */
    if (!t->http1)
        curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, t->opts.connect_timeout_ms);
    long timeout = c->timeout_ms == 0 ? t->opts.request_timeout_ms : c->timeout_ms;
    if (timeout > 0)
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 30L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 10L);
    curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, on_sockopt);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    if (t->connect_to != NULL) {
        /* The URL carries tls_server_name so curl sends it as SNI and verifies against it. */
        curl_easy_setopt(e, CURLOPT_CONNECT_TO, &t->connect_to_list);
    }
    if (cfg->proxy_url != NULL)
        curl_easy_setopt(e, CURLOPT_PROXY, cfg->proxy_url);
    if (cfg->insecure_skip_tls_verify) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    } else if (cfg->ca_pem != NULL) {
        struct curl_blob blob = {cfg->ca_pem, cfg->ca_pem_len, CURL_BLOB_COPY};
        curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &blob);
    } else if (cfg->ca_file != NULL) {
        curl_easy_setopt(e, CURLOPT_CAINFO, cfg->ca_file);
    }
    if (cert_pem != NULL && key_pem != NULL) {
        struct curl_blob cert = {(void *)cert_pem, strlen(cert_pem), CURL_BLOB_COPY};
        struct curl_blob key = {(void *)key_pem, strlen(key_pem), CURL_BLOB_COPY};
        curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &cert);
        curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
        curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &key);
        curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
    } else if (cfg->client_cert_file != NULL && cfg->client_key_file != NULL) {
        curl_easy_setopt(e, CURLOPT_SSLCERT, cfg->client_cert_file);
        curl_easy_setopt(e, CURLOPT_SSLKEY, cfg->client_key_file);
    }
    if (strcmp(c->method, "GET") == 0) {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
        if (c->body != NULL) {
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->body);
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->body_len);
        }
        if (strcmp(c->method, "POST") != 0 || c->body == NULL)
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, c->method);
        if (c->body == NULL && strcmp(c->method, "POST") == 0) {
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
        }
    }
    buf_release(&c->resp);
    buf_init(&c->resp, c->streaming ? ERROR_BODY_MAX : c->max_body);
    c->code = 0;
    c->retry_after_s = -1;
    c->header_http_version = 0;
    c->too_big = 0;
    c->errbuf[0] = '\0';
    return 0;
}

static void finish(struct kube_call *c, int rc, const struct telo_err *err, double secs)
{
    struct kube_response resp = {
        .rc = rc,
        .err = err,
        .code = c->code,
        .body = &c->resp,
        .retry_after_s = c->retry_after_s,
        .http_version = c->header_http_version,
        .duration_s = secs,
        .attempts = c->attempts,
    };
    c->state = CALL_DEAD;
    c->on_done(c, &resp, c->ud);
    call_free(c);
}

static void retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct kube_call *c = w->data;
    queue_pending(c);
}

/* A transfer finished: retry the call or answer it. */
static void call_done(CURL *easy, CURLcode cc, void *ud)
{
    (void)easy;
    struct kube_call *c = ud;
    struct kube_transport *t = c->t;
    long version = 0;
    curl_off_t total_us = 0;
    curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &c->code);
    curl_easy_getinfo(c->easy, CURLINFO_HTTP_VERSION, &version);
    curl_easy_getinfo(c->easy, CURLINFO_TOTAL_TIME_T, &total_us);
    if (version == CURL_HTTP_VERSION_2_0)
        c->header_http_version = 2;
    else if (version == CURL_HTTP_VERSION_1_1 || version == CURL_HTTP_VERSION_1_0)
        c->header_http_version = 1;
    double secs = (double)total_us / 1e6;
    enum kube_failure failure = classify(cc);
    if (c->too_big || c->receiver_aborted)
        failure = KUBE_FAIL_OTHER;
    if (c->code == 0 && failure == KUBE_FAIL_NONE)
        failure = KUBE_FAIL_OTHER;
    metrics_record(t, c->verb, failure == KUBE_FAIL_NONE ? c->code : 0, secs);

    char why[CURL_ERROR_SIZE + 64];
    snprintf(why, sizeof(why), "%s", c->errbuf[0] != '\0' ? c->errbuf : curl_easy_strerror(cc));
    call_release_easy(c);

    if (failure == KUBE_FAIL_NONE && c->code == 401 && !c->auth_retried && !c->receiver_aborted) {
        /* The token may have rotated (bound service-account tokens, exec plugins): drop it and
         * try once more with fresh credentials, as client-go's transport does. */
        c->auth_retried = 1;
        kube_config_invalidate_credentials(t->cfg);
        t->metrics.retries++;
        c->attempts++;
        queue_pending(c);
        return;
    }
    long delay = -1;
    if (!c->no_retry && !c->receiver_aborted && !c->too_big)
        delay = kube_retry_delay_ms(c->method, c->code, failure, c->retry_after_s, c->attempts,
                                    t->opts.max_retries, t->opts.max_retry_delay_ms);
    /* A stream that already delivered data must not be replayed behind the receiver's back. */
    if (c->streaming && failure != KUBE_FAIL_NONE && failure != KUBE_FAIL_CONNECT)
        delay = -1;
    if (delay >= 0) {
        telo_log(TELO_LOG_DEBUG, "retrying request", "method=%s path=\"%s\" code=%ld delay_ms=%ld",
                 c->method, c->path, failure == KUBE_FAIL_NONE ? c->code : 0, delay);
        t->metrics.retries++;
        c->attempts++;
        c->state = CALL_WAITING;
        ev_timer_set(&c->retry_timer, (double)delay / 1000.0, 0.);
        ev_timer_start(t->loop, &c->retry_timer);
        return;
    }
    struct telo_err err;
    telo_err_clear(&err);
    int rc = 0;
    if (c->too_big)
        rc = telo_err_set(&err, TELO_ETOOBIG, "%s %s: response body larger than %zu bytes",
                          c->method, c->path, c->resp.max);
    else if (c->receiver_aborted)
        rc = telo_err_set(&err, TELO_EIO, "%s %s: aborted by the receiver", c->method, c->path);
    else if (failure == KUBE_FAIL_TIMEOUT)
        rc = telo_err_set(&err, TELO_ETIMEDOUT, "%s %s: %s", c->method, c->path, why);
    else if (failure != KUBE_FAIL_NONE)
        rc = telo_err_set(&err, TELO_EIO, "%s %s: %s", c->method, c->path, why);
    finish(c, rc, &err, secs);
}

static void reap_dead(struct kube_transport *t)
{
    while (t->dead != NULL) {
        struct kube_call *c = t->dead;
        t->dead = c->queue_next;
        call_free(c);
    }
}

/* Runs each time curl returns, before its completions are delivered. */
static void after_curl(void *ud)
{
    struct kube_transport *t = ud;
    if (t->http1_pending) {
        t->http1_pending = 0;
        curl_multi_setopt(curlev_multi(t->cv), CURLMOPT_MAX_HOST_CONNECTIONS,
                          t->opts.http1_max_connections);
        telo_log(TELO_LOG_INFO, "API server speaks HTTP/1.1; using parallel connections",
                 "max_connections=%ld", t->opts.http1_max_connections);
    }
    /* Calls cancelled from inside curl's callbacks; a completion curl queued for one of them goes
     * with its handle. */
    reap_dead(t);
}

/* Hands c to curl with the credentials as they are now. Returns 0, or a negative code with err
 * filled (then c is still the caller's to finish). */
static int call_launch(struct kube_call *c, struct telo_err *err)
{
    struct kube_transport *t = c->t;
    int rc = call_prepare(c, err);
    if (rc == 0 && curlev_add(t->cv, c->easy, c) != 0) {
        curl_easy_cleanup(c->easy);
        c->easy = NULL;
        rc = telo_err_set(err, TELO_ENOMEM, "%s %s: curl refused the request", c->method, c->path);
    }
    if (rc != 0)
        return rc;
    t->metrics.in_flight++;
    c->state = CALL_RUNNING;
    return 0;
}

/* The exec plugin the parked calls waited for ended: launch them, or fail them with its error. */
static void credentials_ready(int rc, const struct telo_err *cred_err, void *ud)
{
    struct kube_transport *t = ud;
    t->cred_wait = NULL;
    /* One at a time from t->auth_wait, so that a callback may cancel a call still parked. */
    while (t->auth_wait != NULL) {
        struct kube_call *c = t->auth_wait;
        t->auth_wait = c->queue_next;
        if (t->auth_wait == NULL)
            t->auth_wait_tail = NULL;
        c->queue_next = NULL;
        struct telo_err err;
        telo_err_clear(&err);
        int crc = rc == 0 ? call_launch(c, &err) : rc;
        if (crc != 0)
            finish(c, crc, rc == 0 ? &err : cred_err, 0);
    }
}

static void park(struct kube_call *c)
{
    struct kube_transport *t = c->t;
    c->state = CALL_AUTH;
    c->queue_next = NULL;
    if (t->auth_wait_tail != NULL)
        t->auth_wait_tail->queue_next = c;
    else
        t->auth_wait = c;
    t->auth_wait_tail = c;
}

/* Starts c once the credentials are ready. A cached credential (or a token file) is ready at once;
 * an exec plugin runs as a child watched by the loop while c waits in t->auth_wait, so the loop
 * (every watch, the lease renewal) never blocks on it. */
static void call_start(struct kube_call *c)
{
    struct kube_transport *t = c->t;
    struct telo_err err;
    telo_err_clear(&err);
    int rc = 1;
    if (t->cred_wait == NULL)
        rc = kube_config_fetch_credentials(t->cfg, t->loop, credentials_ready, t, &t->cred_wait,
                                           &err);
    if (rc == 1) {
        park(c);
        return;
    }
    if (rc == 0)
        rc = call_launch(c, &err);
    if (rc != 0)
        finish(c, rc, &err, 0);
}

static void kick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct kube_transport *t = w->data;
    /* Calls submitted by the callbacks run below wait for the next kick. The list stays in t so
     * that a callback may cancel a call still on it. */
    t->kicking = t->pending;
    t->pending = t->pending_tail = NULL;
    while (t->kicking != NULL) {
        struct kube_call *c = t->kicking;
        t->kicking = c->queue_next;
        c->queue_next = NULL;
        call_start(c);
    }
}

struct kube_call *kube_transport_submit(struct kube_transport *t, const struct kube_request *req,
                                        kube_done_fn *on_done, kube_data_fn *on_data, void *ud,
                                        struct telo_err *err)
{
    if (req->method == NULL || req->path == NULL || req->path[0] != '/' || on_done == NULL ||
        (req->streaming && on_data == NULL)) {
        telo_err_set(err, TELO_EINVAL,
                     "kube request needs a method, a path starting with '/', on_done, and "
                     "on_data when streaming");
        return NULL;
    }
    struct kube_call *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        telo_err_set(err, TELO_ENOMEM, "out of memory submitting %s %s", req->method, req->path);
        return NULL;
    }
    c->t = t;
    c->method = strdup(req->method);
    c->path = strdup(req->path);
    c->content_type = dup_or_null(req->content_type);
    if (req->body != NULL) {
        c->body = malloc(req->body_len + 1);
        if (c->body != NULL) {
            memcpy(c->body, req->body, req->body_len);
            c->body[req->body_len] = '\0';
        }
        c->body_len = req->body_len;
    }
    if (c->method == NULL || c->path == NULL ||
        (req->content_type != NULL && c->content_type == NULL) ||
        (req->body != NULL && c->body == NULL)) {
        free(c->method);
        free(c->path);
        free(c->content_type);
        free(c->body);
        free(c);
        telo_err_set(err, TELO_ENOMEM, "out of memory submitting %s %s", req->method, req->path);
        return NULL;
    }
    snprintf(c->verb, sizeof(c->verb), "%s", req->verb != NULL ? req->verb : req->method);
    c->timeout_ms = req->timeout_ms;
    c->max_body = req->max_body != 0 ? req->max_body : t->opts.max_body;
    c->streaming = req->streaming;
    c->no_retry = req->no_retry;
    c->on_done = on_done;
    c->on_data = on_data;
    c->ud = ud;
    c->attempts = 1;
    buf_init(&c->resp, c->max_body);
    ev_timer_init(&c->retry_timer, retry_cb, 0., 0.);
    c->retry_timer.data = c;
    c->next = t->calls;
    if (t->calls != NULL)
        t->calls->prev = c;
    t->calls = c;
    queue_pending(c);
    return c;
}

/* Takes c off the list at *head (with its *tail, or NULL when the list keeps none). */
static void list_remove(struct kube_call **head, struct kube_call **tail, struct kube_call *c)
{
    struct kube_call **pp = head;
    struct kube_call *prev = NULL;
    while (*pp != NULL && *pp != c) {
        prev = *pp;
        pp = &(*pp)->queue_next;
    }
    if (*pp == c) {
        *pp = c->queue_next;
        if (tail != NULL && *tail == c)
            *tail = prev;
    }
    c->queue_next = NULL;
}

void kube_call_set_release(struct kube_call *c, void (*release)(void *ud))
{
    if (c != NULL)
        c->release = release;
}

void kube_call_cancel(struct kube_call *c)
{
    if (c == NULL || c->cancelled || c->state == CALL_DEAD)
        return;
    struct kube_transport *t = c->t;
    c->cancelled = 1;
    if (c->state == CALL_PENDING) {
        list_remove(&t->pending, &t->pending_tail, c);
        list_remove(&t->kicking, NULL, c);
    } else if (c->state == CALL_AUTH) {
        list_remove(&t->auth_wait, &t->auth_wait_tail, c);
    }
    if (c->easy != NULL && curlev_in_callback(t->cv)) {
        /* Removing a handle from inside a curl callback is a recursive call: defer it. The
         * write callback refuses further data meanwhile. */
        c->queue_next = t->dead;
        t->dead = c;
        return;
    }
    call_free(c);
}

struct kube_transport *kube_transport_new(struct ev_loop *loop, struct kube_config *cfg,
                                          const struct kube_transport_opts *opts,
                                          struct telo_err *err)
{
    if (cfg == NULL || cfg->server == NULL ||
        (strncmp(cfg->server, "https://", 8) != 0 && strncmp(cfg->server, "http://", 7) != 0)) {
        telo_err_set(err, TELO_EINVAL, "%s: server '%s' must start with https:// or http://",
                     cfg != NULL && cfg->source != NULL ? cfg->source : "kube config",
                     cfg != NULL && cfg->server != NULL ? cfg->server : "");
        return NULL;
    }
    struct kube_transport *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        telo_err_set(err, TELO_ENOMEM, "out of memory creating the kube transport");
        return NULL;
    }
    t->loop = loop;
    t->cfg = cfg;
    if (opts != NULL)
        t->opts = *opts;
    struct kube_transport_opts *o = &t->opts;
    if (o->max_body == 0)
        o->max_body = DEFAULT_MAX_BODY;
    if (o->connect_timeout_ms == 0)
        o->connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
    if (o->request_timeout_ms == 0)
        o->request_timeout_ms = DEFAULT_REQUEST_TIMEOUT_MS;
    if (o->max_retries == 0)
        o->max_retries = DEFAULT_MAX_RETRIES;
    if (o->max_retry_delay_ms == 0)
        o->max_retry_delay_ms = DEFAULT_MAX_RETRY_DELAY_MS;
    if (o->http1_max_connections == 0)
        o->http1_max_connections = DEFAULT_HTTP1_MAX_CONNECTIONS;
    if (o->max_concurrent_streams == 0)
        o->max_concurrent_streams = DEFAULT_MAX_STREAMS;
    struct buf b;
    buf_init(&b, 4096);
    if (o->user_agent != NULL)
        buf_printf(&b, "User-Agent: %s", o->user_agent);
    else
        buf_printf(&b, "User-Agent: telo-operator/%s", TELO_VERSION);
    t->user_agent_header = buf_steal(&b);
    o->user_agent = NULL; /* borrowed; not kept */

    /* tls_server_name: put the name in the URL (curl uses it for SNI and verification) and route
     * the connection to the real host with CONNECT_TO. */
    CURLU *u = curl_url();
    char *host = NULL, *port = NULL, *scheme = NULL, *upath = NULL;
    if (u == NULL || curl_url_set(u, CURLUPART_URL, cfg->server, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PATH, &upath, 0) != CURLUE_OK) {
        curl_url_cleanup(u);
        curl_free(host);
        curl_free(port);
        curl_free(scheme);
        curl_free(upath);
        free(t->user_agent_header);
        free(t);
        telo_err_set(err, TELO_EINVAL, "%s: server '%s' is not a valid URL", cfg->source,
                     cfg->server);
        return NULL;
    }
    size_t plen = strlen(upath);
    while (plen > 0 && upath[plen - 1] == '/')
        plen--;
    if (cfg->tls_server_name != NULL && cfg->tls_server_name[0] != '\0') {
        buf_printf(&b, "%s://%s:%s%.*s", scheme, cfg->tls_server_name, port, (int)plen, upath);
        t->url_base = buf_steal(&b);
        buf_printf(&b, "%s:%s:%s:%s", cfg->tls_server_name, port, host, port);
        t->connect_to = buf_steal(&b);
        t->connect_to_list.data = t->connect_to;
    } else {
        buf_printf(&b, "%s://%s:%s%.*s", scheme, host, port, (int)plen, upath);
        t->url_base = buf_steal(&b);
    }
    curl_url_cleanup(u);
    curl_free(host);
    curl_free(port);
    curl_free(scheme);
    curl_free(upath);

    if (t->url_base == NULL || t->user_agent_header == NULL ||
        (cfg->tls_server_name != NULL && cfg->tls_server_name[0] != '\0' &&
         t->connect_to == NULL)) {
        telo_err_set(err, TELO_ENOMEM, "out of memory creating the kube transport");
    } else {
        t->cv = curlev_new(loop, call_done, after_curl, t, err);
    }
    if (t->cv == NULL) {
        free(t->url_base);
        free(t->connect_to);
        free(t->user_agent_header);
        free(t);
        return NULL;
    }
    CURLM *multi = curlev_multi(t->cv);
    curl_multi_setopt(multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, 1L);
    /* curl's default is 100 streams per connection; the API server allows more (its
     * --http2-max-streams-per-connection), and the smaller of the two applies. */
    curl_multi_setopt(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, o->max_concurrent_streams);
    ev_timer_init(&t->kick, kick_cb, 0., 0.);
    t->kick.data = t;
    return t;
}

void kube_transport_free(struct kube_transport *t)
{
    if (t == NULL)
        return;
    reap_dead(t);
    while (t->calls != NULL) {
        struct kube_call *c = t->calls;
        c->cancelled = 1; // NOLINT(clang-analyzer-unix.Malloc): call_free unlinks c (c->t == t)
        call_free(c);
    }
    t->pending = t->pending_tail = NULL;
    t->kicking = NULL;
    t->auth_wait = t->auth_wait_tail = NULL;
    kube_execcred_wait_cancel(t->cred_wait);
    ev_timer_stop(t->loop, &t->kick);
    curlev_free(t->cv);
    free(t->url_base);
    free(t->connect_to);
    free(t->user_agent_header);
    free(t);
}

const struct kube_metrics *kube_transport_metrics(const struct kube_transport *t)
{
    return &t->metrics;
}

struct ev_loop *kube_transport_loop(const struct kube_transport *t)
{
    return t->loop;
}

struct kube_config *kube_transport_config(const struct kube_transport *t)
{
    return t->cfg;
}
