/* A small HTTP client for arbitrary hosts (image registries and their token services): libcurl
 * multi-socket on a libev loop, one request at a time per call, no retries of its own. */
#include "build/http.h"

#include "util/curlev.h"

#include <curl/curl.h>
#include <ev.h>

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_TIMEOUT_MS 10000L
#define DEFAULT_MAX_BODY   ((size_t)1 << 20)
#define CONNECT_TIMEOUT_MS 5000L
#define HEADER_VALUE_MAX   4096

enum call_state { CALL_QUEUED, CALL_RUNNING, CALL_DONE };

struct build_http_call {
    struct build_http *h;
    struct build_http_call *prev, *next; /* h->calls */
    enum call_state state;
    int cancelled;
    CURL *easy;
    struct curl_slist *headers;
    char errbuf[CURL_ERROR_SIZE];
    struct buf body;
    int too_big;
    char *www_authenticate;
    char *content_digest;
    build_http_done_fn *done;
    void *ud;
};

struct build_http {
    struct ev_loop *loop;
    struct curlev *cv;
    ev_timer kick;
    struct build_http_call *calls;
    size_t ncalls;
};

/* ---- per call ---- */

static void keep_header(char **slot, const char *value, size_t len)
{
    while (len > 0 && (value[0] == ' ' || value[0] == '\t')) {
        value++;
        len--;
    }
    while (len > 0 && (value[len - 1] == '\r' || value[len - 1] == '\n' || value[len - 1] == ' '))
        len--;
    if (len > HEADER_VALUE_MAX)
        len = HEADER_VALUE_MAX;
    free(*slot);
    *slot = strndup(value, len);
}

static size_t on_header(char *data, size_t size, size_t n, void *userp)
{
    struct build_http_call *c = userp;
    size_t len = size * n;
    static const char wa[] = "www-authenticate:", dcd[] = "docker-content-digest:";
    if (len >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        /* A new response (after a redirect or 100 Continue): forget the previous headers. */
        free(c->www_authenticate);
        free(c->content_digest);
        c->www_authenticate = c->content_digest = NULL;
    } else if (len > sizeof(wa) - 1 && strncasecmp(data, wa, sizeof(wa) - 1) == 0) {
        keep_header(&c->www_authenticate, data + sizeof(wa) - 1, len - (sizeof(wa) - 1));
    } else if (len > sizeof(dcd) - 1 && strncasecmp(data, dcd, sizeof(dcd) - 1) == 0) {
        keep_header(&c->content_digest, data + sizeof(dcd) - 1, len - (sizeof(dcd) - 1));
    }
    return len;
}

static size_t on_write(char *data, size_t size, size_t n, void *userp)
{
    struct build_http_call *c = userp;
    size_t len = size * n;
    if (c->cancelled)
        return 0;
    if (buf_append(&c->body, data, len) != 0) {
        c->too_big = 1;
        return 0;
    }
    return len;
}

static void call_free(struct build_http_call *c)
{
    struct build_http *h = c->h;
    if (c->easy != NULL) {
        curlev_remove(h->cv, c->easy);
        curl_easy_cleanup(c->easy);
    }
    curl_slist_free_all(c->headers);
    if (h->calls == c)
        h->calls = c->next;
    else
        c->prev->next = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    h->ncalls--;
    buf_release(&c->body);
    free(c->www_authenticate);
    free(c->content_digest);
    free(c);
}

/* A transfer finished: answer its call, then free it. */
static void on_done(CURL *easy, CURLcode cc, void *ud)
{
    struct build_http_call *c = ud;
    c->state = CALL_DONE;
    if (cc != CURLE_OK && c->errbuf[0] == '\0')
        snprintf(c->errbuf, sizeof(c->errbuf), "%s", curl_easy_strerror(cc));
    if (cc == CURLE_OK)
        c->errbuf[0] = '\0';
    long code = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
    char *url = NULL;
    curl_easy_getinfo(easy, CURLINFO_EFFECTIVE_URL, &url);
    struct telo_err err;
    telo_err_clear(&err);
    int rc = 0;
    if (c->too_big)
        rc = telo_err_set(&err, TELO_ETOOBIG, "%s: response larger than %zu bytes", url ? url : "",
                          c->body.max);
    else if (cc == CURLE_OPERATION_TIMEDOUT)
        rc = telo_err_set(&err, TELO_ETIMEDOUT, "%s: %s", url ? url : "", c->errbuf);
    else if (c->errbuf[0] != '\0')
        rc = telo_err_set(&err, TELO_EIO, "%s: %s", url ? url : "", c->errbuf);
    struct build_http_response resp = {
        .rc = rc,
        .err = &err,
        .code = rc == 0 ? code : 0,
        .www_authenticate = c->www_authenticate,
        .content_digest = c->content_digest,
        .body = &c->body,
    };
    c->done(c, &resp, c->ud);
    call_free(c);
}

static void kick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct build_http *h = w->data;
    for (struct build_http_call *c = h->calls; c != NULL; c = c->next) {
        if (c->state != CALL_QUEUED)
            continue;
        c->state = CALL_RUNNING;
        if (curlev_add(h->cv, c->easy, c) != 0) {
            /* Reported like a transport failure, through the normal path. */
            snprintf(c->errbuf, sizeof(c->errbuf), "curl refused the request");
            c->state = CALL_DONE;
        }
    }
    /* Calls curl refused never reach on_done: answer them here. */
    for (struct build_http_call *c = h->calls, *next; c != NULL; c = next) {
        next = c->next; // NOLINT(clang-analyzer-unix.Malloc): c is unlinked before it is freed
        if (c->state == CALL_DONE && !c->cancelled && c->errbuf[0] != '\0') {
            struct telo_err err;
            telo_err_set(&err, TELO_ENOMEM, "%s", c->errbuf);
            struct build_http_response resp = {.rc = -TELO_ENOMEM, .err = &err, .body = &c->body};
            curl_easy_cleanup(c->easy);
            c->easy = NULL;
            c->done(c, &resp, c->ud);
            call_free(c);
            next = h->calls; /* the callback may have changed the list */
        }
    }
}

struct build_http_call *build_http_submit(struct build_http *h,
                                          const struct build_http_request *req,
                                          build_http_done_fn *done, void *ud, struct telo_err *err)
{
    if (req == NULL || req->method == NULL || req->url == NULL || done == NULL ||
        (strncmp(req->url, "http://", 7) != 0 && strncmp(req->url, "https://", 8) != 0)) {
        telo_err_set(err, TELO_EINVAL,
                     "http request '%s': needs a method, an http:// or https:// "
                     "URL and a callback",
                     req && req->url ? req->url : "");
        return NULL;
    }
    struct build_http_call *c = calloc(1, sizeof(*c));
    CURL *e = curl_easy_init();
    if (c == NULL || e == NULL) {
        free(c);
        curl_easy_cleanup(e);
        telo_err_set(err, TELO_ENOMEM, "out of memory for %s %s", req->method, req->url);
        return NULL;
    }
    c->h = h;
    c->easy = e;
    c->done = done;
    c->ud = ud;
    buf_init(&c->body, req->max_body ? req->max_body : DEFAULT_MAX_BODY);
    int ok = 1;
    for (const char *const *hd = req->headers; ok && hd != NULL && *hd != NULL; hd++) {
        struct curl_slist *n = curl_slist_append(c->headers, *hd);
        ok = n != NULL;
        if (ok)
            c->headers = n;
    }
    struct curl_slist *ua =
        ok ? curl_slist_append(c->headers, "User-Agent: telo-operator/" TELO_VERSION) : NULL;
    if (!ok || ua == NULL) {
        curl_slist_free_all(c->headers);
        curl_easy_cleanup(e);
        free(c);
        telo_err_set(err, TELO_ENOMEM, "out of memory for %s %s", req->method, req->url);
        return NULL;
    }
    c->headers = ua;
    curl_easy_setopt(e, CURLOPT_URL, req->url);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                     req->timeout_ms > 0 ? req->timeout_ms : DEFAULT_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    /* Registries redirect blob reads to storage; manifests and tokens answer directly, and an
     * Authorization header must not follow a redirect to another host. */
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    if (strcmp(req->method, "HEAD") == 0)
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    else if (strcmp(req->method, "GET") != 0)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req->method);
    if (req->insecure_tls) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    c->state = CALL_QUEUED;
    c->next = h->calls;
    if (h->calls != NULL)
        h->calls->prev = c;
    h->calls = c;
    h->ncalls++;
    if (!ev_is_active(&h->kick)) {
        ev_timer_set(&h->kick, 0., 0.);
        ev_timer_start(h->loop, &h->kick);
    }
    return c;
}

void build_http_cancel(struct build_http_call *c)
{
    if (c == NULL || c->cancelled)
        return;
    if (c->state == CALL_DONE) {
        /* Its completion is being delivered: on_done or kick_cb frees it. */
        c->cancelled = 1;
        return;
    }
    c->cancelled = 1;
    call_free(c);
}

size_t build_http_pending(const struct build_http *h)
{
    return h->ncalls;
}

struct build_http *build_http_new(struct ev_loop *loop, struct telo_err *err)
{
    struct build_http *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        telo_err_set(err, TELO_ENOMEM, "out of memory creating the registry HTTP client");
        return NULL;
    }
    h->cv = curlev_new(loop, on_done, NULL, NULL, err);
    if (h->cv == NULL) {
        free(h);
        return NULL;
    }
    h->loop = loop;
    /* Bounded: one registry should not get more than a few connections from us. */
    curl_multi_setopt(curlev_multi(h->cv), CURLMOPT_MAX_HOST_CONNECTIONS, 4L);
    ev_timer_init(&h->kick, kick_cb, 0., 0.);
    h->kick.data = h;
    return h;
}

void build_http_free(struct build_http *h)
{
    if (h == NULL)
        return;
    /* call_free calls back no one, so the list changes only by c. */
    for (struct build_http_call *c = h->calls, *next; c != NULL; c = next) {
        next = c->next;
        call_free(c);
    }
    ev_timer_stop(h->loop, &h->kick);
    curlev_free(h->cv);
    free(h);
}
